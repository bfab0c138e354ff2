//! The command line: clap definitions only, no behaviour.

use clap::{Args, Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;

/// strata: versioned, content-addressed workspaces for AI agents.
#[derive(Debug, Parser)]
#[command(name = "strata", version, propagate_version = true)]
pub struct Cli {
    /// The Store directory [default: $XDG_DATA_HOME/strata, i.e. ~/.local/share/strata]
    #[arg(long, global = true, env = "STRATA_STORE", value_name = "PATH")]
    pub store: Option<PathBuf>,

    /// Print machine-readable JSON on stdout instead of text.
    #[arg(long, global = true)]
    pub json: bool,

    /// Keep or open a Store on a filesystem strata does not trust for SQLite
    /// WAL locking (network, FUSE, 9p...). Use only if you know it is safe.
    #[arg(long, global = true)]
    pub allow_any_fs: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a Store (or report the one already there).
    Init(InitArgs),
    /// Create and list projects.
    #[command(subcommand)]
    Project(ProjectCmd),
    /// Create, list and delete branches.
    #[command(subcommand)]
    Branch(BranchCmd),
    /// Commit a directory's current state as the next commit on a branch.
    Snapshot {
        /// PROJECT/BRANCH
        branch: String,
        /// The directory to snapshot.
        dir: PathBuf,
        /// The commit message.
        #[arg(short, long)]
        message: Option<String>,
    },
    /// Show the commits reachable from REF along first parents, newest first.
    Log {
        /// PROJECT/BRANCH or a commit id (a unique prefix of at least 8 hex digits).
        #[arg(value_name = "REF")]
        reference: String,
        /// Show at most N commits.
        #[arg(short = 'n', long = "max-count", value_name = "N")]
        max_count: Option<usize>,
    },
    /// List the paths that differ between two commits.
    Diff {
        /// The older REF.
        #[arg(value_name = "REF")]
        from: String,
        /// The newer REF.
        #[arg(value_name = "REF")]
        to: String,
    },
    /// List a directory (or show one entry) of a commit without exporting it.
    Ls {
        #[arg(value_name = "REF")]
        reference: String,
        /// A slash-separated path inside the commit [default: the root].
        path: Option<OsString>,
    },
    /// Write a file of a commit to stdout, byte for byte.
    Cat {
        #[arg(value_name = "REF")]
        reference: String,
        /// A slash-separated path inside the commit.
        path: OsString,
    },
    /// Materialize a commit into a directory.
    Export {
        #[arg(value_name = "REF")]
        reference: String,
        /// The target directory (created if missing; must be empty unless --force).
        dir: PathBuf,
        /// Write into a non-empty directory, replacing what is in the way.
        #[arg(long)]
        force: bool,
    },
    /// Object counts and sizes of the Store.
    Stats,
    /// Re-hash every object and check every reachable reference.
    Fsck,
    /// Delete objects no branch or pin reaches.
    Gc,
    /// Run a self-checking demo in a fresh temporary Store (ignores --store).
    Demo,
    /// Run one command on a Workspace of a branch, with no root: the
    /// Workspace appears at $STRATA_ROOT for that command only; its changes
    /// are committed with --commit, discarded otherwise. Exits with the
    /// command's status (a signal as 128+N); 125 if strata itself fails.
    Run(crate::run::RunArgs),
    /// Mount a Workspace of a branch on the host (needs root); prints its ID.
    Mount(crate::mount::MountArgs),
    /// Status, commit and unmount of host-mounted Workspaces.
    #[command(subcommand)]
    Ws(crate::mount::WsCmd),
    /// Create, list, inspect and remove Sandboxes; mount, commit and
    /// unmount Workspaces in them (needs root).
    #[command(subcommand)]
    Sandbox(crate::sandbox::SandboxCmd),
    /// Run one command in a Workspace of a Sandbox: forwards stdin (EOF
    /// included), streams stdout and stderr, exits with the command's code
    /// (a signal as 128+N); 125 if strata itself fails.
    Exec(crate::sandbox::ExecArgs),
    /// Report what this host offers strata, as KEY=VALUE lines.
    Probe,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Use synchronous=FULL: commits survive power loss, not only process death.
    #[arg(long)]
    pub durable: bool,
    /// Never store changed chunks as deltas against their previous version.
    #[arg(long)]
    pub no_deltas: bool,
}

#[derive(Debug, Subcommand)]
pub enum ProjectCmd {
    /// Create a project with a `main` branch (empty, or imported from --from).
    Create {
        /// The project name: [a-z0-9][a-z0-9._-]{0,62}, no "..".
        name: String,
        /// Import this directory as the first commit.
        #[arg(long, value_name = "DIR")]
        from: Option<PathBuf>,
        /// The first commit's message.
        #[arg(short, long)]
        message: Option<String>,
    },
    /// List projects and their branches.
    List,
}

#[derive(Debug, Subcommand)]
pub enum BranchCmd {
    /// Fork a branch from a commit in O(1).
    Create {
        /// PROJECT/NAME
        branch: String,
        /// Where the branch starts [default: PROJECT/main].
        #[arg(long, value_name = "REF")]
        from: Option<String>,
    },
    /// List branches (of one project, or all).
    List { project: Option<String> },
    /// Delete a branch (its commits stay until gc).
    Delete {
        /// PROJECT/NAME
        branch: String,
    },
}
