//! Opening and creating a Store: the directory, its database, its lock file,
//! and the checks that refuse anything that is not a Store we understand.

use crate::checkpoint::Checkpointer;
use crate::chunker::Cdc;
use crate::error::{Result, SqlCtx, StoreError};
use crate::sql;
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use std::fs::File;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The format this build writes and the newest it can read. Version 2 added
/// pack files (pack.rs), version 3 the two indexes on object ids (sql.rs
/// `SCHEMA`), version 4 large chunks for files of `LARGE_FILE` or more
/// (chunker.rs; an older reader would call a chunk over 16 KiB damaged);
/// an older Store is migrated when opened (`migrate`), after which older
/// strata refuses it with `NewerVersion`.
pub const FORMAT_VERSION: i64 = 4;
const FORMAT_NAME: &str = "strata-store";
const DB_FILE: &str = "strata.db";
const LOCK_FILE: &str = "lock";

/// How long a writer waits for SQLite's write lock before it gets `Busy`.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Options for creating or opening a Store.
#[derive(Clone, Debug, Default)]
pub struct StoreOptions {
    /// Use `synchronous=FULL` (survives power loss, not only process death).
    /// Recorded at create time; opening a durable Store keeps it durable.
    pub durable: bool,
    /// Do not store changed chunks and pages as deltas against their
    /// previous version (recorded at create time).
    pub no_deltas: bool,
    /// Skip the filesystem-type check (see `check_filesystem`).
    pub allow_any_fs: bool,
}

pub(crate) struct Inner {
    pub(crate) dir: PathBuf,
    /// The connection writers use. Writes are serialized in-process by this
    /// mutex and across processes by SQLite's write lock (BEGIN IMMEDIATE).
    pub(crate) write: Mutex<Connection>,
    /// A separate connection for readers, so that a long write transaction in
    /// this process does not block reads of committed data (WAL readers never
    /// wait for writers).
    pub(crate) read: Mutex<Connection>,
    pub(crate) lock: File,
    /// Number of live write sessions in this process: the shared flock is
    /// taken on 0 -> 1 and released on 1 -> 0, because flock locks belong to
    /// the open file description, not to a thread.
    pub(crate) sessions: Mutex<usize>,
    pub(crate) deltas: bool,
    /// Whether files of `LARGE_FILE` or more are cut large: as the Store
    /// was created (with deltas), whatever this process's options say, so
    /// that equal bytes get equal ids in every process (`Store::cdc_for`).
    pub(crate) large_chunks: bool,
    /// Bytes of source files read to store file contents (`write_file_*`).
    pub(crate) source_read: std::sync::atomic::AtomicU64,
    /// Checkpoints the WAL after writes, off the writers' path.
    pub(crate) ckpt: Checkpointer,
    /// The pack this handle appends chunk bytes to (pack.rs), made on
    /// first use; its lock keeps `gc` from removing it while it lives.
    pub(crate) pack: Mutex<Option<crate::pack::PackWriter>>,
}

/// The write connection, held: tells the checkpoint thread when released
/// that a write transaction may have grown the WAL (checkpoint.rs).
pub(crate) struct WriteConn<'a> {
    conn: MutexGuard<'a, Connection>,
    ckpt: &'a Checkpointer,
}

impl std::ops::Deref for WriteConn<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.conn
    }
}

impl std::ops::DerefMut for WriteConn<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        &mut self.conn
    }
}

impl Drop for WriteConn<'_> {
    fn drop(&mut self) {
        self.ckpt.poke();
    }
}

/// The handle's pack writer, held (`Store::pack_writer`, which always
/// leaves one in the slot).
pub(crate) struct PackGuard<'a>(MutexGuard<'a, Option<crate::pack::PackWriter>>);

impl std::ops::Deref for PackGuard<'_> {
    type Target = crate::pack::PackWriter;
    fn deref(&self) -> &crate::pack::PackWriter {
        self.0.as_ref().expect("pack_writer fills the slot")
    }
}

impl std::ops::DerefMut for PackGuard<'_> {
    fn deref_mut(&mut self) -> &mut crate::pack::PackWriter {
        self.0.as_mut().expect("pack_writer fills the slot")
    }
}

/// A Store: one directory holding one SQLite database. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.inner.dir)
            .finish()
    }
}

