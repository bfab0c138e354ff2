//! `strata-sandbox-fake-daemon`: a stand-in for the strata daemon in the
//! native backend's tests (tests/native.rs). Like the real binary it calls
//! `maybe_run_internal()` first, so it also serves as the Sandbox init.
//!
//! * `__strata-daemon --config PATH`: read a small JSON config, log what
//!   it sees (capabilities, /dev/fuse, the Store bind, the masked host
//!   Store) and what a command it starts through the exec helper sees
//!   (the state root and directory, the token, /dev) to the log file, listen on the Unix socket (0600), print the
//!   startup marker and answer `ok` to every connection. Modes: `ok`,
//!   `die` (exit before the marker), `hang` (never print it), `garbage`
//!   (a wrong first line), `stubborn` (ignore SIGTERM).
//! * `open ROOT ID`: reopen a Sandbox by ID from a fresh process and print
//!   its `SandboxInfo` as JSON; `stop ROOT ID GRACE_MS`: stop it from a
//!   fresh process; `launch ROOT STORE`: create and start one, print its
//!   ID and exit.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::Deserialize;
use strata_sandbox::{Backend, NativeBackend, SandboxId, DAEMON_MARKER};

#[derive(Deserialize)]
struct FakeConfig {
    socket: PathBuf,
    log_file: PathBuf,
    /// The Store as bound for the daemon.
    store: PathBuf,
    /// The Store's host path (masked in the Sandbox).
    host_store: PathBuf,
    mode: String,
}

fn main() -> ExitCode {
    strata_sandbox::maybe_run_internal();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["__strata-daemon", "--config", path] => daemon(Path::new(path)),
        ["open", root, id] => backend_call(root, |b| {
            let info = b.open(&SandboxId(id.to_string()))?;
            println!("{}", serde_json::to_string(&info).expect("info serializes"));
            Ok(())
        }),
        // Create and start a Sandbox whose daemon is this binary, print its
        // ID and exit: the Sandbox must outlive its creator (SDK restart).
        ["launch", root, store] => backend_call(root, |b| {
            let mut req = strata_sandbox::CreateRequest::new(store);
            req.daemon_exe = Some(std::env::current_exe().unwrap_or_default());
            let (info, _) = strata_sandbox::launch(
                b,
                &req,
                &|info| {
                    let d = &info.daemon;
                    let cfg = serde_json::json!({
                        "socket": d.socket, "log_file": d.log_file, "store": d.store,
                        "host_store": store, "mode": "ok",
                    });
                    strata_sandbox::DaemonInstall {
                        args: vec![
                            "__strata-daemon".into(),
                            "--config".into(),
                            d.config.display().to_string(),
                        ],
                        env: vec![],
                        config: serde_json::to_vec(&cfg).unwrap_or_default(),
                    }
                },
                std::time::Duration::from_secs(10),
            )?;
            println!("{}", info.id);
            Ok(())
        }),
        ["stop", root, id, grace_ms] => backend_call(root, |b| {
            let grace = std::time::Duration::from_millis(grace_ms.parse().unwrap_or(0));
            b.stop(&SandboxId(id.to_string()), grace)
        }),
        _ => {
            eprintln!(
                "usage: __strata-daemon --config PATH | open ROOT ID | stop ROOT ID GRACE_MS | launch ROOT STORE"
            );
            ExitCode::from(2)
        }
    }
}

/// `argv` as a command (exec helper, privileges dropped, no stdin):
/// `exit=N out=[…]` with stdout and stderr on one line.
fn command(argv: &[&str]) -> String {
    let spec = strata_sandbox::ExecSpec {
        argv: argv.iter().map(Into::into).collect(),
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        cwd: "/".into(),
        identity: strata_sandbox::Identity::default(),
        rlimits: vec![],
        session: Default::default(),
    };
    let exe = std::env::current_exe().unwrap_or_default();
    match strata_sandbox::exec_helper_command(&exe, &spec).map(|h| {
        let mut c = h.command;
        c.stdin(std::process::Stdio::null());
        c.output()
    }) {
        Ok(Ok(o)) => format!(
            "exit={} out=[{}]",
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .chain(String::from_utf8_lossy(&o.stderr).split_whitespace())
                .collect::<Vec<_>>()
                .join(" ")
        ),
        Ok(Err(e)) => format!("spawn error {e}"),
        Err(e) => format!("spec error {e}"),
    }
}

