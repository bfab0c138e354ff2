//! The wire types of the daemon's HTTP/JSON API (docs/api/openapi.yaml is
//! the language-neutral description of the same shapes). The SDK uses these
//! types directly, so a change here is a change of the published API.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Prefix of every route.
pub const API_PREFIX: &str = "/v1";

/// Content type of the exec output stream (one JSON object per line).
pub const NDJSON: &str = "application/x-ndjson";

/// A string id on the wire (`#[serde(transparent)]`: the JSON is the bare
/// string), typed so that a Workspace id is never passed where an exec id
/// is expected.
macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub String);

        impl $name {
            /// The id as sent.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                $name(s)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                $name(s.to_string())
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, o: &str) -> bool {
                self.0 == o
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, o: &&str) -> bool {
                self.0 == *o
            }
        }
    };
}

id_type!(
    /// A Workspace id (the name of its scratch directory), unique across
    /// Sandboxes and host mounts.
    WorkspaceId
);
id_type!(
    /// An exec id (`x` and 16 hex digits), unique across Sandboxes.
    ExecId
);

/// `GET /v1/health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// Always "ok" when the daemon answers.
    pub status: String,
    /// The daemon's pid (in its own PID namespace).
    pub pid: u32,
    /// Daemon version.
    pub version: String,
    /// Mounted Workspaces.
    pub workspaces: usize,
    /// Execs still running.
    pub running_execs: usize,
    /// Workspaces that were mounted when the previous daemon on this
    /// scratch directory ended and could not be mounted again at this
    /// start (their scratch is kept as it was). Empty when all were.
    #[serde(default)]
    pub unrecovered: Vec<UnrecoveredWorkspace>,
    /// The FUSE transport this daemon mounts with, as configured
    /// (`dev-fuse`, `auto` or `uring`; see `WorkspaceInfo::transport` for
    /// what a mount got). Absent from daemons older than the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fuse_transport: Option<String>,
}

/// A Workspace the daemon could not serve again at start (see
/// [`Health::unrecovered`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnrecoveredWorkspace {
    /// The Workspace ID (its scratch directory's name).
    pub id: WorkspaceId,
    /// Where it was mounted, if its record said.
    pub path: Option<String>,
    /// Why it could not be recovered.
    pub error: String,
}

/// `POST /v1/workspaces`: mount a Workspace of branch `ref`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MountRequest {
    /// `PROJECT/BRANCH`: the branch the Workspace projects and commits to.
    #[serde(rename = "ref")]
    pub reference: String,
    /// Absolute mount path inside the Sandbox (default: the daemon's
    /// `default_mount`, normally `/workspace`). Created if missing; must
    /// be empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
}

/// A mounted Workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceInfo {
    /// The ID.
    pub id: WorkspaceId,
    /// Where it is mounted (inside the Sandbox).
    pub path: String,
    /// `PROJECT/BRANCH`.
    pub branch: String,
    /// The commit the Workspace shows changes against (hex).
    pub base: String,
    /// What serves this mount's FUSE requests: `io_uring` or `/dev/fuse`
    /// (with `auto`, /dev/fuse where the kernel refused io_uring). Absent
    /// from daemons older than the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
}

/// One changed path of `GET /v1/workspaces/{id}/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeEntry {
    /// Slash-separated path relative to the Workspace root (lossy UTF-8
    /// for display; `path_b64` holds the exact bytes).
    pub path: String,
    /// The exact path bytes, base64 (standard alphabet).
    pub path_b64: String,
    /// `added`, `modified`, `deleted` or `type_changed`.
    pub kind: String,
}

/// `GET /v1/workspaces/{id}/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusResponse {
    /// The ID.
    pub id: WorkspaceId,
    /// The base commit (hex).
    pub base: String,
    /// Changed paths, sorted.
    pub changes: Vec<ChangeEntry>,
}

/// `POST /v1/workspaces/{id}/commit`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitRequest {
    /// The message.
    pub message: String,
}

/// What a commit did (`"committed"` or `"up_to_date"` on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A new commit was published; the branch moved.
    Committed,
    /// Nothing changed: nothing was written and the branch did not move.
    UpToDate,
}

