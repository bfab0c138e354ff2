//! `strata sandbox ...`: thin arms over `strata_sdk::Sandbox`. Workspaces
//! in Sandboxes are `strata ws ...` (mount.rs), execs `strata exec ...`
//! (exec.rs), the host report `strata probe` (probe.rs).
//!
//! * State root of the Sandbox records: the SDK's default
//!   (`/var/lib/strata/sandboxes` as root, else
//!   `$XDG_STATE_HOME/strata/sandboxes`) unless `STRATA_SANDBOX_STATE`
//!   names another (absolute, not under /tmp or /run).
//! * Workspace and exec IDs are unique across Sandboxes: a fresh process
//!   finds the Sandbox holding one by asking the running ones
//!   (`Sandbox::find_workspace`, `Sandbox::find_exec`).

use crate::args::{BackendArg, NetworkArg};
use crate::ctx::{runtime, state_dir, Ctx};
use anyhow::Result;
use clap::{Args, Subcommand};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use strata_sdk::{Limits, Network, SandboxFilter, SandboxSpec, Workspace};

#[derive(Debug, Subcommand)]
pub enum SandboxCmd {
    /// Create a Sandbox on the Store (--store) and start its daemon (root);
    /// prints its ID.
    #[command(
        after_help = "Example:\n  SB=$(strata sandbox create --name agent-1 --label team=web --memory 2G --pids 512 --cpu 1)"
    )]
    Create(CreateArgs),
    /// List Sandboxes (oldest first), optionally by label and name prefix.
    #[command(after_help = "Example:\n  strata sandbox list --label team=web --prefix agent-")]
    List {
        /// Only Sandboxes with this label (repeatable; all must match).
        #[arg(long = "label", value_name = "K=V", value_parser = crate::args::key_value)]
        labels: Vec<(String, String)>,
        /// Only Sandboxes whose name starts with P.
        #[arg(long, value_name = "P")]
        prefix: Option<String>,
    },
    /// Show one Sandbox's record, state and mounted Workspaces.
    #[command(after_help = "Example:\n  strata sandbox inspect $SB --json")]
    Inspect { sandbox: String },
    /// The last lines of a Sandbox daemon's log.
    #[command(after_help = "Example:\n  strata sandbox logs $SB --tail 20")]
    Logs {
        sandbox: String,
        /// How many lines.
        #[arg(long, value_name = "N", default_value_t = 50)]
        tail: usize,
    },
    /// Start the daemon of a stopped Sandbox again (it crashed, was killed
    /// or stopped): same ID, token, Store and config; the Workspaces that
    /// were mounted come back under their IDs with their uncommitted
    /// changes. A running Sandbox is refused.
    #[command(after_help = "Example:\n  strata sandbox restart $SB && strata ws status $WS")]
    Restart { sandbox: String },
    /// Stop a Sandbox and delete its record (B9); the Store is untouched.
    /// Refuses while a Workspace has uncommitted changes (closing deletes
    /// them) unless --discard.
    #[command(after_help = "Example:\n  strata sandbox rm sb-0123456789abcdef01234567 --discard")]
    Rm {
        sandbox: String,
        /// Drop the uncommitted changes of its Workspaces.
        #[arg(long)]
        discard: bool,
    },
    /// Same as `strata ws mount SANDBOX REF` (kept for scripts).
    #[command(hide = true)]
    Mount(crate::mount::WsMountArgs),
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// A unique name (an existing one is refused).
    #[arg(long)]
    pub name: Option<String>,
    /// A label (repeatable).
    #[arg(long = "label", value_name = "K=V", value_parser = crate::args::key_value)]
    pub labels: Vec<(String, String)>,
    /// none (loopback only) or host.
    #[arg(long, value_name = "none|host", value_enum, default_value = "none")]
    pub network: crate::args::NetworkArg,
    /// Memory limit: bytes, or with a K, M or G suffix (default: half of
    /// the host's RAM).
    #[arg(long, value_name = "SIZE", value_parser = crate::args::byte_size)]
    pub memory: Option<u64>,
    /// Most processes and threads at once (default: 4096).
    #[arg(long, value_name = "N")]
    pub pids: Option<u64>,
    /// CPU share: 1 = one full CPU, 0.5 = half of one (cgroup CPU quota;
    /// default: none).
    #[arg(long, value_name = "CPUS", value_parser = crate::args::cpu_millis)]
    pub cpu: Option<u64>,
    /// No limits at all (not even the default memory and pids limits): a
    /// command can then exhaust the host's memory or processes.
    #[arg(long, conflicts_with_all = ["memory", "pids", "cpu"])]
    pub no_limits: bool,
    /// Show commands this root filesystem (a directory, read-only) instead
    /// of the host's root.
    #[arg(long, value_name = "DIR")]
    pub rootfs: Option<PathBuf>,
    /// native (namespaces on this host), docker (one container through
    /// the Docker Engine API; needs --image and a static strata binary:
    /// this one, static as this repository builds it; docs/docker.md) or
    /// microvm (namespaces inside the project's qemu VM; needs --project;
    /// docs/microvm.md).
    #[arg(
        long,
        value_name = "native|docker|microvm",
        value_enum,
        default_value = "native"
    )]
    pub backend: crate::args::BackendArg,
    /// With --backend microvm: the project whose VM runs the Sandbox
    /// (started if it is not; one VM, disk and Store per project) and
    /// whose branches it mounts; through --remote, the project the
    /// Sandbox is for.
    #[arg(long, value_name = "P", required_if_eq("backend", "microvm"))]
    pub project: Option<String>,
    /// The docker backend's image, present in the local Engine:
    /// NAME:TAG, NAME@sha256:… or an image ID (pinned to its ID at create).
    #[arg(long, value_name = "IMAGE", required_if_eq("backend", "docker"))]
    pub image: Option<String>,
    /// Show commands this host path at the same path (repeatable),
    /// read-only, or writable with :rw. By default they see only the
    /// host's system directories and /etc (minus what is not
    /// world-readable). Never the Store or strata's state.
    #[arg(long = "expose", value_name = "HOST_PATH[:rw]", value_parser = parse_expose)]
    pub expose: Vec<strata_sdk::Expose>,
    /// How the Sandbox's Workspaces serve FUSE requests: dev-fuse
    /// (/dev/fuse reads), auto (FUSE over io_uring when the kernel offers
    /// it, else /dev/fuse) or uring (io_uring or mounts fail). Default:
    /// $STRATA_FUSE_TRANSPORT, else auto. Native and docker backends
    /// (a server or a VM decides for its own Sandboxes).
    #[arg(long, value_name = "dev-fuse|auto|uring")]
    pub fuse_transport: Option<strata_sdk::Transport>,
}

