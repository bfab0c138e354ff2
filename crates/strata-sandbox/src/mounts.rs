//! The command's view of the filesystem, built by the sandbox init inside
//! its fresh mount namespace (before any command runs).
//!
//! Order (each step's reason is at the step):
//! 1. make every mount private, so nothing propagates to or from the host;
//! 2. stage the new root (on a tmpfs private to this namespace): the host
//!    view (a tmpfs with the host's system directories and /etc, see
//!    [`crate::hostview`]), or a rootfs dir;
//! 3. make the whole staged tree read-only, nosuid, nodev (mount_setattr
//!    with AT_RECURSIVE, Linux 5.12);
//! 4. fresh /tmp (tmpfs), /proc (procfs of the new PID namespace, other
//!    uids' processes hidden), /sys
//!    (read-only sysfs of the new network namespace), a minimal /dev, and
//!    with `dev_fuse` a daemon-only /dev stacked on it;
//! 5. extra bind mounts (the daemon's state, exposed host paths), then the
//!    masks;
//! 6. pivot_root and detach the old root, so the host tree is unreachable;
//! 7. shared propagation inside the Sandbox, so commands in mount
//!    namespaces of their own still receive the daemon's later mounts.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use rustix::mount::{MountFlags, MountPropagationFlags, UnmountFlags};
use serde::{Deserialize, Serialize};

/// What `/` is inside the Sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RootFs {
    /// The host, read-only, but only what a program needs from it: the
    /// system directories and /etc without its non-world-readable entries
    /// on an otherwise empty tmpfs ([`crate::hostview`]). Not /home, /root,
    /// /srv, /opt, /var, /mnt, /media, /run, nor any Store: more of the
    /// host only through explicit binds (`--expose`).
    HostReadOnly,
    /// A directory holding a root filesystem (an unpacked image).
    /// Mount points /tmp, /proc, /sys and /dev are created in it if missing
    /// (before it is made read-only).
    Dir { path: PathBuf, readonly: bool },
}

/// An extra bind mount into the Sandbox (e.g. a Workspace at /workspace).
/// The target must already exist in the new root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindMount {
    /// Path on the host (before pivot_root).
    pub source: PathBuf,
    /// Absolute path inside the Sandbox.
    pub target: PathBuf,
    pub readonly: bool,
}

pub use crate::dev::DEVICES;

/// Where the staged root lives before pivot_root: inside a tmpfs mounted
/// over /tmp *in the new mount namespace only* (the host's /tmp is not
/// touched and the directory vanishes with the namespace).
const STAGING_TMPFS: &str = "/tmp";
const STAGING_ROOT: &str = "/tmp/.strata-root";
const STAGING_DEV: &str = "/tmp/.strata-dev";

/// In the daemon's /dev layer only (commands lose that layer): the JSON
/// list of `SandboxConfig::command_masked_paths`, for the exec helper.
pub(crate) const COMMAND_MASKS_FILE: &str = "/dev/.strata-command-masks";

/// A mount step failed; `step` says which and `path` where.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("mount: {step} at {path}: {source}")]
    Step {
        step: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("mount: rootfs {path} is not a directory (or cannot be opened)")]
    NoRootfs { path: PathBuf },
    #[error("mount: {target} must be an absolute path without '..' that exists in the new root and does not lead out of it through a symlink")]
    BadTarget { target: PathBuf },
}

pub(crate) fn step<T>(
    step: &'static str,
    path: impl AsRef<Path>,
    r: Result<T, impl Into<io::Error>>,
) -> Result<T, MountError> {
    r.map_err(|e| MountError::Step {
        step,
        path: path.as_ref().into(),
        source: e.into(),
    })
}

pub(crate) fn flags(bits: libc::c_ulong) -> MountFlags {
    MountFlags::from_bits_retain(bits as u32)
}

