//! `Store::write_file_edited`: re-chunking only the changed ranges of a
//! file gives the same content (the same ids) as chunking all its bytes
//! again, and reads only a few chunks of the file for a small edit.

mod common;

use common::{new_store, new_store_opts, seeded_bytes};
use proptest::prelude::*;
use strata_store::{Cdc, FileContent, Store, StoreOptions, LARGE_FILE};

/// A file being edited: its bytes and the ranges written since the base.
struct Edited {
    bytes: Vec<u8>,
    ranges: Vec<(u64, u64)>,
}

impl Edited {
    fn new(bytes: Vec<u8>) -> Self {
        Edited {
            bytes,
            ranges: Vec::new(),
        }
    }

    /// pwrite(2): extends the file (with zeros between) when past the end.
    fn write(&mut self, off: usize, data: &[u8]) {
        if self.bytes.len() < off + data.len() {
            self.bytes.resize(off + data.len(), 0);
        }
        self.bytes[off..off + data.len()].copy_from_slice(data);
        self.ranges.push((off as u64, (off + data.len()) as u64));
    }

    /// ftruncate(2): what the Workspace records for it is the range from the
    /// smaller of the two sizes to the end.
    fn truncate(&mut self, len: usize) {
        let from = len.min(self.bytes.len());
        self.bytes.resize(len, 0);
        self.ranges.push((from as u64, u64::MAX));
    }
}

/// Commit `e` as an edit of `base` and as fresh bytes; both must agree and
/// read back as `e.bytes`. Returns the incremental write's bytes read.
fn check(store: &Store, dir: &std::path::Path, base: &FileContent, e: &Edited) -> u64 {
    let path = dir.join("edited");
    std::fs::write(&path, &e.bytes).unwrap();
    let (inc, stats) = store.write_file_edited(&path, base, &e.ranges).unwrap();
    let full = store.write_file_bytes(&e.bytes, None).unwrap();
    assert_eq!(
        inc, full,
        "incremental and full chunking disagree ({stats:?})"
    );
    let back = store.read_file_range(&inc, 0, e.bytes.len()).unwrap();
    assert!(
        back == e.bytes,
        "the stored file does not read back as written"
    );
    stats.bytes_read
}

fn base_of(store: &Store, bytes: &[u8]) -> FileContent {
    store.write_file_bytes(bytes, None).unwrap()
}

const MIB: usize = 1 << 20;

/// A 10-byte overwrite at `at` of a random file of `size` bytes reads at
/// most three of its largest chunks (`cdc.max`), and the changed bytes.
fn small_overwrite(seed: u64, size: usize, at: usize, cdc: Cdc) {
    let dir = tempfile::tempdir().unwrap();
    let store = new_store(dir.path());
    let bytes = seeded_bytes(seed, size);
    let base = base_of(&store, &bytes);
    let mut e = Edited::new(bytes);
    e.write(at, b"0123456789");
    let read = check(&store, dir.path(), &base, &e);
    assert!(
        read <= 3 * cdc.max as u64,
        "a 10-byte overwrite read {read} bytes of the file"
    );
    assert!(read >= 10, "the changed bytes must have been read");
}

#[test]
fn a_small_overwrite_reads_a_few_chunks_and_gives_the_full_ids() {
    // 6 MiB: a manifest three levels high (~1,500 chunks, ~48 leaf pages).
    small_overwrite(7, 6 * MIB, 3 * MIB + 12345, Cdc::SMALL);
}

/// The same for a file of `LARGE_FILE` or more, cut into large chunks
/// (chunker.rs): a few of those are read, not the file.
#[test]
fn a_small_overwrite_of_a_large_file_reads_a_few_large_chunks() {
    small_overwrite(
        8,
        LARGE_FILE as usize + 3 * MIB,
        7 * MIB + 12345,
        Cdc::LARGE,
    );
}

/// Every chunk of `c` but its last is within the bounds of `cdc`.
fn cut_with(store: &Store, c: &FileContent, cdc: Cdc) -> bool {
    let chunks = store.chunk_list(c).unwrap();
    let n = chunks.len();
    chunks
        .iter()
        .enumerate()
        .all(|(i, &(_, _, size))| size <= cdc.max as u64 && (i + 1 == n || size >= cdc.min as u64))
}

/// A file's size picks its chunk sizes: under `LARGE_FILE` small ones,
/// from there on large ones, whichever way it was stored (whole, streamed
/// from a path, edited across the boundary).
#[test]
fn the_size_class_picks_the_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let store = new_store(dir.path());
    let large = LARGE_FILE as usize;
    let bytes = seeded_bytes(12, large + 5 * MIB);
    for len in [large - 1, large, large + 5 * MIB] {
        let c = base_of(&store, &bytes[..len]);
        let (want, other) = if len < large {
            (Cdc::SMALL, Cdc::LARGE)
        } else {
            (Cdc::LARGE, Cdc::SMALL)
        };
        assert!(
            cut_with(&store, &c, want),
            "{len} bytes: not cut with {want:?}"
        );
        assert!(
            !cut_with(&store, &c, other),
            "{len} bytes: cut with {other:?}"
        );
        let path = dir.path().join("f");
        std::fs::write(&path, &bytes[..len]).unwrap();
        assert_eq!(store.write_file_from_path(&path, None).unwrap(), c);
    }
}

