//! Progress reporting hooks. The Store reports; the CLI decides whether to
//! draw anything (only when stderr is a terminal).

/// Receives progress of long operations. All methods have empty defaults.
pub trait Progress: Sync {
    /// A phase begins; `total` is the expected count when known.
    fn start(&self, _what: &str, _total: Option<u64>) {}
    /// `n` more items are done.
    fn advance(&self, _n: u64) {}
    /// The phase is over.
    fn finish(&self) {}
}

/// Reports nothing.
pub struct NoProgress;

impl Progress for NoProgress {}
