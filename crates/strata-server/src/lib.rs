//! strata-server: `strata serve`, one authenticated HTTP/JSON API under
//! `/v1` for one Store (docs/server.md). This crate is the axum router, its
//! state and the token store; the `strata` binary binds and runs it.
//!
//! Layering (ARCHITECTURE.md): above strata-sdk (Sandboxes) and
//! strata-store, below strata-cli. Every Store call runs on tokio's
//! blocking pool (SQLite is synchronous).
#![forbid(unsafe_code)]

/// The wire types (the strata-api crate, shared with the SDK).
pub use strata_api as api;
mod error;
mod listen;
pub mod openapi;
mod relay;
mod routes;
mod sandboxes;
mod scope;
mod tarball;
pub mod tls;
pub mod tokens;
mod write;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

pub use error::{ApiError, ServeError};
pub use listen::{Bound, Listen, ListenError};
pub use scope::Scope;
pub use tls::{TlsError, TlsServer, TlsSetup};
pub use tokens::{TokenError, TokenInfo, TokenStore};

/// Default largest request body (`--max-body-mib`).
pub const DEFAULT_MAX_BODY: usize = 64 << 20;

/// What the router serves.
pub struct ServerState {
    pub store: strata_store::Store,
    pub tokens: TokenStore,
    /// Largest request body in bytes; larger ones get 413.
    pub max_body: usize,
    /// The SDK's Sandbox state root (`None`: its default,
    /// `/var/lib/strata/sandboxes` as root).
    pub sandbox_root: Option<PathBuf>,
    /// The binary Sandboxes re-execute as their init, daemon and exec
    /// helper (`None`: this program, which must call
    /// `strata_sdk::maybe_run_internal` first in `main`).
    pub daemon_exe: Option<PathBuf>,
    /// The Store directory, canonical: only Sandboxes of this Store are
    /// served.
    pub(crate) store_dir: PathBuf,
    /// Daemon endpoints by Sandbox ID, so a relayed call does not reread
    /// the backend's record (dropped on restart, close and a refused
    /// connection).
    pub(crate) daemons: Mutex<HashMap<String, Arc<sandboxes::Daemon>>>,
    /// Set when the server shuts down: long streams (exec output, wait,
    /// WebSockets) end cleanly instead of holding the shutdown forever.
    pub(crate) shutdown: tokio::sync::watch::Sender<bool>,
}

impl ServerState {
    pub fn new(store: strata_store::Store, tokens: TokenStore, max_body: usize) -> ServerState {
        let store_dir = store
            .dir()
            .canonicalize()
            .unwrap_or_else(|_| store.dir().to_path_buf());
        ServerState {
            store,
            tokens,
            max_body,
            sandbox_root: None,
            daemon_exe: None,
            store_dir,
            daemons: Mutex::new(HashMap::new()),
            shutdown: tokio::sync::watch::channel(false).0,
        }
    }

    /// Resolves when the server begins to shut down.
    pub(crate) fn shutting_down(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.shutdown.subscribe();
        async move {
            let _ = rx.wait_for(|v| *v).await;
        }
    }
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
    let app = router(state.clone());
    // Tell the long streams first, so that the requests in flight can
    // finish and the graceful shutdown completes.
    let shutdown = async move {
        shutdown.await;
        state.shutdown.send_replace(true);
    };
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
        Bound::Tls { listener, addr } => axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(|source| ServeError::Io {
                action: "serve on",
                path: addr.to_string(),
                source,
            }),
    }
}
