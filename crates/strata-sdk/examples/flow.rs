//! The 15-call SDK flow (docs/benchmarks.md), each call timed and printed as a table.
//!
//! Run as root (Sandboxes need namespaces and FUSE):
//! `cargo run --release -p strata-sdk --example flow`
//!
//! Every step checks its own result (the test `tests/flow.rs` runs this
//! same code), including reading the committed bytes back from the Store.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use strata_sdk::{CommitOutcome, Sandbox, SandboxSpec, Store};

/// One timed step.
pub struct Step {
    pub name: &'static str,
    pub took: Duration,
    pub note: String,
}

fn check(ok: bool, what: String) -> strata_sdk::Result<()> {
    if ok {
        Ok(())
    } else {
        Err(strata_sdk::Error::Backend {
            what: format!("flow check failed: {what}"),
            log_tail: String::new(),
            source: None,
        })
    }
}

/// The flow in a fresh Store under `dir`; returns the 15 timed steps.
pub async fn flow(dir: &std::path::Path) -> strata_sdk::Result<Vec<Step>> {
    let mut steps = Vec::new();
    // A small project to import.
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("lib")).expect("mkdir");
    std::fs::write(src.join("README"), b"demo project\n").expect("write");
    std::fs::write(src.join("lib/a.txt"), b"a\n").expect("write");
    let mut t = Instant::now();
    let mut lap = |steps: &mut Vec<Step>, name: &'static str, note: String| {
        steps.push(Step {
            name,
            took: t.elapsed(),
            note,
        });
        t = Instant::now();
    };

    // (1) open a new Store.
    let store = Store::create(dir.join("store")).await?;
    lap(
        &mut steps,
        "open a new Store",
        store.dir().display().to_string(),
    );

    // (2) create a project from a directory.
    let first = store.create_project_from("demo", &src).await?;
    lap(
        &mut steps,
        "create project from dir",
        format!("demo/main @ {}", &first[..12]),
    );

    // (3) fork a branch.
    let at = store.fork("demo/main", "demo/agent").await?;
    check(at == first, format!("fork at {at} != {first}"))?;
    lap(&mut steps, "fork a branch", "demo/agent".into());

    // (4) create a Sandbox.
    let sb = Sandbox::create(
        SandboxSpec::new(store.dir()).label("flow-run", std::process::id().to_string()),
    )
    .await?;
    lap(&mut steps, "create a Sandbox", sb.id().to_string());

    // (5) mount the branch.
    let ws = sb.mount("demo/agent", None).await?;
    lap(
        &mut steps,
        "mount the branch",
        format!("{} at {}", ws.id(), ws.path()),
    );

    // (6) exec a write.
    let o = ws
        .exec(["sh", "-c", "echo 'written in a sandbox' > out.txt; id -u"])
        .output()
        .await?;
    check(
        o.status.success(),
        format!("write: {:?} {}", o.status, o.stderr_str()),
    )?;
    check(o.stdout == b"1500\n", format!("uid: {:?}", o.stdout_str()))?;
    lap(&mut steps, "exec a write", "uid 1500".into());

    // (7) exec a read.
    let o = ws.exec(["cat", "out.txt", "README"]).output().await?;
    check(
        o.stdout == b"written in a sandbox\ndemo project\n",
        format!("read: {:?}", o.stdout_str()),
    )?;
    lap(
        &mut steps,
        "exec a read",
        format!("{} bytes", o.stdout.len()),
    );

    // (8) status.
    let changes = ws.status().await?;
    check(
        changes
            .iter()
            .any(|c| c.path == b"out.txt" && c.kind == "added"),
        format!("status: {changes:?}"),
    )?;
    lap(&mut steps, "status", format!("{} change(s)", changes.len()));

    // (9) commit.
    let c = ws.commit("flow: out.txt").await?;
    let CommitOutcome::Committed(commit) = c else {
        return Err(strata_sdk::Error::Backend {
            what: format!("commit: {c:?}"),
            log_tail: String::new(),
            source: None,
        });
    };
    lap(&mut steps, "commit", commit[..12].to_string());

    // (10) exec with stdin.
    let o = ws
        .exec(["sh", "-c", "tr a-z A-Z; echo err >&2"])
        .stdin_bytes("via stdin\n")
        .output()
        .await?;
    check(
        o.stdout == b"VIA STDIN\n" && o.stderr == b"err\n",
        format!("stdin: {o:?}"),
    )?;
    lap(
        &mut steps,
        "exec with stdin",
        o.stdout_str().trim().to_string(),
    );

    // (11) start `sleep 1000` and cancel it.
    let mut h = ws.exec(["sleep", "1000"]).spawn().await?;
    let st = h.cancel().await?;
    check(
        st.signal == Some(libc::SIGTERM) && st.cancelled,
        format!("cancel: {st:?}"),
    )?;
    lap(
        &mut steps,
        "spawn sleep 1000 + cancel",
        format!("exec {} {}", h.id(), st.signal_name.unwrap_or_default()),
    );

    // (12) read the Sandbox log tail.
    let log = sb.logs(20).await?;
    check(log.contains("exec"), format!("log: {log}"))?;
    lap(
        &mut steps,
        "log tail",
        format!("{} lines", log.lines().count()),
    );

    // (13) unmount.
    ws.unmount(false).await?;
    lap(&mut steps, "unmount", String::new());

    // (14) close the Sandbox.
    sb.close().await?;
    lap(&mut steps, "close the Sandbox", String::new());

    // (15) read the committed file from the Store in-process.
    let bytes = store.read_file("demo/agent", "out.txt").await?;
    check(
        bytes == b"written in a sandbox\n",
        format!("store: {bytes:?}"),
    )?;
    let head = store.head("demo/agent").await?;
    check(head == commit, format!("head {head} != {commit}"))?;
    lap(
        &mut steps,
        "read the file from the Store",
        format!("{} bytes", bytes.len()),
    );
    Ok(steps)
}

/// Print the steps as a table; returns the total.
pub fn print_table(steps: &[Step]) -> Duration {
    let total: Duration = steps.iter().map(|s| s.took).sum();
    println!("{:>3}  {:<30} {:>10}  note", "#", "call", "ms");
    for (i, s) in steps.iter().enumerate() {
        println!(
            "{:>3}  {:<30} {:>10.2}  {}",
            i + 1,
            s.name,
            s.took.as_secs_f64() * 1e3,
            s.note
        );
    }
    println!("     {:<30} {:>10.2}", "total", total.as_secs_f64() * 1e3);
    total
}

fn main() {
    strata_sdk::maybe_run_internal();
    let rt = tokio::runtime::Runtime::new().expect("tokio");
    let tmp = tempfile::tempdir().expect("tempdir");
    match rt.block_on(flow(tmp.path())) {
        Ok(steps) => {
            print_table(&steps);
        }
        Err(e) => {
            eprintln!("flow failed: {e}");
            std::process::exit(1);
        }
    }
}
