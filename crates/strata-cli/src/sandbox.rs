//! `strata sandbox ...`, `strata exec` and `strata probe`: thin arms over
//! `strata_sdk` (Sandboxes, their Workspaces and execs) and the host
//! checks of strata-sandbox and strata-rootless.
//!
//! * State root of the Sandbox records: the SDK's default
//!   (`/var/lib/strata/sandboxes` as root, else
//!   `$XDG_STATE_HOME/strata/sandboxes`) unless `STRATA_SANDBOX_STATE`
//!   names another (absolute, not under /tmp or /run).
//! * A Workspace in a Sandbox is reopened in a fresh process from its two
//!   IDs: `Sandbox::open(SANDBOX)` then the one of `workspaces()` with that
//!   ID. So `strata exec SANDBOX WS -- ARGV...` and
//!   `strata sandbox status|commit|unmount SANDBOX WS` take both.

use crate::commands::Ctx;
use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use serde_json::json;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use strata_sdk::{
    CommitOutcome, Limits, Network, Sandbox, SandboxFilter, SandboxSpec, Workspace, DEFAULT_MOUNT,
};

/// Environment variable naming the Sandbox state root.
pub const STATE_ENV: &str = "STRATA_SANDBOX_STATE";

#[derive(Debug, Subcommand)]
pub enum SandboxCmd {
    /// Create a Sandbox on the Store (--store) and start its daemon (root);
    /// prints its ID.
    Create(CreateArgs),
    /// List Sandboxes (oldest first), optionally by label and name prefix.
    List {
        /// Only Sandboxes with this label (repeatable; all must match).
        #[arg(long = "label", value_name = "K=V")]
        labels: Vec<String>,
        /// Only Sandboxes whose name starts with P.
        #[arg(long, value_name = "P")]
        prefix: Option<String>,
    },
    /// Show one Sandbox's record, state and mounted Workspaces.
    Inspect { sandbox: String },
    /// The last lines of a Sandbox daemon's log.
    Logs {
        sandbox: String,
        /// How many lines.
        #[arg(long, value_name = "N", default_value_t = 50)]
        tail: usize,
    },
    /// Stop a Sandbox (its daemon unmounts its Workspaces; uncommitted work
    /// is not published) and delete its record. The Store is untouched.
    Rm { sandbox: String },
    /// Mount branch REF as a Workspace in a Sandbox; prints the Workspace ID.
    Mount {
        sandbox: String,
        /// PROJECT/BRANCH
        #[arg(value_name = "REF")]
        reference: String,
        /// Mount path inside the Sandbox.
        #[arg(long, value_name = "PATH", default_value = DEFAULT_MOUNT)]
        at: String,
    },
    /// Paths changed in a Workspace of a Sandbox since its base.
    Status { sandbox: String, workspace: String },
    /// Publish a Sandbox Workspace's changes as the next commit on its branch.
    Commit {
        sandbox: String,
        workspace: String,
        #[arg(short, long)]
        message: String,
    },
    /// Unmount a Workspace of a Sandbox (uncommitted changes stay
    /// recoverable unless --discard).
    Unmount {
        sandbox: String,
        workspace: String,
        /// Drop uncommitted changes.
        #[arg(long)]
        discard: bool,
    },
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// A unique name (an existing one is refused).
    #[arg(long)]
    pub name: Option<String>,
    /// A label (repeatable).
    #[arg(long = "label", value_name = "K=V")]
    pub labels: Vec<String>,
    /// none (loopback only) or host.
    #[arg(long, value_name = "none|host", default_value = "none")]
    pub network: String,
    /// Memory limit: bytes, or with a K, M or G suffix.
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// Most processes and threads at once.
    #[arg(long, value_name = "N")]
    pub pids: Option<u64>,
}

#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Sandbox ID.
    pub sandbox: String,
    /// Workspace ID (from `strata sandbox mount`).
    pub workspace: String,
    /// Run as UID:GID (default 1500:1500; 0 is refused).
    #[arg(long, value_name = "U:G")]
    pub user: Option<String>,
    /// An environment variable (repeatable).
    #[arg(long = "env", value_name = "K=V")]
    pub env: Vec<String>,
    /// Working directory inside the Workspace (default: its root).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// Cancel after this many seconds.
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<f64>,
    /// Give the command no stdin (it reads EOF at once).
    #[arg(long)]
    pub no_stdin: bool,
    /// The command and its arguments (no shell).
    #[arg(last = true, required = true, value_name = "ARGV")]
    pub argv: Vec<String>,
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

fn state_dir() -> Option<PathBuf> {
    std::env::var_os(STATE_ENV)
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
}

