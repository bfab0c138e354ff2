//! Every SQL statement the Store runs, in one place. Rust logic elsewhere
//! refers to these constants and never builds SQL text.

/// The schema of format versions 3 and 4 (4 changed the chunks of large
/// files, not the tables: chunker.rs).
///
/// Packs (version 2, pack.rs): a row whose `pack` is set keeps its stored
/// bytes at `pack_off`, `pack_len` bytes long, in that pack file, and its
/// `data` is empty.
///
/// Two indexes on `id` (version 3, docs/design.md "The object index"): a
/// new row goes into the small `objects_fresh` index (`fresh = 1`), and
/// the checkpoint thread later folds fresh rows into the large
/// `objects_id` index (`fresh` NULL) in id order, many at a time. An id is
/// in at most one of them: an insert first looks in `objects_id`
/// ([`OBJ_FOLDED`]), and each index is UNIQUE. Every lookup by id names
/// both, as `fresh IS NULL OR fresh = 1`: a partial index serves only a
/// query whose WHERE implies the index's own, and without the term SQLite
/// scans the table (`tests::every_lookup_by_id_uses_an_index`).
pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS objects (
    rowid   INTEGER PRIMARY KEY,
    id      BLOB NOT NULL,
    kind    INTEGER NOT NULL,
    enc     INTEGER NOT NULL,   -- 0 raw, 1 zstd, 2 zstd delta against `base`
    raw_len INTEGER NOT NULL,
    base    BLOB,               -- the delta base object id when enc = 2
    depth   INTEGER NOT NULL,   -- delta chain depth (0 for a full object)
    data    BLOB NOT NULL,
    pack     INTEGER,           -- the pack file's number, or NULL (bytes in `data`)
    pack_off INTEGER,
    pack_len INTEGER,
    fresh    INTEGER            -- 1: indexed in objects_fresh; NULL: in objects_id
);
CREATE UNIQUE INDEX IF NOT EXISTS objects_id ON objects(id) WHERE fresh IS NULL;
CREATE UNIQUE INDEX IF NOT EXISTS objects_fresh ON objects(id) WHERE fresh = 1;
CREATE TABLE IF NOT EXISTS projects (
    name       TEXT PRIMARY KEY,
    created_ns INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS branches (
    project    TEXT NOT NULL REFERENCES projects(name),
    name       TEXT NOT NULL,
    head       BLOB NOT NULL,
    updated_ns INTEGER NOT NULL,
    PRIMARY KEY (project, name)
);
CREATE TABLE IF NOT EXISTS pins (
    holder TEXT PRIMARY KEY,
    commit_id BLOB NOT NULL
);
";

pub const META_GET: &str = "SELECT value FROM meta WHERE key = ?1";
pub const META_PUT: &str = "INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)";
pub const HAS_META_TABLE: &str =
    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'";

/// A new object goes into the fresh index, unless its id is there
/// already (OR IGNORE: one row changed means it is new). The caller has
/// looked in `objects_id` first ([`OBJ_FOLDED`], [`OBJ_FOLDED_PRESENT`]):
/// an `INSERT ... SELECT ... WHERE NOT EXISTS` on the same table did both
/// in one statement, but SQLite then stages each row in a temporary table,
/// and that cost ~3 µs per row, more than the search (docs/benchmarks.md
/// "The chunk index grows with the Store").
pub const OBJ_INSERT: &str =
    "INSERT OR IGNORE INTO objects (id, kind, enc, raw_len, base, depth, data, fresh)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 1)";
/// Whether an id is in the large (folded) index.
pub const OBJ_FOLDED: &str = "SELECT 1 FROM objects WHERE id = ?1 AND fresh IS NULL";
/// Which of [`PRESENT_IDS`] ids are in the large (folded) index.
pub const OBJ_FOLDED_PRESENT: &str = "SELECT id FROM objects WHERE id IN (
     ?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) AND fresh IS NULL";
/// Format version 1 to 2: the pack columns (an O(1) change in SQLite:
/// existing rows read them as NULL).
pub const MIGRATE_1_TO_2: &str = "ALTER TABLE objects ADD COLUMN pack INTEGER;
     ALTER TABLE objects ADD COLUMN pack_off INTEGER;
     ALTER TABLE objects ADD COLUMN pack_len INTEGER;";
