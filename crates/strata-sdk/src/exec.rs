//! Exec: one command in a Workspace, through the daemon (B7).

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::Method;
use strata_daemon::api::{self, ExecCreated, Frame};
use tokio::sync::{mpsc, oneshot};

use crate::client::DaemonClient;
use crate::error::{Error, Result};

/// How a command ended: the daemon's wire type itself (code or signal,
/// cancelled, timed out), with `success()` and `shell_code()`.
pub use strata_daemon::api::ExitInfo as ExitStatus;

/// Collected result of [`ExecBuilder::output`].
#[derive(Debug, Clone)]
pub struct Output {
    /// The exec ID the daemon gave it.
    pub exec_id: String,
    /// Everything the command wrote to stdout.
    pub stdout: Vec<u8>,
    /// Everything the command wrote to stderr.
    pub stderr: Vec<u8>,
    /// How it ended.
    pub status: ExitStatus,
}

impl Output {
    /// stdout as (lossy) UTF-8.
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    /// stderr as (lossy) UTF-8.
    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// Builder of one exec, from [`crate::Workspace::exec`].
///
/// ```no_run
/// # async fn f(ws: &strata_sdk::Workspace) -> strata_sdk::Result<()> {
/// let out = ws.exec(["sh", "-c", "echo hi; exit 3"]).env("A", "b").output().await?;
/// assert_eq!(out.stdout, b"hi\n");
/// assert_eq!(out.status.code, Some(3));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ExecBuilder {
    pub(crate) client: DaemonClient,
    pub(crate) workspace: api::WorkspaceId,
    pub(crate) req: api::ExecRequest,
    pub(crate) env: BTreeMap<String, String>,
}

impl ExecBuilder {
    /// Set one environment variable (the command inherits nothing else;
    /// PATH has a default).
    pub fn env(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
        self.env.insert(k.into(), v.into());
        self
    }
    /// Working directory: absolute, inside the Workspace (default: its root).
    pub fn cwd(mut self, dir: impl Into<String>) -> Self {
        self.req.cwd = Some(dir.into());
        self
    }
    /// Run as `uid:gid` (default 1500:1500; 0 is refused).
    pub fn user(mut self, uid: u32, gid: u32) -> Self {
        self.req.user = Some(format!("{uid}:{gid}"));
        self
    }
    /// Feed these bytes to stdin, then EOF.
    pub fn stdin_bytes(mut self, data: impl AsRef<[u8]>) -> Self {
        self.req.stdin_data = Some(base64::engine::general_purpose::STANDARD.encode(data));
        self
    }
    /// Keep a stdin pipe open for [`ExecHandle::stdin`] (spawn only).
    pub fn stdin_pipe(mut self) -> Self {
        self.req.stdin = true;
        self
    }
    /// PTY mode: stdin, stdout and stderr are one pseudo-terminal (the
    /// command's controlling terminal); all output comes on stdout;
    /// closing stdin sends the terminal's EOF (^D).
    pub fn tty(mut self) -> Self {
        self.req.tty = true;
        self
    }
    /// PTY mode with this terminal size (rows, columns).
    pub fn tty_size(mut self, rows: u16, cols: u16) -> Self {
        self.req.tty = true;
        self.req.tty_size = Some([rows, cols]);
        self
    }
    /// Cancel after this long (SIGTERM, SIGKILL after a grace period).
    pub fn timeout(mut self, t: Duration) -> Self {
        self.req.timeout_ms = Some(t.as_millis() as u64);
        self
    }

    async fn create(&self) -> Result<ExecCreated> {
        let mut req = self.req.clone();
        req.env = self.env.clone();
        req.workspace = Some(self.workspace.clone());
        self.client
            .call(Method::POST, "/v1/execs", Some(&req))
            .await
    }

    /// Run to the end, collecting stdout, stderr and the exit status.
    /// A command that could not start (e.g. ENOENT) is
    /// [`Error::ExecFailed`], never an exit status.
    pub async fn output(self) -> Result<Output> {
        let created = self.create().await?;
        let mut out = Output {
            exec_id: created.id.to_string(),
            stdout: Vec::new(),
            stderr: Vec::new(),
            status: ExitStatus::default(),
        };
        let mut stream = FrameStream::open(&self.client, &created.id, true).await?;
        while let Some(f) = stream.next().await? {
            match f {
                Decoded::Stdout(b) => out.stdout.extend_from_slice(&b),
                Decoded::Stderr(b) => out.stderr.extend_from_slice(&b),
                Decoded::Exit(e) => {
                    out.status = e;
                    return Ok(out);
                }
                Decoded::Failed(f) => return Err(exec_failed(&created.id, f)),
            }
        }
        Err(self.client.proto(format!(
            "output stream of exec {} ended without an exit frame",
            created.id
        )))
    }

