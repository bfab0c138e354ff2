#![allow(dead_code)]
use std::path::Path;
use strata_store::{EntryKind, FileContent, Store, StoreOptions, TreeEntry};

/// Deterministic pseudo-random bytes (xorshift64*).
pub fn seeded_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.max(1);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

pub fn new_store(dir: &Path) -> Store {
    Store::create(&dir.join("store"), &StoreOptions::default()).expect("create store")
}

pub fn new_store_opts(dir: &Path, opts: &StoreOptions) -> Store {
    Store::create(&dir.join("store"), opts).expect("create store")
}

/// A tree entry for a regular file `name` with content `c`: mode 0644,
/// owned by root, mtime 0, no xattrs.
pub fn file_entry(name: &str, c: FileContent) -> TreeEntry {
    TreeEntry {
        name: name.as_bytes().to_vec(),
        kind: EntryKind::File(c),
        mode: 0o644,
        uid: 0,
        gid: 0,
        mtime_ns: 0,
        xattrs: vec![],
        link_group: 0,
    }
}
