//! Execs: one command per exec, started through strata-sandbox's
//! single-threaded `__strata-exec` helper (the daemon is multi-threaded and
//! never drops privileges itself), in a process group of its own so that a
//! cancel reaches the command and everything it started.
//!
//! Output rule (documented in the OpenAPI file too): stdout and stderr are
//! read as they are produced into frames with one sequence number across
//! both streams. Undelivered frames are buffered up to a bound per exec
//! (`output_buffer_bytes`, default 4 MiB); when the buffer is full the
//! daemon stops reading the pipes, so a chatty command blocks in write(2)
//! (backpressure) instead of growing the daemon's memory or losing bytes.
//! A frame leaves the buffer when it is handed to the one attached output
//! stream. A client that disconnects mid-exec does **not** cancel the exec:
//! it keeps running, its output waits in the buffer (then backpressure),
//! and a new `GET /v1/execs/{id}/output` resumes with the first frame not
//! yet handed out. Only frames already written to the dropped connection
//! can be lost. Every command is waited for by the daemon (no zombie); its
//! orphans are reaped by the Sandbox's init (PID 1).

use crate::child::{reap_later, Child};
use rustix::process::{Pid, Signal};
use std::collections::VecDeque;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::{Duration, Instant};

use base64::Engine;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

use crate::api::{self, ExecFailure, ExitInfo, Frame};

/// Read size of the pipe readers.
const CHUNK: usize = 64 * 1024;
/// How long to keep reading the pipes after the command exited (a
/// background process may hold them open).
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(500);
/// Default SIGTERM -> SIGKILL grace period.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
pub(crate) enum End {
    Exited(ExitInfo),
    Failed(ExecFailure),
}

#[derive(Debug)]
struct Buffered {
    stream: u8, // 1 stdout, 2 stderr
    seq: u64,
    data: bytes::Bytes,
}

#[derive(Debug, Default)]
struct Inner {
    frames: VecDeque<Buffered>,
    bytes: usize,
    next_seq: u64,
    end: Option<End>,
    /// The final frame was handed to a stream.
    end_delivered: bool,
    attached: bool,
    cancelled: bool,
    timed_out: bool,
    finished_at: Option<Instant>,
}

/// One exec.
pub struct Exec {
    pub id: String,
    pub pid: u32,
    pub argv: Vec<String>,
    pub workspace: Option<String>,
    tty: bool,
    /// The PTY master (a dup), for resizes.
    pty: Option<std::fs::File>,
    started: Instant,
    bound: usize,
    inner: Mutex<Inner>,
    /// Woken when frames arrive or the exec ends.
    data: Notify,
    /// Woken when buffer space frees up.
    space: Notify,
    /// Woken when the exec ends.
    done: Notify,
    #[allow(clippy::type_complexity)]
    stdin: Arc<tokio::sync::Mutex<Option<Writer>>>,
    kill_sent: AtomicBool,
}

type Reader = Box<dyn AsyncRead + Send + Unpin>;
type Writer = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;

/// A pseudo-terminal pair: (master, slave), both close-on-exec (the slave
/// is dup'ed onto the command's 0/1/2 by the spawn).
fn open_pty() -> std::io::Result<(std::fs::File, std::fs::File)> {
    use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
    grantpt(&master)?;
    unlockpt(&master)?;
    let name = ptsname(&master, Vec::new())?;
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(std::ffi::OsStr::from_bytes(name.as_bytes()))?;
    Ok((std::fs::File::from(master), slave))
}

impl std::fmt::Debug for Exec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exec")
            .field("id", &self.id)
            .field("pid", &self.pid)
            .field("argv", &self.argv)
            .finish()
    }
}

/// Set a terminal's size.
fn set_winsize(fd: &std::fs::File, rows: u16, cols: u16) -> std::io::Result<()> {
    rustix::termios::tcsetwinsize(
        fd,
        rustix::termios::Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        },
    )?;
    Ok(())
}

