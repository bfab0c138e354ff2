//! The hidden subcommands a strata binary answers when re-executed, and
//! how their settings travel.
//!
//! * `__strata-init`: the Sandbox init (monitor + PID 1), see [`crate::ns`].
//! * `__strata-exec`: the single-threaded exec helper: a multi-threaded
//!   daemon starts it with a plain `std::process::Command` and it drops
//!   privileges and `execve`s the command ([`exec_helper_command`]).
//! * `__strata-daemon-view`: a container's entrypoint, which gives the
//!   daemon the same two-layer /dev as a native Sandbox and then execs it
//!   ([`crate::daemon_view`]). Its settings (the command-only masks) are
//!   no secret and the Engine starts it, so they stay in its argv
//!   ([`encode_argv`]).
//!
//! For the init and the exec helper, argv is `EXE SUBCOMMAND FD` and
//! nothing else: argv is world-readable in
//! /proc/PID/cmdline until the process execs, so the settings (the
//! Sandbox's config, the command's argv and environment, which may carry
//! secrets) travel in a sealed memfd the re-executed process inherits as
//! descriptor FD and reads first thing (`SETTINGS_JSON NUL NAME=VALUE NUL
//! ... -- NUL ARGV NUL ...`; no item can hold a NUL, so the split is
//! unambiguous, and argv/env stay arbitrary bytes). /proc/PID/fd of a root
//! process is closed to the commands' uid (ptrace access mode checks,
//! proc(5)). The exec helper reports a failure before `execve` on a pipe
//! it inherits the same way, close-on-exec: EOF with nothing written means
//! the command started. No environment variable carries settings, and no
//! descriptor is inherited by unrelated children of a multi-threaded
//! parent: each one is close-on-exec there and made inheritable only in
//! the one child, after fork (`pre_exec`, fcntl(2) only).

use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::exec::{ExecSpec, Failure, Identity, Session, DEFAULT_GID, DEFAULT_UID};
use crate::ns::{RunAs, SandboxConfig, SpawnError, SANDBOX_FAILURE_EXIT};
use crate::rlimit::Rlimit;
use crate::seccomp::Policy;

/// `argv[1]` of the Sandbox init.
pub const INIT_ARG: &str = "__strata-init";
/// `argv[1]` of the exec helper.
pub const EXEC_ARG: &str = "__strata-exec";
/// Exit code of the exec helper when it failed before `execve` (its
/// report pipe says why).
pub const EXEC_HELPER_FAILURE_EXIT: i32 = 127;
/// Most bytes of a failure report the reader takes (a report is a few
/// hundred bytes; anything longer is not one).
pub const MAX_REPORT_BYTES: usize = 64 << 10;
/// Most bytes of settings a re-executed process reads: argv and env up to
/// their own limit, plus the JSON settings.
const MAX_SETTINGS_BYTES: usize = crate::spec::MAX_ARGV_ENV_BYTES + (1 << 20);
/// Environment variable naming, to the Sandbox's daemon, the descriptors
/// of the commands' cgroup (`cgroup.procs` files, comma-separated numbers;
/// not a secret, and the daemon's environment is readable by root only).
pub const COMMANDS_CGROUP_ENV: &str = "STRATA_COMMANDS_CGROUP_FDS";

/// Settings of `__strata-init`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct InitWire {
    pub config: SandboxConfig,
    pub run_as: RunAs,
    pub cwd: PathBuf,
    pub rlimits: Vec<Rlimit>,
    #[serde(default)]
    pub session: Session,
    /// `setsid` in the monitor before anything else
    /// ([`crate::SandboxCommand::new_session`]).
    #[serde(default)]
    pub new_session: bool,
    pub report: PathBuf,
}

/// Settings of `__strata-exec`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ExecWire {
    identity: Identity,
    #[serde(default)]
    session: Session,
    cwd: PathBuf,
    rlimits: Vec<Rlimit>,
    /// The write end of the report pipe: a [`Failure`] as JSON if the
    /// helper fails before execve.
    report_fd: RawFd,
    /// `cgroup.procs` descriptors of the commands' cgroup to join (one per
    /// v1 hierarchy, one on v2) before anything else.
    #[serde(default)]
    join_cgroup: Vec<RawFd>,
    /// A helper started ahead of its exec (see [`crate::prestart`]): after
    /// the cgroup join, prepare and wait on this socket for the one
    /// command to run. `report_fd` is then unused: each request brings its
    /// own report pipe.
    #[serde(default)]
    wait_request: Option<RawFd>,
}

