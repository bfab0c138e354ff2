//! `strata exec WS -- ARGV...` and `strata exec logs|wait|cancel EXEC`:
//! thin arms over `strata_sdk::ExecBuilder` / `ExecHandle`, on this host's
//! Sandboxes or, with `--remote`, on the server's (docs/server.md).
//!
//! Exit codes: the command's code (128+N for signal N); 130 when Ctrl-C
//! (SIGINT to strata) cancelled the exec; 125 when strata itself failed
//! (so a strata failure never reads as a plausible exit status).
//! `exec --detach`, `exec logs` and `exec cancel` exit 0 on success.

use crate::ctx::Ctx;
use crate::ctx::{open, runtime, state_dir};
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use serde_json::json;
use std::collections::BTreeMap;
use std::io::{IsTerminal, Read, Write};
use std::process::ExitCode;
use std::time::Duration;
use strata_sdk::{ExecHandle, ExitStatus, Sandbox, Workspace};

/// strata's own failure, distinct from any exit status of a command.
pub const EXEC_FAILED: u8 = 125;
/// Ctrl-C cancelled the exec (the shell's 128 + SIGINT).
pub const INTERRUPTED: u8 = 130;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct ExecCmd {
    #[command(subcommand)]
    pub sub: Option<ExecSub>,
    #[command(flatten)]
    pub run: ExecArgs,
}

#[derive(Debug, Subcommand)]
pub enum ExecSub {
    /// Print the output of an exec not read yet (a detached one): stdout to
    /// stdout, stderr to stderr. With --follow, until the command ends.
    #[command(after_help = "Example:\n  strata exec logs x1a2b3c4d5e6f7a8b --follow")]
    Logs(LogsArgs),
    /// Wait for an exec to end; exits with its code (128+N for a signal).
    #[command(after_help = "Example:\n  strata exec wait x1a2b3c4d5e6f7a8b; echo $?")]
    Wait(ExecIdArg),
    /// Cancel one exec: SIGTERM to its process group, SIGKILL after 2 s.
    #[command(after_help = "Example:\n  strata exec cancel x1a2b3c4d5e6f7a8b")]
    Cancel(ExecIdArg),
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The exec ID (printed by `strata exec --detach`).
    pub exec: String,
    /// Keep streaming until the command ends.
    #[arg(short, long)]
    pub follow: bool,
}

#[derive(Debug, Args)]
pub struct ExecIdArg {
    /// The exec ID (printed by `strata exec --detach`).
    pub exec: String,
}

#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Workspace ID (from `strata ws mount`).
    #[arg(required = true)]
    pub workspace: Option<String>,
    /// The Sandbox holding the Workspace (found automatically if omitted).
    #[arg(long, value_name = "ID")]
    pub sandbox: Option<String>,
    /// Run as UID:GID (default 1500:1500; 0 is refused).
    #[arg(long, value_name = "U:G", value_parser = crate::args::uid_gid)]
    pub user: Option<(u32, u32)>,
    /// An environment variable (repeatable).
    #[arg(long = "env", value_name = "K=V", value_parser = crate::args::key_value)]
    pub env: Vec<(String, String)>,
    /// Working directory, absolute, inside the Workspace (default: its root).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// Run on a pseudo-terminal (interactive programs); this terminal is
    /// put in raw mode meanwhile and its size follows.
    #[arg(short, long)]
    pub tty: bool,
    /// Cancel after this long: seconds (`90`, `1.5`) or with a unit
    /// (`500ms`, `30s`, `5m`, `1h`).
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Give the command no stdin (it reads EOF at once).
    #[arg(long)]
    pub no_stdin: bool,
    /// Start and print the exec ID at once; read its output with
    /// `strata exec logs`, its end with `strata exec wait`.
    #[arg(short, long, conflicts_with = "tty")]
    pub detach: bool,
    /// The command and its arguments (no shell).
    #[arg(last = true, required = true, value_name = "ARGV")]
    pub argv: Vec<String>,
}

pub fn exec(ctx: &Ctx, cmd: ExecCmd) -> Result<ExitCode> {
    match cmd.sub {
        Some(s) => sub(ctx, s),
        None => run(ctx, cmd.run),
    }
}

