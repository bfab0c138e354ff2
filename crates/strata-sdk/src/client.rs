//! The daemon client: the daemon's API (`/v1/X`, crates/strata-daemon's
//! `api.rs`) over one of two transports. Direct: HTTP/1.1 over the
//! Sandbox's Unix socket with its bearer token (hyper). Through a server:
//! `strata serve` relays every daemon route of a Sandbox as
//! `/v1/sandboxes/{id}/X` with the same bodies (docs/server.md), reached
//! with the server's URL and token ([`Remote`]). Workspaces and execs
//! (workspace.rs, exec.rs) speak only this client, so they work the same
//! either way. A request goes on a connection an earlier one left open
//! and ready (pool.rs), so a long output stream, whose connection is not
//! ready until it ends, never blocks other calls.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use serde::Serialize;
use strata_daemon::api::{ErrorBody, ErrorCode};

use crate::error::{Error, Result};
use crate::pool::{Pool, SendError};
use crate::remote::Remote;

/// How requests reach the daemon.
#[derive(Clone)]
enum Via {
    /// Its Unix socket, with its own token, and the connections kept
    /// open to it (shared by the clones).
    Socket {
        socket: PathBuf,
        token: String,
        pool: Arc<Pool<Full<Bytes>>>,
    },
    /// `strata serve`'s relay: `/v1/X` is sent as `{prefix}/X`.
    Server { remote: Remote, prefix: String },
}

/// A client of one daemon.
#[derive(Clone)]
pub struct DaemonClient {
    via: Via,
    /// For messages ("sandbox sb-…").
    label: String,
    /// Log file to tail into `Error::Backend` (host path).
    log_file: Option<PathBuf>,
}

impl std::fmt::Debug for DaemonClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the token.
        let mut d = f.debug_struct("DaemonClient");
        match &self.via {
            Via::Socket { socket, .. } => d.field("socket", socket),
            Via::Server { remote, prefix } => d.field("server", remote).field("prefix", prefix),
        };
        d.field("label", &self.label).finish()
    }
}

impl DaemonClient {
    /// A client for the daemon listening on `socket`, authenticating with
    /// `token` (64 hex digits).
    pub fn new(socket: PathBuf, token: String, label: String, log_file: Option<PathBuf>) -> Self {
        DaemonClient {
            via: Via::Socket {
                socket,
                token,
                pool: Arc::new(Pool::new()),
            },
            label,
            log_file,
        }
    }

    /// A client for the daemon of Sandbox `sandbox_id` through the server
    /// `remote` (its relay, `/v1/sandboxes/{id}/X`).
    pub fn through_server(remote: Remote, sandbox_id: &str) -> Self {
        DaemonClient {
            via: Via::Server {
                remote,
                prefix: format!("/v1/sandboxes/{sandbox_id}"),
            },
            label: format!("sandbox {sandbox_id}"),
            log_file: None,
        }
    }

    /// The server this client goes through, if any.
    pub(crate) fn remote(&self) -> Option<&Remote> {
        match &self.via {
            Via::Server { remote, .. } => Some(remote),
            Via::Socket { .. } => None,
        }
    }

    /// The last `lines` of the daemon's log, read from the host side (works
    /// even when the daemon is dead).
    pub(crate) fn log_tail(&self, lines: usize) -> String {
        match &self.log_file {
            Some(p) => strata_daemon::tail_file(p, lines)
                .unwrap_or_else(|e| format!("(log {}: {e})", p.display())),
            None if self.remote().is_some() => {
                "(the daemon's log is on the server's host: Sandbox::logs, `strata sandbox logs`)"
                    .into()
            }
            None => "(no log file known)".into(),
        }
    }

