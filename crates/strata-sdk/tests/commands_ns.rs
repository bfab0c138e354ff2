//! The commands of a Sandbox share one mount namespace, built once (by the
//! daemon right after start, else by the first exec) and entered by every
//! exec (strata-sandbox `commands_ns`;
//! docs/benchmarks.md, "Exec path"). Checked from inside, as the
//! command's uid: the namespace is one and the same across execs, even
//! when the first execs race to build it; it lacks the daemon's /dev layer
//! (no /dev/fuse, no pin, no masks list); a Workspace the daemon mounts
//! after it was built still reaches it, with the bytes read back from the
//! Store after a commit; and an unmount reaches it too.
//!
//! Its own `main` (harness = false): the binary is re-executed as the
//! Sandbox init, the daemon and the exec helper.

mod common;

use common::sh;

use strata_sdk::{CommitOutcome, Sandbox, Store, Workspace};

fn main() {
    strata_sdk::maybe_run_internal();
    strata_testkit::cases::require_root();
    let rt = tokio::runtime::Runtime::new().expect("tokio");
    let tmp = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let mut cases = common::Cases::new(&rt, tmp.path(), "commands-ns-test-run");
    cases.run(
        "the_daemon_builds_it_before_any_exec",
        the_daemon_builds_it_before_any_exec,
    );
    cases.run(
        "racing_first_execs_build_one_namespace",
        racing_first_execs_build_one_namespace,
    );
    cases.run(
        "the_namespace_lacks_the_daemon_layer",
        the_namespace_lacks_the_daemon_layer,
    );
    cases.run(
        "later_mounts_and_unmounts_reach_it",
        later_mounts_and_unmounts_reach_it,
    );
    cases.finish();
}

async fn sandbox(dir: &std::path::Path, name: &str) -> (Store, Sandbox, Workspace) {
    common::sandbox(
        dir,
        name,
        "commands-ns-test-run",
        &[("hello.txt", b"hello\n".as_slice())],
    )
    .await
}

/// The processes below `pid` (children, their children, ...) with their
/// parents, from /proc/N/stat (field 4, after the last ')').
fn descendants_of(pid: u32) -> Vec<(u32, u32)> {
    let mut all = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|f| f.parse::<u32>().ok());
        if let Some(pp) = ppid {
            all.push((p, pp));
        }
    }
    let mut out: Vec<(u32, u32)> = Vec::new();
    let mut below = vec![pid];
    while let Some(at) = below.pop() {
        for &(p, pp) in all.iter().filter(|(_, pp)| *pp == at) {
            out.push((p, pp));
            below.push(p);
        }
    }
    out
}

/// argv[1] of process `pid` (the role of strata's re-executed helpers).
fn role(pid: u32) -> Vec<u8> {
    let argv = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    argv.split(|b| *b == 0)
        .nth(1)
        .map(<[u8]>::to_vec)
        .unwrap_or_default()
}

