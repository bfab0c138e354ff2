//! Hostile stored bytes (docs/reliability.md): every decoder that reads
//! what the Store holds (object rows: encoding, zstd and delta frames,
//! lengths, kinds; the postcard encodings of commits, tree nodes and
//! manifest pages) is fed damaged rows, and every read path (open,
//! resolve, log, read_commit, list_tree, read every file, diff, export,
//! fsck) must answer with a value or a clear `StoreError`, never a panic,
//! an abort or a hang.
//!
//! proptest generates the damage (bounded cases in the quick form, many
//! more with `--ignored`); `corpus/objects/*.row` holds the seed rows that
//! once mattered and always run first.

use proptest::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use strata_store::{
    BranchRef, EntryKind, Kind, NoProgress, ObjectId, Store, StoreOptions, TreeEntry, TreeNode,
};

/// A Store with every object shape: a multi-page file and its delta, a
/// paged directory, a symlink, small files; two commits. Built once, copied
/// per case.
fn template() -> &'static Path {
    static T: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &T.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        let mut rng = rand::rng();
        std::fs::create_dir_all(src.join("many")).unwrap();
        for i in 0..700 {
            std::fs::write(src.join(format!("many/f{i:04}")), format!("{i}")).unwrap();
        }
        let big = strata_torture::random_bytes(&mut rng, 3 << 20);
        std::fs::write(src.join("big"), &big).unwrap();
        std::os::unix::fs::symlink("../elsewhere", src.join("link")).unwrap();
        let dir = tmp.path().join("store");
        let s = Store::create(&dir, &StoreOptions::default()).unwrap();
        s.create_project_from("p", &src, "one", &NoProgress)
            .unwrap();
        let mut big2 = big;
        big2[1000..1010].copy_from_slice(b"0123456789");
        std::fs::write(src.join("big"), &big2).unwrap();
        std::fs::write(src.join("many/f0001"), b"changed").unwrap();
        s.snapshot(
            &BranchRef::parse("p/main").unwrap(),
            &src,
            "two",
            &NoProgress,
        )
        .unwrap();
        drop(s);
        (tmp, dir)
    })
    .1
}

/// A fresh copy of the template Store, its `packs/` directory included
/// (the 3 MiB file's chunks are packed: docs/design.md, "Pack files").
fn copy_store(to: &Path) -> PathBuf {
    fn copy_dir(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                copy_dir(&e.path(), &to.join(e.file_name()));
            } else {
                std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
            }
        }
    }
    let dir = to.join("store");
    copy_dir(template(), &dir);
    dir
}

/// One damaged field of one object row.
#[derive(Clone, Debug)]
enum Damage {
    Data(Vec<u8>),
    Flip {
        at: usize,
        xor: u8,
    },
    Truncate(usize),
    Enc(i64),
    RawLen(i64),
    Kind(i64),
    Base(Option<Vec<u8>>),
    /// The data of another row (a valid frame of the wrong object).
    Swap(usize),
    /// A delta whose base is its own id (`enc = 2, base = id, depth = 1`):
    /// readers used to recurse on it until the stack overflowed.
    SelfDelta,
    /// The pack columns of a row (packed or not): another pack number, an
    /// offset or a length anywhere in i64, NULL.
    Pack(Option<i64>),
    PackOff(Option<i64>),
    PackLen(Option<i64>),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..300).prop_map(Damage::Data),
        (any::<usize>(), 1..=255u8).prop_map(|(at, xor)| Damage::Flip { at, xor }),
        any::<usize>().prop_map(Damage::Truncate),
        prop_oneof![
            Just(0i64),
            Just(1),
            Just(2),
            Just(3),
            Just(-1),
            any::<i64>()
        ]
        .prop_map(Damage::Enc),
        prop_oneof![
            Just(0i64),
            Just(-1),
            Just(1 << 40),
            Just(i64::MAX),
            Just(1 << 31),
            0i64..100_000
        ]
        .prop_map(Damage::RawLen),
        prop_oneof![Just(1i64), Just(2), Just(3), Just(4), Just(0), any::<i64>()]
            .prop_map(Damage::Kind),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)).prop_map(Damage::Base),
        any::<usize>().prop_map(Damage::Swap),
        Just(Damage::SelfDelta),
        proptest::option::of(any::<i64>()).prop_map(Damage::Pack),
        proptest::option::of(prop_oneof![
            Just(-1i64),
            Just(0),
            Just(4096),
            Just(i64::MAX),
            any::<i64>()
        ])
        .prop_map(Damage::PackOff),
        proptest::option::of(prop_oneof![
            Just(-1i64),
            Just(0),
            Just(1),
            Just(1 << 40),
            0i64..100_000
        ])
        .prop_map(Damage::PackLen),
    ]
}