pub(crate) fn mount(
    src: &str,
    target: &Path,
    fstype: &str,
    bits: libc::c_ulong,
    data: &str,
    what: &'static str,
) -> Result<(), MountError> {
    let data = CString::new(data).map_err(|_| MountError::Step {
        step: what,
        path: target.into(),
        source: io::ErrorKind::InvalidInput.into(),
    })?;
    step(
        what,
        target,
        rustix::mount::mount(src, target, fstype, flags(bits), data.as_c_str()),
    )
}

pub(crate) fn bind(
    src: &Path,
    target: &Path,
    recursive: bool,
    what: &'static str,
) -> Result<(), MountError> {
    let r = if recursive {
        rustix::mount::mount_bind_recursive(src, target)
    } else {
        rustix::mount::mount_bind(src, target)
    };
    step(what, target, r)
}

/// Remount one bind mount read-only, keeping the flags it must keep:
/// a bind remount has to repeat nosuid/nodev/noexec that are set (or the
/// kernel refuses with EPERM when they are "locked").
pub(crate) fn remount_ro(
    target: &Path,
    extra: libc::c_ulong,
    what: &'static str,
) -> Result<(), MountError> {
    let bits = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | extra;
    step(
        what,
        target,
        rustix::mount::mount_remount(target, flags(bits), ""),
    )
}

/// mount_setattr(2) with AT_RECURSIVE: one call makes a whole tree
/// read-only, nosuid and nodev, including submounts that a plain
/// `MS_REMOUNT|MS_RDONLY` would miss. (rustix has no wrapper for it.)
fn make_tree_readonly(target: &Path) -> Result<(), MountError> {
    set_tree_attrs(target, true)
}

