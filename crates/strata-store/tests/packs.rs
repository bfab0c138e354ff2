//! Pack files (crates/strata-store/src/pack.rs, docs/design.md "Pack
//! files"): a large file's chunk bytes go to a pack and only their index
//! to SQLite; they read back byte for byte (in this process and another);
//! gc frees deleted bytes, removes packs nothing names and cuts a crashed
//! writer's tail, but never touches a pack a live writer holds; a damaged
//! or missing pack is a `Corrupt` error naming the object; a version-1
//! Store is migrated when opened and its old rows still read.

mod common;
use common::*;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use strata_store::*;

fn packs(store: &Store) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(store.dir().join("packs"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

fn db(store: &Store) -> rusqlite::Connection {
    rusqlite::Connection::open(store.dir().join("strata.db")).unwrap()
}

/// (rows with their bytes in a pack, bytes of `data` in packed rows)
fn packed_rows(store: &Store) -> (i64, i64) {
    db(store)
        .query_row(
            "SELECT count(*), coalesce(sum(length(data)), 0) FROM objects WHERE pack IS NOT NULL",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
}

/// Write `bytes` to a file under `dir` and store it the way a Workspace's
/// commit does (`write_file_from_path`: streamed above 4 MiB).
fn store_file(store: &Store, dir: &Path, name: &str, bytes: &[u8]) -> FileContent {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    store.write_file_from_path(&p, None).unwrap()
}

fn commit(store: &Store, branch: &str, files: Vec<(&str, FileContent)>) -> ObjectId {
    if store.list_projects().unwrap().is_empty() {
        store.create_project("p", "init").unwrap();
    }
    let b = BranchRef::parse(branch).unwrap();
    let head = match store.branch_head(&b) {
        Ok(h) => h,
        Err(_) => {
            let main = store
                .branch_head(&BranchRef::parse("p/main").unwrap())
                .unwrap();
            store.create_branch(&b, main).unwrap();
            main
        }
    };
    let t = store
        .write_tree(files.into_iter().map(|(n, c)| file_entry(n, c)).collect())
        .unwrap();
    store
        .commit_tree(&b, head, t, "files", BTreeMap::new())
        .unwrap()
}

fn blocks(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().blocks() * 512
}

#[test]
fn a_large_files_chunks_go_to_a_pack_and_read_back() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let bytes = seeded_bytes(11, 9 << 20);
    let c = store_file(&store, tmp.path(), "big", &bytes);
    assert_eq!(store.read_file_range(&c, 0, bytes.len()).unwrap(), bytes);

    let (n, data) = packed_rows(&store);
    assert!(
        n > 1000,
        "expected the file's ~2,300 chunks packed, {n} are"
    );
    assert_eq!(data, 0, "packed rows keep no bytes in SQLite");
    let p = packs(&store);
    assert_eq!(p.len(), 1, "one pack for one handle: {p:?}");
    assert!(
        std::fs::metadata(&p[0]).unwrap().len() >= bytes.len() as u64,
        "the pack holds the file's (random, so uncompressed) bytes"
    );
    // stored_bytes counts packed bytes; the database holds none of them.
    assert!(store.stored_bytes().unwrap() >= bytes.len() as u64);
    assert!(
        std::fs::metadata(store.dir().join("strata.db"))
            .unwrap()
            .len()
            < (4 << 20)
    );

    // The same bytes again are deduplicated: no new pack bytes.
    let len = std::fs::metadata(&p[0]).unwrap().len();
    let c2 = store_file(&store, tmp.path(), "again", &bytes);
    assert_eq!(c2, c);
    assert_eq!(std::fs::metadata(&p[0]).unwrap().len(), len);

    // A small file's chunks stay in SQLite (no pack sync for small commits).
    let small = store_file(&store, tmp.path(), "small", &seeded_bytes(3, 200 << 10));
    assert_eq!(packed_rows(&store).0, n);
    assert_eq!(
        store.read_file_range(&small, 0, 200 << 10).unwrap(),
        seeded_bytes(3, 200 << 10)
    );

    // Another process (another handle) reads it too, and fsck re-hashes
    // every packed chunk.
    commit(&store, "p/main", vec![("big", c.clone())]);
    let other = Store::open(store.dir(), &StoreOptions::default()).unwrap();
    assert_eq!(
        other.read_file_range(&c, 1 << 20, 4096).unwrap(),
        &bytes[1 << 20..(1 << 20) + 4096]
    );
    let r = other.fsck(&NoProgress).unwrap();
    assert!(r.ok, "{:?}", r.problems);
}

#[test]
fn an_edit_of_a_packed_file_reads_back_and_shares_its_chunks() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let mut bytes = seeded_bytes(5, 6 << 20);
    let c = store_file(&store, tmp.path(), "f", &bytes);
    let before = store.stored_bytes().unwrap();
    bytes[3 << 20..(3 << 20) + 10].copy_from_slice(b"0123456789");
    let p = tmp.path().join("f");
    std::fs::write(&p, &bytes).unwrap();
    let c2 = store.write_file_from_path(&p, Some(&c)).unwrap();
    assert_eq!(store.read_file_range(&c2, 0, bytes.len()).unwrap(), bytes);
    let grew = store.stored_bytes().unwrap() - before;
    assert!(grew < 256 << 10, "a 10-byte edit stored {grew} bytes");
}

#[test]
fn gc_frees_packed_bytes_and_removes_packs_nothing_names() {
    let tmp = tempfile::tempdir().unwrap();
    let dir;
    let keep_bytes = seeded_bytes(21, 5 << 20);
    let keep;
    {
        let store = new_store(tmp.path());
        dir = store.dir().to_path_buf();
        keep = store_file(&store, tmp.path(), "keep", &keep_bytes);
        let gone = store_file(&store, tmp.path(), "gone", &seeded_bytes(22, 8 << 20));
        commit(&store, "p/main", vec![("keep", keep.clone())]);
        commit(&store, "p/tmp", vec![("gone", gone)]);
    }
    // A new handle: the writer above is gone, so its pack is unlocked.
    let store = Store::open(&dir, &StoreOptions::default()).unwrap();
    let p = packs(&store);
    assert_eq!(p.len(), 1);
    let full = blocks(&p[0]);
    // Both files but their last part (under a MiB: kept in SQLite).
    assert!(full >= 11 << 20, "{full}");
    store
        .delete_branch(&BranchRef::parse("p/tmp").unwrap())
        .unwrap();
    let r = store.gc(&NoProgress).unwrap();
    assert!(r.deleted_bytes >= 8 << 20, "{r:?}");
    let after = blocks(&p[0]);
    assert!(
        after <= full - (7 << 20),
        "the deleted 8 MiB were punched out: {full} -> {after} bytes on disk"
    );
    assert_eq!(
        store.read_file_range(&keep, 0, keep_bytes.len()).unwrap(),
        keep_bytes
    );
    assert!(store.fsck(&NoProgress).unwrap().ok);

    // Nothing names the pack once `keep` goes too: gc removes the file.
    store
        .delete_branch(&BranchRef::parse("p/main").unwrap())
        .unwrap();
    store.gc(&NoProgress).unwrap();
    assert!(packs(&store).is_empty(), "{:?}", packs(&store));
    assert!(store.fsck(&NoProgress).unwrap().ok);
}

#[test]
fn gc_never_touches_a_pack_a_live_writer_holds() {
    let tmp = tempfile::tempdir().unwrap();
    let writer = new_store(tmp.path());
    // Never committed, so unreachable: gc deletes its rows.
    let _dead = store_file(&writer, tmp.path(), "dead", &seeded_bytes(31, 5 << 20));
    let pack = packs(&writer);
    assert_eq!(pack.len(), 1);
    // Another handle collects while `writer` still holds its pack open.
    let gc = Store::open(writer.dir(), &StoreOptions::default()).unwrap();
    gc.gc(&NoProgress).unwrap();
    assert_eq!(packs(&writer), pack, "the held pack must stay");
    // The writer appends to it again and what it wrote reads back.
    let bytes = seeded_bytes(32, 5 << 20);
    let c = store_file(&writer, tmp.path(), "live", &bytes);
    commit(&writer, "p/main", vec![("live", c.clone())]);
    assert_eq!(packs(&writer), pack, "appended to the same pack");
    assert_eq!(gc.read_file_range(&c, 0, bytes.len()).unwrap(), bytes);
    assert!(gc.fsck(&NoProgress).unwrap().ok);
}

#[test]
fn gc_cuts_the_unindexed_tail_a_crashed_writer_left() {
    let tmp = tempfile::tempdir().unwrap();
    let dir;
    let bytes = seeded_bytes(41, 5 << 20);
    let c;
    {
        let store = new_store(tmp.path());
        dir = store.dir().to_path_buf();
        c = store_file(&store, tmp.path(), "f", &bytes);
        commit(&store, "p/main", vec![("f", c.clone())]);
    }
    let store = Store::open(&dir, &StoreOptions::default()).unwrap();
    let p = packs(&store).remove(0);
    let len = std::fs::metadata(&p).unwrap().len();
    // What a writer killed between its append and its commit leaves.
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(&p)
        .unwrap()
        .write_all(&seeded_bytes(42, 3 << 20))
        .unwrap();
    store.gc(&NoProgress).unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().len(), len);
    assert_eq!(store.read_file_range(&c, 0, bytes.len()).unwrap(), bytes);
}

