//! The typed, closed protocol between the serving parent and the helper,
//! over one `SOCK_SEQPACKET` socketpair (one datagram = one message, so no
//! framing; EOF = the other side is gone).
//!
//! Every message is a postcard-encoded variant of a closed enum: an unknown
//! or truncated message is a protocol error, never guessed at. The /dev/fuse
//! fd travels as SCM_RIGHTS ancillary data attached to [`FromHelper::FuseFd`].

use crate::sys::Errno;
use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};
use serde::{Deserialize, Serialize};
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// Largest message either side sends or accepts. Paths are the only
/// variable-size payload (argv and env travel in the helper's own execve).
pub const MAX_MSG: usize = 16 * 1024;

/// Parent -> helper.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToHelper {
    /// What to mount where. Sent once, first.
    Setup(Setup),
    /// The parent answered FUSE_INIT and serves the mount: run the command.
    /// Sent once, after [`FromHelper::FuseFd`]. Before it, any access to the
    /// mount would block on the unanswered INIT.
    Serving,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Setup {
    /// Absolute path of the mountpoint (raw bytes, not necessarily UTF-8).
    pub mountpoint: Vec<u8>,
    /// The command's working directory (absolute).
    pub cwd: Vec<u8>,
    /// `--isolate`: confine the command like a Sandbox command.
    pub isolate: Option<Isolate>,
}

/// What `--isolate` needs besides the mountpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Isolate {
    /// Host paths to mask in the command's view should it show them (the
    /// Store), raw bytes.
    pub masked: Vec<Vec<u8>>,
}

/// Helper -> parent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FromHelper {
    /// The mounted /dev/fuse fd rides along as SCM_RIGHTS.
    FuseFd,
    /// The command exited with this status (0..=255).
    Exited { code: i32 },
    /// The command was killed by this signal.
    Signaled { signal: i32 },
    /// The command could not be started (argv[0] missing, not executable,
    /// cwd gone...): an error, not an exit status.
    SpawnFailed(SpawnFailure),
    /// The helper itself failed; the reason names the syscall.
    Failed(crate::HelperError),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SpawnFailure {
    /// chdir(2) into the command's cwd failed.
    Chdir(Errno),
    /// execvp(3) failed.
    Exec(Errno),
}

#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("the other side closed the channel")]
    Eof,
    #[error("sendmsg on the helper channel: {0}")]
    Send(#[source] std::io::Error),
    #[error("recvmsg on the helper channel: {0}")]
    Recv(#[source] std::io::Error),
    #[error("malformed message on the helper channel: {0}")]
    Decode(String),
    #[error("message too large for the helper channel ({0} bytes)")]
    TooLarge(usize),
    #[error("a message arrived truncated or with truncated ancillary data")]
    Truncated,
    #[error("expected a /dev/fuse fd with the FuseFd message, got none")]
    MissingFd,
    #[error("unexpected file descriptor attached to a message")]
    UnexpectedFd,
}

pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, ProtoError> {
    let v = postcard::to_allocvec(msg).map_err(|e| ProtoError::Decode(e.to_string()))?;
    if v.len() > MAX_MSG {
        return Err(ProtoError::TooLarge(v.len()));
    }
    Ok(v)
}

/// Send one message, optionally with one fd as SCM_RIGHTS.
pub fn send<T: Serialize>(
    sock: BorrowedFd<'_>,
    msg: &T,
    fd: Option<BorrowedFd<'_>>,
) -> Result<(), ProtoError> {
    let bytes = encode(msg)?;
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut anc = SendAncillaryBuffer::new(&mut space);
    let fds;
    if let Some(fd) = fd {
        fds = [fd];
        if !anc.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err(ProtoError::TooLarge(0));
        }
    }
    loop {
        match sendmsg(sock, &[IoSlice::new(&bytes)], &mut anc, SendFlags::NOSIGNAL) {
            Ok(_) => return Ok(()),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(ProtoError::Send(e.into())),
        }
    }
}

