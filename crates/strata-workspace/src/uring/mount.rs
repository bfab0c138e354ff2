//! Mounting for the io_uring transport: the ring needs the connection's
//! /dev/fuse fd, which fuser's `Session::new` keeps to itself, so this
//! transport mounts with mount(2) itself, as fuser does for root (the same
//! source, type, flags and options), and serves the fd with
//! `Session::from_fd` plus the ring threads.

use super::ring::{self, RingSet, UringError};
use super::{possible_cpus, probe, Transport, MAX_WRITE};
use crate::config::MountOptions;
use crate::error::{Result, WsError};
use crate::fs::WsFs;
use rustix::fs::{Mode, OFlags};
use rustix::mount::MountFlags;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

/// Whether this mount uses the ring: never for [`Transport::DevFuse`];
/// when the probe says it is usable for [`Transport::IoUringIfAvailable`]
/// (otherwise /dev/fuse, logged with the reason); and for
/// [`Transport::IoUring`] or an error saying why not.
pub(crate) fn wanted(opts: &MountOptions) -> Result<bool> {
    if opts.transport == Transport::DevFuse {
        return Ok(false);
    }
    let p = probe();
    match (&p.unusable, opts.transport) {
        (None, _) => Ok(true),
        (Some(why), Transport::IoUring) => Err(WsError::UringUnusable {
            reason: why.clone(),
        }),
        (Some(why), _) => {
            tracing::info!("FUSE transport: /dev/fuse reads ({why})");
            Ok(false)
        }
    }
}

/// Open /dev/fuse and mount it at `mp` as fuser 0.18 does for root
/// (fuse_mount_sys(): source = fsname, type "fuse", nodev and nosuid,
/// `fd=,rootmode=,user_id=,group_id=` plus default_permissions and
/// allow_other when asked). Needs CAP_SYS_ADMIN.
pub(crate) fn mount(mp: &Path, opts: &MountOptions) -> Result<OwnedFd> {
    let bad = |reason: String| WsError::Mountpoint {
        path: mp.to_path_buf(),
        reason,
    };
    let mode = std::fs::metadata(mp)
        .map_err(|e| bad(format!("{e}")))?
        .mode();
    let fd = rustix::fs::open("/dev/fuse", OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| bad(format!("open /dev/fuse: {e}")))?;
    let mut data = format!(
        "fd={},rootmode={:o},user_id={},group_id={}",
        fd.as_raw_fd(),
        mode,
        rustix::process::getuid().as_raw(),
        rustix::process::getgid().as_raw()
    );
    if opts.effective_default_permissions() {
        data.push_str(",default_permissions");
    }
    if opts.allow_other {
        data.push_str(",allow_other");
    }
    rustix::mount::mount(
        opts.fsname.as_str(),
        mp,
        "fuse",
        MountFlags::NODEV | MountFlags::NOSUID,
        std::ffi::CString::new(data)
            .map_err(|e| bad(format!("mount options: {e}")))?
            .as_c_str(),
    )
    .map_err(|e| bad(format!("mount failed: {e}")))?;
    Ok(fd)
}

/// Start the ring threads of a mount whose session serves `dev`.
pub(crate) fn start(fs: WsFs, dev: &OwnedFd, mp: &Path, allow_other: bool) -> Result<RingSet> {
    // fuser's SessionACL::Owner lets only the session's owner through
    // (besides requests the kernel sends without the caller's ids).
    let owner = (!allow_other).then(|| rustix::process::geteuid().as_raw());
    ring::start(Arc::new(fs), dev, possible_cpus(), MAX_WRITE, owner).map_err(
        |source: UringError| WsError::Uring {
            path: mp.to_path_buf(),
            source,
        },
    )
}
