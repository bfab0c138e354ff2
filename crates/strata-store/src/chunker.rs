//! Content-defined chunking (FastCDC 2020, fastcdc =5.0.0) and the
//! content-defined page boundaries of manifest and tree pages.
//!
//! The parameters are part of the format: changing them changes every id.
//! Small chunks keep an edit cheap: an edit rewrites about one chunk
//! (~4 KiB) plus one page per manifest level (~1 KiB each).

use crate::id::ObjectId;

pub const CHUNK_MIN: usize = 1024;
pub const CHUNK_AVG: usize = 4096;
pub const CHUNK_MAX: usize = 16384;

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

/// Cut points (end offsets) of `data`.
pub fn cut_points(data: &[u8]) -> Vec<(usize, usize)> {
    if data.is_empty() {
        return Vec::new();
    }
    fastcdc::v2020::FastCDC::new(data, CHUNK_MIN, CHUNK_AVG, CHUNK_MAX)
        .map(|c| (c.offset, c.length))
        .collect()
}

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
        let cuts: Vec<usize> = cut_points(&data).iter().map(|c| c.1).collect();
        assert_eq!(cuts.iter().sum::<usize>(), data.len());
        assert_eq!(cuts, PINNED_CUTS.to_vec(), "FastCDC cut points changed");
    }

    const PINNED_CUTS: &[usize] = &[
        7833, 5360, 8201, 1185, 9045, 7192, 4811, 4506, 5133, 4528, 5574, 2168,
    ];
}
