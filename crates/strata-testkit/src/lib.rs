//! strata-testkit: what several crates' tests share, as a library instead
//! of files included by path (`publish = false`, a dev-dependency only).
//!
//! * [`contract`]: the Backend contract suite (docs/design.md §3, B1–B10),
//!   one source that every backend's tests run through their own
//!   [`contract::Harness`] (strata-sandbox's `tests/native.rs`,
//!   strata-docker's `tests/docker.rs`).
//! * [`native`]: the native backend's harness for that suite, one source
//!   for strata-sandbox's `tests/native.rs` and this crate's binary
//!   `strata-contract-native`, which runs the whole suite where it is
//!   started (inside a project VM's guest, docs/microvm.md) and prints one
//!   line per case.
//! * [`docker`]: the docker tests' set-up (a Docker Engine, the static
//!   binaries the containers run, a busybox image imported without a
//!   registry), for strata-docker's and strata-sdk's docker tests.
//! * [`cases`]: the harness of the test binaries that have their own
//!   `main` (`harness = false`): run, report, filter, clean up, exit code.
//! * [`http`]: a parsed HTTP/1.1 response, for the tests that speak to
//!   `strata serve` (strata-cli) and to the daemon endpoint (strata-daemon).
//!
//! Nothing here skips: a test whose set-up is missing FAILS with the
//! reason and what to do.

#![forbid(unsafe_code)]

pub mod cases;
pub mod contract;
pub mod docker;
pub mod http;
pub mod native;
