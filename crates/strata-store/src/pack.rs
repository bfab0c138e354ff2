//! Pack files: chunk bytes outside SQLite, in append-only files under
//! `packs/`, with only an index row per chunk in the `objects` table (its
//! `pack`, `pack_off`, `pack_len` columns; `data` is empty).
//!
//! Why (docs/benchmarks.md, "Pack files"): a fresh 32 MiB file's chunks
//! inserted as SQLite rows cost ~60 ms on one writer thread (every byte
//! copied into a page, checksummed, written to the WAL) plus a checkpoint
//! that writes them again; appended to a file they cost ~8 ms, and the
//! 6,700 index rows ~7 ms.
//!
//! The rules that keep a Store consistent (docs/design.md, "Pack files"):
//!
//! - **Bytes before rows.** A transaction that indexes packed bytes
//!   `fdatasync`s the pack before it commits, so after any crash, power
//!   loss included, no row names bytes that are not on disk. Bytes without
//!   a row (a crash between the write and the commit) are garbage, never
//!   damage.
//! - **One appender per pack.** Each Store handle appends to a pack of its
//!   own, created under a temporary name, locked (`flock` shared) and only
//!   then renamed into place; it holds the lock until it is dropped. `gc`
//!   removes or truncates only packs whose lock it can take exclusively,
//!   so never one that a live writer appends to.
//! - **A failed transaction takes its bytes back**: the writer truncates
//!   its pack to where the transaction began, so a disk filled by a failed
//!   import is freed as it was when the bytes were SQLite's.
//! - **Packs never move bytes.** `gc` punches holes where deleted chunks
//!   were (`fallocate(PUNCH_HOLE)`), so an offset stays valid for the
//!   pack's life and readers need no lock.

use crate::error::{Result, StoreError};
use crate::id::ObjectId;
use rustix::fs::{FallocateFlags, FlockOperation};
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

/// The directory of pack files inside a Store.
pub(crate) const PACK_DIR: &str = "packs";

/// Every pack starts with these bytes (then zeros to [`ALIGN`]), so offset
/// 0 is never a chunk and a stray file is recognisable.
const MAGIC: &[u8; 16] = b"strata-pack v1\n\0";

/// Appends are written with O_DIRECT, so their offsets, lengths and buffer
/// addresses are multiples of this (the largest logical block size of the
/// disks here; ext4's direct I/O needs the device's).
const ALIGN: usize = 4096;

/// A pack is closed for appends beyond this size and a new one started.
const PACK_MAX: u64 = 1 << 30;

/// Staged bytes are written once there are this many.
pub(crate) const WRITE_BYTES: usize = 2 << 20;

/// A part of a batch goes to the pack only with at least this many bytes of
/// new chunks: the pack's `fdatasync` before the commit costs a journal
/// commit, which a commit of a few small files should not pay.
pub(crate) const PACK_MIN_BYTES: usize = 1 << 20;

/// Where a packed object's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Loc {
    pub pack: u64,
    pub off: u64,
    pub len: u64,
}

impl Loc {
    /// The location in a row's `pack`, `pack_off`, `pack_len` columns at
    /// `first`, `first + 1`, `first + 2`, or `None` for a row whose bytes
    /// are in `data`.
    pub(crate) fn from_row(r: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<Option<Loc>> {
        let Some(pack) = r.get::<_, Option<i64>>(first)? else {
            return Ok(None);
        };
        Ok(Some(Loc {
            pack: pack as u64,
            off: r.get::<_, i64>(first + 1)? as u64,
            len: r.get::<_, i64>(first + 2)? as u64,
        }))
    }
}

pub(crate) fn pack_path(dir: &Path, pack: u64) -> PathBuf {
    dir.join(PACK_DIR).join(format!("{pack:016x}.pack"))
}

/// The pack number of a file name `<16 hex digits>.pack`.
pub(crate) fn parse_name(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".pack")?;
    (hex.len() == 16)
        .then(|| u64::from_str_radix(hex, 16).ok())
        .flatten()
}