impl Store {
    /// Create a Store in `dir` (created if missing; it must be empty or hold
    /// nothing but a previous Store, which is then opened).
    pub fn create(dir: &Path, opts: &StoreOptions) -> Result<Store> {
        if dir.exists() {
            let meta = std::fs::metadata(dir).map_err(|e| StoreError::io("inspect", dir, e))?;
            if !meta.is_dir() {
                return Err(StoreError::NotAStore {
                    path: dir.to_path_buf(),
                    reason: "it is a file, not a directory".into(),
                });
            }
            if dir.join(DB_FILE).exists() {
                return Store::open(dir, opts);
            }
            let mut entries = std::fs::read_dir(dir).map_err(|e| StoreError::io("list", dir, e))?;
            if entries.next().is_some() {
                return Err(StoreError::NotAStore {
                    path: dir.to_path_buf(),
                    reason: "the directory is not empty and holds no strata.db".into(),
                });
            }
        } else {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).map_err(|e| StoreError::io("create", parent, e))?;
            }
            std::fs::DirBuilder::new()
                .mode(PRIVATE_DIR)
                .create(dir)
                .map_err(|e| StoreError::io("create", dir, e))?;
        }
        if !opts.allow_any_fs {
            check_filesystem(dir)?;
        }
        // Private: the Store holds every snapshot's content. The modes are
        // set explicitly, whatever the umask; SQLite gives the -wal and
        // -shm files the database file's mode (os_unix.c,
        // findCreateFileMode and unixOpenSharedMemory), so a 0600
        // strata.db made here makes them 0600 too.
        set_mode(dir, PRIVATE_DIR)?;
        let lock = open_lock(dir)?;
        set_mode(&dir.join(LOCK_FILE), PRIVATE_FILE)?;
        // Creating the schema is exclusive: no other process may see a half-made Store.
        flock(&lock, dir, rustix::fs::FlockOperation::LockExclusive)?;
        let db = dir.join(DB_FILE);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(PRIVATE_FILE)
            .open(&db)
            .map_err(|e| StoreError::io("create", &db, e))?;
        set_mode(&db, PRIVATE_FILE)?;
        let conn = connect(&db, true)?;
        conn.execute_batch(sql::CREATE_BEGIN)
            .ctx("begin creating the Store")?;
        conn.execute_batch(sql::SCHEMA).ctx("create the schema")?;
        let put = |k: &str, v: String| conn.execute(sql::META_PUT, (k, v)).ctx("write metadata");
        put("format", FORMAT_NAME.into())?;
        put("version", FORMAT_VERSION.to_string())?;
        put("durable", (opts.durable as i32).to_string())?;
        put("deltas", (!opts.no_deltas as i32).to_string())?;
        put("created_ns", crate::now_ns().to_string())?;
        conn.execute_batch(sql::CREATE_COMMIT)
            .ctx("commit the new schema")?;
        drop(conn);
        flock(&lock, dir, rustix::fs::FlockOperation::Unlock)?;
        drop(lock);
        Store::open(dir, opts)
    }

    /// Open an existing Store, verifying that it is one and of a version we read.
    pub fn open(dir: &Path, opts: &StoreOptions) -> Result<Store> {
        let meta = match std::fs::metadata(dir) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::NoStore {
                    path: dir.to_path_buf(),
                    reason: "the directory does not exist".into(),
                })
            }
            Err(e) => return Err(StoreError::io("inspect", dir, e)),
        };
        if !meta.is_dir() {
            return Err(StoreError::NotAStore {
                path: dir.to_path_buf(),
                reason: "it is a file, not a directory".into(),
            });
        }
        let db = dir.join(DB_FILE);
        if !db.exists() {
            let empty = std::fs::read_dir(dir)
                .map_err(|e| StoreError::io("list", dir, e))?
                .next()
                .is_none();
            return Err(if empty {
                StoreError::NoStore {
                    path: dir.to_path_buf(),
                    reason: "the directory is empty".into(),
                }
            } else {
                StoreError::NotAStore {
                    path: dir.to_path_buf(),
                    reason: "it holds no strata.db".into(),
                }
            });
        }
        if !opts.allow_any_fs {
            check_filesystem(dir)?;
        }
        let lock = open_lock(dir)?;
        let write = connect(&db, false)?;
        let (durable, deltas, version) = verify_schema(&write, dir)?;
        if version < FORMAT_VERSION {
            migrate(&write, dir)?;
        }
        let sync = if durable || opts.durable {
            "FULL"
        } else {
            "NORMAL"
        };
        write
            .pragma_update(None, "synchronous", sync)
            .ctx("set synchronous")?;
        write
            .execute_batch(sql::NO_AUTOCHECKPOINT)
            .ctx("hand checkpoints to the checkpoint thread")?;
        let read = connect(&db, false)?;
        read.pragma_update(None, "synchronous", sync)
            .ctx("set synchronous")?;
        let ckpt_conn = connect(&db, false)?;
        ckpt_conn
            .pragma_update(None, "synchronous", sync)
            .ctx("set synchronous")?;
        let ckpt = Checkpointer::start(ckpt_conn)?;
        Ok(Store {
            inner: Arc::new(Inner {
                dir: dir.to_path_buf(),
                write: Mutex::new(write),
                read: Mutex::new(read),
                lock,
                sessions: Mutex::new(0),
                deltas: deltas && !opts.no_deltas,
                large_chunks: deltas,
                source_read: Default::default(),
                ckpt,
                pack: Mutex::new(None),
            }),
        })
    }

    /// Bytes of source files this handle (and its clones) read to store
    /// file contents: what a commit costs in reads, for tests and the
    /// benchmarks.
    pub fn source_bytes_read(&self) -> u64 {
        self.inner
            .source_read
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn count_source_read(&self, n: u64) {
        self.inner
            .source_read
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// The Store's directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Whether changed chunks are stored as deltas.
    pub fn deltas(&self) -> bool {
        self.inner.deltas
    }

    /// The chunk sizes a file of `size` bytes is cut into in this Store
    /// (docs/design.md "Chunk sizes"): by its size class, except in a
    /// Store created without deltas, where every file is cut small, since
    /// there a whole chunk is what an edit stores. Recorded at create
    /// time, so every process cuts the same bytes the same way.
    pub fn cdc_for(&self, size: u64) -> Cdc {
        if self.inner.large_chunks {
            Cdc::for_size(size)
        } else {
            Cdc::SMALL
        }
    }

    pub(crate) fn reader(&self) -> MutexGuard<'_, Connection> {
        self.inner.read.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The pack this handle appends to, held, created on first use and
    /// replaced when full (pack.rs).
    pub(crate) fn pack_writer(&self) -> Result<PackGuard<'_>> {
        let mut w = self.inner.pack.lock().unwrap_or_else(|p| p.into_inner());
        if w.as_ref().is_none_or(|p| p.full()) {
            *w = Some(crate::pack::PackWriter::create(&self.inner.dir)?);
        }
        Ok(PackGuard(w))
    }

    pub(crate) fn writer(&self) -> WriteConn<'_> {
        WriteConn {
            conn: self.inner.write.lock().unwrap_or_else(|p| p.into_inner()),
            ckpt: &self.inner.ckpt,
        }
    }

    /// Hold the Store's lock file shared for the duration of a write session
    /// whose objects are not yet reachable; `gc` takes it exclusively, so it
    /// never deletes objects an in-flight snapshot or commit is about to use.
    /// Callers that write several files and trees before `commit_tree` hold
    /// one session across all of it.
    pub fn write_session(&self) -> Result<WriteSession<'_>> {
        let mut n = self
            .inner
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if *n == 0 {
            flock(
                &self.inner.lock,
                &self.inner.dir,
                rustix::fs::FlockOperation::LockShared,
            )?;
        }
        *n += 1;
        Ok(WriteSession {
            store: self,
            exclusive: false,
        })
    }

    /// Take the lock file exclusively without waiting (gc).
    pub(crate) fn exclusive(&self) -> Result<WriteSession<'_>> {
        let n = self
            .inner
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if *n > 0 {
            return Err(StoreError::Busy {
                action: "garbage-collect while this process is writing",
            });
        }
        match rustix::fs::flock(
            &self.inner.lock,
            rustix::fs::FlockOperation::NonBlockingLockExclusive,
        ) {
            Ok(()) => Ok(WriteSession {
                store: self,
                exclusive: true,
            }),
            Err(rustix::io::Errno::WOULDBLOCK) => Err(StoreError::Busy {
                action: "garbage-collect while a snapshot or commit is being written",
            }),
            Err(e) => Err(StoreError::io(
                "lock",
                self.inner.dir.join(LOCK_FILE),
                e.into(),
            )),
        }
    }
}

