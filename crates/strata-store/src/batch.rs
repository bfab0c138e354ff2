//! Inserting prepared objects in bounded transactions, off the producer's
//! thread once there is more than one transaction's worth.

use crate::error::{Result, SqlCtx, StoreError};
use crate::id::Kind;
use crate::id::ObjectId;
use crate::objects::{delete_rowid, folded, insert_fresh, insert_packed, present, Prepared};
use crate::pack::{self, PackWriter};
use crate::store::{PackGuard, Store};
use std::collections::HashSet;
use std::sync::mpsc::{sync_channel, SyncSender};
use std::thread::JoinHandle;

/// Flush prepared objects to the database every this many bytes (or
/// [`BATCH_OBJECTS`] objects). Not smaller: every finished batch stays in
/// the Store when a later one fails, and on a disk that a failed import
/// filled even `gc` cannot run (deleting rows needs WAL space). With 4 MiB
/// batches `disk_full.rs`'s 24 MiB filesystem was left full by the failed
/// import and `gc` failed with DiskFull; with 32 MiB nothing is kept.
const BATCH_BYTES: usize = 32 << 20;
const BATCH_OBJECTS: usize = 50_000;

/// A streaming batch ([`Batch::streaming`]) hands its objects over in parts
/// of this many bytes.
const PART_BYTES: usize = 2 << 20;

/// A streaming batch's flusher may fall this many parts behind before the
/// producer waits for it. With none (a rendezvous), the producer stopped
/// at every part until the flusher had inserted the last one, and the
/// cores that hash the next block sat idle meanwhile: a Sandbox's commit
/// of a fresh 32 MiB file left both cores ~25 % idle (perf timeline,
/// docs/benchmarks.md "The flusher's queue"). Costs at most this many
/// parts' bytes of memory more (8 MiB).
const STREAM_QUEUE: usize = 4;

/// After a transaction or a read of at least this many bytes a connection
/// gives its cached pages back ([`shrink_cache`]).
pub(crate) const SHRINK_AFTER: usize = 8 << 20;

/// Free the page cache of `conn` (sql::SHRINK_MEMORY says why). Failing
/// to is harmless: the pages stay cached.
pub(crate) fn shrink_cache(conn: &rusqlite::Connection) {
    if let Err(e) = conn.execute_batch(crate::sql::SHRINK_MEMORY) {
        tracing::debug!("shrink the page cache: {e}");
    }
}

/// Counts of objects that were new to the Store and their stored bytes.
type Counts = (u64, u64);

/// Objects waiting to be inserted, flushed in bounded transactions.
///
/// The first full batch starts a flusher thread that inserts it while the
/// caller goes on preparing the next one; later full batches are handed over
/// the same way. Inserting 50,000 objects takes ~0.4 s, and when the
/// caller did it itself (a snapshot's writer thread), it drained nothing
/// meanwhile: the file-reading threads filled their bounded channel and
/// stopped, and a perf timeline of a 100,000-file import showed one thread
/// running alone at every flush. Small writes (one file, one tree) never
/// fill a batch and never start a thread.
///
/// A streaming batch hands its objects over in parts of [`PART_BYTES`], and
/// its flusher inserts each part as it arrives, into a transaction that
/// stays open until [`BATCH_BYTES`] are in it or the batch is flushed. So
/// the transactions are as large as before (a failure keeps no more than
/// before), but the inserts run beside the preparation of the next objects
/// instead of after all of them: a fresh 32 MiB file was prepared on both
/// cores and then inserted on one, alone (docs/benchmarks.md). The open
/// transaction holds the Store's write connection between parts, so only
/// a writer that takes no other write lock until its flush may stream (one
/// file's content: `Store::write_file_from_path`).
pub(crate) struct Batch<'s> {
    store: &'s Store,
    pending: Vec<Prepared>,
    bytes: usize,
    /// Hand over at this many pending bytes.
    hand_over_at: usize,
    streaming: bool,
    pub(crate) new_objects: u64,
    pub(crate) new_bytes: u64,
    flusher: Option<Flusher>,
}

/// The flusher thread. For whole batches the channel is a rendezvous
/// (capacity 0): at most one batch being inserted and one being filled, so
/// memory stays within two batches; a streaming batch's small parts may
/// queue ([`STREAM_QUEUE`]).
struct Flusher {
    tx: SyncSender<Vec<Prepared>>,
    handle: JoinHandle<Result<Counts>>,
}

impl<'s> Batch<'s> {
    pub(crate) fn new(store: &'s Store) -> Self {
        Batch {
            store,
            pending: Vec::new(),
            bytes: 0,
            hand_over_at: BATCH_BYTES,
            streaming: false,
            new_objects: 0,
            new_bytes: 0,
            flusher: None,
        }
    }

    /// A batch that streams its objects to the flusher (see [`Batch`]).
    pub(crate) fn streaming(store: &'s Store) -> Self {
        let mut b = Batch::new(store);
        b.hand_over_at = PART_BYTES;
        b.streaming = true;
        b
    }

