//! Dropping privileges and `execve` of one command: the privilege split.
//!
//! [`drop_privileges_and_exec`] is the whole security argument for a
//! command, in one linear function whose order matters (in the spirit of
//! youki's `container_init_process` and Firecracker's jailer `Env::run`).
//! It must run in a **single-threaded** process: a child forked from the
//! single-threaded sandbox init, or the `__strata-exec` helper re-exec'd by
//! a multi-threaded daemon (see [`crate::internal`]). Never from `pre_exec`
//! of a multi-threaded process: the raw per-thread `setresuid` used here
//! would leave other threads privileged, and allocation after such a fork
//! can deadlock.

use std::ffi::{CString, OsString};
use std::io;
use std::path::{Path, PathBuf};

use rustix::thread::{CapabilitySet, CapabilitySets};
use serde::{Deserialize, Serialize};

use crate::rlimit::RlimitError;
use crate::seccomp::{CompiledPolicy, InstallError};
pub use crate::spec::{
    is_clean_absolute, ExecSpec, Identity, PreparedExec, Session, SpecError, DEFAULT_GID,
    DEFAULT_PATH, DEFAULT_UID, MAX_ARGV_ENV_BYTES,
};

/// A step of [`drop_privileges_and_exec`] failed. One variant per syscall,
/// so a report names exactly what broke.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("exec: resetting the signal mask: {source}")]
    SignalMask { source: io::Error },
    #[error("exec: marking inherited file descriptors close-on-exec (close_range): {source}")]
    CloseFds { source: io::Error },
    #[error("exec: {what}: {source}")]
    Session {
        what: &'static str,
        source: io::Error,
    },
    #[error("exec: hiding /dev/fuse from the command: {step}: {source}")]
    HideDevFuse {
        step: &'static str,
        source: io::Error,
    },
    #[error("exec: hiding {path} from the command: {message}")]
    CommandMask {
        path: PathBuf,
        message: String,
        errno: Option<i32>,
    },
    #[error("exec: the commands' mount namespace: {message}")]
    CommandsNamespace { message: String, errno: Option<i32> },
    #[error("exec: {0}")]
    Rlimit(#[from] RlimitError),
    #[error("exec: writing {value} to /proc/self/oom_score_adj: {source}")]
    OomScoreAdj { value: i32, source: io::Error },
    #[error("exec: keeping the commands' cgroup descriptor {fd} open for the daemon: {source}")]
    KeepFd { fd: i32, source: io::Error },
    #[error("exec: PR_SET_SECUREBITS: {source}")]
    SecureBits { source: io::Error },
    #[error("exec: clearing the ambient capability set: {source}")]
    ClearAmbient { source: io::Error },
    #[error("exec: dropping capability {cap} from the bounding set: {source}")]
    DropBoundingCap { cap: u32, source: io::Error },
    #[error("exec: setgroups([]): {source}")]
    SetGroups { source: io::Error },
    #[error("exec: setresgid({gid}): {source}")]
    SetGid { gid: u32, source: io::Error },
    #[error("exec: setresuid({uid}): {source}")]
    SetUid { uid: u32, source: io::Error },
    #[error("exec: clearing effective/permitted/inheritable capabilities (capset): {source}")]
    ClearCaps { source: io::Error },
    #[error("exec: privilege drop did not hold: {what}")]
    StillPrivileged { what: String },
    #[error("exec: PR_SET_NO_NEW_PRIVS: {source}")]
    NoNewPrivs { source: io::Error },
    #[error("exec: chdir({path:?}) as the command's user: {source}")]
    Chdir { path: PathBuf, source: io::Error },
    #[error("exec: {0}")]
    Seccomp(#[from] InstallError),
    #[error("exec: {program:?} not found (searched {searched})")]
    NotFound { program: OsString, searched: String },
    #[error("exec: execve({path}): {source}")]
    Execve { path: String, source: io::Error },
}

impl ExecError {
    /// The OS error behind the failure, if any (ENOENT for a missing program).
    pub fn errno(&self) -> Option<i32> {
        use ExecError::*;
        match self {
            SignalMask { source }
            | CloseFds { source }
            | HideDevFuse { source, .. }
            | Session { source, .. }
            | SecureBits { source }
            | ClearAmbient { source }
            | DropBoundingCap { source, .. }
            | SetGroups { source }
            | SetGid { source, .. }
            | SetUid { source, .. }
            | ClearCaps { source }
            | NoNewPrivs { source }
            | Chdir { source, .. }
            | OomScoreAdj { source, .. }
            | KeepFd { source, .. }
            | Execve { source, .. } => source.raw_os_error(),
            Rlimit(RlimitError::Set { source, .. }) => source.raw_os_error(),
            Seccomp(InstallError::Install { source, .. }) => source.raw_os_error(),
            NotFound { .. } => Some(libc::ENOENT),
            CommandMask { errno, .. } | CommandsNamespace { errno, .. } => *errno,
            _ => None,
        }
    }
}

/// `oom_score_adj` of every command (proc(5)): the kernel's OOM killer,
/// the Sandbox's memory cgroup's included, picks a command before anything
/// else. Set by root, so it is also the command's floor
/// (`oom_score_adj_min`): the command cannot lower it again.
pub const COMMAND_OOM_SCORE_ADJ: i32 = 500;
/// `oom_score_adj` of the Sandbox's monitor, PID 1 and daemon: never the
/// OOM killer's choice, however many small processes the commands start.
/// Inherited over fork and execve, hence reset for every command.
pub const DAEMON_OOM_SCORE_ADJ: i32 = -1000;

/// Whether this process may lower an `oom_score_adj` (proc(5): that needs
/// CAP_SYS_RESOURCE, bit 24 of CapEff). Root on some hosts lacks it (a
/// Firecracker guest's root here does): then the Sandbox's processes keep
/// the score they inherit, and the docker backend must not ask the Engine
/// for -1000 either, or runc fails every container start ("can't get
/// final child's PID from pipe").
pub fn can_lower_oom_score() -> bool {
    const CAP_SYS_RESOURCE: u32 = 24;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_RESOURCE) != 0)
}