    /// Start and return at once, without attaching the output (a detached
    /// exec: `strata exec --detach`). The output waits in the daemon's
    /// bounded buffer (then the command blocks: backpressure) until
    /// [`ExecHandle::attach`] reads it; [`ExecHandle::wait`] and
    /// [`ExecHandle::cancel`] work from any process ([`crate::Sandbox::exec_by_id`]).
    pub async fn start(self) -> Result<ExecHandle> {
        let has_stdin = self.req.stdin;
        let created = self.create().await?;
        Ok(ExecHandle {
            client: self.client.clone(),
            id: created.id.clone(),
            pid: created.pid,
            stdout: None,
            stderr: None,
            stdin: has_stdin.then(|| ExecStdin {
                client: self.client.clone(),
                id: created.id,
                closed: false,
            }),
            done: None,
        })
    }

    /// Start and return a handle with separate stdout and stderr streams.
    /// Output not read yet is buffered in this process; read the streams
    /// (or drop them) as the command runs.
    pub async fn spawn(self) -> Result<ExecHandle> {
        let mut h = self.start().await?;
        h.attach(true).await?;
        Ok(h)
    }
}

fn exec_failed(id: &str, f: api::ExecFailure) -> Error {
    Error::ExecFailed {
        exec_id: id.to_string(),
        stage: f.stage,
        message: f.message,
        errno: f.errno,
        errno_name: f.errno_name,
    }
}

enum Decoded {
    Stdout(Bytes),
    Stderr(Bytes),
    Exit(ExitStatus),
    Failed(api::ExecFailure),
}

/// The NDJSON output stream, decoded.
struct FrameStream {
    client: DaemonClient,
    body: hyper::body::Incoming,
    buf: Vec<u8>,
}

impl FrameStream {
    async fn open(client: &DaemonClient, id: &str, follow: bool) -> Result<FrameStream> {
        let resp = client
            .send(
                Method::GET,
                &format!("/v1/execs/{id}/output?follow={follow}"),
                Bytes::new(),
                "application/json",
            )
            .await?;
        if !resp.status().is_success() {
            let status = resp.status();
            let body = resp
                .into_body()
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            return Err(client.error_from(status, &body));
        }
        Ok(FrameStream {
            client: client.clone(),
            body: resp.into_body(),
            buf: Vec::new(),
        })
    }

    async fn next(&mut self) -> Result<Option<Decoded>> {
        loop {
            if let Some(nl) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=nl).collect();
                let f: Frame = serde_json::from_slice(&line[..nl]).map_err(|e| {
                    self.client.proto(format!(
                        "bad output frame ({e}): {}",
                        String::from_utf8_lossy(&line)
                    ))
                })?;
                let b64 = base64::engine::general_purpose::STANDARD;
                let dec = |d: String| {
                    b64.decode(d)
                        .map(Bytes::from)
                        .map_err(|e| self.client.proto(format!("bad base64 in a frame: {e}")))
                };
                return Ok(Some(match f {
                    Frame::Stdout { data, .. } => Decoded::Stdout(dec(data)?),
                    Frame::Stderr { data, .. } => Decoded::Stderr(dec(data)?),
                    Frame::Exit { exit, .. } => Decoded::Exit(exit),
                    Frame::Error { failure, .. } => Decoded::Failed(failure),
                }));
            }
            match self.body.frame().await {
                None => return Ok(None),
                Some(Err(e)) => return Err(self.client.proto(format!("output stream: {e}"))),
                Some(Ok(fr)) => {
                    if let Ok(d) = fr.into_data() {
                        self.buf.extend_from_slice(&d);
                    }
                }
            }
        }
    }
}

/// How many chunks (each at most the daemon's 64 KiB frame) of one stream
/// wait for a caller who does not read: beyond that, [`ExecHandle::attach`]'s
/// reader stops reading the daemon's response, the daemon's own bounded
/// buffer fills and the command blocks in `write` (back-pressure end to
/// end, as with a pipe). So an unread stream holds at most ~1 MiB here.
const STREAM_CHUNKS: usize = 16;

