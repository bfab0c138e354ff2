//! The ids of many chunks at once: the same BLAKE3 ids as
//! [`ObjectId::hash`], with the SIMD lanes filled across chunks.
//!
//! BLAKE3 hashes the 1 KiB pieces ("chunks" in its paper) of one input in
//! parallel SIMD lanes, 16 at a time with AVX-512. A file chunk averages
//! 4 KiB, so hashing each on its own filled four of the sixteen lanes:
//! ~1.4 GB/s, about a fifth of a fresh 32 MiB file's commit CPU
//! (docs/benchmarks.md). Here the k-th 1 KiB piece of every input of a
//! group goes through one `hash_many` call (all of them sit at the same
//! position of their own input, so they share the counter), the short
//! last piece of each input and the parent nodes above the pieces are
//! hashed one by one, and the root comes out as BLAKE3 defines it: the
//! tests compare every length class with `ObjectId::hash`.
//!
//! `blake3::platform` and `blake3::IncrementCounter` are public but
//! undocumented, so the crate is pinned (`=1.8.7`, Cargo.toml, as fastcdc
//! is); an upgrade that changes them fails to build rather than to hash.

use crate::id::{Kind, ObjectId};
use blake3::hazmat::{self, ChainingValue, HasherExt, Mode};
use blake3::platform::Platform;
use blake3::{IncrementCounter, CHUNK_LEN, OUT_LEN};

/// Domain flags of a compression (the BLAKE3 specification, table 3).
const CHUNK_START: u8 = 1 << 0;
const CHUNK_END: u8 = 1 << 1;
const DERIVE_KEY_MATERIAL: u8 = 1 << 6;

/// Inputs of this many bytes or more fill the SIMD lanes by themselves:
/// BLAKE3's own hasher spreads one input's 1 KiB pieces, and its parent
/// nodes, over the lanes. A large file's chunks (~64 KiB, chunker.rs) are
/// hashed so; hashed across inputs, four of them filled a quarter of the
/// lanes (docs/benchmarks.md "Large chunks for large files").
const ALONE: usize = 16 * CHUNK_LEN;

/// The ids of `inputs` as objects of `kind`, in order: equal to
/// `ObjectId::hash(kind, input)` for each.
pub(crate) fn hash_each(kind: Kind, inputs: &[&[u8]]) -> Vec<ObjectId> {
    let key = hazmat::hash_derive_key_context(kind.context());
    if !inputs.iter().any(|m| m.len() >= ALONE) {
        return hash_across(kind, &key, inputs);
    }
    let short: Vec<&[u8]> = inputs.iter().filter(|m| m.len() < ALONE).copied().collect();
    let mut short = hash_across(kind, &key, &short).into_iter();
    inputs
        .iter()
        .map(|m| {
            if m.len() < ALONE {
                return short.next().expect("one id per short input");
            }
            let mut h = blake3::Hasher::new_from_context_key(&key);
            h.update(m);
            ObjectId(*h.finalize().as_bytes())
        })
        .collect()
}

/// `hash_each` across inputs: one 1 KiB position of every input at a time.
/// `key`: `kind`'s derived key.
fn hash_across(kind: Kind, key: &[u8; 32], inputs: &[&[u8]]) -> Vec<ObjectId> {
    let key_words = blake3::platform::words_from_le_bytes_32(key);
    let platform = Platform::detect();
    // BLAKE3 pieces per input (at least one); `first[i]` is where input
    // i's chaining values start in `cvs`.
    let pieces = |m: &[u8]| m.len().div_ceil(CHUNK_LEN).max(1);
    let mut first = Vec::with_capacity(inputs.len());
    let mut total = 0;
    for m in inputs {
        first.push(total);
        total += pieces(m);
    }
    let mut cvs: Vec<ChainingValue> = vec![[0; OUT_LEN]; total];
    // Every piece but the last of each input of two or more pieces is a
    // whole 1 KiB and not the root: hashed across inputs, one position at
    // a time.
    let full_max = inputs.iter().map(|m| pieces(m) - 1).max().unwrap_or(0);
    let mut refs: Vec<&[u8; CHUNK_LEN]> = Vec::with_capacity(inputs.len());
    let mut slots = Vec::with_capacity(inputs.len());
    let mut out = vec![0u8; OUT_LEN * inputs.len()];
    for k in 0..full_max {
        refs.clear();
        slots.clear();
        for (i, m) in inputs.iter().enumerate() {
            if k + 1 < pieces(m) {
                let piece = &m[k * CHUNK_LEN..(k + 1) * CHUNK_LEN];
                refs.push(piece.try_into().expect("a whole piece"));
                slots.push(first[i] + k);
            }
        }
        let out = &mut out[..refs.len() * OUT_LEN];
        platform.hash_many(
            &refs,
            &key_words,
            k as u64,
            IncrementCounter::No,
            DERIVE_KEY_MATERIAL,
            CHUNK_START,
            CHUNK_END,
            out,
        );
        for (cv, &slot) in out.chunks_exact(OUT_LEN).zip(&slots) {
            cvs[slot].copy_from_slice(cv);
        }
    }
    inputs
        .iter()
        .zip(&first)
        .map(|(m, &at)| {
            let n = pieces(m);
            if n == 1 {
                // One piece is the root itself.
                return ObjectId::hash(kind, m);
            }
            let last = (n - 1) * CHUNK_LEN;
            let mut h = blake3::Hasher::new_from_context_key(key);
            h.set_input_offset(last as u64);
            h.update(&m[last..]);
            cvs[at + n - 1] = h.finalize_non_root();
            let mode = Mode::DeriveKeyMaterial(key);
            let (l, r) = split(&cvs[at..at + n]);
            ObjectId(
                *hazmat::merge_subtrees_root(&subtree(l, mode), &subtree(r, mode), mode).as_bytes(),
            )
        })
        .collect()
}

