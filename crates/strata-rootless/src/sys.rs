//! Thin wrappers over the syscalls the helper makes. Each returns the raw
//! errno; the caller wraps it in the [`crate::HelperError`] variant of that
//! very syscall, so a failure always says which step failed.

use serde::{Deserialize, Serialize};
use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// An errno value that can cross the helper channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Errno(pub i32);

impl Errno {
    pub fn last() -> Errno {
        Errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        )
    }
}

impl std::fmt::Display for Errno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

pub type SysResult<T> = Result<T, Errno>;

fn check(rc: libc::c_int) -> SysResult<libc::c_int> {
    if rc < 0 {
        Err(Errno::last())
    } else {
        Ok(rc)
    }
}

pub fn cstring(b: &[u8]) -> SysResult<CString> {
    CString::new(b).map_err(|_| Errno(libc::EINVAL))
}

/// prctl(PR_SET_PDEATHSIG, SIGKILL).
pub fn set_pdeathsig_kill() -> SysResult<()> {
    // SAFETY: PR_SET_PDEATHSIG takes one integer argument; no memory is
    // passed to the kernel.
    check(unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    })
    .map(drop)
}

/// unshare(2).
pub fn unshare(flags: libc::c_int) -> SysResult<()> {
    // SAFETY: unshare takes flags only. The helper is single-threaded (it is
    // a freshly exec'ed process that calls this before spawning any thread),
    // so no other thread can observe the changed namespaces or fd table.
    check(unsafe { libc::unshare(flags) }).map(drop)
}

/// mount(2) with optional source/fstype/data.
pub fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> SysResult<()> {
    let p = |c: Option<&CStr>| c.map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: every pointer is either null or a NUL-terminated string that
    // outlives the call; the kernel copies them.
    check(unsafe {
        libc::mount(
            p(source),
            target.as_ptr(),
            p(fstype),
            flags,
            p(data).cast::<libc::c_void>(),
        )
    })
    .map(drop)
}

/// open(2) returning an owned fd.
pub fn open(path: &CStr, flags: libc::c_int) -> SysResult<OwnedFd> {
    // SAFETY: path is NUL-terminated; no mode is needed without O_CREAT.
    let fd = check(unsafe { libc::open(path.as_ptr(), flags) })?;
    // SAFETY: open returned a fresh fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Write all of `data` to a file, as one write(2) (what /proc/self/uid_map
/// requires: the map must be written in a single call).
pub fn write_file_once(path: &CStr, data: &[u8]) -> SysResult<()> {
    let fd = open(path, libc::O_WRONLY | libc::O_CLOEXEC)?;
    // SAFETY: data is a valid slice for its length; fd is open.
    let n = unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) };
    if n < 0 {
        return Err(Errno::last());
    }
    if n as usize != data.len() {
        return Err(Errno(libc::EIO));
    }
    Ok(())
}

/// pipe2(O_CLOEXEC): (read, write).
pub fn pipe() -> SysResult<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: fds is a valid array of two ints for the kernel to fill.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: pipe2 returned two fresh fds that nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// fork(2). Only called in the single-threaded helper (and in its
/// single-threaded namespace init), so the child may allocate freely.
pub enum Forked {
    Child,
    Parent(libc::pid_t),
}

pub fn fork() -> SysResult<Forked> {
    // SAFETY: the caller is single-threaded (see above): no lock can be held
    // by another thread at the time of the fork.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(Errno::last()),
        0 => Ok(Forked::Child),
        p => Ok(Forked::Parent(p)),
    }
}

/// waitpid(pid, 0) retried on EINTR; returns (pid, raw status).
pub fn waitpid(pid: libc::pid_t) -> SysResult<(libc::pid_t, libc::c_int)> {
    loop {
        let mut status = 0;
        // SAFETY: status is a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r >= 0 {
            return Ok((r, status));
        }
        let e = Errno::last();
        if e.0 != libc::EINTR {
            return Err(e);
        }
    }
}

/// Set a signal's disposition to SIG_DFL or SIG_IGN.
pub fn set_signal(sig: libc::c_int, ignore: bool) -> SysResult<()> {
    let h = if ignore { libc::SIG_IGN } else { libc::SIG_DFL };
    // SAFETY: SIG_IGN / SIG_DFL are not handler functions: nothing of ours
    // runs in signal context.
    if unsafe { libc::signal(sig, h) } == libc::SIG_ERR {
        return Err(Errno::last());
    }
    Ok(())
}

/// Unblock every signal (the command must not inherit a mask of ours).
pub fn unblock_all_signals() -> SysResult<()> {
    // SAFETY: set is initialised by sigemptyset before use; the old-set
    // pointer is null.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        let r = libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        if r != 0 {
            return Err(Errno::last());
        }
    }
    Ok(())
}

pub fn chdir(path: &CStr) -> SysResult<()> {
    // SAFETY: path is NUL-terminated.
    check(unsafe { libc::chdir(path.as_ptr()) }).map(drop)
}

/// execvp(3): only returns on failure.
pub fn execvp(argv: &[CString]) -> Errno {
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // SAFETY: ptrs is a NULL-terminated array of NUL-terminated strings that
    // stay alive for the call (execvp only returns on failure).
    unsafe { libc::execvp(ptrs[0], ptrs.as_ptr()) };
    Errno::last()
}

/// write(2) of a small buffer, retried on EINTR; errors ignored by callers
/// that have no one left to tell.
pub fn write_all(fd: RawFd, mut data: &[u8]) -> SysResult<()> {
    while !data.is_empty() {
        // SAFETY: data is a valid slice for its length.
        let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
        if n < 0 {
            let e = Errno::last();
            if e.0 == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        data = &data[n as usize..];
    }
    Ok(())
}

/// Read until EOF (small messages between the helper's processes).
pub fn read_to_end(fd: RawFd) -> SysResult<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: buf is a valid writable buffer of its length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = Errno::last();
            if e.0 == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
}

/// _exit(2): leave without running Rust destructors or atexit handlers (a
/// forked child must not flush buffers it shares with its parent).
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no user memory.
    unsafe { libc::_exit(code) }
}

/// Threads of this process, from /proc/self/status (unshare(CLONE_NEWUSER)
/// fails with EINVAL in a multithreaded process).
pub fn thread_count() -> Option<usize> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
}