/// Format version 2 to 3: the two indexes on `id`. SQLite cannot drop
/// the index a column's UNIQUE made, so the old table is set aside,
/// [`SCHEMA`] makes the new one with its indexes (every other table
/// exists: `IF NOT EXISTS`), and [`MIGRATE_2_TO_3_COPY`] copies the rows
/// (rowids kept; every row lands in `objects_id`) and drops the old
/// table, all in the migration's one transaction (store.rs `migrate`).
pub const MIGRATE_2_TO_3_SET_ASIDE: &str = "ALTER TABLE objects RENAME TO objects_v2;";
pub const MIGRATE_2_TO_3_COPY: &str = "
INSERT INTO objects (rowid, id, kind, enc, raw_len, base, depth, data, pack, pack_off, pack_len)
    SELECT rowid, id, kind, enc, raw_len, base, depth, data, pack, pack_off, pack_len
    FROM objects_v2 ORDER BY rowid;
DROP TABLE objects_v2;
";
/// As [`OBJ_INSERT`], for a chunk whose bytes are in a pack.
pub const OBJ_INSERT_PACKED: &str =
    "INSERT OR IGNORE INTO objects (id, kind, enc, raw_len, base, depth, data, pack, pack_off, pack_len, fresh)
     VALUES (?1, ?2, ?3, ?4, NULL, 0, X'', ?5, ?6, ?7, 1)";
pub const OBJ_EXISTS: &str = "SELECT 1 FROM objects WHERE id = ?1 AND (fresh IS NULL OR fresh = 1)";
/// Which of [`PRESENT_IDS`] ids are stored, in one statement (a packed
/// part checks ~500 chunks; one statement each was a third of its flush
/// thread's SQLite time). Callers pad a short list by repeating an id.
pub const OBJ_PRESENT: &str = "SELECT id FROM objects WHERE id IN (
     ?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,
     ?17,?18,?19,?20,?21,?22,?23,?24,?25,?26,?27,?28,?29,?30,?31,?32) AND fresh IS NULL
     UNION ALL SELECT id FROM objects WHERE id IN (
     ?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,
     ?17,?18,?19,?20,?21,?22,?23,?24,?25,?26,?27,?28,?29,?30,?31,?32) AND fresh = 1";
pub const PRESENT_IDS: usize = 32;
pub const OBJ_GET: &str =
    "SELECT kind, enc, raw_len, base, depth, data, pack, pack_off, pack_len FROM objects
     WHERE id = ?1 AND (fresh IS NULL OR fresh = 1)";
pub const OBJ_DEPTH: &str =
    "SELECT depth FROM objects WHERE id = ?1 AND (fresh IS NULL OR fresh = 1)";
pub const OBJ_PREFIX: &str =
    "SELECT id FROM objects WHERE kind = ?1 AND id >= ?2 AND id <= ?3 AND fresh IS NULL
     UNION ALL
     SELECT id FROM objects WHERE kind = ?1 AND id >= ?2 AND id <= ?3 AND fresh = 1
     ORDER BY id LIMIT 5";
/// How many rows the fresh index holds (a walk of that small index).
pub const FRESH_COUNT: &str = "SELECT count(*) FROM objects WHERE fresh = 1";
/// The id `?2` fresh rows past `?1` in id order: where one fold
/// transaction stops (checkpoint.rs).
pub const FRESH_NTH_AFTER: &str =
    "SELECT id FROM objects WHERE fresh = 1 AND id > ?1 ORDER BY id LIMIT 1 OFFSET ?2";
/// Fold the fresh rows with ids in (?1, ?2] into `objects_id`. SQLite
/// walks `objects_fresh` for them, so they reach `objects_id` in id order
/// and each of its leaves is written once per fold however many rows land
/// in it.
pub const FOLD_RANGE: &str =
    "UPDATE objects SET fresh = NULL WHERE fresh = 1 AND id > ?1 AND id <= ?2";
