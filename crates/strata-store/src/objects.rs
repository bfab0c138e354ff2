//! Encoding objects for storage (compression, deltas), inserting them, and
//! reading them back with verification of kind and length.

use crate::error::{Result, SqlCtx, StoreError};
use crate::id::{Kind, ObjectId};
use crate::sql;
use crate::store::Store;
use rusqlite::{Connection, OptionalExtension};

/// How an object's bytes are stored.
pub(crate) const ENC_RAW: u8 = 0;
pub(crate) const ENC_ZSTD: u8 = 1;
pub(crate) const ENC_DELTA: u8 = 2;

/// Longest delta chain: reading any version decompresses at most this many
/// objects plus one full one, which keeps reads of old versions fast.
pub const MAX_DELTA_DEPTH: u32 = 6;

/// zstd level of deltas: their matches against the base are the point.
const ZSTD_LEVEL: i32 = 1;

/// zstd level of full objects (chunks, pages, trees). A negative ("fast")
/// level: chunks are 1-16 KiB, and at level 1 each one paid for building its
/// own Huffman table for the literals and FSE tables for the sequences;
/// that was a third of zstd's time, and zstd was 37-43 % of an import's
/// CPU (perf, 100,000 files of 1-4 KiB). At -1 literals are stored without
/// Huffman coding and compression costs ~30 % less; text chunks come out
/// ~1.4 times larger (the import fixture: 125 MB stored instead of 87 MB
/// for 244 MiB of files). The frames are ordinary zstd frames (enc 1), so
/// Stores written at level 1 read as before and old binaries read these.
const ZSTD_LEVEL_FULL: i32 = -1;

/// An object ready to insert: hashed and encoded, outside any lock.
pub(crate) struct Prepared {
    pub id: ObjectId,
    pub kind: Kind,
    pub enc: u8,
    pub raw_len: u64,
    pub base: Option<ObjectId>,
    pub depth: u32,
    pub data: Data,
}

/// A buffer whose ranges prepared objects may share: a streamed file's
/// block (stream.rs), kept until its last chunk is stored.
pub(crate) type SharedBuf = std::sync::Arc<dyn AsRef<[u8]> + Send + Sync>;

/// A prepared object's stored bytes: its own, or, for a chunk stored raw,
/// its range of the block it was cut from. A raw chunk's bytes were copied
/// once into a buffer of their own and once more into the pack's staging
/// buffer; the first copy, and the page faults of its fresh allocations,
/// were ~10 % of a fresh 32 MiB file's commit CPU (perf,
/// docs/benchmarks.md "Large chunks for large files").
pub(crate) enum Data {
    Own(Vec<u8>),
    Shared(SharedBuf, std::ops::Range<usize>),
}

impl std::ops::Deref for Data {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Data::Own(v) => v,
            Data::Shared(buf, r) => &(**buf).as_ref()[r.clone()],
        }
    }
}

/// Hash and encode `raw` as a full object; compressed only when that saves space.
pub(crate) fn prepare(kind: Kind, raw: &[u8]) -> Prepared {
    let id = ObjectId::hash(kind, raw);
    prepare_with_id(kind, id, raw)
}

