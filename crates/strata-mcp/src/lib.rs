//! strata-mcp: `strata mcp`, a Model Context Protocol server over the
//! strata SDK (docs/mcp.md).
//!
//! Sixteen tools with stable names ([`TOOL_NAMES`]) let an agent create a
//! Sandbox, mount a branch, run commands, read, write, edit and search
//! files, and keep history (status, commit, diff, log, fork, restore).
//! Everything goes through `strata_sdk`: Store calls through
//! [`strata_sdk::Store`], commands through [`strata_sdk::ExecBuilder`].
//! The file tools are commands too (`cat`, `sh -c 'cat > FILE'`, `find`,
//! `grep`), run inside the Sandbox as the command uid, so the Sandbox's
//! confinement applies to them exactly as to `run`.
//!
//! Two transports: [`serve_stdio`] (one client, the process's stdin and
//! stdout) and [`serve_http`] (streamable HTTP on a loopback address, every
//! request authenticated by a bearer token through an [`Authenticator`]
//! the caller supplies, so this crate needs no token store of its own).

#![forbid(unsafe_code)]

mod backend;
mod error;
mod files;
mod glob;
mod http;
mod params;
mod run;
mod server;
mod state;

pub use backend::{Backend, SandboxDefaults};
pub use error::ServeError;
pub use http::{serve_http, Authenticator, HttpOptions};
pub use server::{serve_stdio, StrataMcp};
pub use state::{Caller, Scope};

/// The tool names, stable: agents' prompts and configurations rely on them.
pub const TOOL_NAMES: [&str; 16] = [
    "sandbox_create",
    "sandbox_close",
    "workspace_mount",
    "run",
    "read_file",
    "write_file",
    "edit_file",
    "list_files",
    "glob",
    "grep",
    "status",
    "commit",
    "diff",
    "log",
    "fork",
    "restore",
];