/// `strata exec logs|wait|cancel` (also spelled `exec-logs`, `exec-wait`,
/// `exec-cancel`).
pub fn sub(ctx: &Ctx, s: ExecSub) -> Result<ExitCode> {
    match s {
        ExecSub::Logs(a) => logs(ctx, a),
        ExecSub::Wait(a) => wait(ctx, a),
        ExecSub::Cancel(a) => cancel(ctx, a),
    }
}

/// Run on a runtime; a strata failure is printed and exits 125. The stdin
/// reader thread may still block on read(): never wait for it.
fn with_runtime(
    f: impl std::future::Future<Output = Result<u8>>,
    rt: tokio::runtime::Runtime,
) -> Result<ExitCode> {
    let r = rt.block_on(f);
    rt.shutdown_background();
    match r {
        Ok(code) => Ok(ExitCode::from(code)),
        Err(e) => {
            eprintln!("strata: error: {}", crate::output::render(&e));
            Ok(ExitCode::from(EXEC_FAILED))
        }
    }
}

fn run(ctx: &Ctx, a: ExecArgs) -> Result<ExitCode> {
    let rt = runtime()?;
    // A terminal in raw mode must be restored whatever happens: the guard
    // lives outside the runtime and drops last.
    let raw = if a.tty && !a.no_stdin && std::io::stdin().is_terminal() {
        Some(RawMode::enter()?)
    } else {
        None
    };
    let r = with_runtime(run_async(ctx, a, raw.is_some()), rt);
    drop(raw);
    r
}

fn status_json(id: &str, s: &ExitStatus) -> serde_json::Value {
    json!({
        "exec": id,
        "code": s.code,
        "signal": s.signal,
        "signal_name": s.signal_name,
        "cancelled": s.cancelled,
        "timed_out": s.timed_out,
        "exit_code": s.shell_code(),
    })
}

/// The Workspace an exec runs in: through the server of `--remote` (its
/// running Sandboxes are asked, `Client::find_workspace`), else in the
/// Sandboxes of this host.
async fn find_ws(ctx: &Ctx, a: &ExecArgs, ws: &str) -> Result<Workspace> {
    if ctx.remote.is_some() {
        let client = ctx.client().await?;
        return match &a.sandbox {
            Some(sb) => {
                let sb = client.sandbox(sb).await?;
                let found = sb.workspaces().await?.into_iter().find(|w| w.id() == ws);
                found
                    .with_context(|| format!("no Workspace {ws} is mounted in Sandbox {}", sb.id()))
            }
            None => Ok(client.find_workspace(ws).await?.1),
        };
    }
    match &a.sandbox {
        Some(sb) => {
            let sb = open(sb).await?;
            let found = sb.workspaces().await?.into_iter().find(|w| w.id() == ws);
            found.with_context(|| format!("no Workspace {ws} is mounted in Sandbox {}", sb.id()))
        }
        None => Ok(Sandbox::find_workspace(ws, state_dir()).await?.1),
    }
}