/// The settings as separate items: `SETTINGS_JSON NAME=VALUE... -- ARGV...`.
fn settings_items(json: &str, env: &[(OsString, OsString)], argv: &[OsString]) -> Vec<OsString> {
    let mut out = Vec::with_capacity(2 + env.len() + argv.len());
    out.push(OsString::from(json));
    for (k, v) in env {
        let mut kv = k.clone();
        kv.push("=");
        kv.push(v);
        out.push(kv);
    }
    out.push(OsString::from("--"));
    out.extend(argv.iter().cloned());
    out
}

/// `SUB` and the settings as argv items (the daemon-view entrypoint only:
/// argv is world-readable).
pub(crate) fn encode_argv(
    sub: &str,
    json: &str,
    env: &[(OsString, OsString)],
    argv: &[OsString],
) -> Vec<OsString> {
    let mut out = vec![OsString::from(sub)];
    out.extend(settings_items(json, env, argv));
    out
}

/// The settings as one byte string: every item followed by a NUL.
pub(crate) fn encode_settings(
    json: &str,
    env: &[(OsString, OsString)],
    argv: &[OsString],
) -> Vec<u8> {
    let mut out = Vec::new();
    for item in settings_items(json, env, argv) {
        out.extend_from_slice(item.as_bytes());
        out.push(0);
    }
    out
}

type Decoded = (String, Vec<(OsString, OsString)>, Vec<OsString>);

/// Inverse of [`settings_items`].
fn decode_items(items: &[&[u8]]) -> Result<Decoded, String> {
    let (json, rest) = items.split_first().ok_or("missing settings")?;
    let json = std::str::from_utf8(json)
        .map_err(|_| "settings are not UTF-8")?
        .to_string();
    let sep = rest.iter().position(|a| *a == b"--").ok_or("missing --")?;
    let mut env = Vec::new();
    for b in &rest[..sep] {
        // An env item always has '=', and "--" never does, so the split
        // is unambiguous.
        let eq = b
            .iter()
            .position(|&c| c == b'=')
            .ok_or("env item without '='")?;
        env.push((
            OsStr::from_bytes(&b[..eq]).to_os_string(),
            OsStr::from_bytes(&b[eq + 1..]).to_os_string(),
        ));
    }
    let argv = rest[sep + 1..]
        .iter()
        .map(|a| OsStr::from_bytes(a).to_os_string())
        .collect();
    Ok((json, env, argv))
}

/// Inverse of [`encode_argv`] for `args` = `argv[2..]`.
pub(crate) fn decode_argv(args: &[OsString]) -> Result<Decoded, String> {
    let items: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    decode_items(&items)
}

/// Inverse of [`encode_settings`].
fn decode_settings(bytes: &[u8]) -> Result<Decoded, String> {
    let body = bytes
        .strip_suffix(&[0])
        .ok_or("settings do not end with NUL")?;
    let items: Vec<&[u8]> = body.split(|&b| b == 0).collect();
    decode_items(&items)
}

/// A sealed memfd holding `bytes` (close-on-exec until a child clears it).
fn settings_memfd(bytes: &[u8]) -> std::io::Result<OwnedFd> {
    use rustix::fs::{MemfdFlags, SealFlags};
    let fd = rustix::fs::memfd_create(
        "strata-settings",
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )?;
    let mut f = std::fs::File::from(fd);
    f.write_all(bytes)?;
    // Nobody changes the settings after this, not even by mistake.
    rustix::fs::fcntl_add_seals(
        &f,
        SealFlags::SHRINK | SealFlags::GROW | SealFlags::WRITE | SealFlags::SEAL,
    )?;
    Ok(OwnedFd::from(f))
}