/// `--expose`: the syntax here (a malformed argument is a usage error,
/// exit 2), what the path is on the host at create.
fn parse_expose(s: &str) -> std::result::Result<strata_sdk::Expose, String> {
    let e = strata_sdk::Expose::parse(s).map_err(|e| e.to_string())?;
    if !e.path.exists() {
        return Err(format!(
            "expose {}: no such file or directory on the host",
            e.path.display()
        ));
    }
    Ok(e)
}

/// The CLI's stable view of a Sandbox record (docs/cli.md); the backend's
/// full record has more, which may change with the backend.
fn info_json(i: &strata_sdk::SandboxInfo) -> serde_json::Value {
    let raw = serde_json::to_value(i).unwrap_or_default();
    json!({
        "id": i.id.as_str(),
        "name": i.name,
        "labels": i.labels,
        "backend": raw["backend"],
        "state": format!("{:?}", i.state).to_lowercase(),
        "created_unix_ms": i.created_unix_ms,
        "log_file": i.log_file,
    })
}

pub fn ws_json(w: &Workspace) -> serde_json::Value {
    json!({
        "workspace": w.id(),
        "path": w.path(),
        "branch": w.branch(),
        "base": w.base(),
        "transport": w.transport(),
    })
}

pub fn sandbox(ctx: &Ctx, cmd: SandboxCmd) -> Result<ExitCode> {
    let rt = runtime()?;
    rt.block_on(sandbox_async(ctx, cmd))?;
    Ok(ExitCode::SUCCESS)
}