#[test]
fn a_missing_or_short_pack_is_a_corrupt_error_naming_the_object() {
    let tmp = tempfile::tempdir().unwrap();
    let dir;
    let c;
    {
        let store = new_store(tmp.path());
        dir = store.dir().to_path_buf();
        c = store_file(&store, tmp.path(), "f", &seeded_bytes(51, 5 << 20));
        commit(&store, "p/main", vec![("f", c.clone())]);
    }
    let p = packs(&Store::open(&dir, &StoreOptions::default()).unwrap()).remove(0);
    // Cut the pack short: the last chunks' bytes are gone.
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(1 << 20).unwrap();
    drop(f);
    let store = Store::open(&dir, &StoreOptions::default()).unwrap();
    let err = store
        .read_file_range(&c, (5 << 20) - 4096, 4096)
        .unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("pack"), "{err}");
    let r = store.fsck(&NoProgress).unwrap();
    assert!(!r.ok);
    assert!(
        r.problems.iter().any(|p| p.contains("cannot be read")),
        "{:?}",
        r.problems
    );

    // A hole where a chunk was (what gc punches): Corrupt, not zeros.
    {
        let store = Store::open(&dir, &StoreOptions::default()).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        rustix::fs::fallocate(
            &f,
            rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
            4096,
            64 << 10,
        )
        .unwrap();
        let err = store.read_file_range(&c, 0, 4096).unwrap_err();
        assert!(err.to_string().contains("are zeros"), "{err}");
    }

    // The whole file gone: a packed chunk is Corrupt, never a panic. (This
    // process may still hold the removed file open for reading, which then
    // reads as short, so either message names the pack.)
    std::fs::remove_file(&p).unwrap();
    let store = Store::open(&dir, &StoreOptions::default()).unwrap();
    let err = store
        .read_file_range(&c, (5 << 20) - 4096, 4096)
        .unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("cannot be opened") || msg.contains("cannot be read"),
        "{msg}"
    );
}

