//! File contents: cutting bytes into chunks, building the manifest tree of
//! pages over them (boundaries chosen by content, so an insertion rewrites
//! one leaf and the path to the root), deltas against the previous version,
//! and reading any byte range back.

pub(crate) use crate::batch::Batch;
use crate::chunker::{self, split_runs, Cdc, PAGE_MAX, PAGE_MIN};
use crate::error::{Result, StoreError};
use crate::hash_many;
use crate::id::{Kind, ObjectId};
use crate::object::{decode, encode, ContentRef, FileContent, Page, PageEntry};
use crate::objects::{self, Prepared};
use crate::parallel;
use crate::store::Store;
use rayon::prelude::*;
use std::collections::HashSet;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

/// Bytes of chunks hashed together (hash_many.rs): 64 small chunks, so
/// each 1 KiB position fills the 16 lanes of AVX-512 several times over;
/// 4 large ones (each fills the lanes by itself: hash_many.rs `ALONE`).
/// Few enough that a stream's block still makes a task for every core.
const HASH_GROUP_BYTES: usize = 64 * 4096;
/// Where prepared objects go: straight into a `Batch`, or over a channel to
/// a writer thread (parallel snapshots).
pub(crate) trait Sink {
    fn push(&mut self, p: Prepared) -> Result<()>;
}

impl Sink for Batch<'_> {
    fn push(&mut self, p: Prepared) -> Result<()> {
        Batch::push(self, p)
    }
}

impl Sink for Vec<Prepared> {
    fn push(&mut self, p: Prepared) -> Result<()> {
        Vec::push(self, p);
        Ok(())
    }
}

/// The bytes chunks are cut from: borrowed, so a chunk stored raw copies
/// its range, or a stream's block, whose ranges it shares (objects.rs
/// `Data`).
#[derive(Clone, Copy)]
pub(crate) enum Src<'a> {
    Bytes(&'a [u8]),
    Block(&'a objects::SharedBuf),
}

impl<'a> Src<'a> {
    fn bytes(self) -> &'a [u8] {
        match self {
            Src::Bytes(b) => b,
            Src::Block(b) => (**b).as_ref(),
        }
    }

    fn shared(self) -> Option<&'a objects::SharedBuf> {
        match self {
            Src::Bytes(_) => None,
            Src::Block(b) => Some(b),
        }
    }
}

/// What the previous version of a file looked like, for choosing delta bases.
pub(crate) struct PrevVersion {
    /// (start offset, id, size) of every chunk, in order.
    chunks: Vec<(u64, ObjectId, u64)>,
    chunk_set: HashSet<ObjectId>,
    /// Page ids per level, in order.
    pages: Vec<Vec<ObjectId>>,
}

impl Store {
    /// Store `bytes` as a file's content. `prev`, the content this file had
    /// before, lets changed chunks and pages be stored as deltas.
    pub fn write_file_bytes(
        &self,
        bytes: &[u8],
        prev: Option<&FileContent>,
    ) -> Result<FileContent> {
        let _session = self.write_session()?;
        let mut batch = Batch::new(self);
        let c = self.put_file_bytes(bytes, prev, &mut batch)?;
        batch.flush()?;
        Ok(c)
    }

    /// `bytes` stored as format 3 stored every file: cut with `cdc`
    /// whatever their size (rechunk.rs tests a file of `LARGE_FILE` or
    /// more cut small).
    #[cfg(test)]
    pub(crate) fn write_file_bytes_cut(&self, bytes: &[u8], cdc: Cdc) -> Result<FileContent> {
        let _session = self.write_session()?;
        let mut batch = Batch::new(self);
        let c = self.put_file_bytes_with(bytes, None, cdc, &mut batch)?;
        batch.flush()?;
        Ok(c)
    }

    /// Store the content of the file at `src` (read once, chunked as a stream
    /// when large). See `write_file_bytes` for `prev`.
    pub fn write_file_from_path(
        &self,
        src: &Path,
        prev: Option<&FileContent>,
    ) -> Result<FileContent> {
        let _session = self.write_session()?;
        // Nothing else is written until the flush: the batch may stream.
        let mut batch = Batch::streaming(self);
        let c = self.put_file_path(src, prev, &mut batch)?;
        batch.flush()?;
        Ok(c)
    }