thread_local! {
    /// One compression context per thread: creating a zstd context costs
    /// more than compressing a 4 KiB chunk. With it, an output buffer that
    /// is reused, so each object's bytes are allocated once at their
    /// compressed size instead of at zstd's bound for the input: an
    /// import's pending batches held ~2.5 times their bytes, and growing
    /// the heap for them cost page faults and mprotect calls (perf).
    static COMPRESSOR: std::cell::RefCell<Option<(zstd::bulk::Compressor<'static>, Vec<u8>)>> =
        const { std::cell::RefCell::new(None) };
}

/// Whether `raw` looks like random bytes (compressed media, archives,
/// encrypted data): its byte histogram is as flat as that of random bytes
/// of its length. zstd at a negative level stores literals without entropy
/// coding, so such a chunk could shrink only through repeated runs, which
/// random-looking data does not have; trying costs a compression pass
/// (about as long as hashing the chunk) for nothing. The test costs one
/// pass over the bytes and a sum over the 256 counts.
///
/// The entropy is computed as `log2 n - (sum of c log2 c) / n`, with
/// `c log2 c` from a table for the counts below 256 (every count of a
/// random small chunk's sample is): 256 `log2` calls per
/// chunk were half as much CPU as hashing it (perf, docs/benchmarks.md).
///
/// The pass counts into four tables, one per byte position mod 4, summed
/// afterwards: with one table, consecutive equal bytes made each increment
/// wait for the last one's store to the same counter, and the loop ran at
/// about 1.5 cycles a byte (perf: ~18 ms of CPU per fresh 32 MiB file,
/// docs/benchmarks.md). The counts, and so the decision, are the same.
///
/// The histogram covers [`SAMPLE_PIECES`] pieces of [`SAMPLE_PIECE`] bytes
/// spread over the chunk (its start, and evenly after), not every byte: the
/// full pass was 47 % of the hashing threads' CPU in a fresh 32 MiB file's
/// commit (~30 ms of ~120; perf, docs/benchmarks.md "Pack files"). A
/// sample is enough for what the test decides, which is only whether to
/// try zstd (never an id): a chunk of random bytes gives a flat sample, and
/// a chunk with a compressible run in any quarter shows it in that
/// quarter's piece. A wrong "random" stores a compressible chunk raw; a
/// wrong "not random" costs a zstd pass whose output is then not kept.
///
/// A large file's chunks (~64 KiB, chunker.rs) get one piece per
/// [`SAMPLE_SPAN`] bytes, so a compressible run is as likely to be seen in
/// them as in a small chunk's quarter.
fn looks_random(raw: &[u8]) -> bool {
    if raw.len() < 1024 {
        return false;
    }
    let pieces = SAMPLE_PIECES.max(raw.len() / SAMPLE_SPAN);
    if raw.len() <= pieces * SAMPLE_PIECE {
        return flat_histogram(raw.chunks(raw.len()));
    }
    let step = (raw.len() - SAMPLE_PIECE) / (pieces - 1);
    flat_histogram((0..pieces).map(|i| &raw[i * step..i * step + SAMPLE_PIECE]))
}

/// `looks_random` samples at least this many pieces of a chunk ...
const SAMPLE_PIECES: usize = 4;
/// ... and one for every this many bytes of it ...
const SAMPLE_SPAN: usize = 4096;
/// ... of this many bytes each (1 KiB in all for a small chunk, the least
/// the test takes).
const SAMPLE_PIECE: usize = 256;

/// Whether the bytes of `pieces`, counted together, have the byte
/// histogram of random bytes of their length (see `looks_random`).
fn flat_histogram<'a>(pieces: impl Iterator<Item = &'a [u8]>) -> bool {
    let mut tables = [[0u32; 256]; 4];
    let mut total = 0usize;
    for piece in pieces {
        total += piece.len();
        let mut quads = piece.chunks_exact(4);
        for q in &mut quads {
            tables[0][q[0] as usize] += 1;
            tables[1][q[1] as usize] += 1;
            tables[2][q[2] as usize] += 1;
            tables[3][q[3] as usize] += 1;
        }
        for &b in quads.remainder() {
            tables[0][b as usize] += 1;
        }
    }
    let n = total as f64;
    let table = C_LOG2_C.get_or_init(|| {
        let mut t = [0f64; 256];
        for (c, v) in t.iter_mut().enumerate().skip(1) {
            *v = c as f64 * (c as f64).log2();
        }
        t
    });
    let sum: f64 = (0..256)
        .map(|i| tables[0][i] + tables[1][i] + tables[2][i] + tables[3][i])
        .map(|c| match table.get(c as usize) {
            Some(v) => *v,
            None => c as f64 * (c as f64).log2(),
        })
        .sum();
    let entropy = n.log2() - sum / n;
    // The empirical entropy of n random bytes falls short of 8 bits by
    // about 255 / (2 n ln 2) (Miller-Madow); allow twice that.
    entropy > 8.0 - 255.0 / (n * std::f64::consts::LN_2)
}