/// The pack one Store handle appends to.
///
/// Chunks are staged in a buffer whose start is [`ALIGN`]-aligned and
/// written with O_DIRECT when [`WRITE_BYTES`] are staged (and before the
/// transaction that indexes them commits), each write padded with zeros to
/// a multiple of [`ALIGN`]. Why not the page cache: on these machines a
/// buffered append of 2 MiB took 0.4 ms or 10-27 ms depending on whether
/// the kernel handed it page-cache pages the host had to fault in again
/// (the VM reports free memory to its host), so 32 MiB took 33-290 ms;
/// with O_DIRECT the same appends took 17-23 ms every time, as DMA from
/// one reused buffer that costs no CPU (docs/benchmarks.md, "Pack files").
/// Where the filesystem refuses O_DIRECT (`EINVAL` on open), appends are
/// buffered, with writeback started at once (`fadvise(DONTNEED)`).
///
/// Each write runs on a thread of its own while the next bytes are staged
/// in a second buffer: the flusher thread waited 1-2 ms for each 2 MiB
/// O_DIRECT write, so it fell behind the hashing threads and finished a
/// 32 MiB commit alone for 10-20 ms (perf timeline, docs/benchmarks.md
/// "A commit's tail"). At most one write is in flight; [`Self::sync`]
/// waits for it (and reports its error) before the `fdatasync`, and
/// [`Self::truncate_to`] before cutting the file.
pub(crate) struct PackWriter {
    pub pack: u64,
    file: Arc<File>,
    /// Whether appends are O_DIRECT (cleared if a write is refused).
    direct: Arc<AtomicBool>,
    /// Where the next write goes: the file's length once every write has
    /// landed, a multiple of ALIGN.
    end: u64,
    /// The buffer being staged into: bytes start at `buf.bytes[buf.lead..]`.
    buf: Staging,
    /// The other buffer, back from its write (or never used yet).
    spare: Staging,
    /// The write in flight: it hands its buffer back, with its result.
    inflight: Option<JoinHandle<(Staging, std::io::Result<()>)>>,
    path: PathBuf,
    /// Whether the last part indexed through this writer found chunks
    /// stored already: then the next part looks its ids up before
    /// indexing (batch.rs `pack_part` says why).
    pub(crate) expect_stored: bool,
}

/// A staging buffer whose bytes from `lead` on are ALIGN-aligned in memory.
#[derive(Default)]
struct Staging {
    bytes: Vec<u8>,
    lead: usize,
}

impl Staging {
    /// Allocated on first use: room for a write's worth, a chunk over it,
    /// the padding and the alignment lead ([`STAGING_CAP`]); never
    /// reallocated after (the lead is computed on this allocation).
    fn alloc(&mut self) {
        if self.bytes.capacity() == 0 {
            self.bytes = Vec::with_capacity(STAGING_CAP);
            self.lead = self.bytes.as_ptr().align_offset(ALIGN).min(ALIGN);
            self.bytes.resize(self.lead, 0);
        }
    }

    fn staged(&self) -> usize {
        self.bytes.len().saturating_sub(self.lead)
    }
}

/// A staging buffer's capacity (see [`Staging::alloc`]).
const STAGING_CAP: usize = WRITE_BYTES + 4 * crate::chunker::Cdc::MAX + 3 * ALIGN;

fn io_err(action: &'static str, path: &Path, e: std::io::Error) -> StoreError {
    if e.raw_os_error() == Some(rustix::io::Errno::NOSPC.raw_os_error()) {
        return StoreError::DiskFull { action };
    }
    StoreError::io(action, path, e)
}