    pub(crate) fn put_file_path(
        &self,
        src: &Path,
        prev: Option<&FileContent>,
        batch: &mut dyn Sink,
    ) -> Result<FileContent> {
        let mut f = std::fs::File::open(src).map_err(|e| StoreError::io("open", src, e))?;
        let len = f
            .metadata()
            .map_err(|e| StoreError::io("stat", src, e))?
            .len();
        self.count_source_read(len);
        if len <= crate::stream::STREAM_THRESHOLD {
            let mut buf = Vec::with_capacity(len as usize);
            f.read_to_end(&mut buf)
                .map_err(|e| StoreError::io("read", src, e))?;
            return self.put_file_bytes(&buf, prev, batch);
        }
        // A stream is cut with the parameters of the size the file had
        // when it was opened. A writer still at work may take it across
        // `LARGE_FILE` meanwhile: the bytes read are then stored again
        // with the parameters of their size, so equal bytes keep equal
        // ids (chunker.rs); what the first pass stored is unreferenced
        // and gc removes it.
        let mut cdc = self.cdc_for(len);
        for _ in 0..3 {
            let c = self.put_file_stream(&mut f, src, prev, cdc, batch)?;
            if self.cdc_for(c.size) == cdc {
                return Ok(c);
            }
            cdc = self.cdc_for(c.size);
            f.seek(SeekFrom::Start(0))
                .map_err(|e| StoreError::io("seek", src, e))?;
        }
        Err(StoreError::Invalid(format!(
            "{}: its size kept crossing {} MiB while it was stored (a writer still at work); store it again once it is done",
            src.display(),
            chunker::LARGE_FILE >> 20
        )))
    }

    pub(crate) fn put_file_bytes(
        &self,
        bytes: &[u8],
        prev: Option<&FileContent>,
        batch: &mut dyn Sink,
    ) -> Result<FileContent> {
        self.put_file_bytes_with(bytes, prev, self.cdc_for(bytes.len() as u64), batch)
    }

    /// [`Self::put_file_bytes`], cut with `cdc`.
    fn put_file_bytes_with(
        &self,
        bytes: &[u8],
        prev: Option<&FileContent>,
        cdc: Cdc,
        batch: &mut dyn Sink,
    ) -> Result<FileContent> {
        if bytes.is_empty() {
            return Ok(FileContent::EMPTY);
        }
        let prev = self.prev_version(prev)?;
        let cuts = parallel::cut_points(bytes, cdc);
        let mut seen = HashSet::new();
        let entries =
            self.put_cut_chunks(Src::Bytes(bytes), &cuts, 0, prev.as_ref(), &mut seen, batch)?;
        self.finish_manifest(entries, bytes.len() as u64, prev.as_ref(), batch)
    }

    /// Store the chunks `cuts` of `bytes` (which starts at file offset
    /// `base`): hashed and compressed on every core (parallel.rs); deltas
    /// against the previous version and the pushes stay in order on this
    /// thread. `seen`: chunks already stored for this file.
    pub(crate) fn put_cut_chunks(
        &self,
        src: Src<'_>,
        cuts: &[(usize, usize)],
        base: u64,
        prev: Option<&PrevVersion>,
        seen: &mut HashSet<ObjectId>,
        batch: &mut dyn Sink,
    ) -> Result<Vec<PageEntry>> {
        let bytes = src.bytes();
        // In groups, each hashed across SIMD lanes (hash_many.rs).
        let total: usize = cuts.iter().map(|c| c.1).sum();
        let group = (HASH_GROUP_BYTES * cuts.len() / total.max(1)).clamp(1, 64);
        let entries: Vec<PageEntry> = cuts
            .par_chunks(group)
            .flat_map_iter(|group| {
                let data: Vec<&[u8]> = group
                    .iter()
                    .map(|&(off, len)| &bytes[off..off + len])
                    .collect();
                hash_many::hash_each(Kind::Chunk, &data)
                    .into_iter()
                    .zip(group)
                    .map(|(id, &(_, len))| PageEntry {
                        id,
                        size: len as u64,
                    })
            })
            .collect();
        let mut fresh = Vec::new();
        for (&(off, len), e) in cuts.iter().zip(&entries) {
            let data = &bytes[off..off + len];
            if let Some(prev) = prev {
                if prev.chunk_set.contains(&e.id) {
                    continue; // unchanged chunk, already stored
                }
                if let Some(b) = chunk_at(&prev.chunks, base + off as u64) {
                    batch.push(self.delta_against(Kind::Chunk, e.id, data, b)?)?;
                    continue;
                }
            }
            // A chunk repeated in the file (a run of zeros) is stored once.
            if seen.insert(e.id) {
                fresh.push((e.id, off, len));
            }
        }
        let prepared: Vec<Prepared> = fresh
            .par_iter()
            .map(|&(id, off, len)| {
                let raw = &bytes[off..off + len];
                let shared = src.shared().map(|b| (b, off..off + len));
                objects::prepare_in(Kind::Chunk, id, raw, shared)
            })
            .collect();
        for p in prepared {
            batch.push(p)?;
        }
        Ok(entries)
    }