/// [`make_tree_readonly`], or with `readonly` false only nosuid and nodev.
fn set_tree_attrs(target: &Path, readonly: bool) -> Result<(), MountError> {
    #[repr(C)]
    struct MountAttr {
        attr_set: u64,
        attr_clr: u64,
        propagation: u64,
        userns_fd: u64,
    }
    const MOUNT_ATTR_RDONLY: u64 = 0x1;
    const MOUNT_ATTR_NOSUID: u64 = 0x2;
    const MOUNT_ATTR_NODEV: u64 = 0x4;
    let ro = if readonly { MOUNT_ATTR_RDONLY } else { 0 };
    let attr = MountAttr {
        attr_set: ro | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let path = CString::new(target.as_os_str().as_bytes()).map_err(|_| MountError::Step {
        step: "mount_setattr(ro,nosuid,nodev, recursive)",
        path: target.into(),
        source: io::ErrorKind::InvalidInput.into(),
    })?;
    // SAFETY: `path` is a valid C string and `attr` a valid struct
    // mount_attr of the size passed; the kernel only reads both.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::AT_RECURSIVE as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc != 0 {
        return Err(MountError::Step {
            step: "mount_setattr(ro,nosuid,nodev, recursive)",
            path: target.into(),
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

pub(crate) fn mkdir_p(path: &Path, mode: u32) -> Result<(), MountError> {
    step(
        "mkdir",
        path,
        fs::DirBuilder::new()
            .recursive(true)
            .mode(mode)
            .create(path),
    )
}

pub(crate) fn touch(path: &Path) -> Result<(), MountError> {
    step(
        "create device mount point",
        path,
        fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map(drop),
    )
}

/// `p` relative to the staged root (`/x` -> `STAGING_ROOT/x`).
pub(crate) fn under(root: &Path, p: &str) -> PathBuf {
    root.join(p.trim_start_matches('/'))
}

pub(crate) fn open_path(path: &Path) -> Result<OwnedFd, MountError> {
    use rustix::fs::{Mode, OFlags};
    step(
        "open (O_PATH)",
        path,
        rustix::fs::open(path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty()),
    )
}

fn open_dir_path(path: &Path) -> Result<OwnedFd, MountError> {
    use rustix::fs::{Mode, OFlags};
    rustix::fs::open(
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|_| MountError::NoRootfs { path: path.into() })
}

/// `/proc/self/fd/N`: a path that resolves to what `fd` refers to.
pub(crate) fn fd_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Paths hidden in every Sandbox (as runc and Docker do): kernel memory,
/// the keyring list, timer and scheduler internals that leak host
/// activity, and firmware tables. Missing ones are skipped.
pub const DEFAULT_MASKED: &[&str] = &[
    "/proc/kcore",
    "/proc/keys",
    "/proc/timer_list",
    "/proc/sched_debug",
    "/proc/latency_stats",
    "/proc/acpi",
    "/proc/scsi",
    "/sys/firmware",
];

/// `p` (absolute, inside the Sandbox) resolved under `root`, or `None` if it
/// does not exist. Symlinks are followed by canonicalize, so the result is
/// checked to still be under `root`: a link to an absolute path would
/// otherwise lead out to the host tree.
pub(crate) fn inside(root: &Path, p: &Path) -> Result<Option<PathBuf>, MountError> {
    if !crate::exec::is_clean_absolute(p) {
        return Err(MountError::BadTarget { target: p.into() });
    }
    let joined = under(root, &p.to_string_lossy());
    match fs::canonicalize(&joined) {
        Ok(real) if real.starts_with(root) => Ok(Some(real)),
        Ok(_) => Err(MountError::BadTarget { target: p.into() }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(MountError::Step {
            step: "resolve path in the new root",
            path: joined,
            source: e,
        }),
    }
}

pub(crate) fn mask(target: &Path) -> Result<(), MountError> {
    let meta = step("stat mask target", target, fs::metadata(target))?;
    if meta.is_dir() {
        mount(
            "tmpfs",
            target,
            "tmpfs",
            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            "mode=0755,size=4096",
            "mask directory with an empty tmpfs",
        )
    } else {
        bind(
            Path::new("/dev/null"),
            target,
            false,
            "mask file with /dev/null",
        )?;
        remount_ro(
            target,
            libc::MS_NOSUID | libc::MS_NOEXEC,
            "remount file mask read-only",
        )
    }
}

/// Undo the escaping of mountinfo(5) fields (space, tab, newline and
/// backslash are written as octal `\NNN`). Public for the daemon, which
/// checks where a Workspace mount landed.
pub fn unescape_mountinfo(field: &str) -> PathBuf {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], oct) {
            (b'\\', Some(d)) => {
                let v = u32::from(d[0] - b'0') * 64
                    + u32::from(d[1] - b'0') * 8
                    + u32::from(d[2] - b'0');
                out.push(u8::try_from(v).unwrap_or(b'?'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// This process's mount table, mountinfo(5).
pub const MOUNTINFO: &str = "/proc/self/mountinfo";

/// One line of mountinfo(5), the fields strata reads, unescaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountInfo {
    /// Field 5: where it is mounted.
    pub mount_point: PathBuf,
    /// The first field after " - ", e.g. `fuse.strata`, `cgroup`.
    pub fstype: String,
    /// The mount source, e.g. a Workspace's `fsname`.
    pub source: String,
    /// The per-superblock options, e.g. `rw,memory` for a cgroup v1 mount.
    pub super_options: String,
}

/// The one mountinfo(5) parser: every line that has its fields (the
/// optional fields before " - " vary in number, so the filesystem type,
/// source and superblock options are counted from the separator). Paths
/// and the source are unescaped ([`unescape_mountinfo`]).
pub fn parse_mountinfo(text: &str) -> Vec<MountInfo> {
    text.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let point = left.split(' ').nth(4)?;
            let mut r = right.split(' ');
            let fstype = r.next()?.to_string();
            let source = unescape_mountinfo(r.next()?);
            Some(MountInfo {
                mount_point: unescape_mountinfo(point),
                fstype,
                source: source.to_string_lossy().into_owned(),
                super_options: r.next().unwrap_or("").to_string(),
            })
        })
        .collect()
}

/// [`parse_mountinfo`] of [`MOUNTINFO`].
pub fn read_mountinfo() -> io::Result<Vec<MountInfo>> {
    Ok(parse_mountinfo(&fs::read_to_string(MOUNTINFO)?))
}

/// Detach every FUSE mount in the copy of the host's system directories.
///
/// A recursive bind copies *all* host mounts below its source, FUSE ones
/// included: a host-side Workspace mounted under /usr or /etc (served with
/// allow_other) would be readable by the
/// command, and, because the copy holds a reference to the superblock, the
/// host's unmount would not end that FUSE session until this Sandbox ends.
/// A Sandbox gets Workspaces only through its own binds and daemon.
/// Deepest first, lazily, so that nested mounts go with their parents.
/// A FUSE mount that the host itself has covered with another mount cannot
/// be reached by path and stays (unreachable for commands too).
fn detach_fuse_mounts(new_root: &Path) -> Result<(), MountError> {
    let table = step("read /proc/self/mountinfo", MOUNTINFO, read_mountinfo())?;
    let mut fuse: Vec<PathBuf> = table
        .into_iter()
        .filter(|m| {
            let t = m.fstype.as_str();
            (t == "fuse" || t == "fuseblk" || t.starts_with("fuse."))
                && m.mount_point.starts_with(new_root)
                && m.mount_point != new_root
        })
        .map(|m| m.mount_point)
        .collect();
    fuse.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for mp in fuse {
        match rustix::mount::unmount(&mp, UnmountFlags::DETACH) {
            // Already gone with a parent detached before it.
            Ok(()) | Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return step("detach a host FUSE mount from the copy", &mp, Err(e)),
        }
    }
    Ok(())
}

/// Detach whatever the copy of the host root has mounted at `path` (the
/// host's /proc with binfmt_misc, devtmpfs with /dev/pts and /dev/shm,
/// sysfs with cgroup, bpf, debugfs, fusectl...), layer by layer, before a
/// fresh filesystem goes there. Hidden mounts would be unreachable anyway,
/// but they would still be listed in the command's mountinfo and keep host
/// superblocks referenced. EINVAL means "not a mount point": done.
fn detach_copies(path: &Path) -> Result<(), MountError> {
    for _ in 0..16 {
        match rustix::mount::unmount(path, UnmountFlags::DETACH) {
            Ok(()) => continue,
            Err(rustix::io::Errno::INVAL) => return Ok(()),
            Err(e) => return step("detach the host's mount copied here", path, Err(e)),
        }
    }
    Ok(())
}

/// Build the view and pivot into it. Must run single-threaded in a fresh
/// mount namespace (CLONE_NEWNS) with CAP_SYS_ADMIN over it: as real root
/// (the Sandbox's init), or as root of a user namespace that owns the
/// mount, PID and network namespaces (`strata run --isolate`, where the
/// tmpfs, proc, sysfs and devpts mounts are allowed because they are
/// FS_USERNS_MOUNT). Must also run as a process *in* the PID and network
/// namespaces the view is for, so that /proc and /sys describe them.
pub fn build_view(cfg: &crate::ns::SandboxConfig) -> Result<(), MountError> {
    build_view_with(cfg, &mut || {
        Ok(crate::hostview::unreadable_under(Path::new(
            crate::hostview::ETC,
        )))
    })
}

/// [`build_view`], with the host view's /etc masks
/// ([`crate::hostview::unreadable_under`] of /etc) from `etc_masks`,
/// called once at the masking step and only for
/// [`RootFs::HostReadOnly`]: the Sandbox's PID 1 gets them from its
/// monitor, which walks /etc while PID 1 unshares and mounts
/// (crates/strata-sandbox/src/init.rs, step 6c).
pub fn build_view_with(
    cfg: &crate::ns::SandboxConfig,
    etc_masks: &mut dyn FnMut() -> Result<Vec<PathBuf>, MountError>,
) -> Result<(), MountError> {
    let (root, binds) = (&cfg.root, &cfg.binds);
    let (tmp_size_bytes, dev_fuse) = (cfg.tmp_size_bytes, cfg.dev_fuse);
    // 1. Private propagation for everything, recursively. Without it, the
    //    mounts below would propagate back into the host's shared mounts
    //    (systemd makes / shared) and host mounts would appear inside.
    step(
        "make / private (MS_REC|MS_PRIVATE)",
        "/",
        rustix::mount::mount_change(
            "/",
            MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
        ),
    )?;

    // 2a. Host paths we still need (a rootfs dir, bind sources) are
    //     opened as O_PATH fds *before* the staging tmpfs covers /tmp, and
    //     bound through /proc/self/fd/N (mount(2) follows that magic link
    //     to the file itself). So a rootfs or Workspace under /tmp works.
    let rootfs_fd = match root {
        RootFs::HostReadOnly => None,
        RootFs::Dir { path, .. } => Some(open_dir_path(path)?),
    };
    let bind_fds = binds
        .iter()
        .map(|b| open_path(&b.source))
        .collect::<Result<Vec<_>, _>>()?;

    // 2b. Stage the new root on a tmpfs over /tmp that exists only in this
    //     mount namespace (the host's /tmp is untouched); it is detached
    //     with the old root in step 6.
    mount(
        "tmpfs",
        Path::new(STAGING_TMPFS),
        "tmpfs",
        libc::MS_NOSUID | libc::MS_NODEV,
        "mode=0700",
        "staging tmpfs",
    )?;
    let new_root = PathBuf::from(STAGING_ROOT);
    mkdir_p(&new_root, 0o755)?;
    let etc_masks = match &rootfs_fd {
        None => {
            // A tmpfs root with the host's system directories bound into
            // it (crate::hostview), nothing else of the host.
            crate::hostview::stage(&new_root)?;
            // The recursive binds copy the submounts of those directories,
            // FUSE ones included (see detach_fuse_mounts).
            detach_fuse_mounts(&new_root)?;
            etc_masks()?
        }
        Some(fd) => {
            bind(&fd_path(fd), &new_root, true, "bind rootfs")?;
            // Mount points the steps below need. Created in the rootfs
            // directory itself if missing (documented on RootFs::Dir).
            for d in ["tmp", "proc", "sys", "dev"] {
                let p = new_root.join(d);
                if !p.exists() {
                    mkdir_p(&p, 0o755)?;
                }
            }
            Vec::new()
        }
    };

    // 2c. Mount points the caller asked for (e.g. /workspace) and the
    //     targets of the binds of step 5, before the read-only step so that
    //     it covers them too. Never written to the host: on the host view
    //     a missing path is created in place only on the root's own tmpfs,
    //     anywhere else a layer is spliced (crate::mountpoints).
    let readonly = match root {
        RootFs::HostReadOnly => true,
        RootFs::Dir { readonly, .. } => *readonly,
    };
    let root_dev = step("stat the new root", &new_root, fs::metadata(&new_root))?.dev();
    let in_place = |ancestor: &Path| match root {
        RootFs::HostReadOnly => fs::metadata(ancestor).is_ok_and(|m| m.dev() == root_dev),
        RootFs::Dir { readonly, .. } => !*readonly,
    };
    crate::mountpoints::create(
        &new_root,
        Path::new(STAGING_TMPFS),
        &cfg.mountpoints,
        &in_place,
    )?;
    crate::mountpoints::bind_targets(
        &new_root,
        Path::new(STAGING_TMPFS),
        binds,
        &bind_fds,
        &in_place,
    )?;

    // 3. Read-only for the whole staged tree (the root tmpfs, every bound
    //    system directory and its submounts), plus nosuid/nodev: nothing on
    //    the host tree may grant privileges or expose device nodes.
    if readonly {
        make_tree_readonly(&new_root)?;
    }

    // 4a. /tmp: a private, writable tmpfs (sticky, world-writable like a
    //     normal /tmp). nosuid/nodev: nothing placed there gains privileges.
    let tmp_data = match tmp_size_bytes {
        Some(b) => format!("mode=1777,size={b}"),
        None => "mode=1777".to_string(),
    };
    let tmp = under(&new_root, "/tmp");
    detach_copies(&tmp)?;
    mount(
        "tmpfs",
        &tmp,
        "tmpfs",
        libc::MS_NOSUID | libc::MS_NODEV,
        &tmp_data,
        "tmpfs /tmp",
    )?;

    // 4b. /proc: a fresh procfs shows only the Sandbox's PID namespace
    //     (procfs takes the PID namespace of the mounting process), and of
    //     it only the processes the reader may ptrace (proc(5),
    //     hidepid=invisible): a command sees its own uid's processes, not
    //     the init's or the daemon's (root), whose command lines and pids
    //     are nobody else's business; root (the daemon, the exec helper)
    //     still sees all. `hidepid=2` is the same before Linux 5.8.
    let proc_ = under(&new_root, "/proc");
    detach_copies(&proc_)?;
    let proc_flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    match mount(
        "proc",
        &proc_,
        "proc",
        proc_flags,
        "hidepid=invisible",
        "procfs /proc",
    ) {
        Err(MountError::Step { source, .. }) if source.raw_os_error() == Some(libc::EINVAL) => {
            mount(
                "proc",
                &proc_,
                "proc",
                proc_flags,
                "hidepid=2",
                "procfs /proc",
            )?
        }
        r => r?,
    }

    // 4c. /sys read-only: sysfs mounted from inside the new network
    //     namespace lists only its interfaces (lo). Read-only because
    //     nothing in a Sandbox configures the kernel. Mounted rw and then
    //     made read-only per mount: with the host's network namespace the
    //     kernel reuses the host's (rw) sysfs superblock, and asking for a
    //     read-only superblock there fails with EBUSY.
    //     The copy of the host's /sys is detached first (detach_copies);
    //     with the host's network namespace the new sysfs is the host's
    //     superblock, which the kernel refuses to mount on top of itself
    //     (EBUSY, do_add_mount).
    let sys = under(&new_root, "/sys");
    detach_copies(&sys)?;
    let sys_flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    mount("sysfs", &sys, "sysfs", sys_flags, "", "sysfs /sys")?;
    remount_ro(&sys, sys_flags, "remount /sys read-only")?;

    // 4d. /dev: a small tmpfs with only the devices in DEVICES bound from
    //     the host, a private devpts instance, /dev/shm and the usual
    //     symlinks; then the tmpfs itself goes read-only so no command can
    //     add nodes or replace the symlinks. This is the commands' /dev.
    let dev = under(&new_root, "/dev");
    detach_copies(&dev)?;
    crate::dev::populate_dev(&dev, Path::new("/dev"), crate::dev::DevSource::Host, &[])?;

    // 4e. The daemon's /dev (only with `dev_fuse`): a second tmpfs stacked
    //     on top of the commands' /dev, with the same device binds, the
    //     *same* devpts instance and /dev/shm (bound from the lower /dev,
    //     so ptys and shm the daemon hands to a command are the command's
    //     too) plus /dev/fuse. Built in the staging tmpfs, then moved onto
    //     /dev. A command's mount namespace drops the upper layer again
    //     (exec::hide_dev_fuse), revealing the lower one: no /dev/fuse
    //     entry at all, not even an empty mount point file.
    if dev_fuse {
        let upper = PathBuf::from(STAGING_DEV);
        mkdir_p(&upper, 0o755)?;
        let fuse = crate::dev::DevSource::Lower {
            fuse: Path::new("/dev/fuse"),
        };
        crate::dev::populate_dev(&upper, &dev, fuse, &cfg.command_masked_paths)?;
        step(
            "move the daemon's /dev into place (MS_MOVE)",
            &dev,
            rustix::mount::mount_move(&upper, &dev),
        )?;
    }

    // 5. Extra binds (the daemon's state, exposed host paths, a rootless
    //    Workspace), after the read-only step so that a writable bind stays
    //    writable. A target in the fresh /tmp is created there now (step
    //    2c could not: 4a covered it).
    for (b, fd) in binds.iter().zip(&bind_fds) {
        crate::mountpoints::create_in_tmp(&new_root, &b.target, fd)?;
        let target = inside(&new_root, &b.target)?.ok_or_else(|| MountError::BadTarget {
            target: b.target.clone(),
        })?;
        bind(&fd_path(fd), &target, true, "bind mount into the Sandbox")?;
        // nosuid, nodev whatever the host's mount allows (an exposed home
        // directory may hold setuid binaries or device nodes).
        set_tree_attrs(&target, b.readonly)?;
    }

    // 5b. Masks, last, so that nothing mounted above can uncover them: an
    //     empty read-only tmpfs over a directory, /dev/null over a file.
    //     On the host view: what /etc holds that others may not read.
    let defaults = DEFAULT_MASKED.iter().map(PathBuf::from).chain(etc_masks);
    // Without the daemon's /dev layer there is no way to tell commands
    // apart: command-only masks then apply to everyone.
    let command_only: &[PathBuf] = if dev_fuse {
        &[]
    } else {
        &cfg.command_masked_paths
    };
    let masks = cfg.masked_paths.iter().chain(command_only).cloned();
    for p in defaults.chain(masks) {
        let Some(target) = inside(&new_root, &p)? else {
            continue;
        };
        mask(&target)?;
    }

    // 6. pivot_root(".", ".") then detach the old root stacked on top of
    //    it (the runc trick, see pivot_root(2) NOTES): no spare directory
    //    is needed, and after the lazy unmount the host tree is not
    //    reachable from this namespace at all (unlike chroot).
    step(
        "chdir to new root",
        &new_root,
        rustix::process::chdir(&new_root),
    )?;
    step(
        "pivot_root",
        &new_root,
        rustix::process::pivot_root(".", "."),
    )?;
    step(
        "detach old root",
        "/",
        rustix::mount::unmount(".", UnmountFlags::DETACH),
    )?;
    step("chdir /", "/", rustix::process::chdir("/"))?;

    // 7. Shared propagation inside the Sandbox (new peer groups, private to
    //    this namespace since step 1 cut the host off): a command's own
    //    mount namespace, made a slave of this one, then still receives the
    //    Workspace mounts the daemon makes after the command started.
    step(
        "make / rshared inside the Sandbox",
        "/",
        rustix::mount::mount_change(
            "/",
            MountPropagationFlags::REC | MountPropagationFlags::SHARED,
        ),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_unescape() {
        assert_eq!(
            unescape_mountinfo("/a\\040b\\011c"),
            PathBuf::from("/a b\tc")
        );
        assert_eq!(unescape_mountinfo("/x\\134y"), PathBuf::from("/x\\y"));
        assert_eq!(
            unescape_mountinfo("/trailing\\04"),
            PathBuf::from("/trailing\\04")
        );
        assert_eq!(unescape_mountinfo("/plain"), PathBuf::from("/plain"));
    }

    #[test]
    fn mountinfo_lines() {
        let mi = "36 35 98:0 /mnt1 /mnt/a\\040b rw,noatime master:1 shared:2 - fuse.strata strata:w\\0401 rw,user_id=0\n\
                  37 25 0:31 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
                  broken line\n";
        let m = parse_mountinfo(mi);
        assert_eq!(m.len(), 2, "{m:?}");
        assert_eq!(m[0].mount_point, PathBuf::from("/mnt/a b"));
        assert_eq!(m[0].fstype, "fuse.strata");
        assert_eq!(m[0].source, "strata:w 1");
        assert_eq!(m[0].super_options, "rw,user_id=0");
        assert_eq!(
            m[1].mount_point,
            PathBuf::from("/sys/fs/cgroup/cpu,cpuacct")
        );
        assert_eq!(m[1].super_options, "rw,cpu,cpuacct");
        assert!(!read_mountinfo().unwrap().is_empty());
    }
}