/// Take ownership of inherited descriptor `arg` (a decimal number) after
/// checking that it is open.
fn inherited_fd(arg: &OsStr) -> Result<OwnedFd, String> {
    let n: RawFd = arg
        .to_str()
        .and_then(|s| s.parse().ok())
        .filter(|n| *n > 2)
        .ok_or_else(|| format!("{arg:?} is not a descriptor number above 2"))?;
    // SAFETY: borrowed only for fcntl(F_GETFD), which fails with EBADF on
    // a closed descriptor and touches nothing.
    rustix::io::fcntl_getfd(unsafe { BorrowedFd::borrow_raw(n) })
        .map_err(|e| format!("descriptor {n}: {e}"))?;
    // SAFETY: `n` is open (checked above) and was passed to this process
    // for it alone to own (its parent made it inheritable in this child).
    Ok(unsafe { OwnedFd::from_raw_fd(n) })
}

/// Read the settings memfd named by `arg` (from offset 0: the file offset
/// is shared with the writer) and close it.
fn read_settings(arg: Option<&OsString>) -> Result<Decoded, String> {
    read_settings_fd(inherited_fd(arg.ok_or("missing settings descriptor")?)?)
}

/// [`read_settings`] of a descriptor this process owns.
fn read_settings_fd(fd: OwnedFd) -> Result<Decoded, String> {
    let f = std::fs::File::from(fd);
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let n = f
            .read_at(&mut chunk, buf.len() as u64)
            .map_err(|e| format!("reading the settings: {e}"))?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > MAX_SETTINGS_BYTES {
            return Err(format!("settings longer than {MAX_SETTINGS_BYTES} bytes"));
        }
    }
    decode_settings(&buf)
}

/// Make `fds` (close-on-exec here) inheritable in the child `cmd` spawns,
/// and nowhere else: fcntl(2) in the forked child, which is async-signal-
/// safe, so this is sound even in a multi-threaded parent. The closure
/// owns `owned`, so the parent's copies close when `cmd` is dropped.
fn inherit_in_child(cmd: &mut std::process::Command, owned: Vec<OwnedFd>, borrowed: Vec<RawFd>) {
    // SAFETY: the closure runs between fork and exec and calls only
    // fcntl(F_SETFD) on descriptors that are open in the child (copies of
    // ours: `owned` lives in the closure, `borrowed` for the process's
    // life); no allocation, no lock.
    unsafe {
        cmd.pre_exec(move || {
            for fd in owned
                .iter()
                .map(AsRawFd::as_raw_fd)
                .chain(borrowed.iter().copied())
            {
                rustix::io::fcntl_setfd(BorrowedFd::borrow_raw(fd), rustix::io::FdFlags::empty())?;
            }
            Ok(())
        });
    }
}

/// The commands' cgroup as the Sandbox's daemon inherited it (see
/// [`COMMANDS_CGROUP_ENV`]): `Ok(empty)` outside a Sandbox with limits.
static COMMANDS_CGROUP: OnceLock<Result<Vec<OwnedFd>, String>> = OnceLock::new();

/// Take the descriptors named in [`COMMANDS_CGROUP_ENV`]: each must be an
/// open `cgroup.procs` file; made close-on-exec again, so only the exec
/// helpers get them (by [`exec_helper_command`]).
fn adopt_commands_cgroup() {
    let get = || -> Result<Vec<OwnedFd>, String> {
        let Some(list) = std::env::var_os(COMMANDS_CGROUP_ENV) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for n in list.as_bytes().split(|&b| b == b',') {
            let fd = inherited_fd(OsStr::from_bytes(n))?;
            let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
                .map_err(|e| format!("descriptor {}: {e}", fd.as_raw_fd()))?;
            if !link.ends_with("cgroup.procs") {
                return Err(format!(
                    "descriptor {} is {}, not a cgroup.procs file",
                    fd.as_raw_fd(),
                    link.display()
                ));
            }
            rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC)
                .map_err(|e| format!("descriptor {}: {e}", fd.as_raw_fd()))?;
            out.push(fd);
        }
        Ok(out)
    };
    let _ = COMMANDS_CGROUP.set(get().map_err(|e| format!("{COMMANDS_CGROUP_ENV}: {e}")));
}