#[test]
fn a_version_1_store_is_migrated_and_its_rows_still_read() {
    let tmp = tempfile::tempdir().unwrap();
    let dir;
    let small = seeded_bytes(61, 300 << 10);
    let c;
    {
        let store = new_store(tmp.path());
        dir = store.dir().to_path_buf();
        c = store.write_file_bytes(&small, None).unwrap();
        commit(&store, "p/main", vec![("f", c.clone())]);
    }
    // Make it what a version-1 build wrote: no pack columns, version 1.
    {
        make_version_2(&dir);
        let conn = rusqlite::Connection::open(dir.join("strata.db")).unwrap();
        conn.execute_batch(
            "ALTER TABLE objects DROP COLUMN pack_len; ALTER TABLE objects DROP COLUMN pack_off;
             ALTER TABLE objects DROP COLUMN pack; UPDATE meta SET value = '1' WHERE key = 'version';",
        )
        .unwrap();
    }
    let store = Store::open(&dir, &StoreOptions::default()).unwrap();
    let version: String = db(&store)
        .query_row("SELECT value FROM meta WHERE key = 'version'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(version, FORMAT_VERSION.to_string());
    assert_eq!(store.read_file_range(&c, 0, small.len()).unwrap(), small);
    // It takes packed chunks from now on.
    let big = seeded_bytes(62, 5 << 20);
    let b = store_file(&store, tmp.path(), "big", &big);
    assert!(packed_rows(&store).0 > 0);
    assert_eq!(store.read_file_range(&b, 0, big.len()).unwrap(), big);
    assert!(store.fsck(&NoProgress).unwrap().ok);

    // A Store newer than this build is refused, not misread.
    db(&store)
        .execute("UPDATE meta SET value = '99' WHERE key = 'version'", [])
        .unwrap();
    let err = Store::open(&dir, &StoreOptions::default()).unwrap_err();
    assert!(
        matches!(err, StoreError::NewerVersion { found: 99, .. }),
        "{err:?}"
    );
}

/// Make the Store at `dir` what a version-2 build wrote: one UNIQUE index
/// on `id` (SQLite's automatic one), no `fresh` column, version 2.
fn make_version_2(dir: &Path) {
    let conn = rusqlite::Connection::open(dir.join("strata.db")).unwrap();
    conn.execute_batch(
        "BEGIN;
         CREATE TABLE objects_v2 (
             rowid INTEGER PRIMARY KEY, id BLOB NOT NULL UNIQUE, kind INTEGER NOT NULL,
             enc INTEGER NOT NULL, raw_len INTEGER NOT NULL, base BLOB, depth INTEGER NOT NULL,
             data BLOB NOT NULL, pack INTEGER, pack_off INTEGER, pack_len INTEGER);
         INSERT INTO objects_v2 SELECT rowid, id, kind, enc, raw_len, base, depth, data, pack,
             pack_off, pack_len FROM objects;
         DROP TABLE objects;
         ALTER TABLE objects_v2 RENAME TO objects;
         UPDATE meta SET value = '2' WHERE key = 'version';
         COMMIT;",
    )
    .unwrap();
}

/// (rowid, id) of every row, in rowid order.
fn row_ids(conn: &rusqlite::Connection) -> Vec<(i64, Vec<u8>)> {
    conn.prepare("SELECT rowid, id FROM objects ORDER BY rowid")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// Version 3 splits the index on object ids in two (docs/design.md "The
/// object index"). A version-2 Store is copied into the new table once, at
/// open: every row keeps its rowid and lands in the large index, and the
/// files read back; new rows go to the fresh index, and gc folds them.
#[test]
fn a_version_2_store_is_migrated_to_two_indexes_and_its_rows_still_read() {
    let tmp = tempfile::tempdir().unwrap();
    let small = seeded_bytes(81, 300 << 10);
    let big = seeded_bytes(82, 5 << 20);
    let (dir, c, b, before) = {
        let store = new_store(tmp.path());
        let c = store.write_file_bytes(&small, None).unwrap();
        let b = store_file(&store, tmp.path(), "big", &big);
        commit(&store, "p/main", vec![("f", c.clone()), ("big", b.clone())]);
        let dir = store.dir().to_path_buf();
        drop(store);
        make_version_2(&dir);
        let conn = rusqlite::Connection::open(dir.join("strata.db")).unwrap();
        (dir, c, b, row_ids(&conn))
    };
    assert!(before.len() > 100, "{} rows", before.len());
    let store = Store::open(&dir, &StoreOptions::default()).unwrap();
    let conn = db(&store);
    let version: String = conn
        .query_row("SELECT value FROM meta WHERE key = 'version'", [], |r| {
            r.get(0)
        })
        .unwrap();
    // Migrated through 3 to this build's version (3 to 4 changes nothing
    // but the number: docs/design.md "Chunk sizes").
    assert_eq!(version, FORMAT_VERSION.to_string());
    let indexes: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'objects' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(indexes, ["objects_fresh", "objects_id"]);
    assert_eq!(row_ids(&conn), before, "rows or rowids changed");
    let fresh = |conn: &rusqlite::Connection| -> i64 {
        conn.query_row("SELECT count(*) FROM objects WHERE fresh = 1", [], |r| {
            r.get(0)
        })
        .unwrap()
    };
    assert_eq!(fresh(&conn), 0);
    assert_eq!(store.read_file_range(&c, 0, small.len()).unwrap(), small);
    assert_eq!(store.read_file_range(&b, 0, big.len()).unwrap(), big);
    // The same bytes again: found in the large index, nothing inserted.
    let again = store_file(&store, tmp.path(), "again", &big);
    assert_eq!(again, b);
    assert_eq!(row_ids(&conn).len(), before.len());
    // New bytes go to the fresh index; gc folds them into the large one.
    let new = seeded_bytes(83, 3 << 20);
    let n = store_file(&store, tmp.path(), "new", &new);
    let made = fresh(&conn);
    assert!(made > 100, "{made} fresh rows");
    commit(&store, "p/main", vec![("new", n.clone())]);
    let made = fresh(&conn);
    let r = store.gc(&NoProgress).unwrap();
    assert_eq!(r.folded, made as u64);
    assert_eq!(fresh(&conn), 0);
    assert_eq!(store.read_file_range(&n, 0, new.len()).unwrap(), new);
    assert!(store.fsck(&NoProgress).unwrap().ok);

    // A row indexed in both (which no insert makes) is reported by fsck.
    let (rowid, id): (i64, Vec<u8>) = conn
        .query_row(
            "SELECT rowid, id FROM objects WHERE kind = 1 LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    conn.execute(
        "INSERT INTO objects (id, kind, enc, raw_len, base, depth, data, pack, pack_off, pack_len, fresh)
         SELECT id, kind, enc, raw_len, base, depth, data, pack, pack_off, pack_len, 1
         FROM objects WHERE rowid = ?1",
        [rowid],
    )
    .unwrap();
    let report = store.fsck(&NoProgress).unwrap();
    assert!(!report.ok);
    let hex_id: String = id.iter().map(|b| format!("{b:02x}")).collect();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.starts_with(&hex_id) && p.contains("indexed twice")),
        "{:?}",
        report.problems
    );
}

