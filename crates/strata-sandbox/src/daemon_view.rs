//! The daemon's view in a container that strata did not build itself (the
//! docker backend): the same two-layer /dev as a native Sandbox, so that
//! the exec helper hides the same things from commands in both.
//!
//! A native Sandbox's init stacks a daemon-only /dev layer (with
//! `/dev/fuse` and the list of command-only masks) on the commands' /dev
//! (`mounts::build_view` step 4e), and the exec helper drops that layer in
//! the commands' mount namespace (`exec::hide_dev_fuse`, `commands_ns`). A Docker
//! container has one /dev, made by the Engine, with `/dev/fuse` in it and
//! no list: without this step the helper finds nothing to drop, and a
//! command would see `/dev/fuse` and the Sandbox's private directory.
//!
//! `__strata-daemon-view SETTINGS -- DAEMON ARGV...` is the container's
//! entrypoint: as root with CAP_SYS_ADMIN, before the daemon exists, it
//!
//! 1. makes the container's mounts shared (`MS_REC|MS_SHARED` on `/`, in
//!    the container's own mount namespace), so a command's namespace — a
//!    slave copy of the daemon's — still receives the Workspace mounts the
//!    daemon makes after the command started (mount_namespaces(7));
//! 2. covers the Engine's /dev with the commands' /dev: a read-only tmpfs
//!    with [`crate::mounts::DEVICES`] and the Engine's devpts and /dev/shm
//!    bound in, and no `/dev/fuse`;
//! 3. stacks the daemon's layer on top: the same nodes, `/dev/fuse` and
//!    the command-only masks (e.g. the state directory `/run/strata`);
//! 4. `execve`s the daemon.
//!
//! The Engine's nodes are reached through O_PATH descriptors opened before
//! they are covered (`/proc/self/fd/N`, as in `mounts::build_view` 2a).

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use rustix::mount::MountPropagationFlags;
use serde::{Deserialize, Serialize};

use crate::dev::{populate_dev, DevSource};
use crate::mounts::{fd_path, open_path, step, MountError};

/// `argv[1]` of the daemon-view step.
pub const DAEMON_VIEW_ARG: &str = "__strata-daemon-view";

/// Exit code when the view cannot be built (the message is on stderr,
/// which the Engine keeps as the container's log).
pub const DAEMON_VIEW_FAILURE_EXIT: i32 = 125;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ViewWire {
    /// Hidden from commands only (`SandboxConfig::command_masked_paths`).
    command_masked_paths: Vec<PathBuf>,
}

/// The entrypoint that builds the daemon's view and then runs `daemon`
/// (the container's command is appended after it by the Engine):
/// `[exe, __strata-daemon-view, SETTINGS, --, exe]`. `exe` must call
/// [`crate::maybe_run_internal`].
pub fn daemon_view_entrypoint(exe: &Path, command_masked_paths: &[PathBuf]) -> Vec<OsString> {
    let wire = ViewWire {
        command_masked_paths: command_masked_paths.to_vec(),
    };
    // A Vec of paths always serializes.
    let json = serde_json::to_string(&wire).unwrap_or_default();
    let mut argv = vec![OsString::from(exe)];
    argv.extend(crate::internal::encode_argv(
        DAEMON_VIEW_ARG,
        &json,
        &[],
        &[exe.into()],
    ));
    argv
}

/// `__strata-daemon-view`: build the view, then `execve` the daemon.
/// Returns only on failure, with the exit code.
pub(crate) fn daemon_view_main(args: &[OsString]) -> i32 {
    let fail = |message: String| {
        eprintln!("strata daemon view: {message}");
        DAEMON_VIEW_FAILURE_EXIT
    };
    let (json, _env, argv) = match crate::internal::decode_argv(args) {
        Ok(d) => d,
        Err(e) => return fail(format!("bad {DAEMON_VIEW_ARG} arguments: {e}")),
    };
    let wire: ViewWire = match serde_json::from_str(&json) {
        Ok(w) => w,
        Err(e) => return fail(format!("bad {DAEMON_VIEW_ARG} settings: {e}")),
    };
    let Some((program, rest)) = argv.split_first() else {
        return fail("no daemon to run after --".into());
    };
    if let Err(e) = build(&wire.command_masked_paths) {
        return fail(e.to_string());
    }
    // The container's environment (the Engine's PATH and HOSTNAME) goes on.
    let e = std::process::Command::new(program).args(rest).exec();
    fail(format!("execve({}): {e}", Path::new(program).display()))
}

fn build(command_masks: &[PathBuf]) -> Result<(), MountError> {
    // 1. Shared propagation inside the container (see the module docs).
    step(
        "make / rshared inside the container",
        "/",
        rustix::mount::mount_change(
            "/",
            MountPropagationFlags::REC | MountPropagationFlags::SHARED,
        ),
    )?;
    let dev = Path::new("/dev");
    // 2. The commands' /dev over the Engine's, from the Engine's nodes.
    let engine_dev = open_path(dev)?;
    let engine_fuse = open_path(Path::new(crate::exec::DEV_FUSE))?;
    populate_dev(dev, &fd_path(&engine_dev), DevSource::Copy, &[])?;
    // 3. The daemon's layer on top, from the commands' /dev just built.
    let commands_dev = open_path(dev)?;
    let fuse = fd_path(&engine_fuse);
    populate_dev(
        dev,
        &fd_path(&commands_dev),
        DevSource::Lower { fuse: &fuse },
        command_masks,
    )
}
