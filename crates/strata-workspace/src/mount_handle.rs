//! A live FUSE session of a Workspace ([`MountHandle`]): its transport,
//! its unmount (umount(2) as root, `fusermount3 -u` for a caller without
//! CAP_SYS_ADMIN, whose mount fusermount3 made), and the wait for its
//! threads.

use crate::error::{Result, WsError};
use crate::workspace::Shared;
use fuser::BackgroundSession;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A live FUSE session of a Workspace. Dropping it unmounts (lazily if the
/// mount is busy).
pub struct MountHandle {
    /// Shared with the session's filesystem object (see `WsFs::_serving`).
    pub(crate) serving: Arc<()>,
    pub(crate) session: Option<BackgroundSession>,
    pub(crate) mountpoint: Option<PathBuf>,
    pub(crate) shared: Arc<Shared>,
    /// The io_uring transport's threads, when it serves this mount.
    pub(crate) ring: Option<crate::uring::RingSet>,
}

/// Requests a mount answered through its io_uring rings so far.
#[derive(Clone, Debug)]
pub struct RingCounter(Arc<std::sync::atomic::AtomicU64>);

impl RingCounter {
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl std::fmt::Debug for MountHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MountHandle")
            .field("mountpoint", &self.mountpoint)
            .finish()
    }
}

impl MountHandle {
    pub fn mountpoint(&self) -> Option<&Path> {
        self.mountpoint.as_deref()
    }

    /// The transport serving this mount: `io_uring` or `/dev/fuse`.
    pub fn transport(&self) -> &'static str {
        match self.ring {
            Some(_) => "io_uring",
            None => "/dev/fuse",
        }
    }

    /// The count of requests served through the rings (None on /dev/fuse);
    /// readable after the handle is gone.
    pub fn ring_requests(&self) -> Option<RingCounter> {
        self.ring.as_ref().map(|r| RingCounter(r.served.clone()))
    }

    /// Unmount and wait for the session threads. While something still
    /// uses the mount this returns the EBUSY error, and dropping the handle
    /// (which this does) then detaches the mount lazily: it keeps serving
    /// its remaining users and the Workspace stays "mounted" until they go.
    pub fn unmount(mut self) -> Result<()> {
        if let Some(mp) = &self.mountpoint {
            unmount_path(mp, false)?;
        }
        self.join_inner()
    }

    /// Wait until the kernel ends the session (the mount went away).
    pub fn join(mut self) -> Result<()> {
        self.join_inner()
    }

    fn join_inner(&mut self) -> Result<()> {
        let r = match self.session.take() {
            Some(s) => match s.join() {
                Ok(()) => Ok(()),
                // fuser ends its loop quietly on ENODEV (unmounted) but
                // returns any other read error. Once the connection is gone
                // the kernel answers reads with ECONNABORTED instead when
                // it was aborted (fs/fuse/dev.c: `fc->aborted ?
                // -ECONNABORTED : -ENODEV`), and CI saw exactly that once
                // at the end of an fsx run, after a clean unmount. Either
                // way the session is over and every request the server
                // answered is already in the scratch directory, which is
                // what a commit reads, so this is an end, not a failure.
                Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => {
                    tracing::warn!("FUSE connection was aborted; the session ended");
                    Ok(())
                }
                Err(e) => Err(WsError::Invalid(format!(
                    "FUSE session ended with an error: {e}"
                ))),
            },
            None => Ok(()),
        };
        // fuser's `join` returns when its main thread ends; the filesystem
        // object (with its reference to the Workspace and so its lock) is
        // dropped by the last worker thread a moment later. Wait for that,
        // bounded, so a caller can reopen the Workspace right away.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while Arc::strong_count(&self.serving) > 1 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        if let Some(ring) = &mut self.ring {
            // Ended by the kernel at unmount (every entry completes with
            // -ENOTCONN); the wait above covered their references too.
            ring.join_finished(deadline);
        }
        self.shared.mounted.store(false, Ordering::SeqCst);
        r
    }
}

impl Drop for MountHandle {
    fn drop(&mut self) {
        if self.session.is_none() {
            return;
        }
        if let Some(mp) = &self.mountpoint {
            if unmount_path(mp, false).is_err() {
                // Busy: detach now, the kernel finishes when the last user
                // goes (umount2(2) MNT_DETACH; fusermount3 -z).
                let _ = unmount_path(mp, true);
                // The Workspace counts as mounted (no second mount, no
                // discard) until the session really ends.
                if let Some(s) = self.session.take() {
                    let shared = self.shared.clone();
                    let _ = std::thread::Builder::new()
                        .name("strata-ws-detached".into())
                        .spawn(move || {
                            let _ = s.join();
                            shared.mounted.store(false, Ordering::SeqCst);
                        });
                }
                return;
            }
        }
        let _ = self.join_inner();
    }
}

/// umount2(2) of `mp` (MNT_DETACH if `lazy`). It wants CAP_SYS_ADMIN; a
/// caller without it got its mount from fusermount3 (fuser's fallback, and
/// `auto`'s, see `Workspace::mount`), whose `-u` unmounts a FUSE mount its
/// caller owns, as fuser does (fuse_pure.rs).
fn unmount_path(mp: &Path, lazy: bool) -> Result<()> {
    let flags = match lazy {
        true => rustix::mount::UnmountFlags::DETACH,
        false => rustix::mount::UnmountFlags::empty(),
    };
    match rustix::mount::unmount(mp, flags) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::PERM) => fusermount_unmount(mp, lazy),
        Err(e) => Err(WsError::io("unmount", mp.to_path_buf())(e.into())),
    }
}

/// `fusermount3 -u MP` (else `fusermount -u`): the unmount of a caller
/// without CAP_SYS_ADMIN. Lazy (`-z`, MNT_DETACH) only when asked, like
/// umount(2) here: otherwise a busy mount stays and the error says so.
fn fusermount_unmount(mp: &Path, lazy: bool) -> Result<()> {
    let mut last = None;
    for bin in ["fusermount3", "fusermount"] {
        let mut cmd = std::process::Command::new(bin);
        cmd.arg("-u");
        if lazy {
            cmd.arg("-z");
        }
        match cmd
            .arg("--")
            .arg(mp)
            .stdin(std::process::Stdio::null())
            .output()
        {
            Ok(o) if o.status.success() => return Ok(()),
            Ok(o) => {
                return Err(WsError::Mountpoint {
                    path: mp.to_path_buf(),
                    reason: format!(
                        "unmount: umount(2) needs CAP_SYS_ADMIN and `{bin} -u` failed ({}): {}",
                        o.status,
                        String::from_utf8_lossy(&o.stderr).trim()
                    ),
                })
            }
            Err(e) => last = Some(format!("{bin}: {e}")),
        }
    }
    Err(WsError::Mountpoint {
        path: mp.to_path_buf(),
        reason: format!(
            "unmount: umount(2) needs CAP_SYS_ADMIN and no fusermount3 runs here ({}); install fuse3",
            last.unwrap_or_default()
        ),
    })
}
