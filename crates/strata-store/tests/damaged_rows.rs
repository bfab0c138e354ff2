//! Damaged and forged Store rows that used to abort or hang every reader:
//! a delta whose base is itself, a cycle of two deltas, a forged DAG of
//! manifest pages that each list the next one twice, and a zstd bomb.
//! Each read must be a `StoreError::Corrupt` naming the object, and fsck
//! must report it. Reads run on a thread with a 256 KiB stack, so a
//! recursion on the chain would abort the test instead of passing on a
//! big main-thread stack; the 5 s limit is only a hang guard.

mod common;
use common::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use strata_store::*;

/// Run `f` on a thread with a 256 KiB stack; fail if it does not finish
/// within 5 s (a hang guard, not a speed test) or panics.
fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || {
            let _ = tx.send(f());
        })
        .expect("spawn a reader thread");
    rx.recv_timeout(Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("{what}: no answer within 5 s (hang guard): {e}"))
}

/// Commit a tree holding one file `f` with content `c` on p/main.
fn commit_file(store: &Store, c: FileContent) -> ObjectId {
    if store.resolve("p/main").is_err() {
        store.create_project("p", "init").unwrap();
    }
    let t = store.write_tree(vec![file_entry("f", c)]).unwrap();
    let b = BranchRef::parse("p/main").unwrap();
    let head = store.branch_head(&b).unwrap();
    store
        .commit_tree(&b, head, t, "f", BTreeMap::new())
        .unwrap()
}

fn db(store_dir: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(store_dir.join("strata.db")).unwrap()
}

/// The stored chunk ids of a file, in order.
fn chunks(store: &Store, c: &FileContent) -> Vec<ObjectId> {
    store
        .chunk_list(c)
        .unwrap()
        .into_iter()
        .map(|x| x.1)
        .collect()
}

/// One way of reading a whole file.
type ReadFn = fn(&Store, &FileContent) -> Result<()>;

/// Read the file every way a reader does, on a small stack; each must be
/// `Corrupt` naming one of `ids`. Then fsck must list one of them.
fn assert_corrupt_everywhere(store: &Store, c: &FileContent, ids: &[ObjectId]) {
    let reads: [(&str, ReadFn); 3] = [
        ("read_file_range", |s, c| {
            s.read_file_range(c, 0, c.size.min(1 << 20) as usize)
                .map(drop)
        }),
        ("read_to", |s, c| s.read_to(c, &mut std::io::sink())),
        ("chunk_list + get_raw", |s, c| {
            for (_, id, _) in s.chunk_list(c)? {
                s.get_raw(&id, Kind::Chunk)?;
            }
            Ok(())
        }),
    ];
    for (what, read) in reads {
        let (s, c2) = (store.clone(), c.clone());
        let r = bounded(what, move || read(&s, &c2));
        match r {
            Err(StoreError::Corrupt { id, reason }) => {
                assert!(
                    ids.contains(&id),
                    "{what}: Corrupt names {id}, not one of {ids:?} ({reason})"
                );
            }
            other => panic!("{what}: expected Corrupt naming {ids:?}, got {other:?}"),
        }
    }
    let s = store.clone();
    let report = bounded("fsck", move || s.fsck(&NoProgress).unwrap());
    assert!(!report.ok, "fsck passed a damaged Store");
    let hexes: Vec<String> = ids.iter().map(|i| i.to_hex()).collect();
    assert!(
        report
            .problems
            .iter()
            .any(|p| hexes.iter().any(|h| p.contains(h.as_str()))),
        "fsck problems do not name {hexes:?}: {:?}",
        report.problems
    );
}

#[test]
fn a_delta_whose_base_is_itself_is_corrupt() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let c = store
        .write_file_bytes(b"one chunk, stored whole\n", None)
        .unwrap();
    commit_file(&store, c.clone());
    let chunk = chunks(&store, &c)[0];
    // What the attack did on the command line: the row names itself.
    let n = db(store.dir())
        .execute(
            "UPDATE objects SET enc = 2, base = id, depth = 1 WHERE id = ?1",
            [&chunk.0[..]],
        )
        .unwrap();
    assert_eq!(n, 1);
    assert_corrupt_everywhere(&store, &c, &[chunk]);
}