/// Write `value` to /proc/self/oom_score_adj. Lowering it needs
/// CAP_SYS_RESOURCE (proc(5)): call as root, before any drop.
pub fn set_oom_score_adj(value: i32) -> io::Result<()> {
    std::fs::write("/proc/self/oom_score_adj", value.to_string())
}

/// The securebits of every command: NOROOT, NOROOT_LOCKED,
/// NO_SETUID_FIXUP_LOCKED, KEEP_CAPS_LOCKED, NO_CAP_AMBIENT_RAISE and
/// NO_CAP_AMBIENT_RAISE_LOCKED (bits 6 and 7, which rustix does not name).
pub const SECURE_BITS_VALUE: u32 = (1 << 0) | (1 << 1) | (1 << 3) | (1 << 5) | (1 << 6) | (1 << 7);
pub(crate) const SECURE_BITS: rustix::thread::CapabilitiesSecureBits =
    rustix::thread::CapabilitiesSecureBits::from_bits_retain(SECURE_BITS_VALUE);

fn last_os_error() -> io::Error {
    io::Error::last_os_error()
}

/// Highest capability number this kernel knows (`/proc/sys/kernel/cap_last_cap`),
/// or 63 if unreadable (the drop loop then stops at the first EINVAL).
fn cap_last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63)
}

/// Drop every privilege, install the seccomp filter and `execve` the
/// command. Returns only on failure (the process should then report the
/// error and `_exit`). The order below is the security argument; each step
/// says why it sits where it does.
pub fn drop_privileges_and_exec(p: &PreparedExec, filter: &CompiledPolicy) -> ExecError {
    match drop_privileges_and_exec_inner(p, filter) {
        Ok(never) => match never {},
        Err(e) => e,
    }
}

