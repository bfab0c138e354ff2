//! Re-chunking only what changed: the commit of an edited file whose
//! previous version is in the Store reads the changed byte ranges and a few
//! chunks around them, reuses every other chunk by id and rewrites only the
//! manifest pages on the path to each change. The result is the same
//! `FileContent` (the same ids) as chunking the whole file again: cut
//! points and page boundaries are part of the format (chunker.rs).
//!
//! Why that holds. FastCDC (v2020, `cut_gear`) decides the chunk that
//! starts at `s` from the bytes `s..=e` (it reads the byte at the cut it
//! returns) and from the bytes left to the end of the file, clamped to
//! the largest chunk of the file's size class (`Cdc::max`). So, with the
//! bytes before an old cut point `s` unchanged, `s` is a cut point of the
//! new file too, and from a new cut `c` that is an old cut point with no
//! changed byte at or after `c` before the next changed range, the new
//! cuts are the old ones again (FastCDC resynchronises). A change of the
//! file's size moves the end of file that the last `Cdc::max` bytes' cuts
//! depend on: the tail is re-chunked from `Cdc::max` before the shorter
//! end. A change of the size class changes every cut, and so does a file
//! of `LARGE_FILE` or more stored by format 3 or before (cut small): both
//! are chunked again whole. Pages split the same way one level
//! up (`split_runs` keeps no state across a page boundary), so a run of
//! entries is rebuilt from the old page that holds the first changed entry
//! until a new page ends where an old page ended, after the change.

use crate::chunker::{page_boundary, Cdc, PAGE_MAX, PAGE_MIN};
use crate::error::{Result, StoreError};
use crate::files::{Batch, Sink};
use crate::id::{Kind, ObjectId};
use crate::object::{decode, encode, ContentRef, FileContent, Page, PageEntry};
use crate::objects;
use crate::store::Store;
use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::rc::Rc;

/// How a file was written: what the commit of one file cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Bytes of the source file read.
    pub bytes_read: u64,
    /// Only the changed ranges were chunked again (false: the whole file).
    pub incremental: bool,
}

/// A run of entries of one level replaced by new entries: the old entries
/// covering bytes `start..old_end` give way to `new`, which cover
/// `start..start + sum(new)` of the new file. Bytes before `start` are at
/// the same offsets in both versions; so are bytes after `old_end`, except
/// after the last replacement when the size changed (it then runs to the
/// end of file).
struct Splice {
    start: u64,
    old_end: u64,
    new: Vec<PageEntry>,
}

/// A page of the previous version's manifest, with the file offset of
/// each entry.
struct Loaded {
    id: ObjectId,
    start: u64,
    level: u8,
    entries: Vec<PageEntry>,
    starts: Vec<u64>,
}

impl Loaded {
    /// Index of the entry that holds byte `pos` (within the page).
    fn index_of(&self, pos: u64) -> usize {
        self.starts.partition_point(|s| *s <= pos).saturating_sub(1)
    }
}

/// The previous version's manifest, read one path of pages at a time and
/// checked as `files::visit_chunks` checks it (a forged page is `Corrupt`).
struct OldTree<'c> {
    store: &'c Store,
    root: ObjectId,
    height: u8,
    size: u64,
    cache: HashMap<(u8, u64), Rc<Loaded>>,
    pages_read: u64,
}

