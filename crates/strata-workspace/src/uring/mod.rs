//! FUSE over io_uring: the kernel hands requests to per-CPU queues of
//! buffers the server registered through an io_uring (IORING_OP_URING_CMD
//! on the /dev/fuse fd), and the server answers a request and fetches the
//! next one with one command (COMMIT_AND_FETCH) instead of a write(2) and
//! a read(2) per request. The kernel's side is fs/fuse/dev_uring.c; its
//! documentation Documentation/filesystems/fuse/fuse-io-uring.rst.
//!
//! FUSE_INIT, FORGET, INTERRUPT and notifications still travel over
//! /dev/fuse (fuser's session keeps serving those); every other request
//! goes to the ring of the CPU the caller runs on once every queue has a
//! registered entry (is_ring_ready() switches the connection's input
//! queue), and waits for that (fuse_block_alloc()) once the INIT reply
//! asked for FUSE_OVER_IO_URING.

mod abi;
mod backing;
mod dispatch;
pub(crate) mod mount;
mod ring;

pub(crate) use backing::RingBacking;
pub(crate) use ring::RingSet;
pub use ring::UringError;

use std::fmt;

/// max_write on a ring-served mount, and the size of each entry's payload
/// buffer (see fs.rs's init).
pub(crate) const MAX_WRITE: usize = 1 << 20;

/// The module parameter that lets connections use io_uring
/// (docs/design.md §5: present and N by default on the reference machines;
/// root can write Y).
pub const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// Which transport a mount uses for its requests. In configuration files
/// (a Sandbox daemon's `fuse_transport`) it is written as in
/// `STRATA_FUSE_TRANSPORT`: `dev-fuse`, `auto` or `uring`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Transport {
    /// read(2)/write(2) on /dev/fuse (fuser's session threads).
    #[serde(rename = "dev-fuse")]
    DevFuse,
    /// The default: FUSE over io_uring when [`probe`] says it is usable
    /// and the mount itself succeeds, /dev/fuse otherwise (the mount logs
    /// which, and why). docs/benchmarks.md ("io_uring as the default")
    /// has the figures that chose it: io_uring was the fastest FUSE
    /// transport in every metadata row and no slower for data.
    #[default]
    #[serde(rename = "auto")]
    IoUringIfAvailable,
    /// FUSE over io_uring or a mount error saying why not.
    #[serde(rename = "uring")]
    IoUring,
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Transport {
    type Err = String;
    /// `dev-fuse`, `auto` or `uring`; the error names the accepted values.
    fn from_str(s: &str) -> Result<Transport, String> {
        Transport::parse(Some(s))
            .map_err(|bad| format!("{bad:?} is not a FUSE transport: give uring, auto or dev-fuse"))
    }
}

impl Transport {
    /// From the `STRATA_FUSE_TRANSPORT` environment variable: `uring`
    /// (io_uring or fail), `auto` or unset (io_uring when usable, else
    /// /dev/fuse), `dev-fuse` (/dev/fuse reads). Any other value is a
    /// mistake (say `io_uring` for `uring`): it is logged as a warning
    /// naming the accepted values, and the mount keeps the default,
    /// `auto`, which serves every request the same way over either.
    pub fn from_env() -> Transport {
        let v = std::env::var("STRATA_FUSE_TRANSPORT");
        Transport::parse(v.as_deref().ok()).unwrap_or_else(|bad| {
            tracing::warn!(
                "STRATA_FUSE_TRANSPORT={bad:?} is not a transport: give uring, auto or dev-fuse; using auto"
            );
            Transport::IoUringIfAvailable
        })
    }

    /// The name `STRATA_FUSE_TRANSPORT` and configuration files use.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::DevFuse => "dev-fuse",
            Transport::IoUringIfAvailable => "auto",
            Transport::IoUring => "uring",
        }
    }

    /// `None` (unset) and `auto` are the default, `auto`; `uring` and
    /// `dev-fuse` as in [`Transport::from_env`]; anything else is returned
    /// as the error.
    pub fn parse(v: Option<&str>) -> Result<Transport, String> {
        match v {
            None | Some("auto") => Ok(Transport::IoUringIfAvailable),
            Some("dev-fuse") => Ok(Transport::DevFuse),
            Some("uring") => Ok(Transport::IoUring),
            Some(other) => Err(other.to_string()),
        }
    }
}

#[cfg(test)]
mod transport_tests {
    use super::Transport;

