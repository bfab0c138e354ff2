//! `strata vm start|status|stop --project P`: one qemu microVM per
//! project holding the project's Store on its own ext4 disk, `strata serve`
//! inside (strata-microvm, docs/microvm.md). Also the guest's init: in the
//! VM, this binary is `/init __strata-vm-init` and serves the disk's Store.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use serde_json::json;
use strata_microvm::{guest, vm, VmConfig};

use crate::ctx::Ctx;

#[derive(Debug, Subcommand)]
pub enum VmCmd {
    /// Boot the project's VM (creating its disk on first use) and print its
    /// endpoint; prints the running one if it is up already.
    #[command(
        after_help = "Examples:\n  strata vm start --project web\n  strata --json vm start --project web --kernel /boot/vmlinuz-6.1.0-57-amd64"
    )]
    Start(StartArgs),
    /// Whether the project's VM runs, and its endpoint.
    #[command(after_help = "Example:\n  strata --json vm status --project web")]
    Status(VmArgs),
    /// Stop the project's VM: the guest syncs and unmounts its disk and
    /// powers off (killed after --grace seconds). The disk stays.
    #[command(after_help = "Example:\n  strata vm stop --project web")]
    Stop {
        #[command(flatten)]
        vm: VmArgs,
        /// Seconds to wait for a clean power-off before killing qemu.
        #[arg(long, default_value_t = 60)]
        grace: u64,
    },
}

