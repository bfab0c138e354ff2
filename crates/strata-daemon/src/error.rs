//! Errors: of the daemon process ([`DaemonError`]) and of one request
//! ([`ApiError`], rendered as `{"error": {...}}` with an HTTP status).

use std::path::PathBuf;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::api::{ErrorBody, ErrorCode, ErrorDetail};

/// The daemon could not start or serve.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("daemon config {path}: {message}")]
    Config { path: PathBuf, message: String },
    #[error("daemon: could not {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("daemon: opening the Store: {0}")]
    Store(#[from] strata_store::StoreError),
    #[error("daemon: usage: {0}")]
    Usage(String),
}

/// A failed request.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub detail: ErrorDetail,
}

impl ApiError {
    pub fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            detail: ErrorDetail {
                code,
                message: message.into(),
                hint: None,
                actual_head: None,
                errno: None,
            },
        }
    }
    pub fn hint(mut self, h: impl Into<String>) -> Self {
        self.detail.hint = Some(h.into());
        self
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, ErrorCode::InvalidInput, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, ErrorCode::NotFound, message)
    }
    pub fn busy(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, ErrorCode::Busy, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::Internal,
            message,
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(ErrorBody { error: self.detail })).into_response()
    }
}

/// Map a Workspace error to a status and a code.
pub fn ws_error(e: strata_workspace::WsError) -> ApiError {
    use strata_workspace::WsError as W;
    match e {
        W::Conflict {
            branch,
            base,
            actual,
        } => {
            let mut a = ApiError::new(
                StatusCode::CONFLICT,
                ErrorCode::Conflict,
                format!("branch {branch} moved: the workspace is based on {base} but the head is now {actual}; nothing was committed"),
            )
            .hint("unmount with discard and mount the branch again to continue from the new head");
            a.detail.actual_head = Some(actual.to_hex());
            a
        }
        W::NotABranch { reference } => ApiError::invalid(format!(
            "{reference:?} is not a branch: a workspace needs PROJECT/BRANCH"
        )),
        W::Invalid(m) => ApiError::invalid(m),
        W::Mountpoint { path, reason } => {
            ApiError::invalid(format!("cannot mount at {}: {reason}", path.display()))
        }
        W::Locked { .. } | W::Mounted { .. } => ApiError::busy(e.to_string()),
        W::NotFound { .. } => ApiError::not_found(e.to_string()),
        W::Store { ref source, .. } => store_status(source, e.to_string()),
        other => ApiError::internal(other.to_string()),
    }
}

/// Map a Store error to a status and a code.
pub fn store_error(e: strata_store::StoreError) -> ApiError {
    let msg = e.to_string();
    store_status(&e, msg)
}

fn store_status(s: &strata_store::StoreError, msg: String) -> ApiError {
    use strata_store::StoreError as S;
    match s {
        S::NotFound { .. } => ApiError::not_found(msg),
        S::InvalidName { .. } | S::Invalid(_) | S::AmbiguousRef { .. } => ApiError::invalid(msg),
        S::Busy { .. } => ApiError::busy(msg).hint("retry shortly"),
        S::Conflict { actual, .. } => {
            let mut a = ApiError::new(StatusCode::CONFLICT, ErrorCode::Conflict, msg);
            a.detail.actual_head = Some(actual.to_hex());
            a
        }
        _ => ApiError::internal(msg),
    }
}