/// Apply `d` to the row at position `which` (modulo the row count).
fn apply(db: &Path, which: usize, d: &Damage) {
    let c = rusqlite::Connection::open(db).unwrap();
    let rows: Vec<i64> = c
        .prepare("SELECT rowid FROM objects ORDER BY rowid")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    let row = rows[which % rows.len()];
    let data: Vec<u8> = c
        .query_row("SELECT data FROM objects WHERE rowid = ?1", [row], |r| {
            r.get(0)
        })
        .unwrap();
    let set = |col: &str, v: rusqlite::types::Value| {
        c.execute(
            &format!("UPDATE objects SET {col} = ?1 WHERE rowid = ?2"),
            rusqlite::params![v, row],
        )
        .unwrap();
    };
    use rusqlite::types::Value as V;
    match d {
        Damage::Data(b) => set("data", V::Blob(b.clone())),
        Damage::Flip { at, xor } => {
            let mut b = data;
            if !b.is_empty() {
                let i = at % b.len();
                b[i] ^= xor;
            }
            set("data", V::Blob(b));
        }
        Damage::Truncate(n) => {
            let mut b = data;
            b.truncate(if b.is_empty() { 0 } else { n % b.len() });
            set("data", V::Blob(b));
        }
        Damage::Enc(e) => set("enc", V::Integer(*e)),
        Damage::RawLen(n) => set("raw_len", V::Integer(*n)),
        Damage::Kind(k) => set("kind", V::Integer(*k)),
        Damage::Base(b) => set("base", b.clone().map_or(V::Null, V::Blob)),
        Damage::Pack(v) => set("pack", v.map_or(V::Null, V::Integer)),
        Damage::PackOff(v) => set("pack_off", v.map_or(V::Null, V::Integer)),
        Damage::PackLen(v) => set("pack_len", v.map_or(V::Null, V::Integer)),
        Damage::SelfDelta => {
            c.execute(
                "UPDATE objects SET enc = 2, base = id, depth = 1 WHERE rowid = ?1",
                [row],
            )
            .unwrap();
        }
        Damage::Swap(other) => {
            let o = rows[other % rows.len()];
            let d2: Vec<u8> = c
                .query_row("SELECT data FROM objects WHERE rowid = ?1", [o], |r| {
                    r.get(0)
                })
                .unwrap();
            set("data", V::Blob(d2));
        }
    }
}

/// Every read path over the (damaged) Store. Errors are fine; panics fail
/// the case (proptest catches them and shrinks). Returns how many reads
/// succeeded, to show the damage was actually reached.
fn read_everything(dir: &Path, out: &Path) -> usize {
    let mut ok = 0;
    let Ok(s) = Store::open(dir, &StoreOptions::default()) else {
        return 0;
    };
    let Ok(head) = s.resolve("p/main").map(|r| r.commit) else {
        return 0;
    };
    let log = s.log(head, 10);
    if let Ok(log) = &log {
        ok += 1;
        if let [(a, _), (b, _), ..] = &log[..] {
            ok += s.diff(*b, *a).is_ok() as usize;
        }
        for (id, c) in log {
            ok += strata_torture::manifest_commit(&s, *id).is_ok() as usize;
            ok += s.read_path(*id, b"many/f0699").is_ok() as usize;
            ok += s.lookup(c.tree, b"big").is_ok() as usize;
        }
    }
    if let Ok(Some(e)) = s.read_path(head, b"big") {
        if let EntryKind::File(c) = &e.kind {
            ok += s.read_file_range(c, 2 << 20, 100_000).is_ok() as usize;
            ok += s.chunk_list(c).is_ok() as usize;
        }
    }
    ok += s
        .export(head, &out.join("export"), false, &NoProgress)
        .is_ok() as usize;
    ok += s.fsck(&NoProgress).is_ok() as usize;
    ok += s.stats().is_ok() as usize;
    ok
}

/// The seed rows: `corpus/objects/NAME.row`, one damage per file
/// (`which` then a damage in the Debug form's field order).
fn corpus() -> Vec<(String, usize, Damage)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/objects");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        let text = std::fs::read_to_string(&p).unwrap();
        let line = text
            .lines()
            .find(|l| !l.starts_with('#') && !l.trim().is_empty())
            .unwrap_or_else(|| panic!("{}: no row", p.display()));
        let f: Vec<&str> = line.split_whitespace().collect();
        let which: usize = f[0].parse().unwrap();
        let n = |i: usize| f[i].parse::<i64>().unwrap();
        let d = match f[1] {
            "enc" => Damage::Enc(n(2)),
            "raw_len" => Damage::RawLen(n(2)),
            "kind" => Damage::Kind(n(2)),
            "flip" => Damage::Flip {
                at: n(2) as usize,
                xor: n(3) as u8,
            },
            "truncate" => Damage::Truncate(n(2) as usize),
            "swap" => Damage::Swap(n(2) as usize),
            "selfdelta" => Damage::SelfDelta,
            "pack" => Damage::Pack(f[2].parse().ok()),
            "pack_off" => Damage::PackOff(f[2].parse().ok()),
            "pack_len" => Damage::PackLen(f[2].parse().ok()),
            "data" => Damage::Data(hex(f.get(2).copied().unwrap_or(""))),
            other => panic!("{}: unknown damage {other}", p.display()),
        };
        out.push((
            p.file_name().unwrap().to_string_lossy().into_owned(),
            which,
            d,
        ));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

