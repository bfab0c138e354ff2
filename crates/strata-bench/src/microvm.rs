//! The microvm group: Sandboxes in a project's qemu VM (docs/microvm.md)
//! beside native Sandboxes on the host, each pair in the same run. Needs
//! root, qemu-system-x86_64, a guest kernel (`/boot/vmlinuz-*`) and the
//! static `strata` binary next to this one (the guest's `/init`; build it
//! with `cargo build --release -p strata-cli`).
//!
//! - *Project VM ready*: the project's first Sandbox, create-to-ready
//!   through the SDK (`SandboxSpec::microvm`), the VM's boot included;
//!   beside a native Sandbox's create-to-ready. Also the VM's own
//!   boot-to-ready (qemu started to the guest's ready line). One boot with
//!   `--quick`, three without (each stopped by closing its last Sandbox).
//! - *A second Sandbox* in the running VM, create-to-ready, beside native.
//! - *Exec of `true`*, `.output()` through the guest's server and its
//!   relay, beside the same on a native Sandbox; medians of 20 (100).
//! - *The 15-call flow* of the server group (`server_load::flow`, the
//!   same function) over a `Client` of the VM's endpoint beside a `Client`
//!   of a Store in this process.
//!
//! Every row names the accelerator (KVM or TCG). The goals are for KVM
//! hosts; under TCG every guest instruction is emulated, so a TCG row
//! shows its goal unjudged. Every Sandbox is closed and every VM stopped
//! (its last Sandbox's close), and the group fails if a qemu it started is
//! still running at the end.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::Context;
use serde_json::Value;
use strata_sdk::microvm::qemus_under;
use strata_sdk::{Client, MicroVm, Sandbox, SandboxSpec};

use crate::report::{median, ms, Row};
use crate::server_load::flow;
use crate::Ctx;

/// The VM's project (one VM, one disk, one Store) under the group's own
/// state root.
const PROJECT: &str = "bench-vm";

pub fn run(ctx: &Ctx) -> anyhow::Result<Vec<Row>> {
    let strata = strata_exe()?;
    let dir = ctx.scratch.join("microvm");
    let vms = Vms {
        root: dir.join("vms"),
        strata,
    };
    std::fs::create_dir_all(&vms.root)?;
    let rt = tokio::runtime::Runtime::new()?;
    let rows = rt.block_on(rows(ctx, &dir, &vms));
    // The last Sandbox's close stopped the VM; one still running is a leak
    // (the guard kills it when the group ends either way).
    let left = qemus_under(&vms.root);
    let rows = rows?;
    anyhow::ensure!(
        left.is_empty(),
        "qemu still running after every Sandbox closed: pids {left:?}"
    );
    Ok(rows)
}

/// The `strata` binary beside this one: the guest's `/init` and the
/// `strata vm status` that tells the accelerator.
fn strata_exe() -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe().context("find strata-bench's own path")?;
    let strata = me.with_file_name("strata");
    anyhow::ensure!(
        strata.is_file(),
        "the microvm group boots {} as the guest's /init, and it is missing: \
         build it with `cargo build --release -p strata-cli` (the same profile as strata-bench)",
        strata.display()
    );
    Ok(strata)
}

/// The group's VMs: their state root and the strata binary. Dropping it
/// kills any qemu still running under the root (a failed run must not
/// leave a VM behind; a successful one has stopped them already).
struct Vms {
    root: PathBuf,
    strata: PathBuf,
}

impl Vms {
    fn spec(&self, store: &Path) -> SandboxSpec {
        let mut s = SandboxSpec::new(store).label("strata-bench", std::process::id().to_string());
        s.microvm = Some(MicroVm {
            project: PROJECT.into(),
            state_root: Some(self.root.clone()),
            exe: Some(self.strata.clone()),
        });
        s
    }