impl OldTree<'_> {
    fn load(&mut self, id: ObjectId, level: u8, start: u64, size: u64) -> Result<Rc<Loaded>> {
        if let Some(p) = self.cache.get(&(level, start)) {
            return Ok(p.clone());
        }
        let corrupt = |reason: String| StoreError::Corrupt { id, reason };
        // The reader connection is locked per page: storing a delta locks it
        // too (`delta_against`).
        let raw = objects::get_raw_in(&self.store.reader(), &id, Kind::Page)?;
        self.pages_read += 1;
        let page: Page = decode(&raw).map_err(|e| corrupt(format!("bad page: {e}")))?;
        if page.level != level {
            return Err(corrupt(format!(
                "page level {} where {level} was expected",
                page.level
            )));
        }
        let max = if level == 0 {
            Cdc::for_size(self.size).max as u64
        } else {
            u64::MAX
        };
        let mut starts = Vec::with_capacity(page.entries.len());
        let mut at = start;
        for e in &page.entries {
            if e.size == 0 || e.size > max {
                return Err(corrupt(format!(
                    "an entry of {} bytes (level {level})",
                    e.size
                )));
            }
            starts.push(at);
            at = at
                .checked_add(e.size)
                .ok_or_else(|| corrupt("entry sizes overflow".into()))?;
        }
        if page.entries.is_empty() || at - start != size {
            return Err(corrupt(format!(
                "its entries cover {} bytes where its parent says {size}",
                at - start
            )));
        }
        let p = Rc::new(Loaded {
            id,
            start,
            level,
            entries: page.entries,
            starts,
        });
        self.cache.insert((level, start), p.clone());
        Ok(p)
    }

    /// The page of `level` that holds byte `pos` (< the old size).
    fn page_at(&mut self, level: u8, pos: u64) -> Result<Rc<Loaded>> {
        let mut cur = self.load(self.root, self.height, 0, self.size)?;
        while cur.level > level {
            let i = cur.index_of(pos);
            let e = cur.entries[i].clone();
            cur = self.load(e.id, cur.level - 1, cur.starts[i], e.size)?;
        }
        Ok(cur)
    }

    /// Whether the old file was cut with `cdc`: false for a file of
    /// `LARGE_FILE` or more stored before format 4, cut with
    /// `Cdc::SMALL`. Every chunk but a file's last holds at least
    /// `cdc.min` bytes, and `Cdc::LARGE.min` is over `Cdc::SMALL.max`: the
    /// first manifest page of such a file lists at least `PAGE_MIN`
    /// chunks, and if none but the file's last is over `Cdc::SMALL.max` it
    /// was cut small.
    fn cut_with(&mut self, cdc: Cdc) -> Result<bool> {
        // A chunk cut large is never as small as a small chunk can be.
        const { assert!(Cdc::LARGE.min > Cdc::SMALL.max) };
        if cdc == Cdc::SMALL {
            return Ok(true);
        }
        let p = self.page_at(0, 0)?;
        let size = self.size;
        let mut inner = p
            .entries
            .iter()
            .zip(&p.starts)
            .filter(|(e, &s)| s + e.size < size);
        Ok(inner.any(|(e, _)| e.size > Cdc::SMALL.max as u64))
    }

    /// The entry of `level` that holds byte `pos`: (start, entry).
    fn entry_at(&mut self, level: u8, pos: u64) -> Result<(u64, PageEntry)> {
        let p = self.page_at(level, pos)?;
        let i = p.index_of(pos);
        Ok((p.starts[i], p.entries[i].clone()))
    }
}

/// The source file, read on demand into one window; counts what it reads.
struct Source<'f> {
    file: &'f std::fs::File,
    path: &'f Path,
    /// The parameters of the new file's size class.
    cdc: Cdc,
    size: u64,
    start: u64,
    buf: Vec<u8>,
    read: u64,
}

impl Source<'_> {
    /// Make the window hold `pos..pos + want` (short at end of file).
    fn fill(&mut self, pos: u64, want: u64) -> Result<()> {
        let end = self.size.min(pos + want);
        if pos < self.start || pos > self.start + self.buf.len() as u64 {
            self.start = pos;
            self.buf.clear();
        } else if pos - self.start > (1 << 20) {
            // Drop what is behind us so the window stays small.
            self.buf.drain(..(pos - self.start) as usize);
            self.start = pos;
        }
        let have = self.start + self.buf.len() as u64;
        if end <= have {
            return Ok(());
        }
        let old = self.buf.len();
        self.buf.resize(old + (end - have) as usize, 0);
        self.file
            .read_exact_at(&mut self.buf[old..], have)
            .map_err(|e| StoreError::io("read", self.path, e))?;
        self.read += end - have;
        Ok(())
    }

    fn slice(&self, pos: u64, len: u64) -> &[u8] {
        let a = (pos - self.start) as usize;
        &self.buf[a..a + len as usize]
    }

    /// The length of the chunk FastCDC cuts at `pos` (a cut point), reading
    /// no more than it needs: a cut found before the end of a window of at
    /// least `cdc.avg` bytes is the cut a longer window gives too (the
    /// scan uses the same masks up to it), otherwise the window grows to
    /// `cdc.max` or the end of file, where the answer is exact.
    fn next_cut(&mut self, pos: u64) -> Result<u64> {
        let (avg, max) = (self.cdc.avg as u64, self.cdc.max as u64);
        let mut want = 2 * avg;
        loop {
            self.fill(pos, want)?;
            let avail = (self.start + self.buf.len() as u64 - pos).min(max);
            let data = self.slice(pos, avail);
            let cut = self.cdc.first_cut(data) as u64;
            if avail == max || pos + avail == self.size {
                return Ok(cut);
            }
            if avail >= avg && cut < avail {
                return Ok(cut);
            }
            want += avg;
        }
    }
}

