//! Cost does not follow namespace size: a Workspace of a 100,000-file
//! branch mounts fast (the tree is read lazily) and a one-file edit commits
//! fast (only the changed path's trees are rebuilt). Prints the numbers;
//! the bounds are loose enough for a debug build on a busy 2-core CI box.

mod common;

use std::time::Instant;
use strata_store::{NoProgress, Store, StoreOptions};
use strata_workspace::{CommitOutcome, MountOptions, Workspace, WorkspaceOptions};

#[test]
fn mount_and_commit_at_100k_files() {
    common::require_fuse();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    for d in 0..100 {
        let dir = src.join(format!("d{d:03}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..1000 {
            std::fs::write(dir.join(format!("f{f:04}.txt")), format!("{d}/{f}\n")).unwrap();
        }
    }
    let store = Store::create(&tmp.path().join("store"), &StoreOptions::default()).unwrap();
    let t = Instant::now();
    store
        .create_project_from("big", &src, "100k files", &NoProgress)
        .unwrap();
    eprintln!("import of 100,000 files: {:?}", t.elapsed());
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();

    let t = Instant::now();
    let ws = Workspace::create(
        &store,
        "big/main",
        &tmp.path().join("scratch"),
        &WorkspaceOptions::default(),
    )
    .unwrap();
    let t_create = t.elapsed();
    let h = ws.mount(&mnt, &MountOptions::default()).unwrap();
    std::fs::metadata(mnt.join("d050/f0500.txt")).unwrap();
    let t_mount = t.elapsed();
    eprintln!("workspace create: {t_create:?}; create + mount + first stat: {t_mount:?}");

    let mut times = Vec::new();
    for i in 0..5 {
        std::fs::write(mnt.join("d050/f0500.txt"), format!("edit {i}\n")).unwrap();
        let t = Instant::now();
        let out = ws.commit("one-file edit").unwrap();
        times.push(t.elapsed());
        assert!(matches!(out, CommitOutcome::Committed(_)));
    }
    times.sort();
    eprintln!(
        "commit of a one-file edit at 100,000 files: median {:?} (all {times:?})",
        times[2]
    );
    let t = Instant::now();
    assert!(ws.status().unwrap().is_empty());
    eprintln!("status with no changes: {:?}", t.elapsed());
    h.unmount().unwrap();
    let head = store
        .branch_head(&strata_store::BranchRef::parse("big/main").unwrap())
        .unwrap();
    let e = store.read_path(head, b"d050/f0500.txt").unwrap().unwrap();
    let strata_store::EntryKind::File(c) = e.kind else {
        panic!()
    };
    assert_eq!(store.read_file_range(&c, 0, 100).unwrap(), b"edit 4\n");
    assert!(t_mount.as_millis() < 500, "create+mount took {t_mount:?}");
    assert!(times[2].as_millis() < 500, "commit took {:?}", times[2]);
}
