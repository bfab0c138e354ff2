//! `strata run` with no root: one command whose view has a Workspace
//! grafted at a path, through FUSE mounted inside an unprivileged user
//! namespace (docs/design.md §4).
//!
//! The parent (this process, which may have threads) creates the Workspace
//! and re-executes the strata binary as a single-threaded helper
//! (`strata __rootless-helper`, see [`helper`](crate::helper)). The helper
//! enters new user, mount and PID namespaces, mounts FUSE with a /dev/fuse
//! fd it opened inside them, and passes that fd back over SCM_RIGHTS; the
//! parent serves the Workspace on it (`Workspace::serve_fd`, fuser
//! `Session::from_fd`); the helper then runs the command and reports its
//! status. With a commit message the changes are committed when it exits;
//! otherwise they are discarded.
//!
//! Plain `run` is a convenience, not a sandbox: the command has the
//! invoking user's rights on the host's files, sees the host and has its
//! network. [`RunSpec::isolate`] confines it like a Sandbox command
//! (docs/security.md): strata-sandbox's minimal host view, no network but
//! `lo`, no capability, no_new_privs, the Sandbox's seccomp filter.
//!
//! Binaries that use this crate must call [`maybe_run_internal`] first
//! thing in `main`, before any thread exists.

mod error;
mod helper;
pub mod probe;
pub mod proto;
mod scratch;
mod sys;

pub use error::{HelperError, RunError};
pub use probe::{probe, Mechanism, Probe, Problem};
pub use proto::SpawnFailure;
pub use sys::Errno;

use proto::{FromHelper, Setup, ToHelper};
use scratch::{
    absolute, canonical_prefix, lock_scratch, store_key, sweep_stale_scratch, RemoveDirOnDrop,
    RUN_LOCK, SCRATCH_PREFIX, STORE_FILE,
};
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use strata_store::Store;
pub use strata_workspace::{Change, CommitOutcome};
use strata_workspace::{IdMapping, MountOptions, Workspace, WorkspaceOptions};

/// The hidden subcommand that makes the strata binary act as the helper.
pub const HELPER_ARG: &str = "__rootless-helper";

/// How long the FUSE session may outlive the command before it is an error.
/// With a PID namespace nothing can keep the mount alive, so this is only a
/// guard against a kernel or fuser surprise.
const SESSION_END_TIMEOUT: Duration = Duration::from_secs(20);

/// If this process was started as the rootless helper, act as it and exit;
/// otherwise return at once. Call it first thing in `main`: the helper must
/// be single-threaded to enter a user namespace.
pub fn maybe_run_internal() {
    let mut args = std::env::args_os();
    let _ = args.next();
    if args.next().as_deref() != Some(OsStr::new(HELPER_ARG)) {
        return;
    }
    let code = helper::main(args.collect());
    std::process::exit(code)
}

/// What to run.
#[derive(Clone, Debug, Default)]
pub struct RunSpec {
    /// "project/branch": the Workspace's branch.
    pub reference: String,
    /// The command: argv[0] is looked up in PATH, no shell.
    pub argv: Vec<OsString>,
    /// Added to (or replacing in) the inherited environment.
    pub env: Vec<(OsString, OsString)>,
    /// Where the Workspace appears in the command's view. Default: a fresh
    /// empty directory. Created if missing.
    pub at: Option<PathBuf>,
    /// Commit with this message after the command exits; `None` discards.
    pub commit: Option<String>,
    /// Where scratch directories go (default: the system temp directory).
    pub scratch_parent: Option<PathBuf>,
    /// `--isolate`: the command sees only the host's system directories
    /// and /etc (minus what is not world-readable), a private /tmp and the
    /// Workspace, not the Store; it has no network but `lo`, no capability,
    /// no_new_privs and the Sandbox's seccomp filter.
    pub isolate: bool,
}

/// How the command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandStatus {
    Exited(i32),
    Signaled(i32),
}

impl CommandStatus {
    /// The shell convention: an exit status as is, a signal as 128+N.
    pub fn code(self) -> u8 {
        match self {
            CommandStatus::Exited(c) => (c & 0xff) as u8,
            CommandStatus::Signaled(s) => (128 + s).min(255) as u8,
        }
    }
}

