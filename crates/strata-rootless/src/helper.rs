//! The helper: the strata binary re-executed as `strata __rootless-helper`.
//!
//! Why a re-exec: unshare(CLONE_NEWUSER) fails with EINVAL in a
//! multithreaded process, and the parent (which serves FUSE) has threads.
//! A freshly exec'ed process that reaches [`crate::maybe_run_internal`]
//! first thing in `main` has exactly one.
//!
//! Process tree (H = this helper, I = init of the new PID namespace,
//! C = the command):
//!
//! ```text
//! strata run (parent, serves FUSE)
//!   └─ H  unshare(USER|NS|PID), maps, mount, passes the fd back
//!        └─ I  pid 1 of the new PID namespace, reaps, reports C's status
//!             └─ C  execvp(argv), cwd = the mount
//! ```
//!
//! With `--isolate` H also creates a network namespace (only `lo`), and I,
//! before it forks C, builds C's view with strata-sandbox's
//! [`strata_sandbox::mounts::build_view`] (the Sandbox's own minimal host
//! view, the Workspace bound at its mountpoint, private /tmp, /proc with
//! other uids hidden) and brings `lo` up; C drops every capability of the
//! user namespace, sets no_new_privs and installs the Sandbox's seccomp
//! filter ([`strata_sandbox::confine::confine_keeping_uid`]) just before
//! execvp.
//!
//! Lifetime: the mount exists only in the mount namespace H created; that
//! namespace dies with its last process. H and I have PR_SET_PDEATHSIG =
//! SIGKILL, and when I (pid 1) dies the kernel kills every process in its
//! PID namespace, so killing the parent kills H, I, C and anything C left
//! behind, and the mount goes with them.

use crate::proto::{self, FromHelper, SpawnFailure, ToHelper};
use crate::sys::{self, Errno, Forked};
use crate::HelperError;
use std::ffi::{CString, OsString};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

/// The fixed fd number the parent puts the helper's end of the channel on.
pub(crate) const CHANNEL_FD: RawFd = 3;

/// Entry point after `strata __rootless-helper`; returns the process exit
/// code (the parent reads the outcome from the channel, not from it).
pub(crate) fn main(args: Vec<OsString>) -> i32 {
    // Refuse to adopt fd 3 unless it is a socket: someone running the
    // hidden subcommand by hand must not make us close a random fd.
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: st is a valid out-pointer for fstat.
    let rc = unsafe { libc::fstat(CHANNEL_FD, st.as_mut_ptr()) };
    // SAFETY: fstat succeeded, so it initialised st.
    if rc != 0 || unsafe { st.assume_init() }.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        eprintln!(
            "strata: {}",
            HelperError::BadChannel(if rc != 0 {
                Errno::last()
            } else {
                Errno(libc::ENOTSOCK)
            })
        );
        return 125;
    }
    // SAFETY: the parent dup2'ed its end of the socketpair onto fd 3 for
    // this process alone; nothing else here owns fd 3.
    let sock = unsafe { OwnedFd::from_raw_fd(CHANNEL_FD) };
    // The command must never inherit the channel.
    let _ = rustix::io::fcntl_setfd(&sock, rustix::io::FdFlags::CLOEXEC);
    let report = match helper(&sock, args) {
        Ok(r) => r,
        Err(HelperError::ParentGone) => return 125,
        Err(e) => FromHelper::Failed(e),
    };
    let failed = matches!(report, FromHelper::Failed(_));
    let _ = proto::send(sock.as_fd(), &report, None);
    if failed {
        1
    } else {
        0
    }
}

