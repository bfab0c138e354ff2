//! The tools' arguments. Each struct's doc comments become the JSON schema
//! an agent reads (schemars), so they say what a value means and what to
//! give.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxCreate {
    /// Optional unique name (letters, digits, `-`, `_`, `.`).
    #[serde(default)]
    pub name: Option<String>,
    /// Labels to find the Sandbox by later (`strata sandbox list --label`).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// `none` (default: loopback only, no internet) or `host` (the host's network).
    #[serde(default)]
    pub network: Option<String>,
    /// Memory limit in MiB (default: half of the host's RAM).
    #[serde(default)]
    pub memory_mib: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxClose {
    /// The ID `sandbox_create` returned.
    pub sandbox_id: String,
    /// Drop uncommitted changes of its Workspaces. Without it, closing a
    /// Sandbox whose Workspaces hold uncommitted changes is refused (commit first).
    #[serde(default)]
    pub discard: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceMount {
    /// The ID `sandbox_create` returned.
    pub sandbox_id: String,
    /// The branch to work on, `PROJECT/BRANCH` (make one with `fork` first
    /// to keep `main` untouched). Commits go to this branch.
    pub branch: String,
    /// Absolute mount path inside the Sandbox (default `/workspace`).
    #[serde(default)]
    pub path: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Run {
    /// The ID `workspace_mount` returned.
    pub workspace_id: String,
    /// A shell command line, run as `sh -c COMMAND` (pipes, `&&`, redirections work).
    #[serde(default)]
    pub command: Option<String>,
    /// Alternatively the program and its arguments, run without a shell.
    #[serde(default)]
    pub argv: Option<Vec<String>>,
    /// Working directory: relative to the Workspace root, or absolute inside it (default: the root).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Seconds before the command is stopped (SIGTERM, then SIGKILL). Default 600.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// Bytes to feed to the command's stdin (then EOF). Default: empty stdin.
    #[serde(default)]
    pub stdin: Option<String>,
    /// Environment variables to set (nothing else is inherited; PATH has a default).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFile {
    /// The ID `workspace_mount` returned.
    pub workspace_id: String,
    /// File path relative to the Workspace root (absolute paths are paths inside the Sandbox).
    pub path: String,
    /// First line to return, 1-based (default 1).
    #[serde(default)]
    pub offset: Option<usize>,
    /// How many lines to return (default: all, up to 256 KiB).
    #[serde(default)]
    pub limit: Option<usize>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFile {
    /// The ID `workspace_mount` returned.
    pub workspace_id: String,
    /// File path relative to the Workspace root; missing parent directories are created.
    pub path: String,
    /// The whole new content of the file (replaces what was there).
    pub content: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditFile {
    /// The ID `workspace_mount` returned.
    pub workspace_id: String,
    /// File path relative to the Workspace root.
    pub path: String,
    /// The exact text to replace (whitespace and indentation included). It
    /// must occur exactly once unless `replace_all` is set: include enough
    /// surrounding lines to make it unique.
    pub old_string: String,
    /// The replacement text (may be empty to delete).
    pub new_string: String,
    /// Replace every occurrence instead of requiring exactly one.
    #[serde(default)]
    pub replace_all: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListFiles {
    /// The ID `workspace_mount` returned.
    pub workspace_id: String,
    /// Directory relative to the Workspace root (default: the root).
    #[serde(default)]
    pub path: Option<String>,
    /// List the whole subtree instead of one level.
    #[serde(default)]
    pub recursive: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Glob {
    /// The ID `workspace_mount` returned.
    pub workspace_id: String,
    /// Glob over paths relative to `path`: `*` and `?` stay inside one
    /// directory, `**/` spans directories, `[abc]` a set; e.g. `**/*.rs`, `src/*.py`.
    pub pattern: String,
    /// Directory to search, relative to the Workspace root (default: the root).
    #[serde(default)]
    pub path: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Grep {
    /// The ID `workspace_mount` returned.
    pub workspace_id: String,
    /// Extended regular expression (POSIX ERE, `grep -E`).
    pub pattern: String,
    /// File or directory to search, relative to the Workspace root (default: the root).
    #[serde(default)]
    pub path: Option<String>,
    /// Only files whose name matches this glob, e.g. `*.rs`.
    #[serde(default)]
    pub include: Option<String>,
    /// Case-insensitive.
    #[serde(default)]
    pub ignore_case: bool,
    /// At most this many matching lines (default 200).
    #[serde(default)]
    pub max_results: Option<usize>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceOnly {
    /// The ID `workspace_mount` returned.
    pub workspace_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Commit {
    /// The ID `workspace_mount` returned.
    pub workspace_id: String,
    /// The commit message: what changed and why.
    pub message: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Diff {
    /// The older REF: `PROJECT/BRANCH` or a commit id (8+ hex digits).
    pub from: String,
    /// The newer REF: `PROJECT/BRANCH` or a commit id.
    pub to: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Log {
    /// `PROJECT/BRANCH` or a commit id.
    #[serde(rename = "ref")]
    pub reference: String,
    /// At most this many commits, newest first (default 20).
    #[serde(default)]
    pub limit: Option<usize>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Fork {
    /// Where the new branch starts: `PROJECT/BRANCH` or a commit id.
    pub from: String,
    /// The new branch, `PROJECT/BRANCH` (same project as `from`'s history).
    pub new: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Restore {
    /// The ID `workspace_mount` returned; it stays valid.
    pub workspace_id: String,
    /// Commit id (or `PROJECT/BRANCH`) whose files the Workspace should
    /// hold. Default: the branch head, i.e. just discard uncommitted changes.
    #[serde(default, rename = "ref")]
    pub reference: Option<String>,
}
