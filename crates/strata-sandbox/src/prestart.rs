//! The exec helper started ahead of its exec: a Sandbox's daemon keeps one
//! helper waiting, already in the commands' cgroup and mount namespace, and
//! hands it the next command instead of starting a helper for it.
//!
//! Why: an exec used to pay, on its own path, for the daemon's fork, the
//! helper binary's start (a large static-pie executable: its loader
//! applies tens of thousands of relocations before `main`), the cgroup v1
//! migration per hierarchy when the helper joins the commands' cgroup
//! (each may wait for an RCU grace period) and `setns` into the commands'
//! namespace (docs/benchmarks.md, "Exec path" and "The exec helper
//! started ahead"). A pre-started helper has done all of that before the
//! request comes; what is left on the exec's path is a message on a socket,
//! the privilege drop and the command's own `execve`.
//!
//! What stays the same, and is the security argument: each helper serves
//! exactly one command and then *is* that command (it `execve`s it, as a
//! helper started for the exec would); nothing forks per command from a
//! long-lived privileged process, so no state of one command can reach
//! another. Every command still goes through
//! [`crate::exec::drop_privileges_and_exec`] in full (ids, capabilities,
//! securebits, no_new_privs, its own seccomp filter, last), in a fresh
//! process. While it waits, the helper is root in the commands' cgroup, so
//! a command could only reach it the ways it could reach any root process
//! of the Sandbox: it cannot signal or ptrace it (another uid, no
//! capabilities, kill(2) and ptrace(2)'s access checks), and /proc hides it
//! (hidepid). Its descriptors are the request socket, whose other end only
//! the daemon holds, and /dev/null on 0-2; it closes the socket as soon as
//! the request is read, and marks every inherited descriptor close-on-exec
//! before the command's `execve`, like any helper.
//!
//! The request is one message on a `SOCK_SEQPACKET` socketpair: the payload
//! is [`REQUEST_TAG`], and `SCM_RIGHTS` carries, in this order, the
//! settings memfd (the same encoding as a helper started for the exec, see
//! [`crate::internal`]), the write end of the report pipe, and the
//! command's stdin, stdout and stderr. The helper's answer is the report
//! pipe's, as for any helper: EOF with nothing written means the command
//! started. An end of file on the socket (the daemon closed its end: it
//! stops, or drops a helper it no longer wants) makes the helper exit 0
//! without running anything.
//!
//! A failure of the helper's own preparation (the cgroup join, the
//! namespace, the seccomp filter's compilation) is kept until a request
//! comes and then reported on that request's pipe: the exec fails with the
//! same report a helper started for it would have given.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use crate::exec::{ExecSpec, Failure};
use crate::internal::{report_failure, HelperReport};
use crate::ns::SpawnError;
use crate::seccomp::{CompiledPolicy, Policy};

/// The payload of a request: the descriptors are the request.
pub(crate) const REQUEST_TAG: &[u8] = b"strata-exec-request";
/// Descriptors in a request (settings, report, stdin, stdout, stderr).
const REQUEST_FDS: usize = 5;

/// A helper started ahead of its exec, waiting: the process (which
/// becomes the command at its `execve`) and the daemon's end of its
/// request socket, to hand it one command.
#[derive(Debug)]
pub struct PrestartedHelper {
    pub child: crate::spawn::SpawnedChild,
    pub helper: Prestarted,
}

/// The daemon's end of a pre-started helper's request socket.
#[derive(Debug)]
pub struct Prestarted {
    socket: OwnedFd,
}

/// Handing a command to a pre-started helper failed.
#[derive(Debug, thiserror::Error)]
pub enum HandError {
    /// The command itself is refused (the same checks as
    /// [`crate::exec_helper_command`]).
    #[error("{0}")]
    Spec(SpawnError),
    /// The helper is gone (EPIPE, ECONNRESET) or the message could not be
    /// sent: nothing was started; start a helper for the exec instead.
    #[error("handing the command to the pre-started exec helper: {source}")]
    Send { source: std::io::Error },
}

/// Start a helper that waits for one command, for a Sandbox's daemon:
/// `exe` (a binary calling [`crate::maybe_run_internal`]) re-executes
/// itself as `EXE __strata-exec FD`, joins the commands' cgroup, enters the
/// commands' mount namespace (building it if no exec has yet, see
/// [`crate::commands_ns`]), compiles the seccomp filter and waits on its
/// socket. It is started with posix_spawn(3), not fork(2) (see
/// [`crate::spawn`]), with stdin, stdout and stderr on /dev/null, cwd `/`
/// and in a process group of its own (the command's pgid is then its pid
/// from its first instant, as with a helper spawned for an exec with
/// pipes). `None` where this process has no commands' namespace (not a
/// Sandbox's daemon, or a Sandbox made before [`crate::commands_ns`]):
/// start helpers per exec there.
pub fn start_prestarted_helper(exe: &Path) -> Result<Option<PrestartedHelper>, SpawnError> {
    if !Path::new(crate::commands_ns::NS_DIR).is_dir() {
        return Ok(None);
    }
    let (ours, theirs) = rustix::net::socketpair(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| SpawnError::Settings { source: e.into() })?;
    // Our copy of the helper's end closes when this returns: only the
    // helper holds it then, and its end of file is ours being dropped.
    let child = crate::internal::spawn_waiting_helper(exe, theirs)?;
    Ok(Some(PrestartedHelper {
        child,
        helper: Prestarted { socket: ours },
    }))
}