/// `c log2 c` for the counts 0..256 (0 for 0), for `looks_random`.
static C_LOG2_C: std::sync::OnceLock<[f64; 256]> = std::sync::OnceLock::new();

/// The compressed bytes of `raw`, if compression makes them smaller.
fn compress(raw: &[u8]) -> Option<Vec<u8>> {
    if looks_random(raw) {
        return None;
    }
    COMPRESSOR.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            *c = Some((
                zstd::bulk::Compressor::new(ZSTD_LEVEL_FULL).ok()?,
                Vec::new(),
            ));
        }
        let (z, buf) = c.as_mut()?;
        buf.clear();
        buf.reserve(zstd::zstd_safe::compress_bound(raw.len()));
        let n = z.compress_to_buffer(raw, buf).ok()?;
        let out = (n < raw.len()).then(|| buf[..n].to_vec());
        if buf.capacity() > SCRATCH_KEEP {
            *buf = Vec::new();
        }
        out
    })
}

/// A thread keeps its compression output buffer up to this size.
const SCRATCH_KEEP: usize = 1 << 20;

pub(crate) fn prepare_with_id(kind: Kind, id: ObjectId, raw: &[u8]) -> Prepared {
    prepare_in(kind, id, raw, None)
}

/// [`prepare_with_id`] of `raw`, which is `range` of `shared` when given:
/// stored raw, the object then shares the buffer instead of copying it.
pub(crate) fn prepare_in(
    kind: Kind,
    id: ObjectId,
    raw: &[u8],
    shared: Option<(&SharedBuf, std::ops::Range<usize>)>,
) -> Prepared {
    let (enc, data) = match (compress(raw), shared) {
        (Some(c), _) => (ENC_ZSTD, Data::Own(c)),
        (None, Some((buf, range))) => (ENC_RAW, Data::Shared(buf.clone(), range)),
        (None, None) => (ENC_RAW, Data::Own(raw.to_vec())),
    };
    Prepared {
        id,
        kind,
        enc,
        raw_len: raw.len() as u64,
        base: None,
        depth: 0,
        data,
    }
}

/// Encode `raw` as a zstd delta against `base_raw` (the base's bytes are the
/// compression dictionary, so shared runs cost a few bytes each), falling
/// back to the full encoding when the delta is not smaller or the chain
/// would get too deep.
pub(crate) fn prepare_delta(
    kind: Kind,
    id: ObjectId,
    raw: &[u8],
    base: ObjectId,
    base_raw: &[u8],
    base_depth: u32,
) -> Prepared {
    let full = prepare_with_id(kind, id, raw);
    if base_depth + 1 > MAX_DELTA_DEPTH || base == id {
        return full;
    }
    let delta = zstd::bulk::Compressor::with_dictionary(ZSTD_LEVEL, base_raw)
        .and_then(|mut c| c.compress(raw));
    match delta {
        Ok(d) if d.len() < full.data.len() => Prepared {
            id,
            kind,
            enc: ENC_DELTA,
            raw_len: raw.len() as u64,
            base: Some(base),
            depth: base_depth + 1,
            data: Data::Own(d),
        },
        _ => full,
    }
}

/// Insert unless present (in either index: sql.rs `SCHEMA`). Returns true
/// if the object is new.
pub(crate) fn insert(conn: &Connection, p: &Prepared) -> Result<bool> {
    let folded = conn
        .prepare_cached(sql::OBJ_FOLDED)
        .and_then(|mut s| s.exists([&p.id.0[..]]))
        .ctx("look up an object")?;
    if folded {
        return Ok(false);
    }
    insert_fresh(conn, p)
}