/// What to run, validated by the caller.
pub(crate) struct Launch {
    pub id: String,
    pub argv: Vec<String>,
    pub env: Vec<(OsString, OsString)>,
    pub cwd: PathBuf,
    pub identity: strata_sandbox::Identity,
    pub helper_exe: PathBuf,
    pub stdin_pipe: bool,
    pub stdin_data: Option<Vec<u8>>,
    pub tty: bool,
    pub tty_size: Option<[u16; 2]>,
    pub timeout: Option<Duration>,
    pub workspace: Option<String>,
    pub bound: usize,
    /// A helper started ahead of this exec (crate::prestart), if one waits.
    pub prestarted: Option<crate::prestart::Ready>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum LaunchError {
    #[error("{0}")]
    Spec(String),
    #[error("starting the exec helper {exe}: {source}")]
    Spawn {
        exe: PathBuf,
        source: std::io::Error,
    },
}

/// A started helper (soon the command) and our ends of its pipes.
struct Started {
    child: Child,
    /// The read end of the helper's report pipe.
    report: std::os::fd::OwnedFd,
    stdout: Reader,
    stderr: Option<Reader>,
    stdin: Option<Writer>,
    /// The PTY master (a dup), for resizes.
    pty: Option<std::fs::File>,
}

/// Why a waiting helper did not take the command.
enum HandOff {
    /// The command is refused (bad spec): the exec fails.
    Refused(String),
    /// The helper is gone or the hand-off failed before anything ran: the
    /// exec starts a helper of its own.
    Gone(String),
}

/// Give the command to a helper started ahead of it, with pipes for its
/// stdio (stdin /dev/null unless wanted), as [`spawn_helper`] would. A
/// helper that did not take it (its socket is closed by then, so it exits
/// if it still runs) is reaped in the background.
fn hand_to_waiting(
    ready: crate::prestart::Ready,
    spec: &strata_sandbox::ExecSpec,
    want_stdin: bool,
) -> Result<Started, HandOff> {
    let crate::prestart::Ready { child, helper } = ready;
    match hand_over(helper, spec, want_stdin) {
        Ok((report, stdout, stderr, stdin)) => Ok(Started {
            child: Child::Waiting(child),
            report,
            stdout,
            stderr: Some(stderr),
            stdin,
            pty: None,
        }),
        Err(e) => {
            reap_later(child);
            Err(e)
        }
    }
}

/// The hand-off itself: the report pipe, stdout, stderr and stdin.
fn hand_over(
    helper: strata_sandbox::Prestarted,
    spec: &strata_sandbox::ExecSpec,
    want_stdin: bool,
) -> Result<(std::os::fd::OwnedFd, Reader, Reader, Option<Writer>), HandOff> {
    use std::os::fd::{AsFd, OwnedFd};
    let gone = |what: &str, e: std::io::Error| HandOff::Gone(format!("{what}: {e}"));
    let (out_r, out_w) = std::io::pipe().map_err(|e| gone("stdout pipe", e))?;
    let (err_r, err_w) = std::io::pipe().map_err(|e| gone("stderr pipe", e))?;
    let (their_in, our_in): (OwnedFd, Option<OwnedFd>) = if want_stdin {
        let (r, w) = std::io::pipe().map_err(|e| gone("stdin pipe", e))?;
        (r.into(), Some(w.into()))
    } else {
        let null = std::fs::File::open("/dev/null").map_err(|e| gone("/dev/null", e))?;
        (null.into(), None)
    };
    let report = helper
        .hand(spec, their_in.as_fd(), out_w.as_fd(), err_w.as_fd())
        .map_err(|e| match e {
            strata_sandbox::HandError::Spec(e) => HandOff::Refused(e.to_string()),
            other => HandOff::Gone(other.to_string()),
        })?;
    // The command's ends are the command's alone now: without our copies
    // the readers see EOF when it (and whatever inherited them) is done.
    drop((their_in, out_w, err_w));
    let reader = |fd: OwnedFd, what: &str| -> Result<Reader, HandOff> {
        Ok(Box::new(
            tokio::net::unix::pipe::Receiver::from_owned_fd(fd).map_err(|e| gone(what, e))?,
        ))
    };
    let stdin = match our_in {
        Some(w) => Some(Box::new(
            tokio::net::unix::pipe::Sender::from_owned_fd(w).map_err(|e| gone("stdin", e))?,
        ) as Writer),
        None => None,
    };
    Ok((
        report.into_fd(),
        reader(out_r.into(), "stdout")?,
        reader(err_r.into(), "stderr")?,
        stdin,
    ))
}

/// Start a helper for this exec (the daemon forks, the helper binary
/// starts, joins the commands' cgroup and runs the command).
fn spawn_helper(
    exe: &std::path::Path,
    spec: &strata_sandbox::ExecSpec,
    tty: bool,
    tty_size: Option<[u16; 2]>,
    want_stdin: bool,
) -> Result<Started, LaunchError> {
    let strata_sandbox::HelperCommand {
        command: mut std_cmd,
        report,
    } = strata_sandbox::exec_helper_command(exe, spec)
        .map_err(|e| LaunchError::Spec(e.to_string()))?;
    let spawn_err = |source| LaunchError::Spawn {
        exe: exe.to_path_buf(),
        source,
    };
    let mut master: Option<std::fs::File> = None;
    if tty {
        let (m, slave) = open_pty().map_err(spawn_err)?;
        let [rows, cols] = tty_size.unwrap_or([24, 80]);
        set_winsize(&m, rows, cols).map_err(spawn_err)?;
        let s2 = slave.try_clone().map_err(spawn_err)?;
        let s3 = slave.try_clone().map_err(spawn_err)?;
        std_cmd
            .stdin(Stdio::from(slave))
            .stdout(Stdio::from(s2))
            .stderr(Stdio::from(s3));
        master = Some(m);
    } else {
        std::os::unix::process::CommandExt::process_group(&mut std_cmd, 0);
        std_cmd
            .stdin(if want_stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
    }
    let mut cmd = tokio::process::Command::from(std_cmd);
    cmd.kill_on_drop(false);
    // The spawn forks this process: smaller is cheaper (release_free_heap).
    strata_sandbox::release_free_heap();
    let mut child = cmd.spawn().map_err(spawn_err)?;
    // Our copies of the slave go with `cmd`: the master then reads EOF
    // (EIO) once the command's side is closed. So does our copy of the
    // report pipe's write end: the report then ends (EOF) at the
    // command's execve or the helper's exit.
    drop(cmd);
    let pty = match &master {
        Some(m) => Some(m.try_clone().map_err(spawn_err)?),
        None => None,
    };
    let (stdout, stderr, stdin): (Reader, Option<Reader>, Option<Writer>) = match master {
        Some(m) => {
            let w = m.try_clone().map_err(spawn_err)?;
            (
                Box::new(tokio::fs::File::from_std(m)),
                None,
                Some(Box::new(tokio::fs::File::from_std(w))),
            )
        }
        None => (
            Box::new(child.stdout.take().expect("piped")),
            Some(Box::new(child.stderr.take().expect("piped"))),
            child.stdin.take().map(|s| Box::new(s) as Writer),
        ),
    };
    Ok(Started {
        child: Child::Spawned(child),
        report: report.into_fd(),
        stdout,
        stderr,
        stdin,
        pty,
    })
}

impl Exec {
    /// Start the command and the tasks that read its output and wait for it.
    pub(crate) fn start(l: Launch) -> Result<Arc<Exec>, LaunchError> {
        let spec = strata_sandbox::ExecSpec {
            argv: l.argv.iter().map(OsString::from).collect(),
            env: l.env,
            cwd: l.cwd,
            identity: l.identity,
            rlimits: Vec::new(),
            // Pipes: the process group is made at the helper's spawn
            // (process_group(0), below, or when a waiting helper was started,
            // crate::prestart), before the helper runs, so the pgid is the
            // pid from the first instant. PTY: the helper calls setsid (a new session and
            // group, pgid = pid) and takes the terminal as controlling tty.
            session: if l.tty {
                strata_sandbox::Session::NewSessionWithTty
            } else {
                strata_sandbox::Session::Inherit
            },
        };
        let want_stdin = l.stdin_pipe || l.stdin_data.is_some();
        // A helper waiting ahead of this exec (crate::prestart), if there
        // is one; a terminal needs the helper's setsid, which a process
        // group leader cannot call, so it starts a helper of its own.
        let started = match l.prestarted.filter(|_| !l.tty) {
            Some(ready) => match hand_to_waiting(ready, &spec, want_stdin) {
                Ok(s) => Some(s),
                Err(HandOff::Refused(m)) => return Err(LaunchError::Spec(m)),
                Err(HandOff::Gone(e)) => {
                    tracing::info!(
                        "the waiting exec helper is gone ({e}); starting one for this exec"
                    );
                    None
                }
            },
            None => None,
        };
        let Started {
            mut child,
            report,
            stdout,
            stderr,
            stdin,
            pty,
        } = match started {
            Some(s) => s,
            None => spawn_helper(&l.helper_exe, &spec, l.tty, l.tty_size, want_stdin)?,
        };
        let report = tokio::net::unix::pipe::Receiver::from_owned_fd(report).map_err(|source| {
            LaunchError::Spawn {
                exe: l.helper_exe.clone(),
                source,
            }
        })?;
        // The helper's failure report, if any: read as it comes, bounded,
        // with async IO (never a blocking read on a runtime worker), from
        // a pipe only the helper holds (never a path a command can touch).
        let report = tokio::spawn(async move {
            let mut buf = Vec::new();
            let _ = report
                .take(strata_sandbox::internal::MAX_REPORT_BYTES as u64 + 1)
                .read_to_end(&mut buf)
                .await;
            buf
        });
        let pid = child.id().unwrap_or(0);
        let exec = Arc::new(Exec {
            id: l.id,
            pid,
            argv: l.argv,
            workspace: l.workspace,
            tty: l.tty,
            pty,
            started: Instant::now(),
            bound: l.bound.max(CHUNK),
            inner: Mutex::new(Inner::default()),
            data: Notify::new(),
            space: Notify::new(),
            done: Notify::new(),
            stdin: Arc::new(tokio::sync::Mutex::new(None)),
            kill_sent: AtomicBool::new(false),
        });
        // stdin: initial data, then EOF unless the caller keeps it open.
        // The pipe's lock is taken before this returns, so a later write
        // through the API always follows the initial data.
        if let Some(mut s) = stdin {
            let mut guard = exec
                .stdin
                .clone()
                .try_lock_owned()
                .expect("nobody else has this exec yet");
            match l.stdin_data {
                Some(data) => {
                    let keep = l.stdin_pipe;
                    tokio::spawn(async move {
                        let _ = s.write_all(&data).await;
                        if keep {
                            *guard = Some(s);
                        }
                        // else: dropping `s` closes the pipe (EOF).
                    });
                }
                None => *guard = Some(s),
            }
        }
        let exec2 = exec.clone();
        let r1 = tokio::spawn(read_pipe(exec.clone(), stdout, 1));
        let r2 = tokio::spawn(async move {
            if let Some(e) = stderr {
                read_pipe(exec2, e, 2).await
            }
        });
        let e = exec.clone();
        let timeout = l.timeout;
        tokio::spawn(async move {
            let status = match timeout {
                None => child.wait().await,
                Some(t) => match tokio::time::timeout(t, child.wait()).await {
                    Ok(s) => s,
                    Err(_) => {
                        e.inner.lock().timed_out = true;
                        e.signal_group(Signal::TERM);
                        let e2 = e.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(DEFAULT_GRACE).await;
                            if !e2.is_finished() {
                                e2.signal_group(Signal::KILL);
                            }
                        });
                        child.wait().await
                    }
                },
            };
            // Drain what the command wrote before it ended; a background
            // process holding the pipes open does not hold the exec up.
            let drain = async {
                let _ = r1.await;
                let _ = r2.await;
            };
            if tokio::time::timeout(DRAIN_AFTER_EXIT, drain).await.is_err() {
                tracing::info!(exec = %e.id, "pipes still open {DRAIN_AFTER_EXIT:?} after exit (a background process holds them); output after this point is dropped");
            }
            let end = match status {
                Err(err) => End::Failed(ExecFailure {
                    stage: "wait".into(),
                    message: format!("waiting for the command: {err}"),
                    errno: err.raw_os_error(),
                    errno_name: err.raw_os_error().map(api::errno_name),
                }),
                Ok(st) => {
                    // The helper failed before execve: its report says why.
                    // Complete by now: the helper (the command, after its
                    // execve) has exited, so every write end is closed.
                    let bytes = report.await.unwrap_or_default();
                    match strata_sandbox::parse_report(&bytes) {
                        Some(f) => End::Failed(ExecFailure {
                            stage: f.stage,
                            message: f.message,
                            errno: f.errno,
                            errno_name: f.errno.map(api::errno_name),
                        }),
                        None => {
                            let (cancelled, timed_out) = {
                                let i = e.inner.lock();
                                (i.cancelled, i.timed_out)
                            };
                            End::Exited(ExitInfo {
                                code: st.code(),
                                signal: st.signal(),
                                signal_name: st.signal().map(api::signal_name),
                                cancelled,
                                timed_out,
                            })
                        }
                    }
                }
            };
            // A cancelled exec takes its whole process group with it.
            let (cancelled, timed_out) = {
                let i = e.inner.lock();
                (i.cancelled, i.timed_out)
            };
            if cancelled || timed_out {
                e.signal_group(Signal::KILL);
            }
            *e.stdin.lock().await = None;
            tracing::info!(exec = %e.id, end = ?end, "exec ended");
            {
                let mut i = e.inner.lock();
                i.end = Some(end);
                i.finished_at = Some(Instant::now());
            }
            e.data.notify_waiters();
            e.done.notify_waiters();
        });
        Ok(exec)
    }