/// What happened to the Workspace's changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Disposition {
    Committed {
        outcome: CommitOutcome,
        branch: String,
    },
    Discarded,
}

#[derive(Clone, Debug)]
pub struct RunOutcome {
    pub status: CommandStatus,
    /// The changes the command made, relative to the Workspace's base.
    pub changes: Vec<Change>,
    pub disposition: Disposition,
    /// Where the Workspace was mounted (in the command's view only).
    pub mountpoint: PathBuf,
}

/// Refuse a cwd inside the mountpoint (docs/design.md §4: it deadlocks).
/// Both paths must be absolute and canonical.
pub fn check_cwd(cwd: &Path, mountpoint: &Path) -> Result<(), RunError> {
    if cwd.starts_with(mountpoint) {
        return Err(RunError::CwdInsideMount {
            cwd: cwd.to_path_buf(),
            mountpoint: mountpoint.to_path_buf(),
        });
    }
    Ok(())
}

/// Run the command of `spec` on a Workspace of `store`. Call from a thread
/// that lives until it returns (the main thread): the helper's
/// parent-death signal fires when the *thread* that spawned it exits.
pub fn run(store: &Store, spec: &RunSpec) -> Result<RunOutcome, RunError> {
    if spec.argv.is_empty() {
        return Err(RunError::NoCommand);
    }
    for a in &spec.argv {
        if a.as_bytes().contains(&0) {
            return Err(RunError::NulInArgument(a.to_string_lossy().into_owned()));
        }
    }
    let cwd = std::env::current_dir()
        .and_then(|c| c.canonicalize())
        .map_err(RunError::Cwd)?;
    // Before anything is created or spawned: the cwd check, then the probe.
    if let Some(at) = &spec.at {
        let at = absolute(at, &cwd);
        // The part of `at` that exists decides (the rest will be created
        // below it, so a cwd inside that is inside the mount too).
        let canon = canonical_prefix(&at);
        check_cwd(&cwd, &canon)?;
    }
    let verdict = probe::probe();
    let Some(mechanism) = verdict.mechanism else {
        return Err(RunError::Unavailable(verdict));
    };

    let scratch_parent = spec
        .scratch_parent
        .clone()
        .unwrap_or_else(std::env::temp_dir);
    sweep_stale_scratch(store, &scratch_parent);
    let scratch = tempfile::Builder::new()
        .prefix(SCRATCH_PREFIX)
        // Holds the command's uncommitted files: private to the user.
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .tempdir_in(&scratch_parent)
        .map_err(RunError::Scratch)?;
    // Held for the whole run: a later run that can take it knows this one
    // died (SIGKILL leaves no chance to clean up) and removes the leftovers.
    let _run_lock = lock_scratch(scratch.path()).map_err(RunError::Scratch)?;
    std::fs::write(
        scratch.path().join(STORE_FILE),
        store_key(store).as_os_str().as_bytes(),
    )
    .map_err(RunError::Scratch)?;
    let mut created_at = None;
    let mountpoint = match &spec.at {
        None => {
            let m = scratch.path().join("root");
            std::fs::create_dir(&m).map_err(RunError::Scratch)?;
            m
        }
        Some(at) => {
            let at = absolute(at, &cwd);
            if !at.exists() {
                std::fs::create_dir_all(&at).map_err(|e| RunError::Mountpoint {
                    path: at.clone(),
                    reason: format!("create it: {e}"),
                })?;
                created_at = Some(at.clone());
            }
            let m = at.canonicalize().map_err(|e| RunError::Mountpoint {
                path: at.clone(),
                reason: e.to_string(),
            })?;
            if !m.is_dir() {
                return Err(RunError::Mountpoint {
                    path: m,
                    reason: "not a directory".into(),
                });
            }
            m
        }
    };
    let _remove_at = RemoveDirOnDrop(created_at);
    check_cwd(&cwd, &mountpoint)?;
    if let Ok(s) = store.dir().canonicalize() {
        if mountpoint.starts_with(&s) || s.starts_with(&mountpoint) {
            return Err(RunError::Mountpoint {
                path: mountpoint,
                reason: format!("it overlaps the Store ({})", s.display()),
            });
        }
    }

    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw();
    let ws_root = scratch.path().join("ws");
    let ws = Workspace::create(
        store,
        &spec.reference,
        &ws_root,
        &WorkspaceOptions {
            root_owner: Some((uid, gid)),
            ..Default::default()
        },
    )?;

    // One arm per mechanism; a seccomp user-notification mechanism for
    // hosts without a usable /dev/fuse would be another.
    let served = match mechanism {
        Mechanism::FuseInUserNamespace => serve_and_run(store, &ws, spec, &mountpoint, uid, gid),
    };
    let status = match served {
        Ok(s) => s,
        Err(e) => {
            // Never commit after a helper failure: what the command did is
            // unknown. The Workspace goes with the scratch directory.
            let _ = ws.discard();
            return Err(e);
        }
    };

    let changes = match ws.status() {
        Ok(c) => c,
        Err(e) => {
            let _ = ws.discard();
            return Err(e.into());
        }
    };
    let disposition = match &spec.commit {
        Some(msg) => match ws.commit(msg) {
            Ok(outcome) => Disposition::Committed {
                outcome,
                branch: ws.branch().to_string(),
            },
            Err(source) => {
                let id = ws.id().to_string();
                drop(ws);
                let kept = scratch.keep();
                // Without its lock file a kept scratch is never swept.
                let _ = std::fs::remove_file(kept.join(RUN_LOCK));
                return Err(RunError::Commit {
                    source: Box::new(source),
                    id,
                    scratch: kept.join("ws"),
                });
            }
        },
        None => Disposition::Discarded,
    };
    ws.discard()?;
    drop(scratch);
    Ok(RunOutcome {
        status,
        changes,
        disposition,
        mountpoint,
    })
}

