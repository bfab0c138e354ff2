//! The two single-threaded processes of a Sandbox: the monitor (host
//! side) and PID 1 (inside). See [`crate::ns`] for the picture.
//!
//! Both wait for signals synchronously: the signals they care about are
//! blocked and collected with `sigwaitinfo(2)`, so there are no signal
//! handlers and no async-signal-safety concerns. The mask is inherited by
//! children and reset in [`crate::exec`] before the command's `execve`.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};

use rustix::process::{Pid, WaitOptions, WaitStatus};
use rustix::thread::UnshareFlags;

use crate::cgroup::Cgroup;
use crate::exec::{Failure, PreparedExec};
use crate::internal::{write_json_file, InitWire};
use crate::ns::{Outcome, Report, RunAs, SANDBOX_FAILURE_EXIT};
use crate::seccomp::{CompiledPolicy, Policy};

/// Signals passed on to the command (like tini): termination requests,
/// job control continuation and window size changes.
const FORWARDED: &[i32] = &[
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
    libc::SIGCONT,
];

fn waited_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset/sigaddset initialise it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        for &s in FORWARDED {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

fn block(set: &libc::sigset_t) -> std::io::Result<()> {
    // SAFETY: `set` is initialised; the old mask is not needed.
    let rc = unsafe { libc::sigprocmask(libc::SIG_BLOCK, set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Next blocked signal from `set`, retrying on EINTR.
fn next_signal(set: &libc::sigset_t) -> Option<i32> {
    loop {
        // SAFETY: `set` is initialised; siginfo may be NULL (sigwaitinfo(2)).
        let sig = unsafe { libc::sigwaitinfo(set, std::ptr::null_mut()) };
        if sig > 0 {
            return Some(sig);
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return None;
        }
    }
}

fn outcome_of(status: WaitStatus) -> Option<Outcome> {
    match (status.exit_status(), status.terminating_signal()) {
        (Some(code), _) => Some(Outcome::Exited(code)),
        (None, Some(sig)) => Some(Outcome::Signaled(sig)),
        _ => None,
    }
}

/// `waitpid(pid)`, or `waitpid(-1)` (any child, whatever its process
/// group) for `None`: `Ok(None)` when nothing changed. (rustix's
/// `waitpid(None)` means pid 0, the caller's process group only, which
/// would miss a command in a session of its own.)
fn wait_for(pid: Option<Pid>, block: bool) -> std::io::Result<Option<(Pid, WaitStatus)>> {
    let opts = if block {
        WaitOptions::empty()
    } else {
        WaitOptions::NOHANG
    };
    loop {
        let r = match pid {
            Some(p) => rustix::process::waitpid(Some(p), opts),
            None => rustix::process::wait(opts),
        };
        match r {
            Err(rustix::io::Errno::INTR) => continue,
            r => return r.map_err(Into::into),
        }
    }
}

fn unshare(flags: UnshareFlags) -> std::io::Result<()> {
    // SAFETY: rustix marks unshare unsafe because CLONE_FILES/CLONE_FS can
    // break assumptions of other threads; this process is single-threaded
    // and unshares namespaces only.
    unsafe { rustix::thread::unshare_unsafe(flags) }.map_err(Into::into)
}

fn os_failure(stage: &str, what: impl std::fmt::Display, e: &std::io::Error) -> Failure {
    Failure {
        stage: stage.into(),
        message: format!("{what}: {e}"),
        errno: e.raw_os_error(),
    }
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(Into::into)
}

fn kill(pid: Pid, sig: i32) {
    // ESRCH (already gone) is fine; unknown numbers cannot come from
    // sigwaitinfo on our FORWARDED set.
    if let Some(sig) = rustix::process::Signal::from_named_raw(sig) {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

/// A pid returned by fork(2) in the parent (always > 0).
fn pid_of(raw: libc::pid_t) -> std::io::Result<Pid> {
    Pid::from_raw(raw).ok_or_else(|| std::io::Error::other(format!("fork returned pid {raw}")))
}

/// The monitor: runs in the host namespaces, returns the exit code for
/// `std::process::exit` (or dies of the command's signal).
pub(crate) fn run_monitor(wire: &InitWire, prepared: &PreparedExec) -> i32 {
    let finish = |report: Report| -> i32 {
        if let Err(e) = write_json_file(&wire.report, &report) {
            eprintln!(
                "strata sandbox: writing report {}: {e}",
                wire.report.display()
            );
        }
        match report {
            Report::Finished(Outcome::Exited(c)) => c,
            Report::Finished(Outcome::Signaled(s)) => die_of(s),
            Report::Failed(f) => {
                eprintln!("strata sandbox: {} failed: {}", f.stage, f.message);
                SANDBOX_FAILURE_EXIT
            }
        }
    };

    // 0. Never the OOM killer's choice: inherited by PID 1 and the daemon
    //    (a command gets its own value back in the privilege drop). As
    //    root, before anything else: lowering needs CAP_SYS_RESOURCE
    //    (proc(5)). Root without it (a container that dropped it) keeps
    //    its value, the lowest it may have; commands still get +500.
    match crate::exec::set_oom_score_adj(crate::exec::DAEMON_OOM_SCORE_ADJ) {
        Ok(()) => {}
        // Said on stderr only for a daemon (its log); a command's stderr is
        // the caller's stream and carries nothing of ours.
        Err(e) if e.raw_os_error() == Some(libc::EACCES) && wire.run_as != RunAs::Root => {}
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => eprintln!(
            "strata sandbox: no CAP_SYS_RESOURCE: the init and daemon keep oom_score_adj {} instead of {} (commands get {})",
            std::fs::read_to_string("/proc/self/oom_score_adj")
                .unwrap_or_default()
                .trim(),
            crate::exec::DAEMON_OOM_SCORE_ADJ,
            crate::exec::COMMAND_OOM_SCORE_ADJ
        ),
        Err(e) => {
            return finish(Report::Failed(os_failure(
                "oom",
                format!(
                    "writing {} to /proc/self/oom_score_adj",
                    crate::exec::DAEMON_OOM_SCORE_ADJ
                ),
                &e,
            )))
        }
    }

    // 1. cgroups first, made (not joined) by the monitor. Layout: the
    //    Sandbox's cgroup holds the limits; its child `init` holds PID 1
    //    and the daemon (PID 1 is moved in right after its fork, step 6b);
    //    its child `commands`
    //    holds what the daemon's exec helpers start, with a pids limit
    //    below the Sandbox's (cgroup::commands_pids), so a fork bomb there
    //    leaves the daemon room to answer. The daemon gets that cgroup as
    //    open `cgroup.procs` descriptors (it has no cgroup filesystem).
    let mut prepared = prepared.clone();
    let mut keep: Vec<OwnedFd> = Vec::new();
    let mut init_cgroup: Option<Cgroup> = None;
    let cgroup = if wire.config.limits.is_empty() {
        None
    } else {
        let name = wire
            .config
            .cgroup_name
            .clone()
            .unwrap_or_else(|| format!("strata-{}", std::process::id()));
        let setup = |cg: &Cgroup| -> Result<(Cgroup, Vec<OwnedFd>), crate::cgroup::CgroupError> {
            let init = cg.child(
                crate::cgroup::INIT_CGROUP,
                &crate::cgroup::Limits::default(),
            )?;
            let commands = cg.child(
                crate::cgroup::COMMANDS_CGROUP,
                &crate::cgroup::Limits {
                    pids: wire.config.limits.pids.map(crate::cgroup::commands_pids),
                    ..Default::default()
                },
            )?;
            Ok((init, commands.open_procs()?))
        };
        match Cgroup::create(&name, &wire.config.limits) {
            Ok(cg) => match setup(&cg) {
                Ok((init, fds)) => {
                    keep = fds;
                    init_cgroup = Some(init);
                    Some(cg)
                }
                Err(e) => {
                    let _ = cg.destroy(std::time::Duration::ZERO);
                    return finish(Report::Failed(Failure {
                        stage: "cgroup".into(),
                        message: e.to_string(),
                        errno: None,
                    }));
                }
            },
            Err(e) => {
                return finish(Report::Failed(Failure {
                    stage: "cgroup".into(),
                    message: e.to_string(),
                    errno: None,
                }))
            }
        }
    };
    if wire.run_as == RunAs::Root && !keep.is_empty() {
        let list: Vec<String> = keep.iter().map(|f| f.as_raw_fd().to_string()).collect();
        prepared.push_env(crate::internal::COMMANDS_CGROUP_ENV, &list.join(","));
        prepared.keep_fds = keep.iter().map(AsRawFd::as_raw_fd).collect();
    }
    let prepared = &prepared;

    let (report, stop_requested) = monitor_inner(wire, prepared, init_cgroup.as_ref());
    drop(keep);

    // Cleanup: PID 1 is gone and with it every process of the PID
    // namespace (the kernel kills them when the namespace's init exits and
    // waits for them before PID 1 is reaped), so the cgroup is empty (the
    // monitor never joined it) and can go. When the Sandbox was asked to
    // stop (SIGTERM or SIGINT, forwarded below), whoever stops it removes
    // the cgroup once the monitor is gone: the native backend's `stop`
    // (then `delete`, `restart`) does. A Sandbox that ends by itself is
    // cleaned up here.
    if let Some(cg) = cgroup.filter(|_| !stop_requested) {
        if let Err(e) = cg.destroy(std::time::Duration::from_secs(2)) {
            eprintln!("strata sandbox: cgroup cleanup: {e}");
        }
    }
    finish(report)
}

/// The report, and whether a stop was requested (SIGTERM or SIGINT
/// reached the monitor and was forwarded).
fn monitor_inner(
    wire: &InitWire,
    prepared: &PreparedExec,
    init_cgroup: Option<&Cgroup>,
) -> (Report, bool) {
    let mut stop_requested = false;
    let report = monitor_run(wire, prepared, init_cgroup, &mut stop_requested);
    (report, stop_requested)
}

fn monitor_run(
    wire: &InitWire,
    prepared: &PreparedExec,
    init_cgroup: Option<&Cgroup>,
    stop_requested: &mut bool,
) -> Report {
    // 2. Compile the filter here, before any fork, so that a policy error
    //    is reported plainly.
    let filter = match wire.run_as {
        RunAs::User(_) => match Policy::default().compile() {
            Ok(f) => Some(f),
            Err(e) => return Report::Failed(Failure::seccomp(e.to_string())),
        },
        RunAs::Root => None,
    };

    // 3. Block the signals we wait for before forking, so none is lost.
    let set = waited_set();
    if let Err(e) = block(&set) {
        return Report::Failed(os_failure("init", "sigprocmask", &e));
    }

    // 4. Channel PID 1 -> monitor for PID 1's report.
    let (rd, wr) = match pipe() {
        Ok(p) => p,
        Err(e) => return Report::Failed(os_failure("init", "pipe", &e)),
    };

    // 4b. Channel monitor -> PID 1: a `1` once PID 1 is in the Sandbox's
    //     cgroup (step 6b), then the /etc masks (step 6c); EOF alone if it
    //     could not be moved.
    let (placed_rd, placed_wr) = match pipe() {
        Ok(p) => p,
        Err(e) => return Report::Failed(os_failure("init", "pipe", &e)),
    };

    // 5. New PID namespace: applies to the *next* child (unshare(2)), which
    //    becomes its PID 1. The monitor stays in the host's namespaces.
    if let Err(e) = unshare(UnshareFlags::NEWPID) {
        return Report::Failed(os_failure(
            "namespaces",
            "unshare(CLONE_NEWPID) (needs root)",
            &e,
        ));
    }

    // 6. Fork PID 1.
    // SAFETY: this process is single-threaded (checked in run_init), so
    // the child may allocate and run arbitrary code.
    let pid1 = unsafe { libc::fork() };
    if pid1 < 0 {
        let e = std::io::Error::last_os_error();
        return Report::Failed(os_failure("init", "fork of PID 1", &e));
    }
    if pid1 == 0 {
        drop(rd);
        drop(placed_wr);
        let report = pid1_run(wire, prepared, filter.as_ref(), placed_rd);
        let mut f = std::fs::File::from(wr);
        let _ = serde_json::to_writer(&mut f, &report);
        let _ = f.flush();
        std::process::exit(0);
    }
    drop(wr);
    drop(placed_rd);
    let pid1 = match pid_of(pid1) {
        Ok(p) => p,
        Err(e) => return Report::Failed(os_failure("init", "fork of PID 1", &e)),
    };

    // 6b. PID 1 into the Sandbox's cgroup, from here, while PID 1 builds
    //    its namespaces and view. A move into a cgroup (a write to
    //    `cgroup.procs`, cgroups(7)) takes the kernel's
    //    `cgroup_threadgroup_rwsem` for writing, and the first such write
    //    after a quiet spell waits for an RCU grace period: 13-23 ms on
    //    this host, against 0.3 ms for one that follows another within
    //    ~20 ms (docs/benchmarks.md, "The cgroup move"). Made by PID 1
    //    itself before anything else (as it was), that wait was most of a
    //    Sandbox's create; here it overlaps PID 1's setup. PID 1 forks
    //    nothing (no daemon, no command) and unshares its cgroup namespace
    //    only after the byte below, so nothing but its own setup code runs
    //    outside the limits, and what it forks is born inside.
    if let Some(cg) = init_cgroup {
        if let Err(e) = cg.add_process(pid1.as_raw_nonzero().get() as u32) {
            kill(pid1, libc::SIGKILL);
            let _ = wait_for(Some(pid1), true);
            return Report::Failed(Failure {
                stage: "cgroup".into(),
                message: format!("moving PID 1 into the Sandbox's cgroup: {e}"),
                errno: None,
            });
        }
    }
    // 6c. The host view's masks under /etc (hostview::unreadable_under),
    //     walked here while PID 1 unshares and mounts rather than by PID 1
    //     after its mounts: the walk (~1,250 entries, 3 ms here) was a
    //     sixth of a Sandbox's start (docs/benchmarks.md, "The cgroup
    //     move"). The host's /etc is the same from both mount namespaces
    //     at this point. Sent after the `1` as NUL-terminated paths (a path
    //     holds no NUL), then a `.` that says the list is whole: PID 1
    //     refuses a message without it, so a write cut short can never
    //     leave a path unmasked. A list longer than the pipe holds waits
    //     for PID 1 to read it, which it does at its masking step without
    //     waiting for anything else of ours first. If the write fails,
    //     PID 1 has ended (EPIPE) or will refuse what it got; either way
    //     its own report (step 8) says why, so nothing is decided here.
    let mut message = vec![b'1'];
    if wire.config.root == crate::mounts::RootFs::HostReadOnly {
        for p in crate::hostview::unreadable_under(std::path::Path::new(crate::hostview::ETC)) {
            message.extend_from_slice(p.as_os_str().as_encoded_bytes());
            message.push(0);
        }
    }
    message.push(b'.');
    let _ = std::fs::File::from(placed_wr).write_all(&message);

    // 7. Forward signals to PID 1 until it exits.
    let status = loop {
        match next_signal(&set) {
            // Without a usable sigwaitinfo (None), block in waitpid.
            got @ (Some(libc::SIGCHLD) | None) => match wait_for(Some(pid1), got.is_none()) {
                Ok(Some((_, status))) => break status,
                Ok(None) => {}
                Err(e) => {
                    // Cannot happen for our own child; never spin on it.
                    kill(pid1, libc::SIGKILL);
                    return Report::Failed(os_failure("init", "waitpid(PID 1)", &e));
                }
            },
            Some(sig) => {
                *stop_requested |= sig == libc::SIGTERM || sig == libc::SIGINT;
                kill(pid1, sig)
            }
        }
    };

    // 8. PID 1's report, or a failure if it died without one.
    let mut text = String::new();
    let _ = std::fs::File::from(rd).read_to_string(&mut text);
    match serde_json::from_str::<Report>(&text) {
        Ok(r) => r,
        Err(_) => Report::Failed(Failure {
            stage: "init".into(),
            message: format!(
                "sandbox PID 1 ended ({:?}) without a report",
                outcome_of(status)
            ),
            errno: None,
        }),
    }
}

/// Exit "by" signal `sig`, so that our parent's wait status is exactly the
/// command's. Core dumps are disabled first: the monitor must not dump
/// core for a command's SIGSEGV/SIGABRT.
fn die_of(sig: i32) -> i32 {
    let _ = rustix::process::setrlimit(
        rustix::process::Resource::Core,
        rustix::process::Rlimit {
            current: Some(0),
            maximum: Some(0),
        },
    );
    // SAFETY: resetting a disposition to SIG_DFL, unblocking and raising
    // the signal on ourselves; no handler code runs.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
    // Only reached for signals whose default action is not to terminate.
    128 + sig
}

/// PID 1 of the Sandbox. Returns the report for the monitor.
fn pid1_run(
    wire: &InitWire,
    prepared: &PreparedExec,
    filter: Option<&CompiledPolicy>,
    placed: OwnedFd,
) -> Report {
    match pid1_setup(wire, placed) {
        Ok(()) => {}
        Err(f) => return Report::Failed(f),
    }
    pid1_supervise(wire, prepared, filter)
}

fn pid1_setup(wire: &InitWire, placed: OwnedFd) -> Result<(), Failure> {
    // If the monitor dies (e.g. SIGKILL), take the Sandbox down with it
    // rather than leave an unsupervised namespace behind.
    // SAFETY: PR_SET_PDEATHSIG takes an integer argument only.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    };

    // The remaining namespaces but the cgroup one (below). Mount: private
    // view; UTS: own hostname; IPC: own SysV/POSIX queues and shm;
    // network unless the host's is requested.
    let mut flags = UnshareFlags::NEWNS | UnshareFlags::NEWUTS | UnshareFlags::NEWIPC;
    if wire.config.network == crate::net::Network::None {
        flags |= UnshareFlags::NEWNET;
    }
    if let Err(e) = unshare(flags) {
        return Err(os_failure(
            "namespaces",
            "unshare(NEWNS|NEWUTS|NEWIPC|NEWNET)",
            &e,
        ));
    }
    // The monitor's message (steps 6b and 6c): read at the masking step
    // of the host view, or below for any other root.
    let mut placed = Some(std::fs::File::from(placed));
    let mut masks_from_monitor = || match placed.take().map(read_placement) {
        Some(Ok(Some(masks))) => Ok(masks),
        Some(Ok(None)) | None => Err(crate::mounts::MountError::Step {
            step: "wait for the monitor's move into the cgroup and /etc's masks",
            path: crate::hostview::ETC.into(),
            source: std::io::Error::other(
                "the monitor ended before moving PID 1 into the Sandbox's cgroup",
            ),
        }),
        Some(Err(source)) => Err(crate::mounts::MountError::Step {
            step: "read the monitor's /etc masks",
            path: crate::hostview::ETC.into(),
            source,
        }),
    };
    crate::mounts::build_view_with(&wire.config, &mut masks_from_monitor).map_err(|e| Failure {
        stage: "mount".into(),
        message: e.to_string(),
        errno: match &e {
            crate::mounts::MountError::Step { source, .. } => source.raw_os_error(),
            _ => None,
        },
    })?;
    let host = wire.config.hostname.as_deref().unwrap_or("strata");
    rustix::system::sethostname(host.as_bytes())
        .map_err(|e| os_failure("hostname", format!("sethostname({host:?})"), &e.into()))?;
    if wire.config.network == crate::net::Network::None {
        crate::net::loopback_up().map_err(|e| Failure {
            stage: "network".into(),
            message: e.to_string(),
            errno: None,
        })?;
    }
    // By here the monitor has moved this process into the Sandbox's cgroup
    // (its step 6b, overlapping the setup above): the view's masking step
    // read its message, or, for a rootfs, it is read now; EOF alone means
    // it could not, and the monitor reports why. Only then the cgroup
    // namespace, so that /proc/self/cgroup is rooted at the Sandbox's
    // cgroup, and only then any fork.
    match placed.take().map(read_placement) {
        None | Some(Ok(Some(_))) => {}
        Some(Ok(None)) => {
            return Err(Failure {
                stage: "cgroup".into(),
                message: "the monitor did not move PID 1 into the Sandbox's cgroup".into(),
                errno: None,
            })
        }
        Some(Err(e)) => return Err(os_failure("cgroup", "waiting for the monitor", &e)),
    }
    if let Err(e) = unshare(UnshareFlags::NEWCGROUP) {
        return Err(os_failure("namespaces", "unshare(NEWCGROUP)", &e));
    }
    Ok(())
}

/// The monitor's message to PID 1 (steps 6b and 6c), read to its end:
/// `None` if it is empty (the monitor could not move PID 1), else the
/// /etc masks between the leading `1` and the closing `.`, each path
/// NUL-terminated. Anything else (no `.`: a message cut short) is an
/// error, never a shorter list.
fn read_placement(mut f: std::fs::File) -> std::io::Result<Option<Vec<std::path::PathBuf>>> {
    use std::os::unix::ffi::OsStrExt;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)?;
    if bytes.is_empty() {
        return Ok(None);
    }
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let list = bytes
        .strip_prefix(b"1")
        .ok_or_else(|| bad("the monitor's message does not start with its `1`"))?
        .strip_suffix(b".")
        .ok_or_else(|| bad("the monitor's message was cut short (no closing `.`)"))?;
    if list.is_empty() {
        return Ok(Some(Vec::new()));
    }
    let entries = list
        .strip_suffix(b"\0")
        .ok_or_else(|| bad("the monitor's /etc masks do not end with a NUL"))?;
    Ok(Some(
        entries
            .split(|&b| b == 0)
            .map(|p| std::ffi::OsStr::from_bytes(p).into())
            .collect(),
    ))
}

fn pid1_supervise(
    wire: &InitWire,
    prepared: &PreparedExec,
    filter: Option<&CompiledPolicy>,
) -> Report {
    // Error channel command -> PID 1: close-on-exec, so a successful
    // execve closes it (EOF, nothing read) and a failure before execve
    // arrives as JSON. This is how a missing program is an error (ENOENT)
    // and not a guessed exit code 127.
    let (rd, wr) = match pipe() {
        Ok(p) => p,
        Err(e) => return Report::Failed(os_failure("init", "pipe", &e)),
    };
    // SAFETY: PID 1 is single-threaded; the child only runs our code.
    let child = unsafe { libc::fork() };
    if child < 0 {
        let e = std::io::Error::last_os_error();
        return Report::Failed(os_failure("init", "fork of the command", &e));
    }
    if child == 0 {
        drop(rd);
        let err = match (wire.run_as, filter) {
            (RunAs::User(_), Some(f)) => crate::exec::drop_privileges_and_exec(prepared, f),
            (RunAs::Root, _) => crate::exec::exec_privileged(prepared),
            (RunAs::User(_), None) => {
                // Unreachable by construction (the monitor compiles the
                // filter for every User); refuse rather than run unfiltered.
                let f = Failure::seccomp("no seccomp filter for a user command");
                let mut w = std::fs::File::from(wr);
                let _ = serde_json::to_writer(&mut w, &f);
                // SAFETY: _exit ends this child without running destructors.
                unsafe { libc::_exit(127) };
            }
        };
        let mut w = std::fs::File::from(wr);
        let _ = serde_json::to_writer(&mut w, &Failure::from(&err));
        // SAFETY: as above.
        unsafe { libc::_exit(127) };
    }
    drop(wr);
    let child = match pid_of(child) {
        Ok(p) => p,
        Err(e) => return Report::Failed(os_failure("init", "fork of the command", &e)),
    };
    let mut text = String::new();
    let _ = std::fs::File::from(rd).read_to_string(&mut text);
    // Anything on the channel means the command never ran: even garbage is
    // reported as a failure, never as the command's exit status.
    let exec_failure: Option<Failure> = if text.is_empty() {
        None
    } else {
        Some(serde_json::from_str(&text).unwrap_or_else(|_| Failure {
            stage: "exec".into(),
            message: format!("the command failed before execve: {text}"),
            errno: None,
        }))
    };

    // Supervise: reap everything (orphans are re-parented to us as PID 1
    // of the namespace, pid_namespaces(7)), forward signals to the command,
    // stop when the command itself has ended.
    let set = waited_set();
    let raw = 'outer: loop {
        match next_signal(&set) {
            got @ (Some(libc::SIGCHLD) | None) => {
                // Without a usable sigwaitinfo (None), block for one child.
                let mut block = got.is_none();
                loop {
                    match wait_for(None, block) {
                        Ok(Some((pid, status))) if pid == child => break 'outer status,
                        // An orphan (or a grandchild) reaped; look for more.
                        Ok(Some(_)) => block = false,
                        Ok(None) => break,
                        // ECHILD cannot happen while the command is unreaped.
                        Err(e) => return Report::Failed(os_failure("init", "waitpid", &e)),
                    }
                }
            }
            Some(sig) => kill(child, sig),
        }
    };
    if let Some(f) = exec_failure {
        return Report::Failed(f);
    }
    match outcome_of(raw) {
        Some(o) => Report::Finished(o),
        None => Report::Failed(Failure {
            stage: "init".into(),
            message: format!("unexpected wait status {raw:?}"),
            errno: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::read_placement;
    use std::io::Write;
    use std::os::unix::ffi::OsStrExt;

    fn message(bytes: &[u8]) -> std::fs::File {
        let (rd, wr) = super::pipe().unwrap();
        std::fs::File::from(wr).write_all(bytes).unwrap();
        std::fs::File::from(rd)
    }

    /// The monitor's message as PID 1 reads it: EOF alone is "not moved",
    /// a `1` then NUL-terminated paths (any bytes but NUL) are the masks,
    /// anything else is refused.
    #[test]
    fn the_monitors_message_is_read_exactly() {
        assert_eq!(read_placement(message(b"")).unwrap(), None);
        assert_eq!(read_placement(message(b"1.")).unwrap(), Some(vec![]));
        let masks = read_placement(message(b"1/etc/shadow\0/etc/ca\xffkey\0."))
            .unwrap()
            .unwrap();
        assert_eq!(masks.len(), 2);
        assert_eq!(masks[0], std::path::Path::new("/etc/shadow"));
        assert_eq!(masks[1].as_os_str().as_bytes(), b"/etc/ca\xffkey");
        // Cut short (no closing `.`, or a path without its NUL), or not
        // from the monitor: refused, never read as a shorter list.
        for bad in [
            &b"1"[..],
            b"1/etc/shadow\0",
            b"1/etc/shadow\0/etc/gsha",
            b"1/etc/shadow.",
            b"x/etc/shadow\0.",
        ] {
            let e = read_placement(message(bad)).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{bad:?}");
        }
    }
}