fn parse_kv(s: &str, what: &str) -> Result<(String, String)> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => bail!("{what} {s:?} is not KEY=VALUE"),
    }
}

fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let (num, mult) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|&n| n > 0)
        .ok_or_else(|| anyhow!("--memory {s:?}: give bytes, or a number with K, M or G"))
}

fn parse_user(s: &str) -> Result<(u32, u32)> {
    let (u, g) = s.split_once(':').unwrap_or((s, s));
    match (u.parse(), g.parse()) {
        (Ok(u), Ok(g)) => Ok((u, g)),
        _ => bail!("--user {s:?}: give numeric UID:GID, e.g. 1500:1500"),
    }
}

async fn open(id: &str) -> Result<Sandbox> {
    Ok(Sandbox::open_in(id, state_dir()).await?)
}

async fn workspace(sb: &Sandbox, id: &str) -> Result<Workspace> {
    sb.workspaces()
        .await?
        .into_iter()
        .find(|w| w.id() == id)
        .ok_or_else(|| {
            anyhow!(
                "no Workspace {id} is mounted in Sandbox {}; see `strata sandbox inspect {}`",
                sb.id(),
                sb.id()
            )
        })
}

fn info_json(i: &strata_sdk::SandboxInfo) -> serde_json::Value {
    serde_json::to_value(i).unwrap_or(serde_json::Value::Null)
}

fn ws_json(w: &Workspace) -> serde_json::Value {
    json!({"workspace": w.id(), "path": w.path(), "branch": w.branch(), "base": w.base()})
}

pub fn sandbox(ctx: &Ctx, cmd: SandboxCmd) -> Result<ExitCode> {
    let rt = runtime()?;
    rt.block_on(sandbox_async(ctx, cmd))?;
    Ok(ExitCode::SUCCESS)
}

async fn sandbox_async(ctx: &Ctx, cmd: SandboxCmd) -> Result<()> {
    match cmd {
        SandboxCmd::Create(a) => {
            let mut spec = SandboxSpec::new(ctx.store_path()?);
            spec.name = a.name;
            for l in &a.labels {
                let (k, v) = parse_kv(l, "--label")?;
                spec.labels.insert(k, v);
            }
            spec.network = match a.network.as_str() {
                "none" => Network::None,
                "host" => Network::Host,
                n => bail!("--network {n:?}: give none or host"),
            };
            spec.limits = Limits {
                memory_bytes: a.memory.as_deref().map(parse_size).transpose()?,
                pids: a.pids,
                cpu_millis: None,
            };
            spec.state_dir = state_dir();
            let sb = Sandbox::create(spec).await?;
            let id = sb.id().to_string();
            ctx.emit(json!({"sandbox": id}), || id.clone())
        }
        SandboxCmd::List { labels, prefix } => {
            let mut f = SandboxFilter {
                name_prefix: prefix,
                state_dir: state_dir(),
                ..Default::default()
            };
            for l in &labels {
                let (k, v) = parse_kv(l, "--label")?;
                f.labels.insert(k, v);
            }
            let list = Sandbox::list(f).await?;
            ctx.emit(
                json!(list.iter().map(info_json).collect::<Vec<_>>()),
                || {
                    list.iter()
                        .map(|i| {
                            let labels: Vec<String> =
                                i.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                            format!(
                                "{}\t{:?}\t{}\t{}\n",
                                i.id,
                                i.state,
                                i.name.as_deref().unwrap_or("-"),
                                labels.join(",")
                            )
                        })
                        .collect()
                },
            )
        }
        SandboxCmd::Inspect { sandbox } => {
            let sb = open(&sandbox).await?;
            let state = sb.state().await;
            let running = state == strata_sdk::SandboxState::Running;
            let wss = if running {
                sb.workspaces().await.unwrap_or_default()
            } else {
                Vec::new()
            };
            let mut v = info_json(sb.info());
            v["running"] = json!(running);
            v["workspaces"] = json!(wss.iter().map(ws_json).collect::<Vec<_>>());
            ctx.emit(v.clone(), || {
                let mut s = serde_json::to_string_pretty(&v).unwrap_or_default();
                s.push('\n');
                s
            })
        }
        SandboxCmd::Logs { sandbox, tail } => {
            let sb = open(&sandbox).await?;
            let log = sb.logs(tail).await?;
            ctx.emit(json!({"sandbox": sandbox, "log": log}), || log.clone())
        }
        SandboxCmd::Rm { sandbox } => {
            let sb = open(&sandbox).await?;
            sb.close().await?;
            ctx.emit(json!({"removed": sandbox}), || {
                format!("Removed Sandbox {sandbox}")
            })
        }
        SandboxCmd::Mount {
            sandbox,
            reference,
            at,
        } => {
            let sb = open(&sandbox).await?;
            let ws = sb.mount(&reference, Some(&at)).await?;
            let (id, path) = (ws.id().to_string(), ws.path().to_string());
            ctx.emit(json!({"workspace": id, "path": path}), || id.clone())
        }
        SandboxCmd::Status {
            sandbox,
            workspace: w,
        } => {
            let sb = open(&sandbox).await?;
            let ws = workspace(&sb, &w).await?;
            let changes = ws.status().await?;
            ctx.emit(
                json!(changes
                    .iter()
                    .map(|c| json!({
                        "path": String::from_utf8_lossy(&c.path),
                        "change": c.kind,
                    }))
                    .collect::<Vec<_>>()),
                || {
                    changes
                        .iter()
                        .map(|c| format!("{}\t{}\n", c.kind, String::from_utf8_lossy(&c.path)))
                        .collect()
                },
            )
        }
        SandboxCmd::Commit {
            sandbox,
            workspace: w,
            message,
        } => {
            let sb = open(&sandbox).await?;
            let ws = workspace(&sb, &w).await?;
            let out = ws.commit(&message).await?;
            let committed = matches!(out, CommitOutcome::Committed(_));
            let c = out.commit().to_string();
            ctx.emit(
                json!({"commit": c, "committed": committed, "branch": ws.branch()}),
                || {
                    if committed {
                        format!("{} is now at {c}", ws.branch())
                    } else {
                        format!("nothing changed: {} stays at {c}", ws.branch())
                    }
                },
            )
        }
        SandboxCmd::Unmount {
            sandbox,
            workspace: w,
            discard,
        } => {
            let sb = open(&sandbox).await?;
            let ws = workspace(&sb, &w).await?;
            ws.unmount(discard).await?;
            ctx.emit(json!({"unmounted": w}), || format!("Unmounted {w}"))
        }
    }
}

