//! A fresh large file is stored at the speed of the hardware: its cut
//! points are found on every core, then its chunks hashed and compressed
//! on every core. FastCDC is sequential (each cut starts where the last
//! ended), so each segment of the file is chunked speculatively from its
//! own start, and the true sequence from offset 0 is stitched through the
//! speculative ones: a speculative chunk that starts where the true
//! sequence is is exact (a chunk depends only on its own bytes, the byte
//! after it and, within the largest chunk of the end, the end of file; see
//! rechunk.rs), and FastCDC resynchronises within a few chunks, so almost
//! every chunk is found once. Where no speculative chunk starts, one cut
//! is made in place.

use crate::chunker::Cdc;
use rayon::prelude::*;

/// Each core chunks segments of this size...
const SEGMENT: usize = 4 << 20;
/// ...and this far into the next one, to meet its cut points: sixteen
/// small chunks, four large ones (their largest).
fn overlap(cdc: Cdc) -> usize {
    (256 << 10).max(4 * cdc.max)
}

/// The cut points of a whole file's bytes `data` with `cdc`, equal to
/// `cdc.cut_points(data)`.
pub(crate) fn cut_points(data: &[u8], cdc: Cdc) -> Vec<(usize, usize)> {
    if data.len() <= 2 * SEGMENT {
        return cdc.cut_points(data);
    }
    let nseg = data.len().div_ceil(SEGMENT);
    let spec: Vec<Vec<(usize, usize)>> = (0..nseg)
        .into_par_iter()
        .map(|k| {
            let s = k * SEGMENT;
            let end = ((k + 1) * SEGMENT + overlap(cdc)).min(data.len());
            let mut out = Vec::with_capacity((end - s) / cdc.avg + 1);
            for c in cdc.fastcdc(&data[s..end]) {
                // Near the window's end the window's end would act as the
                // end of file: not a chunk of the file.
                if end != data.len() && end - (s + c.offset) < cdc.max + 1 {
                    break;
                }
                out.push((s + c.offset, c.length));
            }
            out
        })
        .collect();
    let mut out = Vec::with_capacity(data.len() / cdc.avg + 1);
    let mut pos = 0;
    // The segment whose chunks the true sequence follows, and where.
    let (mut seg, mut idx) = (0usize, 0usize);
    while pos < data.len() {
        let c = match spec[seg].get(idx) {
            Some(c) if c.0 == pos => *c,
            _ => {
                let k = pos / SEGMENT;
                let hit = [k, k.saturating_sub(1)].into_iter().find_map(|j| {
                    let i = spec[j].binary_search_by_key(&pos, |c| c.0).ok()?;
                    Some((j, i))
                });
                match hit {
                    Some((j, i)) => {
                        (seg, idx) = (j, i);
                        spec[j][i]
                    }
                    None => (pos, cdc.first_cut(&data[pos..])),
                }
            }
        };
        out.push(c);
        pos += c.1;
        idx += 1;
        // Prefer the next segment's chunks as soon as the sequence meets
        // them: they reach further.
        if seg + 1 < nseg && pos >= (seg + 1) * SEGMENT {
            if let Ok(i) = spec[seg + 1].binary_search_by_key(&pos, |c| c.0) {
                (seg, idx) = (seg + 1, i);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both classes: a file under `LARGE_FILE` (small chunks) and one over
    /// it (large chunks), with zero runs (chunks of the largest size)
    /// across segment boundaries too.
    #[test]
    fn parallel_cut_points_equal_the_sequential_ones() {
        for (len, class) in [
            (3 * SEGMENT + 12_345, Cdc::SMALL),
            (19 * SEGMENT / 2 + 12_345, Cdc::LARGE),
        ] {
            let cdc = Cdc::for_size(len as u64);
            assert_eq!(cdc, class);
            let mut data = crate::chunker::test_bytes(3, len);
            data[SEGMENT - 100_000..SEGMENT + 300_000].fill(0);
            data[2 * SEGMENT - 7..2 * SEGMENT + overlap(cdc) + 50_000].fill(0);
            assert_eq!(cut_points(&data, cdc), cdc.cut_points(&data));
        }
    }
}
