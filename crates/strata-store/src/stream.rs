//! A large file read from a path, stored as a pipeline over blocks: while
//! one block's chunks are hashed and prepared (on every core), the next
//! is read and cut; raw chunks share their block's buffer instead of
//! being copied (objects.rs `Data`), and the buffers are reused.

use crate::chunker::Cdc;
use crate::error::{Result, StoreError};
use crate::files::{Sink, Src};
use crate::object::FileContent;
use crate::objects;
use crate::store::Store;
use std::collections::HashSet;
use std::io::Read;
use std::path::Path;

/// Files larger than this are chunked from a stream instead of read whole.
pub(crate) const STREAM_THRESHOLD: u64 = 2 * STREAM_BLOCK as u64;
/// Block size of the streamed read: small enough that the two blocks in
/// use stay in the caches and are the only buffers a file's read touches
/// (a fresh 32 MiB buffer cost 8,192 page faults per commit), large enough
/// that re-cutting the few chunks carried over from each block's end costs
/// under 1 %. A large file's blocks are twice that ([`stream_block`]):
/// what is carried over is the last `Cdc::max` bytes and more, 256 KiB
/// for large chunks.
const STREAM_BLOCK: usize = 2 << 20;

/// The stream's block size for chunks of `cdc` (see [`STREAM_BLOCK`]).
fn stream_block(cdc: Cdc) -> usize {
    if cdc == Cdc::SMALL {
        STREAM_BLOCK
    } else {
        2 * STREAM_BLOCK
    }
}

impl Store {
    /// Store a large file read in blocks of [`stream_block`], cut with
    /// `cdc`, as a pipeline over two blocks: while one block's chunks are
    /// hashed and prepared (on every core), the next block is read and
    /// cut. A raw chunk keeps a range of its block (objects.rs `Data`).
    /// The chunks within
    /// `cdc.max` of a block's end (where the block's end would act as the
    /// end of file) are cut again with the next block, so the cuts are
    /// those of the whole file (chunker.rs). Reading and cutting a block
    /// takes one core about as long as hashing the previous one takes the
    /// other, and the batch's flusher inserts what is prepared meanwhile,
    /// where before every phase ran over the whole file in turn.
    pub(crate) fn put_file_stream(
        &self,
        f: &mut std::fs::File,
        src: &Path,
        prev: Option<&FileContent>,
        cdc: Cdc,
        batch: &mut dyn Sink,
    ) -> Result<FileContent> {
        let prev = self.prev_version(prev)?;
        let mut entries = Vec::new();
        let mut seen = HashSet::new();
        let mut cur = Block::new();
        cur.fill(f, src, cdc, &[], 0)?;
        let mut next = Block::new();
        loop {
            let (read, stored) = rayon::join(
                || {
                    if cur.eof {
                        return Ok(());
                    }
                    next.fill(f, src, cdc, cur.left(), cur.base + cur.used() as u64)
                },
                || {
                    let mut out = Vec::new();
                    self.put_cut_chunks(
                        Src::Block(&cur.buf),
                        &cur.cuts,
                        cur.base,
                        prev.as_ref(),
                        &mut seen,
                        &mut out,
                    )
                    .map(|e| (e, out))
                },
            );
            let (e, out) = stored?;
            read?;
            entries.extend(e);
            for p in out {
                batch.push(p)?;
            }
            if cur.eof {
                let size = cur.base + cur.bytes().len() as u64;
                return self.finish_manifest(entries, size, prev.as_ref(), batch);
            }
            std::mem::swap(&mut cur, &mut next);
        }
    }
}

/// One block of a streamed file: bytes from file offset `base`, and the
/// cuts that are the whole file's (all of them at end of file). Its raw
/// chunks share the buffer (objects.rs `Data`), which goes back to
/// [`SPARE_BUFFERS`] once the last of them is stored.
struct Block {
    buf: objects::SharedBuf,
    cuts: Vec<(usize, usize)>,
    base: u64,
    eof: bool,
}

/// Buffers of streamed blocks no longer in use, kept for the next blocks
/// (at most [`SPARE_MAX`]). On these VMs memory given back to the kernel
/// is reported to the host, and a fresh buffer's pages are then faulted in
/// again one by one (docs/benchmarks.md, "Pack files"): ~5 ms of a 32 MiB
/// commit's CPU, in the zeroing of each block and later in the kernel's
/// copy into it.
static SPARE_BUFFERS: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