async fn run_async(ctx: &Ctx, a: ExecArgs, raw: bool) -> Result<u8> {
    let ws_id = a.workspace.clone().unwrap_or_default();
    let ws = find_ws(ctx, &a, &ws_id).await?;
    let mut b = ws.exec(a.argv.clone());
    let mut env = BTreeMap::new();
    for (k, v) in &a.env {
        env.insert(k.clone(), v.clone());
    }
    if a.tty && !env.contains_key("TERM") {
        env.insert(
            "TERM".into(),
            std::env::var("TERM").unwrap_or("xterm".into()),
        );
    }
    for (k, v) in env {
        b = b.env(k, v);
    }
    if let Some((u, g)) = a.user {
        b = b.user(u, g);
    }
    if let Some(c) = &a.cwd {
        b = b.cwd(c.clone());
    }
    if let Some(t) = a.timeout {
        b = b.timeout(t);
    }
    if a.tty {
        b = match terminal_size() {
            Some((rows, cols)) => b.tty_size(rows, cols),
            None => b.tty(),
        };
    }
    if a.detach {
        let h = b.start().await?;
        let id = h.id().to_string();
        ctx.emit(json!({"exec": id}), || id.clone())?;
        return Ok(0);
    }
    if !a.no_stdin {
        b = b.stdin_pipe();
    }
    // SIGINT's handler is installed here, before the command can print:
    // `tokio::signal::ctrl_c()` registers only when first polled, and a
    // Ctrl-C that came after the command's first output but before the
    // `select!` below killed strata with the default action, leaving the
    // command running (a test that interrupts on the first output saw it
    // on a loaded machine). `signal` installs the handler when called.
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .context("install a SIGINT handler")?;
    let mut h = b.spawn().await?;
    let pumps = pump_output(&mut h)?;
    if let Some(mut stdin) = h.stdin.take() {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
        std::thread::spawn(move || {
            let mut si = std::io::stdin().lock();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match si.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if tx.blocking_send(buf[..n].to_vec()).is_err() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
        });
        tokio::spawn(async move {
            while let Some(chunk) = rx.recv().await {
                if stdin.write(chunk).await.is_err() {
                    return;
                }
            }
            let _ = stdin.close().await;
        });
    }
    if a.tty {
        follow_window_size(&h);
    }
    let id = h.id().to_string();
    let status = tokio::select! {
        s = h.wait() => s,
        _ = interrupt.recv() => {
            // Ctrl-C means "stop this command", as for a local one: cancel
            // the exec (its whole process group) and exit 130. In --tty
            // mode ^C is a byte for the remote terminal instead (raw mode),
            // so this arm is only reached by a signal sent to strata.
            let s = h.cancel().await;
            pumps.finish().await;
            if raw {
                // Leave the prompt on a fresh line after a raw-mode session.
                eprint!("\r\n");
            }
            eprintln!("strata: exec {id} cancelled (Ctrl-C)");
            let _ = s?;
            return Ok(INTERRUPTED);
        }
    };
    pumps.finish().await;
    let status = status?;
    if status.timed_out {
        eprintln!("strata: exec {id} timed out");
    }
    if ctx.json {
        // stdout carries the command's own output; the status goes to
        // stderr so that both stay parseable.
        eprintln!("{}", status_json(&id, &status));
    }
    Ok(status.shell_code().clamp(0, 255) as u8)
}

/// Copies the exec's stdout and stderr to ours, chunk by chunk.
struct Pumps(Vec<tokio::task::JoinHandle<()>>);

impl Pumps {
    async fn finish(self) {
        for t in self.0 {
            let _ = t.await;
        }
    }
}

fn pump_output(h: &mut ExecHandle) -> Result<Pumps> {
    let mut out = h.stdout.take().context("exec has no stdout stream")?;
    let mut err = h.stderr.take().context("exec has no stderr stream")?;
    let o = tokio::spawn(async move {
        let mut so = std::io::stdout();
        while let Some(chunk) = out.next().await {
            if so.write_all(&chunk).and_then(|_| so.flush()).is_err() {
                // Our stdout is gone: keep draining so the exec can end.
                while out.next().await.is_some() {}
                break;
            }
        }
    });
    let e = tokio::spawn(async move {
        let mut se = std::io::stderr();
        while let Some(chunk) = err.next().await {
            let _ = se.write_all(&chunk);
            let _ = se.flush();
        }
    });
    Ok(Pumps(vec![o, e]))
}

/// Exec `id`: through the server of `--remote`, else in the Sandboxes of
/// this host.
async fn find(ctx: &Ctx, id: &str) -> Result<ExecHandle> {
    if ctx.remote.is_some() {
        return Ok(ctx.client().await?.find_exec(id).await?.1);
    }
    Ok(Sandbox::find_exec(id, state_dir()).await?.1)
}

fn logs(ctx: &Ctx, a: LogsArgs) -> Result<ExitCode> {
    with_runtime(
        async move {
            let mut h = find(ctx, &a.exec).await?;
            h.attach(a.follow).await?;
            pump_output(&mut h)?.finish().await;
            Ok(0)
        },
        runtime()?,
    )
}