#[test]
fn corpus_rows_are_errors_not_panics() {
    let rows = corpus();
    assert!(!rows.is_empty());
    for (name, which, d) in rows {
        let tmp = tempfile::tempdir().unwrap();
        let dir = copy_store(tmp.path());
        apply(&dir.join("strata.db"), which, &d);
        eprintln!(
            "{name}: {d:?}: {} reads succeeded",
            read_everything(&dir, tmp.path())
        );
    }
}

/// Absurd lengths on every row at once (so every zstd and delta row is
/// hit): a stored length sizes the decoder's buffer, and a failed
/// allocation aborts instead of unwinding. Once found by the full fuzz run
/// (`raw_len` = i64::MAX on a zstd row: "memory allocation of
/// 9223372036854775807 bytes failed", abort).
#[test]
fn absurd_lengths_on_every_row_are_errors() {
    for len in [i64::MAX, -1, 1 << 40, 1 << 62] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = copy_store(tmp.path());
        let c = rusqlite::Connection::open(dir.join("strata.db")).unwrap();
        c.execute("UPDATE objects SET raw_len = ?1", [len]).unwrap();
        drop(c);
        let ok = read_everything(&dir, tmp.path());
        eprintln!("raw_len {len} on every row: {ok} reads succeeded");
    }
}

/// Absurd pack locations on every packed row at once (the template's
/// 3 MiB file is packed: docs/design.md, "Pack files"): an offset past the
/// end or negative, a length that would size a huge buffer, a pack that
/// does not exist. Each read is an error, never a panic or an abort.
#[test]
fn absurd_pack_locations_on_every_packed_row_are_errors() {
    for (col, v) in [
        ("pack_len", i64::MAX),
        ("pack_len", -1),
        ("pack_len", 1 << 40),
        ("pack_off", -1),
        ("pack_off", i64::MAX),
        ("pack_off", 1 << 40),
        ("pack", 0x1234_5678),
        ("pack", -1),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = copy_store(tmp.path());
        let c = rusqlite::Connection::open(dir.join("strata.db")).unwrap();
        let n = c
            .execute(
                &format!("UPDATE objects SET {col} = ?1 WHERE pack IS NOT NULL"),
                [v],
            )
            .unwrap();
        assert!(
            n > 100,
            "the template should have its 3 MiB file packed, {n} rows are"
        );
        drop(c);
        let ok = read_everything(&dir, tmp.path());
        let s = Store::open(&dir, &StoreOptions::default()).unwrap();
        let f = s.fsck(&NoProgress).unwrap();
        assert!(!f.ok, "fsck passed with {col} = {v} on every packed row");
        eprintln!("{col} {v} on every packed row: {ok} reads succeeded");
    }
}

fn fuzz(cases: u32) {
    let cfg = ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(cfg, |(which in any::<usize>(), d in damage())| {
        let tmp = tempfile::tempdir().unwrap();
        let dir = copy_store(tmp.path());
        apply(&dir.join("strata.db"), which, &d);
        read_everything(&dir, tmp.path());
    });
}

#[test]
fn damaged_rows_are_errors_not_panics_quick() {
    fuzz(64);
}

#[test]
#[ignore = "full form: cargo test --release -p strata-torture -- --ignored"]
fn damaged_rows_are_errors_not_panics_full() {
    fuzz(1000);
}

/// Well-formed objects with hostile structure, which a hash check would
/// catch but readers do not re-hash (only fsck does): a tree that contains
/// itself must not recurse forever in export, diff or a walk.
#[test]
fn a_tree_that_contains_itself_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let s = Store::create(&dir, &StoreOptions::default()).unwrap();
    let base = s.create_project("p", "init").unwrap();
    // The row's id is chosen, its bytes name that same id as a subdirectory.
    let id = ObjectId::hash(Kind::Tree, b"a self-referencing tree");
    let node = TreeNode::Leaf(vec![TreeEntry {
        name: b"loop".to_vec(),
        kind: EntryKind::Dir(id),
        mode: 0o755,
        uid: 0,
        gid: 0,
        mtime_ns: 0,
        xattrs: vec![],
        link_group: 0,
    }]);
    let bytes = postcard::to_stdvec(&node).unwrap();
    let db = rusqlite::Connection::open(dir.join("strata.db")).unwrap();
    db.execute(
        "INSERT INTO objects (id, kind, enc, raw_len, base, depth, data) VALUES (?1, 3, 0, ?2, NULL, 0, ?3)",
        rusqlite::params![&id.0[..], bytes.len() as i64, bytes],
    )
    .unwrap();
    drop(db);
    let b = BranchRef::parse("p/main").unwrap();
    let c = s
        .commit_tree(&b, base, id, "loop", Default::default())
        .unwrap();
    let r = s.export(c, &tmp.path().join("out"), false, &NoProgress);
    assert!(r.is_err(), "export of a cyclic tree succeeded");
    let f = s.fsck(&NoProgress).unwrap();
    assert!(
        !f.problems.is_empty(),
        "fsck missed a tree whose hash is wrong"
    );
    assert!(s.diff(base, c).is_err(), "diff of a cyclic tree succeeded");
    let _ = s.read_path(c, &b"loop/".repeat(10_000));
}