    /// `kill(-pgid, sig)`; the pgid is the command's pid.
    fn signal_group(&self, sig: Signal) {
        let Some(pid) = Pid::from_raw(self.pid as i32) else {
            return; // not started yet: nothing to signal
        };
        if sig == Signal::KILL {
            self.kill_sent.store(true, Ordering::SeqCst);
        }
        let mut r = rustix::process::kill_process_group(pid, sig);
        if r == Err(rustix::io::Errno::SRCH) {
            // PTY mode, before the helper's setsid made the group: the
            // process itself.
            r = rustix::process::kill_process(pid, sig);
        }
        if let Err(err) = r {
            // The group may be gone already (ESRCH): nothing to do.
            tracing::debug!(exec = %self.id, ?sig, %err, "kill group");
        }
    }

    pub fn is_finished(&self) -> bool {
        self.inner.lock().end.is_some()
    }

    pub fn finished_at(&self) -> Option<Instant> {
        self.inner.lock().finished_at
    }

    pub fn status(&self) -> api::ExecStatus {
        let i = self.inner.lock();
        let (state, exit, failure) = match &i.end {
            None => (api::ExecState::Running, None, None),
            Some(End::Exited(x)) => (api::ExecState::Exited, Some(x.clone()), None),
            Some(End::Failed(f)) => (api::ExecState::Failed, None, Some(f.clone())),
        };
        let elapsed = i
            .finished_at
            .unwrap_or_else(Instant::now)
            .duration_since(self.started);
        api::ExecStatus {
            id: self.id.clone().into(),
            pid: self.pid,
            state,
            exit,
            failure,
            argv: self.argv.clone(),
            workspace: self.workspace.clone().map(Into::into),
            elapsed_ms: elapsed.as_millis() as u64,
        }
    }