/// A held lock-file lock (see `Store::write_session`); released on drop.
pub struct WriteSession<'a> {
    store: &'a Store,
    exclusive: bool,
}

impl Drop for WriteSession<'_> {
    fn drop(&mut self) {
        let inner = &self.store.inner;
        if self.exclusive {
            let _ = rustix::fs::flock(&inner.lock, rustix::fs::FlockOperation::Unlock);
            return;
        }
        let mut n = inner.sessions.lock().unwrap_or_else(|p| p.into_inner());
        *n -= 1;
        if *n == 0 {
            let _ = rustix::fs::flock(&inner.lock, rustix::fs::FlockOperation::Unlock);
        }
    }
}

fn open_lock(dir: &Path) -> Result<File> {
    let p = dir.join(LOCK_FILE);
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .mode(PRIVATE_FILE)
        .open(&p)
        .map_err(|e| StoreError::io("open the lock file", &p, e))
}

/// The mode of a new Store directory and of its files.
const PRIVATE_DIR: u32 = 0o700;
const PRIVATE_FILE: u32 = 0o600;

fn set_mode(p: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .map_err(|e| StoreError::io("chmod", p, e))
}

/// Warnings about a Store others on the host can read: its directory or
/// database open to group or others (a Store made before Stores were
/// private, or chmod'ed since). Each says the command that fixes it.
pub(crate) fn access_warnings(dir: &Path) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    let mode = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .map(|m| m.permissions().mode() & 0o7777)
    };
    if let Some(m) = mode(dir).filter(|m| m & 0o077 != 0) {
        out.push(format!(
            "the Store directory {} has mode {m:04o}: other users on this host can reach every snapshot's content. Run `chmod 700 {}`",
            dir.display(),
            dir.display()
        ));
    }
    let packs = dir.join(crate::pack::PACK_DIR);
    if let Some(m) = mode(&packs).filter(|m| m & 0o077 != 0) {
        out.push(format!(
            "{} has mode {m:04o}: other users on this host can reach the chunk bytes in it. Run `chmod 700 {}`",
            packs.display(),
            packs.display()
        ));
    }
    for f in [DB_FILE, "strata.db-wal", "strata.db-shm", LOCK_FILE] {
        let p = dir.join(f);
        if let Some(m) = mode(&p).filter(|m| m & 0o077 != 0) {
            out.push(format!(
                "{} has mode {m:04o}: other users on this host can read it. Run `chmod 600 {}`",
                p.display(),
                p.display()
            ));
        }
    }
    out
}

