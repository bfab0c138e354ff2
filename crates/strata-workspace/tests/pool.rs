//! Upper files of deleted files are emptied and kept, and later creates
//! take their inode numbers with them (src/pool.rs): a reused file starts
//! empty and holds only what its new owner wrote, in the mount and in the
//! Store, and a reopened Workspace adopts the pool.

mod common;

use common::*;
use std::time::{Duration, Instant};
use strata_workspace::{Workspace, WorkspaceOptions};

fn upper(ws: &Workspace) -> Vec<std::fs::Metadata> {
    std::fs::read_dir(ws.dir().join("upper"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap())
        .collect()
}

fn empty_files(ws: &Workspace) -> usize {
    upper(ws).iter().filter(|m| m.len() == 0).count()
}

/// The kernel forgets an unlinked inode and releases its handles
/// asynchronously: wait (bounded) until `n` upper files are empty.
fn wait_empty(ws: &Workspace, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while empty_files(ws) != n && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(empty_files(ws), n, "empty upper files");
}

#[test]
fn deleted_upper_files_are_reused_empty() {
    let fx = fixture();
    let ws = fx.create();
    let h = fx.mount(&ws, true);
    for i in 0..20u8 {
        std::fs::write(fx.p(&format!("old{i}")), vec![i; 10_000]).unwrap();
    }
    for i in 0..20 {
        std::fs::remove_file(fx.p(&format!("old{i}"))).unwrap();
    }
    wait_empty(&ws, 20);
    assert_eq!(upper(&ws).len(), 20, "deleted files' upper files are kept");
    // Created without a write: must read empty, not as an old file.
    for i in 0..10 {
        std::fs::File::create(fx.p(&format!("empty{i}"))).unwrap();
    }
    for i in 0..10 {
        std::fs::write(fx.p(&format!("new{i}")), format!("new {i}")).unwrap();
    }
    assert_eq!(upper(&ws).len(), 20, "creates reuse the kept files");
    for i in 0..10 {
        assert_eq!(std::fs::read(fx.p(&format!("empty{i}"))).unwrap(), b"");
        assert_eq!(
            std::fs::read(fx.p(&format!("new{i}"))).unwrap(),
            format!("new {i}").as_bytes()
        );
    }
    std::fs::remove_file(fx.p("new9")).unwrap();
    wait_empty(&ws, 11);
    ws.commit("reused").unwrap();
    h.unmount().unwrap();
    assert_eq!(fx.bytes(b"empty3"), b"");
    assert_eq!(fx.bytes(b"new4"), b"new 4");
    assert!(fx.entry(b"new9").is_none());
    assert!(fx.entry(b"old1").is_none());

    // A reopened Workspace (as after a crash) adopts what is in the pool.
    let id = ws.id().to_string();
    drop(ws);
    let ws = Workspace::open(&fx.store, &id, &fx.scratch, &WorkspaceOptions::default()).unwrap();
    assert_eq!(upper(&ws).len(), 20);
    let h = fx.mount(&ws, true);
    std::fs::write(fx.p("after"), b"after reopen").unwrap();
    assert_eq!(upper(&ws).len(), 20, "a create after reopen reuses a file");
    assert_eq!(std::fs::read(fx.p("after")).unwrap(), b"after reopen");
    assert_eq!(std::fs::read(fx.p("new3")).unwrap(), b"new 3");
    ws.commit("after reopen").unwrap();
    h.unmount().unwrap();
    assert_eq!(fx.bytes(b"after"), b"after reopen");
    assert_eq!(fx.bytes(b"new3"), b"new 3");
}