/// `n` rounded up to a multiple of ALIGN.
fn aligned(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

impl PackWriter {
    /// Create a new pack in `dir` (the Store's directory): under a temporary
    /// name first, locked, then renamed, so `gc` never sees it unlocked.
    pub(crate) fn create(dir: &Path) -> Result<PackWriter> {
        let packs = dir.join(PACK_DIR);
        match std::fs::DirBuilder::new().mode(0o700).create(&packs) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err("create the pack directory", &packs, e)),
        }
        for _ in 0..16 {
            let pack = fresh_number();
            let path = pack_path(dir, pack);
            let tmp = path.with_extension("pack.tmp");
            let open = |flags: i32| {
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .custom_flags(flags)
                    .open(&tmp)
            };
            let (file, direct) = match open(rustix::fs::OFlags::DIRECT.bits() as i32) {
                Ok(f) => (f, true),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {
                    // No O_DIRECT here; open() failed before creating it.
                    match open(0) {
                        Ok(f) => (f, false),
                        Err(e) => return Err(io_err("create a pack file", &tmp, e)),
                    }
                }
                Err(e) => return Err(io_err("create a pack file", &tmp, e)),
            };
            rustix::fs::flock(&file, FlockOperation::LockShared)
                .map_err(|e| io_err("lock a pack file", &tmp, e.into()))?;
            if path.exists() {
                let _ = std::fs::remove_file(&tmp);
                continue;
            }
            let mut w = PackWriter {
                pack,
                file: Arc::new(file),
                direct: Arc::new(AtomicBool::new(direct)),
                end: 0,
                buf: Staging::default(),
                spare: Staging::default(),
                inflight: None,
                path: tmp.clone(),
                expect_stored: false,
            };
            w.append(MAGIC)?;
            w.write_staged()?;
            w.wait()?;
            std::fs::rename(&tmp, &path).map_err(|e| io_err("name a pack file", &path, e))?;
            w.path = path;
            // The new name must survive a power loss before any row can
            // name the pack: fsync the directory (fsync(2): syncing a file
            // does not sync its directory entry).
            File::open(&packs)
                .and_then(|d| d.sync_all())
                .map_err(|e| io_err("sync the pack directory", &packs, e))?;
            return Ok(w);
        }
        Err(StoreError::Invalid(format!(
            "could not find a free pack file name in {}",
            packs.display()
        )))
    }

    /// Where the next write goes.
    pub(crate) fn end(&self) -> u64 {
        self.end
    }

    pub(crate) fn full(&self) -> bool {
        self.end >= PACK_MAX
    }

    /// Bytes staged and not yet written.
    fn staged(&self) -> usize {
        self.buf.staged()
    }

    /// Append `bytes`: staged, and written once [`WRITE_BYTES`] are staged.
    /// Returns the offset they have in the pack, the one [`Self::plan`]
    /// gave them.
    pub(crate) fn append(&mut self, bytes: &[u8]) -> Result<u64> {
        self.buf.alloc();
        let (before, after) = writes_around(self.staged(), bytes.len());
        if before {
            self.write_staged()?;
            self.buf.alloc();
        }
        let off = self.end + self.staged() as u64;
        self.buf.bytes.extend_from_slice(bytes);
        if after {
            self.write_staged()?;
        }
        Ok(off)
    }

    /// The offsets that appending objects of `lens` bytes, in this order,
    /// would give them, appending nothing. Every write is padded to ALIGN,
    /// so an offset depends on where the writes fall: both follow
    /// [`writes_around`] (a test holds the two together).
    pub(crate) fn plan(&self, lens: impl Iterator<Item = usize>) -> Vec<u64> {
        let (mut end, mut staged) = (self.end, self.staged());
        let mut out = Vec::new();
        for n in lens {
            let (before, after) = writes_around(staged, n);
            if before {
                end += aligned(staged) as u64;
                staged = 0;
            }
            out.push(end + staged as u64);
            staged += n;
            if after {
                end += aligned(staged) as u64;
                staged = 0;
            }
        }
        out
    }

    /// Start writing the staged bytes, padded with zeros to a multiple of
    /// ALIGN, on a thread of its own (after the write before it has
    /// landed; its error, if any, is returned here); staging goes on in
    /// the other buffer.
    fn write_staged(&mut self) -> Result<()> {
        let n = self.staged();
        if n == 0 {
            return Ok(());
        }
        self.wait()?;
        let len = aligned(n);
        let mut buf = std::mem::take(&mut self.buf);
        buf.bytes.resize(buf.lead + len, 0);
        let (file, direct, at) = (self.file.clone(), self.direct.clone(), self.end);
        let path = self.path.clone();
        let write = move || {
            let wrote = write_at(&file, &direct, &buf.bytes[buf.lead..], at, &path);
            buf.bytes.truncate(buf.lead);
            (buf, wrote)
        };
        match std::thread::Builder::new()
            .name("strata-pack".into())
            .spawn(write)
        {
            Ok(h) => self.inflight = Some(h),
            Err(e) => return Err(io_err("start a pack write", &self.path, e)),
        }
        self.end += len as u64;
        self.buf = std::mem::take(&mut self.spare);
        Ok(())
    }

    /// Wait for the write in flight, take its buffer back as the spare,
    /// and return its error.
    fn wait(&mut self) -> Result<()> {
        let Some(h) = self.inflight.take() else {
            return Ok(());
        };
        let (buf, wrote) = h
            .join()
            .map_err(|_| StoreError::Invalid("a pack write thread panicked".into()))?;
        self.spare = buf;
        wrote.map_err(|e| io_err("append to a pack file", &self.path, e))
    }

    /// Write what is staged and make every appended byte durable: called
    /// before the transaction that indexes them commits. With O_DIRECT the
    /// bytes are on the device already; the sync commits the file's new
    /// size and blocks (fdatasync(2)).
    pub(crate) fn sync(&mut self) -> Result<()> {
        self.write_staged()?;
        self.wait()?;
        rustix::fs::fdatasync(&*self.file)
            .map_err(|e| io_err("sync a pack file", &self.path, e.into()))
    }

    /// Take back everything appended since `end` (a failed transaction),
    /// staged bytes included, once the write in flight has landed (else
    /// it could extend the file again after the cut).
    pub(crate) fn truncate_to(&mut self, end: u64) {
        let _ = self.wait();
        self.buf.bytes.truncate(self.buf.lead);
        if self.file.set_len(end).is_ok() {
            self.end = end;
        } else {
            // The bytes stay as garbage; later appends go after them.
            tracing::warn!(
                "could not truncate {} back to {end} bytes",
                self.path.display()
            );
        }
    }
}

