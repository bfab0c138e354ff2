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

    /// Do the command through the `strata serve` at URL instead of on a
    /// local Store (like `docker -H`): unix:///path/serve.sock,
    /// http://127.0.0.1:PORT or https://HOST:PORT. The token comes from
    /// $STRATA_TOKEN or --token-file.
    #[arg(long, global = true, env = "STRATA_REMOTE", value_name = "URL")]
    pub remote: Option<String>,

    /// With --remote: read the server's bearer token from FILE instead of
    /// $STRATA_TOKEN.
    #[arg(long, global = true, value_name = "FILE")]
    pub token_file: Option<PathBuf>,

    /// With an https:// --remote: accept only the certificate with this
    /// SHA-256 fingerprint (what `strata serve` printed).
    #[arg(
        long,
        global = true,
        env = "STRATA_REMOTE_FINGERPRINT",
        value_name = "SHA256"
    )]
    pub remote_fingerprint: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a Store (or report the one already there).
    #[command(after_help = "Example:\n  strata --store /var/tmp/store init")]
    Init(InitArgs),
    /// Create and list projects.
    #[command(subcommand)]
    Project(ProjectCmd),
    /// Create, list and delete branches.
    #[command(subcommand)]
    Branch(BranchCmd),
    /// Commit a directory's current state as the next commit on a branch.
    #[command(after_help = "Example:\n  strata snapshot web/agent-1 ./site -m \"edit\"")]
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
    #[command(after_help = "Example:\n  strata log web/main -n 5")]
    Log {
        /// PROJECT/BRANCH or a commit id (a unique prefix of at least 8 hex digits).
        #[arg(value_name = "REF")]
        reference: String,
        /// Show at most N commits.
        #[arg(short = 'n', long = "max-count", value_name = "N")]
        max_count: Option<usize>,
    },
    /// List the paths that differ between two commits.
    #[command(after_help = "Example:\n  strata diff web/main web/agent-1")]
    Diff {
        /// The older REF.
        #[arg(value_name = "REF")]
        from: String,
        /// The newer REF.
        #[arg(value_name = "REF")]
        to: String,
    },
    /// List a directory (or show one entry) of a commit without exporting it.
    #[command(after_help = "Example:\n  strata ls web/main src")]
    Ls {
        #[arg(value_name = "REF")]
        reference: String,
        /// A slash-separated path inside the commit [default: the root].
        path: Option<OsString>,
    },
    /// Write a file of a commit to stdout, byte for byte.
    #[command(after_help = "Example:\n  strata cat web/main src/index.html")]
    Cat {
        #[arg(value_name = "REF")]
        reference: String,
        /// A slash-separated path inside the commit.
        path: OsString,
    },
    /// Materialize a commit into a directory.
    #[command(after_help = "Example:\n  strata export web/main ./out")]
    Export {
        #[arg(value_name = "REF")]
        reference: String,
        /// The target directory (created if missing; must be empty unless --force).
        dir: PathBuf,
        /// Write into a non-empty directory, replacing what is in the way.
        #[arg(long)]
        force: bool,
        /// Restore setuid/setgid bits and xattrs outside `user.` exactly as
        /// stored (by default they are dropped, and counted).
        #[arg(long)]
        preserve_privileges: bool,
    },
    /// Object counts and sizes of the Store.
    #[command(after_help = "Example:\n  strata stats --json")]
    Stats,
    /// Re-hash every object and check every reachable reference.
    #[command(after_help = "Example:\n  strata fsck")]
    Fsck,
    /// Delete objects no branch or pin reaches.
    #[command(after_help = "Example:\n  strata gc")]
    Gc,
    /// A self-checking tour in a fresh temporary Store (ignores --store):
    /// two Sandboxes on two branches side by side (root), or the Store and
    /// rootless parts this machine allows; exits 0 when every check passes.
    #[command(after_help = "Example:\n  cargo run --release -p strata-cli -- demo")]
    Demo,
    /// Run one command on a Workspace of a branch, with no root: the
    /// Workspace appears at $STRATA_ROOT for that command only; its changes
    /// are committed with --commit, discarded otherwise. Exits with the
    /// command's status (a signal as 128+N); 125 if strata itself fails.
    /// Not a sandbox (the command has your rights, files and network)
    /// unless --isolate.
    #[command(
        after_help = "Examples:\n  strata run web/main --commit -m \"build\" -- make\n  strata run web/main --isolate --commit -- ./untrusted-tool"
    )]
    Run(crate::run::RunArgs),
    /// Mount a Workspace of a branch on the host (needs root); prints its ID.
    #[command(after_help = "Example:\n  strata mount web/agent-1 ./mnt")]
    Mount(crate::mount::MountArgs),
    /// Workspaces on the host and in Sandboxes: mount (in a Sandbox), list,
    /// status, commit, unmount.
    #[command(subcommand)]
    Ws(crate::mount::WsCmd),
    /// Create, list, inspect, tail, restart and remove Sandboxes (needs root).
    #[command(subcommand)]
    Sandbox(crate::sandbox::SandboxCmd),
    /// Run one command in a Workspace of a Sandbox: forwards stdin (EOF
    /// included), streams stdout and stderr, exits with the command's code
    /// (a signal as 128+N; 130 after Ctrl-C cancelled it); 125 if strata
    /// itself fails. `exec logs|wait|cancel EXEC` handle detached execs.
    #[command(
        after_help = "Examples:\n  strata exec $WS -- sh -c 'make && make test'\n  echo data | strata exec $WS --env LANG=C -- wc -c\n  strata exec --tty $WS -- bash\n  EX=$(strata exec --detach $WS -- ./long-job)\n  strata exec logs --follow $EX; strata exec wait $EX; strata exec cancel $EX"
    )]
    Exec(crate::exec::ExecCmd),
    /// Same as `strata exec logs`.
    #[command(name = "exec-logs", hide = true)]
    ExecLogs(crate::exec::LogsArgs),
    /// Same as `strata exec wait`.
    #[command(name = "exec-wait", hide = true)]
    ExecWait(crate::exec::ExecIdArg),
    /// Same as `strata exec cancel`.
    #[command(name = "exec-cancel", hide = true)]
    ExecCancel(crate::exec::ExecIdArg),
    /// Report what this host offers strata, as KEY=VALUE lines (each failing
    /// line says why and what to do).
    #[command(after_help = "Examples:\n  strata probe\n  strata probe --self-check --json")]
    Probe(crate::probe::ProbeArgs),
    /// Serve this Store over one authenticated HTTP/JSON API (docs/server.md)
    /// until SIGTERM or SIGINT; prints one ready line.
    #[command(
        after_help = "Examples:\n  strata serve\n  strata --json serve --listen tcp:127.0.0.1:7878"
    )]
    Serve(crate::serve::ServeArgs),
    /// Bearer tokens for `strata serve`: create, list, revoke.
    #[command(subcommand)]
    Token(crate::serve::TokenCmd),
    /// Serve the Model Context Protocol (docs/mcp.md): tools for agents to
    /// work in Sandboxes and Workspaces, on stdio (until stdin closes) or
    /// on --http ADDR with bearer tokens.
    #[command(
        after_help = "Examples:\n  strata --store /var/tmp/store mcp\n  strata mcp --http 127.0.0.1:8766"
    )]
    Mcp(crate::mcp::McpArgs),
    /// One qemu microVM per project: its Store on the VM's own disk,
    /// `strata serve` inside, an endpoint on the host's loopback
    /// (docs/microvm.md).
    #[command(subcommand)]
    Vm(crate::vm::VmCmd),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(
        after_help = "Examples:\n  strata completions bash > /etc/bash_completion.d/strata\n  strata completions zsh > ~/.zfunc/_strata\n  strata completions fish > ~/.config/fish/completions/strata.fish"
    )]
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// `strata completions SHELL`: the script on stdout.
pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<std::process::ExitCode> {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    clap_complete::generate(shell, &mut cmd, "strata", &mut std::io::stdout());
    Ok(std::process::ExitCode::SUCCESS)
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
    #[command(after_help = "Example:\n  strata project create web --from ./site -m \"import\"")]
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
    #[command(after_help = "Example:\n  strata project list --json")]
    List,
}

#[derive(Debug, Subcommand)]
pub enum BranchCmd {
    /// Fork a branch from a commit in O(1).
    #[command(after_help = "Example:\n  strata branch create web/agent-1 --from web/main")]
    Create {
        /// PROJECT/NAME
        branch: String,
        /// Where the branch starts [default: PROJECT/main].
        #[arg(long, value_name = "REF")]
        from: Option<String>,
    },
    /// List branches (of one project, or all).
    #[command(after_help = "Example:\n  strata branch list web")]
    List { project: Option<String> },
    /// Delete a branch (its commits stay until gc).
    #[command(after_help = "Example:\n  strata branch delete web/agent-1")]
    Delete {
        /// PROJECT/NAME
        branch: String,
    },
}
