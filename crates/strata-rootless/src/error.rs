//! Errors. [`HelperError`] crosses the helper channel (one variant per
//! syscall, so the reason always names the failing step); [`RunError`] is
//! what `run` returns to the CLI.

use crate::probe::Probe;
use crate::proto::{ProtoError, SpawnFailure};
use crate::sys::Errno;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// A failure inside the helper (or its namespace init), reported to the
/// parent over the channel. Never turned into an exit status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum HelperError {
    #[error("the helper was started with bad arguments: {0}")]
    BadInvocation(String),
    #[error("the helper channel (fd 3) is not a socket: {0}")]
    BadChannel(Errno),
    #[error("the helper has {0} threads; unshare(CLONE_NEWUSER) needs a single-threaded process (strata_rootless::maybe_run_internal must run first in main)")]
    NotSingleThreaded(usize),
    #[error("the helper could not read its setup: {0}")]
    RecvSetup(String),
    #[error("prctl(PR_SET_PDEATHSIG): {0}")]
    Pdeathsig(Errno),
    #[error("the serving parent exited before the helper was set up")]
    ParentGone,
    #[error("signal(2) in the helper: {0}")]
    Signal(Errno),
    #[error("unshare(CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWPID[|CLONE_NEWNET]): {0}{hint}", hint = unshare_hint(*.0))]
    Unshare(Errno),
    #[error("write /proc/self/setgroups (deny): {0}")]
    WriteSetgroups(Errno),
    #[error("write /proc/self/uid_map: {0}")]
    WriteUidMap(Errno),
    #[error("write /proc/self/gid_map: {0}")]
    WriteGidMap(Errno),
    #[error("mount(/, MS_REC|MS_PRIVATE) in the new mount namespace: {0}")]
    MakeMountsPrivate(Errno),
    #[error("open /dev/fuse inside the user namespace: {0}{hint}", hint = fuse_hint(*.0))]
    OpenDevFuse(Errno),
    #[error("mount(2) of fuse on {mountpoint}: {errno}{hint}", hint = mount_hint(*errno))]
    MountFuse { mountpoint: String, errno: Errno },
    #[error("send the /dev/fuse fd to the parent: {0}")]
    SendFd(String),
    #[error("wait for the parent to serve the mount: {0}")]
    WaitServing(String),
    #[error("pipe2(2) in the helper: {0}")]
    Pipe(Errno),
    #[error("fork(2) of the namespace init: {0}")]
    ForkInit(Errno),
    #[error("fork(2) of the command: {0}")]
    ForkCommand(Errno),
    #[error("waitpid(2) for the command: {0}")]
    WaitCommand(Errno),
    #[error("waitpid(2) for the namespace init: {0}")]
    WaitInit(Errno),
    #[error("read the command's report: {0}")]
    ReadReport(Errno),
    #[error("the namespace init ended without reporting the command's status ({0})")]
    InitDied(String),
    #[error("the namespace init sent a malformed report: {0}")]
    BadReport(String),
    #[error("--isolate: compiling the Sandbox's seccomp policy: {0}")]
    IsolatePolicy(String),
    #[error("--isolate: building the command's view: {0}")]
    IsolateView(String),
    #[error("--isolate: bringing up lo in the new network namespace: {0}")]
    IsolateLoopback(String),
    #[error("--isolate: confining the command (capabilities, no_new_privs, seccomp): {0}")]
    IsolateConfine(Errno),
}

fn unshare_hint(e: Errno) -> &'static str {
    match e.0 {
        libc::EPERM | libc::ENOSPC | libc::EUSERS => {
            " (unprivileged user namespaces are disabled or exhausted here: an administrator can enable them with `sysctl -w kernel.unprivileged_userns_clone=1` (Debian), `sysctl -w user.max_user_namespaces=15000`, or on Ubuntu `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`)"
        }
        libc::EINVAL => " (the calling process is multithreaded)",
        _ => "",
    }
}

pub(crate) fn fuse_hint(e: Errno) -> &'static str {
    match e.0 {
        libc::EACCES | libc::EPERM => {
            " (/dev/fuse is not readable and writable by you; it is mode 0600 root:root on many machines: an administrator can run `chmod 0666 /dev/fuse`, or `chgrp fuse /dev/fuse && chmod 0660 /dev/fuse` and add you to group fuse; make it permanent with a udev rule)"
        }
        libc::ENOENT | libc::ENODEV | libc::ENXIO => {
            " (no FUSE device: an administrator can load it with `modprobe fuse`)"
        }
        _ => "",
    }
}