#[test]
fn a_cycle_of_two_deltas_is_corrupt() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let c = store
        .write_file_bytes(&seeded_bytes(7, 64 << 10), None)
        .unwrap();
    commit_file(&store, c.clone());
    let ids = chunks(&store, &c);
    assert!(ids.len() >= 2, "the file has {} chunks", ids.len());
    let (a, b) = (ids[0], ids[1]);
    let conn = db(store.dir());
    for depths in [(1, 1), (2, 1), (1, 2)] {
        for (id, base, depth) in [(a, b, depths.0), (b, a, depths.1)] {
            conn.execute(
                "UPDATE objects SET enc = 2, base = ?2, depth = ?3 WHERE id = ?1",
                rusqlite::params![&id.0[..], &base.0[..], depth],
            )
            .unwrap();
        }
        assert_corrupt_everywhere(&store, &c, &[a, b]);
    }
}

/// A forged manifest: page k lists page k-1 twice, 40 levels over one
/// chunk, each page stored under its true hash (so fsck's re-hash passes).
/// `honest` gives every entry the bytes it really covers (a 2^40-chunk
/// file, declared as such); otherwise every entry claims one chunk's
/// worth, the lie a small-looking file needs. Returns the file content
/// and the page ids from level 0 up.
fn forged_dag(store: &Store, honest: bool) -> (FileContent, Vec<ObjectId>) {
    const LEVELS: u8 = 40;
    let chunk_bytes = seeded_bytes(3, 2000);
    let one = store.write_file_bytes(&chunk_bytes, None).unwrap();
    let ContentRef::Chunk(chunk) = one.data else {
        panic!("2000 bytes are one chunk")
    };
    let conn = db(store.dir());
    let mut child = chunk;
    let mut size = 2000u64;
    let mut pages = Vec::new();
    for level in 0..=LEVELS {
        let page = Page {
            level,
            entries: vec![PageEntry { id: child, size }; 2],
        };
        let raw = postcard::to_stdvec(&page).unwrap();
        let id = ObjectId::hash(Kind::Page, &raw);
        conn.execute(
            "INSERT OR IGNORE INTO objects (id, kind, enc, raw_len, base, depth, data) VALUES (?1, 2, 0, ?2, NULL, 0, ?3)",
            rusqlite::params![&id.0[..], raw.len() as i64, raw],
        )
        .unwrap();
        pages.push(id);
        child = id;
        if honest {
            size *= 2;
        }
    }
    let c = FileContent {
        size: if honest { size } else { 2 * size },
        data: ContentRef::Pages {
            root: child,
            height: LEVELS,
        },
    };
    (c, pages)
}

#[test]
fn a_forged_exponential_page_dag_is_corrupt() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let (c, pages) = forged_dag(&store, false);
    assert_eq!(c.size, 4000, "the file claims two chunks");
    commit_file(&store, c.clone());
    // Page 39 is the first whose entries (2 x 2000) exceed what page 40's
    // entry gives it (2000); readers stop there. fsck names every page
    // whose references disagree with it.
    assert_corrupt_everywhere(&store, &c, &pages);
}

#[test]
fn an_honest_exponential_page_dag_is_read_by_its_declared_size() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let (c, _) = forged_dag(&store, true);
    assert_eq!(c.size, 2000 << 41, "2^41 chunks of 2000 bytes, declared");
    commit_file(&store, c.clone());
    let expect = seeded_bytes(3, 2000);
    // A short read deep inside walks one path of pages, not 2^41 chunks.
    let (s, c2) = (store.clone(), c.clone());
    let got = bounded("read_file_range", move || {
        s.read_file_range(&c2, (2000 << 40) + 1000, 2000).unwrap()
    });
    assert_eq!(got[..1000], expect[1000..]);
    assert_eq!(got[1000..], expect[..1000]);
    // fsck reads each shared page once: 41 pages and a chunk, no problem.
    let s = store.clone();
    let report = bounded("fsck", move || s.fsck(&NoProgress).unwrap());
    assert!(report.ok, "{:?}", report.problems);
}