/// Insert into the fresh index unless the id is there. Returns true if
/// the object is new. The caller has found the id absent from the folded
/// index ([`folded`]); an id in both would make the next fold fail.
pub(crate) fn insert_fresh(conn: &Connection, p: &Prepared) -> Result<bool> {
    let n = conn
        .prepare_cached(sql::OBJ_INSERT)
        .and_then(|mut s| {
            s.execute((
                &p.id.0[..],
                p.kind as u8,
                p.enc,
                p.raw_len as i64,
                p.base.as_ref().map(|b| &b.0[..]),
                p.depth,
                &*p.data,
            ))
        })
        .ctx("insert an object")?;
    Ok(n == 1)
}

pub(crate) fn exists(conn: &Connection, id: &ObjectId) -> Result<bool> {
    conn.prepare_cached(sql::OBJ_EXISTS)
        .and_then(|mut s| s.exists([&id.0[..]]))
        .ctx("look up an object")
}

/// The ids of `ids` that are stored, looked up [`sql::PRESENT_IDS`] at a
/// time.
pub(crate) fn present(
    conn: &Connection,
    ids: &[ObjectId],
) -> Result<std::collections::HashSet<ObjectId>> {
    ids_in(conn, sql::OBJ_PRESENT, ids)
}

/// The ids of `ids` in the large (folded) index, [`sql::PRESENT_IDS`] at a
/// time: what must not go into the fresh one.
pub(crate) fn folded(
    conn: &Connection,
    ids: &[ObjectId],
) -> Result<std::collections::HashSet<ObjectId>> {
    ids_in(conn, sql::OBJ_FOLDED_PRESENT, ids)
}

/// The ids of `ids` that `query` (of [`sql::PRESENT_IDS`] parameters)
/// returns.
fn ids_in(
    conn: &Connection,
    query: &str,
    ids: &[ObjectId],
) -> Result<std::collections::HashSet<ObjectId>> {
    let mut out = std::collections::HashSet::new();
    let mut s = conn.prepare_cached(query).ctx("look up objects")?;
    for group in ids.chunks(sql::PRESENT_IDS) {
        let params: Vec<&[u8]> = (0..sql::PRESENT_IDS)
            .map(|i| &group[i.min(group.len() - 1)].0[..])
            .collect();
        let mut rows = s
            .query(rusqlite::params_from_iter(params))
            .ctx("look up objects")?;
        while let Some(r) = rows.next().ctx("look up objects")? {
            let id: Vec<u8> = r.get(0).ctx("look up objects")?;
            out.extend(ObjectId::from_slice(&id));
        }
    }
    Ok(out)
}

pub(crate) fn depth(conn: &Connection, id: &ObjectId) -> Result<Option<u32>> {
    conn.prepare_cached(sql::OBJ_DEPTH)
        .and_then(|mut s| s.query_row([&id.0[..]], |r| r.get(0)).optional())
        .ctx("look up an object's delta depth")
}

/// A stored row, before decoding.
pub(crate) struct Row {
    pub kind: u8,
    pub enc: u8,
    pub raw_len: u64,
    pub base: Option<Vec<u8>>,
    pub depth: i64,
    pub data: Vec<u8>,
}

/// Index a chunk whose stored bytes are (to be) at `loc` in a pack
/// (pack.rs), in the fresh index. Returns the new row's rowid, or None if
/// the id was there already (the row is then left as it was). As for
/// [`insert_fresh`], the caller has found the id absent from the folded
/// index.
pub(crate) fn insert_packed(
    conn: &Connection,
    p: &Prepared,
    loc: crate::pack::Loc,
) -> Result<Option<i64>> {
    let n = conn
        .prepare_cached(sql::OBJ_INSERT_PACKED)
        .and_then(|mut s| {
            s.execute((
                &p.id.0[..],
                p.kind as u8,
                p.enc,
                p.raw_len as i64,
                loc.pack as i64,
                loc.off as i64,
                loc.len as i64,
            ))
        })
        .ctx("index a packed object")?;
    Ok((n == 1).then(|| conn.last_insert_rowid()))
}

