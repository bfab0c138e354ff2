//! Kept HTTP/1.1 connections. The server's remote client ([`Remote`]),
//! the daemon client ([`DaemonClient`]) and `strata serve`'s relay to a
//! Sandbox's daemon send a request on a connection an earlier request
//! left open instead of a connect and an HTTP handshake for every request
//! (over TLS, a TLS handshake too); docs/benchmarks.md, "Kept
//! connections", has what that saves.
//!
//! The rules that keep this as safe as a connection per request:
//!
//! - Only a *ready* connection is handed out: hyper says so once the last
//!   response on it was read to its end and the connection is still
//!   open. One whose response body is still streaming (an exec's output,
//!   a large file) is never handed out, so a long stream never blocks
//!   another call: that call gets another connection.
//! - A connection is handed out only on the tokio runtime that drives it
//!   (its connection task runs there): another runtime may not be
//!   running at all (a current-thread runtime between two `block_on`s),
//!   and a request on its connection would wait forever.
//! - At most [`KEPT`] connections are kept, and one idle for longer than
//!   [`IDLE_FOR`] is closed rather than used (a peer or a proxy between
//!   may have dropped it by then).
//! - A request goes again on another connection only when it surely was
//!   not sent: hyper hands it back untouched when the connection turned
//!   out closed before the request was written to it. A request that was
//!   written and then lost its connection is the caller's error
//!   ([`SendError::Http`]), so a POST that creates something is never
//!   sent twice; a caller may send again a request that is safe to repeat
//!   (GET, HEAD) when it failed on a kept connection (`reused`), which is
//!   what a peer closing an idle connection just as the request went out
//!   looks like.
//!
//! [`Remote`]: crate::Remote
//! [`DaemonClient`]: crate::DaemonClient

use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hyper::body::{Body, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, Response};

/// Most connections a [`Pool`] keeps (ready or still streaming).
pub const KEPT: usize = 8;

/// A kept connection idle for longer than this is closed, not used.
pub const IDLE_FOR: Duration = Duration::from_secs(30);

struct Kept<B> {
    sender: SendRequest<B>,
    /// The runtime its connection task was spawned on.
    runtime: tokio::runtime::Id,
    /// When its last request got its response head.
    since: Instant,
}

/// The connections kept for one peer (a server, a daemon socket).
pub struct Pool<B> {
    kept: Mutex<Vec<Kept<B>>>,
}

impl<B> std::fmt::Debug for Pool<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.kept.lock().map(|k| k.len()).unwrap_or(0);
        f.debug_struct("Pool").field("kept", &n).finish()
    }
}

impl<B> Default for Pool<B> {
    fn default() -> Self {
        Pool {
            kept: Mutex::new(Vec::new()),
        }
    }
}

/// Why [`Pool::send`] failed.
#[derive(Debug)]
pub enum SendError<E> {
    /// Opening a new connection failed (connect, TLS, HTTP handshake):
    /// nothing was sent.
    Open(E),
    /// The request failed on a connection, perhaps after it was sent;
    /// `reused`: on a kept connection.
    Http {
        /// hyper's error.
        error: hyper::Error,
        /// Whether the connection was a kept one (not opened for it).
        reused: bool,
    },
}

fn current_runtime() -> Option<tokio::runtime::Id> {
    tokio::runtime::Handle::try_current().ok().map(|h| h.id())
}

impl<B> Pool<B>
where
    B: Body + 'static,
{
    /// An empty pool.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many connections are kept now (ready or still streaming).
    pub fn len(&self) -> usize {
        self.kept.lock().map(|k| k.len()).unwrap_or(0)
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A ready kept connection of this runtime, the most recently used
    /// first; closed and long-idle ones are dropped on the way.
    fn take(&self, runtime: tokio::runtime::Id) -> Option<SendRequest<B>> {
        let mut kept = self.kept.lock().ok()?;
        kept.retain(|k| !k.sender.is_closed() && k.since.elapsed() < IDLE_FOR);
        let i = kept
            .iter()
            .rposition(|k| k.runtime == runtime && k.sender.is_ready())?;
        Some(kept.remove(i).sender)
    }

    /// Keep `sender` (its response head just arrived; its body may still
    /// be streaming, and until it is read to the end the connection is
    /// not ready, so not handed out). The oldest goes when full: dropping
    /// a sender does not cut a response in flight on its connection.
    fn keep(&self, sender: SendRequest<B>, runtime: tokio::runtime::Id) {
        if sender.is_closed() {
            return;
        }
        let Ok(mut kept) = self.kept.lock() else {
            return;
        };
        kept.retain(|k| !k.sender.is_closed());
        if kept.len() >= KEPT {
            kept.remove(0);
        }
        kept.push(Kept {
            sender,
            runtime,
            since: Instant::now(),
        });
    }

    /// Send `req` on a ready kept connection, or on a new one from `open`
    /// (which connects, makes the HTTP/1 handshake and spawns the
    /// connection's task on the current runtime). A kept connection found
    /// closed before the request was written to it is passed over and the
    /// request tried on the next, or on a new one; any other failure is
    /// returned (module doc).
    pub async fn send<E, F, Fut>(
        &self,
        mut req: Request<B>,
        open: F,
    ) -> Result<Response<Incoming>, SendError<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<SendRequest<B>, E>>,
    {
        if let Some(runtime) = current_runtime() {
            while let Some(mut sender) = self.take(runtime) {
                // Let the runtime first read what came on the connection
                // while it sat idle: a peer that closed it (a restarted
                // server, a daemon that stopped) has left an end of file
                // that only the I/O driver reports, and a yield lets it
                // run (tokio wakes a yielding task after polling the
                // driver), so the connection reads as closed here instead
                // of failing with the request written to it.
                tokio::task::yield_now().await;
                if !sender.is_ready() {
                    continue;
                }
                match sender.try_send_request(req).await {
                    Ok(resp) => {
                        self.keep(sender, runtime);
                        return Ok(resp);
                    }
                    Err(mut e) => match e.take_message() {
                        // Not written: surely not sent.
                        Some(back) => req = back,
                        None => {
                            return Err(SendError::Http {
                                error: e.into_error(),
                                reused: true,
                            })
                        }
                    },
                }
            }
        }
        self.send_fresh(req, open).await
    }

    /// Send `req` on a new connection from `open` (kept afterwards like
    /// any other).
    pub async fn send_fresh<E, F, Fut>(
        &self,
        req: Request<B>,
        open: F,
    ) -> Result<Response<Incoming>, SendError<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<SendRequest<B>, E>>,
    {
        let mut sender = open().await.map_err(SendError::Open)?;
        let runtime = current_runtime();
        match sender.try_send_request(req).await {
            Ok(resp) => {
                if let Some(rt) = runtime {
                    self.keep(sender, rt);
                }
                Ok(resp)
            }
            Err(e) => Err(SendError::Http {
                error: e.into_error(),
                reused: false,
            }),
        }
    }
}