/// Spawn the helper, serve the fd it sends, let it run the command, and
/// wait until the mount is gone.
fn serve_and_run(
    store: &Store,
    ws: &Workspace,
    spec: &RunSpec,
    mountpoint: &Path,
    uid: u32,
    gid: u32,
) -> Result<CommandStatus, RunError> {
    let (ours, theirs) = proto::pair().map_err(RunError::Channel)?;

    let mut env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    for (k, v) in &spec.env {
        env.retain(|(ek, _)| ek != k);
        env.push((k.clone(), v.clone()));
    }
    env.retain(|(k, _)| k != "STRATA_ROOT");
    env.push(("STRATA_ROOT".into(), mountpoint.as_os_str().to_owned()));

    let _signals = IgnoreTerminalSignals::new();
    let mut cmd = std::process::Command::new("/proc/self/exe");
    cmd.arg0("strata")
        .arg(HELPER_ARG)
        .arg(std::process::id().to_string())
        .arg("--")
        .args(&spec.argv)
        .env_clear()
        .envs(env);
    let theirs_raw = theirs.as_raw_fd();
    // SAFETY: the closure runs in the forked child before execve and only
    // makes async-signal-safe syscalls (dup2, fcntl, prctl); it touches no
    // memory shared with other threads of the parent.
    unsafe {
        cmd.pre_exec(move || {
            if theirs_raw == helper::CHANNEL_FD {
                // dup2 onto itself would not clear close-on-exec.
                if libc::fcntl(theirs_raw, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(theirs_raw, helper::CHANNEL_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Covers the window until the helper sets it itself.
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) < 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(RunError::SpawnHelper)?;
    // Unused end closed at once: if the helper dies, our recv sees EOF.
    drop(theirs);
    let mut helper = HelperGuard(Some(child));
    let mut session = SessionGuard(None);
    let r = talk(
        store,
        ws,
        spec,
        mountpoint,
        uid,
        gid,
        &ours,
        &mut helper,
        &mut session,
    );
    if r.is_err() {
        // Any error of ours takes the namespace (and so the mount) down
        // first, then waits for the session to notice.
        helper.kill();
        let _ = session.join(SESSION_END_TIMEOUT);
    }
    r
}

#[allow(clippy::too_many_arguments)]
fn talk(
    store: &Store,
    ws: &Workspace,
    spec: &RunSpec,
    mountpoint: &Path,
    uid: u32,
    gid: u32,
    ours: &std::os::fd::OwnedFd,
    helper: &mut HelperGuard,
    session: &mut SessionGuard,
) -> Result<CommandStatus, RunError> {
    proto::send(
        ours.as_fd(),
        &ToHelper::Setup(Setup {
            mountpoint: mountpoint.as_os_str().as_bytes().to_vec(),
            cwd: mountpoint.as_os_str().as_bytes().to_vec(),
            isolate: spec.isolate.then(|| proto::Isolate {
                // Not in the view anyway unless it lives under /usr or
                // /etc; masked in case it does.
                masked: vec![store_key(store).as_os_str().as_bytes().to_vec()],
            }),
        }),
        None,
    )?;

    let fd = match recv_or_exit(ours, helper)? {
        (FromHelper::FuseFd, Some(fd)) => fd,
        (FromHelper::FuseFd, None) => return Err(proto::ProtoError::MissingFd.into()),
        (FromHelper::Failed(e), _) => return Err(RunError::Helper(e)),
        (m, _) => return Err(RunError::Unexpected(format!("{m:?}"), "the FUSE fd")),
    };

    // Ids on the FUSE wire are in the mount's user namespace, which maps
    // exactly one id (docs/design.md §4): every owner goes out as 0, and 0
    // comes back as the invoking user. Without this, unlink / rename / link
    // of files that existed before the mount fail with EOVERFLOW and
    // write-opens with EACCES, while reads look healthy. No
    // default_permissions: owners would render as nobody in the namespace.
    let opts = mount_options(uid, gid);
    session.0 = Some(
        ws.serve_fd(fd, &opts)
            .map_err(|e| RunError::Serve(Box::new(e)))?,
    );

    proto::send(ours.as_fd(), &ToHelper::Serving, None)?;
    let status = match recv_or_exit(ours, helper)? {
        (FromHelper::Exited { code }, None) => CommandStatus::Exited(code),
        (FromHelper::Signaled { signal }, None) => CommandStatus::Signaled(signal),
        (FromHelper::SpawnFailed(failure), _) => {
            return Err(RunError::CommandNotStarted {
                program: spec.argv[0].to_string_lossy().into_owned(),
                failure,
            })
        }
        (FromHelper::Failed(e), _) => return Err(RunError::Helper(e)),
        (m, _) => {
            return Err(RunError::Unexpected(
                format!("{m:?}"),
                "the command's status",
            ))
        }
    };
    helper.wait();
    // The namespace is empty now, so the mount is gone and the kernel ends
    // the FUSE session; wait for that, so every write the kernel flushed at
    // unmount is in the Workspace before status/commit.
    session.join(SESSION_END_TIMEOUT)?;
    Ok(status)
}

/// The serving options of rootless mode (see the comment at the call).
pub fn mount_options(uid: u32, gid: u32) -> MountOptions {
    MountOptions {
        allow_other: false,
        default_permissions: Some(false),
        // open_backing needs CAP_SYS_ADMIN in the initial namespace.
        passthrough: uid == 0,
        id_mapping: IdMapping::SingleUser { uid, gid },
        threads: 2,
        fsname: "strata".into(),
        // serve_fd (this mode) always reads /dev/fuse: the io_uring
        // transport mounts by itself (crates/strata-workspace/src/uring).
        transport: strata_workspace::Transport::DevFuse,
    }
}

fn recv_or_exit(
    sock: &std::os::fd::OwnedFd,
    helper: &mut HelperGuard,
) -> Result<(FromHelper, Option<std::os::fd::OwnedFd>), RunError> {
    match proto::recv::<FromHelper>(sock.as_fd()) {
        Ok(m) => Ok(m),
        Err(proto::ProtoError::Eof) => Err(RunError::HelperExited {
            status: helper.wait(),
        }),
        Err(e) => Err(e.into()),
    }
}

/// Kills (SIGKILL) and reaps the helper unless it was waited for: any
/// error path of the parent takes the namespace and the mount down.
struct HelperGuard(Option<std::process::Child>);

impl HelperGuard {
    fn kill(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn wait(&mut self) -> String {
        match self.0.take().map(|mut c| c.wait()) {
            Some(Ok(s)) => s.to_string(),
            Some(Err(e)) => format!("wait failed: {e}"),
            None => "already reaped".into(),
        }
    }
}

impl Drop for HelperGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

struct SessionGuard(Option<strata_workspace::MountHandle>);

impl SessionGuard {
    fn join(&mut self, timeout: Duration) -> Result<(), RunError> {
        let Some(h) = self.0.take() else {
            return Ok(());
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(h.join());
        });
        match rx.recv_timeout(timeout) {
            Ok(r) => r.map_err(|e| RunError::Serve(Box::new(e))),
            Err(_) => Err(RunError::MountLingers(timeout)),
        }
    }
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        // Only reached with a session still held if join timed out: never
        // block here (MountHandle's drop joins); the session thread ends
        // when the namespace dies.
        if let Some(h) = self.0.take() {
            std::mem::forget(h);
        }
    }
}

/// Ctrl-C / Ctrl-\ at the terminal reach the whole process group; like
/// system(3), the parent ignores them while the command runs, so the
/// command decides (and the mount is torn down in order).
struct IgnoreTerminalSignals(Vec<(libc::c_int, libc::sigaction)>);

impl IgnoreTerminalSignals {
    fn new() -> Self {
        let mut saved = Vec::new();
        for sig in [libc::SIGINT, libc::SIGQUIT] {
            // SAFETY: both sigaction structs are fully initialised (zeroed,
            // then SIG_IGN with an empty mask); the old action is written
            // into `old`. SIG_IGN runs no code of ours in signal context.
            unsafe {
                let mut new: libc::sigaction = std::mem::zeroed();
                new.sa_sigaction = libc::SIG_IGN;
                libc::sigemptyset(&mut new.sa_mask);
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &new, &mut old) == 0 {
                    saved.push((sig, old));
                }
            }
        }
        IgnoreTerminalSignals(saved)
    }
}

impl Drop for IgnoreTerminalSignals {
    fn drop(&mut self) {
        for (sig, old) in &self.0 {
            // SAFETY: `old` is the action the kernel gave us back above.
            unsafe {
                libc::sigaction(*sig, old, std::ptr::null_mut());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cwd_inside_the_mountpoint_is_refused() {
        // docs/design.md §4: a cwd inside the mountpoint deadlocks.
        let e = check_cwd(Path::new("/tmp/m/sub"), Path::new("/tmp/m")).unwrap_err();
        assert!(e.to_string().contains("inside the mountpoint"), "{e}");
        assert!(check_cwd(Path::new("/tmp/m"), Path::new("/tmp/m")).is_err());
        assert!(check_cwd(Path::new("/tmp/mm"), Path::new("/tmp/m")).is_ok());
        assert!(check_cwd(Path::new("/tmp"), Path::new("/tmp/m")).is_ok());
    }

    #[test]
    fn rootless_mount_options_map_ids_and_skip_default_permissions() {
        // docs/design.md §4: the mount's namespace maps exactly one id, so
        // every owner goes out as 0 and 0 comes back as the invoking user;
        // and no default_permissions (owners would render as nobody).
        let o = mount_options(1500, 1501);
        assert_eq!(o.default_permissions, Some(false));
        assert!(!o.allow_other);
        assert_eq!(o.id_mapping.outbound(1500, 1501), (0, 0));
        assert_eq!(o.id_mapping.outbound(42, 43), (0, 0));
        assert_eq!(o.id_mapping.inbound_uid(0), 1500);
        assert_eq!(o.id_mapping.inbound_gid(0), 1501);
        assert!(
            !o.passthrough,
            "open_backing needs root in the initial namespace"
        );
        assert!(mount_options(0, 0).passthrough);
    }

    #[test]
    fn signals_are_128_plus_n() {
        assert_eq!(CommandStatus::Exited(42).code(), 42);
        assert_eq!(CommandStatus::Signaled(9).code(), 137);
        assert_eq!(CommandStatus::Signaled(15).code(), 143);
    }

    #[test]
    fn canonical_prefix_keeps_missing_tail() {
        let t = tempfile::tempdir().unwrap();
        let c = t.path().canonicalize().unwrap();
        assert_eq!(canonical_prefix(&t.path().join("a/b")), c.join("a/b"));
    }
}