/// Delete the row `rowid` (a packed part's index rows taken back: batch.rs).
pub(crate) fn delete_rowid(conn: &Connection, rowid: i64) -> Result<()> {
    conn.prepare_cached(sql::OBJ_DELETE_ROWID)
        .and_then(|mut s| s.execute([rowid]))
        .ctx("take back an object's row")?;
    Ok(())
}

/// A row, with the stored bytes of a packed one read from its pack.
pub(crate) fn get_row(conn: &Connection, id: &ObjectId) -> Result<Option<Row>> {
    let row = conn
        .prepare_cached(sql::OBJ_GET)
        .and_then(|mut s| {
            s.query_row([&id.0[..]], |r| {
                let loc = crate::pack::Loc::from_row(r, 6)?;
                Ok((
                    Row {
                        kind: r.get(0)?,
                        enc: r.get(1)?,
                        raw_len: r.get::<_, i64>(2)? as u64,
                        base: r.get(3)?,
                        depth: r.get(4)?,
                        data: r.get(5)?,
                    },
                    loc,
                ))
            })
            .optional()
        })
        .ctx("read an object")?;
    let Some((mut row, loc)) = row else {
        return Ok(None);
    };
    if let Some(loc) = loc {
        row.data = crate::pack::read(conn.path().unwrap_or_default(), id, loc)?;
    }
    Ok(Some(row))
}

/// The largest decoded size a row of `kind` may declare. Chunks are cut by
/// FastCDC at `Cdc::MAX` at most (chunker.rs); a page holds at most `PAGE_MAX` entries
/// of an id and a varint size (about 11 KiB). Trees and commits have no
/// format limit (names, symlink targets, xattrs and messages are theirs),
/// so they get a generous one that still keeps a damaged row from making a
/// reader reserve and fill gigabytes.
pub(crate) fn max_raw_len(kind: Kind) -> u64 {
    match kind {
        Kind::Chunk => crate::chunker::Cdc::MAX as u64,
        Kind::Page => 64 << 10,
        Kind::Tree | Kind::Commit => 256 << 20,
    }
}

/// Read an object's raw bytes from `conn`, resolving deltas, checking its
/// kind and length (not its hash: `fsck` re-hashes).
pub(crate) fn get_raw_in(conn: &Connection, id: &ObjectId, kind: Kind) -> Result<Vec<u8>> {
    let row = get_row(conn, id)?.ok_or(StoreError::Missing {
        id: *id,
        kind: kind.name(),
    })?;
    if row.kind != kind as u8 {
        return Err(StoreError::Corrupt {
            id: *id,
            reason: format!("expected a {}, found kind {}", kind.name(), row.kind),
        });
    }
    decode_row(conn, id, row)
}

/// Decompress a zstd frame (against `dict` for a delta) of `raw_len` bytes.
/// The output buffer is sized from `raw_len`, which is stored, not derived:
/// in a damaged row it can be anything up to 2^64. `zstd::bulk` would call
/// `Vec::with_capacity` with it, and a failed allocation aborts the process
/// (`handle_alloc_error`), so reserve fallibly and make that an error.
/// zstd never writes past the buffer (`ZSTD_decompressDCtx` fails with
/// "Destination buffer is too small"), so a frame that inflates beyond
/// `raw_len` (a zstd bomb) costs at most `raw_len` bytes and is an error.
fn zstd_decode(data: &[u8], raw_len: u64, dict: Option<&[u8]>) -> std::io::Result<Vec<u8>> {
    let len = usize::try_from(raw_len)
        .map_err(|_| std::io::Error::other(format!("length {raw_len} does not fit in memory")))?;
    let mut out = Vec::new();
    out.try_reserve_exact(len).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::OutOfMemory,
            format!("cannot allocate the {len} bytes the row claims: {e}"),
        )
    })?;
    let mut d = match dict {
        Some(dict) => zstd::bulk::Decompressor::with_dictionary(dict)?,
        None => zstd::bulk::Decompressor::new()?,
    };
    d.decompress_to_buffer(data, &mut out)?;
    Ok(out)
}