fn drop_privileges_and_exec_inner(
    p: &PreparedExec,
    filter: &CompiledPolicy,
) -> Result<std::convert::Infallible, ExecError> {
    let (uid, gid) = (p.identity.uid(), p.identity.gid());

    // 1.-2. Signals and inherited file descriptors, see reset_inherited_state.
    reset_inherited_state()?;

    // 2a. Session / process group, see Session.
    apply_session(p.session)?;

    // 2b. /dev/fuse: the daemon's view may have it (SandboxConfig::dev_fuse)
    //     to serve Workspaces; a command must not (no FUSE mounts of its
    //     own). Needs CAP_SYS_ADMIN, so it happens while we are still root.
    hide_dev_fuse()?;

    // 3. rlimits, while still root: lowering is always allowed, raising a
    //    hard limit needs CAP_SYS_RESOURCE (getrlimit(2)).
    for r in &p.rlimits {
        r.apply()?;
    }

    // 3a. oom_score_adj, while still root: the helper and PID 1 inherit
    //     the daemon's -1000, which must not reach a command; written by a
    //     privileged process it is also the floor the command cannot go
    //     below (proc(5), oom_score_adj_min).
    set_oom_score_adj(COMMAND_OOM_SCORE_ADJ).map_err(|source| ExecError::OomScoreAdj {
        value: COMMAND_OOM_SCORE_ADJ,
        source,
    })?;

    // 4. Securebits (capabilities(7), "The securebits flags"), while we
    //    still have CAP_SETPCAP, each locked so that neither the command
    //    nor anything it runs can change them back:
    //    * KEEP_CAPS off: the uid switch in step 8 clears the permitted and
    //      effective sets ("Effect of user ID changes on capabilities");
    //    * NO_SETUID_FIXUP off: that clearing cannot be disabled later;
    //    * NOROOT: even a uid-0 execve would not grant capabilities;
    //    * NO_CAP_AMBIENT_RAISE: the ambient set stays empty.
    rustix::thread::set_capabilities_secure_bits(SECURE_BITS)
        .map_err(|e| ExecError::SecureBits { source: e.into() })?;

    // 5. Ambient set: cleared explicitly (it is also cleared by the uid
    //    switch, but being explicit costs nothing).
    rustix::thread::clear_ambient_capability_set()
        .map_err(|e| ExecError::ClearAmbient { source: e.into() })?;

    // 6. Bounding set, BEFORE giving up uid 0: PR_CAPBSET_DROP needs
    //    CAP_SETPCAP (prctl(2)), which the uid switch takes away. After this
    //    no execve (e.g. of a file with capabilities) can add anything back.
    //    By number, not by a fixed enum, so capabilities newer than this
    //    code are dropped too.
    drop_bounding_set()?;

    // 7. Groups, then gid, while we still have CAP_SETGID: supplementary
    //    groups first (root's groups would otherwise survive), then real,
    //    effective and saved gid all to `gid` (setresgid, so no saved-id
    //    way back). rustix issues the raw per-thread syscall; this process
    //    is single-threaded, so the thread is the process.
    rustix::thread::set_thread_groups(&[])
        .map_err(|e| ExecError::SetGroups { source: e.into() })?;
    let g = rustix::process::Gid::from_raw(gid);
    rustix::thread::set_thread_res_gid(g, g, g).map_err(|e| ExecError::SetGid {
        gid,
        source: e.into(),
    })?;

    // 8. uid last among the ids (it takes CAP_SETUID/CAP_SETGID away).
    //    With all three uids nonzero and KEEP_CAPS off, the kernel clears
    //    the permitted, effective and ambient sets.
    let u = rustix::process::Uid::from_raw(uid);
    rustix::thread::set_thread_res_uid(u, u, u).map_err(|e| ExecError::SetUid {
        uid,
        source: e.into(),
    })?;

    // 9. Inheritable is NOT cleared by the uid switch; clear every set
    //    explicitly (lowering needs no privilege, capset(2)).
    let empty = CapabilitySets {
        effective: CapabilitySet::empty(),
        permitted: CapabilitySet::empty(),
        inheritable: CapabilitySet::empty(),
    };
    rustix::thread::set_capabilities(None, empty)
        .map_err(|e| ExecError::ClearCaps { source: e.into() })?;

    // 10. Verify instead of trusting: ids, all capability sets, and that
    //     uid 0 cannot be regained.
    verify_dropped(uid, gid)?;

    // 11. no_new_privs: execve can no longer grant privileges (setuid bits,
    //     file capabilities are ignored), and it is what lets an
    //     unprivileged process install a seccomp filter (seccomp(2)).
    rustix::thread::set_no_new_privs(true)
        .map_err(|e| ExecError::NoNewPrivs { source: e.into() })?;

    // 12. cwd as the command's user: a directory it may not search is
    //     refused here, as it would be for the command itself.
    rustix::process::chdir(p.cwd.as_c_str()).map_err(|e| ExecError::Chdir {
        path: p.cwd_path.clone(),
        source: e.into(),
    })?;

    // 13. seccomp last: after it, the only calls left are execve and, on
    //     failure, write(2) and exit_group(2), none of which it denies.
    filter.install()?;

    // 14. execve (PATH search like execvp(3), see execve_search).
    Err(execve_search(p))
}

