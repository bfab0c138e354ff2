//! File contents: cutting bytes into chunks, building the manifest tree of
//! pages over them (boundaries chosen by content, so an insertion rewrites
//! one leaf and the path to the root), deltas against the previous version,
//! and reading any byte range back.

pub(crate) use crate::batch::Batch;
use crate::chunker::{self, split_runs, PAGE_MAX, PAGE_MIN};
use crate::error::{Result, StoreError};
use crate::id::{Kind, ObjectId};
use crate::object::{decode, encode, ContentRef, FileContent, Page, PageEntry};
use crate::objects::{self, Prepared};
use crate::store::Store;
use std::collections::HashSet;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

/// Files larger than this are chunked from a stream instead of read whole.
const STREAM_THRESHOLD: u64 = 64 << 20;
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

/// What the previous version of a file looked like, for choosing delta bases.
struct PrevVersion {
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

    /// Store the content of the file at `src` (read once, chunked as a stream
    /// when large). See `write_file_bytes` for `prev`.
    pub fn write_file_from_path(
        &self,
        src: &Path,
        prev: Option<&FileContent>,
    ) -> Result<FileContent> {
        let _session = self.write_session()?;
        let mut batch = Batch::new(self);
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
        if len <= STREAM_THRESHOLD {
            let mut buf = Vec::with_capacity(len as usize);
            f.read_to_end(&mut buf)
                .map_err(|e| StoreError::io("read", src, e))?;
            return self.put_file_bytes(&buf, prev, batch);
        }
        let prev = self.prev_version(prev)?;
        let mut entries = Vec::new();
        let mut offset = 0u64;
        let stream = fastcdc::v2020::StreamCDC::new(
            std::io::BufReader::with_capacity(1 << 20, f),
            chunker::CHUNK_MIN,
            chunker::CHUNK_AVG,
            chunker::CHUNK_MAX,
        );
        for chunk in stream {
            let chunk = chunk
                .map_err(|e| StoreError::io("read", src, std::io::Error::other(e.to_string())))?;
            let e = self.put_chunk(&chunk.data, offset, prev.as_ref(), batch)?;
            offset += chunk.length as u64;
            entries.push(e);
        }
        self.finish_manifest(entries, offset, prev.as_ref(), batch)
    }

    pub(crate) fn put_file_bytes(
        &self,
        bytes: &[u8],
        prev: Option<&FileContent>,
        batch: &mut dyn Sink,
    ) -> Result<FileContent> {
        if bytes.is_empty() {
            return Ok(FileContent::EMPTY);
        }
        let prev = self.prev_version(prev)?;
        let mut entries = Vec::new();
        for (off, len) in chunker::cut_points(bytes) {
            entries.push(self.put_chunk(
                &bytes[off..off + len],
                off as u64,
                prev.as_ref(),
                batch,
            )?);
        }
        self.finish_manifest(entries, bytes.len() as u64, prev.as_ref(), batch)
    }

    /// Prepare one chunk, as a delta against the previous version's chunk at
    /// the same offset when that is smaller.
    fn put_chunk(
        &self,
        data: &[u8],
        offset: u64,
        prev: Option<&PrevVersion>,
        batch: &mut dyn Sink,
    ) -> Result<PageEntry> {
        let id = ObjectId::hash(Kind::Chunk, data);
        let entry = PageEntry {
            id,
            size: data.len() as u64,
        };
        if let Some(prev) = prev {
            if prev.chunk_set.contains(&id) {
                return Ok(entry); // unchanged chunk, already stored
            }
            if let Some(base) = chunk_at(&prev.chunks, offset) {
                let p = self.delta_against(Kind::Chunk, id, data, base)?;
                batch.push(p)?;
                return Ok(entry);
            }
        }
        batch.push(objects::prepare_with_id(Kind::Chunk, id, data))?;
        Ok(entry)
    }