/// Decode one row whose delta chain is resolved iteratively: the bases are
/// fetched first, down to a full object, then the deltas are applied back
/// up. The chain is bounded twice over, so a damaged row (a delta whose
/// base is itself, a cycle of two rows, a forged depth) is `Corrupt`
/// instead of a recursion that overflows the stack: each base must have a
/// smaller stored depth than its delta (the writer stores base depth + 1,
/// at most `MAX_DELTA_DEPTH`), and no object may appear twice.
pub(crate) fn decode_row(conn: &Connection, id: &ObjectId, row: Row) -> Result<Vec<u8>> {
    let kind = Kind::from_u8(row.kind).ok_or_else(|| StoreError::Corrupt {
        id: *id,
        reason: format!("unknown kind {}", row.kind),
    })?;
    let mut chain: Vec<(ObjectId, Row)> = Vec::new();
    let (mut cur_id, mut cur) = (*id, row);
    while cur.enc == ENC_DELTA {
        let corrupt = |reason: String| StoreError::Corrupt { id: cur_id, reason };
        if cur.depth < 1 || cur.depth > i64::from(MAX_DELTA_DEPTH) {
            return Err(corrupt(format!(
                "a delta with depth {} (deltas are 1 to {MAX_DELTA_DEPTH} deep)",
                cur.depth
            )));
        }
        let base = cur
            .base
            .as_deref()
            .and_then(ObjectId::from_slice)
            .ok_or_else(|| corrupt("delta without a base".into()))?;
        if base == cur_id {
            return Err(corrupt("a delta whose base is itself".into()));
        }
        if base == *id || chain.iter().any(|(c, _)| *c == base) {
            return Err(corrupt(format!(
                "delta chain from {} loops back to {}",
                id.to_hex(),
                base.to_hex()
            )));
        }
        let base_row = get_row(conn, &base)?.ok_or(StoreError::Missing {
            id: base,
            kind: kind.name(),
        })?;
        if base_row.kind != cur.kind {
            return Err(corrupt(format!(
                "the delta base {} is of kind {}, not {}",
                base.to_hex(),
                base_row.kind,
                kind.name()
            )));
        }
        if base_row.depth >= cur.depth {
            return Err(corrupt(format!(
                "a delta of depth {} against {} of depth {} (a base is shallower)",
                cur.depth,
                base.to_hex(),
                base_row.depth
            )));
        }
        chain.push((cur_id, cur));
        (cur_id, cur) = (base, base_row);
    }
    let mut raw = decode_one(&cur_id, kind, cur, None)?;
    while let Some((delta_id, delta)) = chain.pop() {
        raw = decode_one(&delta_id, kind, delta, Some(&raw))?;
    }
    Ok(raw)
}

/// Decode one full row (`dict` is `None`) or one delta against its base's
/// decoded bytes, refusing a declared length beyond `max_raw_len`.
fn decode_one(id: &ObjectId, kind: Kind, row: Row, dict: Option<&[u8]>) -> Result<Vec<u8>> {
    let corrupt = |reason: String| StoreError::Corrupt { id: *id, reason };
    let max = max_raw_len(kind);
    if row.raw_len > max {
        return Err(corrupt(format!(
            "the row declares {} bytes, more than a {} can hold ({max})",
            row.raw_len,
            kind.name()
        )));
    }
    let raw = match (row.enc, dict) {
        (ENC_RAW, None) => row.data,
        (ENC_ZSTD, None) => {
            zstd_decode(&row.data, row.raw_len, None).map_err(|e| corrupt(format!("zstd: {e}")))?
        }
        (ENC_DELTA, Some(base)) => zstd_decode(&row.data, row.raw_len, Some(base))
            .map_err(|e| corrupt(format!("zstd delta: {e}")))?,
        (other, _) => return Err(corrupt(format!("unknown encoding {other}"))),
    };
    if raw.len() as u64 != row.raw_len {
        return Err(corrupt(format!(
            "decoded {} bytes, expected {}",
            raw.len(),
            row.raw_len
        )));
    }
    Ok(raw)
}