impl Outcome {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Committed => "committed",
            Outcome::UpToDate => "up_to_date",
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Result of a commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitResponse {
    /// `committed` or `up_to_date` (nothing changed, nothing written).
    pub outcome: Outcome,
    /// The new head (committed) or the unchanged base (up_to_date), hex.
    pub commit: String,
    /// `PROJECT/BRANCH`.
    pub branch: String,
}

/// `POST /v1/workspaces/{id}/unmount`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnmountRequest {
    /// Also drop the uncommitted changes and the scratch directory. Without
    /// it the Workspace stays recoverable (its journal and upper layer are
    /// kept in the scratch directory under the same ID).
    #[serde(default)]
    pub discard: bool,
}

/// Result of an unmount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnmountResponse {
    /// The ID.
    pub id: WorkspaceId,
    /// Whether the uncommitted changes were dropped.
    pub discarded: bool,
}

/// The kind of a file in a live Workspace (`"file"`, `"dir"`, `"symlink"`,
/// `"other"` on the wire: a FIFO or socket a command made).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (never followed as the last component; see
    /// [`FileEntry::target`]).
    Symlink,
    /// Anything else (FIFO, socket).
    Other,
}

impl FileKind {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            FileKind::File => "file",
            FileKind::Dir => "dir",
            FileKind::Symlink => "symlink",
            FileKind::Other => "other",
        }
    }
}

impl std::fmt::Display for FileKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of a live Workspace: `GET /v1/workspaces/{id}/stat`, the
/// items of `GET .../ls`, and the result of `PUT .../files`,
/// `POST .../rename` and `POST .../mkdir`. What `lstat(2)` says: a
/// symlink is described, not its target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// The last component of the path (lossy UTF-8; `""` for the
    /// Workspace root; `name_b64` holds the exact bytes).
    pub name: String,
    /// The exact name bytes, base64 (standard alphabet).
    pub name_b64: String,
    /// `file`, `dir`, `symlink` or `other`.
    pub kind: FileKind,
    /// Size in bytes (of a symlink: the length of its target).
    pub size: u64,
    /// Permission bits (`st_mode & 0o7777`), e.g. 420 for 0644.
    pub mode: u32,
    /// Owner uid as the Workspace records it.
    pub uid: u32,
    /// Owner gid.
    pub gid: u32,
    /// Modification time, milliseconds since the Unix epoch.
    pub mtime_ms: i64,
    /// A symlink's target, verbatim (lossy UTF-8); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// `GET /v1/workspaces/{id}/ls?path=P`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListResponse {
    /// The directory listed, relative to the Workspace root (`""` = root).
    pub path: String,
    /// Its entries, sorted by name bytes, without `.` and `..`.
    pub entries: Vec<FileEntry>,
}

/// `POST /v1/workspaces/{id}/rename`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenameRequest {
    /// The existing path, relative to the Workspace root.
    pub from: String,
    /// The new path; an existing file (or empty directory, for a
    /// directory) there is replaced, as rename(2) does.
    pub to: String,
}

/// `POST /v1/workspaces/{id}/mkdir`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MkdirRequest {
    /// The directory to make, relative to the Workspace root.
    pub path: String,
    /// Also make missing parents, and succeed if the directory exists
    /// (`mkdir -p`).
    #[serde(default)]
    pub parents: bool,
}

/// `POST /v1/execs`: run one command (no shell).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
// Request bodies refuse unknown fields (422): a misspelled field (`usr`
// for `user`) must never be silently ignored and the request run anyway.
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    /// argv; `argv[0]` is a path or a name looked up in PATH. No NUL bytes;
    /// at most 1 MiB with env.
    pub argv: Vec<String>,
    /// The command's whole environment (nothing is inherited from the
    /// daemon). Names must be non-empty without '=' or NUL. PATH defaults
    /// to a standard one.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory, absolute; must be inside a mounted Workspace.
    /// Default: the path of `workspace` (or of the only mounted Workspace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Workspace ID the command works in (default: the only mounted one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<WorkspaceId>,
    /// `UID:GID`, default `1500:1500`; 0 is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Give the command a stdin pipe, fed by `POST /v1/execs/{id}/stdin`
    /// and closed by `POST /v1/execs/{id}/stdin/close` (EOF). Without it
    /// (and without `stdin_data`) stdin is /dev/null.
    #[serde(default)]
    pub stdin: bool,
    /// Bytes (base64) written to stdin at start. Then EOF, unless `stdin`
    /// is also true (the pipe stays open for more writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin_data: Option<String>,
    /// PTY mode for interactive programs: stdin, stdout and stderr are one
    /// pseudo-terminal (the command's controlling terminal, in a session of
    /// its own); all output arrives as `stdout` frames; stdin writes go to
    /// the terminal (closing stdin sends EOF, ^D).
    #[serde(default)]
    pub tty: bool,
    /// Terminal size `[rows, cols]` in PTY mode (default `[24, 80]`);
    /// change it later with `POST /v1/execs/{id}/resize`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tty_size: Option<[u16; 2]>,
    /// Cancel (SIGTERM, then SIGKILL after the grace period) after this
    /// many milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// Result of `POST /v1/execs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecCreated {
    /// The ID.
    pub id: ExecId,
    /// pid of the command (also its process group id).
    pub pid: u32,
}