/// `strata exec`: exits with the command's code (128+N for signal N), or
/// 125 when strata itself fails (like `strata run`).
pub fn exec(_ctx: &Ctx, a: ExecArgs) -> Result<ExitCode> {
    let rt = runtime()?;
    match rt.block_on(exec_async(a)) {
        Ok(code) => {
            // The stdin reader may still block on read(); do not wait for it.
            rt.shutdown_background();
            Ok(ExitCode::from(code.clamp(0, 255) as u8))
        }
        Err(e) => {
            rt.shutdown_background();
            eprintln!("strata: error: {e:#}");
            Ok(ExitCode::from(125))
        }
    }
}

async fn exec_async(a: ExecArgs) -> Result<i32> {
    let sb = open(&a.sandbox).await?;
    let ws = workspace(&sb, &a.workspace).await?;
    let mut b = ws.exec(a.argv.clone());
    let mut env = BTreeMap::new();
    for e in &a.env {
        let (k, v) = parse_kv(e, "--env")?;
        env.insert(k, v);
    }
    for (k, v) in env {
        b = b.env(k, v);
    }
    if let Some(u) = &a.user {
        let (u, g) = parse_user(u)?;
        b = b.user(u, g);
    }
    if let Some(c) = a.cwd {
        b = b.cwd(c);
    }
    if let Some(t) = a.timeout {
        if !(t.is_finite() && t > 0.0) {
            bail!("--timeout {t}: give a positive number of seconds");
        }
        b = b.timeout(Duration::from_secs_f64(t));
    }
    if !a.no_stdin {
        b = b.stdin_pipe();
    }
    let mut h = b.spawn().await?;
    let mut out = h.stdout.take().context("exec has no stdout stream")?;
    let mut err = h.stderr.take().context("exec has no stderr stream")?;
    let out_task = tokio::spawn(async move {
        let mut so = std::io::stdout();
        while let Some(chunk) = out.next().await {
            if so.write_all(&chunk).and_then(|_| so.flush()).is_err() {
                // Our stdout is gone: keep draining so the exec can end.
                while out.next().await.is_some() {}
                break;
            }
        }
    });
    let err_task = tokio::spawn(async move {
        let mut se = std::io::stderr();
        while let Some(chunk) = err.next().await {
            let _ = se.write_all(&chunk);
            let _ = se.flush();
        }
    });
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
    let status = h.wait().await;
    let _ = out_task.await;
    let _ = err_task.await;
    let status = status?;
    if status.timed_out {
        eprintln!("strata: exec {} timed out", h.id());
    }
    Ok(status.shell_code())
}