    #[test]
    fn transport_names_parse_and_a_wrong_one_is_an_error() {
        assert_eq!(Transport::parse(None), Ok(Transport::IoUringIfAvailable));
        assert_eq!(Transport::default(), Transport::IoUringIfAvailable);
        assert_eq!(Transport::parse(Some("dev-fuse")), Ok(Transport::DevFuse));
        assert_eq!(Transport::parse(Some("uring")), Ok(Transport::IoUring));
        assert_eq!(
            Transport::parse(Some("auto")),
            Ok(Transport::IoUringIfAvailable)
        );
        assert_eq!(
            Transport::parse(Some("io_uring")),
            Err("io_uring".to_string())
        );
        for t in [
            Transport::DevFuse,
            Transport::IoUringIfAvailable,
            Transport::IoUring,
        ] {
            assert_eq!(t.as_str().parse::<Transport>(), Ok(t));
            let json = serde_json::to_string(&t).unwrap();
            assert_eq!(json, format!("\"{}\"", t.as_str()));
            assert_eq!(serde_json::from_str::<Transport>(&json).unwrap(), t);
        }
        assert!("io_uring"
            .parse::<Transport>()
            .unwrap_err()
            .contains("uring, auto or dev-fuse"));
    }
}

/// Whether FUSE over io_uring can be used here, and why not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UringProbe {
    /// `None` when usable; otherwise the reason, with what to do.
    pub unusable: Option<String>,
    /// Number of queues the kernel will want (one per possible CPU,
    /// fuse_uring_create()).
    pub queues: usize,
}

impl UringProbe {
    pub fn usable(&self) -> bool {
        self.unusable.is_none()
    }
}

impl fmt::Display for UringProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.unusable {
            None => write!(f, "usable ({} queues, one per possible CPU)", self.queues),
            Some(why) => write!(f, "no: {why}"),
        }
    }
}

impl UringProbe {
    /// What a root mount made here with `t` serves its requests through,
    /// and why (`strata probe`'s `fuse_transport`).
    pub fn transport_line(&self, t: Transport) -> String {
        match (t, &self.unusable) {
            (Transport::DevFuse, None) => "/dev/fuse reads (STRATA_FUSE_TRANSPORT=dev-fuse; FUSE io_uring is usable: unset or auto serves over it)".into(),
            (Transport::DevFuse, Some(_)) => "/dev/fuse reads (STRATA_FUSE_TRANSPORT=dev-fuse)".into(),
            (_, None) => "io_uring (FUSE_INIT, FORGET and INTERRUPT over /dev/fuse)".into(),
            (Transport::IoUringIfAvailable, Some(why)) => {
                format!("/dev/fuse reads (the default, auto: io_uring unusable: {why})")
            }
            (Transport::IoUring, Some(why)) => format!(
                "none: STRATA_FUSE_TRANSPORT=uring but io_uring is unusable ({why}), so mounts fail"
            ),
        }
    }
}

/// Check what FUSE over io_uring needs without mounting: the kernel's
/// module parameter, io_uring itself not disabled, and a ring with
/// 128-byte SQEs (the kernel refuses FUSE commands in 64-byte ones,
/// fuse_uring_cmd()). The one thing left unchecked is the registration,
/// which needs a connection past FUSE_INIT: a mount with
/// [`Transport::IoUring`] fails with the kernel's answer if it refuses.
pub fn probe() -> UringProbe {
    let queues = possible_cpus();
    let unusable = probe_reason();
    UringProbe { unusable, queues }
}

fn probe_reason() -> Option<String> {
    match std::fs::read_to_string(ENABLE_URING) {
        Ok(s) if s.trim() == "Y" => {}
        Ok(s) => {
            return Some(format!(
                "{ENABLE_URING} is {}; as root: echo Y > {ENABLE_URING}",
                s.trim()
            ))
        }
        Err(e) => {
            return Some(format!(
                "cannot read {ENABLE_URING} ({e}): the kernel has no CONFIG_FUSE_IO_URING (Linux 6.14 or later) or the fuse module is not loaded"
            ))
        }
    }
    // 0: allowed; 1: only for the io_uring_group; 2: disabled for all.
    if let Ok(s) = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled") {
        match s.trim() {
            "0" => {}
            "1" if rustix::process::geteuid().is_root() => {}
            v => {
                return Some(format!(
                "io_uring is disabled for this process (/proc/sys/kernel/io_uring_disabled is {v})"
            ))
            }
        }
    }
    if let Err(e) = ring::new_ring(2) {
        return Some(format!(
            "cannot create an io_uring with 128-byte entries: {e}"
        ));
    }
    None
}

/// One queue per possible CPU (the kernel sizes the ring with
/// num_possible_cpus() and routes a request to the queue of task_cpu()).
pub(crate) fn possible_cpus() -> usize {
    // A CPU list: "0-1", "0", "0-3,8-11".
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    let mut n = 0;
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
            n += b.saturating_sub(a) + 1;
        }
    }
    if n == 0 {
        n = std::thread::available_parallelism().map_or(1, |n| n.get());
    }
    n
}