impl Drop for PackWriter {
    /// No write outlives its writer (a Store handle closed between a part
    /// and its transaction's end).
    fn drop(&mut self) {
        let _ = self.wait();
    }
}

/// Around one append of `n` bytes to a staging buffer holding `staged`:
/// whether the staged bytes are written first (the buffer cannot take `n`
/// more and the padding without growing, which would move it off its
/// alignment), and whether they are written after it (a write's worth is
/// staged). `append` acts on it and `plan` replays it.
fn writes_around(staged: usize, n: usize) -> (bool, bool) {
    let before = staged > 0 && staged + n + 2 * ALIGN > STAGING_CAP;
    let after = if before { n } else { staged + n } >= WRITE_BYTES;
    (before, after)
}

/// One append at `at`: O_DIRECT unless the filesystem refuses the write,
/// then buffered with writeback started at once.
fn write_at(
    file: &File,
    direct: &AtomicBool,
    data: &[u8],
    at: u64,
    path: &Path,
) -> std::io::Result<()> {
    let mut wrote = file.write_all_at(data, at);
    if direct.load(Ordering::Relaxed)
        && matches!(&wrote, Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()))
    {
        // A filesystem that took O_DIRECT at open but refuses this write
        // (an alignment it needs beyond ALIGN, a stacked filesystem):
        // append buffered from now on (open(2), EINVAL).
        let flags = rustix::fs::fcntl_getfl(file)?;
        rustix::fs::fcntl_setfl(file, flags - rustix::fs::OFlags::DIRECT)?;
        direct.store(false, Ordering::Relaxed);
        tracing::debug!("{}: O_DIRECT refused, appending buffered", path.display());
        wrote = file.write_all_at(data, at);
    }
    wrote?;
    if !direct.load(Ordering::Relaxed) {
        if let Some(n) = std::num::NonZeroU64::new(data.len() as u64) {
            // Only advice: failing to start writeback early costs time,
            // not correctness (the fdatasync writes it all).
            let _ = rustix::fs::fadvise(file, at, Some(n), rustix::fs::Advice::DontNeed);
        }
    }
    Ok(())
}