/// Is this process single-threaded? The init and the helper rely on it:
/// per-thread setresuid, fork without async-signal-safety concerns.
pub(crate) fn thread_count() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Call first thing in `main` of every binary that may be re-executed as a
/// Sandbox init, exec helper or self-check command (the strata CLI, the
/// daemon, test probes).
/// If `argv[1]` is one of the hidden subcommands, run it and exit (never
/// returns); otherwise return at once and let `main` go on.
///
/// It must run before any thread is started: both roles assume a
/// single-threaded process and refuse to run otherwise.
pub fn maybe_run_internal() {
    let args: Vec<OsString> = std::env::args_os().collect();
    let sub = args.get(1);
    let code = if sub.is_some_and(|s| s == INIT_ARG) {
        run_init(args.get(2))
    } else if sub.is_some_and(|s| s == EXEC_ARG) {
        run_exec_helper(args.get(2))
    } else if sub.is_some_and(|s| s == crate::selfcheck::SELFCHECK_ARG) {
        crate::selfcheck::selfcheck_main()
    } else if sub.is_some_and(|s| s == crate::daemon_view::DAEMON_VIEW_ARG) {
        crate::daemon_view::daemon_view_main(&args[2..])
    } else {
        // Any other role (the daemon among them): keep the commands'
        // cgroup if the Sandbox's init handed it over.
        adopt_commands_cgroup();
        return;
    };
    std::process::exit(code);
}

fn run_init(fd: Option<&OsString>) -> i32 {
    let fail = |report: Option<&Path>, message: String| -> i32 {
        let f = Failure {
            stage: "init".into(),
            message,
            errno: None,
        };
        if let Some(r) = report {
            let _ = write_json_file(r, &crate::ns::Report::Failed(f.clone()));
        }
        eprintln!("strata sandbox init: {}", f.message);
        SANDBOX_FAILURE_EXIT
    };
    let (json, env, argv) = match read_settings(fd) {
        Ok(d) => d,
        Err(e) => return fail(None, format!("bad {INIT_ARG} settings: {e}")),
    };
    let wire: InitWire = match serde_json::from_str(&json) {
        Ok(w) => w,
        Err(e) => return fail(None, format!("bad {INIT_ARG} settings: {e}")),
    };
    match thread_count() {
        Some(1) => {}
        n => {
            return fail(
                Some(&wire.report),
                format!("{INIT_ARG} must run single-threaded (threads: {n:?}); call maybe_run_internal() before starting threads"),
            )
        }
    }
    // First, so that no process of the Sandbox ever has the caller's
    // terminal: a new session has no controlling terminal (setsid(2)),
    // and PID 1, the daemon and the commands inherit that.
    if wire.new_session {
        if let Err(e) = rustix::process::setsid() {
            return fail(
                Some(&wire.report),
                format!("setsid (a new session without the caller's terminal): {e}; the monitor must not be started as a process group leader"),
            );
        }
    }
    let identity = match wire.run_as {
        RunAs::User(i) => i,
        RunAs::Root => Identity::default(),
    };
    let spec = ExecSpec {
        argv,
        env,
        cwd: wire.cwd.clone(),
        identity,
        rlimits: wire.rlimits.clone(),
        session: wire.session,
    };
    let prepared = match spec.prepare() {
        Ok(p) => p,
        Err(e) => return fail(Some(&wire.report), e.to_string()),
    };
    crate::init::run_monitor(&wire, &prepared)
}