/// Blocks alive at once: the two being read and hashed, and those whose
/// chunks wait in the flusher's queue (batch.rs `STREAM_QUEUE`). Kept
/// between files: up to this many blocks of 4 MiB.
const SPARE_MAX: usize = 4;

/// A block's buffer: back to [`SPARE_BUFFERS`] when dropped.
struct Pooled(Vec<u8>);

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        // `Block::new`'s empty placeholder would take a spare's place.
        if self.0.capacity() == 0 {
            return;
        }
        if let Ok(mut spare) = SPARE_BUFFERS.lock() {
            if spare.len() < SPARE_MAX {
                spare.push(std::mem::take(&mut self.0));
            }
        }
    }
}

impl Block {
    fn new() -> Block {
        Block {
            buf: std::sync::Arc::new(Pooled(Vec::new())),
            cuts: Vec::new(),
            base: 0,
            eof: false,
        }
    }

    /// The block's bytes.
    fn bytes(&self) -> &[u8] {
        (*self.buf).as_ref()
    }

    /// Bytes covered by the block's cuts.
    fn used(&self) -> usize {
        self.cuts.last().map(|c| c.0 + c.1).unwrap_or(0)
    }

    /// The bytes after the block's cuts, still to be cut.
    fn left(&self) -> &[u8] {
        &self.bytes()[self.used()..]
    }

    /// Refill with `carry` (at file offset `base`) and up to `stream_block`
    /// bytes read from `f`, and cut with `cdc`. The buffer is reused: its
    /// pages are touched once per file.
    fn fill(
        &mut self,
        f: &mut std::fs::File,
        src: &Path,
        cdc: Cdc,
        carry: &[u8],
        base: u64,
    ) -> Result<()> {
        let mut buf = SPARE_BUFFERS
            .lock()
            .ok()
            .and_then(|mut spare| spare.pop())
            .unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(carry);
        self.base = base;
        // Read into the buffer's spare capacity: `read_to_end` leaves it
        // uninitialised until read into, where zeroing 2 MiB before each
        // read cost ~3 ms of a 32 MiB commit (perf). Fewer bytes than
        // asked for means the end of the file (read_to_end reads until
        // `take` is exhausted or a read returns 0, retrying EINTR).
        let block = stream_block(cdc);
        buf.reserve_exact(block);
        let got = (&mut *f)
            .take(block as u64)
            .read_to_end(&mut buf)
            .map_err(|e| StoreError::io("read", src, e))?;
        self.eof = got < block;
        self.cuts = cdc.cut_points(&buf);
        if !self.eof {
            let len = buf.len();
            self.cuts.retain(|c| c.0 + cdc.max < len);
        }
        // The buffer it replaces goes back to the spares once its chunks
        // are stored.
        self.buf = std::sync::Arc::new(Pooled(buf));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunker;
    use crate::id::{Kind, ObjectId};
    use crate::objects::{Data, Prepared};
    use crate::store::StoreOptions;

    /// A streamed file's raw chunks share its blocks instead of copying
    /// them (objects.rs `Data`), hold exactly their bytes, and the blocks
    /// go back to the spares once the chunks are gone.
    #[test]
    fn raw_chunks_of_a_stream_share_its_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("s"), &StoreOptions::default()).unwrap();
        let bytes = chunker::test_bytes(5, chunker::LARGE_FILE as usize + 3_000_000);
        let path = dir.path().join("f");
        std::fs::write(&path, &bytes).unwrap();
        let mut out: Vec<Prepared> = Vec::new();
        store.put_file_path(&path, None, &mut out).unwrap();
        let mut at = 0;
        let mut shared = 0;
        for p in out.iter().filter(|p| p.kind == Kind::Chunk) {
            assert_eq!(p.enc, objects::ENC_RAW, "random bytes are stored raw");
            assert!(matches!(p.data, Data::Shared(..)), "a raw chunk was copied");
            assert!(*p.data == bytes[at..at + p.data.len()], "not its bytes");
            assert_eq!(p.id, ObjectId::hash(Kind::Chunk, &p.data));
            at += p.data.len();
            shared += 1;
        }
        assert_eq!(at, bytes.len());
        assert!(shared > 100, "{shared} chunks");
        let blocks: Vec<_> = out
            .iter()
            .filter_map(|p| match &p.data {
                Data::Shared(buf, _) => Some(std::sync::Arc::downgrade(buf)),
                Data::Own(_) => None,
            })
            .collect();
        drop(out);
        assert!(
            blocks.iter().all(|b| b.upgrade().is_none()),
            "a block outlived its chunks"
        );
    }
}