    /// Wait for the end (or `limit`).
    pub async fn wait(&self, limit: Option<Duration>) -> api::ExecStatus {
        let fut = async {
            loop {
                let n = self.done.notified();
                tokio::pin!(n);
                n.as_mut().enable();
                if self.is_finished() {
                    return;
                }
                n.await;
            }
        };
        match limit {
            Some(l) => {
                let _ = tokio::time::timeout(l, fut).await;
            }
            None => fut.await,
        }
        self.status()
    }

    /// SIGTERM to the group now, SIGKILL after `grace`; waits for the end
    /// (bounded by grace + 2 s) and returns the status with the signal.
    pub async fn cancel(self: &Arc<Self>, grace: Duration) -> api::ExecStatus {
        if self.is_finished() {
            return self.status();
        }
        self.inner.lock().cancelled = true;
        tracing::info!(exec = %self.id, "cancel: SIGTERM to process group {}", self.pid);
        self.signal_group(Signal::TERM);
        let me = self.clone();
        tokio::spawn(async move {
            let st = me.wait(Some(grace)).await;
            if st.state == api::ExecState::Running {
                tracing::info!(exec = %me.id, "cancel: grace over, SIGKILL");
                me.signal_group(Signal::KILL);
            }
        });
        self.wait(Some(grace + Duration::from_secs(2))).await
    }