fn run_exec_helper(fd: Option<&OsString>) -> i32 {
    let (json, env, argv) = match read_settings(fd) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("strata exec helper: bad settings: {e}");
            return EXEC_HELPER_FAILURE_EXIT;
        }
    };
    let wire: ExecWire = match serde_json::from_str(&json) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("strata exec helper: bad settings: {e}");
            return EXEC_HELPER_FAILURE_EXIT;
        }
    };
    // A helper started ahead of its exec: the same first steps, then it
    // waits for its command (crate::prestart), and a failure of these
    // steps is that command's report.
    if let Some(n) = wire.wait_request {
        let socket = match inherited_fd(OsStr::new(&n.to_string())) {
            Ok(fd) => fd,
            Err(e) => {
                eprintln!("strata exec helper: request socket: {e}");
                return EXEC_HELPER_FAILURE_EXIT;
            }
        };
        let ready = single_threaded().and_then(|()| join_commands_cgroup(&wire.join_cgroup));
        return crate::prestart::wait_and_run(socket, ready);
    }
    let report = match inherited_fd(OsStr::new(&wire.report_fd.to_string())) {
        Ok(fd) => Some(std::fs::File::from(fd)),
        Err(e) => {
            eprintln!("strata exec helper: report pipe: {e}");
            return EXEC_HELPER_FAILURE_EXIT;
        }
    };
    if let Err(f) = single_threaded().and_then(|()| join_commands_cgroup(&wire.join_cgroup)) {
        return report_failure(report, f);
    }
    let filter = match Policy::default().compile() {
        Ok(f) => f,
        Err(e) => return report_failure(report, Failure::seccomp(e.to_string())),
    };
    run_command(wire, env, argv, report, &filter)
}

/// The exec helper's report of a failure before `execve`: on the report
/// pipe, if there is one, and on stderr; returns the helper's exit code.
pub(crate) fn report_failure(report: Option<std::fs::File>, f: Failure) -> i32 {
    if let Some(mut p) = report {
        let _ = serde_json::to_writer(&mut p, &f);
    }
    eprintln!("strata exec helper: {}", f.message);
    EXEC_HELPER_FAILURE_EXIT
}

fn single_threaded() -> Result<(), Failure> {
    match thread_count() {
        Some(1) => Ok(()),
        _ => Err(Failure {
            stage: "exec".into(),
            message: format!("{EXEC_ARG} must run single-threaded"),
            errno: None,
        }),
    }
}

/// Into the commands' cgroup first, before anything of the command
/// runs: its pids limit is below the Sandbox's, so that the daemon
/// keeps room to answer and start execs while a fork bomb holds every
/// pid the commands may have. Writing "0" moves the writer (cgroups(7)).
fn join_commands_cgroup(fds: &[RawFd]) -> Result<(), Failure> {
    for &n in fds {
        inherited_fd(OsStr::new(&n.to_string()))
            .and_then(|fd| {
                rustix::io::write(&fd, b"0")
                    .map(drop)
                    .map_err(|e| e.to_string())
            })
            .map_err(|e| Failure {
                stage: "cgroup".into(),
                message: format!("joining the commands' cgroup (descriptor {n}): {e}"),
                errno: None,
            })?;
    }
    Ok(())
}

/// The command of a request a pre-started helper received
/// ([`crate::prestart`]): its settings memfd, then as [`run_exec_helper`].
pub(crate) fn run_request(
    settings: OwnedFd,
    report: Option<std::fs::File>,
    filter: &crate::seccomp::CompiledPolicy,
) -> i32 {
    let bad = |e: String| Failure {
        stage: "exec".into(),
        message: format!("bad settings: {e}"),
        errno: None,
    };
    let (json, env, argv) = match read_settings_fd(settings) {
        Ok(d) => d,
        Err(e) => return report_failure(report, bad(e)),
    };
    match serde_json::from_str::<ExecWire>(&json) {
        Ok(w) if w.wait_request.is_none() && w.join_cgroup.is_empty() => {
            run_command(w, env, argv, report, filter)
        }
        Ok(_) => report_failure(report, bad("not a command's settings".into())),
        Err(e) => report_failure(report, bad(e.to_string())),
    }
}

/// Prepare the command and drop privileges into it; returns only on failure.
fn run_command(
    wire: ExecWire,
    env: Vec<(OsString, OsString)>,
    argv: Vec<OsString>,
    report: Option<std::fs::File>,
    filter: &crate::seccomp::CompiledPolicy,
) -> i32 {
    let spec = ExecSpec {
        argv,
        env,
        cwd: wire.cwd,
        identity: wire.identity,
        rlimits: wire.rlimits,
        session: wire.session,
    };
    let prepared = match spec.prepare() {
        Ok(p) => p,
        Err(e) => {
            return report_failure(
                report,
                Failure {
                    stage: "exec".into(),
                    message: e.to_string(),
                    errno: None,
                },
            )
        }
    };
    let err = crate::exec::drop_privileges_and_exec(&prepared, filter);
    report_failure(report, Failure::from(&err))
}

