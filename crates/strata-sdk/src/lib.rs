//! strata-sdk: the one public Rust API of strata (async, tokio).
//!
//! * [`Client`]: one surface, two transports: [`Client::local`] (the
//!   Store in this process, S1) or [`Client::connect`] (a `strata serve`
//!   over its Unix socket, loopback TCP or TLS with a pinned certificate,
//!   docs/server.md): projects, branches, log, diff, ls, stat, read a
//!   file, change sets and tar import/export through a server, and
//!   Sandboxes, whose Workspaces and execs are the same API either way.
//! * [`Store`]: Store calls in this process (S1): create/open, projects,
//!   fork a branch, read a file of a commit, log, diff.
//! * [`Sandbox`]: create (B1–B6), open by exact ID (B8), list (B10), logs
//!   (B5), restart after the daemon died (B4–B6 again, its Workspaces
//!   mounted again with their uncommitted changes), close (B9), through
//!   strata-sandbox's native backend or strata-docker's.
//! * [`Workspace`]: mount a branch in a Sandbox, status, commit, unmount,
//!   and file operations on it while it is mounted (read, write, list,
//!   stat, remove, rename, mkdir) without an exec per file.
//! * [`workspaces`]: a Workspace by ID wherever it is served (host mount or
//!   Sandbox), listing both, and opening one offline from its scratch.
//! * [`probe`]: what this host offers strata, and a live self-check.
//! * [`ExecBuilder`]: one command in a Workspace, as a nonroot uid with no
//!   capabilities: `.output()` or `.spawn()` ([`ExecHandle`]: separate
//!   stdout/stderr streams, stdin whose drop sends EOF, `wait`, `cancel`).
//!
//! Errors are one typed [`Error`], each variant saying what failed and what
//! to do.
//!
//! A program using Sandboxes re-executes itself as the Sandbox's init, its
//! daemon and the exec helper: call [`maybe_run_internal`] first thing in
//! `main`, before any thread (and before building the tokio runtime).
//!
//! ```no_run
//! fn main() -> strata_sdk::Result<()> {
//!     strata_sdk::maybe_run_internal();
//!     tokio::runtime::Runtime::new().unwrap().block_on(async {
//!         let store = strata_sdk::Store::create("/var/tmp/s").await?;
//!         store.create_project_from("p", "./src").await?;
//!         let sb = strata_sdk::Sandbox::create(strata_sdk::SandboxSpec::new(store.dir())).await?;
//!         let ws = sb.mount("p/main", None).await?;
//!         let out = ws.exec(["sh", "-c", "echo hi > f; id -u"]).output().await?;
//!         assert_eq!(out.stdout, b"1500\n");
//!         ws.commit("hi").await?;
//!         ws.unmount(false).await?;
//!         sb.close().await?;
//!         assert_eq!(store.read_file("p/main", "f").await?, b"hi\n");
//!         Ok(())
//!     })
//! }
//! ```

#![forbid(unsafe_code)]
// Every public item is documented (the SDK issue); clippy -D warnings in CI
// turns a missing doc into an error.
#![warn(missing_docs)]

pub mod check;
pub mod client;
mod connect;
mod error;
pub mod exec;
pub mod host;
pub mod microvm;
pub mod pool;
pub mod probe;
mod records;
pub mod remote;
pub mod sandbox;
mod sandbox_remote;
mod sandbox_spec;
mod store;
mod workspace;
pub mod workspaces;

pub use client::DaemonClient;
pub use connect::{BranchInfo, Client, CommitInfo, Diff, Entry};
pub use error::{Error, Result, Source};
pub use exec::{ExecBuilder, ExecHandle, ExecStdin, ExecStream, ExitStatus, Output};
pub use microvm::MicroVm;
pub use remote::Remote;
pub use sandbox::{
    Expose, Limits, Network, Sandbox, SandboxFilter, SandboxInfo, SandboxSpec, SandboxState,
    DEFAULT_MOUNT,
};
pub use store::Store;
/// The wire types of `strata serve` (change sets for [`Client::commit_changes`]).
pub use strata_api as wire;
pub use strata_daemon::api::{FileEntry, FileKind};
pub use strata_workspace::Transport;
pub use workspace::{Change, CommitOutcome, Workspace};

/// Handle the hidden subcommands this binary may be re-executed as
/// (`__strata-init`, `__strata-exec`, `__strata-daemon`); returns at once
/// otherwise. Call it first thing in `main`, before any thread starts.
pub fn maybe_run_internal() {
    strata_sandbox::maybe_run_internal();
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() == Some(std::ffi::OsStr::new(strata_daemon::DAEMON_ARG)) {
        let rest: Vec<_> = args.collect();
        let code = match strata_daemon::main_from_args(&rest) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("strata daemon: {e}");
                1
            }
        };
        std::process::exit(code);
    }
}