fn mount_hint(e: Errno) -> &'static str {
    match e.0 {
        libc::EPERM => " (this kernel refuses FUSE mounts in user namespaces: Linux >= 4.18 is needed)",
        libc::EINVAL => " (the /dev/fuse fd was not opened inside the mount's user namespace, or the kernel rejected the options)",
        _ => "",
    }
}

/// Why `run` failed. None of these is a command's exit status.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("no command given: use `strata run REF -- PROGRAM [ARGS...]`")]
    NoCommand,
    #[error("the command {0:?} contains a NUL byte")]
    NulInArgument(String),
    #[error("refusing to run from {cwd}: the current directory is inside the mountpoint {mountpoint}; a process whose cwd is inside the mountpoint deadlocks the mount (FUSE requests would wait on it). cd elsewhere (e.g. `cd /`) or pick another --at")]
    CwdInsideMount { cwd: PathBuf, mountpoint: PathBuf },
    #[error("cannot determine the current directory: {0}")]
    Cwd(#[source] std::io::Error),
    #[error("rootless mode is unavailable on this machine: {0}")]
    Unavailable(Probe),
    #[error("cannot mount at {path}: {reason}")]
    Mountpoint { path: PathBuf, reason: String },
    #[error("create the scratch directory: {0}")]
    Scratch(#[source] std::io::Error),
    #[error("{0}")]
    Workspace(Box<strata_workspace::WsError>),
    #[error("socketpair(2) for the helper channel: {0}")]
    Channel(#[source] std::io::Error),
    #[error("spawn the rootless helper (/proc/self/exe): {0}")]
    SpawnHelper(#[source] std::io::Error),
    #[error("talking to the rootless helper: {0}")]
    Proto(#[from] ProtoError),
    #[error("the rootless helper sent {0} where {1} was expected")]
    Unexpected(String, &'static str),
    #[error("the rootless helper failed: {0}")]
    Helper(#[from] HelperError),
    #[error("the rootless helper exited ({status}) without reporting the command's status")]
    HelperExited { status: String },
    #[error("cannot start {program:?}: {failure}")]
    CommandNotStarted {
        program: String,
        failure: SpawnFailure,
    },
    #[error("serve the Workspace on the FUSE fd: {0}")]
    Serve(#[source] Box<strata_workspace::WsError>),
    #[error("the FUSE session did not end within {0:?} after the command exited (a process is still holding the mount's namespace)")]
    MountLingers(std::time::Duration),
    #[error("commit failed: {source}; the uncommitted Workspace {id} is kept under {scratch}")]
    Commit {
        #[source]
        source: Box<strata_workspace::WsError>,
        id: String,
        scratch: PathBuf,
    },
}

impl From<strata_workspace::WsError> for RunError {
    fn from(e: strata_workspace::WsError) -> Self {
        RunError::Workspace(Box::new(e))
    }
}

impl std::fmt::Display for SpawnFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpawnFailure::Chdir(e) => write!(f, "chdir into the mount: {e}"),
            SpawnFailure::Exec(e) if e.0 == libc::ENOENT => {
                write!(f, "execvp: {e} (no such program in PATH)")
            }
            SpawnFailure::Exec(e) => write!(f, "execvp: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syscall_failures_name_the_step_and_the_fix() {
        let e = HelperError::OpenDevFuse(Errno(libc::EACCES)).to_string();
        assert!(
            e.starts_with("open /dev/fuse inside the user namespace"),
            "{e}"
        );
        assert!(e.contains("chmod 0666 /dev/fuse"), "{e}");
        let e = HelperError::Unshare(Errno(libc::EPERM)).to_string();
        assert!(
            e.starts_with("unshare(CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWPID"),
            "{e}"
        );
        assert!(e.contains("user.max_user_namespaces"), "{e}");
        let e = HelperError::Unshare(Errno(libc::EINVAL)).to_string();
        assert!(e.contains("multithreaded"), "{e}");
        let e = HelperError::MountFuse {
            mountpoint: "/m".into(),
            errno: Errno(libc::EINVAL),
        }
        .to_string();
        assert!(e.contains("/m") && e.contains("opened inside"), "{e}");
        let e = HelperError::WriteUidMap(Errno(libc::EPERM)).to_string();
        assert!(e.starts_with("write /proc/self/uid_map"), "{e}");
    }

    #[test]
    fn a_missing_program_says_so() {
        let e = RunError::CommandNotStarted {
            program: "nope".into(),
            failure: SpawnFailure::Exec(Errno(libc::ENOENT)),
        }
        .to_string();
        assert!(
            e.contains("cannot start \"nope\"") && e.contains("no such program"),
            "{e}"
        );
    }
}