/// One output stream (stdout or stderr) of a spawned exec: a
/// [`futures_core::Stream`] of chunks and a [`tokio::io::AsyncRead`].
///
/// Its buffer is bounded: a command that writes more than ~1 MiB that
/// nobody reads waits until it is read (see `STREAM_CHUNKS`). stdout and
/// stderr share one connection to the daemon, so a caller that reads one
/// stream to its end while the command floods the other must read both
/// concurrently (`tokio::join!`), or drop the one it does not want (a
/// dropped stream's output is discarded), as with the pipes of a child
/// process.
#[derive(Debug)]
pub struct ExecStream {
    rx: mpsc::Receiver<Bytes>,
    /// What an `AsyncRead` caller has not consumed yet of the last chunk.
    pending: Bytes,
}

impl ExecStream {
    fn new(rx: mpsc::Receiver<Bytes>) -> ExecStream {
        ExecStream {
            rx,
            pending: Bytes::new(),
        }
    }

    /// The next chunk, in the command's write order; `None` at the end.
    pub async fn next(&mut self) -> Option<Bytes> {
        if !self.pending.is_empty() {
            return Some(std::mem::take(&mut self.pending));
        }
        self.rx.recv().await
    }
    /// Everything until the end.
    pub async fn read_to_end(&mut self) -> Vec<u8> {
        let mut v = Vec::new();
        while let Some(b) = self.next().await {
            v.extend_from_slice(&b);
        }
        v
    }
}

impl futures_core::Stream for ExecStream {
    type Item = Bytes;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Bytes>> {
        if !self.pending.is_empty() {
            return std::task::Poll::Ready(Some(std::mem::take(&mut self.pending)));
        }
        self.rx.poll_recv(cx)
    }
}

impl tokio::io::AsyncRead for ExecStream {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        while self.pending.is_empty() {
            match self.rx.poll_recv(cx) {
                // End of stream: a read of 0 bytes.
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Ready(Some(b)) => self.pending = b,
                Poll::Pending => return Poll::Pending,
            }
        }
        let n = self.pending.len().min(buf.remaining());
        let chunk = self.pending.split_to(n);
        buf.put_slice(&chunk);
        Poll::Ready(Ok(()))
    }
}

/// The stdin of a spawned exec (see [`ExecBuilder::stdin_pipe`]).
/// Dropping it sends EOF.
#[derive(Debug)]
pub struct ExecStdin {
    client: DaemonClient,
    id: api::ExecId,
    closed: bool,
}

impl ExecStdin {
    /// Write bytes (all of them, in order).
    pub async fn write(&mut self, data: impl Into<Bytes>) -> Result<usize> {
        let resp = self
            .client
            .send(
                Method::POST,
                &format!("/v1/execs/{}/stdin", self.id),
                data.into(),
                "application/octet-stream",
            )
            .await?;
        let w: api::StdinWritten = self.client.json(resp).await?;
        Ok(w.written)
    }
    /// Close: the command reads EOF.
    pub async fn close(mut self) -> Result<()> {
        self.closed = true;
        let _: api::ExecStatus = self
            .client
            .call(
                Method::POST,
                &format!("/v1/execs/{}/stdin/close", self.id),
                None::<&()>,
            )
            .await?;
        Ok(())
    }
}

impl Drop for ExecStdin {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let client = self.client.clone();
            let path = format!("/v1/execs/{}/stdin/close", self.id);
            rt.spawn(async move {
                let _ = client
                    .send(Method::POST, &path, Bytes::new(), "application/json")
                    .await;
            });
        }
    }
}

/// A running exec from [`ExecBuilder::spawn`].
#[derive(Debug)]
pub struct ExecHandle {
    client: DaemonClient,
    id: api::ExecId,
    pid: u32,
    /// stdout, in order. Take it with `handle.stdout.take()`.
    pub stdout: Option<ExecStream>,
    /// stderr, in order.
    pub stderr: Option<ExecStream>,
    /// stdin (with [`ExecBuilder::stdin_pipe`]); dropping it sends EOF.
    pub stdin: Option<ExecStdin>,
    done: Option<oneshot::Receiver<Result<ExitStatus>>>,
}

impl ExecHandle {
    /// A handle on an exec found by ID (no streams attached, no stdin).
    pub(crate) fn by_id(client: DaemonClient, st: &api::ExecStatus) -> ExecHandle {
        ExecHandle {
            client,
            id: st.id.clone(),
            pid: st.pid,
            stdout: None,
            stderr: None,
            stdin: None,
            done: None,
        }
    }

    /// Another handle on the same exec, without streams or stdin: to
    /// resize, cancel or wait from another task.
    pub fn handle_clone(&self) -> ExecHandle {
        ExecHandle {
            client: self.client.clone(),
            id: self.id.clone(),
            pid: self.pid,
            stdout: None,
            stderr: None,
            stdin: None,
            done: None,
        }
    }