fn helper(sock: &OwnedFd, args: Vec<OsString>) -> Result<FromHelper, HelperError> {
    // args: PPID -- ARGV...
    let mut it = args.into_iter();
    let ppid: i32 = it
        .next()
        .and_then(|p| p.to_str().and_then(|s| s.parse().ok()))
        .ok_or_else(|| HelperError::BadInvocation("no parent pid".into()))?;
    if it.next().as_deref() != Some(std::ffi::OsStr::new("--")) {
        return Err(HelperError::BadInvocation(
            "expected `--` after the pid".into(),
        ));
    }
    let argv: Vec<CString> = it
        .map(|a| sys::cstring(a.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|_| HelperError::BadInvocation("NUL byte in argv".into()))?;
    if argv.is_empty() {
        return Err(HelperError::BadInvocation("no command".into()));
    }

    // unshare(CLONE_NEWUSER) refuses multithreaded callers with EINVAL;
    // say so plainly rather than through an errno.
    if let Some(n) = sys::thread_count() {
        if n != 1 {
            return Err(HelperError::NotSingleThreaded(n));
        }
    }

    // Die with the serving parent. Checked against the pid it told us: if
    // it died before the prctl, we were already reparented.
    sys::set_pdeathsig_kill().map_err(HelperError::Pdeathsig)?;
    if rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(ppid) {
        return Err(HelperError::ParentGone);
    }

    let setup = match proto::recv::<ToHelper>(sock.as_fd()) {
        Ok((ToHelper::Setup(s), None)) => s,
        Ok((_, Some(_))) => return Err(HelperError::RecvSetup("unexpected fd".into())),
        Ok((m, None)) => return Err(HelperError::RecvSetup(format!("got {m:?}"))),
        Err(proto::ProtoError::Eof) => return Err(HelperError::ParentGone),
        Err(e) => return Err(HelperError::RecvSetup(e.to_string())),
    };
    let mountpoint = sys::cstring(&setup.mountpoint)
        .map_err(|_| HelperError::BadInvocation("NUL in mountpoint".into()))?;
    let cwd =
        sys::cstring(&setup.cwd).map_err(|_| HelperError::BadInvocation("NUL in cwd".into()))?;

    // The terminal's Ctrl-C / Ctrl-\ go to the whole foreground process
    // group; they are for the command (which gets default dispositions
    // back), not for the helper, whose death would tear the mount down.
    sys::set_signal(libc::SIGINT, true).map_err(HelperError::Signal)?;
    sys::set_signal(libc::SIGQUIT, true).map_err(HelperError::Signal)?;

    // Read before unshare: afterwards, until the maps are written, our ids
    // read as the overflow id.
    let (uid, gid) = (
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw(),
    );

    // A new user namespace (we get CAP_SYS_ADMIN in it, enough to mount
    // FUSE, which is FS_USERNS_MOUNT), a mount namespace it owns (the mount
    // is visible to our process tree only and dies with it: the host's
    // /proc/self/mounts never shows it), and a PID namespace so that the
    // death of its init kills everything the command left behind. With
    // --isolate a network namespace too: owned by the new user namespace,
    // so that its sysfs can be mounted and `lo` brought up in it.
    let mut flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID;
    if setup.isolate.is_some() {
        flags |= libc::CLONE_NEWNET;
    }
    sys::unshare(flags).map_err(HelperError::Unshare)?;
    // The credential change of entering a user namespace may clear the
    // parent-death signal (prctl(2)): set it again and re-check the parent.
    sys::set_pdeathsig_kill().map_err(HelperError::Pdeathsig)?;
    if rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(ppid) {
        return Err(HelperError::ParentGone);
    }

    // Map exactly one id: the invoking user as 0. An unprivileged process
    // may only map its own ids, and must deny setgroups(2) before writing
    // gid_map (user_namespaces(7)). This single mapping is why ids on the
    // FUSE wire need translating (see IdMapping::SingleUser in the parent).
    sys::write_file_once(c"/proc/self/setgroups", b"deny").map_err(HelperError::WriteSetgroups)?;
    sys::write_file_once(c"/proc/self/uid_map", format!("0 {uid} 1\n").as_bytes())
        .map_err(HelperError::WriteUidMap)?;
    sys::write_file_once(c"/proc/self/gid_map", format!("0 {gid} 1\n").as_bytes())
        .map_err(HelperError::WriteGidMap)?;

    // No mount event of ours may propagate back to the host's peer groups.
    sys::mount(
        None,
        c"/",
        None,
        (libc::MS_REC | libc::MS_PRIVATE) as libc::c_ulong,
        None,
    )
    .map_err(HelperError::MakeMountsPrivate)?;

    // /dev/fuse must be opened *inside* the namespace: fuse_fill_super
    // rejects (EINVAL) an fd whose opener's user namespace differs from
    // the mount's.
    let fuse = sys::open(c"/dev/fuse", libc::O_RDWR | libc::O_CLOEXEC)
        .map_err(HelperError::OpenDevFuse)?;

    // mount(2) with the fd option: no fusermount3, no libfuse. user_id /
    // group_id are read in our namespace: 0 = the invoking user. No
    // allow_other (only our tree can reach the mount anyway) and no
    // default_permissions: in this namespace every owner but one renders as
    // nobody, so kernel permission checks against the stored owners would
    // be wrong (docs/design.md §4); the FUSE server reports every owner as 0.
    let data = format!(
        "fd={},rootmode=40000,user_id=0,group_id=0",
        fuse.as_raw_fd()
    );
    let data = CString::new(data).expect("no NUL");
    sys::mount(
        Some(c"strata"),
        &mountpoint,
        Some(c"fuse.strata"),
        (libc::MS_NOSUID | libc::MS_NODEV) as libc::c_ulong,
        Some(&data),
    )
    .map_err(|errno| HelperError::MountFuse {
        mountpoint: String::from_utf8_lossy(&setup.mountpoint).into_owned(),
        errno,
    })?;

    // Hand the device to the parent and close ours at once: if the parent
    // dies, the last reference to the connection goes with it, and anything
    // still touching the mount gets ENOTCONN instead of hanging.
    proto::send(sock.as_fd(), &FromHelper::FuseFd, Some(fuse.as_fd()))
        .map_err(|e| HelperError::SendFd(e.to_string()))?;
    drop(fuse);

    // Until the parent has answered FUSE_INIT, any access to the mount
    // (including the command's chdir into it) would block.
    match proto::recv::<ToHelper>(sock.as_fd()) {
        Ok((ToHelper::Serving, None)) => {}
        Ok((m, _)) => return Err(HelperError::WaitServing(format!("got {m:?}"))),
        Err(proto::ProtoError::Eof) => return Err(HelperError::ParentGone),
        Err(e) => return Err(HelperError::WaitServing(e.to_string())),
    }

    let isolate = setup
        .isolate
        .as_ref()
        .map(|i| IsolateView::new(&setup.mountpoint, i));
    let (report_r, report_w) = sys::pipe().map_err(HelperError::Pipe)?;
    match sys::fork().map_err(HelperError::ForkInit)? {
        Forked::Child => {
            drop(report_r);
            let report = init(&argv, &cwd, isolate.as_ref());
            let bytes = proto::encode(&report).unwrap_or_default();
            let _ = sys::write_all(report_w.as_raw_fd(), &bytes);
            sys::exit_now(0)
        }
        Forked::Parent(init_pid) => {
            drop(report_w);
            let bytes = sys::read_to_end(report_r.as_raw_fd()).map_err(HelperError::ReadReport)?;
            let (_, status) = sys::waitpid(init_pid).map_err(HelperError::WaitInit)?;
            if bytes.is_empty() {
                return Err(HelperError::InitDied(describe(status)));
            }
            postcard::from_bytes::<FromHelper>(&bytes)
                .map_err(|e| HelperError::BadReport(e.to_string()))
        }
    }
}

/// `--isolate`: the view to build in the init, as a Sandbox config.
struct IsolateView {
    config: strata_sandbox::SandboxConfig,
}

impl IsolateView {
    fn new(mountpoint: &[u8], i: &crate::proto::Isolate) -> Self {
        let path = |b: &[u8]| std::path::PathBuf::from(std::ffi::OsStr::from_bytes(b));
        let mp = path(mountpoint);
        IsolateView {
            config: strata_sandbox::SandboxConfig {
                root: strata_sandbox::RootFs::HostReadOnly,
                network: strata_sandbox::Network::None,
                // The Workspace, grafted at the same path as without
                // --isolate (in the private /tmp for the default one).
                binds: vec![strata_sandbox::BindMount {
                    source: mp.clone(),
                    target: mp,
                    readonly: false,
                }],
                masked_paths: i.masked.iter().map(|m| path(m)).collect(),
                ..Default::default()
            },
        }
    }
}

/// Pid 1 of the new PID namespace: start the command, reap everything,
/// report the command's own status. Returning (then exiting) kills every
/// process left in the namespace.
fn init(argv: &[CString], cwd: &CString, isolate: Option<&IsolateView>) -> FromHelper {
    // If the helper dies, so do we, and with us the whole namespace.
    // (No credential change follows, so this one sticks.)
    if let Err(e) = sys::set_pdeathsig_kill() {
        return FromHelper::Failed(HelperError::Pdeathsig(e));
    }
    let filter = match isolate {
        // The view is built here, in pid 1: procfs takes the PID namespace
        // of the process that mounts it, and the helper is not in it.
        Some(iso) => match isolate_init(iso) {
            Ok(f) => Some(f),
            Err(e) => return FromHelper::Failed(e),
        },
        None => {
            // A /proc of this PID namespace, so that the command's own pid
            // matches /proc/<pid>. Best effort: a host that hides parts of
            // /proc refuses the mount, and the host /proc (where /proc/self
            // still works) stays.
            let _ = sys::mount(
                Some(c"proc"),
                c"/proc",
                Some(c"proc"),
                (libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC) as libc::c_ulong,
                None,
            );
            None
        }
    };
    let (err_r, err_w) = match sys::pipe() {
        Ok(p) => p,
        Err(e) => return FromHelper::Failed(HelperError::Pipe(e)),
    };
    let child = match sys::fork() {
        Err(e) => return FromHelper::Failed(HelperError::ForkCommand(e)),
        Ok(Forked::Child) => {
            drop(err_r);
            let fail = |stage: u32, e: Errno| -> ! {
                let mut b = [0u8; 8];
                b[..4].copy_from_slice(&stage.to_le_bytes());
                b[4..].copy_from_slice(&e.0.to_le_bytes());
                let _ = sys::write_all(err_w.as_raw_fd(), &b);
                sys::exit_now(127)
            };
            // Default dispositions and an empty mask for the command: Rust
            // ignores SIGPIPE at startup and the helper ignores SIGINT and
            // SIGQUIT; ignored signals survive execve.
            for s in [libc::SIGPIPE, libc::SIGINT, libc::SIGQUIT] {
                let _ = sys::set_signal(s, false);
            }
            let _ = sys::unblock_all_signals();
            if let Err(e) = sys::chdir(cwd) {
                fail(1, e)
            }
            if let Some(f) = &filter {
                if let Err(e) = strata_sandbox::confine::confine_keeping_uid(f) {
                    fail(3, Errno(e.errno().unwrap_or(libc::EPERM)))
                }
            }
            let e = sys::execvp(argv);
            fail(2, e)
        }
        Ok(Forked::Parent(pid)) => pid,
    };
    drop(err_w);
    // The exec pipe is close-on-exec: EOF with no bytes means execvp worked.
    let spawn_failure = match sys::read_to_end(err_r.as_raw_fd()) {
        Ok(b) if b.len() == 8 => {
            let stage = u32::from_le_bytes(b[..4].try_into().expect("4"));
            let e = Errno(i32::from_le_bytes(b[4..].try_into().expect("4")));
            match stage {
                1 => Some(SpawnFailure::Chdir(e)),
                3 => return FromHelper::Failed(HelperError::IsolateConfine(e)),
                _ => Some(SpawnFailure::Exec(e)),
            }
        }
        Ok(_) => None,
        Err(e) => return FromHelper::Failed(HelperError::ReadReport(e)),
    };
    // As pid 1 we inherit orphans: reap them until the command itself ends.
    let status = loop {
        match sys::waitpid(-1) {
            Ok((p, st)) if p == child => break st,
            Ok(_) => continue,
            Err(e) => return FromHelper::Failed(HelperError::WaitCommand(e)),
        }
    };
    if let Some(f) = spawn_failure {
        return FromHelper::SpawnFailed(f);
    }
    if libc::WIFEXITED(status) {
        FromHelper::Exited {
            code: libc::WEXITSTATUS(status),
        }
    } else if libc::WIFSIGNALED(status) {
        FromHelper::Signaled {
            signal: libc::WTERMSIG(status),
        }
    } else {
        FromHelper::Failed(HelperError::InitDied(describe(status)))
    }
}

/// The `--isolate` part of the init: the compiled filter (before the view
/// hides anything it might read), the view, `lo`.
fn isolate_init(iso: &IsolateView) -> Result<strata_sandbox::CompiledPolicy, HelperError> {
    let filter = strata_sandbox::Policy::default()
        .compile()
        .map_err(|e| HelperError::IsolatePolicy(e.to_string()))?;
    strata_sandbox::mounts::build_view(&iso.config)
        .map_err(|e| HelperError::IsolateView(e.to_string()))?;
    strata_sandbox::net::loopback_up().map_err(|e| HelperError::IsolateLoopback(e.to_string()))?;
    Ok(filter)
}

fn describe(status: libc::c_int) -> String {
    if libc::WIFEXITED(status) {
        format!("exit status {}", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        format!("killed by signal {}", libc::WTERMSIG(status))
    } else {
        format!("wait status {status:#x}")
    }
}
