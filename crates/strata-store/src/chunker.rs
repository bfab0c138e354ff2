//! Content-defined chunking (FastCDC 2020, fastcdc =5.0.0) and the
//! content-defined page boundaries of manifest and tree pages.
//!
//! The parameters are part of the format: changing them changes every id.
//! A file is cut with the parameters of its size class ([`Cdc::for_size`],
//! docs/design.md "Chunk sizes"): small chunks (~4 KiB) for a file under
//! [`LARGE_FILE`], so an edit rewrites about one chunk plus one page per
//! manifest level (~1 KiB each); large chunks (~64 KiB) from there on, so
//! a large file costs a twentieth of the index rows, id computations and
//! randomness tests per byte (the fresh file's commit step was bound by
//! them, docs/benchmarks.md "Large chunks for large files"). The class
//! depends on the size alone, so equal bytes always get equal ids; a Store
//! created without deltas cuts every file small (`Store::cdc_for`).

use crate::id::ObjectId;

/// The chunk sizes FastCDC cuts a file into: at least `min` (except a
/// file's last chunk), `avg` on average, at most `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cdc {
    pub min: usize,
    pub avg: usize,
    pub max: usize,
}

/// Files from this size on are cut with [`Cdc::LARGE`].
pub const LARGE_FILE: u64 = 16 << 20;

impl Cdc {
    /// The parameters of files under [`LARGE_FILE`] (format versions 1 to
    /// 3 cut every file with them).
    pub const SMALL: Cdc = Cdc {
        min: 1024,
        avg: 4096,
        max: 16384,
    };
    /// The parameters of files of [`LARGE_FILE`] and more. The least size
    /// is half the average, as restic's is: FastCDC skips a chunk's first
    /// `min` bytes, and from 16 KiB to 32 KiB its cut points cost 23 % less
    /// (9.1 against 11.8 ms per 32 MiB, `examples/chunk_size_experiment`),
    /// where the cut is the stream's one sequential step (stream.rs).
    pub const LARGE: Cdc = Cdc {
        min: 32768,
        avg: 65536,
        max: 262144,
    };
    /// The largest chunk of any file.
    pub const MAX: usize = Cdc::LARGE.max;

    /// The parameters a file of `size` bytes is cut with.
    pub fn for_size(size: u64) -> Cdc {
        if size >= LARGE_FILE {
            Cdc::LARGE
        } else {
            Cdc::SMALL
        }
    }

    /// Cut points (offset, length) of `data`, taken as a whole file or as
    /// a window of one (then the cuts within `max` of its end are not the
    /// file's: the window's end acts as the end of file).
    pub fn cut_points(self, data: &[u8]) -> Vec<(usize, usize)> {
        if data.is_empty() {
            return Vec::new();
        }
        self.fastcdc(data).map(|c| (c.offset, c.length)).collect()
    }

    /// The length of the first chunk FastCDC cuts from `data` (taken as
    /// the rest of the file).
    pub(crate) fn first_cut(self, data: &[u8]) -> usize {
        self.fastcdc(data).next().map(|c| c.length).unwrap_or(0)
    }

    /// FastCDC over `data` with these parameters.
    pub(crate) fn fastcdc(self, data: &[u8]) -> fastcdc::v2020::FastCDC<'_> {
        fastcdc::v2020::FastCDC::new(data, self.min, self.avg, self.max)
    }
}

/// A page ends after an entry whose id's low bits are zero: 1 in
/// `PAGE_SPLIT` entries on average, so pages average ~32 entries.
pub const PAGE_SPLIT: u32 = 32;
/// Bounds so that adversarial ids cannot make a page empty-ish or huge.
pub const PAGE_MIN: usize = 4;
pub const PAGE_MAX: usize = 256;

/// Directories with at most this many entries are stored as a single leaf.
pub const TREE_LEAF_MAX: usize = 512;
/// Larger directories split leaves after names whose hash is 0 mod this.
pub const TREE_SPLIT: u32 = 64;

/// Whether a page ends after an entry with this id.
pub fn page_boundary(id: &ObjectId) -> bool {
    let v = u32::from_le_bytes(id.0[28..32].try_into().expect("4 bytes"));
    v % PAGE_SPLIT == 0
}

/// Whether a tree leaf ends after this name.
pub fn tree_boundary(name: &[u8]) -> bool {
    let h = blake3::hash(name);
    let v = u32::from_le_bytes(h.as_bytes()[0..4].try_into().expect("4 bytes"));
    v % TREE_SPLIT == 0
}

/// Split items into runs: a run ends where `boundary` says so (and is at
/// least `min` long) or when it reaches `max`.
pub fn split_runs<T>(
    items: Vec<T>,
    min: usize,
    max: usize,
    boundary: impl Fn(&T) -> bool,
) -> Vec<Vec<T>> {
    let mut out = Vec::new();
    let mut cur = Vec::new();
    for it in items {
        let b = boundary(&it);
        cur.push(it);
        if (b && cur.len() >= min) || cur.len() >= max {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Deterministic pseudo-random bytes (xorshift) for the crate's unit
/// tests: random enough that every chunk is new and stored raw.
#[cfg(test)]
pub(crate) fn test_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.max(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic pseudo-random generator (xorshift64*), so the fixed
    /// cut points below do not depend on any library's RNG.
    pub(crate) fn seeded_bytes(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed.max(1);
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let v = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.truncate(len);
        out
    }

    /// fastcdc is pinned with `=5.0.0`; if an upgrade changed the v2020 cut
    /// points every stored id would change. This fixes them for one input.
    #[test]
    fn cut_points_are_pinned() {
        let data = seeded_bytes(42, 64 * 1024);
        let cuts: Vec<usize> = Cdc::SMALL.cut_points(&data).iter().map(|c| c.1).collect();
        assert_eq!(cuts.iter().sum::<usize>(), data.len());
        assert_eq!(cuts, PINNED_CUTS.to_vec(), "FastCDC cut points changed");
        let large = seeded_bytes(42, 1 << 20);
        let cuts: Vec<usize> = Cdc::LARGE.cut_points(&large).iter().map(|c| c.1).collect();
        assert_eq!(cuts.iter().sum::<usize>(), large.len());
        assert_eq!(
            cuts,
            PINNED_LARGE_CUTS.to_vec(),
            "FastCDC cut points changed"
        );
    }

    /// The class boundary: the size alone picks the parameters.
    #[test]
    fn the_size_picks_the_parameters() {
        assert_eq!(Cdc::for_size(0), Cdc::SMALL);
        assert_eq!(Cdc::for_size(LARGE_FILE - 1), Cdc::SMALL);
        assert_eq!(Cdc::for_size(LARGE_FILE), Cdc::LARGE);
        assert_eq!(Cdc::for_size(u64::MAX), Cdc::LARGE);
        assert_eq!(Cdc::MAX, Cdc::LARGE.max);
    }

    const PINNED_LARGE_CUTS: &[usize] = &[
        98448, 46759, 90023, 86294, 68232, 128537, 76612, 70507, 101294, 69875, 68620, 32821,
        77475, 33079,
    ];

    const PINNED_CUTS: &[usize] = &[
        7833, 5360, 8201, 1185, 9045, 7192, 4811, 4506, 5133, 4528, 5574, 2168,
    ];
}