#[test]
fn edits_at_the_edges_and_of_the_size_commit_exactly() {
    edge_cases(5 * MIB + 777);
}

/// The same edits of a file cut into large chunks; its truncation to one
/// chunk, and the size changes across `LARGE_FILE` below, change its size
/// class (every cut: chunked again whole).
#[test]
fn edits_of_a_large_file_commit_exactly() {
    edge_cases(LARGE_FILE as usize + 777);
}

#[test]
fn edits_across_the_size_classes_commit_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let store = new_store(dir.path());
    let large = LARGE_FILE as usize;
    let bytes = seeded_bytes(13, large + 100_000);
    // Large to small, and small to large.
    let base = base_of(&store, &bytes);
    let mut e = Edited::new(bytes.clone());
    e.truncate(large - 1);
    check(&store, dir.path(), &base, &e);
    let base = base_of(&store, &bytes[..large - 5]);
    let mut e = Edited::new(bytes[..large - 5].to_vec());
    e.write(large - 7, b"0123456789");
    check(&store, dir.path(), &base, &e);
}

fn edge_cases(size: usize) {
    let dir = tempfile::tempdir().unwrap();
    let store = new_store(dir.path());
    let bytes = seeded_bytes(11, size);
    let base = base_of(&store, &bytes);
    let len = bytes.len();
    let chunks = store.chunk_list(&base).unwrap();
    let boundary = chunks[chunks.len() / 2].0 as usize;

    type Case = (&'static str, Box<dyn Fn(&mut Edited)>);
    let cases: Vec<Case> = vec![
        ("the very start", Box::new(|e| e.write(0, b"0123456789"))),
        (
            "the very end",
            Box::new(move |e| e.write(len - 10, b"0123456789")),
        ),
        ("the first byte", Box::new(|e| e.write(0, b"x"))),
        ("the last byte", Box::new(move |e| e.write(len - 1, b"x"))),
        (
            "across a chunk boundary",
            Box::new(move |e| e.write(boundary - 5, b"0123456789")),
        ),
        (
            "on a chunk boundary",
            Box::new(move |e| e.write(boundary, b"z")),
        ),
        (
            "the same bytes again",
            Box::new(|e| {
                let same = e.bytes[1000..1010].to_vec();
                e.write(1000, &same)
            }),
        ),
        (
            "truncate then extend",
            Box::new(move |e| {
                e.truncate(len / 3);
                e.truncate(len);
            }),
        ),
        ("shrink by one byte", Box::new(move |e| e.truncate(len - 1))),
        ("grow by one byte", Box::new(move |e| e.truncate(len + 1))),
        (
            "a sparse write past the end",
            Box::new(move |e| e.write(len + 3 * MIB, b"0123456789")),
        ),
        (
            "append",
            Box::new(move |e| e.write(len, &seeded_bytes(3, 100_000))),
        ),
        ("truncate to one chunk", Box::new(|e| e.truncate(2000))),
        (
            "two changes far apart",
            Box::new(move |e| {
                e.write(100_000, b"a");
                e.write(len - 100_000, b"b")
            }),
        ),
        (
            "two changes in one chunk",
            Box::new(|e| {
                e.write(100_000, b"a");
                e.write(100_100, b"b")
            }),
        ),
    ];
    for (name, edit) in cases {
        let mut e = Edited::new(bytes.clone());
        edit(&mut e);
        eprintln!("case: {name}");
        check(&store, dir.path(), &base, &e);
    }
}

#[test]
fn without_deltas_the_ids_are_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let opts = StoreOptions {
        no_deltas: true,
        ..Default::default()
    };
    let store = new_store_opts(dir.path(), &opts);
    let bytes = seeded_bytes(5, 3 * MIB);
    let base = base_of(&store, &bytes);
    let mut e = Edited::new(bytes);
    e.write(MIB, b"0123456789");
    e.truncate(3 * MIB - 50_000);
    check(&store, dir.path(), &base, &e);
}

