//! Errors: of the server process ([`ServeError`]) and of one request
//! ([`ApiError`], rendered as `{"error": {"code", "message"}}` with an HTTP
//! status, the shape of the Sandbox daemon's API).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use strata_store::StoreError;

use crate::api::{ErrorBody, ErrorCode, ErrorDetail};

/// The server could not bind or serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("strata serve: could not {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("strata serve: {path} is already served by a running server; stop it or pass another --listen")]
    InUse { path: String },
    #[error(transparent)]
    Listen(#[from] crate::listen::ListenError),
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
}

/// A failed request. The body and its typed code are strata-api's, as the
/// daemon's are; the two crates keep their own status-and-body pair
/// because their Store errors map differently by contract (`busy` is 503
/// here, docs/server.md, and 409 on the daemon, docs/api/openapi.yaml) and
/// because this crate's routes rely on `?` converting a `StoreError`,
/// which only a type of this crate may implement.
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
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, ErrorCode::InvalidInput, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, ErrorCode::NotFound, message)
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

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        let msg = e.to_string();
        match e {
            StoreError::NotFound { .. } => ApiError::not_found(msg),
            StoreError::InvalidName { .. }
            | StoreError::Invalid(_)
            | StoreError::AmbiguousRef { .. } => ApiError::invalid(msg),
            StoreError::AlreadyExists { .. } => {
                ApiError::new(StatusCode::CONFLICT, ErrorCode::AlreadyExists, msg)
            }
            StoreError::Conflict { actual, .. } => {
                let mut a = ApiError::new(
                    StatusCode::CONFLICT,
                    ErrorCode::Conflict,
                    format!("{msg}; nothing was written. Read the branch again and resend the change set with expected_head set to the actual head"),
                );
                a.detail.actual_head = Some(actual.to_hex());
                a
            }
            // Not the client's mistake: another process holds the lock.
            StoreError::Busy { .. } => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Busy, msg)
            }
            _ => ApiError::internal(msg),
        }
    }
}