    /// Write to the command's stdin.
    pub async fn write_stdin(&self, data: &[u8]) -> Result<usize, StdinError> {
        let mut g = self.stdin.lock().await;
        let s = g.as_mut().ok_or(StdinError::Closed)?;
        s.write_all(data).await.map_err(StdinError::Io)?;
        s.flush().await.map_err(StdinError::Io)?;
        Ok(data.len())
    }

    /// Close stdin (the command reads EOF). Idempotent. In PTY mode the
    /// terminal stays open and EOF is the terminal's EOF character (^D).
    pub async fn close_stdin(&self) {
        let mut g = self.stdin.lock().await;
        if let Some(mut s) = g.take() {
            if self.tty {
                let _ = s.write_all(b"\x04").await;
                let _ = s.flush().await;
            } else {
                let _ = s.shutdown().await;
            }
        }
    }

    /// Resize the terminal of a PTY exec; `false` if it has none.
    pub fn resize(&self, rows: u16, cols: u16) -> std::io::Result<bool> {
        match &self.pty {
            Some(m) => set_winsize(m, rows, cols).map(|_| true),
            None => Ok(false),
        }
    }

    /// Attach the one output stream; `None` if another is attached.
    /// With `follow == false` the stream ends once the buffer is empty
    /// (a snapshot of what is waiting, for `strata exec logs`).
    pub fn attach(self: &Arc<Self>, follow: bool) -> Option<OutputStream> {
        let mut i = self.inner.lock();
        if i.attached {
            return None;
        }
        i.attached = true;
        Some(OutputStream {
            exec: self.clone(),
            follow,
        })
    }
}

