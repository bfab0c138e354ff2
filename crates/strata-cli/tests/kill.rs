//! `kill -9` in the middle of `strata snapshot` loses nothing: the Store
//! then passes fsck, the branch is at its old head, and the Store keeps
//! working. Asserted by reading the Store back, not by exit codes alone.

mod common;

use common::{random_bytes, s, write, Env};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Total bytes of the files in the Store directory (database, WAL, ...)
/// and its `packs/` directory, where large files' chunk bytes go
/// (docs/design.md, "Pack files").
fn store_bytes(dir: &Path) -> u64 {
    let files = |d: &Path| -> u64 {
        std::fs::read_dir(d)
            .map(|rd| {
                rd.filter_map(|e| e.ok()?.metadata().ok())
                    .filter(|m| m.is_file())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0)
    };
    files(dir) + files(&dir.join("packs"))
}

/// A tree big enough that its import takes a while even in a release
/// build: many small files plus a few large incompressible ones.
fn big_tree(root: &Path) {
    for d in 0..40 {
        for f in 0..250 {
            let seed = (d * 1000 + f) as u64 + 1;
            write(
                root,
                &format!("d{d:02}/f{f:03}.bin"),
                &random_bytes(seed, 2048 + (seed as usize * 37) % 4096),
            );
        }
    }
    for i in 0..6 {
        write(
            root,
            &format!("large/{i}.bin"),
            &random_bytes(900 + i, 24 << 20),
        );
    }
}

#[test]
fn sigkill_mid_snapshot_leaves_the_old_head_and_a_clean_store() {
    let env = Env::new();
    let small = env.path("small");
    write(&small, "hello.txt", b"the old head\n");
    let old = env.json(&["project", "create", "p", "--from", s(&small), "-m", "old"])["commit"]
        .as_str()
        .unwrap()
        .to_string();
    let big = env.path("big");
    big_tree(&big);

    let before = store_bytes(&env.store);
    let mut child = Command::new(common::BIN)
        .args(["--store", s(&env.store), "snapshot", "p/main", s(&big)])
        .env_remove("STRATA_STORE")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until objects are being written (the Store has grown by 8 MiB of
    // the tree's ~180 MiB), then kill it: the snapshot is provably under
    // way, not finished.
    let deadline = Instant::now() + Duration::from_secs(120);
    while store_bytes(&env.store) < before + (8 << 20) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the snapshot finished before it could be killed; make the tree bigger"
        );
        assert!(
            Instant::now() < deadline,
            "the snapshot wrote nothing for 120 s"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().unwrap(); // SIGKILL
    let st = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        st.signal(),
        Some(libc::SIGKILL),
        "killed mid-way, not exited"
    );

    let fsck = env.json(&["fsck"]);
    assert_eq!(fsck["ok"], true, "fsck after SIGKILL: {fsck}");

    // The branch is at its old head, and its content reads back.
    let branches = env.json(&["branch", "list", "p"]);
    assert_eq!(branches[0]["head"], old.as_str(), "{branches}");
    let log = env.json(&["log", "p/main"]);
    assert_eq!(log.as_array().unwrap().len(), 1, "{log}");
    assert_eq!(env.ok(&["cat", "p/main", "hello.txt"]), b"the old head\n");
    let ls = env.json(&["ls", "p/main"]);
    assert_eq!(ls.as_array().unwrap().len(), 1, "{ls}");

    // The Store keeps working: gc drops whatever half-written objects were
    // committed before the kill (none, if they were all in the transaction
    // the kill cut short), and the snapshot can be redone.
    let gc = env.json(&["gc"]);
    assert_eq!(
        gc["reachable"], 3,
        "old head: commit, tree, one chunk: {gc}"
    );
    assert_eq!(env.json(&["fsck"])["ok"], true);
    let small2 = env.path("small2");
    write(&small2, "hello.txt", b"the new head\n");
    let new = env.json(&["snapshot", "p/main", s(&small2)]);
    assert_eq!(env.ok(&["cat", "p/main", "hello.txt"]), b"the new head\n");
    assert_eq!(
        env.json(&["log", "p/main"])[0]["parents"][0],
        old.as_str(),
        "{new}"
    );
}