/// Receive one message and the fd attached to it, if any (received with
/// MSG_CMSG_CLOEXEC so it never leaks into a child of ours).
pub fn recv<T: for<'de> Deserialize<'de>>(
    sock: BorrowedFd<'_>,
) -> Result<(T, Option<OwnedFd>), ProtoError> {
    let mut buf = vec![0u8; MAX_MSG];
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut anc = RecvAncillaryBuffer::new(&mut space);
    let r = loop {
        match recvmsg(
            sock,
            &mut [IoSliceMut::new(&mut buf)],
            &mut anc,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Ok(r) => break r,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(ProtoError::Recv(e.into())),
        }
    };
    let mut fds: Vec<OwnedFd> = Vec::new();
    for m in anc.drain() {
        if let RecvAncillaryMessage::ScmRights(it) = m {
            fds.extend(it);
        }
    }
    if r.flags.intersects(ReturnFlags::TRUNC | ReturnFlags::CTRUNC) {
        return Err(ProtoError::Truncated);
    }
    if r.bytes == 0 {
        return Err(ProtoError::Eof);
    }
    let msg: T =
        postcard::from_bytes(&buf[..r.bytes]).map_err(|e| ProtoError::Decode(e.to_string()))?;
    if fds.len() > 1 {
        return Err(ProtoError::UnexpectedFd);
    }
    Ok((msg, fds.pop()))
}

/// A socketpair for the protocol: SEQPACKET (message boundaries and EOF),
/// both ends close-on-exec (the helper's end is dup2'ed onto a fixed
/// number in the child only).
pub fn pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    use rustix::net::{socketpair, AddressFamily, SocketFlags, SocketType};
    Ok(socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?)
}

/// Convenience for callers holding an OwnedFd.
pub fn borrow(fd: &OwnedFd) -> BorrowedFd<'_> {
    fd.as_fd()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HelperError;
    use std::io::{Read, Seek, Write};

    #[test]
    fn every_message_round_trips() {
        let msgs = vec![
            FromHelper::FuseFd,
            FromHelper::Exited { code: 42 },
            FromHelper::Signaled { signal: 9 },
            FromHelper::SpawnFailed(SpawnFailure::Exec(Errno(libc::ENOENT))),
            FromHelper::SpawnFailed(SpawnFailure::Chdir(Errno(libc::EACCES))),
            FromHelper::Failed(HelperError::OpenDevFuse(Errno(libc::EACCES))),
        ];
        for m in msgs {
            let b = encode(&m).unwrap();
            let back: FromHelper = postcard::from_bytes(&b).unwrap();
            assert_eq!(back, m);
        }
        let s = ToHelper::Setup(Setup {
            mountpoint: b"/tmp/x\xff".to_vec(),
            cwd: b"/".to_vec(),
            isolate: Some(Isolate {
                masked: vec![b"/srv/store".to_vec()],
            }),
        });
        let back: ToHelper = postcard::from_bytes(&encode(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn fd_travels_and_eof_is_typed() {
        let (a, b) = pair().unwrap();
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"hello").unwrap();
        send(a.as_fd(), &FromHelper::FuseFd, Some(f.as_fd())).unwrap();
        let (m, fd) = recv::<FromHelper>(b.as_fd()).unwrap();
        assert_eq!(m, FromHelper::FuseFd);
        let mut g = std::fs::File::from(fd.expect("fd attached"));
        g.rewind().unwrap();
        let mut s = String::new();
        g.read_to_string(&mut s).unwrap();
        assert_eq!(s, "hello");
        // Received close-on-exec.
        let fl = rustix::io::fcntl_getfd(&g).unwrap();
        assert!(fl.contains(rustix::io::FdFlags::CLOEXEC));
        drop(a);
        assert!(matches!(
            recv::<FromHelper>(b.as_fd()),
            Err(ProtoError::Eof)
        ));
    }

    #[test]
    fn garbage_is_an_error_not_a_status() {
        let (a, b) = pair().unwrap();
        rustix::net::send(&a, &[0xff, 0xff, 0xff], rustix::net::SendFlags::empty()).unwrap();
        assert!(matches!(
            recv::<FromHelper>(b.as_fd()),
            Err(ProtoError::Decode(_))
        ));
    }
}
