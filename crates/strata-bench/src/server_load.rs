//! Server group, continued (needs root, as the relay rows): the SDK
//! through `strata serve` against the SDK in-process, side by side in one
//! run, on the server of `server.rs`'s relay rows.
//!
//! - *The 15-call flow* over `strata_sdk::Client`, the same code in both
//!   modes (`Client::from_store` vs `Client::connect` to the server's Unix
//!   socket): create a project, fork, create a Sandbox, mount, exec a
//!   write, exec a read, status, commit, exec with stdin, spawn + cancel,
//!   log, read the committed file from the Store, unmount, close, branch
//!   list. Every result checked; medians of 5 runs (3 with --quick), each
//!   mode after one warm-up run.
//! - *A 32 MiB file read from a live Workspace* through the daemon's raw
//!   file route (`GET …/workspaces/{id}/files`, relayed by the server as
//!   it comes) vs the same route on the daemon's own socket; MB/s, medians
//!   of 5 (3).
//! - *32 concurrent clients x 100 execs of `true`* through the server
//!   (8 x 10 with --quick), each client a thread with its own SDK client:
//!   throughput (execs/s) and the p99 of one exec.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::report::{median, ms, p99, time, Row};
use crate::Ctx;
use strata_sdk::{Client, CommitOutcome, SandboxSpec};

fn check(ok: bool, what: impl FnOnce() -> String) -> anyhow::Result<()> {
    anyhow::ensure!(ok, "flow check failed: {}", what());
    Ok(())
}

/// The flow's calls, in order, with what each took.
pub(crate) type Steps = Vec<(&'static str, Duration)>;

/// The flow on `c` for project `p`; returns each call's name and time
/// (so the number of calls is its length). Also the microvm group's (over
/// a client of a VM's endpoint).
pub(crate) async fn flow(c: &Client, p: &str) -> anyhow::Result<Steps> {
    let mut steps = Steps::new();
    let mut t = Instant::now();
    let mut n = |name: &'static str| {
        steps.push((name, t.elapsed()));
        t = Instant::now();
    };
    c.create_project(p, "flow").await?;
    n("create project");
    let agent = format!("{p}/agent");
    c.fork(&format!("{p}/main"), &agent).await?;
    n("fork");
    let spec = SandboxSpec::new(std::path::PathBuf::new())
        .label("strata-bench", std::process::id().to_string());
    let sb = c.create_sandbox(spec).await?;
    n("create Sandbox");
    let ws = sb.mount(&agent, None).await?;
    n("mount");
    let o = ws
        .exec(["sh", "-c", "echo written > out.txt"])
        .output()
        .await?;
    check(o.status.success(), || o.stderr_str())?;
    n("exec a write");
    let o = ws.exec(["cat", "out.txt"]).output().await?;
    check(o.stdout == b"written\n", || o.stdout_str())?;
    n("exec a read");
    let st = ws.status().await?;
    check(st.iter().any(|c| c.path == b"out.txt"), || {
        format!("{st:?}")
    })?;
    n("status");
    let CommitOutcome::Committed(commit) = ws.commit("flow").await? else {
        anyhow::bail!("flow: nothing committed");
    };
    n("commit");
    let o = ws
        .exec(["tr", "a-z", "A-Z"])
        .stdin_bytes("in\n")
        .output()
        .await?;
    check(o.stdout == b"IN\n", || o.stdout_str())?;
    n("exec with stdin");
    let mut h = ws.exec(["sleep", "1000"]).spawn().await?;
    check(h.cancel().await?.cancelled, || "not cancelled".into())?;
    n("spawn + cancel");
    let log = c.log(&agent, Some(2)).await?;
    check(log[0].id == commit, || format!("{:?}", log[0].id))?;
    n("log");
    let b = c.read_file(&agent, b"out.txt").await?;
    check(b == b"written\n", || {
        String::from_utf8_lossy(&b).into_owned()
    })?;
    n("read from the Store");
    ws.unmount(false).await?;
    n("unmount");
    sb.close().await?;
    n("close Sandbox");
    let l = c.branches(Some(p)).await?;
    check(l.len() == 2, || format!("{} branches", l.len()))?;
    n("branch list");
    Ok(steps)
}

