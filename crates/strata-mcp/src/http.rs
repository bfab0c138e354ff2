//! `strata mcp --http ADDR`: the same tools over streamable HTTP at `/mcp`,
//! on a loopback address only (no TLS here), every request authenticated
//! by `Authorization: Bearer TOKEN` before the MCP layer sees it.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::backend::Backend;
use crate::error::ServeError;
use crate::server::{close_all, Shared, StrataMcp};
use crate::state::{Caller, Registry};

/// Verifies bearer tokens. `strata mcp` plugs in the Store's token store
/// (`strata token create`), so one token works for `strata serve` and
/// `strata mcp --http` alike, with the same project scope.
pub trait Authenticator: Send + Sync + 'static {
    /// The caller a presented token stands for; `Ok(None)` for a token
    /// that is unknown, revoked or malformed (the client is not told which).
    fn verify(&self, bearer: &str) -> Result<Option<Caller>, String>;
}

/// Where and how to serve.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// A loopback address (`127.0.0.1:PORT`, `[::1]:PORT`; port 0 picks one).
    pub addr: String,
}

fn unauthorized(msg: &str) -> Response {
    let body = serde_json::json!({ "error": { "code": "unauthorized", "message": msg } });
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer realm=\"strata\"")],
        axum::Json(body),
    )
        .into_response()
}

async fn authenticate(
    State(auth): State<Arc<dyn Authenticator>>,
    mut req: Request,
    next: Next,
) -> Response {
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let Some(token) = presented else {
        return unauthorized(
            "missing bearer token: send `Authorization: Bearer TOKEN` with a token from `strata token create`",
        );
    };
    match auth.verify(token) {
        Ok(Some(caller)) => {
            req.extensions_mut().insert(caller);
            next.run(req).await
        }
        Ok(None) => unauthorized(
            "the bearer token is not valid (unknown, revoked or malformed): make one with `strata token create`",
        ),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(serde_json::json!({ "error": { "code": "unavailable", "message": e } })),
        )
            .into_response(),
    }
}

/// Serve until SIGTERM or Ctrl-C, then close the Sandboxes the clients
/// created (those with uncommitted changes are left running and named on
/// stderr). `on_ready` gets the bound address once the port is open.
pub async fn serve_http(
    backend: Backend,
    opts: HttpOptions,
    auth: Arc<dyn Authenticator>,
    on_ready: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    let addr: SocketAddr = opts.addr.parse().map_err(|_| ServeError::NotLoopback {
        addr: opts.addr.clone(),
    })?;
    if !addr.ip().is_loopback() {
        return Err(ServeError::NotLoopback { addr: opts.addr });
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind {
            addr: opts.addr.clone(),
            source,
        })?;
    let bound = listener.local_addr().map_err(|source| ServeError::Bind {
        addr: opts.addr.clone(),
        source,
    })?;
    let shared = Arc::new(Shared {
        backend,
        registry: Registry::default(),
        authenticated: true,
    });
    let ct = CancellationToken::new();
    let factory_shared = shared.clone();
    let service: StreamableHttpService<StrataMcp, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(StrataMcp::with_shared(factory_shared.clone())),
        Default::default(),
        StreamableHttpServerConfig::default().with_cancellation_token(ct.child_token()),
    );
    let app = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(auth, authenticate));
    on_ready(bound);
    let stop = ct.clone();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| ServeError::Transport {
            transport: "http",
            message: e.to_string(),
        })?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        stop.cancel();
    });
    let r = axum::serve(listener, app)
        .with_graceful_shutdown(async move { ct.cancelled_owned().await })
        .await;
    close_all(&shared).await;
    r.map_err(|e| ServeError::Transport {
        transport: "http",
        message: e.to_string(),
    })
}