/// On ext4 a pack is appended with O_DIRECT (pack.rs says why): the
/// writer's descriptor has the flag, and the file's length stays a multiple
/// of 4 KiB (every write padded).
#[test]
fn on_ext4_packs_are_written_with_o_direct() {
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let st = rustix::fs::statfs(tmp.path()).unwrap();
    assert_eq!(
        st.f_type as u64,
        0xEF53,
        "this test needs its scratch directory ({}) on ext4, as CI's target directory is",
        tmp.path().display()
    );
    let store = new_store(tmp.path());
    store_file(&store, tmp.path(), "f", &seeded_bytes(71, 3 << 20));
    let pack = packs(&store).remove(0);
    let len = std::fs::metadata(&pack).unwrap().len();
    assert_eq!(len % 4096, 0, "{len}");
    let mut found = false;
    for e in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        if std::fs::read_link(e.path()).ok().as_deref() == Some(pack.as_path()) {
            let info = std::fs::read_to_string(format!(
                "/proc/self/fdinfo/{}",
                e.file_name().to_string_lossy()
            ))
            .unwrap();
            let flags = info
                .lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .map(|f| u32::from_str_radix(f.trim(), 8).unwrap())
                .unwrap();
            // O_DIRECT is 040000 on x86_64 and aarch64.
            found |= flags & 0o40000 != 0;
        }
    }
    assert!(found, "no descriptor of {} has O_DIRECT", pack.display());
}