    pub(crate) fn push(&mut self, p: Prepared) -> Result<()> {
        self.bytes += p.data.len() + 64;
        self.pending.push(p);
        if self.bytes >= self.hand_over_at || self.pending.len() >= BATCH_OBJECTS {
            self.hand_over()?;
        }
        Ok(())
    }

    /// Give the pending batch to the flusher thread (started on first use).
    fn hand_over(&mut self) -> Result<()> {
        let batch = std::mem::take(&mut self.pending);
        self.bytes = 0;
        let f = match &mut self.flusher {
            Some(f) => f,
            None => {
                let store = self.store.clone();
                let streaming = self.streaming;
                let queue = if streaming { STREAM_QUEUE } else { 0 };
                let (tx, rx) = sync_channel::<Vec<Prepared>>(queue);
                let handle = std::thread::Builder::new()
                    .name("strata-flush".into())
                    .spawn(move || {
                        if streaming {
                            return insert_parts(&store, rx.into_iter());
                        }
                        let mut counts = (0, 0);
                        for batch in rx {
                            let (n, b) = insert_batch(&store, batch)?;
                            counts.0 += n;
                            counts.1 += b;
                        }
                        Ok(counts)
                    })
                    .map_err(|e| StoreError::Invalid(format!("start the object writer: {e}")))?;
                self.flusher.insert(Flusher { tx, handle })
            }
        };
        if f.tx.send(batch).is_err() {
            // The flusher stopped: it failed on an earlier batch. Its error
            // (a full disk, a busy Store) is the one to report.
            return self.join();
        }
        Ok(())
    }

    /// Insert everything still pending; when it returns, every object pushed
    /// is in the Store (or an error says why not).
    pub(crate) fn flush(&mut self) -> Result<()> {
        if self.flusher.is_some() {
            if !self.pending.is_empty() {
                self.hand_over()?;
            }
            return self.join();
        }
        if self.pending.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.pending);
        self.bytes = 0;
        let (n, b) = insert_batch(self.store, batch)?;
        self.new_objects += n;
        self.new_bytes += b;
        Ok(())
    }

    /// Stop the flusher and collect its counts or its error.
    fn join(&mut self) -> Result<()> {
        let Some(Flusher { tx, handle }) = self.flusher.take() else {
            return Ok(());
        };
        drop(tx);
        let (n, b) = handle
            .join()
            .map_err(|_| StoreError::Invalid("the object writer thread panicked".into()))??;
        self.new_objects += n;
        self.new_bytes += b;
        Ok(())
    }
}

impl Drop for Batch<'_> {
    /// A batch dropped on an error path still waits for its flusher, so no
    /// thread outlives the write session that keeps `gc` away from its
    /// objects.
    fn drop(&mut self) {
        let _ = self.join();
    }
}

/// One transaction; returns the objects that were new and their bytes.
fn insert_batch(store: &Store, batch: Vec<Prepared>) -> Result<Counts> {
    insert_parts(store, std::iter::once(batch))
}

