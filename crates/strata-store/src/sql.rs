//! Every SQL statement the Store runs, in one place. Rust logic elsewhere
//! refers to these constants and never builds SQL text.

/// The schema of format version 2 (pack.rs: a row whose `pack` is set
/// keeps its stored bytes at `pack_off`, `pack_len` bytes long, in that
/// pack file, and its `data` is empty).
pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS objects (
    rowid   INTEGER PRIMARY KEY,
    id      BLOB NOT NULL UNIQUE,
    kind    INTEGER NOT NULL,
    enc     INTEGER NOT NULL,   -- 0 raw, 1 zstd, 2 zstd delta against `base`
    raw_len INTEGER NOT NULL,
    base    BLOB,               -- the delta base object id when enc = 2
    depth   INTEGER NOT NULL,   -- delta chain depth (0 for a full object)
    data    BLOB NOT NULL,
    pack     INTEGER,           -- the pack file's number, or NULL (bytes in `data`)
    pack_off INTEGER,
    pack_len INTEGER
);
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

pub const OBJ_INSERT: &str =
    "INSERT OR IGNORE INTO objects (id, kind, enc, raw_len, base, depth, data)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
/// Format version 1 to 2: the pack columns (an O(1) change in SQLite:
/// existing rows read them as NULL).
pub const MIGRATE_1_TO_2: &str = "ALTER TABLE objects ADD COLUMN pack INTEGER;
     ALTER TABLE objects ADD COLUMN pack_off INTEGER;
     ALTER TABLE objects ADD COLUMN pack_len INTEGER;";
pub const OBJ_INSERT_PACKED: &str =
    "INSERT OR IGNORE INTO objects (id, kind, enc, raw_len, base, depth, data, pack, pack_off, pack_len)
     VALUES (?1, ?2, ?3, ?4, NULL, 0, X'', ?5, ?6, ?7)";
pub const OBJ_EXISTS: &str = "SELECT 1 FROM objects WHERE id = ?1";
/// Which of [`PRESENT_IDS`] ids are stored, in one statement (a packed
/// part checks ~500 chunks; one statement each was a third of its flush
/// thread's SQLite time). Callers pad a short list by repeating an id.
pub const OBJ_PRESENT: &str = "SELECT id FROM objects WHERE id IN (
     ?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)";
pub const PRESENT_IDS: usize = 32;
pub const OBJ_GET: &str =
    "SELECT kind, enc, raw_len, base, depth, data, pack, pack_off, pack_len FROM objects WHERE id = ?1";
pub const OBJ_DEPTH: &str = "SELECT depth FROM objects WHERE id = ?1";
pub const OBJ_PREFIX: &str =
    "SELECT id FROM objects WHERE kind = ?1 AND id >= ?2 AND id <= ?3 ORDER BY id LIMIT 5";
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