pub const OBJ_ALL_IDS: &str = "SELECT rowid, id, kind, base FROM objects";
pub const OBJ_ALL_BY_KIND: &str = "SELECT id FROM objects WHERE kind = ?1";
pub const OBJ_DELETE_ROWID: &str = "DELETE FROM objects WHERE rowid = ?1";
pub const OBJ_STATS: &str =
    "SELECT count(*), coalesce(sum(length(data) + coalesce(pack_len, 0)), 0),
     coalesce(sum(CASE WHEN kind = 1 THEN raw_len ELSE 0 END), 0),
     coalesce(sum(CASE WHEN enc = 2 THEN 1 ELSE 0 END), 0) FROM objects";
pub const OBJ_STORED_BYTES: &str =
    "SELECT coalesce(sum(length(data) + coalesce(pack_len, 0)), 0) FROM objects";
/// Per pack, the end of its last indexed object (gc's sweep, pack.rs).
pub const PACK_ENDS: &str =
    "SELECT pack, max(pack_off + pack_len) FROM objects WHERE pack IS NOT NULL GROUP BY pack";

pub const PROJECT_INSERT: &str = "INSERT INTO projects (name, created_ns) VALUES (?1, ?2)";
pub const PROJECT_EXISTS: &str = "SELECT 1 FROM projects WHERE name = ?1";
pub const PROJECT_LIST: &str = "SELECT name FROM projects ORDER BY name";

pub const BRANCH_INSERT: &str =
    "INSERT INTO branches (project, name, head, updated_ns) VALUES (?1, ?2, ?3, ?4)";
pub const BRANCH_HEAD: &str = "SELECT head FROM branches WHERE project = ?1 AND name = ?2";
pub const BRANCH_CAS: &str = "UPDATE branches SET head = ?3, updated_ns = ?5
     WHERE project = ?1 AND name = ?2 AND head = ?4";
pub const BRANCH_DELETE: &str = "DELETE FROM branches WHERE project = ?1 AND name = ?2";
pub const BRANCH_LIST_ALL: &str = "SELECT project, name, head FROM branches ORDER BY project, name";
pub const BRANCH_LIST_PROJECT: &str =
    "SELECT project, name, head FROM branches WHERE project = ?1 ORDER BY name";
pub const BRANCH_HEADS: &str = "SELECT head FROM branches";

pub const PIN_PUT: &str = "INSERT OR REPLACE INTO pins (holder, commit_id) VALUES (?1, ?2)";
pub const PIN_DELETE: &str = "DELETE FROM pins WHERE holder = ?1";
pub const PIN_HEADS: &str = "SELECT commit_id FROM pins";

/// Size of one stored object and where its bytes are if packed (gc
/// reports the bytes it frees and punches the packed ones out).
pub const OBJ_SIZE_ROWID: &str =
    "SELECT length(data) + coalesce(pack_len, 0), pack, pack_off, pack_len FROM objects WHERE rowid = ?1";

/// A new Store: pages freed by gc go back to the filesystem (incremental
/// vacuum), and the schema is made inside one exclusive transaction.
pub const CREATE_BEGIN: &str = "PRAGMA auto_vacuum = INCREMENTAL; BEGIN IMMEDIATE;";
pub const CREATE_COMMIT: &str = "COMMIT;";
/// WAL lets readers and one writer proceed at once, across processes;
/// returns the journal mode SQLite actually chose.
pub const JOURNAL_MODE_WAL: &str = "PRAGMA journal_mode=WAL";
/// Per connection: a 64 MiB page cache, temporary tables in memory, and a
/// WAL checkpoint every 4,096 pages (16 MiB) instead of 1,000.
pub const CONNECTION_PRAGMAS: &str =
    "PRAGMA cache_size = -65536; PRAGMA temp_store = MEMORY; PRAGMA wal_autocheckpoint = 4096;";
