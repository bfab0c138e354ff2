//! The error body every route of the daemon and of `strata serve`
//! answers with, `{"error": {"code", "message", ...}}`, and its typed code.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The body of every error response: `{"error": {...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// What failed.
    pub error: ErrorDetail,
}

/// What failed and what to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable machine-readable code: `invalid_input`, `invalid_json`,
    /// `unknown_field`, `unauthorized`, `forbidden`, `not_found`,
    /// `conflict`, `already_exists`, `busy`, `stdin_closed`, `uncommitted`,
    /// `mount_moved`, `path_conflict`, `stopped`, `payload_too_large`,
    /// `unsupported_media_type`, `range_not_satisfiable`, `backend`,
    /// `internal`; a client keeps a code it does not know as it was sent.
    #[schema(value_type = String)]
    pub code: ErrorCode,
    /// One sentence: what failed.
    pub message: String,
    /// What to do about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// For `conflict`: the branch head that won the race (hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actual_head: Option<String>,
    /// The OS error number, where one decided the answer (an exec that
    /// failed, a file operation's `path_conflict`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno: Option<i32>,
}

/// The machine-readable code of an error response: a string on the wire
/// (`"not_found"`), typed here so that the daemon, `strata serve` and the
/// SDK match on variants, never on spelled-out strings. A code this
/// version does not know (a newer peer's) is kept as it was sent, in
/// [`ErrorCode::Other`]. The status each API gives a code is in its own
/// document (docs/api/openapi.yaml for the daemon, docs/server.md for
/// `strata serve`); where they differ it is said below.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// `invalid_input` (400; 422 from `strata serve` for unknown, missing
    /// or mistyped fields): the request was refused before anything ran.
    InvalidInput,
    /// `invalid_json` (400, `strata serve`): the body is not JSON.
    InvalidJson,
    /// `unknown_field` (422, `strata serve`): a field the route does not
    /// take.
    UnknownField,
    /// `unauthorized` (401): no token, a wrong one or a revoked one.
    Unauthorized,
    /// `forbidden` (403, `strata serve`): outside the token's projects.
    Forbidden,
    /// `not_found` (404): no such Workspace, exec or branch.
    NotFound,
    /// `conflict` (409): a commit lost a race; see `actual_head`.
    Conflict,
    /// `already_exists` (409, `strata serve`): a project or branch by
    /// that name exists.
    AlreadyExists,
    /// `busy`: in use, retrying may work: 409 from the daemon (a lock, a
    /// mount path, an attached output stream); 503 from `strata serve`
    /// when another process holds the Store's write lock.
    Busy,
    /// `stdin_closed` (409): the exec has no open stdin.
    StdinClosed,
    /// `uncommitted` (409): unmount without discard of a Workspace with
    /// changes.
    Uncommitted,
    /// `mount_moved` (409): the mount path changed while being mounted.
    MountMoved,
    /// `stopped` (409, `strata serve`): the Sandbox's daemon does not
    /// answer.
    Stopped,
    /// `path_conflict` (409): a file operation on a live Workspace met a
    /// path in the wrong state (exists, is or is not a directory, a
    /// non-empty directory, a symlink where none is followed); `errno`
    /// says which.
    PathConflict,
    /// `payload_too_large` (413): the body is over the daemon's limit.
    PayloadTooLarge,
    /// `unsupported_media_type` (415): a JSON body without
    /// `Content-Type: application/json`.
    UnsupportedMediaType,
    /// `range_not_satisfiable` (416): the `Range` starts past the end.
    RangeNotSatisfiable,
    /// `backend` (502, `strata serve`): the backend could not start a
    /// Sandbox (the message has the daemon's log tail).
    Backend,
    /// `internal` (500): the daemon or the server failed.
    Internal,
    /// A code this version does not know, as sent.
    Other(String),
}

impl ErrorCode {
    /// The wire spelling.
    pub fn as_str(&self) -> &str {
        match self {
            ErrorCode::InvalidInput => "invalid_input",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Conflict => "conflict",
            ErrorCode::Busy => "busy",
            ErrorCode::StdinClosed => "stdin_closed",
            ErrorCode::Uncommitted => "uncommitted",
            ErrorCode::MountMoved => "mount_moved",
            ErrorCode::PathConflict => "path_conflict",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ErrorCode::RangeNotSatisfiable => "range_not_satisfiable",
            ErrorCode::Internal => "internal",
            ErrorCode::InvalidJson => "invalid_json",
            ErrorCode::UnknownField => "unknown_field",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::AlreadyExists => "already_exists",
            ErrorCode::Stopped => "stopped",
            ErrorCode::Backend => "backend",
            ErrorCode::Other(s) => s,
        }
    }

    /// From the wire spelling (anything unknown is [`ErrorCode::Other`]).
    pub fn parse(s: &str) -> ErrorCode {
        match s {
            "invalid_input" => ErrorCode::InvalidInput,
            "not_found" => ErrorCode::NotFound,
            "conflict" => ErrorCode::Conflict,
            "busy" => ErrorCode::Busy,
            "stdin_closed" => ErrorCode::StdinClosed,
            "uncommitted" => ErrorCode::Uncommitted,
            "mount_moved" => ErrorCode::MountMoved,
            "path_conflict" => ErrorCode::PathConflict,
            "payload_too_large" => ErrorCode::PayloadTooLarge,
            "unsupported_media_type" => ErrorCode::UnsupportedMediaType,
            "range_not_satisfiable" => ErrorCode::RangeNotSatisfiable,
            "internal" => ErrorCode::Internal,
            "invalid_json" => ErrorCode::InvalidJson,
            "unknown_field" => ErrorCode::UnknownField,
            "unauthorized" => ErrorCode::Unauthorized,
            "forbidden" => ErrorCode::Forbidden,
            "already_exists" => ErrorCode::AlreadyExists,
            "stopped" => ErrorCode::Stopped,
            "backend" => ErrorCode::Backend,
            other => ErrorCode::Other(other.to_string()),
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Ok(ErrorCode::parse(&s))
    }
}
