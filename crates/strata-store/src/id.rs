//! Object identifiers: BLAKE3 hashes, domain-separated per object kind.
//!
//! Two objects of different kinds with identical bytes get different ids,
//! because each kind hashes under its own `derive_key` context. That keeps a
//! chunk whose bytes happen to parse as a tree from ever being mistaken for one.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The kind of a stored object. The numeric value is stored in the database.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum Kind {
    /// A run of file bytes cut by FastCDC.
    Chunk = 1,
    /// A page of a file manifest (a prolly tree over chunks).
    Page = 2,
    /// A node of a directory tree (a leaf of entries or an index of leaves).
    Tree = 3,
    /// A commit.
    Commit = 4,
}

impl Kind {
    pub fn from_u8(v: u8) -> Option<Kind> {
        match v {
            1 => Some(Kind::Chunk),
            2 => Some(Kind::Page),
            3 => Some(Kind::Tree),
            4 => Some(Kind::Commit),
            _ => None,
        }
    }

    pub(crate) fn context(self) -> &'static str {
        match self {
            Kind::Chunk => "strata 2026-11 object chunk v1",
            Kind::Page => "strata 2026-11 object manifest-page v1",
            Kind::Tree => "strata 2026-11 object tree v1",
            Kind::Commit => "strata 2026-11 object commit v1",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Chunk => "chunk",
            Kind::Page => "page",
            Kind::Tree => "tree",
            Kind::Commit => "commit",
        }
    }
}

/// A 32-byte BLAKE3 object id.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ObjectId(pub [u8; 32]);

impl ObjectId {
    /// Hash `bytes` as an object of `kind`.
    pub fn hash(kind: Kind, bytes: &[u8]) -> ObjectId {
        let mut h = blake3::Hasher::new_derive_key(kind.context());
        h.update(bytes);
        ObjectId(*h.finalize().as_bytes())
    }

    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The first 12 hex digits, for human output.
    pub fn short(&self) -> String {
        hex::encode(&self.0[..6])
    }

    /// Parse a full 64-digit hex id.
    pub fn from_hex(s: &str) -> Option<ObjectId> {
        let mut out = [0u8; 32];
        hex::decode_to_slice(s, &mut out).ok()?;
        Some(ObjectId(out))
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    pub fn from_slice(b: &[u8]) -> Option<ObjectId> {
        Some(ObjectId(b.try_into().ok()?))
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjectId({})", self.short())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_domain_separated() {
        let a = ObjectId::hash(Kind::Chunk, b"same bytes");
        let b = ObjectId::hash(Kind::Tree, b"same bytes");
        assert_ne!(a, b);
        assert_eq!(a, ObjectId::hash(Kind::Chunk, b"same bytes"));
    }

    #[test]
    fn hex_round_trip() {
        let a = ObjectId::hash(Kind::Commit, b"x");
        assert_eq!(ObjectId::from_hex(&a.to_hex()), Some(a));
        assert_eq!(ObjectId::from_hex("zz"), None);
    }
}