    pub(crate) fn delta_against(
        &self,
        kind: Kind,
        id: ObjectId,
        raw: &[u8],
        base: ObjectId,
    ) -> Result<Prepared> {
        let conn = self.reader();
        if objects::exists(&conn, &id)? {
            // Already stored (deduplicated): any encoding will be ignored.
            return Ok(objects::prepare_with_id(kind, id, raw));
        }
        match objects::depth(&conn, &base)? {
            Some(depth) => {
                let base_raw = objects::get_raw_in(&conn, &base, kind)?;
                Ok(objects::prepare_delta(
                    kind, id, raw, base, &base_raw, depth,
                ))
            }
            None => Ok(objects::prepare_with_id(kind, id, raw)),
        }
    }

    /// Build the page tree over `entries` and return the file's content.
    pub(crate) fn finish_manifest(
        &self,
        entries: Vec<PageEntry>,
        size: u64,
        prev: Option<&PrevVersion>,
        batch: &mut dyn Sink,
    ) -> Result<FileContent> {
        self.pages_from_level(entries, 0, size, prev, batch)
    }

    /// Build the page tree from level `level` up over `entries` (the
    /// chunks when `level` is 0, else the pages of level `level - 1`).
    pub(crate) fn pages_from_level(
        &self,
        mut entries: Vec<PageEntry>,
        mut level: u8,
        size: u64,
        prev: Option<&PrevVersion>,
        batch: &mut dyn Sink,
    ) -> Result<FileContent> {
        if entries.is_empty() {
            return Ok(FileContent::EMPTY);
        }
        if entries.len() == 1 {
            return Ok(FileContent {
                size,
                data: match level {
                    0 => ContentRef::Chunk(entries[0].id),
                    l => ContentRef::Pages {
                        root: entries[0].id,
                        height: l - 1,
                    },
                },
            });
        }
        loop {
            let runs = split_runs(entries, PAGE_MIN, PAGE_MAX, |e| {
                chunker::page_boundary(&e.id)
            });
            let mut next = Vec::with_capacity(runs.len());
            for (i, run) in runs.into_iter().enumerate() {
                let sum = run.iter().map(|e| e.size).sum();
                let raw = encode(&Page {
                    level,
                    entries: run,
                });
                let id = ObjectId::hash(Kind::Page, &raw);
                let base = prev
                    .and_then(|p| p.pages.get(level as usize))
                    .and_then(|l| l.get(i).or(l.last()))
                    .copied();
                let p = match base {
                    Some(b) if self.deltas() && b != id => {
                        self.delta_against(Kind::Page, id, &raw, b)?
                    }
                    _ => objects::prepare_with_id(Kind::Page, id, &raw),
                };
                batch.push(p)?;
                next.push(PageEntry { id, size: sum });
            }
            if next.len() == 1 {
                return Ok(FileContent {
                    size,
                    data: ContentRef::Pages {
                        root: next[0].id,
                        height: level,
                    },
                });
            }
            entries = next;
            level = level
                .checked_add(1)
                .ok_or_else(|| StoreError::Invalid("file manifest too deep".into()))?;
        }
    }

    pub(crate) fn prev_version(&self, prev: Option<&FileContent>) -> Result<Option<PrevVersion>> {
        let Some(prev) = prev else { return Ok(None) };
        if !self.deltas() || prev.key().is_none() {
            return Ok(None);
        }
        let mut pages: Vec<Vec<ObjectId>> = Vec::new();
        let chunks = self.chunk_list_with_pages(prev, Some(&mut pages))?;
        let chunk_set = chunks.iter().map(|c| c.1).collect();
        Ok(Some(PrevVersion {
            chunks,
            chunk_set,
            pages,
        }))
    }