/// A zstd frame that inflates to 64 MiB in a row that declares 2000 bytes,
/// and a row that declares more than any chunk can hold.
#[test]
fn a_zstd_bomb_is_corrupt_without_inflating() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let c = store
        .write_file_bytes(&seeded_bytes(9, 2000), None)
        .unwrap();
    commit_file(&store, c.clone());
    let chunk = chunks(&store, &c)[0];
    let bomb = zstd::encode_all(&vec![0u8; 64 << 20][..], 1).unwrap();
    assert!(bomb.len() < 64 << 10, "the bomb is small: {}", bomb.len());
    let conn = db(store.dir());
    conn.execute(
        "UPDATE objects SET enc = 1, raw_len = 2000, data = ?2 WHERE id = ?1",
        rusqlite::params![&chunk.0[..], bomb],
    )
    .unwrap();
    assert_corrupt_everywhere(&store, &c, &[chunk]);
    // The same frame declared at 64 MiB: more than a chunk can hold.
    conn.execute(
        "UPDATE objects SET raw_len = ?2 WHERE id = ?1",
        rusqlite::params![&chunk.0[..], 64i64 << 20],
    )
    .unwrap();
    assert_corrupt_everywhere(&store, &c, &[chunk]);
    let Err(StoreError::Corrupt { reason, .. }) = store.get_raw(&chunk, Kind::Chunk) else {
        panic!("a 64 MiB chunk row was read")
    };
    assert!(reason.contains("declares"), "{reason}");
}

/// The same amplification with directories: tree k lists tree k-1 twice
/// (as `a` and `b`), 40 levels, 2^41 paths from 41 valid tree objects.
/// Export (and diff, which lists every path of an added directory) count
/// the tree first, reading each stored tree once, and refuse it as
/// `Corrupt` instead of writing (or collecting paths) for ever.
#[test]
fn a_forged_exponential_directory_dag_is_not_exported() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    store.create_project("p", "init").unwrap();
    let dir = |name: &str, t: ObjectId| TreeEntry {
        name: name.as_bytes().to_vec(),
        kind: EntryKind::Dir(t),
        mode: 0o755,
        uid: 0,
        gid: 0,
        mtime_ns: 0,
        xattrs: vec![],
        link_group: 0,
    };
    let mut trees = vec![store.write_tree(vec![]).unwrap()];
    for _ in 0..40 {
        let below = *trees.last().unwrap();
        trees.push(
            store
                .write_tree(vec![dir("a", below), dir("b", below)])
                .unwrap(),
        );
    }
    let b = BranchRef::parse("p/main").unwrap();
    let head = store.branch_head(&b).unwrap();
    let c = store
        .commit_tree(&b, head, *trees.last().unwrap(), "dag", BTreeMap::new())
        .unwrap();
    let (s, out) = (store.clone(), tmp.path().join("out"));
    let r = bounded("export", move || {
        s.export(c, &out, false, &NoProgress).map(drop)
    });
    let s = store.clone();
    let d = bounded("diff", move || s.diff(head, c).map(drop));
    for (what, r) in [("export", r), ("diff", d)] {
        match r {
            Err(StoreError::Corrupt { id, reason }) => {
                assert!(trees.contains(&id), "{what} names {id}: {reason}");
                assert!(reason.contains("expands to more than"), "{what}: {reason}");
            }
            other => panic!("{what}: expected Corrupt, got {other:?}"),
        }
    }
    // Nothing was written: the count comes before the first directory.
    assert_eq!(
        std::fs::read_dir(tmp.path().join("out")).map_or(0, |d| d.count()),
        0
    );
}
