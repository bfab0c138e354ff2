//! The python group: the Python SDK (sdk/python, sync client) beside the
//! Rust SDK (`strata_sdk::Client::connect`) through one server on a fresh
//! Store, in one run. The server is started as the server group starts
//! it (strata-server's router in this process, on a Unix socket; its
//! Sandboxes re-execute this binary as their daemon). Three calls, each
//! with the same checks on both sides:
//!
//! - a cheap call: the branch list of a project with 10 branches;
//! - exec of `true` in one Sandbox's Workspace, both SDKs on the same one
//!   (median and p99);
//! - the 15-call flow through the server (docs/benchmarks.md, "Python SDK
//!   through `strata serve`": crates/strata-sdk/examples/flow.rs with the
//!   Store already there, so its first two calls create a project and
//!   write its two files as one commit).
//!
//! Beside the wall-clock rows, the client's own CPU time per list and per
//! exec (the Python process's `time.process_time()`, the Rust client
//! thread's schedstat), which a loaded machine inflates far less than the
//! wall clock: what the Python SDK adds is read there best.
//!
//! The Python side is `sdk/python/bench/pair.py`, run with the test venv's
//! interpreter (`$STRATA_TEST_PYTHON`, else `target/py-venv/bin/python`)
//! and this repository's `sdk/python/src` first on `PYTHONPATH`; it prints
//! its timings as JSON. Order: half of the Rust calls, all of the Python
//! ones, the other half of the Rust ones, so that a machine whose load
//! drifts during the run weighs on both sides alike. Each side warms up
//! first (100 lists, 10 execs, one flow; untimed).

use std::path::{Path, PathBuf};

use crate::report::{median, ms, Row};
use crate::server::Served;
use crate::Ctx;
use strata_sdk::wire::Change;
use strata_sdk::{Client, CommitOutcome, SandboxFilter, SandboxSpec};
use strata_store::{BranchRef, Store, StoreOptions};

/// How many timed calls of each kind.
struct Counts {
    lists: usize,
    execs: usize,
    flows: usize,
}

/// The repository this benchmark was built from (for pair.py and the venv).
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The venv's interpreter, or an error that says how to make it.
fn python() -> anyhow::Result<PathBuf> {
    let (py, from) = match std::env::var_os("STRATA_TEST_PYTHON") {
        Some(p) => (PathBuf::from(p), "$STRATA_TEST_PYTHON"),
        None => (repo().join("target/py-venv/bin/python"), "the test venv"),
    };
    anyhow::ensure!(
        py.exists(),
        "the python group needs a Python with httpx and websockets: {from} {} does not exist; make the venv \
         with `scripts/test --setup-only` (target/py-venv, from scripts/requirements-test.txt) \
         or point STRATA_TEST_PYTHON at one",
        py.display()
    );
    let o = std::process::Command::new(&py)
        .args(["-c", "import httpx, websockets"])
        .output()?;
    anyhow::ensure!(
        o.status.success(),
        "the python group: {} cannot import the SDK's dependencies httpx and websockets (make \
         the venv again with `scripts/test --setup-only`): {}",
        py.display(),
        String::from_utf8_lossy(&o.stderr).trim()
    );
    Ok(py)
}

fn p99(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v.get((v.len() * 99).div_ceil(100).saturating_sub(1))
        .copied()
        .unwrap_or(f64::NAN)
}

fn fail(what: String) -> anyhow::Error {
    anyhow::anyhow!("python group, Rust side: {what}")
}

pub fn run(ctx: &Ctx) -> anyhow::Result<Vec<Row>> {
    anyhow::ensure!(
        rustix::process::geteuid().is_root(),
        "the python group creates Sandboxes through the server and needs root"
    );
    let py = python()?;
    let script = repo().join("sdk/python/bench/pair.py");
    anyhow::ensure!(script.exists(), "no {}", script.display());

    let dir = ctx.scratch.join("python");
    std::fs::create_dir_all(&dir)?;
    let store = Store::create(&dir.join("store"), &StoreOptions::default())?;
    let head = store.create_project("b", "empty")?;
    for i in 0..9 {
        store.create_branch(&BranchRef::new("b", &format!("agent-{i}"))?, head)?;
    }
    let served = Served::start(&store, dir.join("server.sock"))?;
    let (sock, token) = (served.sock.clone(), served.token.clone());
    let url = format!("unix://{}", sock.display());
    // The client on this thread, as a Python program's client is on its.
    let crt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = Client::connect(&url, &token)?;
    let n = if ctx.quick {
        Counts {
            lists: 200,
            execs: 50,
            flows: 4,
        }
    } else {
        Counts {
            lists: 2000,
            execs: 200,
            flows: 10,
        }
    };
    let result = crt.block_on(side_by_side(ctx, &client, &py, &script, &url, &token, &n));
    // Every Sandbox of this fresh Store is this group's: close what a
    // failed run left.
    crt.block_on(async {
        for info in client
            .sandboxes(SandboxFilter::default())
            .await
            .unwrap_or_default()
        {
            if let Ok(sb) = client.sandbox(info.id.as_str()).await {
                let _ = sb.close_discard().await;
            }
        }
    });
    served.stop()?;
    result
}