/// How an exec ended: the one type for it on the wire and in the SDK
/// (`strata_sdk::ExitStatus` is this type). `strata_sandbox::Outcome` is the
/// same fact one level down, for a process the caller waited for itself;
/// it converts with `From`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitInfo {
    /// Exit code, when it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    /// Terminating signal number, when a signal ended it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// e.g. `SIGTERM`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal_name: Option<String>,
    /// It was cancelled by `POST /v1/execs/{id}/cancel`.
    #[serde(default)]
    pub cancelled: bool,
    /// It was cancelled because its timeout ran out.
    #[serde(default)]
    pub timed_out: bool,
}

impl ExitInfo {
    /// Exited with code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
    /// Shell convention: the code, or 128+N for signal N (255 if neither
    /// is known).
    pub fn shell_code(&self) -> i32 {
        self.code.or(self.signal.map(|s| 128 + s)).unwrap_or(255)
    }
}

impl From<strata_sandbox::Outcome> for ExitInfo {
    fn from(o: strata_sandbox::Outcome) -> Self {
        let (code, signal) = match o {
            strata_sandbox::Outcome::Exited(c) => (Some(c), None),
            strata_sandbox::Outcome::Signaled(s) => (None, Some(s)),
        };
        ExitInfo {
            code,
            signal,
            signal_name: signal.map(signal_name),
            cancelled: false,
            timed_out: false,
        }
    }
}

/// Why an exec never ran its program (e.g. ENOENT: not found in the
/// Sandbox). Never reported as a made-up exit status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecFailure {
    /// Where it failed (e.g. `exec`, `execve`, `chdir`, `seccomp`).
    pub stage: String,
    /// The message.
    pub message: String,
    /// errno, when an OS call failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno: Option<i32>,
    /// Symbolic errno, e.g. `ENOENT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno_name: Option<String>,
}

/// Where an exec is (`"running"`, `"exited"`, `"failed"` on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecState {
    /// The command runs.
    Running,
    /// The command ended (see [`ExecStatus::exit`]).
    Exited,
    /// The command never ran (see [`ExecStatus::failure`]).
    Failed,
}

impl ExecState {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ExecState::Running => "running",
            ExecState::Exited => "exited",
            ExecState::Failed => "failed",
        }
    }
}

impl std::fmt::Display for ExecState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `GET /v1/execs/{id}`, `GET /v1/execs/{id}/wait`, cancel result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecStatus {
    /// The ID.
    pub id: ExecId,
    /// pid (= process group) of the command.
    pub pid: u32,
    /// `running`, `exited` (see `exit`) or `failed` (see `failure`).
    pub state: ExecState,
    /// How it ended (state `exited`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<ExitInfo>,
    /// Why it never ran (state `failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<ExecFailure>,
    /// argv as requested.
    pub argv: Vec<String>,
    /// The Workspace it runs in.
    pub workspace: Option<WorkspaceId>,
    /// Milliseconds since the exec started (or its total run time).
    pub elapsed_ms: u64,
}

/// `POST /v1/execs/{id}/cancel`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    /// Milliseconds between SIGTERM and SIGKILL (default 2000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_ms: Option<u64>,
}

/// `POST /v1/execs/{id}/resize`: new terminal size of a PTY exec (the
/// command's foreground process group gets SIGWINCH from the kernel).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResizeRequest {
    /// Rows.
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

/// `POST /v1/execs/{id}/stdin` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StdinWritten {
    /// Bytes written.
    pub written: usize,
}