/// The exec helper, ready to spawn: set stdio on `command`, spawn it, then
/// **drop `command`** (it holds our copy of the report pipe's write end;
/// the report never reaches EOF while it lives) and read `report`.
#[derive(Debug)]
pub struct HelperCommand {
    pub command: std::process::Command,
    pub report: HelperReport,
}

impl HelperCommand {
    /// Spawn, drop the command, return the child and its report.
    pub fn spawn(self) -> std::io::Result<(std::process::Child, HelperReport)> {
        let HelperCommand {
            mut command,
            report,
        } = self;
        let child = command.spawn()?;
        drop(command);
        Ok((child, report))
    }
}

/// The read end of an exec helper's report pipe.
#[derive(Debug)]
pub struct HelperReport(OwnedFd);

impl HelperReport {
    /// The pipe, for an async reader (read at most [`MAX_REPORT_BYTES`]
    /// and decide with [`parse_report`]).
    pub fn into_fd(self) -> OwnedFd {
        self.0
    }

    /// Block until the helper `execve`d the command or exited, and return
    /// its failure, if it reported one.
    pub fn read_blocking(self) -> std::io::Result<Option<Failure>> {
        let mut buf = Vec::new();
        std::fs::File::from(self.0)
            .take(MAX_REPORT_BYTES as u64 + 1)
            .read_to_end(&mut buf)?;
        Ok(parse_report(&buf))
    }
}

/// What the exec helper's report pipe held up to EOF: nothing means the
/// command started (the write end closed at its `execve`); anything else
/// means it never ran, even bytes that are not a report.
pub fn parse_report(bytes: &[u8]) -> Option<Failure> {
    if bytes.is_empty() {
        return None;
    }
    if bytes.len() > MAX_REPORT_BYTES {
        return Some(Failure {
            stage: "exec".into(),
            message: format!("the exec helper's report is longer than {MAX_REPORT_BYTES} bytes"),
            errno: None,
        });
    }
    Some(serde_json::from_slice(bytes).unwrap_or_else(|_| Failure {
        stage: "exec".into(),
        message: format!(
            "the command failed before execve: {}",
            String::from_utf8_lossy(bytes)
        ),
        errno: None,
    }))
}

/// A command that runs `spec` through the exec helper: `exe` (a binary
/// calling [`maybe_run_internal`]) re-executes itself single-threaded as
/// `EXE __strata-exec FD`, reads its settings from the memfd FD, drops
/// privileges and execs the command. If it fails before `execve`, it
/// writes a [`Failure`] to the report pipe and exits with
/// [`EXEC_HELPER_FAILURE_EXIT`]. Started from inside a Sandbox whose init
/// handed over the commands' cgroup, the helper joins it first. The
/// caller sets stdio and spawns; the helper must run as root.
pub fn exec_helper_command(exe: &Path, spec: &ExecSpec) -> Result<HelperCommand, SpawnError> {
    helper_command(exe, spec)
}

fn helper_command(exe: &Path, spec: &ExecSpec) -> Result<HelperCommand, SpawnError> {
    spec.prepare()?;
    let join = commands_cgroup_fds()?;
    let (report_r, report_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| SpawnError::Settings { source: e.into() })?;
    let settings = wire_memfd(spec, report_w.as_raw_fd(), join.clone(), None)?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg(EXEC_ARG).arg(settings.as_raw_fd().to_string());
    cmd.env_clear();
    inherit_in_child(&mut cmd, vec![settings, report_w], join);
    Ok(HelperCommand {
        command: cmd,
        report: HelperReport(report_r),
    })
}