    /// The exec ID (for `strata exec-cancel` and friends).
    pub fn id(&self) -> &str {
        &self.id
    }
    /// pid (= process group) of the command inside the Sandbox.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Attach to the output: fills [`ExecHandle::stdout`] and
    /// [`ExecHandle::stderr`] with the output not handed out yet (the
    /// daemon hands each chunk out once, to one reader at a time). With
    /// `follow` the streams run to the command's end; without, they end
    /// once what is buffered now has been read.
    pub async fn attach(&mut self, follow: bool) -> Result<()> {
        let mut stream = FrameStream::open(&self.client, &self.id, follow).await?;
        let (otx, orx) = mpsc::channel(STREAM_CHUNKS);
        let (etx, erx) = mpsc::channel(STREAM_CHUNKS);
        let (done_tx, done_rx) = oneshot::channel();
        let client = self.client.clone();
        let id = self.id.clone();
        tokio::spawn(async move {
            let end = loop {
                match stream.next().await {
                    // Waits while the caller's buffer is full: the
                    // back-pressure. A dropped stream's output is discarded.
                    Ok(Some(Decoded::Stdout(b))) => {
                        let _ = otx.send(b).await;
                    }
                    Ok(Some(Decoded::Stderr(b))) => {
                        let _ = etx.send(b).await;
                    }
                    Ok(Some(Decoded::Exit(e))) => break Ok(e),
                    Ok(Some(Decoded::Failed(f))) => break Err(exec_failed(&id, f)),
                    // A snapshot ended before the command did: no status
                    // yet; `wait` asks the daemon instead.
                    Ok(None) if !follow => return,
                    Ok(None) => {
                        break Err(client.proto(format!(
                            "output stream of exec {id} ended without an exit frame"
                        )))
                    }
                    Err(e) => break Err(e),
                }
            };
            let _ = done_tx.send(end);
        });
        self.stdout = Some(ExecStream::new(orx));
        self.stderr = Some(ExecStream::new(erx));
        self.done = Some(done_rx);
        Ok(())
    }

    /// The status now: `None` while the command runs.
    pub async fn try_status(&self) -> Result<Option<ExitStatus>> {
        let st: api::ExecStatus = self
            .client
            .call(Method::GET, &format!("/v1/execs/{}", self.id), None::<&()>)
            .await?;
        match st.state {
            api::ExecState::Running => Ok(None),
            _ => status_result(&self.id, st).map(Some),
        }
    }

    /// Wait for the end. Closes stdin first if still open (like
    /// `std::process::Child::wait`).
    pub async fn wait(&mut self) -> Result<ExitStatus> {
        if let Some(s) = self.stdin.take() {
            s.close().await?;
        }
        match self.done.take() {
            Some(rx) => match rx.await {
                Ok(r) => r,
                Err(_) => self.wait_api().await,
            },
            None => self.wait_api().await,
        }
    }

    async fn wait_api(&self) -> Result<ExitStatus> {
        let st: api::ExecStatus = self
            .client
            .call(
                Method::GET,
                &format!("/v1/execs/{}/wait", self.id),
                None::<&()>,
            )
            .await?;
        status_result(&self.id, st)
    }

    /// Resize the terminal of a PTY exec (the command gets SIGWINCH).
    pub async fn resize(&self, rows: u16, cols: u16) -> Result<()> {
        let _: api::ExecStatus = self
            .client
            .call(
                Method::POST,
                &format!("/v1/execs/{}/resize", self.id),
                Some(&api::ResizeRequest { rows, cols }),
            )
            .await?;
        Ok(())
    }

    /// Cancel this one exec: SIGTERM to its process group, SIGKILL after
    /// the grace period (default 2 s). Returns the final status with the
    /// signal that ended it.
    pub async fn cancel(&mut self) -> Result<ExitStatus> {
        let st: api::ExecStatus = self
            .client
            .call(
                Method::POST,
                &format!("/v1/execs/{}/cancel", self.id),
                Some(&api::CancelRequest::default()),
            )
            .await?;
        let r = status_result(&self.id, st);
        self.done = None;
        r
    }
}

fn status_result(id: &str, st: api::ExecStatus) -> Result<ExitStatus> {
    match (st.state, st.exit, st.failure) {
        (api::ExecState::Exited, Some(e), _) => Ok(e),
        (api::ExecState::Failed, _, Some(f)) => Err(exec_failed(id, f)),
        _ => Err(Error::busy(
            format!("exec {id} is still running"),
            "wait longer or cancel it",
        )),
    }
}