    /// `strata --json vm status` of the project's VM: its endpoint (URL,
    /// token, accelerator, boot time), or an error when it is not running.
    fn endpoint(&self) -> anyhow::Result<Value> {
        let o = Command::new(&self.strata)
            .args(["--json", "vm", "status", "--project", PROJECT, "--state"])
            .arg(&self.root)
            .output()
            .context("run strata vm status")?;
        anyhow::ensure!(
            o.status.success(),
            "strata vm status: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v: Value = serde_json::from_slice(&o.stdout).context("strata vm status's JSON")?;
        anyhow::ensure!(v["running"] == true, "the VM of {PROJECT} is not running");
        Ok(v["endpoint"].clone())
    }
}

impl Drop for Vms {
    fn drop(&mut self) {
        for pid in qemus_under(&self.root) {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
}

/// A row whose goal is for KVM hosts: judged only when the VM ran under
/// KVM, shown unjudged under TCG.
fn kvm_goal(row: Row, accel: &str, goal: &str, met: bool) -> Row {
    if accel == "KVM" {
        row.goal(goal, met)
    } else {
        row.note(&format!("{goal} on KVM (not judged: {accel})"))
    }
}

async fn rows(ctx: &Ctx, dir: &Path, vms: &Vms) -> anyhow::Result<Vec<Row>> {
    let host = dir.join("host-store");
    let store = strata_store::Store::create(&host, &strata_store::StoreOptions::default())?;
    store.create_project("p", "native side")?;
    let local = Client::from_store(store);
    let native_spec =
        || SandboxSpec::new(&host).label("strata-bench", std::process::id().to_string());
    let runs = if ctx.quick { 3 } else { 7 };
    let mut rows = Vec::new();

    // Boots: the project's first Sandbox each time, beside a native create.
    let boots = if ctx.quick { 1 } else { 3 };
    let (mut firsts, mut boot_ms, mut natives) = (Vec::new(), Vec::new(), Vec::new());
    let mut sb = None;
    let (mut accel, mut why) = (String::new(), String::new());
    for b in 0..boots {
        let t = Instant::now();
        let s = local
            .create_sandbox(vms.spec(&host))
            .await
            .context("the project's first Sandbox in its VM")?;
        firsts.push(ms(t.elapsed()));
        let ep = vms.endpoint()?;
        boot_ms.push(ep["boot_ms"].as_f64().unwrap_or(f64::NAN));
        accel = match ep["accel"].as_str() {
            Some("kvm") => "KVM".into(),
            Some("tcg") => "TCG".into(),
            other => anyhow::bail!("strata vm status: accelerator {other:?}"),
        };
        why = ep["accel_reason"]
            .as_str()
            .unwrap_or("no reason given")
            .to_string();
        let t = Instant::now();
        let n = local.create_sandbox(native_spec()).await?;
        natives.push(ms(t.elapsed()));
        n.close_discard().await?;
        if b + 1 < boots {
            s.close_discard().await?;
            anyhow::ensure!(
                qemus_under(&vms.root).is_empty(),
                "the VM still runs after its last Sandbox closed"
            );
        } else {
            sb = Some(s);
        }
    }
    let sb = sb.expect("at least one boot");
    let short = accel.as_str();
    eprintln!("microvm: accelerator {accel}: {why}");
    // The reason's first clause (the rest, qemu's message, went to stderr).
    let why = why.split(':').next().unwrap_or_default();
    rows.push(
        Row::new(
            "microvm",
            &format!("accelerator: {accel} ({why})"),
            "1 = KVM",
            if short == "KVM" { 1.0 } else { 0.0 },
        )
        .note("(report)"),
    );
    let first = median(firsts);
    rows.push(kvm_goal(
        Row::new(
            "microvm",
            &format!(
                "project VM ready: first Sandbox create-to-ready ({short}, median of {boots})"
            ),
            "ms",
            first,
        )
        .compare("native create-to-ready", median(natives)),
        short,
        "< 1 s",
        first < 1000.0,
    ));
    rows.push(
        Row::new(
            "microvm",
            &format!("  of which VM boot-to-ready (qemu start to ready line, {short})"),
            "ms",
            median(boot_ms),
        )
        .note("(report)"),
    );

    let result = async {
        let mut rows = Vec::new();
        rows.extend(second_sandbox(ctx, vms, &local, &host, &native_spec, runs, short).await?);
        rows.extend(exec_true(ctx, &sb, &local, &native_spec, short).await?);
        rows.extend(flows(ctx, vms, &local, short).await?);
        anyhow::Ok(rows)
    }
    .await;
    // The VM's last Sandbox: its close (the SDK drops its record) stops
    // the VM, also after a failure.
    let closed = sb.close_discard().await;
    rows.extend(result?);
    closed?;
    Ok(rows)
}

/// A second Sandbox in the running VM, create-to-ready, beside native.
async fn second_sandbox(
    ctx: &Ctx,
    vms: &Vms,
    local: &Client,
    host: &Path,
    native_spec: &dyn Fn() -> SandboxSpec,
    runs: usize,
    accel: &str,
) -> anyhow::Result<Vec<Row>> {
    if !ctx.wants("second Sandbox") {
        return Ok(Vec::new());
    }
    let (mut vm, mut native) = (Vec::new(), Vec::new());
    for r in 0..=runs {
        let t = Instant::now();
        let s = local.create_sandbox(vms.spec(host)).await?;
        let d = t.elapsed();
        s.close_discard().await?;
        let t = Instant::now();
        let n = local.create_sandbox(native_spec()).await?;
        let d2 = t.elapsed();
        n.close_discard().await?;
        if r > 0 {
            vm.push(ms(d));
            native.push(ms(d2));
        }
    }
    let m = median(vm);
    Ok(vec![kvm_goal(
        Row::new(
            "microvm",
            &format!("second Sandbox in the VM, create-to-ready ({accel}, median of {runs})"),
            "ms",
            m,
        )
        .compare("native create-to-ready", median(native)),
        accel,
        "< 50 ms",
        m < 50.0,
    )])
}

/// Exec of `true` in the VM's Sandbox beside a native one, alternating.
async fn exec_true(
    ctx: &Ctx,
    sb: &Sandbox,
    local: &Client,
    native_spec: &dyn Fn() -> SandboxSpec,
    accel: &str,
) -> anyhow::Result<Vec<Row>> {
    if !ctx.wants("exec") {
        return Ok(Vec::new());
    }
    let n = if ctx.quick { 20 } else { 100 };
    let nsb = local.create_sandbox(native_spec()).await?;
    let result = async {
        let vws = sb.mount(&format!("{PROJECT}/main"), None).await?;
        let nws = nsb.mount("p/main", None).await?;
        let (mut vm, mut native) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for i in 0..n + 3 {
            for (ws, v) in [(&vws, &mut vm), (&nws, &mut native)] {
                let t = Instant::now();
                let o = ws.exec(["true"]).output().await?;
                let d = t.elapsed();
                anyhow::ensure!(o.status.success(), "true failed: {:?}", o.status);
                // The first three of each are the warm-up.
                if i >= 3 {
                    v.push(ms(d));
                }
            }
        }
        vws.unmount(true).await?;
        nws.unmount(true).await?;
        anyhow::Ok((median(vm), median(native)))
    }
    .await;
    nsb.close_discard().await?;
    let (vm, native) = result?;
    Ok(vec![kvm_goal(
        Row::new(
            "microvm",
            &format!("exec `true` in the VM's Sandbox ({accel}, median of {n})"),
            "ms",
            vm,
        )
        .compare("native exec `true`", native),
        accel,
        "< 10 ms",
        vm < 10.0,
    )])
}

/// The server group's 15-call flow over a client of the VM's endpoint
/// beside the same flow over a Store in this process.
async fn flows(ctx: &Ctx, vms: &Vms, local: &Client, accel: &str) -> anyhow::Result<Vec<Row>> {
    if !ctx.wants("flow") {
        return Ok(Vec::new());
    }
    let ep = vms.endpoint()?;
    let (Some(url), Some(token)) = (ep["url"].as_str(), ep["token"].as_str()) else {
        anyhow::bail!("the VM's endpoint without url or token: {ep}");
    };
    let remote = Client::connect(url, token)?;
    let runs = if ctx.quick { 2 } else { 5 };
    let (mut vm, mut native) = (Vec::new(), Vec::new());
    for r in 0..=runs {
        let t = Instant::now();
        let calls = flow(&remote, &format!("fv{r}"))
            .await
            .context("the flow in the VM")?
            .len();
        let d = t.elapsed();
        anyhow::ensure!(calls == 15, "the flow in the VM made {calls} calls");
        let t = Instant::now();
        let calls = flow(local, &format!("fn{r}"))
            .await
            .context("the native flow")?
            .len();
        let d2 = t.elapsed();
        anyhow::ensure!(calls == 15, "the native flow made {calls} calls");
        if r > 0 {
            vm.push(ms(d));
            native.push(ms(d2));
        }
    }
    Ok(vec![Row::new(
        "microvm",
        &format!("15-call flow through the VM's server ({accel}, median of {runs})"),
        "ms",
        median(vm),
    )
    .compare("native in-process Client", median(native))
    .note("(report)")])
}