/// A chunk repeated within one part (an import of four copies of one file
/// in one batch) is packed once, and a part whose chunks are partly stored
/// already packs only the new ones: the pack grows by the distinct new
/// bytes.
#[test]
fn repeated_and_already_stored_chunks_are_packed_once() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let unit = seeded_bytes(81, 2 << 20);
    for i in 0..4 {
        std::fs::write(src.join(format!("copy{i}")), &unit).unwrap();
    }
    store
        .create_project_from("p", &src, "copies", &NoProgress)
        .unwrap();
    let pack = packs(&store).remove(0);
    let len = std::fs::metadata(&pack).unwrap().len();
    assert!(
        len < (2 << 20) + (64 << 10),
        "four copies of 2 MiB packed {len} bytes, not about one copy"
    );
    // Half the chunks stored already: only the other half is appended.
    let fresh = seeded_bytes(82, 3 << 20);
    let mut mixed = seeded_bytes(83, 3 << 20);
    store_file(&store, tmp.path(), "half", &mixed);
    let before = std::fs::metadata(&pack).unwrap().len();
    mixed.extend_from_slice(&fresh);
    let m = store_file(&store, tmp.path(), "mixed", &mixed);
    let grew = std::fs::metadata(&pack).unwrap().len() - before;
    assert!(
        grew < (3 << 20) + (256 << 10),
        "appending 3 MiB of new bytes to a stored 3 MiB grew the pack by {grew}"
    );
    assert_eq!(store.read_file_range(&m, 0, mixed.len()).unwrap(), mixed);
    let head = store.resolve("p/main").unwrap().commit;
    let e = store.read_path(head, b"copy3").unwrap().unwrap();
    let EntryKind::File(c) = e.kind else {
        panic!("not a file")
    };
    assert_eq!(store.read_file_range(&c, 0, unit.len()).unwrap(), unit);
    assert!(store.fsck(&NoProgress).unwrap().ok);
}