/// Right after create, with no exec run yet, the Sandbox already has the
/// holder of the commands' namespace (a paused `__strata-exec` process
/// whose parent is the Sandbox's PID 1, the helper that made it gone),
/// built by the daemon after its marker; the first exec runs in exactly
/// that namespace.
async fn the_daemon_builds_it_before_any_exec(dir: &std::path::Path) {
    let (_store, sb, ws) = sandbox(dir, "warm").await;
    let monitor: u32 = sb
        .info()
        .handle
        .as_deref()
        .and_then(|h| h.parse().ok())
        .unwrap_or_else(|| panic!("no monitor pid in {:?}", sb.info().handle));
    let t0 = std::time::Instant::now();
    let holders = loop {
        let holders: Vec<u32> = descendants_of(monitor)
            .into_iter()
            .filter(|&(p, pp)| role(p) == b"__strata-exec" && role(pp) == b"__strata-init")
            .map(|(p, _)| p)
            .collect();
        if !holders.is_empty() || t0.elapsed() > std::time::Duration::from_secs(10) {
            break holders;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(
        holders.len(),
        1,
        "not one holder below monitor {monitor} before any exec: {holders:?}"
    );
    let ns = std::fs::read_link(format!("/proc/{}/ns/mnt", holders[0])).unwrap();
    let seen = sh(&ws, "readlink /proc/self/ns/mnt").await;
    assert_eq!(
        seen.trim(),
        ns.to_string_lossy(),
        "the first exec is not in the namespace the daemon built"
    );
    ws.unmount(true).await.unwrap();
    sb.close().await.unwrap();
}

/// Eight execs started at once on a fresh Sandbox, as soon as it is ready,
/// racing the daemon's own build of the namespace after its marker and
/// each other: all run, all in the same namespace, and the ninth too.
async fn racing_first_execs_build_one_namespace(dir: &std::path::Path) {
    let (_store, sb, ws) = sandbox(dir, "race").await;
    let script = "id -u; readlink /proc/self/ns/mnt";
    let runs = futures::future::join_all((0..8).map(|_| sh(&ws, script))).await;
    let mut seen: Vec<String> = runs.clone();
    seen.push(sh(&ws, script).await);
    for out in &seen {
        let mut lines = out.lines();
        assert_eq!(lines.next(), Some("1500"), "not the command's uid: {out}");
        let ns = lines.next().unwrap_or_default();
        assert!(ns.starts_with("mnt:["), "no namespace read: {out}");
    }
    seen.dedup();
    assert_eq!(
        seen.len(),
        1,
        "the execs are in different namespaces: {runs:?}"
    );
    ws.unmount(true).await.unwrap();
    sb.close().await.unwrap();
}

/// What the daemon's /dev layer holds is not in the commands' /dev: not
/// /dev/fuse, not the pinned namespace, not the list of masks. Opening
/// them by name fails as well (not merely hidden from a listing).
async fn the_namespace_lacks_the_daemon_layer(dir: &std::path::Path) {
    let (_store, sb, ws) = sandbox(dir, "layer").await;
    for _ in 0..2 {
        let listing = sh(&ws, "ls -a /dev").await;
        for name in ["fuse", ".strata-commands-ns", ".strata-command-masks"] {
            assert!(
                !listing.lines().any(|l| l == name),
                "a command sees /dev/{name}: {listing}"
            );
        }
        let o = ws
            .exec([
                "sh",
                "-c",
                "cat /dev/.strata-commands-ns/mnt; cat /dev/.strata-command-masks; \
                 exec 3<>/dev/fuse",
            ])
            .output()
            .await
            .unwrap();
        assert!(
            !o.status.success(),
            "a command opened the daemon's layer: {o:?}"
        );
        assert!(
            o.stdout.is_empty(),
            "a command read the daemon's layer: {o:?}"
        );
    }
    ws.unmount(true).await.unwrap();
    sb.close().await.unwrap();
}

/// The namespace is built by the first exec; a Workspace mounted after it
/// is seen by the next exec (mount propagation into the slave), written
/// there, committed and read back from the Store; after its unmount the
/// commands no longer have it mounted.
async fn later_mounts_and_unmounts_reach_it(dir: &std::path::Path) {
    let (store, sb, ws) = sandbox(dir, "later").await;
    let before = sh(&ws, "readlink /proc/self/ns/mnt").await;
    store.fork("p/main", "p/two").await.unwrap();
    let two = sb
        .mount("p/two", Some("/tmp/w2"))
        .await
        .expect("second mount");
    assert_eq!(sh(&ws, "cat /tmp/w2/hello.txt").await, "hello\n");
    sh(&two, "echo from-the-command > /tmp/w2/new.txt").await;
    match two.commit("written after the namespace").await.unwrap() {
        CommitOutcome::Committed(_) => {}
        other => panic!("nothing committed: {other:?}"),
    }
    assert_eq!(
        store.read_file("p/two", "new.txt").await.unwrap(),
        b"from-the-command\n"
    );
    two.unmount(false).await.unwrap();
    let mounts = sh(&ws, "cat /proc/self/mountinfo").await;
    assert!(
        !mounts
            .lines()
            .any(|l| l.split(' ').nth(4) == Some("/tmp/w2")),
        "the unmount did not reach the commands: {mounts}"
    );
    assert_eq!(sh(&ws, "readlink /proc/self/ns/mnt").await, before);
    ws.unmount(true).await.unwrap();
    sb.close().await.unwrap();
}
