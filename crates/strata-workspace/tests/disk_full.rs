//! A commit into a Store whose disk is full: a clear error, the branch
//! unmoved, the mount still serving the uncommitted work, the Store passing
//! fsck, and the same commit succeeding once space is freed. The Store
//! lives on a 16 MiB tmpfs (needs root, as all mount tests; CI runs as root).

mod common;

use std::process::Command;
use strata_store::{NoProgress, Store, StoreOptions};
use strata_workspace::{MountOptions, Workspace, WorkspaceOptions};

struct Unmount(std::path::PathBuf);
impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

#[test]
fn commit_into_a_full_disk_fails_cleanly_and_recovers() {
    common::require_fuse();
    let tmp = tempfile::tempdir().unwrap();
    let small = tmp.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=16m", "tmpfs"])
        .arg(&small)
        .status()
        .unwrap();
    assert!(st.success(), "mounting a tmpfs failed");
    let _guard = Unmount(small.clone());

    let store = Store::create(&small.join("store"), &StoreOptions::default()).unwrap();
    store.create_project("p", "init").unwrap();
    let head = store.resolve("p/main").unwrap().commit;
    // Scratch (the upper layer) is on the big disk; only the Store is small.
    let ws = Workspace::create(
        &store,
        "p/main",
        &tmp.path().join("scratch"),
        &WorkspaceOptions::default(),
    )
    .unwrap();
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let h = ws.mount(&mnt, &MountOptions::default()).unwrap();

    let big = random(40 << 20, 7);
    std::fs::write(mnt.join("big.bin"), &big).unwrap();
    std::fs::write(mnt.join("small.txt"), b"small\n").unwrap();
    let err = ws.commit("too big").unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("full"), "not a clear disk-full error: {msg}");
    assert_eq!(store.resolve("p/main").unwrap().commit, head);
    // The mount is unharmed: the uncommitted work is still there.
    assert_eq!(std::fs::read(mnt.join("big.bin")).unwrap(), big);
    assert_eq!(ws.status().unwrap().len(), 2);
    let r = store.fsck(&NoProgress).unwrap();
    assert!(r.ok, "{:?}", r.problems);

    // Free space: drop the big file, collect what the failed commit left.
    std::fs::remove_file(mnt.join("big.bin")).unwrap();
    store.gc(&NoProgress).unwrap();
    let out = ws.commit("fits").unwrap();
    assert!(matches!(out, strata_workspace::CommitOutcome::Committed(_)));
    let c = store.resolve("p/main").unwrap().commit;
    assert_ne!(c, head);
    let e = store.read_path(c, b"small.txt").unwrap().unwrap();
    let strata_store::EntryKind::File(content) = e.kind else {
        panic!("not a file")
    };
    assert_eq!(store.read_file_range(&content, 0, 100).unwrap(), b"small\n");
    assert!(store.read_path(c, b"big.bin").unwrap().is_none());
    h.unmount().unwrap();
    assert!(store.fsck(&NoProgress).unwrap().ok);
}