#[derive(Debug)]
pub enum StdinError {
    Closed,
    Io(std::io::Error),
}

async fn read_pipe<R: AsyncRead + Unpin>(exec: Arc<Exec>, mut r: R, stream: u8) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        // Backpressure: wait for room before reading more.
        loop {
            let n = exec.space.notified();
            tokio::pin!(n);
            n.as_mut().enable();
            if exec.inner.lock().bytes < exec.bound {
                break;
            }
            n.await;
        }
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        {
            let mut i = exec.inner.lock();
            let seq = i.next_seq;
            i.next_seq += 1;
            i.bytes += n;
            i.frames.push_back(Buffered {
                stream,
                seq,
                data: bytes::Bytes::copy_from_slice(&buf[..n]),
            });
        }
        exec.data.notify_waiters();
    }
}

/// The attached output stream of one exec: yields NDJSON lines.
pub struct OutputStream {
    exec: Arc<Exec>,
    follow: bool,
}

impl Drop for OutputStream {
    fn drop(&mut self) {
        self.exec.inner.lock().attached = false;
    }
}

impl OutputStream {
    /// The next line (with its '\n'), or `None` after the final frame.
    pub async fn next_line(&mut self) -> Option<bytes::Bytes> {
        let e = &self.exec;
        loop {
            let n = e.data.notified();
            tokio::pin!(n);
            n.as_mut().enable();
            let frame = {
                let mut i = e.inner.lock();
                if let Some(b) = i.frames.pop_front() {
                    i.bytes -= b.data.len();
                    let data = base64::engine::general_purpose::STANDARD.encode(&b.data);
                    Some(if b.stream == 1 {
                        Frame::Stdout { seq: b.seq, data }
                    } else {
                        Frame::Stderr { seq: b.seq, data }
                    })
                } else if i.end_delivered {
                    return None;
                } else if let Some(end) = i.end.clone() {
                    i.end_delivered = true;
                    let seq = i.next_seq;
                    Some(match end {
                        End::Exited(exit) => Frame::Exit { seq, exit },
                        End::Failed(failure) => Frame::Error { seq, failure },
                    })
                } else if !self.follow {
                    return None;
                } else {
                    None
                }
            };
            if let Some(f) = frame {
                e.space.notify_waiters();
                let mut line = serde_json::to_vec(&f).expect("frame serializes");
                line.push(b'\n');
                return Some(line.into());
            }
            n.await;
        }
    }
}

/// Start a fresh output stream even if the final frame was handed out
/// already (a reconnecting client after the end gets the final frame again).
pub fn rearm_end(exec: &Exec) {
    let mut i = exec.inner.lock();
    if i.frames.is_empty() && i.end.is_some() {
        i.end_delivered = false;
    }
}
