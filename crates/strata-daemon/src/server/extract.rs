//! Extractors whose rejections are API errors (`{"error": {...}}`, as
//! docs/api/openapi.yaml says of every non-2xx answer but 401), instead of
//! axum's plain-text ones: 415 without `Content-Type: application/json`,
//! 400 for a body that is not JSON, 422 for JSON of the wrong shape
//! (unknown or missing fields, wrong types), 413 past the body limit, and
//! 400 for a bad query string or path segment.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::*;
use crate::api::ErrorCode;

/// `axum::Json` with API-error rejections.
pub(crate) struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;
    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(ApiJson(v)),
            Err(rej) => Err(json_rejection(rej)),
        }
    }
}

fn json_rejection(rej: JsonRejection) -> ApiError {
    let status = rej.status();
    let text = rej.body_text();
    match status {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            status,
            ErrorCode::PayloadTooLarge,
            format!("the request body is larger than the daemon accepts ({MAX_JSON_BODY} bytes)"),
        ),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::new(
            status,
            ErrorCode::UnsupportedMediaType,
            "the body must be JSON sent with `Content-Type: application/json`",
        ),
        StatusCode::UNPROCESSABLE_ENTITY => ApiError::new(
            status,
            ErrorCode::InvalidInput,
            format!("request body: {text}"),
        )
        .hint("docs/api/openapi.yaml lists the fields each request accepts"),
        _ if status.is_client_error() => {
            ApiError::invalid(format!("request body: {text}")).hint("send valid JSON")
        }
        _ => ApiError::internal(text),
    }
}

/// `axum::extract::Query` with a 400 API error as its rejection.
pub(crate) struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| ApiQuery(q.0))
            .map_err(|e| {
                ApiError::invalid(format!("query string: {}", e.body_text()))
                    .hint("docs/api/openapi.yaml lists the query parameters of each route")
            })
    }
}

/// `axum::extract::Path` with a 400 API error as its rejection (a path
/// segment that is not UTF-8 once percent-decoded).
pub(crate) struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        UrlPath::<T>::from_request_parts(parts, state)
            .await
            .map(|p| ApiPath(p.0))
            .map_err(|e| ApiError::invalid(format!("URL path: {}", e.body_text())))
    }
}

/// The raw body (`axum::body::Bytes`) with API-error rejections: 413 past
/// the body limit, 400 for a body that broke off.
pub(crate) struct ApiBytes(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for ApiBytes {
    type Rejection = ApiError;
    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        Bytes::from_request(req, state)
            .await
            .map(ApiBytes)
            .map_err(|rej| {
                if rej.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::new(
                        rej.status(),
                        ErrorCode::PayloadTooLarge,
                        format!("the request body is larger than the daemon accepts ({MAX_JSON_BODY} bytes)"),
                    )
                } else {
                    ApiError::invalid(format!("request body: {}", rej.body_text()))
                }
            })
    }
}