/// A large file that ends in a run of zeros: FastCDC cuts a zero run at
/// the largest chunk size, so the run's last chunk can be a few zero bytes,
/// stored raw (zstd cannot shrink them) and packed with the rest. It reads
/// back as zeros, not as the "hole" error of a punched chunk.
#[test]
fn a_short_all_zero_chunk_reads_back() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let mut short_zero_chunks = 0;
    for extra in 0..24usize {
        let mut bytes = seeded_bytes(91, 5 << 20);
        // With this seed the run's whole chunks end 64,231 bytes into it
        // (measured), so these runs end in chunks of 1 to 47 zero bytes.
        bytes.extend(std::iter::repeat_n(0u8, 64_232 + extra * 2));
        let c = store_file(&store, tmp.path(), &format!("z{extra}"), &bytes);
        assert_eq!(store.read_file_range(&c, 0, bytes.len()).unwrap(), bytes);
        for (off, _, len) in store.chunk_list(&c).unwrap() {
            let b = &bytes[off as usize..(off + len) as usize];
            if len < 64 && b.iter().all(|&x| x == 0) {
                short_zero_chunks += 1;
            }
        }
    }
    assert!(
        short_zero_chunks > 0,
        "no file here ended in a short chunk of zeros: the test does not reach the case"
    );
    assert!(store.fsck(&NoProgress).unwrap().ok);
}