    /// Every chunk of a file: (start offset, id, size), in order.
    pub fn chunk_list(&self, c: &FileContent) -> Result<Vec<(u64, ObjectId, u64)>> {
        self.chunk_list_with_pages(c, None)
    }

    fn chunk_list_with_pages(
        &self,
        c: &FileContent,
        mut pages: Option<&mut Vec<Vec<ObjectId>>>,
    ) -> Result<Vec<(u64, ObjectId, u64)>> {
        let mut out = Vec::new();
        if let (ContentRef::Pages { height, .. }, Some(p)) = (&c.data, pages.as_deref_mut()) {
            p.resize(*height as usize + 1, Vec::new());
        }
        let conn = self.reader();
        visit_chunks(&conn, c, 0..c.size, pages, &mut |start, id, size| {
            out.push((start, id, size));
            Ok(())
        })?;
        Ok(out)
    }

    /// Read `len` bytes at `offset` of a file (short at end of file). Only
    /// the manifest pages over the range are read.
    pub fn read_file_range(&self, c: &FileContent, offset: u64, len: usize) -> Result<Vec<u8>> {
        let end = c.size.min(offset.saturating_add(len as u64));
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        if offset >= end {
            return Ok(out);
        }
        let conn = self.reader();
        visit_chunks(&conn, c, offset..end, None, &mut |start, id, size| {
            let raw = read_chunk(&conn, &id, size)?;
            let a = offset.max(start) - start;
            let b = end.min(start + size) - start;
            out.extend_from_slice(&raw[a as usize..b as usize]);
            Ok(())
        })?;
        Ok(out)
    }

    /// Stream a file's whole content into `out`, one chunk at a time:
    /// memory stays at one chunk and one path of manifest pages whatever
    /// the file's size.
    pub fn read_to(&self, c: &FileContent, out: &mut dyn Write) -> Result<()> {
        let conn = self.reader();
        visit_chunks(&conn, c, 0..c.size, None, &mut |_, id, size| {
            let raw = read_chunk(&conn, &id, size)?;
            out.write_all(&raw)
                .map_err(|e| StoreError::io("write", "the output stream", e))
        })
    }

    /// Write a file's whole content to `dest` (created or truncated). Runs of
    /// zero chunks are left as holes, so sparse files stay sparse.
    pub fn materialize(&self, c: &FileContent, dest: &Path) -> Result<()> {
        let mut f = std::fs::File::create(dest).map_err(|e| StoreError::io("create", dest, e))?;
        self.write_content_to(c, &mut f, dest)?;
        f.set_len(c.size)
            .map_err(|e| StoreError::io("set the length of", dest, e))?;
        Ok(())
    }

    pub(crate) fn write_content_to(
        &self,
        c: &FileContent,
        f: &mut std::fs::File,
        dest: &Path,
    ) -> Result<()> {
        let conn = self.reader();
        let mut zero_id: Option<ObjectId> = None;
        let mut buf = std::io::BufWriter::with_capacity(1 << 20, f);
        // Where the next byte written lands. A seek flushes the BufWriter,
        // so it is made only after a hole: a copy-up of 32 MiB of chunks
        // made 8,192 lseek and 8,192 4 KiB write calls, now 32 writes.
        let mut pos = 0u64;
        visit_chunks(&conn, c, 0..c.size, None, &mut |start, id, size| {
            if zero_id == Some(id) {
                return Ok(());
            }
            let raw = read_chunk(&conn, &id, size)?;
            if raw.iter().all(|&b| b == 0) {
                zero_id = Some(id);
                return Ok(());
            }
            if start != pos {
                buf.seek(SeekFrom::Start(start))
                    .map_err(|e| StoreError::io("seek in", dest, e))?;
            }
            pos = start + size;
            buf.write_all(&raw)
                .map_err(|e| StoreError::io("write", dest, e))
        })?;
        buf.flush().map_err(|e| StoreError::io("write", dest, e))?;
        if c.size >= crate::batch::SHRINK_AFTER as u64 {
            crate::batch::shrink_cache(&conn);
        }
        Ok(())
    }
}

/// A chunk's bytes, which must be as long as the manifest says.
fn read_chunk(conn: &rusqlite::Connection, id: &ObjectId, size: u64) -> Result<Vec<u8>> {
    let raw = objects::get_raw_in(conn, id, Kind::Chunk)?;
    if raw.len() as u64 != size {
        return Err(StoreError::Corrupt {
            id: *id,
            reason: format!(
                "the chunk holds {} bytes where its file's manifest says {size}",
                raw.len()
            ),
        });
    }
    Ok(raw)
}