/// Empty the capability bounding set (step 6 of the drop; also
/// crate::confine). Needs CAP_SETPCAP (prctl(2), PR_CAPBSET_DROP).
pub(crate) fn drop_bounding_set() -> Result<(), ExecError> {
    for cap in 0..=cap_last_cap() {
        // SAFETY: PR_CAPBSET_DROP takes an integer argument only.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if rc != 0 {
            let err = last_os_error();
            // EINVAL: the kernel has no capability with this number (only
            // possible when cap_last_cap was unreadable): we are done.
            if err.raw_os_error() == Some(libc::EINVAL) && cap > 0 {
                break;
            }
            return Err(ExecError::DropBoundingCap { cap, source: err });
        }
    }
    Ok(())
}

/// Steps 1 and 2 of the drop, shared with [`exec_privileged`].
fn reset_inherited_state() -> Result<(), ExecError> {
    // 1. Signals. The init blocks signals to wait for them synchronously and
    //    the Rust runtime ignores SIGPIPE; both a blocked mask and ignored
    //    dispositions survive execve (signal(7), execve(2)), so put the
    //    command back to the defaults a shell would give it.
    for sig in 1..libc::SIGRTMIN() {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: SIG_DFL is a valid disposition; no handler code runs.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
    // SAFETY: `empty` is a valid, initialised sigset_t for sigprocmask.
    let rc = unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut())
    };
    if rc != 0 {
        return Err(ExecError::SignalMask {
            source: last_os_error(),
        });
    }

    // 2. File descriptors. Anything ≥3 the init or daemon holds (sockets,
    //    the Store, pipes) must not reach the command: mark them all
    //    close-on-exec (close_range(2) with CLOSE_RANGE_CLOEXEC, Linux 5.11)
    //    so our own error pipe keeps working until the execve succeeds.
    // SAFETY: close_range only changes fd flags; it takes no pointers.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if rc != 0 {
        return Err(ExecError::CloseFds {
            source: last_os_error(),
        });
    }

    Ok(())
}

fn apply_session(session: Session) -> Result<(), ExecError> {
    let err = |what: &'static str| {
        move |e: rustix::io::Errno| ExecError::Session {
            what,
            source: e.into(),
        }
    };
    match session {
        Session::Inherit => Ok(()),
        Session::NewProcessGroup => {
            rustix::process::setpgid(None, None).map_err(err("setpgid(0, 0)"))
        }
        Session::NewSession => rustix::process::setsid()
            .map(drop)
            .map_err(err("setsid (fails if already a process group leader)")),
        Session::NewSessionWithTty => {
            rustix::process::setsid()
                .map_err(err("setsid (fails if already a process group leader)"))?;
            rustix::process::ioctl_tiocsctty(std::io::stdin()).map_err(err(
                "ioctl(stdin, TIOCSCTTY): stdin must be a terminal (pty slave)",
            ))
        }
    }
}

/// The device a command must never have.
pub const DEV_FUSE: &str = "/dev/fuse";

/// How many mounts sit on `path` in this mount namespace (mountinfo(5), field 5).
fn mounts_on(path: &str) -> io::Result<usize> {
    Ok(crate::mounts::read_mountinfo()?
        .iter()
        .filter(|m| m.mount_point.as_os_str() == path)
        .count())
}

/// If this is a Sandbox whose daemon has /dev/fuse (`SandboxConfig::dev_fuse`:
/// a second /dev tmpfs stacked on the commands' /dev, see
/// `mounts::build_view` step 4e; in a docker container the entrypoint
/// stacks the same layers, see `daemon_view`), move into the commands'
/// mount namespace, which lacks that layer: the Sandbox's one shared
/// namespace for commands ([`crate::commands_ns`], built by the first exec
/// with [`build_commands_view`]), or in a Sandbox too old to have one, a
/// namespace of this command's own built the same way.
///
/// Nothing happens unless /dev/fuse exists *and* /dev is stacked, so on
/// the host (a real /dev/fuse, mode 0600) or in a Sandbox without
/// `dev_fuse` the cost is one stat (and, on the host, one read of
/// /proc/self/mountinfo).
fn hide_dev_fuse() -> Result<(), ExecError> {
    let err = |step: &'static str| move |e: io::Error| ExecError::HideDevFuse { step, source: e };
    if !std::path::Path::new(DEV_FUSE).exists() {
        return Ok(());
    }
    if !crate::commands_ns::enter(build_commands_view)? {
        if mounts_on("/dev").map_err(err("reading /proc/self/mountinfo"))? < 2 {
            return Ok(());
        }
        build_commands_view()?;
    }
    if std::path::Path::new(DEV_FUSE).exists() {
        return Err(ExecError::StillPrivileged {
            what: "/dev/fuse still visible".into(),
        });
    }
    Ok(())
}