/// One line of the NDJSON output stream `GET /v1/execs/{id}/output`.
/// `seq` numbers start at 0 and increase by one per frame across both
/// streams, so the interleaving the daemon observed is preserved; within
/// one stream the order is the command's write order. The last frame is
/// `exit` or `error`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Frame {
    /// Bytes the command wrote to stdout.
    Stdout {
        /// Frame number, from 0, across both streams.
        seq: u64,
        /// The bytes, base64 (standard alphabet): lossless.
        data: String,
    },
    /// Bytes the command wrote to stderr.
    Stderr {
        /// Frame number, from 0, across both streams.
        seq: u64,
        /// The bytes, base64 (standard alphabet).
        data: String,
    },
    /// The final frame: how the command ended.
    Exit {
        /// Frame number, from 0, across both streams.
        seq: u64,
        /// How it ended.
        #[serde(flatten)]
        exit: ExitInfo,
    },
    /// The final frame: the command never ran.
    Error {
        /// Frame number, from 0, across both streams.
        seq: u64,
        /// Why it never ran.
        #[serde(flatten)]
        failure: ExecFailure,
    },
}

// The error body and its typed code are the same on the daemon's and on
// `strata serve`'s wire: one definition, in strata-api.
pub use strata_api::{ErrorBody, ErrorCode, ErrorDetail};

/// Name of a signal number (`SIGTERM`), or `SIG<n>`.
pub fn signal_name(sig: i32) -> String {
    let n = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGCHLD => "SIGCHLD",
        libc::SIGCONT => "SIGCONT",
        libc::SIGSTOP => "SIGSTOP",
        libc::SIGTSTP => "SIGTSTP",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("SIG{sig}"),
    };
    n.to_string()
}

/// Name of an errno (`ENOENT`) for the common ones, else `E<n>`.
pub fn errno_name(e: i32) -> String {
    let n = match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::E2BIG => "E2BIG",
        libc::ENOEXEC => "ENOEXEC",
        libc::EACCES => "EACCES",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::ENOMEM => "ENOMEM",
        libc::ETXTBSY => "ETXTBSY",
        libc::ELOOP => "ELOOP",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::ENOSYS => "ENOSYS",
        libc::EEXIST => "EEXIST",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::EXDEV => "EXDEV",
        libc::EBUSY => "EBUSY",
        _ => return format!("E{e}"),
    };
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The typed values keep the wire's exact strings (docs/api/openapi.yaml).
    #[test]
    fn typed_values_keep_their_wire_strings() {
        let codes = [
            (ErrorCode::InvalidInput, "invalid_input"),
            (ErrorCode::NotFound, "not_found"),
            (ErrorCode::Conflict, "conflict"),
            (ErrorCode::Busy, "busy"),
            (ErrorCode::StdinClosed, "stdin_closed"),
            (ErrorCode::Uncommitted, "uncommitted"),
            (ErrorCode::MountMoved, "mount_moved"),
            (ErrorCode::PathConflict, "path_conflict"),
            (ErrorCode::PayloadTooLarge, "payload_too_large"),
            (ErrorCode::UnsupportedMediaType, "unsupported_media_type"),
            (ErrorCode::RangeNotSatisfiable, "range_not_satisfiable"),
            (ErrorCode::Internal, "internal"),
            (
                ErrorCode::Other("from_the_future".into()),
                "from_the_future",
            ),
        ];
        for (c, s) in codes {
            let j = serde_json::to_string(&c).unwrap();
            assert_eq!(j, format!("\"{s}\""));
            assert_eq!(serde_json::from_str::<ErrorCode>(&j).unwrap(), c);
        }
        for (o, s) in [
            (Outcome::Committed, "committed"),
            (Outcome::UpToDate, "up_to_date"),
        ] {
            assert_eq!(serde_json::to_value(o).unwrap(), s);
            assert_eq!(o.to_string(), s);
        }
        let id: WorkspaceId = "w0123".into();
        assert_eq!(serde_json::to_value(&id).unwrap(), "w0123");
        assert_eq!(serde_json::from_str::<ExecId>("\"x9\"").unwrap(), "x9");
        for (e, s) in [
            (ExecState::Running, "running"),
            (ExecState::Exited, "exited"),
            (ExecState::Failed, "failed"),
        ] {
            assert_eq!(serde_json::to_value(e).unwrap(), s);
            assert_eq!(e.to_string(), s);
        }
    }
}
