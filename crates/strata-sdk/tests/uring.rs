//! A Sandbox's FUSE transport is the creator's choice
//! (`SandboxSpec::fuse_transport`, else the creator's
//! `STRATA_FUSE_TRANSPORT`), carried to its daemon, whose environment is
//! cleared: with `uring` its Workspaces really are served by ring threads
//! in the daemon (counted in /proc below the Sandbox's monitor), with
//! `dev-fuse` no ring thread exists, both report what they use, the files
//! a command writes read back from the Store, and a restarted daemon
//! mounts its Workspaces again over the same transport.
//!
//! Needs root, /dev/fuse and FUSE io_uring enabled
//! (/sys/module/fuse/parameters/enable_uring = Y, which scripts/test
//! turns on); without it the uring case fails with the reason.
//!
//! Its own `main` (harness = false): the binary is re-executed as the
//! Sandbox init, the daemon and the exec helper.

mod common;

use std::collections::HashMap;
use std::path::Path;
use strata_sdk::{Sandbox, SandboxSpec, Store, Transport};

fn main() {
    strata_sdk::maybe_run_internal();
    strata_testkit::cases::require_root();
    let rt = tokio::runtime::Runtime::new().expect("tokio");
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut cases = common::Cases::new(&rt, tmp.path(), "sdk-uring-test-run");
    cases.run(
        "a_uring_sandbox_serves_through_rings_and_keeps_them_after_restart",
        a_uring_sandbox_serves_through_rings_and_keeps_them_after_restart,
    );
    cases.run(
        "a_dev_fuse_sandbox_has_no_ring",
        a_dev_fuse_sandbox_has_no_ring,
    );
    cases.run(
        "unset_the_creators_environment_decides",
        unset_the_creators_environment_decides,
    );
    cases.finish();
}

fn spec(store: &Store) -> SandboxSpec {
    SandboxSpec::new(store.dir()).label("sdk-uring-test-run", std::process::id().to_string())
}

async fn store_with_project(dir: &Path, name: &str) -> Store {
    let src = dir.join(format!("src-{name}"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), b"base\n").unwrap();
    let store = Store::create(dir.join(format!("store-{name}")))
        .await
        .unwrap();
    store.create_project_from("p", &src).await.unwrap();
    store
}

/// The host pid of the Sandbox's monitor (its backend handle).
fn monitor_pid(sb: &Sandbox) -> u32 {
    sb.info()
        .handle
        .as_deref()
        .and_then(|h| {
            h.split(|c: char| !c.is_ascii_digit())
                .find(|p| !p.is_empty())
        })
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no monitor pid in {:?}", sb.info().handle))
}

/// Threads named `strata-ring-*` (the io_uring transport's, one per
/// queue) in the processes below `root`: the Sandbox's daemon and nothing
/// else, whatever other mounts this machine serves.
fn ring_threads_below(root: u32) -> usize {
    let mut parent: HashMap<u32, u32> = HashMap::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(e.path().join("status")) else {
            continue;
        };
        if let Some(pp) = status
            .lines()
            .find_map(|l| l.strip_prefix("PPid:"))
            .and_then(|v| v.trim().parse().ok())
        {
            parent.insert(pid, pp);
        }
    }
    let below = |mut p: u32| loop {
        match parent.get(&p) {
            Some(&pp) if pp == root => return true,
            Some(&pp) if pp > 1 => p = pp,
            _ => return false,
        }
    };
    parent
        .keys()
        .filter(|p| below(**p))
        .flat_map(|p| {
            std::fs::read_dir(format!("/proc/{p}/task"))
                .into_iter()
                .flatten()
                .flatten()
        })
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .filter(|c| c.starts_with("strata-ring"))
        .count()
}