/// A Store created without deltas cuts every file small: there a whole
/// chunk is what an edit stores (docs/design.md "Chunk sizes"). The
/// recorded setting decides, not a process's options, so every process
/// cuts the same bytes the same way.
#[test]
fn a_store_without_deltas_cuts_large_files_small() {
    let dir = tempfile::tempdir().unwrap();
    let plain = StoreOptions {
        no_deltas: true,
        ..Default::default()
    };
    let store = new_store_opts(dir.path(), &plain);
    let bytes = seeded_bytes(6, LARGE_FILE as usize + MIB);
    let base = base_of(&store, &bytes);
    assert!(cut_with(&store, &base, Cdc::SMALL), "not cut small");
    let mut e = Edited::new(bytes);
    e.write(5 * MIB, b"0123456789");
    let read = check(&store, dir.path(), &base, &e);
    assert!(read <= 3 * Cdc::SMALL.max as u64, "read {read} bytes");
    let root = store.dir().to_path_buf();
    drop(store);
    let store = Store::open(&root, &StoreOptions::default()).unwrap();
    assert_eq!(store.cdc_for(LARGE_FILE), Cdc::SMALL);
    // And the other way: a Store with deltas opened without them still
    // cuts large.
    let other = tempfile::tempdir().unwrap();
    let root = new_store(other.path()).dir().to_path_buf();
    let store = Store::open(&root, &plain).unwrap();
    assert_eq!(store.cdc_for(LARGE_FILE), Cdc::LARGE);
    assert!(!store.deltas());
}

#[test]
fn sparse_and_repeated_chunks_commit_exactly() {
    // Runs of zeros cut into identical chunks of the largest size: the same id at
    // many offsets must not confuse the search for old cut points.
    let dir = tempfile::tempdir().unwrap();
    let store = new_store(dir.path());
    let mut bytes = vec![0u8; 4 * MIB];
    bytes[2 * MIB..2 * MIB + 300_000].copy_from_slice(&seeded_bytes(9, 300_000));
    let base = base_of(&store, &bytes);
    for off in [0, MIB + 3, 2 * MIB - 1, 2 * MIB + 150_000, 4 * MIB - 4] {
        let mut e = Edited::new(bytes.clone());
        e.write(off, b"\x01\x02\x03\x04");
        check(&store, dir.path(), &base, &e);
    }
}

#[test]
fn a_streamed_file_has_the_ids_of_an_in_memory_one() {
    // Over 4 MiB a file is read in 2 MiB blocks (4 MiB from LARGE_FILE
    // on), each cut while the one before is hashed; the chunks near a
    // block's end wait for the next block. Sizes at and around the
    // threshold and a whole number of blocks, zero runs (chunks of the
    // largest size) across block ends, sizes on both sides of LARGE_FILE,
    // and a previous version (deltas) must all give the in-memory ids.
    let dir = tempfile::tempdir().unwrap();
    let store = new_store(dir.path());
    let large = LARGE_FILE as usize;
    let mut bytes = seeded_bytes(21, large + 9 * MIB + 4321);
    bytes[2 * MIB - 5000..2 * MIB + 70_000].fill(0);
    bytes[6 * MIB - 3..6 * MIB + 20_000].fill(0);
    bytes[large + 4 * MIB - 5000..large + 4 * MIB + 600_000].fill(0);
    let path = dir.path().join("big");
    let mut prev = None;
    for len in [
        4 * MIB,
        4 * MIB + 1,
        6 * MIB,
        11 * MIB + 4321,
        large - 1,
        large,
        large + 8 * MIB,
        large + 9 * MIB + 4321,
    ] {
        let bytes = &bytes[..len];
        std::fs::write(&path, bytes).unwrap();
        let streamed = store.write_file_from_path(&path, None).unwrap();
        assert_eq!(streamed, store.write_file_bytes(bytes, None).unwrap());
        let back = store.read_file_range(&streamed, 0, len).unwrap();
        assert!(
            back == bytes,
            "the streamed file of {len} bytes does not read back"
        );
        prev = Some(streamed);
    }
    // An edit of the last one, stored whole against it (deltas).
    let prev = prev.unwrap();
    bytes[large + 3 * MIB..large + 3 * MIB + 10].copy_from_slice(b"0123456789");
    std::fs::write(&path, &bytes).unwrap();
    let streamed = store.write_file_from_path(&path, Some(&prev)).unwrap();
    assert_eq!(streamed, store.write_file_bytes(&bytes, None).unwrap());
    let back = store.read_file_range(&streamed, 0, bytes.len()).unwrap();
    assert!(back == bytes, "the edited streamed file does not read back");
}

#[derive(Clone, Debug)]
enum Op {
    Write { at: f64, len: usize, seed: u64 },
    Truncate { to: f64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0.0..1.1f64, 1usize..40_000, any::<u64>())
            .prop_map(|(at, len, seed)| Op::Write { at, len, seed }),
        1 => (0.0..1.2f64).prop_map(|to| Op::Truncate { to }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn random_edits_commit_to_the_ids_of_a_full_rechunk(
        size in (300_000usize..5_000_000),
        seed in any::<u64>(),
        ops in proptest::collection::vec(op(), 1..5),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let store = new_store(dir.path());
        let bytes = seeded_bytes(seed, size);
        let base = base_of(&store, &bytes);
        let mut e = Edited::new(bytes);
        for o in &ops {
            let len = e.bytes.len();
            match *o {
                Op::Write { at, len: n, seed } => {
                    let off = (len as f64 * at) as usize;
                    e.write(off, &seeded_bytes(seed, n));
                }
                Op::Truncate { to } => e.truncate((len as f64 * to) as usize),
            }
        }
        check(&store, dir.path(), &base, &e);
    }
}
