//! The sandbox group: the native backend through the SDK, as an agent uses
//! it. Sandbox create-to-ready, Workspace mount, exec of `true` (median and
//! p99), the 15-call SDK flow, and the reference system's end-to-end
//! workloads, each timed from before the Workspace is mounted to after it
//! is unmounted. Needs root (the daemon mounts FUSE and drops commands to
//! uid 1500), like the Sandbox itself.

use crate::report::{median, ms, p99, Row};
use crate::Ctx;
use anyhow::Context;
use std::time::{Duration, Instant};
use strata_sdk::{CommitOutcome, Sandbox, SandboxSpec, Store, Workspace};

#[allow(dead_code, clippy::all)]
#[path = "../../strata-sdk/examples/flow.rs"]
mod flow;

const MIB32: usize = 32 << 20;

pub fn run(ctx: &Ctx) -> anyhow::Result<Vec<Row>> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(run_async(ctx))
}

/// Run `sh -c script` in the Workspace as the Sandbox's command user and
/// fail with its stderr if it fails.
async fn sh(ws: &Workspace, script: &str) -> anyhow::Result<()> {
    let o = ws.exec(["sh", "-c", script]).output().await?;
    anyhow::ensure!(
        o.status.success(),
        "`{script}` failed: {:?} {}",
        o.status,
        o.stderr_str()
    );
    Ok(())
}

async fn commit(ws: &Workspace, msg: &str) -> anyhow::Result<()> {
    match ws.commit(msg).await? {
        CommitOutcome::Committed(_) => Ok(()),
        other => anyhow::bail!("commit {msg}: expected a new commit, got {other:?}"),
    }
}

async fn run_async(ctx: &Ctx) -> anyhow::Result<Vec<Row>> {
    let dir = ctx.scratch.join("sandbox");
    let src = dir.join("src");
    std::fs::create_dir_all(&src)?;
    std::fs::write(src.join("README"), b"bench\n")?;
    let store = Store::create(dir.join("store")).await?;
    store.create_project_from("p", &src).await?;
    let runs = if ctx.quick { 3 } else { 7 };
    let label = std::process::id().to_string();
    let spec = || SandboxSpec::new(store.dir()).label("strata-bench", label.clone());
    let mut rows = Vec::new();

    if ctx.wants("create") || ctx.wants("exec") || ctx.wants("mount") {
        let (mut creates, mut mounts) = (Vec::new(), Vec::new());
        for r in 0..=runs {
            let t = Instant::now();
            let sb = Sandbox::create(spec()).await?;
            let c = t.elapsed();
            let t = Instant::now();
            let ws = sb.mount("p/main", None).await?;
            let m = t.elapsed();
            ws.unmount(true).await?;
            sb.close().await?;
            if r > 0 {
                creates.push(ms(c));
                mounts.push(ms(m));
            }
        }
        rows.push(
            Row::new("sandbox", "Sandbox create-to-ready", "ms", median(creates))
                .goal("(report)", true),
        );
        let m = median(mounts);
        rows.push(
            Row::new("sandbox", "workspace mount (phase)", "ms", m)
                .compare("reference (published)", 11.5)
                .goal("< 5 ms (ref 10-13 ms)", m < 5.0),
        );
        let sb = Sandbox::create(spec()).await?;
        let ws = sb.mount("p/main", None).await?;
        let n = if ctx.quick { 100 } else { 200 };
        for _ in 0..10 {
            ws.exec(["true"]).output().await?;
        }
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            let o = ws.exec(["true"]).output().await?;
            v.push(ms(t.elapsed()));
            anyhow::ensure!(o.status.success(), "true failed: {:?}", o.status);
        }
        ws.unmount(true).await?;
        sb.close().await?;
        let m = median(v.clone());
        rows.push(
            Row::new("sandbox", &format!("exec `true`, median of {n}"), "ms", m)
                .compare("reference Docker exec (published)", 88.0)
                .goal("< 5 ms (ref 88-197 ms)", m < 5.0),
        );
        rows.push(
            Row::new("sandbox", &format!("exec `true`, p99 of {n}"), "ms", p99(v))
                .goal("(report)", true),
        );
    }

    if ctx.wants("flow") {
        let mut v = Vec::new();
        for r in 0..=runs {
            let d = dir.join(format!("flow-{r}"));
            std::fs::create_dir_all(&d)?;
            let steps = flow::flow(&d).await.context("the SDK flow")?;
            let total: Duration = steps.iter().map(|s| s.took).sum();
            anyhow::ensure!(steps.len() >= 15, "the flow made {} calls", steps.len());
            if r > 0 {
                v.push(ms(total));
            }
        }
        let m = median(v);
        rows.push(
            Row::new("sandbox", "15-call SDK flow", "ms", m)
                .compare("reference (published)", 315.0)
                .goal("< 100 ms (ref 315-488 ms)", m < 100.0),
        );
    }

    if ctx.wants("full-flow") {
        let mut v = Vec::new();
        for r in 0..=runs {
            let branch = format!("p/full{r}");
            store.fork("p/main", &branch).await?;
            let t = Instant::now();
            full_flow(spec(), &branch).await?;
            if r > 0 {
                v.push(ms(t.elapsed()));
            }
        }
        let m = median(v);
        rows.push(
            Row::new(
                "sandbox",
                "full flow: create, mount, 10 execs, commit, unmount, close",
                "ms",
                m,
            )
            .goal("(report)", true),
        );
    }

    // `--workload end-to-end` runs all four; a row's own name runs it alone.
    let e2e = |name: &str| ctx.wants("end-to-end") || ctx.wants(name);
    if E2E.iter().any(|w| e2e(w.0)) {
        rows.extend(end_to_end(&store, &spec, runs, &e2e).await?);
    }
    Ok(rows)
}