/// BLAKE3's tree over `n` pieces: the left subtree holds the largest power
/// of two pieces below `n`, the right one the rest.
fn split(cvs: &[ChainingValue]) -> (&[ChainingValue], &[ChainingValue]) {
    let n = cvs.len();
    let left = 1usize << (usize::BITS - 1 - (n - 1).leading_zeros());
    cvs.split_at(left)
}

/// The chaining value of a subtree (not the root) over `cvs`. Recursion
/// depth is the tree's height: at most 4 (16 pieces; longer inputs are
/// hashed by BLAKE3's own hasher, `ALONE`).
fn subtree(cvs: &[ChainingValue], mode: Mode) -> ChainingValue {
    if cvs.len() == 1 {
        return cvs[0];
    }
    let (l, r) = split(cvs);
    hazmat::merge_subtrees_non_root(&subtree(l, mode), &subtree(r, mode), mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// Every length class (empty, one piece, exactly whole pieces, a short
    /// last piece, up to past `Cdc::MAX`) and both kinds used, mixed in one
    /// call, against the one-at-a-time hash.
    #[test]
    fn ids_equal_the_one_at_a_time_hash() {
        let lens = [
            0, 1, 63, 64, 65, 1023, 1024, 1025, 2047, 2048, 2049, 3072, 4095, 4096, 4097, 5000,
            8191, 8192, 8193, 12288, 16383, 16384, 16385, 40000, 65536, 100_001, 262_143, 262_144,
            262_145,
        ];
        let data: Vec<Vec<u8>> = lens
            .iter()
            .enumerate()
            .map(|(i, &l)| bytes(i as u64 + 7, l))
            .collect();
        for kind in [Kind::Chunk, Kind::Page] {
            let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
            let got = hash_each(kind, &refs);
            for (d, id) in data.iter().zip(&got) {
                assert_eq!(
                    *id,
                    ObjectId::hash(kind, d),
                    "kind {kind:?}, {} bytes",
                    d.len()
                );
            }
            // Reversed and alone: the grouping must not matter.
            let rev: Vec<&[u8]> = refs.iter().rev().copied().collect();
            let got_rev = hash_each(kind, &rev);
            for (d, id) in rev.iter().zip(&got_rev) {
                assert_eq!(*id, ObjectId::hash(kind, d));
                assert_eq!(hash_each(kind, &[d]), vec![*id]);
            }
        }
        assert!(hash_each(Kind::Chunk, &[]).is_empty());
    }

    /// The ids of a 32 MiB random file's chunks both ways, with the CPU
    /// each took (printed, for docs/benchmarks.md; no speed is asserted).
    /// `cargo test --release -p strata-store --lib hash_many -- --ignored
    /// --nocapture`.
    #[test]
    #[ignore]
    fn cpu_of_a_32_mib_file_both_ways() {
        let data = bytes(5, 32 << 20);
        let cuts = crate::chunker::Cdc::for_size(data.len() as u64).cut_points(&data);
        let refs: Vec<&[u8]> = cuts.iter().map(|&(o, l)| &data[o..o + l]).collect();
        let t = std::time::Instant::now();
        let one: Vec<ObjectId> = refs
            .iter()
            .map(|d| ObjectId::hash(Kind::Chunk, d))
            .collect();
        let one_t = t.elapsed();
        let t = std::time::Instant::now();
        let many: Vec<ObjectId> = refs
            .chunks(64)
            .flat_map(|g| hash_each(Kind::Chunk, g))
            .collect();
        let many_t = t.elapsed();
        assert_eq!(one, many);
        println!(
            "{} chunks of 32 MiB: one at a time {:.1} ms, 64 at a time {:.1} ms (one thread)",
            cuts.len(),
            one_t.as_secs_f64() * 1e3,
            many_t.as_secs_f64() * 1e3
        );
    }

    /// Many random lengths between `Cdc::SMALL.min` and `Cdc::SMALL.max`,
    /// as a small file's chunks are.
    #[test]
    fn random_chunk_lengths() {
        let mut x = 99u64;
        let data: Vec<Vec<u8>> = (0..300)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                bytes(i, 1024 + (x % (16384 - 1024 + 1)) as usize)
            })
            .collect();
        let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
        for (d, id) in data.iter().zip(hash_each(Kind::Chunk, &refs)) {
            assert_eq!(id, ObjectId::hash(Kind::Chunk, d), "{} bytes", d.len());
        }
    }
}
