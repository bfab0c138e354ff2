//! strata-api: the wire types of `strata serve` (docs/server.md). The
//! server (strata-server) and the SDK's remote transport (strata-sdk) both
//! use these, so only they know the wire format; docs/api/server-openapi.json
//! is generated from them and the server's routes. Object ids are 64 hex
//! digits.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;

pub mod error;
pub mod range;
pub use error::{ErrorBody, ErrorCode, ErrorDetail};
pub mod sandbox;
pub use sandbox::*;

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// `GET /v1/healthz`, the one route without a token.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Healthz {
    /// Always "ok".
    pub status: String,
}

/// `GET /v1/projects`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ProjectList {
    /// The projects this token sees, sorted.
    pub projects: Vec<String>,
}

/// `POST /v1/projects`: a project with an empty `main` branch.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateProject {
    /// `[a-z0-9][a-z0-9._-]{0,62}`, no "..".
    #[schema(pattern = r"^(?!.*\.\.)[a-z0-9][a-z0-9._-]{0,62}$")]
    pub name: String,
    /// The first (empty) commit's message.
    #[serde(default)]
    pub message: Option<String>,
}

/// A project and the head of its `main` branch.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Project {
    pub name: String,
    pub head: String,
}

/// One branch.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Branch {
    pub project: String,
    pub name: String,
    /// Commit id of the head.
    pub head: String,
}

/// `GET /v1/projects/{project}/branches`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct BranchList {
    pub branches: Vec<Branch>,
}

/// `POST /v1/projects/{project}/branches`: fork a branch in O(1).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateBranch {
    /// `[a-z0-9][a-z0-9._-]{0,62}`, no "..".
    #[schema(pattern = r"^(?!.*\.\.)[a-z0-9][a-z0-9._-]{0,62}$")]
    pub name: String,
    /// A branch of this project or a commit id (8 to 64 hex digits).
    #[schema(min_length = 1)]
    pub from: String,
}

/// A commit.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CommitInfo {
    pub id: String,
    pub tree: String,
    pub parents: Vec<String>,
    pub message: String,
    pub time_ns: i64,
    pub metadata: BTreeMap<String, String>,
    /// Bytes of all files in the commit, when its writer knew it.
    pub file_bytes: Option<u64>,
    /// Entries (files, directories, symlinks...) in the commit, when known.
    pub entries: Option<u64>,
}

/// `GET /v1/projects/{project}/log`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LogResponse {
    /// Newest first, along first parents.
    pub commits: Vec<CommitInfo>,
}

#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct LogQuery {
    /// A branch of this project or a commit id.
    #[serde(rename = "ref")]
    pub reference: String,
    /// At most this many commits (default 100, at most 10000).
    #[serde(default)]
    pub limit: Option<usize>,
}

#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DiffQuery {
    /// The older REF.
    pub from: String,
    /// The newer REF.
    pub to: String,
}

/// One changed path.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PathChange {
    pub path: String,
    /// The exact path in hex, when it is not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_hex: Option<String>,
    /// `added`, `modified`, `deleted` or `type_changed`.
    pub kind: String,
}

/// `GET /v1/projects/{project}/diff`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DiffResponse {
    /// The commit `from` names.
    pub from: String,
    /// The commit `to` names.
    pub to: String,
    pub changes: Vec<PathChange>,
}

#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PathQuery {
    /// A branch of this project or a commit id.
    #[serde(rename = "ref")]
    pub reference: String,
    /// Slash-separated path inside the commit (default: the root).
    #[serde(default)]
    pub path: Option<String>,
}

/// Query of `cat` and `stat`: a path is required.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct FileQuery {
    /// A branch of this project or a commit id.
    #[serde(rename = "ref")]
    pub reference: String,
    /// Slash-separated path inside the commit.
    #[param(min_length = 1)]
    pub path: String,
}

/// One entry of a tree.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Entry {
    /// The name (bytes that are not UTF-8 are shown as U+FFFD).
    pub name: String,
    /// `file`, `dir`, `symlink`, `fifo` or `socket`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Permission bits (`mode & 0o7777`).
    pub mode: u32,
    pub size: u64,
    pub uid: u32,
    pub gid: u32,
    pub mtime_ns: i64,
    /// A symlink's target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The exact name in hex, when it is not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_hex: Option<String>,
    /// The exact target in hex, when it is not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_hex: Option<String>,
    /// Hard-link group within the commit (entries with the same group are
    /// one inode); absent when not hard-linked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_group: Option<u64>,
    /// Names of the entry's extended attributes (`user.` namespace), when
    /// it has any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub xattrs: Vec<String>,
}

/// `GET /v1/projects/{project}/ls`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LsResponse {
    /// A directory's entries sorted by name, or the one entry a path names.
    pub entries: Vec<Entry>,
}

/// One change of a change set.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Change {
    /// Create or replace a regular file; give exactly one of `content`
    /// (UTF-8 text) and `content_base64`. Parent directories are created.
    Put {
        path: String,
        #[serde(default)]
        content: Option<String>,
        #[serde(default)]
        content_base64: Option<String>,
        /// Permission bits (default 0o644 = 420).
        #[serde(default, deserialize_with = "opt_mode")]
        #[schema(maximum = 4095)]
        mode: Option<u32>,
    },
    /// Create or replace a symlink (the target is stored verbatim).
    Symlink { path: String, target: String },
    /// Create a directory if missing.
    Mkdir {
        path: String,
        /// Permission bits (default 0o755 = 493).
        #[serde(default, deserialize_with = "opt_mode")]
        #[schema(maximum = 4095)]
        mode: Option<u32>,
    },
    /// Set the permission bits of an existing entry.
    Chmod {
        path: String,
        #[serde(deserialize_with = "mode")]
        #[schema(maximum = 4095)]
        mode: u32,
    },
    /// Remove an existing entry (a directory with everything in it).
    Delete { path: String },
}

/// Permission bits as JSON Schema's `integer` means them: `420` and
/// `420.0` alike (a number with no fraction is an integer there, and
/// clients in languages without integers send the latter).
fn mode<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    use serde::de::Error;
    let n = f64::deserialize(d)?;
    if n.fract() != 0.0 || !(0.0..=f64::from(u32::MAX)).contains(&n) {
        return Err(D::Error::custom(format!(
            "mode {n} is not a whole number of permission bits (0 to 4095, e.g. 420 for 0o644)"
        )));
    }
    Ok(n as u32)
}

fn opt_mode<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    #[derive(Deserialize)]
    struct Mode(#[serde(deserialize_with = "mode")] u32);
    Ok(Option::<Mode>::deserialize(d)?.map(|m| m.0))
}

/// `POST /v1/projects/{project}/branches/{branch}/commits`: one commit,
/// published only if the branch's head is still `expected_head`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangeSet {
    /// The head the changes are based on (64 hex digits).
    #[schema(pattern = "^[0-9a-f]{64}$")]
    pub expected_head: String,
    #[serde(default)]
    pub message: Option<String>,
    /// Applied in order; at least one.
    #[schema(min_items = 1)]
    pub changes: Vec<Change>,
}

/// The commit a change set made.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CommitResponse {
    pub project: String,
    pub branch: String,
    /// The new head.
    pub commit: String,
    pub tree: String,
    /// The head it replaced (`expected_head`).
    pub parent: String,
}