#[derive(Debug, Args)]
pub struct VmArgs {
    /// The project whose VM this is (one VM and one disk per project).
    #[arg(long, value_name = "P")]
    pub project: String,
    /// Directory holding one directory per project's VM
    /// [default: /var/lib/strata/vms].
    #[arg(long, env = "STRATA_VM_STATE", value_name = "DIR")]
    pub state: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct StartArgs {
    #[command(flatten)]
    pub vm: VmArgs,
    /// The guest kernel [default: the newest /boot/vmlinuz-*].
    #[arg(long, value_name = "PATH")]
    pub kernel: Option<PathBuf>,
    /// The kernel's module directory [default: /lib/modules/VERSION, from
    /// the kernel's file name].
    #[arg(long, value_name = "DIR")]
    pub modules: Option<PathBuf>,
    /// An ext4 disk image to use instead of the project's own disk.img.
    #[arg(long, value_name = "IMG")]
    pub disk: Option<PathBuf>,
    /// Size of a new disk, MiB.
    #[arg(long, value_name = "MIB", default_value_t = 1024)]
    pub disk_mib: u64,
    /// Guest memory, MiB.
    #[arg(long, value_name = "MIB", default_value_t = 1024)]
    pub memory_mib: u64,
    /// The qemu binary (a name on PATH or a path).
    #[arg(long, value_name = "QEMU", default_value = "qemu-system-x86_64")]
    pub qemu: String,
    /// Seconds to wait for the guest's server.
    #[arg(long, value_name = "SECS", default_value_t = 180)]
    pub timeout: u64,
}

/// The configuration `strata probe` and `vm` use without flags.
pub fn default_config(project: &str, state: Option<PathBuf>) -> Result<VmConfig> {
    let exe =
        std::env::current_exe().context("find the strata binary (it becomes the guest's /init)")?;
    Ok(VmConfig::new(
        state.unwrap_or_else(vm::default_state_root),
        project,
        exe,
    ))
}

pub fn run(ctx: &Ctx, cmd: VmCmd) -> Result<ExitCode> {
    match cmd {
        VmCmd::Start(a) => {
            let mut cfg = default_config(&a.vm.project, a.vm.state)?;
            cfg.kernel = a.kernel;
            cfg.modules = a.modules;
            cfg.disk = a.disk;
            cfg.disk_mib = a.disk_mib;
            cfg.memory_mib = a.memory_mib;
            cfg.qemu = a.qemu;
            cfg.ready_timeout = Duration::from_secs(a.timeout);
            let (ep, started) = vm::start(&cfg)?;
            let mut v = serde_json::to_value(&ep)?;
            v["started"] = json!(started);
            ctx.emit(v, || {
                format!(
                    "{} VM of project {} at {} (pid {}, {}{})\ntoken: {}",
                    if started {
                        "started"
                    } else {
                        "already running:"
                    },
                    ep.project,
                    ep.url,
                    ep.pid,
                    ep.accel.as_str(),
                    if started {
                        format!(", ready in {} ms", ep.boot_ms)
                    } else {
                        String::new()
                    },
                    ep.token
                )
            })?;
        }
        VmCmd::Status(a) => {
            let cfg = default_config(&a.project, a.state)?;
            let st = vm::status(&cfg)?;
            ctx.emit(serde_json::to_value(&st)?, || match &st.endpoint {
                Some(ep) => format!(
                    "running at {} (pid {}, {})",
                    ep.url,
                    ep.pid,
                    ep.accel.as_str()
                ),
                None => format!("not running (disk {})", st.disk.display()),
            })?;
        }
        VmCmd::Stop { vm: a, grace } => {
            let cfg = default_config(&a.project, a.state)?;
            let clean = vm::stop(&cfg, Duration::from_secs(grace))?;
            ctx.emit(json!({"stopped": a.project, "clean": clean}), || {
                if clean {
                    format!("stopped the VM of project {}", a.project)
                } else {
                    format!(
                        "killed the VM of project {} (it did not power off within {grace} s)",
                        a.project
                    )
                }
            })?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// In the VM: this process is init (serving, or a probe or one-shot boot).
/// Never returns there; elsewhere it returns at once.
pub fn maybe_run_guest_init() {
    let args: Vec<OsString> = std::env::args_os().collect();
    if !guest::is_init(&args) {
        return;
    }
    if guest::is_probe(&args) {
        guest::probe_boot();
    }
    // A one-shot boot runs a host program instead of the server
    // (strata-microvm's oneshot, used by the contract suite's VM test).
    if strata_microvm::oneshot::is_run(&args) {
        strata_microvm::oneshot::run_in_guest();
    }
    match guest::setup() {
        Ok(g) => {
            if let Err(e) = serve_in_guest(&g) {
                guest::report_error(&g.ctl, &format!("{e:#}"));
            }
        }
        Err(e) => guest::console(&e.to_string()),
    }
    guest::power_off()
}

/// The disk's Store (created durable on first boot: the VM may be killed
/// like a power cut), a fresh token for this boot (earlier boots' tokens
/// revoked, so an endpoint file left from an old boot opens nothing), the
/// server on the guest's interface, `ready TOKEN` to the host, and a
/// graceful stop when the host writes `stop`.
fn serve_in_guest(g: &guest::Guest) -> Result<()> {
    use std::io::Write;
    let opts = strata_store::StoreOptions {
        durable: true,
        ..Default::default()
    };
    // create() opens a Store already there (every boot after the first).
    let store = strata_store::Store::create(&g.store_dir, &opts)
        .with_context(|| format!("open the Store at {}", g.store_dir.display()))?;
    let tokens = strata_server::TokenStore::new(store.dir());
    for t in tokens.list()? {
        tokens.revoke(&t.id)?;
    }
    let (token, _) = tokens.create(&[])?;
    let mut state = strata_server::ServerState::new(store, tokens, strata_server::DEFAULT_MAX_BODY);
    // Sandboxes of the native backend inside the VM, their state on the
    // disk (docs/microvm.md, "Sandboxes in the VM").
    state.sandbox_root = Some(PathBuf::from(guest::SANDBOX_ROOT));
    let state = Arc::new(state);
    let rt = tokio::runtime::Runtime::new().context("start the tokio runtime")?;
    let ctl = g.ctl.try_clone().context("clone the control channel")?;
    let mut out = g.ctl.try_clone().context("clone the control channel")?;
    let listen = g.listen;
    rt.block_on(async move {
        // The guest's interface, not loopback: see docs/microvm.md ("The
        // endpoint") for why no TLS is needed on this link.
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("bind {listen}"))?;
        let bound = strata_server::Bound::Tcp {
            listener,
            addr: listen,
        };
        writeln!(out, "ready {token}")
            .and_then(|()| out.flush())
            .context("write the ready line")?;
        guest::console(&format!("serving the Store on {listen}"));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            guest::wait_for_stop(ctl);
            let _ = tx.send(());
        });
        strata_server::run(bound, state, async move {
            let _ = rx.await;
        })
        .await?;
        Ok::<_, anyhow::Error>(())
    })?;
    guest::console("stopping: server closed, syncing the disk");
    Ok(())
}