/// `strata probe`: one KEY=VALUE line per fact; a failing one says why and
/// what to do.
pub fn probe(ctx: &Ctx) -> Result<ExitCode> {
    let lines = probe_lines();
    if ctx.json {
        let m: serde_json::Map<String, serde_json::Value> =
            lines.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        crate::output::print_json(&serde_json::Value::Object(m))?;
    } else {
        let s: String = lines.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        print!("{s}");
    }
    Ok(ExitCode::SUCCESS)
}

fn probe_lines() -> Vec<(String, String)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let mut v: Vec<(String, String)> = Vec::new();
    let mut put = |k: &str, s: String| v.push((k.to_string(), s));

    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|e| {
            format!("unknown: cannot read /proc/sys/kernel/osrelease ({e}); is /proc mounted?")
        });
    put("kernel", kernel);

    match std::fs::metadata("/dev/fuse") {
        Ok(m) if m.file_type().is_char_device() => {
            put("dev_fuse", "present".into());
            put("dev_fuse_mode", format!("{:o}", m.mode() & 0o7777));
        }
        Ok(_) => put(
            "dev_fuse",
            "missing: /dev/fuse is not a character device; recreate it (mknod /dev/fuse c 10 229)"
                .into(),
        ),
        Err(e) => put(
            "dev_fuse",
            format!("missing: {e}; load the fuse module (modprobe fuse) or pass --device /dev/fuse to the container"),
        ),
    }

    let fs = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    let fuse = fs
        .lines()
        .any(|l| l.split_whitespace().last() == Some("fuse"));
    put(
        "fuse_filesystem",
        if fuse {
            "yes".into()
        } else {
            "no: fuse is not in /proc/filesystems; load the module (modprobe fuse)".into()
        },
    );

    put("euid", rustix::process::geteuid().as_raw().to_string());

    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    for key in ["CapEff", "CapBnd", "NoNewPrivs", "Seccomp"] {
        let val = status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}:")))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|| "unknown: not in /proc/self/status".into());
        put(&key.to_ascii_lowercase(), val);
    }
    let cap_sys_admin = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|s| u64::from_str_radix(s.trim(), 16).ok())
        .map(|c| c & (1 << 21) != 0);
    put(
        "cap_sys_admin",
        match cap_sys_admin {
            Some(true) => "yes".into(),
            Some(false) => "no: Sandboxes and host mounts need CAP_SYS_ADMIN; run as root (or a privileged container); `strata run` works without it".into(),
            None => "unknown: cannot read CapEff from /proc/self/status".into(),
        },
    );

    put(
        "user_namespaces",
        match strata_sandbox::host_allows_unprivileged_userns() {
            Ok(true) => "yes".into(),
            Ok(false) => "no: unprivileged user namespaces are refused (kernel.unprivileged_userns_clone, user.max_user_namespaces or a seccomp profile); rootless `strata run` needs them, root Sandboxes do not".into(),
            Err(e) => format!("unknown: the check failed ({e})"),
        },
    );

    put(
        "cgroup",
        match strata_sandbox::cgroup::detect() {
            Ok(strata_sandbox::Hierarchy::V2 { root }) => format!("v2 at {}", root.display()),
            Ok(strata_sandbox::Hierarchy::V1 { mounts }) => format!(
                "v1 ({})",
                mounts
                    .iter()
                    .map(|(c, _)| c.as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            Err(e) => format!("unavailable: {e}; Sandbox limits (--memory, --pids) need a mounted cgroup hierarchy"),
        },
    );

    put(
        "dev_kvm",
        match std::fs::metadata("/dev/kvm") {
            Ok(m) => format!("present (mode {:o})", m.mode() & 0o7777),
            Err(e) => format!("missing: {e}; only the microVM backend needs it (enable virtualization or pass --device /dev/kvm)"),
        },
    );

    let p = strata_rootless::probe();
    let kv = p.key_value();
    match kv.split_once('=') {
        Some((k, val)) => put(k, val.to_string()),
        None => put("rootless", kv),
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_users_and_pairs_parse() {
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("x").is_err());
        assert!(parse_size("0").is_err());
        assert_eq!(parse_user("1500:1600").unwrap(), (1500, 1600));
        assert!(parse_user("a:b").is_err());
        assert_eq!(
            parse_kv("A=b=c", "--env").unwrap(),
            ("A".into(), "b=c".into())
        );
        assert!(parse_kv("=x", "--env").is_err());
        assert!(parse_kv("x", "--env").is_err());
    }

    #[test]
    fn probe_lines_are_key_value() {
        for (k, _) in probe_lines() {
            assert!(!k.is_empty() && !k.contains('=') && !k.contains(' '), "{k}");
        }
    }
}