/// Sorted, merged changed ranges, clipped to the new size, with the tail
/// added when the size changed (see the module comment).
fn normalise(changed: &[(u64, u64)], old_size: u64, new_size: u64, cdc: Cdc) -> Vec<(u64, u64)> {
    let mut r: Vec<(u64, u64)> = changed
        .iter()
        .map(|&(a, b)| (a, b.min(new_size)))
        .filter(|(a, b)| a < b)
        .collect();
    if old_size != new_size {
        let from = old_size.min(new_size).saturating_sub(cdc.max as u64);
        r.push((from, new_size.max(from + 1)));
    }
    r.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(r.len());
    for (a, b) in r {
        match out.last_mut() {
            Some(l) if a <= l.1 => l.1 = l.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

impl Store {
    /// Store the content of the file at `src`, an edit of `prev` in which
    /// only the byte ranges `changed` (start, end; in any order, possibly
    /// overlapping or past the end) may differ; a size change needs no
    /// range of its own. Only the chunks around the changes are read and
    /// stored, and only the manifest pages above them; the result is the
    /// content a full `write_file_from_path` would give. Falls back to
    /// chunking the whole file when `prev` is a single chunk or most of
    /// the file changed.
    pub fn write_file_edited(
        &self,
        src: &Path,
        prev: &FileContent,
        changed: &[(u64, u64)],
    ) -> Result<(FileContent, WriteStats)> {
        let file = std::fs::File::open(src).map_err(|e| StoreError::io("open", src, e))?;
        let new_size = file
            .metadata()
            .map_err(|e| StoreError::io("stat", src, e))?
            .len();
        let cdc = self.cdc_for(new_size);
        let dirty = normalise(changed, prev.size, new_size, cdc);
        if dirty.is_empty() {
            return Ok((
                prev.clone(),
                WriteStats {
                    bytes_read: 0,
                    incremental: true,
                },
            ));
        }
        let dirty_bytes: u64 = dirty.iter().map(|r| r.1 - r.0).sum();
        let (root, height) = match prev.data {
            ContentRef::Pages { root, height } => (root, height),
            _ => (ObjectId([0; 32]), 0),
        };
        let small = !matches!(prev.data, ContentRef::Pages { .. });
        let whole = |store: &Store| {
            let c = store.write_file_from_path(src, Some(prev))?;
            Ok((
                c,
                WriteStats {
                    bytes_read: new_size,
                    incremental: false,
                },
            ))
        };
        // Above three quarters of the file changed, the whole file is
        // chunked again (in parallel): reading the old manifest around
        // every range would save little. A new size class changes every
        // cut (chunker.rs).
        if small
            || new_size == 0
            || dirty_bytes.saturating_mul(4) > new_size.saturating_mul(3)
            || self.cdc_for(prev.size) != cdc
        {
            return whole(self);
        }
        let _session = self.write_session()?;
        let mut tree = OldTree {
            store: self,
            root,
            height,
            size: prev.size,
            cache: HashMap::new(),
            pages_read: 0,
        };
        if !tree.cut_with(cdc)? {
            drop(_session);
            return whole(self);
        }
        let mut batch = Batch::new(self);
        let mut source = Source {
            file: &file,
            path: src,
            cdc,
            size: new_size,
            start: 0,
            buf: Vec::new(),
            read: 0,
        };
        let c = {
            let splices = self.rechunk(&mut source, &mut tree, &dirty, &mut batch)?;
            let r = self.rebuild_pages(&mut tree, splices, new_size, &mut batch);
            tracing::debug!(
                "incremental commit of {}: {} bytes read, {} manifest pages read",
                src.display(),
                source.read,
                tree.pages_read
            );
            r?
        };
        batch.flush()?;
        self.count_source_read(source.read);
        Ok((
            c,
            WriteStats {
                bytes_read: source.read,
                incremental: true,
            },
        ))
    }

    /// New chunks for the changed ranges: one splice per run of chunks cut
    /// again, from the old cut before a change to where the cuts meet the
    /// old ones.
    fn rechunk(
        &self,
        src: &mut Source,
        tree: &mut OldTree,
        dirty: &[(u64, u64)],
        batch: &mut dyn Sink,
    ) -> Result<Vec<Splice>> {
        let (old_size, new_size) = (tree.size, src.size);
        let mut out: Vec<Splice> = Vec::new();
        let mut j = 0;
        while j < dirty.len() {
            // The chunk that ends at a changed byte read it too.
            let anchor = dirty[j].0.saturating_sub(1).min(old_size - 1);
            let (start, _) = tree.entry_at(0, anchor)?;
            let mut splice = match out.pop() {
                Some(s) if s.old_end == start => s,
                other => {
                    out.extend(other);
                    Splice {
                        start,
                        old_end: old_size,
                        new: Vec::new(),
                    }
                }
            };
            let mut pos = start;
            // The range that chose `start` is cut again whatever follows.
            let mut cur_end = dirty[j].1;
            j += 1;
            loop {
                while j < dirty.len() && dirty[j].0 <= pos {
                    cur_end = cur_end.max(dirty[j].1);
                    j += 1;
                }
                if pos >= new_size {
                    splice.old_end = old_size;
                    break;
                }
                if pos >= cur_end && pos < old_size && tree.entry_at(0, pos)?.0 == pos {
                    splice.old_end = pos;
                    break;
                }
                let len = src.next_cut(pos)?;
                let data = src.slice(pos, len);
                let id = ObjectId::hash(Kind::Chunk, data);
                let old = if pos < old_size {
                    Some(tree.entry_at(0, pos)?)
                } else {
                    None
                };
                match old {
                    Some((s, e)) if s == pos && e.id == id => {} // unchanged
                    Some((_, e)) if self.deltas() => {
                        batch.push(self.delta_against(Kind::Chunk, id, data, e.id)?)?
                    }
                    _ => batch.push(objects::prepare_with_id(Kind::Chunk, id, data))?,
                }
                splice.new.push(PageEntry { id, size: len });
                pos += len;
            }
            out.push(splice);
        }
        Ok(out)
    }

    /// Rebuild the manifest level by level above the chunk splices, until
    /// one splice covers a whole level (then it is the rest of the tree).
    fn rebuild_pages(
        &self,
        tree: &mut OldTree,
        mut splices: Vec<Splice>,
        new_size: u64,
        batch: &mut dyn Sink,
    ) -> Result<FileContent> {
        let mut level = 0u8;
        loop {
            if let [s] = splices.as_slice() {
                if s.start == 0 && s.old_end == tree.size {
                    let all = splices.pop().expect("one").new;
                    return self.pages_from_level(all, level, new_size, None, batch);
                }
            }
            if level > tree.height {
                return Err(StoreError::Invalid(
                    "incremental manifest rebuild went above the old root (an internal error)"
                        .into(),
                ));
            }
            splices = self.rebuild_level(tree, level, splices, batch)?;
            level += 1;
        }
    }

    /// Splices of the entries of `level` to splices of its pages (the
    /// entries of `level + 1`).
    fn rebuild_level(
        &self,
        tree: &mut OldTree,
        level: u8,
        splices: Vec<Splice>,
        batch: &mut dyn Sink,
    ) -> Result<Vec<Splice>> {
        let old_size = tree.size;
        let mut out = Vec::new();
        let mut it = splices.into_iter().peekable();
        while let Some(first) = it.next() {
            let page = tree.page_at(level, first.start)?;
            let mut runs = Runs {
                level,
                cur: Vec::new(),
                cur_start: page.start,
                pages: Vec::new(),
            };
            for (s, e) in page.starts.iter().zip(&page.entries) {
                if *s < first.start {
                    runs.feed(self, tree, e.clone(), batch)?;
                }
            }
            let mut pos;
            let mut splice = first;
            'feed: loop {
                for e in std::mem::take(&mut splice.new) {
                    runs.feed(self, tree, e, batch)?;
                }
                pos = splice.old_end;
                loop {
                    if it.peek().is_some_and(|n| n.start == pos) {
                        splice = it.next().expect("peeked");
                        continue 'feed;
                    }
                    if pos >= old_size {
                        runs.finish(self, tree, batch)?;
                        break 'feed;
                    }
                    if runs.cur.is_empty() && tree.page_at(level, pos)?.start == pos {
                        break 'feed; // a new page ended where an old one did
                    }
                    let (_, e) = tree.entry_at(level, pos)?;
                    pos += e.size;
                    runs.feed(self, tree, e, batch)?;
                }
            }
            out.push(Splice {
                start: page.start,
                old_end: pos,
                new: runs.pages,
            });
        }
        Ok(out)
    }
}

/// Pages being cut from a run of entries, as `chunker::split_runs` cuts
/// them.
struct Runs {
    level: u8,
    cur: Vec<PageEntry>,
    /// File offset of the first entry of `cur`.
    cur_start: u64,
    pages: Vec<PageEntry>,
}

impl Runs {
    fn feed(
        &mut self,
        store: &Store,
        tree: &mut OldTree,
        e: PageEntry,
        batch: &mut dyn Sink,
    ) -> Result<()> {
        let b = page_boundary(&e.id);
        self.cur.push(e);
        if (b && self.cur.len() >= PAGE_MIN) || self.cur.len() >= PAGE_MAX {
            self.emit(store, tree, batch)?;
        }
        Ok(())
    }

    fn finish(&mut self, store: &Store, tree: &mut OldTree, batch: &mut dyn Sink) -> Result<()> {
        if !self.cur.is_empty() {
            self.emit(store, tree, batch)?;
        }
        Ok(())
    }

    fn emit(&mut self, store: &Store, tree: &mut OldTree, batch: &mut dyn Sink) -> Result<()> {
        let entries = std::mem::take(&mut self.cur);
        let size: u64 = entries.iter().map(|e| e.size).sum();
        let raw = encode(&Page {
            level: self.level,
            entries,
        });
        let id = ObjectId::hash(Kind::Page, &raw);
        // The old page at the same offset is the delta base, as in
        // `finish_manifest`.
        let base = if store.deltas() && self.cur_start < tree.size {
            Some(tree.page_at(self.level, self.cur_start)?.id)
        } else {
            None
        };
        let p = match base {
            Some(b) if b != id => store.delta_against(Kind::Page, id, &raw, b)?,
            Some(_) => {
                self.pages.push(PageEntry { id, size });
                self.cur_start += size;
                return Ok(()); // the same page: already stored
            }
            None => objects::prepare_with_id(Kind::Page, id, &raw),
        };
        batch.push(p)?;
        self.pages.push(PageEntry { id, size });
        self.cur_start += size;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunker::LARGE_FILE;
    use crate::store::StoreOptions;

    /// A file of `LARGE_FILE` or more that format 3 stored (cut small): an
    /// edit of it is chunked again whole, to the ids its size class gives,
    /// where re-cutting around the edit would have mixed both sizes. Once
    /// cut large, the next edit is incremental again.
    #[test]
    fn a_large_file_cut_small_is_chunked_again_whole() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("s"), &StoreOptions::default()).unwrap();
        let mut bytes = crate::chunker::test_bytes(77, LARGE_FILE as usize + 1000);
        let old = store.write_file_bytes_cut(&bytes, Cdc::SMALL).unwrap();
        let full = store.write_file_bytes(&bytes, None).unwrap();
        assert_ne!(
            old, full,
            "cut small and large, the same bytes get other ids"
        );
        let path = dir.path().join("f");
        let edit = |bytes: &mut Vec<u8>, base: &FileContent, at: usize| {
            bytes[at..at + 10].copy_from_slice(b"0123456789");
            std::fs::write(&path, &*bytes).unwrap();
            let range = [(at as u64, at as u64 + 10)];
            let (c, stats) = store.write_file_edited(&path, base, &range).unwrap();
            assert_eq!(c, store.write_file_bytes(bytes, None).unwrap());
            let back = store.read_file_range(&c, 0, bytes.len()).unwrap();
            assert!(back == *bytes, "the edited file does not read back");
            (c, stats)
        };
        let (c, stats) = edit(&mut bytes, &old, 5 << 20);
        assert!(!stats.incremental, "{stats:?}");
        let (_, stats) = edit(&mut bytes, &c, 9 << 20);
        assert!(stats.incremental, "{stats:?}");
        assert!(stats.bytes_read <= 3 * Cdc::LARGE.max as u64, "{stats:?}");
    }

    #[test]
    fn normalise_merges_clips_and_adds_the_tail() {
        assert_eq!(
            normalise(&[(10, 20), (15, 30), (50, 60)], 100, 100, Cdc::SMALL),
            vec![(10, 30), (50, 60)]
        );
        assert_eq!(
            normalise(&[(90, 200)], 100, 100, Cdc::SMALL),
            vec![(90, 100)]
        );
        for cdc in [Cdc::SMALL, Cdc::LARGE] {
            let m = cdc.max as u64;
            assert_eq!(normalise(&[], 10 * m, 5 * m, cdc), vec![(4 * m, 5 * m)]);
        }
        assert_eq!(normalise(&[(0, 1)], 10, 20, Cdc::SMALL), vec![(0, 20)]);
    }
}
