//! strata-daemon: the daemon that runs inside a Sandbox (docs/design.md §3, B4–B7).
//!
//! It runs as root with CAP_SYS_ADMIN and /dev/fuse under the Sandbox's
//! init, mounts Workspaces with `allow_other`, and runs commands through
//! strata-sandbox's single-threaded exec helper, which drops them to a
//! nonroot uid:gid with no capabilities, no_new_privs and a seccomp filter.
//!
//! * Start: [`run`] (or [`main_from_args`] for `__strata-daemon --config
//!   PATH`) prints exactly one line on stdout,
//!   `STRATA-DAEMON-READY socket=<path> pid=<pid>` (plus ` tcp=127.0.0.1:<port>`
//!   when TCP was asked for), then logs (tracing) to the configured log file
//!   only; stdout and stderr are redirected to that file.
//! * Endpoint: HTTP/1.1 + JSON on a Unix socket (mode 0600), optionally on
//!   127.0.0.1. Every request needs `Authorization: Bearer <token>`; the
//!   token (32 random bytes, hex) is read from a 0600 file named in the
//!   config, never from argv or the environment. Anything else gets a bare
//!   401.
//! * Restart: with [`DaemonConfig::recover_workspaces`] (a Sandbox's
//!   daemon), the Workspaces mounted when the previous daemon on the same
//!   scratch directory ended are reopened and mounted again, same IDs and
//!   paths, before the marker; failures are logged and listed in
//!   `GET /v1/health` (`unrecovered`) and never stop the start
//!   (`recover.rs`).
//! * API: [`api`] (types) and `docs/api/openapi.yaml` (the published
//!   description). Exec output rule (client disconnects, backpressure): see
//!   [`exec`].
//!
//! The binary that calls [`run`] must call
//! `strata_sandbox::maybe_run_internal()` first thing in `main` (it is
//! re-executed as the exec helper, see [`DaemonConfig::helper_exe`]).
//!
//! No unsafe code: signals and fd redirection go through rustix.
#![forbid(unsafe_code)]

pub mod api;
mod child;
pub mod config;
mod error;
pub mod exec;
pub mod files;
mod prestart;
mod recover;
mod server;

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use config::{new_token, read_token, write_private, write_token, DaemonConfig};
pub use error::{ApiError, DaemonError};
pub use server::{constant_time_eq, tail_file};

/// The hidden subcommand the strata binary answers with the daemon.
pub const DAEMON_ARG: &str = "__strata-daemon";

/// First word of the startup marker line (the backends wait for it: one
/// constant, strata-sandbox's `backend::marker`).
pub const MARKER: &str = strata_sandbox::DAEMON_MARKER;

/// `args` = everything after the subcommand: `--config PATH`.
pub fn main_from_args(args: &[std::ffi::OsString]) -> Result<(), DaemonError> {
    let usage = || DaemonError::Usage(format!("{DAEMON_ARG} --config PATH"));
    match args {
        [flag, path] if flag == "--config" => run(DaemonConfig::load(Path::new(path))?),
        _ => Err(usage()),
    }
}

/// Run the daemon until SIGTERM, SIGINT or `POST /v1/shutdown`; then
/// cancel running execs, unmount the Workspaces (uncommitted work stays in
/// the scratch directory, recoverable by ID; with
/// [`DaemonConfig::recover_workspaces`] the next start on the same scratch
/// mounts them again) and remove the socket.
pub fn run(config: DaemonConfig) -> Result<(), DaemonError> {
    // Before any thread starts: the heap stays small for the forks of
    // every exec (strata_sandbox::heap).
    strata_sandbox::fix_mmap_threshold();
    let token = read_token(&config.token_file)?;
    init_logging(&config.log_file)?;
    let opts = strata_store::StoreOptions {
        allow_any_fs: config.allow_any_fs,
        ..Default::default()
    };
    let store = strata_store::Store::open(&config.store, &opts)?;
    std::fs::create_dir_all(&config.scratch_dir).map_err(|source| DaemonError::Io {
        action: "create the scratch directory",
        path: config.scratch_dir.clone(),
        source,
    })?;
    let helper_exe = match &config.helper_exe {
        Some(p) => p.clone(),
        None => std::env::current_exe().map_err(|source| DaemonError::Io {
            action: "find the current executable (exec helper)",
            path: PathBuf::from("/proc/self/exe"),
            source,
        })?,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("strata-daemon")
        // Tokio's default 2 MiB stacks: a command can make a tree ~2,000
        // levels deep, but no walk of the Store or the Workspace recurses
        // on tree depth (ARCHITECTURE.md, "Invariants"; the deep-tree
        // tests run every walk on 256 KiB stacks).
        .build()
        .map_err(|source| DaemonError::Io {
            action: "start the async runtime",
            path: PathBuf::new(),
            source,
        })?;
    rt.block_on(serve(config, token, store, helper_exe))
}

fn init_logging(path: &Path) -> Result<(), DaemonError> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|source| DaemonError::Io {
            action: "open the log file",
            path: path.into(),
            source,
        })?;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // A second daemon in one process (tests) keeps the first subscriber.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(Mutex::new(file))
        .try_init();
    Ok(())
}

/// Bind the socket under a temporary name, make it 0600, then rename it
/// into place: it is never reachable with looser permissions.
fn bind_unix(path: &Path) -> Result<tokio::net::UnixListener, DaemonError> {
    let io = |action: &'static str| {
        let path = path.to_path_buf();
        move |source| DaemonError::Io {
            action,
            path,
            source,
        }
    };
    let tmp = path.with_file_name(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("sock"),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&tmp);
    let listener = tokio::net::UnixListener::bind(&tmp).map_err(io("bind the socket"))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
        .map_err(io("chmod 600 the socket"))?;
    std::fs::rename(&tmp, path).map_err(io("move the socket into place"))?;
    Ok(listener)
}