/// The descriptors of the commands' cgroup a helper joins (none outside
/// a Sandbox with limits).
fn commands_cgroup_fds() -> Result<Vec<RawFd>, SpawnError> {
    match COMMANDS_CGROUP.get() {
        None => Ok(Vec::new()),
        Some(Ok(fds)) => Ok(fds.iter().map(AsRawFd::as_raw_fd).collect()),
        Some(Err(message)) => Err(SpawnError::CommandsCgroup {
            message: message.clone(),
        }),
    }
}

/// A helper's settings in a sealed memfd.
fn wire_memfd(
    spec: &ExecSpec,
    report_fd: RawFd,
    join_cgroup: Vec<RawFd>,
    wait_request: Option<RawFd>,
) -> Result<OwnedFd, SpawnError> {
    let wire = ExecWire {
        identity: spec.identity,
        session: spec.session,
        cwd: spec.cwd.clone(),
        rlimits: spec.rlimits.clone(),
        report_fd,
        join_cgroup,
        wait_request,
    };
    let json =
        serde_json::to_string(&wire).map_err(|source| crate::ns::SpawnError::Encode { source })?;
    settings_memfd(&encode_settings(&json, &spec.env, &spec.argv))
        .map_err(|source| SpawnError::Settings { source })
}

/// Start the helper [`crate::prestart`] keeps ahead of its exec: it joins
/// the commands' cgroup and waits on `socket` (its end of the request
/// socketpair) for one command. Its settings name no command. Started
/// with posix_spawn ([`crate::spawn`]): the memfd, the socket and the
/// cgroup descriptors become inheritable in the child alone, as
/// [`inherit_in_child`] makes them for a forked one.
pub(crate) fn spawn_waiting_helper(
    exe: &Path,
    socket: OwnedFd,
) -> Result<crate::spawn::SpawnedChild, SpawnError> {
    let join = commands_cgroup_fds()?;
    let spec = ExecSpec {
        argv: Vec::new(),
        env: Vec::new(),
        cwd: PathBuf::from("/"),
        identity: Identity::new(DEFAULT_UID, DEFAULT_GID)?,
        rlimits: Vec::new(),
        session: Session::default(),
    };
    let settings = wire_memfd(&spec, -1, join.clone(), Some(socket.as_raw_fd()))?;
    let fd_arg = settings.as_raw_fd().to_string();
    let mut inherit = vec![settings.as_raw_fd(), socket.as_raw_fd()];
    inherit.extend(join);
    crate::spawn::spawn_inheriting(
        exe,
        &[OsStr::new(EXEC_ARG), OsStr::new(&fd_arg)],
        &inherit,
        crate::spawn::ChildStdio::Null,
        true,
    )
    .map_err(|source| SpawnError::StartHelper {
        exe: exe.to_path_buf(),
        source,
    })
}

/// A request's settings for a pre-started helper: the memfd, and the
/// report pipe (the read end for the caller, the write end to send).
pub(crate) fn request_settings(
    spec: &ExecSpec,
) -> Result<(OwnedFd, HelperReport, OwnedFd), SpawnError> {
    spec.prepare()?;
    let (report_r, report_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| SpawnError::Settings { source: e.into() })?;
    let settings = wire_memfd(spec, -1, Vec::new(), None)?;
    Ok((settings, HelperReport(report_r), report_w))
}

/// `EXE __strata-init FD` with `settings` in the memfd FD (see the module
/// docs), for [`crate::SandboxCommand::spawn`].
pub(crate) fn init_command(
    exe: &Path,
    json: &str,
    env: &[(OsString, OsString)],
    argv: &[OsString],
) -> Result<std::process::Command, SpawnError> {
    let settings = settings_memfd(&encode_settings(json, env, argv))
        .map_err(|source| SpawnError::Settings { source })?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg(INIT_ARG).arg(settings.as_raw_fd().to_string());
    // The init needs no environment; the command's env is in the settings.
    cmd.env_clear();
    inherit_in_child(&mut cmd, vec![settings], Vec::new());
    Ok(cmd)
}

/// Write JSON atomically enough for a report: to a temp name, then rename.
pub(crate) fn write_json_file<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    serde_json::to_writer(&mut f, value)?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    std::fs::rename(tmp, path)
}

#[cfg(test)]
#[path = "internal_tests.rs"]
mod tests;
