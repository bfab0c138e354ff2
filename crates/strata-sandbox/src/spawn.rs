//! Starting a helper with posix_spawn(3) instead of fork(2), for the exec
//! helper a Sandbox's daemon keeps waiting ([`crate::prestart`]).
//!
//! Why: a `std::process::Command` with a `pre_exec` step (which the helpers
//! need, to make their descriptors inheritable in the one child) always
//! forks, and fork(2) of the multi-threaded daemon copies the page-table
//! entry of every resident page, write-protects its private pages (each
//! later write by the daemon then takes a copy-on-write fault) and holds
//! its memory map's lock for writing meanwhile, so FUSE threads serving a
//! running command wait; the child's execve then tears the copy down.
//! glibc's posix_spawn clones with `CLONE_VM | CLONE_VFORK`: nothing is
//! copied, whatever the daemon's size. The inherited descriptors are made
//! inheritable by `posix_spawn_file_actions_adddup2(fd, fd)`, which clears
//! close-on-exec in the child only (glibc 2.29 and later, as POSIX 2024
//! specifies), so the parent's copies stay close-on-exec and no other
//! child of the multi-threaded parent can inherit them.
//!
//! The child is then watched through a pidfd (pidfd_open(2), Linux 5.3):
//! readable once the child has exited, and reaped only by its owner, so
//! its pid cannot be reused while anyone holds the handle.