/// A manifest page still to be read: its level and the byte count and
/// file offset its parent's entry gives it.
struct PendingPage {
    id: ObjectId,
    level: u8,
    size: u64,
    start: u64,
}

/// Call `f(start, id, size)` for every chunk of `c` that overlaps `range`,
/// in file order, with no recursion (an explicit stack of pages).
///
/// Readers do not re-hash, so the pages may be forged: a small DAG whose
/// pages each list the next one twice would describe 2^levels chunks.
/// The walk is bounded by the size the file declares: every page's
/// entries must add up to exactly the size its parent's entry gives it
/// (the root: `c.size`), every entry covers at least one byte and a chunk
/// at most the largest of the file's size class (chunker.rs), so the
/// chunks visited are at most `c.size` and
/// a lie is `Corrupt`, naming the page, at the first page that tells it.
/// Pages wholly outside `range` are skipped by their declared size, so a
/// short read of a large file reads one path of pages. `pages`, if given
/// (sized to the height + 1), receives the page ids of each level in order.
fn visit_chunks(
    conn: &rusqlite::Connection,
    c: &FileContent,
    range: std::ops::Range<u64>,
    mut pages: Option<&mut Vec<Vec<ObjectId>>>,
    f: &mut dyn FnMut(u64, ObjectId, u64) -> Result<()>,
) -> Result<()> {
    let chunk_max = Cdc::for_size(c.size).max as u64;
    let (root, height) = match &c.data {
        ContentRef::Empty => return Ok(()),
        ContentRef::Chunk(id) => {
            if c.size == 0 || c.size > chunk_max {
                return Err(StoreError::Corrupt {
                    id: *id,
                    reason: format!(
                        "a one-chunk file of {} bytes (a chunk of a file this size holds 1 to {chunk_max})",
                        c.size
                    ),
                });
            }
            return if range.start < c.size && range.end > 0 {
                f(0, *id, c.size)
            } else {
                Ok(())
            };
        }
        ContentRef::Pages { root, height } => (*root, *height),
    };
    let mut stack = vec![PendingPage {
        id: root,
        level: height,
        size: c.size,
        start: 0,
    }];
    let mut children = Vec::new();
    while let Some(p) = stack.pop() {
        let corrupt = |reason: String| StoreError::Corrupt { id: p.id, reason };
        let raw = objects::get_raw_in(conn, &p.id, Kind::Page)?;
        let page: Page = decode(&raw).map_err(|e| corrupt(format!("bad page: {e}")))?;
        if page.level != p.level {
            return Err(corrupt(format!(
                "page level {} where {} was expected",
                page.level, p.level
            )));
        }
        let mut sum = 0u64;
        for e in &page.entries {
            let max = if p.level == 0 { chunk_max } else { u64::MAX };
            if e.size == 0 || e.size > max {
                return Err(corrupt(format!(
                    "an entry of {} bytes (level {})",
                    e.size, p.level
                )));
            }
            sum = sum
                .checked_add(e.size)
                .ok_or_else(|| corrupt("entry sizes overflow".into()))?;
        }
        if sum != p.size {
            return Err(corrupt(format!(
                "its entries cover {sum} bytes where its parent says {}",
                p.size
            )));
        }
        if let Some(v) = pages
            .as_deref_mut()
            .and_then(|v| v.get_mut(p.level as usize))
        {
            v.push(p.id);
        }
        let mut start = p.start;
        for e in page.entries {
            let (s, end) = (start, start + e.size);
            start = end;
            if end <= range.start || s >= range.end {
                continue;
            }
            if p.level == 0 {
                f(s, e.id, e.size)?;
            } else {
                children.push(PendingPage {
                    id: e.id,
                    level: p.level - 1,
                    size: e.size,
                    start: s,
                });
            }
        }
        stack.extend(children.drain(..).rev());
    }
    Ok(())
}

/// The previous chunk whose range contains `offset`.
fn chunk_at(chunks: &[(u64, ObjectId, u64)], offset: u64) -> Option<ObjectId> {
    let i = chunks.partition_point(|c| c.0 <= offset);
    if i == 0 {
        return None;
    }
    let (start, id, size) = chunks[i - 1];
    (offset < start + size)
        .then_some(id)
        .or(chunks.last().map(|c| c.1))
}
