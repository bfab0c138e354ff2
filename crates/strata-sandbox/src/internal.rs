//! The hidden subcommands a strata binary answers when re-executed, and
//! their argv encoding.
//!
//! * `__strata-init`: the Sandbox init (monitor + PID 1), see [`crate::ns`].
//! * `__strata-exec`: the single-threaded exec helper: a multi-threaded
//!   daemon starts it with a plain `std::process::Command` and it drops
//!   privileges and `execve`s the command ([`exec_helper_command`]).
//! * `__strata-daemon-view`: a container's entrypoint, which gives the
//!   daemon the same two-layer /dev as a native Sandbox and then execs it
//!   ([`crate::daemon_view`]).
//!
//! argv layout (both): `EXE SUBCOMMAND SETTINGS_JSON NAME=VALUE... -- ARGV...`.
//! The command's environment and argv travel as separate argv items, not
//! inside the JSON, so they can be arbitrary bytes and as large as execve
//! allows for the command itself; the JSON holds only small settings. No
//! environment variable and no inherited file descriptor is used, so
//! nothing leaks into unrelated children of a multi-threaded parent.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::exec::{ExecSpec, Failure, Identity, Session};
use crate::ns::{RunAs, SandboxConfig, SANDBOX_FAILURE_EXIT};
use crate::rlimit::Rlimit;
use crate::seccomp::Policy;

/// `argv[1]` of the Sandbox init.
pub const INIT_ARG: &str = "__strata-init";
/// `argv[1]` of the exec helper.
pub const EXEC_ARG: &str = "__strata-exec";
/// Exit code of the exec helper when it failed before `execve` (the
/// report file says why).
pub const EXEC_HELPER_FAILURE_EXIT: i32 = 127;

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
    /// Where to write a [`Failure`] if the helper fails before execve.
    report: Option<PathBuf>,
}

pub(crate) fn encode_argv(
    sub: &str,
    json: &str,
    env: &[(OsString, OsString)],
    argv: &[OsString],
) -> Vec<OsString> {
    let mut out = Vec::with_capacity(3 + env.len() + argv.len());
    out.push(OsString::from(sub));
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

type Decoded = (String, Vec<(OsString, OsString)>, Vec<OsString>);

/// Inverse of [`encode_argv`] for `args` = `argv[2..]`.
pub(crate) fn decode_argv(args: &[OsString]) -> Result<Decoded, String> {
    let (json, rest) = args.split_first().ok_or("missing settings")?;
    let json = json.to_str().ok_or("settings are not UTF-8")?.to_string();
    let sep = rest.iter().position(|a| a == "--").ok_or("missing --")?;
    let mut env = Vec::new();
    for kv in &rest[..sep] {
        let b = kv.as_bytes();
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
    Ok((json, env, rest[sep + 1..].to_vec()))
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
    let Some(sub) = args.get(1) else { return };
    let code = if sub == INIT_ARG {
        run_init(&args[2..])
    } else if sub == EXEC_ARG {
        run_exec_helper(&args[2..])
    } else if sub == crate::selfcheck::SELFCHECK_ARG {
        crate::selfcheck::selfcheck_main()
    } else if sub == crate::daemon_view::DAEMON_VIEW_ARG {
        crate::daemon_view::daemon_view_main(&args[2..])
    } else {
        return;
    };
    std::process::exit(code);
}

fn run_init(args: &[OsString]) -> i32 {
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
    let (json, env, argv) = match decode_argv(args) {
        Ok(d) => d,
        Err(e) => return fail(None, format!("bad {INIT_ARG} arguments: {e}")),
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

fn run_exec_helper(args: &[OsString]) -> i32 {
    let (json, env, argv) = match decode_argv(args) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("strata exec helper: bad arguments: {e}");
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
    let report = |f: Failure| {
        if let Some(r) = &wire.report {
            let _ = write_json_file(r, &f);
        }
        eprintln!("strata exec helper: {}", f.message);
        EXEC_HELPER_FAILURE_EXIT
    };
    if thread_count() != Some(1) {
        return report(Failure {
            stage: "exec".into(),
            message: format!("{EXEC_ARG} must run single-threaded"),
            errno: None,
        });
    }
    let spec = ExecSpec {
        argv,
        env,
        cwd: wire.cwd.clone(),
        identity: wire.identity,
        rlimits: wire.rlimits.clone(),
        session: wire.session,
    };
    let prepared = match spec.prepare() {
        Ok(p) => p,
        Err(e) => {
            return report(Failure {
                stage: "exec".into(),
                message: e.to_string(),
                errno: None,
            })
        }
    };
    let filter = match Policy::default().compile() {
        Ok(f) => f,
        Err(e) => {
            return report(Failure {
                stage: "seccomp".into(),
                message: e.to_string(),
                errno: None,
            })
        }
    };
    let err = crate::exec::drop_privileges_and_exec(&prepared, &filter);
    report(Failure::from(&err))
}

/// A `std::process::Command` that runs `spec` through the exec helper:
/// `exe` (a binary calling [`maybe_run_internal`]) re-executes itself
/// single-threaded, drops privileges and execs the command. If it fails
/// before `execve`, it exits with [`EXEC_HELPER_FAILURE_EXIT`] and writes a
/// [`Failure`] as JSON to `report` (a path the caller owns; absent when the
/// execve happened). The caller sets stdio and spawns; the helper must be
/// started from inside the Sandbox (the daemon), as root.
pub fn exec_helper_command(
    exe: &Path,
    spec: &ExecSpec,
    report: Option<&Path>,
) -> Result<std::process::Command, crate::ns::SpawnError> {
    spec.prepare()?;
    let wire = ExecWire {
        identity: spec.identity,
        session: spec.session,
        cwd: spec.cwd.clone(),
        rlimits: spec.rlimits.clone(),
        report: report.map(Path::to_path_buf),
    };
    let json =
        serde_json::to_string(&wire).map_err(|source| crate::ns::SpawnError::Encode { source })?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(encode_argv(EXEC_ARG, &json, &spec.env, &spec.argv));
    cmd.env_clear();
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
mod tests {
    use super::*;

    #[test]
    fn argv_roundtrip() {
        let env = vec![("A".into(), "b=c".into()), ("EMPTY".into(), "".into())];
        let argv = vec![OsString::from("/bin/echo"), "--".into(), "x=y".into()];
        let enc = encode_argv(INIT_ARG, "{}", &env, &argv);
        assert_eq!(enc[0], INIT_ARG);
        let (json, e, a) = decode_argv(&enc[1..]).unwrap();
        assert_eq!(json, "{}");
        assert_eq!(e, env);
        assert_eq!(a, argv);
    }

    #[test]
    fn bad_argv_is_an_error() {
        assert!(decode_argv(&[]).is_err());
        assert!(decode_argv(&["{}".into(), "NOEQ".into(), "--".into()]).is_err());
        assert!(decode_argv(&["{}".into(), "A=b".into()]).is_err());
    }
}
