//! One mount namespace for all of a Sandbox's commands, made once and
//! entered by each exec with `setns(2)`.
//!
//! A command must not see the daemon's /dev layer (/dev/fuse, see
//! `mounts::build_view` step 4e). It used to get a mount namespace of its
//! own per exec (`unshare(CLONE_NEWNS)`, then the masks and the unmount of
//! that layer). That costs twice per exec: the copy of every mount of the
//! Sandbox's view (36 with the minimal host view) and, when the command's
//! last process exits, the teardown of all of them, which the exiting
//! process waits for before its parent can reap it. Measured here:
//! `unshare -m true` 4.0 ms against `nsenter --mount=FILE true` 1.9 ms and
//! plain `true` 0.6 ms (docs/benchmarks.md, "Exec path").
//!
//! So the first exec builds the commands' namespace exactly as each exec
//! used to, in a *holder*: a root process of the Sandbox that does nothing
//! but keep that namespace alive (pause(2) forever, no descriptors, its
//! own session, invisible to commands through hidepid). Its pid and the
//! namespace's inode are recorded in [`RECORD`], on a small tmpfs in the
//! daemon's /dev layer, which no command can see; every later exec opens
//! `/proc/PID/ns/mnt`, checks the inode (a reused pid cannot pass) and
//! calls `setns`. The daemon builds it as it starts, beside its own start-up,
//! through the first exec helper it starts ahead of an exec
//! ([`crate::prestart`]), so that not even the first exec pays for it;
//! should that fail, or lose a race with the first execs, the exec that
//! finds no holder builds it as
//! described (one builder at a time, under the lock in [`enter`]). Facts
//! this relies on:
//!
//! * `setns(fd, CLONE_NEWNS)` needs CAP_SYS_ADMIN and CAP_SYS_CHROOT and a
//!   single-threaded caller (setns(2)); the exec helper is one, still root.
//! * The commands' namespace is a slave of the daemon's (`MS_REC|MS_SLAVE`),
//!   so Workspaces the daemon mounts or unmounts later reach it, as they
//!   reached each per-exec namespace (mount_namespaces(7)).
//! * Not a bind mount of the nsfs file, which `ip netns` uses for network
//!   namespaces: for a mount namespace the kernel allows that only into an
//!   older namespace, judged by namespace ids that Linux 6.18 hands out in
//!   per-CPU batches, so whether "older" holds depended on the CPU each
//!   namespace was made on. Measured here: one exec in four failed with
//!   EINVAL that way (`strata-sdk/tests/commands_ns.rs` now guards it).
//!
//! If the holder dies (a kill of every process in the commands' cgroup,
//! which it is in and counts one pid of), the next exec builds the
//! namespace again. A Sandbox made before this existed has no [`NS_DIR`]
//! and keeps the per-exec namespace.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use rustix::mount::MountFlags;
use rustix::thread::LinkNameSpaceType;

use crate::exec::ExecError;

/// The directory in the daemon's /dev layer (created empty by
/// `dev::populate_dev`, read-only like the rest of that layer) on which
/// the first exec mounts a tmpfs for [`RECORD`].
pub(crate) const NS_DIR: &str = "/dev/.strata-commands-ns";
/// "PID INODE DEV" of the holder and its mount namespace.
const RECORD: &str = "/dev/.strata-commands-ns/holder";

fn fail(what: &str, errno: Option<i32>) -> ExecError {
    ExecError::CommandsNamespace {
        message: what.to_string(),
        errno,
    }
}

fn io_fail(what: &'static str) -> impl Fn(io::Error) -> ExecError {
    move |e| fail(&format!("{what}: {e}"), e.raw_os_error())
}

/// Enter the Sandbox's commands' namespace, building it with `build` (run
/// in a fresh mount namespace copied from the daemon's) if no exec has yet
/// or its holder is gone. `Ok(false)`: this Sandbox has no [`NS_DIR`] (made
/// by an older init); the caller must build a namespace of its own.
pub(crate) fn enter(build: fn() -> Result<(), ExecError>) -> Result<bool, ExecError> {
    if !Path::new(NS_DIR).is_dir() {
        return Ok(false);
    }
    if try_enter()? {
        return Ok(true);
    }
    // First exec (or several at once): one builds, the others wait on the
    // lock and then find the record. The masks list is a plain file in the
    // same layer that nothing mounts over, so its lock is stable.
    let lock = File::open(crate::mounts::COMMAND_MASKS_FILE)
        .map_err(io_fail("opening the command masks list to lock it"))?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| io_fail("flock of the command masks list")(e.into()))?;
    if try_enter()? {
        return Ok(true);
    }
    create(build)?;
    if try_enter()? {
        Ok(true)
    } else {
        Err(fail("the holder made for it is already gone", None))
    }
}