impl Prestarted {
    /// Hand `spec` to the helper with the command's stdio. Returns the
    /// report pipe, read as for a helper started for the exec (EOF with
    /// nothing written: the command started). Our copies of the
    /// descriptors stay ours: close them after this returns so that the
    /// command's side alone holds them. The helper serves one command;
    /// this consumes it.
    pub fn hand(
        self,
        spec: &ExecSpec,
        stdin: BorrowedFd<'_>,
        stdout: BorrowedFd<'_>,
        stderr: BorrowedFd<'_>,
    ) -> Result<HelperReport, HandError> {
        let (settings, report_r, report_w) =
            crate::internal::request_settings(spec).map_err(HandError::Spec)?;
        let fds = [settings.as_fd(), report_w.as_fd(), stdin, stdout, stderr];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(REQUEST_FDS))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err(HandError::Send {
                source: std::io::Error::other("the descriptors do not fit the control buffer"),
            });
        }
        // NOSIGNAL: a helper that is gone is an EPIPE to fall back on, not
        // a SIGPIPE.
        let sent = rustix::net::sendmsg(
            &self.socket,
            &[IoSlice::new(REQUEST_TAG)],
            &mut control,
            SendFlags::NOSIGNAL,
        )
        .map_err(|e| HandError::Send { source: e.into() })?;
        if sent != REQUEST_TAG.len() {
            return Err(HandError::Send {
                source: std::io::Error::other(format!(
                    "sent {sent} of {} bytes",
                    REQUEST_TAG.len()
                )),
            });
        }
        Ok(report_r)
    }
}

/// The helper's side, after it joined the commands' cgroup (`ready` says
/// whether that and the single-thread check went well): prepare what every
/// command needs, wait for one request, then run it as a helper started
/// for it would. Returns the exit code (0: no request came).
pub(crate) fn wait_and_run(socket: OwnedFd, ready: Result<(), Failure>) -> i32 {
    // Prepared before the request, reported on its pipe if they failed.
    let ready =
        ready.and_then(|()| crate::exec::enter_commands_namespace().map_err(|e| Failure::from(&e)));
    let filter = Policy::default().compile();
    let Some(request) = receive(&socket) else {
        return 0;
    };
    // The socket is not needed any more, and nothing may reach the
    // command through it.
    drop(socket);
    let (settings, report) = match request {
        Ok(Request { settings, report }) => (settings, report),
        Err((report, message)) => {
            return report_failure(
                report,
                Failure {
                    stage: "exec".into(),
                    message,
                    errno: None,
                },
            )
        }
    };
    if let Err(f) = ready {
        return report_failure(report, f);
    }
    let filter: CompiledPolicy = match filter {
        Ok(f) => f,
        Err(e) => return report_failure(report, Failure::seccomp(e.to_string())),
    };
    crate::internal::run_request(settings, report, &filter)
}

/// A request as received: the settings memfd and the report pipe (stdio is
/// in place on 0-2 by then).
struct Request {
    settings: OwnedFd,
    report: Option<std::fs::File>,
}

type Received = Result<Request, (Option<std::fs::File>, String)>;

/// Wait for the request; `None` on end of file (no request will come).
fn receive(socket: &OwnedFd) -> Option<Received> {
    let mut payload = [0u8; 64];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(REQUEST_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let msg = loop {
        match rustix::net::recvmsg(
            socket,
            &mut [IoSliceMut::new(&mut payload)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Ok(m) => break m,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Some(Err((None, format!("receiving the request: {e}")))),
        }
    };
    let mut fds: Vec<OwnedFd> = Vec::with_capacity(REQUEST_FDS);
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = m {
            fds.extend(rights);
        }
    }
    if msg.bytes == 0 && fds.is_empty() {
        return None;
    }
    // The report pipe first, so that even a malformed request is answered.
    let report = (fds.len() > 1).then(|| std::fs::File::from(fds.remove(1)));
    if &payload[..msg.bytes.min(payload.len())] != REQUEST_TAG
        || fds.len() != REQUEST_FDS - 1
        || msg.flags.contains(rustix::net::ReturnFlags::CTRUNC)
    {
        let message = format!(
            "malformed request: {} bytes, {} descriptors",
            msg.bytes,
            fds.len() + usize::from(report.is_some())
        );
        return Some(Err((report, message)));
    }
    let mut it = fds.into_iter();
    let settings = it.next().expect("counted above");
    // dup2(2) onto 0-2 (rustix::stdio): the copies are inheritable (a new
    // descriptor's flags start clear); the received ones close on drop.
    for (target, fd) in (0..).zip(it) {
        let put = match target {
            0 => rustix::stdio::dup2_stdin(&fd),
            1 => rustix::stdio::dup2_stdout(&fd),
            _ => rustix::stdio::dup2_stderr(&fd),
        };
        if let Err(e) = put {
            return Some(Err((
                report,
                format!("putting the command's descriptor {target} in place: {e}"),
            )));
        }
    }
    Some(Ok(Request { settings, report }))
}
