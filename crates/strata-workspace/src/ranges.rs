//! Written ranges: which bytes of an upper file may differ from its origin
//! (the content it was copied from, or last committed as), so that commit
//! re-chunks only those (`Store::write_file_edited`) instead of the whole
//! file. Kept in the journal (journal.rs), so they survive a crash of the
//! daemon with the rest of the uncommitted state.
//!
//! They are an over-approximation: a range may be recorded before its write
//! lands (the journal is written first) or cover bytes written back
//! unchanged; commit stays exact either way. A write the daemon does not
//! see must never be missed instead: writable opens of a file with an
//! origin get no passthrough (open.rs), and where the kernel forces one
//! (a passthrough backing already open on the inode) the whole file is
//! marked (`WHOLE`).

/// From here to the end of file: a truncate, or "unknown, all of it".
pub(crate) const TO_END: u64 = u64::MAX;

/// Past this many disjoint ranges a file's ranges collapse into their hull:
/// memory and journal stay bounded whatever the write pattern.
const MAX_RANGES: usize = 1024;

/// Sorted, disjoint, non-adjacent `[start, end)` ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ranges {
    r: Vec<(u64, u64)>,
}

impl Ranges {
    pub(crate) fn as_slice(&self) -> &[(u64, u64)] {
        &self.r
    }

    /// Whether `a..b` is already inside one recorded range.
    pub(crate) fn covers(&self, a: u64, b: u64) -> bool {
        let i = self.r.partition_point(|r| r.1 < b);
        self.r.get(i).is_some_and(|r| r.0 <= a && b <= r.1)
    }

    pub(crate) fn insert(&mut self, a: u64, b: u64) {
        if a >= b {
            return;
        }
        // Ranges that overlap or touch a..b merge with it.
        let lo = self.r.partition_point(|r| r.1 < a);
        let hi = self.r.partition_point(|r| r.0 <= b);
        let (mut na, mut nb) = (a, b);
        if lo < hi {
            na = na.min(self.r[lo].0);
            nb = nb.max(self.r[hi - 1].1);
        }
        self.r.splice(lo..hi, [(na, nb)]);
        if self.r.len() > MAX_RANGES {
            let (first, last) = (self.r[0].0, self.r[self.r.len() - 1].1);
            self.r = vec![(first, last)];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_merges_overlapping_and_touching_ranges() {
        let mut r = Ranges::default();
        r.insert(10, 20);
        r.insert(30, 40);
        r.insert(20, 25);
        assert_eq!(r.as_slice(), &[(10, 25), (30, 40)]);
        r.insert(5, 35);
        assert_eq!(r.as_slice(), &[(5, 40)]);
        r.insert(50, TO_END);
        assert_eq!(r.as_slice(), &[(5, 40), (50, TO_END)]);
        assert!(r.covers(6, 39) && r.covers(60, 70) && !r.covers(39, 41));
        r.insert(7, 7);
        assert_eq!(r.as_slice(), &[(5, 40), (50, TO_END)]);
    }

    #[test]
    fn too_many_ranges_collapse_into_their_hull() {
        let mut r = Ranges::default();
        for i in 0..=MAX_RANGES as u64 {
            r.insert(i * 10, i * 10 + 1);
        }
        assert_eq!(r.as_slice(), &[(0, MAX_RANGES as u64 * 10 + 1)]);
    }
}