fn flock(f: &File, dir: &Path, op: rustix::fs::FlockOperation) -> Result<()> {
    rustix::fs::flock(f, op).map_err(|e| StoreError::io("lock", dir.join(LOCK_FILE), e.into()))
}

fn connect(db: &Path, create: bool) -> Result<Connection> {
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let conn = Connection::open_with_flags(db, flags).map_err(|e| StoreError::NotAStore {
        path: db.to_path_buf(),
        reason: format!("SQLite cannot open it ({e})"),
    })?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .ctx("set the busy timeout")?;
    // WAL lets readers and one writer proceed at once, across processes.
    let mode: String = conn
        .query_row(sql::JOURNAL_MODE_WAL, [], |r| r.get(0))
        .map_err(|e| StoreError::NotAStore {
            path: db.to_path_buf(),
            reason: format!("it is not a SQLite database ({e})"),
        })?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::NotAStore {
            path: db.to_path_buf(),
            reason: format!("SQLite refused WAL mode (got {mode})"),
        });
    }
    conn.execute_batch(sql::CONNECTION_PRAGMAS)
        .ctx("set connection pragmas")?;
    Ok(conn)
}

/// Bring an older Store to this version, step by step (1 to 2: the pack
/// columns; 2 to 3: the two indexes on `id`, which copies the `objects`
/// table once; 3 to 4: nothing but the number, since files stored cut
/// small stay readable and an edit of a large one cuts it again whole,
/// rechunk.rs), in one write transaction that reads the version again, so
/// two processes opening it at once migrate it once, and a crash leaves
/// the old version whole.
fn migrate(conn: &Connection, dir: &Path) -> Result<()> {
    conn.execute_batch("BEGIN IMMEDIATE")
        .ctx("begin migrating the Store")?;
    let run = || -> Result<()> {
        let version: Option<String> = conn
            .query_row(sql::META_GET, ["version"], |r| r.get(0))
            .optional()
            .ctx("read metadata")?;
        let mut version: i64 = version.and_then(|v| v.parse().ok()).unwrap_or(0);
        if version == 1 {
            conn.execute_batch(sql::MIGRATE_1_TO_2)
                .ctx("add the pack columns")?;
            version = 2;
        }
        if version == 2 {
            let ctx = "make the fresh and folded indexes on object ids";
            conn.execute_batch(sql::MIGRATE_2_TO_3_SET_ASIDE).ctx(ctx)?;
            conn.execute_batch(sql::SCHEMA).ctx(ctx)?;
            conn.execute_batch(sql::MIGRATE_2_TO_3_COPY).ctx(ctx)?;
            version = 3;
        }
        if version == 3 {
            version = 4;
        }
        if version == FORMAT_VERSION {
            conn.execute(sql::META_PUT, ("version", FORMAT_VERSION.to_string()))
                .ctx("write metadata")?;
        }
        Ok(())
    };
    match run() {
        Ok(()) => conn.execute_batch("COMMIT").ctx("commit the migration"),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            tracing::warn!("migrating the Store at {}: {e}", dir.display());
            Err(e)
        }
    }
}