/// The Rust side's samples (milliseconds) and the CPU time its client
/// thread spent in the timed lists and execs (nanoseconds).
#[derive(Default)]
struct Samples {
    lists: Vec<f64>,
    execs: Vec<f64>,
    flows: Vec<f64>,
    lists_cpu_ns: u64,
    execs_cpu_ns: u64,
}

/// This thread's time on a CPU so far, in nanoseconds: the first field of
/// /proc/thread-self/schedstat (proc(5)). The client runs on this thread
/// (a current-thread runtime) and the server on the other runtime's, so
/// this is the Rust SDK's own work, as `time.process_time()` is the
/// Python side's.
fn thread_cpu_ns() -> anyhow::Result<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat")?;
    s.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("/proc/thread-self/schedstat: {s:?}"))
}

/// What pair.py prints.
#[derive(serde::Deserialize)]
struct PySide {
    python: String,
    httpx: String,
    branch_list_ms: Vec<f64>,
    branch_list_cpu_ms: f64,
    exec_true_ms: Vec<f64>,
    exec_true_cpu_ms: f64,
    flow_ms: Vec<f64>,
}

async fn side_by_side(
    ctx: &Ctx,
    c: &Client,
    py: &Path,
    script: &Path,
    url: &str,
    token: &str,
    n: &Counts,
) -> anyhow::Result<Vec<Row>> {
    let sb = c
        .create_sandbox(SandboxSpec::new(PathBuf::new()).label("strata-bench", "python"))
        .await?;
    let ws = sb.mount("b/main", None).await?;
    let list = || async {
        let t = std::time::Instant::now();
        let got = c.branches(Some("b")).await?.len();
        let took = ms(t.elapsed());
        if got != 10 {
            return Err(fail(format!("b has {got} branches, expected 10")));
        }
        Ok::<_, anyhow::Error>(took)
    };
    let exec = || async {
        let t = std::time::Instant::now();
        let o = ws.exec(["true"]).output().await?;
        let took = ms(t.elapsed());
        if !o.status.success() {
            return Err(fail(format!("`true` ended with {:?}", o.status)));
        }
        Ok::<_, anyhow::Error>(took)
    };
    // Warm-up, untimed.
    for _ in 0..100 {
        list().await?;
    }
    for _ in 0..10 {
        exec().await?;
    }
    flow(c, "rust-warm").await?;

    let mut rust = Samples::default();
    let halves = [n.lists / 2, n.lists - n.lists / 2];
    let exec_halves = [n.execs / 2, n.execs - n.execs / 2];
    let flow_halves = [n.flows / 2, n.flows - n.flows / 2];
    let mut pyside = None;
    for half in 0..2 {
        let cpu = thread_cpu_ns()?;
        for _ in 0..halves[half] {
            rust.lists.push(list().await?);
        }
        rust.lists_cpu_ns += thread_cpu_ns()? - cpu;
        let cpu = thread_cpu_ns()?;
        for _ in 0..exec_halves[half] {
            rust.execs.push(exec().await?);
        }
        rust.execs_cpu_ns += thread_cpu_ns()? - cpu;
        for i in 0..flow_halves[half] {
            rust.flows.push(flow(c, &format!("rust-{half}-{i}")).await?);
        }
        if half == 0 {
            pyside = Some(run_python(py, script, url, token, sb.id(), ws.id(), n)?);
        }
    }
    ws.unmount(true).await?;
    sb.close_discard().await?;
    let p = pyside.expect("ran in the first half");
    eprintln!(
        "python group: CPython {}, httpx {}{}",
        p.python,
        p.httpx,
        if ctx.quick { " (--quick)" } else { "" }
    );
    let side = |workload: String, unit: &str, py: f64, rs: f64, goal: Option<f64>| {
        let row = Row::new("python", &workload, unit, py).compare("Rust SDK, same server", rs);
        match goal {
            Some(g) => row.goal(&format!("< +{g} ms"), py - rs < g),
            None => row.goal("(report)", true),
        }
    };
    let per_call = |ns: u64, calls: usize| ns as f64 / 1e6 / calls.max(1) as f64;
    let (list_cpu, exec_cpu) = (
        per_call(rust.lists_cpu_ns, rust.lists.len()),
        per_call(rust.execs_cpu_ns, rust.execs.len()),
    );
    Ok(vec![
        side(
            "client CPU per branch list: Python process vs Rust SDK thread (mean)".into(),
            "ms",
            p.branch_list_cpu_ms,
            list_cpu,
            Some(1.0),
        ),
        side(
            "client CPU per exec of `true`: Python process vs Rust SDK thread (mean)".into(),
            "ms",
            p.exec_true_cpu_ms,
            exec_cpu,
            Some(1.0),
        ),
        side(
            format!(
                "branch list (10 branches), Python SDK (median of {})",
                p.branch_list_ms.len()
            ),
            "ms",
            median(p.branch_list_ms),
            median(rust.lists),
            Some(1.0),
        ),
        side(
            format!(
                "exec `true` through the server, Python SDK (median of {})",
                p.exec_true_ms.len()
            ),
            "ms",
            median(p.exec_true_ms.clone()),
            median(rust.execs.clone()),
            Some(1.0),
        ),
        side(
            format!(
                "exec `true` through the server, Python SDK (p99 of {})",
                p.exec_true_ms.len()
            ),
            "ms",
            p99(p.exec_true_ms),
            p99(rust.execs),
            None,
        ),
        side(
            format!(
                "15-call flow through the server, Python SDK (median of {})",
                p.flow_ms.len()
            ),
            "ms",
            median(p.flow_ms),
            median(rust.flows),
            Some(15.0),
        ),
    ])
}