/// [`hide_dev_fuse`] alone, for an exec helper started ahead of its exec
/// ([`crate::prestart`]): the commands' namespace is entered, built first
/// if no exec has built it yet.
pub(crate) fn enter_commands_namespace() -> Result<(), ExecError> {
    hide_dev_fuse()
}

/// The commands' view, from the daemon's:
///
/// * `unshare(CLONE_NEWNS)` copies the daemon's view;
/// * `MS_REC|MS_SLAVE` on `/`: Workspace mounts the daemon makes later
///   still propagate into the copy (the Sandbox root is shared, see
///   `mounts::build_view` step 7), while nothing in the copy propagates
///   back (mount_namespaces(7), "slave mounts");
/// * the command-only masks (`SandboxConfig::command_masked_paths`), read
///   from the upper /dev before it goes;
/// * lazy unmount of the upper /dev, revealing the commands' /dev.
fn build_commands_view() -> Result<(), ExecError> {
    let err = |step: &'static str| move |e: io::Error| ExecError::HideDevFuse { step, source: e };
    // SAFETY: rustix marks unshare unsafe because CLONE_FILES/CLONE_FS can
    // break assumptions of other threads; this process is single-threaded
    // and only a mount namespace is unshared.
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNS) }
        .map_err(|e| err("unshare(CLONE_NEWNS)")(e.into()))?;
    rustix::mount::mount_change(
        "/",
        rustix::mount::MountPropagationFlags::REC
            | rustix::mount::MountPropagationFlags::DOWNSTREAM,
    )
    .map_err(|e| err("make / rslave")(e.into()))?;
    apply_command_masks()?;
    rustix::mount::unmount("/dev", rustix::mount::UnmountFlags::DETACH)
        .map_err(|e| err("umount2(/dev, MNT_DETACH) of the daemon's /dev")(e.into()))?;
    Ok(())
}

/// Mask, in the command's own mount namespace, each path the Sandbox's
/// init listed in the daemon's /dev layer. A missing list (a Sandbox built
/// by an older init) means none; missing paths are skipped.
fn apply_command_masks() -> Result<(), ExecError> {
    let list = Path::new(crate::mounts::COMMAND_MASKS_FILE);
    let fail = |path: &Path, message: String, errno: Option<i32>| ExecError::CommandMask {
        path: path.into(),
        message,
        errno,
    };
    let paths: Vec<PathBuf> = match std::fs::read(list) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| fail(list, format!("unreadable list: {e}"), None))?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(fail(list, format!("read: {e}"), e.raw_os_error())),
    };
    for p in paths.iter().filter(|p| p.exists()) {
        crate::mounts::mask(p).map_err(|e| {
            let errno = match &e {
                crate::mounts::MountError::Step { source, .. } => source.raw_os_error(),
                _ => None,
            };
            fail(p, e.to_string(), errno)
        })?;
    }
    Ok(())
}

/// `execve` the command trying each candidate path; returns only on failure.
fn execve_search(p: &PreparedExec) -> ExecError {
    // Like execvp(3): ENOENT/ENOTDIR move on, EACCES is remembered
    // (reported if nothing else works), anything else stops.
    let argv = null_terminated(&p.argv);
    let envp = null_terminated(&p.envp);
    let mut eacces: Option<(String, io::Error)> = None;
    for path in &p.candidates {
        // SAFETY: `path`, `argv` and `envp` are NUL-terminated C strings and
        // NULL-terminated pointer arrays that live until the call returns
        // (it only returns on failure).
        unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
        let err = last_os_error();
        match err.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ENOTDIR) => continue,
            Some(libc::EACCES) => {
                eacces.get_or_insert((path.to_string_lossy().into_owned(), err));
            }
            _ => {
                return ExecError::Execve {
                    path: path.to_string_lossy().into_owned(),
                    source: err,
                }
            }
        }
    }
    if let Some((path, source)) = eacces {
        return ExecError::Execve { path, source };
    }
    let searched = p
        .candidates
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(", ");
    ExecError::NotFound {
        program: p.program.clone(),
        searched,
    }
}