/// The write connection leaves checkpoints to the checkpoint thread
/// (checkpoint.rs).
pub const NO_AUTOCHECKPOINT: &str = "PRAGMA wal_autocheckpoint = 0";
/// (busy, frames in the WAL, frames already copied), doing no work.
pub const WAL_PENDING: &str = "PRAGMA wal_checkpoint(NOOP)";
/// Copy what no reader still needs from the WAL; never waits.
pub const WAL_CHECKPOINT: &str = "PRAGMA wal_checkpoint(PASSIVE)";
/// Give a connection's cached pages back to the allocator. Run after a
/// transaction or read of many MiB of chunk bytes (batch.rs, files.rs):
/// the page cache holds up to 64 MiB per connection, and pages of chunk
/// blobs are rarely read again, so keeping them only grows the process
/// (which every fork(2) of a Sandbox's daemon pays for: docs/benchmarks.md).
pub const SHRINK_MEMORY: &str = "PRAGMA shrink_memory";
/// After gc: return freed pages to the filesystem and truncate the WAL.
pub const GC_SHRINK: &str = "PRAGMA incremental_vacuum; PRAGMA wal_checkpoint(TRUNCATE);";

/// Ids in both indexes (fsck): none may be (`SCHEMA`), and a fold would
/// fail on one. Walks the fresh index, one search of the large one each.
pub const IDS_IN_BOTH: &str = "SELECT f.id FROM objects f WHERE f.fresh = 1
     AND EXISTS (SELECT 1 FROM objects o WHERE o.id = f.id AND o.fresh IS NULL)";

/// Statements only unit tests run, to look into the two indexes on `id`.
#[cfg(test)]
pub mod probe {
    pub const FOLDED_COUNT: &str = "SELECT count(*) FROM objects WHERE fresh IS NULL";
    pub const ALL_COUNT: &str = "SELECT count(*) FROM objects";
    pub const FOLDED_MAX_ID: &str = "SELECT max(id) FROM objects WHERE fresh IS NULL";
    pub const FRESH_MIN_ID: &str = "SELECT min(id) FROM objects WHERE fresh = 1";
    pub const WAL_TRUNCATE: &str = "PRAGMA wal_checkpoint(TRUNCATE)";
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan SQLite chose for `q`, one line per step.
    fn plan(conn: &rusqlite::Connection, q: &str, n: usize) -> Vec<String> {
        let mut s = conn.prepare(&format!("EXPLAIN QUERY PLAN {q}")).unwrap();
        let params = vec![rusqlite::types::Value::Blob(vec![7; 32]); n];
        s.query_map(rusqlite::params_from_iter(params), |r| {
            r.get::<_, String>(3)
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
    }

    /// A partial index serves only a query whose WHERE implies the index's
    /// own, and SQLite scans the whole table otherwise, silently: every
    /// statement that finds rows by id must search one of the two indexes
    /// (SCHEMA says why there are two). The fresh rows may be walked in
    /// their own index; the table never.
    #[test]
    fn every_lookup_by_id_uses_an_index() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        for (name, q, n) in [
            ("OBJ_FOLDED", OBJ_FOLDED, 1),
            ("OBJ_FOLDED_PRESENT", OBJ_FOLDED_PRESENT, PRESENT_IDS),
            ("OBJ_EXISTS", OBJ_EXISTS, 1),
            ("OBJ_PRESENT", OBJ_PRESENT, PRESENT_IDS),
            ("OBJ_GET", OBJ_GET, 1),
            ("OBJ_DEPTH", OBJ_DEPTH, 1),
            ("OBJ_PREFIX", OBJ_PREFIX, 3),
            ("FRESH_COUNT", FRESH_COUNT, 0),
            ("FRESH_NTH_AFTER", FRESH_NTH_AFTER, 2),
            ("FOLD_RANGE", FOLD_RANGE, 2),
            ("IDS_IN_BOTH", IDS_IN_BOTH, 0),
        ] {
            let steps = plan(&conn, q, n);
            let on_objects: Vec<&String> = steps.iter().filter(|l| l.contains("objects")).collect();
            assert!(
                !on_objects.is_empty(),
                "{name}: no step on objects: {steps:?}"
            );
            for l in on_objects {
                assert!(
                    l.contains("USING INDEX objects_")
                        || l.contains("USING COVERING INDEX objects_"),
                    "{name} does not search an id index: {steps:?}"
                );
            }
        }
        // The check can fail: a lookup without the `fresh` term scans.
        let steps = plan(&conn, "SELECT 1 FROM objects WHERE id = ?1", 1);
        assert!(steps.iter().any(|l| l == "SCAN objects"), "{steps:?}");
    }
}