/// pair.py on the same server, Sandbox and Workspace; its JSON parsed.
fn run_python(
    py: &Path,
    script: &Path,
    url: &str,
    token: &str,
    sandbox: &str,
    workspace: &str,
    n: &Counts,
) -> anyhow::Result<PySide> {
    let mut path = std::ffi::OsString::from(repo().join("sdk/python/src"));
    if let Some(old) = std::env::var_os("PYTHONPATH") {
        path.push(":");
        path.push(old);
    }
    let o = std::process::Command::new(py)
        .arg(script)
        .args(["--url", url, "--token", token, "--project", "b"])
        .args(["--sandbox", sandbox, "--workspace", workspace])
        .args(["--rounds", &n.lists.to_string()])
        .args(["--exec-rounds", &n.execs.to_string()])
        .args(["--flows", &n.flows.to_string()])
        .env("PYTHONPATH", path)
        .stderr(std::process::Stdio::inherit())
        .output()?;
    anyhow::ensure!(
        o.status.success(),
        "{} {} failed ({}); its error is above",
        py.display(),
        script.display(),
        o.status
    );
    serde_json::from_slice(&o.stdout).map_err(|e| {
        anyhow::anyhow!(
            "pair.py printed no timings JSON ({e}): {}",
            String::from_utf8_lossy(&o.stdout)
        )
    })
}

/// The 15 calls (the Python side's `flow` in sdk/python/bench/bench.py),
/// each checked; returns the total in milliseconds.
async fn flow(c: &Client, tag: &str) -> anyhow::Result<f64> {
    let t = std::time::Instant::now();
    let p = format!("flow-{tag}");
    let head = c.create_project(&p, "flow").await?;
    let put = |path: &str, content: &str| Change::Put {
        path: path.into(),
        content: Some(content.into()),
        content_base64: None,
        mode: None,
    };
    c.commit_changes(
        &format!("{p}/main"),
        &head,
        "flow: files",
        vec![put("README", "demo project\n"), put("lib/a.txt", "a\n")],
    )
    .await?;
    c.fork(&format!("{p}/main"), &format!("{p}/agent")).await?;
    let sb = c
        .create_sandbox(SandboxSpec::new(PathBuf::new()).label("flow-run", tag))
        .await?;
    let ws = sb.mount(&format!("{p}/agent"), None).await?;
    let o = ws
        .exec(["sh", "-c", "echo 'written in a sandbox' > out.txt; id -u"])
        .output()
        .await?;
    if o.stdout != b"1500\n" {
        return Err(fail(format!("exec a write: {o:?}")));
    }
    let o = ws.exec(["cat", "out.txt", "README"]).output().await?;
    if o.stdout != b"written in a sandbox\ndemo project\n" {
        return Err(fail(format!("exec a read: {o:?}")));
    }
    if !ws.status().await?.iter().any(|c| c.path == b"out.txt") {
        return Err(fail("status has no out.txt".into()));
    }
    let CommitOutcome::Committed(_) = ws.commit("flow: out.txt").await? else {
        return Err(fail("commit: nothing committed".into()));
    };
    let o = ws
        .exec(["sh", "-c", "tr a-z A-Z; echo err >&2"])
        .stdin_bytes("via stdin\n")
        .output()
        .await?;
    if o.stdout != b"VIA STDIN\n" || o.stderr != b"err\n" {
        return Err(fail(format!("exec with stdin: {o:?}")));
    }
    let mut h = ws.exec(["sleep", "1000"]).spawn().await?;
    let st = h.cancel().await?;
    if !st.cancelled || st.signal_name.as_deref() != Some("SIGTERM") {
        return Err(fail(format!("cancel: {st:?}")));
    }
    if !sb.logs(20).await?.contains("exec") {
        return Err(fail("the log tail names no exec".into()));
    }
    ws.unmount(false).await?;
    sb.close().await?;
    let bytes = c.read_file(&format!("{p}/agent"), b"out.txt").await?;
    if bytes != b"written in a sandbox\n" {
        return Err(fail(format!("read back: {bytes:?}")));
    }
    Ok(ms(t.elapsed()))
}