/// A pack number nobody else picks: a hash of the time, the process and a
/// counter (the file is created with O_EXCL all the same).
fn fresh_number() -> u64 {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = blake3::Hasher::new();
    h.update(&crate::now_ns().to_le_bytes());
    h.update(&std::process::id().to_le_bytes());
    h.update(
        &COUNTER
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .to_le_bytes(),
    );
    let b = h.finalize();
    u64::from_le_bytes(b.as_bytes()[..8].try_into().unwrap_or([1; 8])).max(1)
}

/// Open read handles of packs, by Store database path, then pack number.
/// Process-wide because the read path has a SQLite connection, not a Store
/// (the connection knows its database's path). Bounded: cleared when it
/// holds more than `OPEN_MAX` packs.
type Handles = HashMap<String, HashMap<u64, Arc<File>>>;
static OPEN: OnceLock<Mutex<Handles>> = OnceLock::new();
const OPEN_MAX: usize = 256;

fn handle(db: &str, pack: u64) -> std::io::Result<Arc<File>> {
    let open = OPEN.get_or_init(Default::default);
    if let Some(f) = open
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(db)
        .and_then(|m| m.get(&pack))
    {
        return Ok(f.clone());
    }
    let dir = Path::new(db).parent().unwrap_or(Path::new("."));
    let f = Arc::new(File::open(pack_path(dir, pack))?);
    let mut map = open.lock().unwrap_or_else(|p| p.into_inner());
    if map.values().map(HashMap::len).sum::<usize>() >= OPEN_MAX {
        map.clear();
    }
    map.entry(db.to_string())
        .or_default()
        .insert(pack, f.clone());
    Ok(f)
}

/// Forget the read handle of a pack `gc` removed.
pub(crate) fn forget(db: &str, pack: u64) {
    if let Some(m) = OPEN
        .get()
        .and_then(|o| o.lock().ok())
        .as_mut()
        .and_then(|o| o.get_mut(db))
    {
        m.remove(&pack);
    }
}

/// Read the stored bytes of object `id` at `loc` in the Store whose
/// database is `db`.
pub(crate) fn read(db: &str, id: &ObjectId, loc: Loc) -> Result<Vec<u8>> {
    let corrupt = |reason: String| StoreError::Corrupt { id: *id, reason };
    let max = crate::chunker::Cdc::MAX as u64 * 2;
    if loc.len > max || loc.off < ALIGN as u64 {
        return Err(corrupt(format!(
            "its pack location ({} bytes at {} in pack {:016x}) is impossible",
            loc.len, loc.off, loc.pack
        )));
    }
    let f = handle(db, loc.pack).map_err(|e| {
        corrupt(format!(
            "its pack file {:016x}.pack cannot be opened ({e})",
            loc.pack
        ))
    })?;
    let mut buf = vec![0u8; loc.len as usize];
    f.read_exact_at(&mut buf, loc.off).map_err(|e| {
        corrupt(format!(
            "{} bytes at {} of pack {:016x}.pack cannot be read ({e})",
            loc.len, loc.off, loc.pack
        ))
    })?;
    // No stored chunk of 64 bytes or more is all zeros: a zstd frame
    // starts with its magic number, and a chunk is stored raw only when it
    // passed the randomness test or zstd could not shrink it, which for
    // zeros happens only below ~16 bytes (the frame's header and one RLE
    // block; tests/packs.rs stores 1 to 47 zero bytes). All zeros is then
    // a hole gc punched (a reader that found the row just before gc
    // deleted it) or damage; either way the bytes are not the object's,
    // so say so instead of returning them.
    if buf.len() >= 64 && buf.iter().all(|&b| b == 0) {
        return Err(corrupt(format!(
            "its {} bytes at {} of pack {:016x}.pack are zeros: freed by gc, or damaged",
            loc.len, loc.off, loc.pack
        )));
    }
    Ok(buf)
}

