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

// Value parsers: a malformed flag value is a usage error, so clap reports
// it (naming the flag) and exits 2 before any command runs (README.md,
// "Exit codes"). Each returns the typed value the command uses.

/// A usage error found after parsing (flags that only conflict in
/// combination): clap's message format and exit status 2.
pub fn usage_error(kind: clap::error::ErrorKind, msg: &str) -> ! {
    use clap::CommandFactory;
    Cli::command().error(kind, msg).exit()
}

/// `KEY=VALUE` (`--label`, `--env`); the value may contain `=`.
pub fn key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{s:?} is not KEY=VALUE")),
    }
}

/// A byte count, or a number with a K, M or G suffix (`--memory`).
pub fn byte_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|&n| n > 0)
        .ok_or_else(|| "give bytes, or a number with K, M or G (e.g. 512M)".to_string())
}

/// CPUs as a fraction (`--cpu 0.5`), returned in thousandths of a CPU.
pub fn cpu_millis(s: &str) -> Result<u64, String> {
    match s.trim().parse::<f64>() {
        Ok(c) if c.is_finite() && c > 0.0 && c <= 4096.0 => {
            Ok(((c * 1000.0).round() as u64).max(1))
        }
        _ => Err("give a positive number of CPUs, e.g. 0.5 or 2".to_string()),
    }
}

/// Numeric `UID:GID`, or one number for both (`--user`).
pub fn uid_gid(s: &str) -> Result<(u32, u32), String> {
    let (u, g) = s.split_once(':').unwrap_or((s, s));
    match (u.parse(), g.parse()) {
        (Ok(u), Ok(g)) => Ok((u, g)),
        _ => Err("give numeric UID:GID, e.g. 1500:1500".to_string()),
    }
}

/// `--network`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NetworkArg {
    /// Loopback only.
    None,
    /// The host's network namespace.
    Host,
}

/// `--backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendArg {
    /// Namespaces and seccomp on this host.
    Native,
    /// One container through the Docker Engine API.
    Docker,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_cpus_users_and_pairs_parse() {
        assert_eq!(byte_size("512M").unwrap(), 512 << 20);
        assert_eq!(byte_size("1g").unwrap(), 1 << 30);
        assert_eq!(byte_size("4096").unwrap(), 4096);
        assert!(byte_size("x").is_err());
        assert!(byte_size("0").is_err());
        assert_eq!(cpu_millis("0.5").unwrap(), 500);
        assert!(cpu_millis("0").is_err());
        assert!(cpu_millis("NaN").is_err());
        assert_eq!(uid_gid("1500:1600").unwrap(), (1500, 1600));
        assert_eq!(uid_gid("7").unwrap(), (7, 7));
        assert!(uid_gid("a:b").is_err());
        assert_eq!(key_value("A=b=c").unwrap(), ("A".into(), "b=c".into()));
        assert!(key_value("=x").is_err());
        assert!(key_value("x").is_err());
    }
}