/// `setns` into the recorded namespace if its holder still holds it.
fn try_enter() -> Result<bool, ExecError> {
    let record = match std::fs::read_to_string(RECORD) {
        Ok(r) => r,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io_fail("reading the holder record")(e)),
    };
    let fields: Vec<u64> = record
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    let [pid, ino, dev] = fields[..] else {
        return Err(fail(&format!("unreadable holder record {record:?}"), None));
    };
    // A dead holder: ENOENT (or ESRCH) here, or a pid reused by a process
    // in another namespace: a different inode.
    let Ok(ns) = File::open(format!("/proc/{pid}/ns/mnt")) else {
        return Ok(false);
    };
    let meta = ns.metadata().map_err(io_fail("fstat of the namespace"))?;
    if meta.ino() != ino || meta.dev() != dev {
        return Ok(false);
    }
    rustix::thread::move_into_link_name_space(ns.as_fd(), Some(LinkNameSpaceType::Mount))
        .map_err(|e| io_fail("setns(CLONE_NEWNS) into the commands' namespace")(e.into()))?;
    Ok(true)
}

/// Start a holder (double fork: it is nobody's child but the Sandbox's
/// init, so no command's shell ever waits for it), wait until it has built
/// the namespace or failed, and write the record.
fn create(build: fn() -> Result<(), ExecError>) -> Result<(), ExecError> {
    let dir = Path::new(NS_DIR);
    let below = std::fs::metadata("/dev")
        .map_err(io_fail("stat /dev"))?
        .dev();
    let here = std::fs::metadata(dir).map_err(io_fail("stat of the namespace directory"))?;
    if here.dev() == below {
        rustix::mount::mount(
            "tmpfs",
            dir,
            "tmpfs",
            MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
            c"mode=0700,size=4k",
        )
        .map_err(|e| io_fail("tmpfs for the holder record")(e.into()))?;
    }
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| io_fail("pipe to the holder")(e.into()))?;
    // SAFETY: fork(2) in the exec helper, which is single-threaded (checked
    // before any of this runs, see internal.rs), so the child may allocate
    // and run ordinary Rust code.
    let first = unsafe { libc::fork() };
    if first < 0 {
        return Err(io_fail("fork of the holder")(io::Error::last_os_error()));
    }
    if first == 0 {
        drop(r);
        // SAFETY: as above; this intermediate child only forks and exits.
        let second = unsafe { libc::fork() };
        if second == 0 {
            hold(build, w);
        }
        // SAFETY: _exit(2) skips atexit handlers and buffered output that
        // belong to the helper, as a forked child must.
        unsafe { libc::_exit(if second < 0 { 1 } else { 0 }) };
    }
    drop(w);
    rustix::process::waitpid(
        rustix::process::Pid::from_raw(first),
        rustix::process::WaitOptions::empty(),
    )
    .map_err(|e| io_fail("waiting for the holder's parent")(e.into()))?;
    let mut answer = String::new();
    File::from(r)
        .read_to_string(&mut answer)
        .map_err(io_fail("reading the holder's answer"))?;
    let mut words = answer.splitn(3, ' ');
    match (words.next(), words.next(), words.next()) {
        (Some("ok"), Some(pid), None) => {
            let ns = File::open(format!("/proc/{}/ns/mnt", pid.trim()))
                .map_err(io_fail("opening the holder's namespace"))?;
            let meta = ns.metadata().map_err(io_fail("fstat of the namespace"))?;
            let tmp = format!("{RECORD}.tmp");
            std::fs::write(
                &tmp,
                format!("{} {} {}\n", pid.trim(), meta.ino(), meta.dev()),
            )
            .and_then(|()| std::fs::rename(&tmp, RECORD))
            .map_err(io_fail("writing the holder record"))?;
            Ok(())
        }
        (Some("err"), Some(errno), Some(message)) => {
            Err(fail(message.trim(), errno.parse().ok().filter(|&n| n != 0)))
        }
        _ => Err(fail(
            &format!("the holder ended without building it (said {answer:?})"),
            None,
        )),
    }
}

/// The holder: its own session, nothing of the helper's open (the exec's
/// stdio pipes must reach EOF when the command ends), the namespace built,
/// one line of answer, then pause(2) until the Sandbox ends.
fn hold(build: fn() -> Result<(), ExecError>, answer: OwnedFd) -> ! {
    let _ = rustix::process::setsid();
    // Its working directory must not hold a Workspace busy.
    let _ = rustix::process::chdir("/");
    if let Ok(null) = File::options().read(true).write(true).open("/dev/null") {
        for fd in 0..3 {
            // SAFETY: dup2 onto the standard descriptors of this process;
            // `null` stays open for the call.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
    let keep = answer.as_raw_fd() as u32;
    // SAFETY: close_range(2) only closes descriptors, none of which this
    // process uses after this point except `answer` (kept) and 0-2.
    unsafe {
        if keep > 3 {
            libc::syscall(libc::SYS_close_range, 3u32, keep - 1, 0u32);
        }
        libc::syscall(libc::SYS_close_range, keep + 1, u32::MAX, 0u32);
    }
    let line = match build() {
        Ok(()) => format!("ok {}", std::process::id()),
        Err(e) => format!("err {} {e}", e.errno().unwrap_or(0)),
    };
    let ok = line.starts_with("ok");
    let _ = File::from(answer).write_all(line.as_bytes());
    if !ok {
        // SAFETY: as in `create`: a forked child leaves with _exit(2).
        unsafe { libc::_exit(1) };
    }
    loop {
        // SAFETY: pause(2) takes no arguments; it returns only when a
        // signal was caught, and then the loop pauses again.
        unsafe { libc::pause() };
    }
}
