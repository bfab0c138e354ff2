//! Passthrough on a ring-served mount. fuser makes its `BackingId` only
//! through a fuser reply, which a ring-served request has not, so the
//! ring registers backing files itself: FUSE_DEV_IOC_BACKING_OPEN on the
//! connection's /dev/fuse fd returns an id the OPEN or CREATE answer
//! carries (fuse_open_out.backing_id with FOPEN_PASSTHROUGH), and
//! FUSE_DEV_IOC_BACKING_CLOSE drops it when the Workspace lets the inode's
//! backing go (fs/fuse/passthrough.c, fuse_backing_open/close()).
#![allow(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::{Arc, Weak};

/// _IOW(229, 1, struct fuse_backing_map): struct fuse_backing_map is
/// {fd i32, flags u32, padding u64}, 16 bytes.
const FUSE_DEV_IOC_BACKING_OPEN: libc::c_ulong = (1 << 30) | (16 << 16) | (229 << 8) | 1;
/// _IOW(229, 2, uint32_t).
const FUSE_DEV_IOC_BACKING_CLOSE: libc::c_ulong = (1 << 30) | (4 << 16) | (229 << 8) | 2;

#[repr(C)]
struct BackingMap {
    fd: i32,
    flags: u32,
    padding: u64,
}

/// A backing id registered on a ring-served connection; closed on drop
/// unless the connection's fd is gone (then the kernel dropped it too).
#[derive(Debug)]
pub(crate) struct RingBacking {
    id: u32,
    dev: Weak<OwnedFd>,
}

impl RingBacking {
    /// Register `file` as a passthrough backing (needs CAP_SYS_ADMIN).
    pub(crate) fn open(dev: &Arc<OwnedFd>, file: &std::fs::File) -> std::io::Result<RingBacking> {
        let map = BackingMap {
            fd: file.as_fd().as_raw_fd(),
            flags: 0,
            padding: 0,
        };
        // SAFETY: the ioctl reads one struct fuse_backing_map from the
        // pointer, which is valid and of that layout for the call.
        let r = unsafe { libc::ioctl(dev.as_raw_fd(), FUSE_DEV_IOC_BACKING_OPEN, &map) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            return Err(std::io::Error::new(
                e.kind(),
                format!("FUSE_DEV_IOC_BACKING_OPEN: {e}"),
            ));
        }
        Ok(RingBacking {
            id: r as u32,
            dev: Arc::downgrade(dev),
        })
    }

    pub(crate) fn id(&self) -> u32 {
        self.id
    }
}

impl Drop for RingBacking {
    fn drop(&mut self) {
        let Some(dev) = self.dev.upgrade() else {
            return;
        };
        // SAFETY: the ioctl reads one u32 from the pointer, valid for the
        // call.
        let r = unsafe { libc::ioctl(dev.as_raw_fd(), FUSE_DEV_IOC_BACKING_CLOSE, &self.id) };
        if r < 0 {
            tracing::warn!(
                "FUSE_DEV_IOC_BACKING_CLOSE of backing {}: {}",
                self.id,
                std::io::Error::last_os_error()
            );
        }
    }
}
