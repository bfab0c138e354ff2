//! Network for a Sandbox: "none" is a fresh network namespace whose only
//! interface is the loopback, brought up here; "host" shares the host's.

use std::io;

use serde::{Deserialize, Serialize};

/// Network mode of a Sandbox.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// Own network namespace with only `lo`, up (the default).
    #[default]
    None,
    /// The host's network namespace.
    Host,
}

/// Bringing up `lo` failed.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("net: socket(AF_INET, SOCK_DGRAM) for interface ioctls: {source}")]
    Socket { source: io::Error },
    #[error("net: ioctl(SIOCGIFFLAGS, {iface}): {source}")]
    GetFlags {
        iface: &'static str,
        source: io::Error,
    },
    #[error("net: ioctl(SIOCSIFFLAGS, {iface}, IFF_UP): {source}")]
    SetFlags {
        iface: &'static str,
        source: io::Error,
    },
}

/// Set IFF_UP on `lo` in the current network namespace.
///
/// A new network namespace starts with `lo` down (network_namespaces(7)),
/// so 127.0.0.1 would not even answer. The classic netdevice(7) ioctls on
/// any AF_INET socket do it without netlink; rustix has no wrapper for
/// SIOCGIFFLAGS/SIOCSIFFLAGS, hence libc.
pub fn loopback_up() -> Result<(), NetError> {
    const IFACE: &str = "lo";
    // SAFETY: plain socket(2) call; the returned fd is owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(NetError::Socket {
            source: io::Error::last_os_error(),
        });
    }
    // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(IFACE.bytes()) {
        *dst = src as libc::c_char;
    }
    // SAFETY: `req` is a valid ifreq with a NUL-terminated name (the rest of
    // ifr_name is zero); SIOCGIFFLAGS writes ifru_flags inside it.
    if unsafe { libc::ioctl(raw, libc::SIOCGIFFLAGS as _, &mut req) } != 0 {
        return Err(NetError::GetFlags {
            iface: IFACE,
            source: io::Error::last_os_error(),
        });
    }
    // SAFETY: reading/writing the flags member of the union SIOCGIFFLAGS filled in.
    unsafe { req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
    // SAFETY: as above; SIOCSIFFLAGS reads the same struct.
    if unsafe { libc::ioctl(raw, libc::SIOCSIFFLAGS as _, &req) } != 0 {
        return Err(NetError::SetFlags {
            iface: IFACE,
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}