/// Check that the database is a Store of a version we can read; return
/// (durable, deltas, version) as recorded.
fn verify_schema(conn: &Connection, dir: &Path) -> Result<(bool, bool, i64)> {
    let has_meta: i64 = conn
        .query_row(sql::HAS_META_TABLE, [], |r| r.get(0))
        .map_err(|e| StoreError::NotAStore {
            path: dir.to_path_buf(),
            reason: format!("strata.db is not a readable SQLite database ({e})"),
        })?;
    if has_meta == 0 {
        return Err(StoreError::NotAStore {
            path: dir.to_path_buf(),
            reason: "strata.db has no strata metadata".into(),
        });
    }
    let get = |k: &str| -> Result<Option<String>> {
        conn.query_row(sql::META_GET, [k], |r| r.get(0))
            .optional()
            .ctx("read metadata")
    };
    if get("format")?.as_deref() != Some(FORMAT_NAME) {
        return Err(StoreError::NotAStore {
            path: dir.to_path_buf(),
            reason: "strata.db was not written by strata".into(),
        });
    }
    let version: i64 = get("version")?
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| StoreError::NotAStore {
            path: dir.to_path_buf(),
            reason: "strata.db has no format version".into(),
        })?;
    if version > FORMAT_VERSION {
        return Err(StoreError::NewerVersion {
            path: dir.to_path_buf(),
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let durable = get("durable")?.as_deref() == Some("1");
    let deltas = get("deltas")?.as_deref() != Some("0");
    Ok((durable, deltas, version))
}

/// Refuse filesystems whose locking SQLite's WAL cannot trust. WAL needs
/// coherent shared memory (mmap of the -shm file) and POSIX advisory locks
/// between processes on one kernel; network and FUSE filesystems do not
/// reliably give both (https://sqlite.org/wal.html, "WAL does not work over a
/// network filesystem"). The magic numbers are from linux/magic.h.
pub fn check_filesystem(dir: &Path) -> Result<()> {
    let st = rustix::fs::statfs(dir).map_err(|e| StoreError::io("statfs", dir, e.into()))?;
    let magic = st.f_type as u64;
    let name = match magic {
        0xEF53 => return Ok(()),      // ext2/3/4
        0x5846_5342 => return Ok(()), // xfs
        0x9123_683E => return Ok(()), // btrfs
        0x0102_1994 => return Ok(()), // tmpfs
        0x794C_7630 => return Ok(()), // overlayfs (local container roots)
        0x2FC1_2FC1 => return Ok(()), // zfs
        0xF2F5_2010 => return Ok(()), // f2fs
        0xCA45_1A4E => return Ok(()), // bcachefs
        0x6969 => "NFS".to_string(),
        0x6573_5546 => "a FUSE filesystem (incl. virtiofs)".to_string(),
        0x0102_1997 => "9p".to_string(),
        0xFF53_4D42 => "CIFS".to_string(),
        0xFE53_4D42 => "SMB2".to_string(),
        0x517B => "SMB".to_string(),
        0x0BD0_0BD0 => "Lustre".to_string(),
        0x0016_14F0 => "ceph".to_string(),
        other => format!("an unrecognised filesystem (statfs type {other:#x})"),
    };
    Err(StoreError::UnsupportedFilesystem {
        path: dir.to_path_buf(),
        fstype: name,
    })
}