    /// Send one request; returns the raw response (status unchecked).
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
        content_type: &str,
    ) -> Result<Response<Incoming>> {
        self.send_with(method, path, body, content_type, None).await
    }

    /// [`DaemonClient::send`] with an optional `Range` header.
    pub async fn send_with(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
        content_type: &str,
        range: Option<&str>,
    ) -> Result<Response<Incoming>> {
        let (socket, token, pool) = match &self.via {
            Via::Socket {
                socket,
                token,
                pool,
            } => (socket, token, pool),
            Via::Server { remote, prefix } => {
                let rest = path.strip_prefix("/v1").unwrap_or(path);
                let headers: Vec<(&str, &str)> = range.map(|r| ("range", r)).into_iter().collect();
                return remote
                    .send(
                        method,
                        &format!("{prefix}{rest}"),
                        body,
                        content_type,
                        &headers,
                    )
                    .await;
            }
        };
        let request = |method: Method, body: Bytes| {
            let mut req = Request::builder();
            if let Some(r) = range {
                req = req.header(hyper::header::RANGE, r);
            }
            req.method(method)
                .uri(path)
                .header(hyper::header::HOST, "strata-daemon")
                .header(hyper::header::AUTHORIZATION, format!("Bearer {token}"))
                .header(hyper::header::CONTENT_TYPE, content_type)
                .body(Full::new(body))
                .map_err(|e| self.proto(format!("building the request: {e}")))
        };
        let open = || async {
            let stream = tokio::net::UnixStream::connect(socket)
                .await
                .map_err(|e| {
                    Error::backend(
                        format!(
                            "{}: cannot connect to the daemon socket {}: {e} (is the Sandbox running? reopen it with Sandbox::open to see its state)",
                            self.label,
                            socket.display()
                        ),
                        self.log_tail(20),
                    )
                })?;
            let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| self.proto(format!("HTTP handshake: {e}")))?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            Ok::<_, Error>(sender)
        };
        let repeatable = method == Method::GET || method == Method::HEAD;
        let sent = match pool
            .send(request(method.clone(), body.clone())?, open)
            .await
        {
            // A GET or HEAD that lost a kept connection (the daemon closed
            // it as the request went out): once more on a new one.
            Err(SendError::Http { reused: true, .. }) if repeatable => {
                pool.send_fresh(request(method, body)?, open).await
            }
            other => other,
        };
        let resp = sent.map_err(|e| match e {
            SendError::Open(e) => e,
            SendError::Http { error, .. } => self.proto(format!("{path}: {error}")),
        })?;
        if resp.status() == StatusCode::UNAUTHORIZED {
            return Err(Error::Unauthorized {
                what: format!("the daemon of {} refused our token (401)", self.label),
                hint: "the token file of this Sandbox does not match its daemon; close and re-create the Sandbox".into(),
            });
        }
        Ok(resp)
    }

    pub(crate) fn proto(&self, what: String) -> Error {
        Error::backend(
            format!("{}: daemon request failed: {what}", self.label),
            self.log_tail(20),
        )
    }

    /// Send JSON (or nothing), expect JSON.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<T> {
        let bytes = match body {
            Some(b) => Bytes::from(serde_json::to_vec(b).expect("request serializes")),
            None => Bytes::new(),
        };
        let resp = self.send(method, path, bytes, "application/json").await?;
        self.json(resp).await
    }

    /// Parse a response: 2xx into `T`, anything else into a typed error.
    pub async fn json<T: DeserializeOwned>(&self, resp: Response<Incoming>) -> Result<T> {
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| self.proto(format!("reading the response: {e}")))?
            .to_bytes();
        if status.is_success() {
            return serde_json::from_slice(&body).map_err(|e| {
                self.proto(format!(
                    "unexpected response ({e}): {}",
                    String::from_utf8_lossy(&body)
                ))
            });
        }
        Err(self.error_from(status, &body))
    }

    pub(crate) fn error_from(&self, status: StatusCode, body: &[u8]) -> Error {
        let Ok(ErrorBody { error: d }) = serde_json::from_slice::<ErrorBody>(body) else {
            return self.proto(format!("HTTP {status}: {}", String::from_utf8_lossy(body)));
        };
        let hint = d.hint.clone().unwrap_or_default();
        let what = format!("{}: {}", self.label, d.message);
        match d.code {
            ErrorCode::NotFound => Error::not_found(what, hint),
            ErrorCode::Conflict => Error::Conflict {
                what,
                actual_head: d.actual_head.unwrap_or_default(),
                hint: if hint.is_empty() {
                    "unmount with discard and mount the branch again".into()
                } else {
                    hint
                },
                source: None,
            },
            ErrorCode::Busy | ErrorCode::StdinClosed | ErrorCode::Uncommitted => {
                Error::busy(what, hint)
            }
            ErrorCode::InvalidInput
            | ErrorCode::PathConflict
            | ErrorCode::PayloadTooLarge
            | ErrorCode::UnsupportedMediaType
            | ErrorCode::RangeNotSatisfiable => Error::invalid(what, hint),
            // The rest are `strata serve`'s codes, which a Sandbox daemon
            // does not send (the remote transport maps them, remote.rs):
            // as unknown codes, they say the daemon failed.
            ErrorCode::MountMoved
            | ErrorCode::Internal
            | ErrorCode::InvalidJson
            | ErrorCode::UnknownField
            | ErrorCode::Unauthorized
            | ErrorCode::Forbidden
            | ErrorCode::AlreadyExists
            | ErrorCode::Stopped
            | ErrorCode::Backend
            | ErrorCode::Other(_) => Error::backend(format!("{what} {hint}"), self.log_tail(20)),
        }
    }
}