use std::ffi::{CString, OsStr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::process::ExitStatus;

use rustix::process::{Pid, PidfdFlags, WaitOptions};

/// A child started by [`spawn_inheriting`]: its pid and a pidfd of it.
/// Dropping it does not kill or reap it (the Sandbox's init reaps what its
/// parent leaves).
#[derive(Debug)]
pub struct SpawnedChild {
    pid: Pid,
    pidfd: OwnedFd,
}

impl SpawnedChild {
    /// The child's pid.
    pub fn id(&self) -> u32 {
        self.pid.as_raw_nonzero().get() as u32
    }

    /// The pidfd, readable (poll(2)) once the child has exited.
    pub fn pidfd(&self) -> BorrowedFd<'_> {
        self.pidfd.as_fd()
    }

    /// The exit status if the child has exited (and reap it), `None` if it
    /// is still running.
    pub fn try_wait(&self) -> std::io::Result<Option<ExitStatus>> {
        loop {
            match rustix::process::waitpid(Some(self.pid), WaitOptions::NOHANG) {
                Ok(Some((_, status))) => {
                    return Ok(Some(std::os::unix::process::ExitStatusExt::from_raw(
                        status.as_raw(),
                    )))
                }
                Ok(None) => return Ok(None),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// What the child gets on 0, 1 and 2.
pub(crate) enum ChildStdio {
    /// /dev/null on all three.
    Null,
}

/// Start `exe` with `args` (argv[0] is `exe`), an empty environment, cwd
/// `/`, stdio per `stdio`, in a process group of its own if `new_group`,
/// the signal mask empty and SIGPIPE at its default (as
/// `std::process::Command` leaves them), with descriptors `inherit` (all
/// close-on-exec here) open and inheritable in the child alone.
pub(crate) fn spawn_inheriting(
    exe: &std::path::Path,
    args: &[&OsStr],
    inherit: &[RawFd],
    stdio: ChildStdio,
    new_group: bool,
) -> std::io::Result<SpawnedChild> {
    let cstr = |b: &[u8]| {
        CString::new(b).map_err(|_| std::io::Error::other("an argument holds a NUL byte"))
    };
    let path = cstr(exe.as_os_str().as_bytes())?;
    let mut argv_owned = vec![path.clone()];
    for a in args {
        argv_owned.push(cstr(a.as_bytes())?);
    }
    let mut argv: Vec<*mut libc::c_char> = argv_owned
        .iter()
        .map(|a| a.as_ptr() as *mut libc::c_char)
        .collect();
    argv.push(std::ptr::null_mut());
    let mut envp: [*mut libc::c_char; 1] = [std::ptr::null_mut()];
    let null = c"/dev/null";
    let root = c"/";

    let mut actions = FileActions::new()?;
    match stdio {
        ChildStdio::Null => {
            actions.open(0, null, libc::O_RDONLY)?;
            actions.open(1, null, libc::O_WRONLY)?;
            actions.open(2, null, libc::O_WRONLY)?;
        }
    }
    for &fd in inherit {
        // dup2(fd, fd) in the child: clears close-on-exec there only.
        actions.dup2(fd, fd)?;
    }
    actions.chdir(root)?;
    let mut attr = Attr::new()?;
    let mut flags = libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF;
    if new_group {
        flags |= libc::POSIX_SPAWN_SETPGROUP;
        check(
            // SAFETY: `attr` is initialised (Attr::new) and owned here.
            unsafe { libc::posix_spawnattr_setpgroup(&mut attr.0, 0) },
        )?;
    }
    // SAFETY: `set` is a valid sigset_t, initialised by sigemptyset before
    // it is read; `attr` is initialised and owned here.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        check(libc::posix_spawnattr_setsigmask(&mut attr.0, &set))?;
        libc::sigaddset(&mut set, libc::SIGPIPE);
        check(libc::posix_spawnattr_setsigdefault(&mut attr.0, &set))?;
        check(libc::posix_spawnattr_setflags(
            &mut attr.0,
            flags as libc::c_short,
        ))?;
    }
    let mut pid: libc::pid_t = 0;
    // SAFETY: every pointer is valid for the call: `path` and the strings of
    // `argv` live until it returns, `argv` and `envp` are NULL-terminated,
    // `actions` and `attr` are initialised. posix_spawn(3) returns an error
    // number (it does not set errno).
    let rc = unsafe {
        libc::posix_spawn(
            &mut pid,
            path.as_ptr(),
            &actions.0,
            &attr.0,
            argv.as_mut_ptr(),
            envp.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    let pid = Pid::from_raw(pid).ok_or_else(|| std::io::Error::other("posix_spawn gave pid 0"))?;
    // Our child, not yet reaped: the pid cannot have been reused.
    match rustix::process::pidfd_open(pid, PidfdFlags::NONBLOCK) {
        Ok(pidfd) => Ok(SpawnedChild { pid, pidfd }),
        Err(e) => {
            // No pidfd (a kernel before 5.3, or a filter that refuses the
            // call): nobody could wait for the child, so it is stopped
            // and reaped here rather than left a zombie.
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            let _ = rustix::process::waitpid(Some(pid), WaitOptions::empty());
            Err(std::io::Error::other(format!(
                "pidfd_open of the spawned child: {e}"
            )))
        }
    }
}

/// posix_spawn_file_actions_t, destroyed on drop.
struct FileActions(libc::posix_spawn_file_actions_t);

impl FileActions {
    fn new() -> std::io::Result<Self> {
        // SAFETY: zeroed storage is what posix_spawn_file_actions_init
        // initialises; it is not read before that.
        let mut a = FileActions(unsafe { std::mem::zeroed() });
        // SAFETY: `a.0` is storage of the right type owned here.
        check(unsafe { libc::posix_spawn_file_actions_init(&mut a.0) })?;
        Ok(a)
    }

    fn open(&mut self, fd: RawFd, path: &std::ffi::CStr, flags: i32) -> std::io::Result<()> {
        // SAFETY: `self.0` is initialised; glibc copies `path`.
        check(unsafe {
            libc::posix_spawn_file_actions_addopen(&mut self.0, fd, path.as_ptr(), flags, 0)
        })
    }

    fn dup2(&mut self, fd: RawFd, target: RawFd) -> std::io::Result<()> {
        // SAFETY: `self.0` is initialised; only integers are passed.
        check(unsafe { libc::posix_spawn_file_actions_adddup2(&mut self.0, fd, target) })
    }

    fn chdir(&mut self, path: &std::ffi::CStr) -> std::io::Result<()> {
        // SAFETY: `self.0` is initialised; glibc copies `path`.
        check(unsafe { libc::posix_spawn_file_actions_addchdir_np(&mut self.0, path.as_ptr()) })
    }
}

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe { libc::posix_spawn_file_actions_destroy(&mut self.0) };
    }
}

/// posix_spawnattr_t, destroyed on drop.
struct Attr(libc::posix_spawnattr_t);

impl Attr {
    fn new() -> std::io::Result<Self> {
        // SAFETY: zeroed storage is what posix_spawnattr_init initialises.
        let mut a = Attr(unsafe { std::mem::zeroed() });
        // SAFETY: `a.0` is storage of the right type owned here.
        check(unsafe { libc::posix_spawnattr_init(&mut a.0) })?;
        Ok(a)
    }
}

impl Drop for Attr {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe { libc::posix_spawnattr_destroy(&mut self.0) };
    }
}

/// posix_spawn's functions return an error number.
fn check(rc: i32) -> std::io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::from_raw_os_error(rc))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsRawFd;

    /// The child gets exactly the listed descriptors (close-on-exec here),
    /// /dev/null on 0-2, cwd `/`, no environment and a process group of
    /// its own; the pidfd reports its exit and `try_wait` reaps it.
    #[test]
    fn the_child_inherits_only_the_listed_descriptors() {
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
        let (_r2, low) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
        // A high number: the shell's own descriptors (its command
        // substitutions' pipes take the lowest free numbers) once made a
        // low `other` read as open in the child.
        let other = rustix::io::fcntl_dupfd_cloexec(&low, 300).unwrap();
        drop(low);
        let (wn, on) = (w.as_raw_fd(), other.as_raw_fd());
        // Through /proc: dash redirects only descriptors 0-9 (`>&12` is
        // "Bad fd number"), and reopening a pipe there needs it open.
        let script = format!(
            "read -r line; echo \"stdin:[$line] cwd:$(pwd) env:$(env | grep -vc '^PWD=') \
             pgrp:$(cut -d' ' -f5 /proc/$$/stat) pid:$$ \
             other:$([ -e /proc/$$/fd/{on} ] && echo open || echo closed)\" >/proc/$$/fd/{wn}"
        );
        let child = spawn_inheriting(
            std::path::Path::new("/bin/sh"),
            &[OsStr::new("-c"), OsStr::new(&script)],
            &[wn],
            ChildStdio::Null,
            true,
        )
        .expect("posix_spawn /bin/sh");
        drop(w);
        let mut out = String::new();
        std::fs::File::from(r).read_to_string(&mut out).unwrap();
        let mut fds = [rustix::event::PollFd::new(
            &child.pidfd,
            rustix::event::PollFlags::IN,
        )];
        let timeout = rustix::event::Timespec {
            tv_sec: 10,
            tv_nsec: 0,
        };
        rustix::event::poll(&mut fds, Some(&timeout)).unwrap();
        let status = child
            .try_wait()
            .unwrap()
            .expect("exited once its pidfd is readable");
        assert!(status.success(), "{status:?}: {out}");
        let pid = child.id();
        assert_eq!(
            out.trim(),
            format!("stdin:[] cwd:/ env:0 pgrp:{pid} pid:{pid} other:closed"),
        );
        drop(other);
    }
}