/// Kill the Sandbox's monitor (and so its daemon), wait until the daemon
/// no longer answers.
async fn kill_sandbox(sb: &Sandbox) {
    let pid = rustix::process::Pid::from_raw(monitor_pid(sb) as i32).expect("a pid");
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).expect("kill the monitor");
    let t = std::time::Instant::now();
    while sb.state().await != strata_sdk::SandboxState::Stopped || sb.health().await.is_ok() {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(5),
            "the Sandbox still runs 5 s after its monitor was killed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

async fn a_uring_sandbox_serves_through_rings_and_keeps_them_after_restart(dir: &Path) {
    let probe = strata_workspace::uring::probe();
    assert!(
        probe.usable(),
        "FUSE io_uring is not usable here: {probe}; a uring Sandbox cannot be tested"
    );
    let store = store_with_project(dir, "u").await;
    let mut sb = Sandbox::create(spec(&store).fuse_transport(Transport::IoUring))
        .await
        .expect("create a uring Sandbox");
    let health = sb.health().await.unwrap();
    assert_eq!(health.fuse_transport.as_deref(), Some("uring"));
    assert_eq!(ring_threads_below(monitor_pid(&sb)), 0, "no mount yet");
    let ws = sb.mount("p/main", None).await.expect("mount over io_uring");
    assert_eq!(ws.transport(), Some("io_uring"));
    assert_eq!(
        ring_threads_below(monitor_pid(&sb)),
        probe.queues,
        "one ring thread per queue in the Sandbox's daemon"
    );
    let o = ws
        .exec([
            "sh",
            "-c",
            "mkdir d && for i in 1 2 3; do echo n$i > d/$i; done && cat f d/2 && rm f",
        ])
        .output()
        .await
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    assert_eq!(o.stdout_str(), "base\nn2\n");
    ws.commit("over io_uring").await.unwrap();
    assert_eq!(store.read_file("p/main", "d/3").await.unwrap(), b"n3\n");
    assert!(
        store.read_file("p/main", "f").await.is_err(),
        "f was removed"
    );

    // Uncommitted work, then a crash: the restarted daemon mounts the
    // Workspace again from the same config, over io_uring again.
    let o = ws.exec(["sh", "-c", "echo later > later"]).output().await;
    assert!(o.unwrap().status.success());
    kill_sandbox(&sb).await;
    sb.restart().await.expect("restart");
    let wss = sb.workspaces().await.unwrap();
    assert_eq!(wss.len(), 1);
    assert_eq!(wss[0].transport(), Some("io_uring"));
    assert_eq!(ring_threads_below(monitor_pid(&sb)), probe.queues);
    assert_eq!(
        wss[0]
            .exec(["cat", "later"])
            .output()
            .await
            .unwrap()
            .stdout_str(),
        "later\n"
    );
    wss[0].commit("after the restart").await.unwrap();
    assert_eq!(
        store.read_file("p/main", "later").await.unwrap(),
        b"later\n"
    );
    let ws = wss.into_iter().next().unwrap();
    ws.unmount(false).await.unwrap();
    let t = std::time::Instant::now();
    while ring_threads_below(monitor_pid(&sb)) != 0 {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(5),
            "ring threads still run 5 s after the unmount"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    sb.close().await.unwrap();
}

async fn a_dev_fuse_sandbox_has_no_ring(dir: &Path) {
    let store = store_with_project(dir, "d").await;
    // Explicit: whatever this process's STRATA_FUSE_TRANSPORT says.
    let sb = Sandbox::create(spec(&store).fuse_transport(Transport::DevFuse))
        .await
        .unwrap();
    assert_eq!(
        sb.health().await.unwrap().fuse_transport.as_deref(),
        Some("dev-fuse")
    );
    let ws = sb.mount("p/main", None).await.unwrap();
    assert_eq!(ws.transport(), Some("/dev/fuse"));
    let o = ws
        .exec(["sh", "-c", "echo dev > g && cat f"])
        .output()
        .await
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    assert_eq!(o.stdout_str(), "base\n");
    assert_eq!(ring_threads_below(monitor_pid(&sb)), 0);
    ws.commit("over /dev/fuse").await.unwrap();
    assert_eq!(store.read_file("p/main", "g").await.unwrap(), b"dev\n");
    sb.close().await.unwrap();
}

async fn unset_the_creators_environment_decides(dir: &Path) {
    let store = store_with_project(dir, "e").await;
    let sb = Sandbox::create(spec(&store)).await.unwrap();
    let want = Transport::from_env();
    assert_eq!(
        sb.health().await.unwrap().fuse_transport.as_deref(),
        Some(want.as_str()),
        "STRATA_FUSE_TRANSPORT={:?}",
        std::env::var("STRATA_FUSE_TRANSPORT")
    );
    let ws = sb.mount("p/main", None).await.unwrap();
    let served = ring_threads_below(monitor_pid(&sb));
    let usable = strata_workspace::uring::probe().usable();
    match want {
        Transport::DevFuse => assert_eq!(ws.transport(), Some("/dev/fuse")),
        Transport::IoUring => assert_eq!(ws.transport(), Some("io_uring")),
        Transport::IoUringIfAvailable if usable => assert_eq!(ws.transport(), Some("io_uring")),
        Transport::IoUringIfAvailable => assert_eq!(ws.transport(), Some("/dev/fuse")),
    }
    assert_eq!(served > 0, ws.transport() == Some("io_uring"));
    sb.close().await.unwrap();
}