async fn serve(
    config: DaemonConfig,
    token: String,
    store: strata_store::Store,
    helper_exe: PathBuf,
) -> Result<(), DaemonError> {
    // The first exec helper is started now, ahead of the first exec
    // (crate::prestart), beside the rest of the start (on the other core,
    // while this thread opens the socket and the creator waits for the
    // marker): it builds the commands' mount namespace as it enters it,
    // rather than the first exec doing so on its path. Ready does not wait
    // for it: an exec that comes first hands its command to it all the
    // same, or starts a helper of its own if it is not there yet.
    let prestart = prestart::Slot::new(helper_exe.clone());
    prestart.refill();
    let unix = bind_unix(&config.socket)?;
    let tcp = match config.tcp_port {
        Some(port) => Some(
            tokio::net::TcpListener::bind(("127.0.0.1", port))
                .await
                .map_err(|source| DaemonError::Io {
                    action: "bind 127.0.0.1",
                    path: PathBuf::from(format!("127.0.0.1:{port}")),
                    source,
                })?,
        ),
        None => None,
    };
    let (tx, rx) = tokio::sync::watch::channel(false);
    let state = Arc::new(server::AppState {
        config: config.clone(),
        token,
        store,
        helper_exe,
        workspaces: parking_lot::Mutex::new(Default::default()),
        unrecovered: parking_lot::Mutex::new(Vec::new()),
        execs: parking_lot::Mutex::new(Default::default()),
        prestart: prestart.clone(),
        shutdown: tx,
    });
    // Before the marker: a restarted Sandbox is ready when its Workspaces
    // are mounted again (on a worker thread: reopening walks the journal).
    if config.recover_workspaces {
        let st = state.clone();
        let (served, failed) =
            tokio::task::spawn_blocking(move || recover::recover(&st.config, &st.store))
                .await
                .map_err(|e| DaemonError::Io {
                    action: "recover the Workspaces (worker thread failed)",
                    path: config.scratch_dir.clone(),
                    source: std::io::Error::other(e.to_string()),
                })?;
        tracing::info!(
            recovered = served.len(),
            unrecovered = failed.len(),
            "Workspaces of the previous run"
        );
        state.workspaces.lock().extend(served);
        *state.unrecovered.lock() = failed;
    }
    let app = server::router(state.clone());

    let mut marker = format!(
        "{MARKER} socket={} pid={}",
        config.socket.display(),
        std::process::id()
    );
    if let Some(l) = &tcp {
        if let Ok(a) = l.local_addr() {
            marker.push_str(&format!(" tcp={a}"));
        }
    }
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{marker}");
        let _ = out.flush();
    }
    tracing::info!("{marker}");
    redirect_stdio(&config.log_file);

    let stop = {
        let mut rx = rx.clone();
        async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            let mut int =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).ok();
            tokio::select! {
                _ = async { match term.as_mut() { Some(s) => { s.recv().await; } None => std::future::pending().await } } => tracing::info!("SIGTERM"),
                _ = async { match int.as_mut() { Some(s) => { s.recv().await; } None => std::future::pending().await } } => tracing::info!("SIGINT"),
                _ = rx.wait_for(|v| *v) => {}
            }
        }
    };
    let (stop_tx, _) = tokio::sync::broadcast::channel::<()>(1);
    let mut servers = Vec::new();
    {
        let mut s = stop_tx.subscribe();
        let app = app.clone();
        servers.push(tokio::spawn(async move {
            axum::serve(unix, app)
                .with_graceful_shutdown(async move {
                    let _ = s.recv().await;
                })
                .await
        }));
    }
    if let Some(l) = tcp {
        let mut s = stop_tx.subscribe();
        servers.push(tokio::spawn(async move {
            axum::serve(l, app)
                .with_graceful_shutdown(async move {
                    let _ = s.recv().await;
                })
                .await
        }));
    }
    stop.await;
    tracing::info!("stopping: cancelling running execs, unmounting workspaces");
    let running: Vec<_> = state
        .execs
        .lock()
        .values()
        .filter(|e| !e.is_finished())
        .cloned()
        .collect();
    for e in &running {
        let _ = e.cancel(Duration::from_millis(500)).await;
    }
    prestart.close();
    let _ = stop_tx.send(());
    for s in servers {
        let _ = tokio::time::timeout(Duration::from_secs(3), s).await;
    }
    let entries: Vec<_> = state.workspaces.lock().drain().collect();
    for (id, entry) in entries {
        let r = tokio::task::spawn_blocking(move || server::unmount_entry(entry, false)).await;
        tracing::info!(workspace = %id, result = ?r.map(|r| r.map_err(|e| e.detail.message)), "unmounted at shutdown");
    }
    let _ = std::fs::remove_file(&config.socket);
    tracing::info!("stopped");
    Ok(())
}

/// After the marker, nothing more goes to the backend's stdout pipe:
/// stdout and stderr (panics included) go to the log file.
fn redirect_stdio(log: &Path) {
    if let Ok(f) = std::fs::OpenOptions::new().append(true).open(log) {
        // Replacing fds 1 and 2 is process-wide and intended; a failure
        // leaves the pipe in place, which only loses log lines.
        let _ = rustix::stdio::dup2_stdout(&f);
        let _ = rustix::stdio::dup2_stderr(&f);
    }
}
