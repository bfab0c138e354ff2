//! strata-server: `strata serve`, one authenticated HTTP/JSON API under
//! `/v1` for one Store (docs/server.md). This crate is the axum router, its
//! state and the token store; the `strata` binary binds and runs it.
//!
//! Layering (ARCHITECTURE.md): above strata-store, below strata-cli. Every
//! Store call runs on tokio's blocking pool (SQLite is synchronous).
#![forbid(unsafe_code)]

/// The wire types (the strata-api crate, shared with the SDK).
pub use strata_api as api;
mod error;
mod listen;
pub mod openapi;
mod routes;
mod scope;
mod tarball;
pub mod tokens;
mod write;

use std::sync::Arc;

pub use error::{ApiError, ServeError};
pub use listen::{Bound, Listen, ListenError};
pub use scope::Scope;
pub use tokens::{TokenError, TokenInfo, TokenStore};

/// Default largest request body (`--max-body-mib`).
pub const DEFAULT_MAX_BODY: usize = 64 << 20;

/// What the router serves.
pub struct ServerState {
    pub store: strata_store::Store,
    pub tokens: TokenStore,
    /// Largest request body in bytes; larger ones get 413.
    pub max_body: usize,
}

/// The router: every route under `/v1`, authentication included.
pub fn router(state: Arc<ServerState>) -> axum::Router {
    routes::router(state)
}

/// Serve `bound` until `shutdown` resolves, then stop accepting, let the
/// requests in flight finish, and remove a Unix socket file.
pub async fn run(
    bound: Bound,
    state: Arc<ServerState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let app = router(state);
    match bound {
        Bound::Unix { listener, path } => {
            let r = axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await;
            let _ = std::fs::remove_file(&path);
            r.map_err(|source| ServeError::Io {
                action: "serve on",
                path: path.display().to_string(),
                source,
            })
        }
        Bound::Tcp { listener, addr } => axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(|source| ServeError::Io {
                action: "serve on",
                path: addr.to_string(),
                source,
            }),
    }
}