/// The rows; `server` is the bench's `strata serve` socket, `sb` its
/// Sandbox with Workspace `ws` mounted (from the relay rows).
pub fn rows(
    ctx: &Ctx,
    rt: &tokio::runtime::Runtime,
    store: &strata_store::Store,
    sock: &std::path::Path,
    token: &str,
    sb: &str,
    ws: &str,
) -> anyhow::Result<Vec<Row>> {
    let remote = Client::connect(&format!("unix://{}", sock.display()), token)?;
    let local = Client::from_store(store.clone());
    let mut rows = Vec::new();
    if ctx.wants("15-call flow through the server") {
        let runs = if ctx.quick { 3 } else { 5 };
        let (mut srv, mut inp) = (Vec::new(), Vec::new());
        for r in 0..=runs {
            let (s, d) = time(|| rt.block_on(flow(&remote, &format!("fr{r}"))));
            let s = s?;
            anyhow::ensure!(
                s.len() == 15,
                "the flow through the server made other than 15 calls"
            );
            let (s2, d2) = time(|| rt.block_on(flow(&local, &format!("fl{r}"))));
            let s2 = s2?;
            anyhow::ensure!(
                s2.len() == 15,
                "the in-process flow made other than 15 calls"
            );
            if r > 0 {
                srv.push((ms(d), s));
                inp.push((ms(d2), s2));
            }
        }
        let total = |v: &[(f64, Steps)]| median(v.iter().map(|(d, _)| *d).collect());
        let (a, b) = (total(&srv), total(&inp));
        rows.push(
            Row::new(
                "server",
                &format!("15-call flow through the server (SDK Client, median of {runs})"),
                "ms",
                a,
            )
            .compare("in-process Client", b)
            .goal("< 50 ms", a < 50.0),
        );
        // Where the flow's time goes: each call's median over the same
        // runs (the medians need not add up to the total's).
        let step =
            |v: &[(f64, Steps)], i: usize| median(v.iter().map(|(_, s)| ms(s[i].1)).collect());
        for (i, (name, _)) in srv[0].1.iter().enumerate() {
            rows.push(
                Row::new(
                    "server",
                    &format!("flow call {:>2}: {name}", i + 1),
                    "ms",
                    step(&srv, i),
                )
                .compare("in-process Client", step(&inp, i))
                .note("(breakdown)"),
            );
        }
    }
    if ctx.wants("32 MiB file route through the relay") {
        let (rws, dws) = rt.block_on(async {
            let r = remote.sandbox(sb).await?.workspaces().await?;
            let d = strata_sdk::Sandbox::open(sb).await?.workspaces().await?;
            let pick = |v: Vec<strata_sdk::Workspace>| v.into_iter().find(|w| w.id() == ws);
            anyhow::Ok((pick(r), pick(d)))
        })?;
        let (Some(rws), Some(dws)) = (rws, dws) else {
            anyhow::bail!("Workspace {ws} is not listed by its Sandbox");
        };
        let o = rt.block_on(
            dws.exec(["sh", "-c", "head -c 33554432 /dev/urandom > big-file"])
                .output(),
        )?;
        anyhow::ensure!(o.status.success(), "making the file: {}", o.stderr_str());
        let runs = if ctx.quick { 3 } else { 5 };
        let mbs = |d: Duration| 32.0 * 1.048576 / d.as_secs_f64();
        let (mut srv, mut dir, mut strm, mut strm_dir) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for r in 0..=runs {
            let (b, d) = time(|| rt.block_on(rws.read_file("big-file")));
            anyhow::ensure!(b?.len() == 32 << 20, "a short read through the server");
            let (b, d2) = time(|| rt.block_on(dws.read_file("big-file")));
            anyhow::ensure!(b?.len() == 32 << 20, "a short read from the daemon");
            // The same route consumed as it arrives (`read_file_to`): the
            // route's own rate, without the fresh 32 MiB buffer's page
            // faults that `read_file` must pay on the client.
            let mut sink = std::io::sink();
            let (n, d3) = time(|| rt.block_on(rws.read_file_to("big-file", &mut sink)));
            anyhow::ensure!(n? == 32 << 20, "a short streamed read through the server");
            let (n, d4) = time(|| rt.block_on(dws.read_file_to("big-file", &mut sink)));
            anyhow::ensure!(n? == 32 << 20, "a short streamed read from the daemon");
            if r > 0 {
                srv.push(mbs(d));
                dir.push(mbs(d2));
                strm.push(mbs(d3));
                strm_dir.push(mbs(d4));
            }
        }
        let streamed = median(strm);
        rows.push(
            Row::new(
                "server",
                &format!("32 MiB file route, streamed (read_file_to; median of {runs})"),
                "MB/s",
                streamed,
            )
            .compare("the daemon's socket directly", median(strm_dir))
            .goal(">= 1000 MB/s", streamed >= 1000.0),
        );
        let (a, b) = (median(srv), median(dir));
        rows.push(
            Row::new(
                "server",
                &format!("32 MiB file route through the relay (raw bytes; median of {runs})"),
                "MB/s",
                a,
            )
            .compare("the daemon's socket directly", b)
            .goal(">= 1000 MB/s", a >= 1000.0),
        );
    }
    if ctx.wants("concurrent execs through the server") {
        let (clients, each) = if ctx.quick { (8, 10) } else { (32, 100) };
        let lat = Arc::new(std::sync::Mutex::new(Vec::with_capacity(clients * each)));
        let t0 = Instant::now();
        let threads: Vec<_> = (0..clients)
            .map(|_| {
                let (lat, url, token) = (
                    lat.clone(),
                    format!("unix://{}", sock.display()),
                    token.to_string(),
                );
                let (sb, ws) = (sb.to_string(), ws.to_string());
                std::thread::spawn(move || -> anyhow::Result<()> {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()?;
                    rt.block_on(async {
                        let c = Client::connect(&url, &token)?;
                        let w = c.sandbox(&sb).await?.workspaces().await?;
                        let w = w
                            .into_iter()
                            .find(|w| w.id() == ws)
                            .ok_or_else(|| anyhow::anyhow!("no Workspace {ws}"))?;
                        for _ in 0..each {
                            let t = Instant::now();
                            let o = w.exec(["true"]).output().await?;
                            anyhow::ensure!(o.status.success(), "true failed: {:?}", o.status);
                            lat.lock().unwrap().push(ms(t.elapsed()));
                        }
                        Ok(())
                    })
                })
            })
            .collect();
        for t in threads {
            t.join()
                .map_err(|_| anyhow::anyhow!("a client thread panicked"))??;
        }
        let secs = t0.elapsed().as_secs_f64();
        let v = std::mem::take(&mut *lat.lock().unwrap());
        let total = v.len();
        rows.push(
            Row::new(
                "server",
                &format!(
                    "{clients} clients x {each} execs of `true` through the server: throughput"
                ),
                "execs/s",
                total as f64 / secs,
            )
            .goal("(report)", true),
        );
        rows.push(
            Row::new(
                "server",
                &format!("{clients} clients x {each} execs of `true` through the server: p99 of one exec"),
                "ms",
                p99(v),
            )
            .goal("(report)", true),
        );
    }
    Ok(rows)
}