/// The native Sandbox issue's full flow, as one agent task: a new Sandbox,
/// a Workspace of `branch`, ten execs (each writes one file, so the commit
/// has work to publish), the commit, the unmount and the close.
async fn full_flow(spec: SandboxSpec, branch: &str) -> anyhow::Result<()> {
    let sb = Sandbox::create(spec).await?;
    let ws = sb.mount(branch, None).await?;
    for i in 0..10 {
        sh(&ws, &format!("echo {i} > f{i}")).await?;
    }
    commit(&ws, "full flow").await?;
    ws.unmount(false).await?;
    sb.close().await?;
    Ok(())
}

/// The reference's end-to-end workloads with its definitions: each run
/// mounts a Workspace of its own branch, works through execs, commits and
/// unmounts; the time covers all of it.
type Work = (&'static str, f64, f64);

/// The end-to-end workloads: name, the reference's published figure, goal
/// (0: beat the reference).
const E2E: [Work; 4] = [
    ("cold create of a 32 MiB file, commit", 161.0, 120.0),
    (
        "16 x 10-byte overwrites across 32 MiB, commit after each",
        169.0,
        85.0,
    ),
    ("prepend 10 B via temp copy + rename, commit", 232.0, 0.0),
    ("read 32 MiB", 119.0, 0.0),
];

async fn end_to_end(
    store: &Store,
    spec: &dyn Fn() -> SandboxSpec,
    runs: usize,
    wanted: &dyn Fn(&str) -> bool,
) -> anyhow::Result<Vec<Row>> {
    let sb = Sandbox::create(spec()).await?;
    // A branch holding a 32 MiB random file, for the edit and read rows.
    let ws = sb.mount("p/main", None).await?;
    sh(&ws, &format!("head -c {MIB32} /dev/urandom > big")).await?;
    commit(&ws, "32 MiB").await?;
    ws.unmount(false).await?;
    let overwrites = (0..16)
        .map(|i| {
            format!(
                "printf 0123456789 | dd of=big bs=1 seek={} conv=notrunc status=none",
                i * (MIB32 / 16) + 7
            )
        })
        .collect::<Vec<_>>();
    let mut rows = Vec::new();
    for (k, (name, reference, goal)) in E2E.iter().enumerate() {
        if !wanted(name) {
            continue;
        }
        let mut v = Vec::new();
        // The cold create's commit step alone, and its other phases
        // (mount, write, unmount), printed for profiles.
        let mut commit_step = Vec::new();
        let mut phases: [Vec<f64>; 3] = Default::default();
        // The overwrites' phases: the first exec (with the copy-up), the
        // other execs, the commits, the unmount.
        let (mut first_exec, mut execs, mut commits) = (Vec::new(), Vec::new(), Vec::new());
        for r in 0..=runs {
            let branch = format!("p/e{k}r{r}");
            store.fork("p/main", &branch).await?;
            let t = Instant::now();
            let ws = sb.mount(&branch, None).await?;
            let mounted = t.elapsed();
            match k {
                0 => {
                    sh(&ws, &format!("head -c {MIB32} /dev/urandom > new")).await?;
                    let c = Instant::now();
                    commit(&ws, name).await?;
                    if r > 0 {
                        commit_step.push(ms(c.elapsed()));
                        phases[0].push(ms(mounted));
                        phases[1].push(ms(c - t) - ms(mounted));
                    }
                }
                1 => {
                    for (i, o) in overwrites.iter().enumerate() {
                        let e = Instant::now();
                        sh(&ws, o).await?;
                        let c = Instant::now();
                        commit(&ws, name).await?;
                        if r > 0 {
                            // The first write copies the base file up.
                            let exec = if i == 0 { &mut first_exec } else { &mut execs };
                            exec.push(ms(c - e));
                            commits.push(ms(c.elapsed()));
                        }
                    }
                }
                2 => {
                    sh(
                        &ws,
                        "{ printf 0123456789; cat big; } > big.tmp && mv big.tmp big",
                    )
                    .await?;
                    commit(&ws, name).await?;
                }
                _ => sh(&ws, "cat big > /dev/null").await?,
            }
            let u = Instant::now();
            ws.unmount(false).await?;
            if r > 0 {
                v.push(ms(t.elapsed()));
                if k <= 1 {
                    phases[2].push(ms(u.elapsed()));
                }
                if k == 1 {
                    phases[0].push(ms(mounted));
                }
            }
        }
        if k == 0 {
            let [m, w, u] = phases.clone().map(median);
            eprintln!("  {name}: mount {m:.1} ms, write {w:.1} ms, unmount {u:.1} ms (medians)");
        }
        if k == 1 {
            let [m, _, u] = phases.clone().map(median);
            let (f, e, c) = (median(first_exec), median(execs), median(commits));
            eprintln!("  {name}: mount {m:.1} ms, first exec {f:.1} ms, other execs {e:.2} ms, commits {c:.2} ms, unmount {u:.1} ms (medians)");
        }
        let m = median(v);
        let (g, met) = if *goal > 0.0 {
            (format!("< {goal} ms (ref {reference} ms)"), m < *goal)
        } else {
            (format!("< ref {reference} ms"), m < *reference)
        };
        rows.push(
            Row::new("sandbox", name, "ms", m)
                .compare("reference (published)", *reference)
                .goal(&g, met),
        );
        if !commit_step.is_empty() {
            let c = median(commit_step);
            rows.push(
                Row::new("sandbox", "  its commit step alone", "ms", c).goal("< 40 ms", c < 40.0),
            );
        }
    }
    sb.close().await?;
    Ok(rows)
}
