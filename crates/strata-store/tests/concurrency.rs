//! Several writers on one Store at once (separate connections, as separate
//! processes would have): every acknowledged commit is present afterwards,
//! and the only error a writer may see is the typed `Busy`.

mod common;
use common::*;
use std::collections::BTreeMap;
use strata_store::*;

#[test]
fn parallel_writers_lose_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let base = store.create_project("p", "init").unwrap();
    for w in 0..4 {
        store
            .create_branch(&BranchRef::parse(&format!("p/w{w}")).unwrap(), base)
            .unwrap();
    }
    let dir = tmp.path().join("store");
    let handles: Vec<_> = (0..4u64)
        .map(|w| {
            let dir = dir.clone();
            std::thread::spawn(move || {
                let s = Store::open(&dir, &StoreOptions::default()).unwrap();
                let b = BranchRef::parse(&format!("p/w{w}")).unwrap();
                let mut acked = Vec::new();
                for i in 0..15u64 {
                    let body = seeded_bytes(w * 1000 + i + 1, 20_000);
                    loop {
                        let attempt = (|| -> Result<ObjectId> {
                            let _s = s.write_session()?;
                            let c = s.write_file_bytes(&body, None)?;
                            let t = s.write_tree(vec![file_entry("f", c)])?;
                            let head = s.branch_head(&b)?;
                            s.commit_tree(&b, head, t, &format!("{i}"), BTreeMap::new())
                        })();
                        match attempt {
                            Ok(id) => {
                                acked.push((id, body));
                                break;
                            }
                            Err(e) if e.is_busy() => continue,
                            Err(e) => panic!("writer {w}: unexpected error {e}"),
                        }
                    }
                }
                acked
            })
        })
        .collect();
    for (w, h) in handles.into_iter().enumerate() {
        let acked = h.join().unwrap();
        assert_eq!(acked.len(), 15);
        let b = BranchRef::parse(&format!("p/w{w}")).unwrap();
        let log = store.log(store.branch_head(&b).unwrap(), 100).unwrap();
        assert_eq!(log.len(), 16, "writer {w} lost commits");
        for (id, body) in acked {
            let e = store.read_path(id, b"f").unwrap().unwrap();
            let EntryKind::File(c) = e.kind else { panic!() };
            assert_eq!(store.read_file_range(&c, 0, body.len()).unwrap(), body);
        }
    }
    assert!(store.fsck(&NoProgress).unwrap().ok);
}

/// The WAL is checkpointed by the Store's own thread (checkpoint.rs), not
/// by the commit that crossed the threshold: after two 20 MiB files and no
/// write since, the WAL's pages still get copied into the database (each
/// write alone leaves more than the 4,096-page threshold), and everything
/// reads back through a reopened Store.
#[test]
fn the_wal_is_checkpointed_in_the_background_after_large_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let files: Vec<Vec<u8>> = (0..2).map(|i| seeded_bytes(700 + i, 20 << 20)).collect();
    let contents: Vec<FileContent> = files
        .iter()
        .map(|b| store.write_file_bytes(b, None).unwrap())
        .collect();
    let conn = rusqlite::Connection::open(tmp.path().join("store/strata.db")).unwrap();
    let pending = || -> i64 {
        let (log, done): (i64, i64) = conn
            .query_row("PRAGMA wal_checkpoint(NOOP)", [], |r| {
                Ok((r.get(1)?, r.get(2)?))
            })
            .unwrap();
        log - done
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while pending() >= 4096 {
        assert!(
            std::time::Instant::now() < deadline,
            "after 60 s the WAL still holds {} pages not copied into the database",
            pending()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    drop(conn);
    drop(store);
    let store = Store::open(&tmp.path().join("store"), &StoreOptions::default()).unwrap();
    for (b, c) in files.iter().zip(&contents) {
        assert!(store.read_file_range(c, 0, b.len()).unwrap() == *b);
    }
}

/// The WAL starts over once a large write is followed by small ones: the
/// checkpoint thread copies the small writes left behind the large one's
/// checkpoint too, so that the next write goes to the WAL's first frame.
/// Before, a commit's small last transactions stayed in the WAL after the
/// checkpoint of its large one (they landed after that checkpoint's
/// snapshot, here forced by a reader that holds it), too few to be
/// checkpointed on their own, and SQLite restarts the WAL only when all
/// of it is copied: every later write appended to it, and the file grew by
/// every commit's size (docs/benchmarks.md, "The commit step through a
/// Sandbox's daemon").
#[test]
fn the_wal_starts_over_after_a_large_write_and_small_ones_behind_it() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let conn = rusqlite::Connection::open(tmp.path().join("store/strata.db")).unwrap();
    let wal = || -> (i64, i64) {
        conn.query_row("PRAGMA wal_checkpoint(NOOP)", [], |r| {
            Ok((r.get(1)?, r.get(2)?))
        })
        .unwrap()
    };
    // 20 MiB: more than the 4,096-page threshold on its own.
    store
        .write_file_bytes(&seeded_bytes(900, 20 << 20), None)
        .unwrap();
    // A reader on the snapshot right after it: the checkpoint copies no
    // frame written after that snapshot while the reader lasts.
    let reader = rusqlite::Connection::open(tmp.path().join("store/strata.db")).unwrap();
    reader.execute_batch("BEGIN").unwrap();
    let _: i64 = reader
        .query_row("SELECT count(*) FROM objects", [], |r| r.get(0))
        .unwrap();
    let small = |i: u64| {
        store
            .write_file_bytes(&seeded_bytes(1000 + i, 2000), None)
            .unwrap();
    };
    small(0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    // The large write's checkpoint has run (as far as the reader lets it).
    while wal().1 == 0 && wal().0 >= 4096 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    reader.execute_batch("COMMIT").unwrap();
    drop(reader);
    // Small writes from now on: one of them finds the WAL all copied and
    // starts it over (its frame count falls below the threshold).
    for i in 1.. {
        small(i);
        let (log, done) = wal();
        if log < 4096 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "after 30 s of small writes the WAL is still {log} pages long, {done} of them copied: it never started over"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