/// Insert `parts` in transactions of about [`BATCH_BYTES`] each (a part is
/// never split); returns the objects that were new and their bytes.
///
/// A part with at least [`pack::PACK_MIN_BYTES`] of chunk bytes has its new
/// chunks' bytes appended to the handle's pack and only their index rows
/// inserted (pack.rs says why, and the rules this follows): the pack is
/// synced before the transaction commits, and truncated back if it fails.
fn insert_parts(store: &Store, parts: impl Iterator<Item = Vec<Prepared>>) -> Result<Counts> {
    let mut parts = parts.peekable();
    let mut counts = (0, 0);
    while parts.peek().is_some() {
        let mut conn = store.writer();
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .ctx("begin writing objects")?;
        // The pack, once a part of this transaction uses it, and where the
        // transaction's bytes began in it.
        let mut packed: Option<(PackGuard<'_>, u64)> = None;
        let result = (|| -> Result<usize> {
            let mut bytes = 0;
            while bytes < BATCH_BYTES {
                let Some(part) = parts.next() else { break };
                let chunk_bytes: usize = part
                    .iter()
                    .filter(|p| packable(p))
                    .map(|p| p.data.len())
                    .sum();
                if chunk_bytes >= pack::PACK_MIN_BYTES {
                    let (w, _) = match &mut packed {
                        Some(p) => p,
                        None => {
                            let w = store.pack_writer()?;
                            let start = w.end();
                            packed.insert((w, start))
                        }
                    };
                    bytes += pack_part(&tx, w, part, &mut counts)?;
                    continue;
                }
                bytes += insert_rows(&tx, part, &mut counts)?;
            }
            // Bytes before rows: no committed row may name bytes a power
            // loss could take (pack.rs).
            if let Some((w, _)) = &mut packed {
                w.sync()?;
            }
            Ok(bytes)
        })()
        .and_then(|bytes| tx.commit().ctx("commit written objects").map(|()| bytes));
        match result {
            Ok(bytes) => {
                if bytes >= SHRINK_AFTER {
                    shrink_cache(&conn);
                }
            }
            Err(e) => {
                if let Some((mut w, start)) = packed {
                    w.truncate_to(start);
                }
                return Err(e);
            }
        }
    }
    Ok(counts)
}

/// Whether an object's bytes may go to a pack: full chunks (deltas and the
/// other kinds are small and stay in SQLite).
fn packable(p: &Prepared) -> bool {
    p.kind == Kind::Chunk && p.base.is_none()
}

/// Append the new packable objects of `part` to the pack in arrival order
/// (a file's chunks in file order, so reading it back reads the pack
/// forward) and index them; then insert the rest as rows, in id order.
/// Returns the part's bytes.
///
/// The rows go in first, at the offsets the appends will give
/// ([`PackWriter::plan`]), in id order: one B-tree search per chunk, where
/// looking each id up and then inserting it made two (the lookups were a
/// quarter of the flush thread's time for a fresh 32 MiB file,
/// docs/benchmarks.md). A chunk stored already makes its insert a no-op
/// and its bytes are not appended, which moves every later offset: then
/// the part's new rows are taken back and it is indexed again without the
/// stored chunks (a copy of a stored large file: one round that inserts
/// nothing). Only then are the bytes appended.
///
/// Taking rows back costs a part about three searches per chunk instead
/// of two, so where stored chunks are likely (the last part through this
/// writer had some: an import of a tree much like one stored, a file
/// edited in place) a part looks its ids up first, 32 per statement, and
/// indexes only the rest; a part whose lookups find nothing switches back.
fn pack_part(
    tx: &rusqlite::Transaction<'_>,
    w: &mut PackWriter,
    mut part: Vec<Prepared>,
    counts: &mut Counts,
) -> Result<usize> {
    let bytes = part.iter().map(|p| p.data.len()).sum();
    // Each id once: a chunk repeated in the part is appended once.
    let mut once = HashSet::new();
    let mut order: Vec<usize> = (0..part.len())
        .filter(|&i| packable(&part[i]) && once.insert(part[i].id))
        .collect();
    {
        let mut ids: Vec<ObjectId> = order.iter().map(|&i| part[i].id).collect();
        // Looked up in id order: neighbouring keys, pages already cached.
        ids.sort_unstable();
        // The folded index always (no id may go to the fresh index that is
        // there: sql.rs SCHEMA); both when stored chunks are likely.
        let stored = if w.expect_stored {
            let stored = present(tx, &ids)?;
            w.expect_stored = !stored.is_empty();
            stored
        } else {
            folded(tx, &ids)?
        };
        order.retain(|&i| !stored.contains(&part[i].id));
    }
    let offsets = loop {
        let offsets = w.plan(order.iter().map(|&i| part[i].data.len()));
        let mut rows: Vec<(usize, u64)> =
            order.iter().copied().zip(offsets.iter().copied()).collect();
        // In id order: neighbouring keys, index pages already cached.
        rows.sort_unstable_by_key(|&(i, _)| part[i].id);
        let mut new_rows = Vec::new();
        let mut stored = HashSet::new();
        for (i, off) in rows {
            let p = &part[i];
            let loc = pack::Loc {
                pack: w.pack,
                off,
                len: p.data.len() as u64,
            };
            match insert_packed(tx, p, loc)? {
                Some(rowid) => new_rows.push(rowid),
                None => {
                    stored.insert(i);
                }
            }
        }
        if stored.is_empty() {
            break offsets;
        }
        for rowid in new_rows {
            delete_rowid(tx, rowid)?;
        }
        order.retain(|i| !stored.contains(i));
        w.expect_stored = true;
    };
    for (&i, &off) in order.iter().zip(&offsets) {
        let p = &part[i];
        let at = w.append(&p.data)?;
        if at != off {
            return Err(StoreError::Invalid(format!(
                "a chunk was appended to pack {:016x} at offset {at}, where its index row says {off}; nothing was committed",
                w.pack
            )));
        }
        counts.0 += 1;
        counts.1 += p.data.len() as u64;
    }
    part.retain(|p| !packable(p));
    insert_rows(tx, part, counts)?;
    Ok(bytes)
}

/// Insert `part`'s objects as rows (their bytes in SQLite), skipping those
/// stored. Returns the part's bytes.
///
/// In id order, each insert into the id index lands next to the last one
/// (ids are hashes: in arrival order every insert searched and dirtied a
/// random index page). The folded index is looked up for the whole part
/// first, 32 ids per statement (sql.rs SCHEMA).
fn insert_rows(
    tx: &rusqlite::Transaction<'_>,
    mut part: Vec<Prepared>,
    counts: &mut Counts,
) -> Result<usize> {
    part.sort_unstable_by_key(|p| p.id);
    let ids: Vec<ObjectId> = part.iter().map(|p| p.id).collect();
    let stored = folded(tx, &ids)?;
    let mut bytes = 0;
    for p in &part {
        bytes += p.data.len();
        if !stored.contains(&p.id) && insert_fresh(tx, p)? {
            counts.0 += 1;
            counts.1 += p.data.len() as u64;
        }
    }
    Ok(bytes)
}