/// Run a command as root *with* its capabilities and without the seccomp
/// filter: only for the Sandbox's daemon (docs/design.md §3, B4: "the daemon as root
/// with CAP_SYS_ADMIN"), never for a command. Signals, inherited fds,
/// rlimits and cwd are handled as for a command.
pub fn exec_privileged(p: &PreparedExec) -> ExecError {
    if let Err(e) = reset_inherited_state().and_then(|()| apply_session(p.session)) {
        return e;
    }
    // The descriptors the daemon needs (the commands' cgroup), back from
    // the close-on-exec that reset_inherited_state put on everything.
    for &fd in &p.keep_fds {
        // SAFETY: `fd` was inherited open from PID 1 (the monitor opened it
        // before forking); borrowed only for this fcntl.
        let bfd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        if let Err(e) = rustix::io::fcntl_setfd(bfd, rustix::io::FdFlags::empty()) {
            return ExecError::KeepFd {
                fd,
                source: e.into(),
            };
        }
    }
    for r in &p.rlimits {
        if let Err(e) = r.apply() {
            return e.into();
        }
    }
    if let Err(e) = rustix::process::chdir(p.cwd.as_c_str()) {
        return ExecError::Chdir {
            path: p.cwd_path.clone(),
            source: e.into(),
        };
    }
    execve_search(p)
}

fn null_terminated(v: &[CString]) -> Vec<*const libc::c_char> {
    v.iter()
        .map(|c| c.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

fn verify_dropped(uid: u32, gid: u32) -> Result<(), ExecError> {
    let still = |what: String| Err(ExecError::StillPrivileged { what });
    let (mut r, mut e, mut s) = (0, 0, 0);
    // SAFETY: getresuid/getresgid write three ids through valid pointers.
    unsafe { libc::getresuid(&mut r, &mut e, &mut s) };
    if (r, e, s) != (uid, uid, uid) {
        return still(format!("uids are {r}/{e}/{s}, expected {uid}"));
    }
    // SAFETY: as above.
    unsafe { libc::getresgid(&mut r, &mut e, &mut s) };
    if (r, e, s) != (gid, gid, gid) {
        return still(format!("gids are {r}/{e}/{s}, expected {gid}"));
    }
    match rustix::thread::capabilities(None) {
        Ok(c) if c.effective.is_empty() && c.permitted.is_empty() && c.inheritable.is_empty() => {}
        Ok(c) => return still(format!("capabilities left: {c:?}")),
        Err(e) => return still(format!("capget failed: {e}")),
    }
    for cap in 0..=cap_last_cap() {
        // SAFETY: PR_CAPBSET_READ takes an integer argument only.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap as libc::c_ulong, 0, 0, 0) };
        if rc == 1 {
            return still(format!("capability {cap} is still in the bounding set"));
        }
    }
    if rustix::thread::set_thread_res_uid(
        rustix::process::Uid::ROOT,
        rustix::process::Uid::ROOT,
        rustix::process::Uid::ROOT,
    )
    .is_ok()
    {
        return still("setresuid(0) succeeded after the drop".into());
    }
    Ok(())
}

/// A failure report that crosses a process boundary (pipe or file) as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// Which part failed, e.g. "exec", "mount", "cgroup".
    pub stage: String,
    /// The error's full message.
    pub message: String,
    /// errno, when an OS call failed.
    pub errno: Option<i32>,
}

impl Failure {
    /// The seccomp filter could not be had: the command must not run.
    pub fn seccomp(message: impl Into<String>) -> Failure {
        Failure {
            stage: "seccomp".into(),
            message: message.into(),
            errno: None,
        }
    }
}

impl From<&ExecError> for Failure {
    fn from(e: &ExecError) -> Self {
        Failure {
            stage: "exec".into(),
            message: e.to_string(),
            errno: e.errno(),
        }
    }
}