/// The blocks all pack files hold on disk, in bytes.
pub(crate) fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir.join(PACK_DIR))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.blocks() * 512)
        .sum()
}

/// Free the bytes of deleted objects (their rows are already gone).
pub(crate) fn punch(dir: &Path, dead: &[Loc]) {
    let mut by_pack: HashMap<u64, Vec<&Loc>> = HashMap::new();
    for l in dead {
        by_pack.entry(l.pack).or_default().push(l);
    }
    for (pack, locs) in by_pack {
        let path = pack_path(dir, pack);
        let Ok(f) = std::fs::OpenOptions::new().write(true).open(&path) else {
            continue;
        };
        for l in locs {
            // Offsets of distinct objects never overlap, so zeroing the
            // partial blocks at a range's ends touches only its own bytes.
            if let Err(e) = rustix::fs::fallocate(
                &f,
                FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
                l.off,
                l.len,
            ) {
                tracing::debug!("punch a hole in {}: {e}", path.display());
            }
        }
    }
}

/// After `gc`: remove packs that no row names and cut the unindexed tail
/// (a crashed writer's bytes) off the others, skipping any pack a live
/// writer holds. `ends` is, per pack, the end of its last indexed object.
pub(crate) fn sweep(dir: &Path, db: &str, ends: &HashMap<u64, u64>) {
    let packs = dir.join(PACK_DIR);
    let Ok(entries) = std::fs::read_dir(&packs) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let path = e.path();
        let Some(pack) = name.to_str().and_then(parse_name) else {
            // A pack a crashed writer never named: nothing indexes it.
            if name.to_str().is_some_and(|n| n.ends_with(".pack.tmp")) {
                if let Ok(f) = File::open(&path) {
                    if rustix::fs::flock(&f, FlockOperation::NonBlockingLockExclusive).is_ok() {
                        let _ = std::fs::remove_file(&path);
                    }
                }
            }
            continue;
        };
        let Ok(f) = std::fs::OpenOptions::new().write(true).open(&path) else {
            continue;
        };
        if rustix::fs::flock(&f, FlockOperation::NonBlockingLockExclusive).is_err() {
            continue; // a live writer appends to it
        }
        match ends.get(&pack) {
            None => {
                if std::fs::remove_file(&path).is_ok() {
                    forget(db, pack);
                }
            }
            // Writes are padded to ALIGN: the padding after the last
            // object is not a tail to cut.
            Some(&end) => {
                let end = aligned(end as usize) as u64;
                if f.metadata().is_ok_and(|m| end < m.len()) {
                    let _ = f.set_len(end);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `plan` predicts every offset `append` gives, across writes (each
    /// padded to ALIGN) and the writes forced by a full staging buffer:
    /// batch.rs indexes chunks at planned offsets before appending them.
    #[test]
    fn planned_offsets_are_the_appended_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let mut w = PackWriter::create(tmp.path()).unwrap();
        let mut x = 7u64;
        let mut next = |lo: usize, hi: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            lo + (x as usize) % (hi - lo)
        };
        for round in 0..6 {
            // Chunk-sized objects, and a round of one-byte ones.
            let lens: Vec<usize> = (0..700)
                .map(|_| {
                    if round == 3 {
                        1
                    } else {
                        next(1, 2 * crate::chunker::Cdc::MAX)
                    }
                })
                .collect();
            let planned = w.plan(lens.iter().copied());
            let appended: Vec<u64> = lens
                .iter()
                .map(|&n| w.append(&vec![0xA5; n]).unwrap())
                .collect();
            assert_eq!(planned, appended, "round {round}");
            if round % 2 == 0 {
                w.sync().unwrap();
            }
        }
        w.sync().unwrap();
        assert_eq!(std::fs::metadata(&w.path).unwrap().len(), w.end());
    }
}
