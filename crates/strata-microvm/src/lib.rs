//! strata-microvm: the microVM route (docs/microvm.md). One qemu VM per
//! project: its Store on the VM's own ext4 disk image (persistent across
//! boots), `strata serve` inside, reached from the host over a port forward
//! bound to the host's loopback with a token that never enters a command's
//! view.
//!
//! | piece | here |
//! |---|---|
//! | the initramfs: the static strata binary as `/init` plus the modules from the same kernel | [`initramfs`], [`cpio`] |
//! | the guest's init: mounts, modules, network, the disk, the control channel | [`guest`] |
//! | the Sandbox commands' userland: the host's /usr over read-only virtio-9p, a filtered /etc | [`userland`] |
//! | the VM's lifecycle on the host: disk, lock, qemu, the ready line, stop | [`vm`] |
//! | a one-shot boot: a host program run as root in the guest instead of the server, its output and exit status back | [`oneshot`] |
//! | what this host offers: qemu, KVM (by a probe boot), vsock, the kernel | [`probe`] |
//!
//! The `strata` binary (strata-cli) owns the server: it runs the guest's
//! `strata serve` after [`guest::setup`] and offers `strata vm`.

mod accel;
mod boot;
pub mod cpio;
pub mod guest;
pub mod initramfs;
pub mod kernel;
pub mod oneshot;
pub mod probe;
pub mod userland;
pub mod vm;

use std::path::PathBuf;

/// The qemu machine type. Not `microvm`: its only time reference is the
/// PIT (no HPET, no ACPI PM timer), and on a loaded host (2 cores shared
/// by many builds) the guest's TSC calibration against the PIT failed
/// ("tsc: Unable to calibrate against PIT", then no progress for minutes),
/// while `pc` (i440fx, with HPET and the PM timer) booted the same kernel
/// and initramfs to init every time. Its devices are virtio-pci.
pub const MACHINE: &str = "pc";

pub use accel::Accel;
pub use kernel::Kernel;
pub use vm::{Endpoint, VmConfig, VmStatus};

/// Failures of the microVM route, each naming what was wrong and what to do.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    #[error("no qemu: {binary} is not on PATH ({path}); install it (Debian: apt-get install qemu-system-x86) or pass --qemu PATH")]
    NoQemu { binary: String, path: String },
    #[error("no guest kernel: {0}; install one (Debian: apt-get install linux-image-amd64) or pass --kernel PATH")]
    NoKernel(String),
    #[error("the guest kernel lacks {what} (looked in {}); use a kernel with it, e.g. Debian's linux-image-amd64", moddir.display())]
    KernelMissing { what: String, moddir: PathBuf },
    #[error("{}: not an ext4 filesystem image ({why}); give an image made by mkfs.ext4, or leave --disk out to let strata create one", path.display())]
    NotExt4 { path: PathBuf, why: String },
    #[error("the disk {} is in use by another VM{}; stop it first (`strata vm stop`) or use another disk", path.display(), holder.map(|p| format!(" (qemu pid {p})")).unwrap_or_default())]
    DiskInUse { path: PathBuf, holder: Option<u32> },
    #[error("{what}: {}", path.display())]
    BadInput { what: String, path: PathBuf },
    #[error("bad project name {0:?}: use lowercase letters, digits, '-' and '_' (at most 64), starting with a letter or digit")]
    BadProject(String),
    #[error("{action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{command}: {message}")]
    Tool { command: String, message: String },
    #[error("the VM of project {project} did not become ready: {reason}; qemu was stopped. Console (last lines of {}):\n{console}", log.display())]
    Boot {
        project: String,
        reason: String,
        log: PathBuf,
        console: String,
    },
    #[error("the one-shot run in the VM of project {project} did not finish: {reason}; qemu was stopped. Its output so far:\n{output}\nConsole (last lines of {}):\n{console}", log.display())]
    Run {
        project: String,
        reason: String,
        output: String,
        log: PathBuf,
        console: String,
    },
    #[error("no VM is running for project {0}; start it with `strata vm start --project {0}`")]
    NotRunning(String),
}