impl Store {
    /// Read an object's raw (decoded) bytes.
    pub fn get_raw(&self, id: &ObjectId, kind: Kind) -> Result<Vec<u8>> {
        let conn = self.reader();
        get_raw_in(&conn, id, kind)
    }

    /// Whether an object is present.
    pub fn has_object(&self, id: &ObjectId) -> Result<bool> {
        exists(&self.reader(), id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_chunks_are_stored_raw_without_trying_zstd_and_others_compress() {
        let mut x = 88172645463325252u64;
        let random: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert!(looks_random(&random));
        let p = prepare(Kind::Chunk, &random);
        assert_eq!((p.enc, &*p.data), (ENC_RAW, random.as_slice()));
        let text = b"the quick brown fox jumps over the lazy dog. ".repeat(100);
        assert!(!looks_random(&text));
        assert_eq!(prepare(Kind::Chunk, &text).enc, ENC_ZSTD);
    }

    /// The sampled test's decisions on what chunks are made of: random
    /// bytes at every length from 1 KiB to `Cdc::MAX` are random; text, and
    /// random bytes with a run of zeros or a run of text in any quarter,
    /// are not (so they get their zstd pass).
    #[test]
    fn the_sampled_test_sees_random_chunks_and_compressible_runs_anywhere() {
        let mut x = 99u64;
        let mut random = |n: usize| -> Vec<u8> {
            (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect()
        };
        let text = b"the quick brown fox jumps over the lazy dog. ".repeat(6000);
        // Small chunks, and large ones (sampled once every SAMPLE_SPAN).
        for len in [
            1024, 1100, 2047, 4096, 5000, 9999, 16384, 65536, 100_001, 262_144,
        ] {
            let r = random(len);
            assert!(looks_random(&r), "random bytes, {len}");
            assert!(!looks_random(&text[..len]), "text, {len}");
            for quarter in 0..4 {
                let at = quarter * len / 4;
                let run = (len / 4).min(len - at);
                let mut zeros = r.clone();
                zeros[at..at + run].fill(0);
                assert!(!looks_random(&zeros), "zeros in quarter {quarter}, {len}");
                let mut words = r.clone();
                words[at..at + run].copy_from_slice(&text[..run]);
                assert!(!looks_random(&words), "text in quarter {quarter}, {len}");
            }
        }
    }

    /// The entropy as the test computed it before the table: the sum of
    /// `-p log2 p` over one histogram.
    fn entropy_reference(raw: &[u8]) -> f64 {
        let mut hist = [0u32; 256];
        for &b in raw {
            hist[b as usize] += 1;
        }
        let n = raw.len() as f64;
        hist.iter()
            .filter(|&&c| c > 0)
            .map(|&c| -(c as f64 / n) * (c as f64 / n).log2())
            .sum()
    }

    #[test]
    fn the_table_gives_the_decisions_of_the_plain_entropy() {
        let mut x = 7u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        // Random bytes, random bytes of a narrower alphabet (fewer bits a
        // byte), long runs: near and far from the threshold, at lengths
        // from 1 KiB to `Cdc::SMALL.max`, with counts above 256 too.
        for len in [1024, 1025, 3000, 4096, 9999, 16384] {
            for mask in [0xffu64, 0x7f, 0xfe, 0x0f] {
                let raw: Vec<u8> = (0..len).map(|_| (next() & mask) as u8).collect();
                let threshold = 8.0 - 255.0 / (len as f64 * std::f64::consts::LN_2);
                let want = entropy_reference(&raw) > threshold;
                assert_eq!(
                    flat_histogram(std::iter::once(&raw[..])),
                    want,
                    "len {len} mask {mask:#x}"
                );
            }
        }
    }
}