/// `ls -A dir` as a command.
fn command_ls(dir: &Path) -> String {
    command(&["/bin/ls", "-A", &dir.to_string_lossy()])
}

/// Run `f` on the backend at `root` from this (fresh) process.
fn backend_call(
    root: &str,
    f: impl FnOnce(&NativeBackend) -> Result<(), strata_sandbox::BackendError>,
) -> ExitCode {
    match NativeBackend::new(root).and_then(|b| f(&b)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    }
}

fn daemon(config: &Path) -> ExitCode {
    let cfg: FakeConfig = match std::fs::read(config)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("fake daemon: config {}: {e}", config.display());
            return ExitCode::from(2);
        }
    };
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&cfg.log_file)
        .expect("open the log");
    let _ = writeln!(log, "fake daemon starting, mode {}", cfg.mode);
    match cfg.mode.as_str() {
        "die" => {
            let _ = writeln!(log, "fatal: simulated failure before the marker");
            return ExitCode::from(3);
        }
        "hang" => {
            let _ = writeln!(log, "hanging without a marker");
            loop {
                std::thread::sleep(std::time::Duration::from_secs(60));
            }
        }
        "garbage" => {
            println!("hello, not a marker");
        }
        "stubborn" => {
            let _ = writeln!(log, "ignoring SIGTERM");
            // SAFETY: setting a signal's disposition to SIG_IGN runs no code.
            unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) };
        }
        _ => {}
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .unwrap_or("")
            .trim()
            .to_string()
    };
    let host_store_hidden = std::fs::read_dir(&cfg.host_store)
        .map(|mut d| d.next().is_none())
        .unwrap_or(true);
    let _ = writeln!(
        log,
        "observed uid={} capeff={} dev_fuse={} store_ok={} host_store_hidden={}",
        field("Uid:").split_whitespace().next().unwrap_or(""),
        field("CapEff:"),
        Path::new("/dev/fuse").exists(),
        cfg.store.join("seen-by-daemon").exists(),
        host_store_hidden,
    );
    // A command, started the way the real daemon starts them (exec helper,
    // uid 1500), looks at the state root: it must find an empty mask.
    let state_root = cfg
        .socket
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("/"));
    let _ = writeln!(log, "command_ls_state_root={}", command_ls(state_root));
    // Every backend: a command cannot list the daemon's own directory
    // (token, config, socket, the Store's mount point).
    let state_dir = cfg.socket.parent().unwrap_or(Path::new("/"));
    let _ = writeln!(log, "command_ls_state_dir={}", command_ls(state_dir));
    // Nor read the token in it, nor find /dev/fuse (no FUSE mounts of its
    // own): what a command sees of /dev and the token file.
    let token = state_dir.join("token");
    let _ = writeln!(
        log,
        "command_cat_token={}",
        command(&["/bin/cat", &token.to_string_lossy()])
    );
    let _ = writeln!(log, "command_ls_dev={}", command_ls(Path::new("/dev")));
    let _ = writeln!(
        log,
        "command_stat_dev_fuse={}",
        command(&["/bin/ls", "-l", "/dev/fuse"])
    );
    let _ = std::fs::remove_file(&cfg.socket);
    let listener = UnixListener::bind(&cfg.socket).expect("bind the socket");
    std::fs::set_permissions(&cfg.socket, std::fs::Permissions::from_mode(0o600))
        .expect("chmod the socket");
    println!(
        "{DAEMON_MARKER} socket={} pid={}",
        cfg.socket.display(),
        std::process::id()
    );
    let _ = std::io::stdout().flush();
    for mut c in listener.incoming().flatten() {
        let _ = c.write_all(b"ok\n");
        let _ = writeln!(log, "served a client");
    }
    ExitCode::SUCCESS
}