fn wait(ctx: &Ctx, a: ExecIdArg) -> Result<ExitCode> {
    with_runtime(
        async move {
            let mut h = find(ctx, &a.exec).await?;
            let s = h.wait().await?;
            ctx.emit(status_json(&a.exec, &s), || describe(&a.exec, &s))?;
            Ok(s.shell_code().clamp(0, 255) as u8)
        },
        runtime()?,
    )
}

fn cancel(ctx: &Ctx, a: ExecIdArg) -> Result<ExitCode> {
    with_runtime(
        async move {
            let mut h = find(ctx, &a.exec).await?;
            let s = h.cancel().await?;
            ctx.emit(status_json(&a.exec, &s), || describe(&a.exec, &s))?;
            Ok(0)
        },
        runtime()?,
    )
}

fn describe(id: &str, s: &ExitStatus) -> String {
    let how = match (s.code, &s.signal_name, s.signal) {
        (Some(c), _, _) => format!("exited with code {c}"),
        (None, Some(n), _) => format!("was killed by {n}"),
        (None, None, Some(n)) => format!("was killed by signal {n}"),
        _ => "ended".into(),
    };
    let why = if s.cancelled {
        " (cancelled)"
    } else if s.timed_out {
        " (timed out)"
    } else {
        ""
    };
    format!("exec {id} {how}{why}")
}

/// `--timeout`: seconds (`30`, `1.5`), or a duration with units as
/// humantime reads them (`500ms`, `5m`, `1h 30m`).
fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    let t = s.trim();
    let d = match t.parse::<f64>() {
        Ok(n) if n.is_finite() && n > 0.0 && n < 1e9 => Ok(Duration::from_secs_f64(n)),
        Ok(_) => Err(()),
        Err(_) => humantime::parse_duration(t).map_err(|_| ()),
    };
    match d {
        Ok(d) if !d.is_zero() && d.as_secs() < 1_000_000_000 => Ok(d),
        _ => Err(format!(
            "{s:?} is not a positive duration, e.g. 30, 1.5, 500ms, 5m"
        )),
    }
}

/// The size of the terminal on stdin/stdout, if there is one.
fn terminal_size() -> Option<(u16, u16)> {
    use std::os::fd::AsFd;
    let ws = if std::io::stdout().is_terminal() {
        rustix::termios::tcgetwinsize(std::io::stdout().as_fd())
    } else {
        rustix::termios::tcgetwinsize(std::io::stdin().as_fd())
    }
    .ok()?;
    (ws.ws_row > 0 && ws.ws_col > 0).then_some((ws.ws_row, ws.ws_col))
}

/// Forward our terminal's size changes (SIGWINCH) to the exec's PTY.
fn follow_window_size(h: &ExecHandle) {
    let Ok(mut sig) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
    else {
        return;
    };
    let h = h.handle_clone();
    tokio::spawn(async move {
        while sig.recv().await.is_some() {
            if let Some((rows, cols)) = terminal_size() {
                let _ = h.resize(rows, cols).await;
            }
        }
    });
}

/// The local terminal in raw mode (keys go to the remote PTY as typed,
/// ^C and ^D included); the saved mode is restored on drop.
struct RawMode(rustix::termios::Termios);

impl RawMode {
    fn enter() -> Result<RawMode> {
        use std::os::fd::AsFd;
        let stdin = std::io::stdin();
        let saved =
            rustix::termios::tcgetattr(stdin.as_fd()).context("reading the terminal mode")?;
        let mut raw = saved.clone();
        raw.make_raw();
        rustix::termios::tcsetattr(stdin.as_fd(), rustix::termios::OptionalActions::Now, &raw)
            .context("setting the terminal to raw mode")?;
        Ok(RawMode(saved))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        use std::os::fd::AsFd;
        let _ = rustix::termios::tcsetattr(
            std::io::stdin().as_fd(),
            rustix::termios::OptionalActions::Now,
            &self.0,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("1h 30m").unwrap(), Duration::from_secs(5400));
        for bad in ["", "0", "0s", "-1", "x", "5x", "1e400", "NaN"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
