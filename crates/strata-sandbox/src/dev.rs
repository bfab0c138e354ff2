//! The Sandbox's /dev (step 4d and 4e of crate::mounts::build_view): a
//! small tmpfs with only the devices in [`DEVICES`] bound from the host, a
//! private devpts instance, /dev/shm and the usual symlinks, read-only
//! once built; and with `dev_fuse` the daemon's layer on top of it.

use std::fs;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::mounts::{
    bind, flags, mkdir_p, mount, remount_ro, step, touch, MountError, COMMAND_MASKS_FILE,
};

/// Device nodes a command gets, bound from the host's /dev. Deliberately
/// no /dev/fuse: a command must not be able to mount a FUSE filesystem
/// (and nothing else: no block devices, no /dev/kvm, no /dev/mem).
pub const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// Where a /dev tmpfs gets its nodes from.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum DevSource<'a> {
    /// The host's /dev, a new devpts instance and a new /dev/shm.
    Host,
    /// Another /dev (binds of its nodes, its devpts and /dev/shm), without
    /// /dev/fuse: the commands' /dev in a container (`daemon_view`).
    Copy,
    /// As `Copy`, plus /dev/fuse bound from `fuse` and the list of
    /// command-only masks: the daemon's layer.
    Lower { fuse: &'a Path },
}

pub(crate) fn populate_dev(
    dev: &Path,
    from: &Path,
    source: DevSource<'_>,
    command_masks: &[PathBuf],
) -> Result<(), MountError> {
    mount(
        "tmpfs",
        dev,
        "tmpfs",
        libc::MS_NOSUID | libc::MS_NOEXEC,
        "mode=0755,size=65536",
        "tmpfs /dev",
    )?;
    for name in DEVICES {
        let target = dev.join(name);
        touch(&target)?;
        bind(&from.join(name), &target, false, "bind device node")?;
        // A bind keeps the source mount's flags (devtmpfs: suid, exec);
        // a device node needs neither.
        step(
            "remount device node nosuid,noexec",
            &target,
            rustix::mount::mount_remount(
                &target,
                flags(libc::MS_BIND | libc::MS_NOSUID | libc::MS_NOEXEC),
                "",
            ),
        )?;
    }
    let pts = dev.join("pts");
    mkdir_p(&pts, 0o755)?;
    let shm = dev.join("shm");
    mkdir_p(&shm, 0o1777)?;
    match source {
        DevSource::Host => {
            // newinstance: a private devpts, so commands see only their own
            // ptys (devpts(5)); ptmxmode=0666 lets a nonroot command open ptmx.
            mount(
                "devpts",
                &pts,
                "devpts",
                libc::MS_NOSUID | libc::MS_NOEXEC,
                "newinstance,ptmxmode=0666,mode=0620",
                "devpts /dev/pts",
            )?;
            mount(
                "tmpfs",
                &shm,
                "tmpfs",
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                "mode=1777",
                "tmpfs /dev/shm",
            )?;
        }
        DevSource::Copy | DevSource::Lower { .. } => {
            bind(&from.join("pts"), &pts, false, "bind the Sandbox's devpts")?;
            bind(
                &from.join("shm"),
                &shm,
                false,
                "bind the Sandbox's /dev/shm",
            )?;
        }
    }
    if let DevSource::Lower { fuse: fuse_source } = source {
        let fuse = dev.join("fuse");
        touch(&fuse)?;
        bind(fuse_source, &fuse, false, "bind /dev/fuse for the daemon")?;
        // Root-only (0600) and gone with this layer in a command's view.
        let list = dev.join(
            Path::new(COMMAND_MASKS_FILE)
                .strip_prefix("/dev")
                .unwrap_or(Path::new("")),
        );
        let json = serde_json::to_vec(command_masks).unwrap_or_default();
        step(
            "write the command-only masks",
            &list,
            fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&list)
                .and_then(|mut f| std::io::Write::write_all(&mut f, &json)),
        )?;
        // Where the first exec pins the commands' mount namespace
        // (crate::commands_ns); root-only like the list.
        let ns_dir = dev.join(
            Path::new(crate::commands_ns::NS_DIR)
                .strip_prefix("/dev")
                .unwrap_or(Path::new("")),
        );
        mkdir_p(&ns_dir, 0o700)?;
    }
    for (link, to) in [
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        let l = dev.join(link);
        step("symlink in /dev", &l, std::os::unix::fs::symlink(to, &l))?;
    }
    step(
        "chmod /dev",
        dev,
        fs::set_permissions(dev, fs::Permissions::from_mode(0o755)),
    )?;
    remount_ro(
        dev,
        libc::MS_NOSUID | libc::MS_NOEXEC,
        "remount /dev read-only",
    )
}