async fn sandbox_async(ctx: &Ctx, cmd: SandboxCmd) -> Result<()> {
    // The SDK client: in-process under STRATA_SANDBOX_STATE, or the
    // server of --remote (the same calls).
    // A Sandbox in a project's VM needs no Store on this host: the
    // client (which opens one) is made only when used.
    let client = || async {
        let client = ctx.client().await?;
        anyhow::Ok(match state_dir() {
            Some(d) if ctx.remote.is_none() => client.with_sandbox_state(d),
            _ => client,
        })
    };
    let open = |id: &str| {
        let id = id.to_string();
        async move {
            // A Sandbox in a project's VM first (by the host's record of
            // it, docs/microvm.md), then this Store's.
            if ctx.remote.is_none() {
                if let Some(sb) = strata_sdk::microvm::open(&id, None).await? {
                    return anyhow::Ok(sb);
                }
            }
            Ok(client().await?.sandbox(&id).await?)
        }
    };
    match cmd {
        SandboxCmd::Create(a) => {
            let mut spec = SandboxSpec::new(ctx.store_path.clone().unwrap_or_default());
            spec.project = a.project.clone();
            spec.name = a.name;
            spec.labels.extend(a.labels);
            spec.network = match a.network {
                NetworkArg::None => Network::None,
                NetworkArg::Host => Network::Host,
            };
            spec.limits = Limits {
                memory_bytes: a.memory,
                pids: a.pids,
                cpu_millis: a.cpu,
            };
            spec.no_limits = a.no_limits;
            spec.rootfs = a.rootfs.map(|r| std::path::absolute(&r).unwrap_or(r));
            spec.docker_image = match (a.backend, a.image) {
                (BackendArg::Native | BackendArg::Microvm, Some(_)) => {
                    return Err(crate::args::Usage {
                        kind: clap::error::ErrorKind::ArgumentConflict,
                        msg: "--image is for --backend docker".into(),
                    }
                    .into())
                }
                (BackendArg::Native, None) => None,
                // clap requires --image with --backend docker.
                (BackendArg::Docker, image) => image,
                (BackendArg::Microvm, None) => None,
            };
            spec.expose = a.expose;
            spec.fuse_transport = a.fuse_transport;
            let sb = match a.backend {
                BackendArg::Microvm if ctx.remote.is_some() => anyhow::bail!(
                    "--backend microvm with --remote: a project's VM is started on the host that runs this command; leave --remote out"
                ),
                BackendArg::Microvm => {
                    // clap requires --project with --backend microvm.
                    let vm = strata_sdk::MicroVm::new(a.project.unwrap_or_default());
                    strata_sdk::microvm::create(spec, vm).await?
                }
                _ => {
                    if ctx.store_path.is_none() {
                        ctx.store_path()?;
                    }
                    client().await?.create_sandbox(spec).await?
                }
            };
            let id = sb.id().to_string();
            ctx.emit(json!({"sandbox": id}), || id.clone())
        }
        SandboxCmd::List { labels, prefix } => {
            let mut f = SandboxFilter {
                name_prefix: prefix,
                ..Default::default()
            };
            f.labels.extend(labels);
            let mut list = client().await?.sandboxes(f.clone()).await?;
            // And those in the running project VMs (docs/microvm.md).
            if ctx.remote.is_none() {
                list.extend(strata_sdk::microvm::list(&f, None).await);
            }
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
            // What was asked at create (network, limits, root), as recorded.
            v["config"] = serde_json::to_value(&sb.info().config).unwrap_or_default();
            v["workspaces"] = json!(wss.iter().map(ws_json).collect::<Vec<_>>());
            // How its mounts serve FUSE, as the daemon was configured
            // (null when it is not running or too old to say).
            v["fuse_transport"] = match running {
                true => json!(sb.health().await.ok().and_then(|h| h.fuse_transport)),
                false => json!(null),
            };
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
        SandboxCmd::Restart { sandbox } => {
            let mut sb = open(&sandbox).await?;
            sb.restart().await?;
            let wss = sb.workspaces().await?;
            let unrecovered = sb.health().await?.unrecovered;
            let v = json!({
                "sandbox": sb.id(),
                "workspaces": wss.iter().map(ws_json).collect::<Vec<_>>(),
                "unrecovered": unrecovered
                    .iter()
                    .map(|u| json!({"workspace": u.id, "path": u.path, "error": u.error}))
                    .collect::<Vec<_>>(),
            });
            ctx.emit(v, || {
                let mut s = format!("Restarted Sandbox {}\n", sb.id());
                for w in &wss {
                    s.push_str(&format!(
                        "  {} at {} ({}): mounted again\n",
                        w.id(),
                        w.path(),
                        w.branch()
                    ));
                }
                for u in &unrecovered {
                    s.push_str(&format!(
                        "  {} NOT recovered (its scratch is kept): {}\n",
                        u.id, u.error
                    ));
                }
                s
            })
        }
        SandboxCmd::Rm { sandbox, discard } => {
            let sb = open(&sandbox).await?;
            let vm = sb.vm_project().map(str::to_owned);
            if discard {
                sb.close_discard().await?;
            } else {
                sb.close().await?;
            }
            // The close of a project VM's last Sandbox stopped the VM
            // (docs/microvm.md).
            if let Some(p) = vm {
                let cfg = strata_microvm::VmConfig::new(
                    strata_microvm::vm::default_state_root(),
                    &p,
                    Default::default(),
                );
                if !strata_microvm::vm::status(&cfg)?.running {
                    eprintln!("strata: stopped the VM of project {p}: its last Sandbox closed (its disk stays)");
                }
            }
            ctx.emit(json!({"removed": sandbox}), || {
                format!("Removed Sandbox {sandbox}")
            })
        }
        SandboxCmd::Mount(a) => crate::mount::ws_mount(ctx, a).await,
    }
}