    fn delta_against(
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
    fn finish_manifest(
        &self,
        mut entries: Vec<PageEntry>,
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
                data: ContentRef::Chunk(entries[0].id),
            });
        }
        let mut level = 0u8;
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

    fn prev_version(&self, prev: Option<&FileContent>) -> Result<Option<PrevVersion>> {
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
        match &c.data {
            ContentRef::Empty => {}
            ContentRef::Chunk(id) => out.push((0, *id, c.size)),
            ContentRef::Pages { root, height } => {
                if let Some(p) = pages.as_deref_mut() {
                    p.resize(*height as usize + 1, Vec::new());
                }
                let conn = self.reader();
                let mut offset = 0;
                walk_pages(&conn, *root, *height, &mut offset, &mut out, &mut pages)?;
            }
        }
        Ok(out)
    }

    /// Read `len` bytes at `offset` of a file (short at end of file).
    pub fn read_file_range(&self, c: &FileContent, offset: u64, len: usize) -> Result<Vec<u8>> {
        let end = c.size.min(offset.saturating_add(len as u64));
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        if offset >= end {
            return Ok(out);
        }
        let chunks = self.chunk_list(c)?;
        let conn = self.reader();
        for (start, id, size) in chunks {
            if start + size <= offset || start >= end {
                continue;
            }
            let raw = objects::get_raw_in(&conn, &id, Kind::Chunk)?;
            let a = offset.max(start) - start;
            let b = end.min(start + size) - start;
            out.extend_from_slice(&raw[a as usize..b as usize]);
        }
        Ok(out)
    }

    /// Stream a file's whole content into `out`, one chunk at a time.
    pub fn read_to(&self, c: &FileContent, out: &mut dyn Write) -> Result<()> {
        let chunks = self.chunk_list(c)?;
        let conn = self.reader();
        for (_, id, _) in chunks {
            let raw = objects::get_raw_in(&conn, &id, Kind::Chunk)?;
            out.write_all(&raw)
                .map_err(|e| StoreError::io("write", "the output stream", e))?;
        }
        Ok(())
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
        let chunks = self.chunk_list(c)?;
        let conn = self.reader();
        let mut zero_id: Option<ObjectId> = None;
        let mut buf = std::io::BufWriter::with_capacity(1 << 20, f);
        for (start, id, _) in chunks {
            if zero_id == Some(id) {
                continue;
            }
            let raw = objects::get_raw_in(&conn, &id, Kind::Chunk)?;
            if raw.iter().all(|&b| b == 0) {
                zero_id = Some(id);
                continue;
            }
            buf.seek(SeekFrom::Start(start))
                .map_err(|e| StoreError::io("seek in", dest, e))?;
            buf.write_all(&raw)
                .map_err(|e| StoreError::io("write", dest, e))?;
        }
        buf.flush().map_err(|e| StoreError::io("write", dest, e))?;
        Ok(())
    }
}

fn walk_pages(
    conn: &rusqlite::Connection,
    id: ObjectId,
    level: u8,
    offset: &mut u64,
    out: &mut Vec<(u64, ObjectId, u64)>,
    pages: &mut Option<&mut Vec<Vec<ObjectId>>>,
) -> Result<()> {
    let raw = objects::get_raw_in(conn, &id, Kind::Page)?;
    let page: Page = decode(&raw).map_err(|e| StoreError::Corrupt {
        id,
        reason: format!("bad page: {e}"),
    })?;
    if page.level != level {
        return Err(StoreError::Corrupt {
            id,
            reason: format!("page level {} where {} was expected", page.level, level),
        });
    }
    if let Some(p) = pages.as_deref_mut() {
        p[level as usize].push(id);
    }
    for e in page.entries {
        if level == 0 {
            out.push((*offset, e.id, e.size));
            *offset += e.size;
        } else {
            walk_pages(conn, e.id, level - 1, offset, out, pages)?;
        }
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
