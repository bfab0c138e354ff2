//! The guest side: `/init` of the VM is the strata binary started by the
//! kernel as `/init __strata-vm-init` (the words after `--` on the kernel
//! command line are init's arguments, Documentation/admin-guide/
//! kernel-parameters.rst). It mounts the kernel filesystems, loads the
//! modules the host put in the initramfs, brings up the network, mounts
//! the project's ext4 disk and opens the control channel; the `strata`
//! binary then runs `strata serve` on the disk's Store (strata-cli, which
//! owns the server) and calls [`power_off`] when told to stop.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::mount::{mount, MountFlags};

/// The argument the kernel passes to `/init`.
pub const INIT_ARG: &str = "__strata-vm-init";
/// The guest's address on qemu's user network (slirp's fixed default).
pub const GUEST_ADDR: [u8; 4] = [10, 0, 2, 15];
/// The port `strata serve` listens on inside the guest.
pub const GUEST_PORT: u16 = 7070;
/// Where the project's disk is mounted, and the Store on it.
pub const DISK_MOUNT: &str = "/mnt/disk";
pub const STORE_DIR: &str = "/mnt/disk/store";
/// The native backend's state root in the guest: on the disk, so a
/// Sandbox's record and its Workspaces' scratch (uncommitted work) outlive
/// a killed VM like a native Sandbox's outlive a host crash.
pub const SANDBOX_ROOT: &str = "/mnt/disk/sandboxes";
/// The virtio-serial port's name (`-device virtserialport,name=...`).
pub const CTL_PORT_NAME: &str = "strata.ctl";
/// The line a probe boot prints on the console.
pub const PROBE_MARKER: &str = "strata-vm-probe-ok";

/// What the guest init prepared for the server.
pub struct Guest {
    /// The control channel to the host (virtio-serial): the ready line
    /// goes out on it, `stop` comes in.
    pub ctl: File,
    pub store_dir: PathBuf,
    pub listen: std::net::SocketAddr,
}

/// A failed step of the guest's start, shown on the console and sent to
/// the host as `error: ...`.
#[derive(Debug, thiserror::Error)]
#[error("guest init: {step}: {message}")]
pub struct GuestError {
    pub step: String,
    pub message: String,
}

fn fail(step: impl Into<String>, e: impl std::fmt::Display) -> GuestError {
    GuestError {
        step: step.into(),
        message: e.to_string(),
    }
}

/// `true` when this process is the VM's init (`/init __strata-vm-init`).
pub fn is_init(args: &[std::ffi::OsString]) -> bool {
    args.get(1).is_some_and(|a| a == INIT_ARG)
}

/// `true` for a probe boot (`__strata-vm-init probe`): print the marker on
/// the console and power off; nothing else.
pub fn is_probe(args: &[std::ffi::OsString]) -> bool {
    args.get(2).is_some_and(|a| a == "probe")
}

/// The probe boot: the kernel reached init, say so and stop.
pub fn probe_boot() -> ! {
    let _ = mount_kernel_filesystems();
    console(PROBE_MARKER);
    power_off()
}

/// Every step up to a served Store. On failure the error is written to the
/// console and, if it is open by then, to the control channel.
pub fn setup() -> Result<Guest, GuestError> {
    leave_rootfs()?;
    mount_kernel_filesystems()?;
    load_modules()?;
    let ctl = open_ctl()?;
    let r = (|| {
        mount_userland()?;
        mount_cgroup2()?;
        no_user_namespaces()?;
        network()?;
        mount_disk()?;
        Ok(Guest {
            ctl: ctl
                .try_clone()
                .map_err(|e| fail("clone the control channel", e))?,
            store_dir: PathBuf::from(STORE_DIR),
            listen: std::net::SocketAddr::from((GUEST_ADDR, GUEST_PORT)),
        })
    })();
    if let Err(e) = &r {
        report_error(&ctl, e);
    }
    r
}

/// Tell the host why the guest cannot serve (one line), and the console.
pub fn report_error(mut ctl: &File, e: &dyn std::fmt::Display) {
    let line = e.to_string().replace('\n', " ");
    console(&line);
    let _ = writeln!(ctl, "error: {line}");
    let _ = ctl.flush();
}

/// A line on the serial console (the host's console.log).
pub fn console(line: &str) {
    if let Ok(mut f) = OpenOptions::new().write(true).open("/dev/console") {
        let _ = writeln!(f, "strata-vm: {line}");
    }
}

/// Stand on a mount that is not the initial rootfs. Each Sandbox's mount
/// namespace ends its setup with pivot_root(2), which refuses to move the
/// rootfs ("The rootfs (initial ramfs) cannot be pivot_root()ed", NOTES of
/// pivot_root(2); the kernel wants the current root to have a parent
/// mount). So, as switch_root does but without copying anything: bind the
/// rootfs onto a directory of itself, move that mount onto `/` and chroot
/// into it. Nothing is mounted yet, so the bind carries no submounts.
fn leave_rootfs() -> Result<(), GuestError> {
    let nr = "/strata/root";
    fs::create_dir_all(nr).map_err(|e| fail(format!("create {nr}"), e))?;
    rustix::mount::mount_bind("/", nr).map_err(|e| fail(format!("bind / onto {nr}"), e))?;
    std::env::set_current_dir(nr).map_err(|e| fail(format!("chdir {nr}"), e))?;
    rustix::mount::mount_move(".", "/").map_err(|e| fail("move the bound root onto /", e))?;
    std::os::unix::fs::chroot(".").map_err(|e| fail("chroot into the bound root", e))?;
    std::env::set_current_dir("/").map_err(|e| fail("chdir /", e))
}

fn mount_kernel_filesystems() -> Result<(), GuestError> {
    for (src, dst, fstype) in [
        ("proc", "/proc", "proc"),
        ("sysfs", "/sys", "sysfs"),
        ("devtmpfs", "/dev", "devtmpfs"),
        ("tmpfs", "/tmp", "tmpfs"),
    ] {
        let _ = fs::create_dir_all(dst);
        match mount(
            src,
            dst,
            fstype,
            MountFlags::NOSUID,
            None::<&std::ffi::CStr>,
        ) {
            Ok(()) => {}
            // devtmpfs may already be mounted by the kernel (DEVTMPFS_MOUNT).
            Err(rustix::io::Errno::BUSY) => {}
            Err(e) => return Err(fail(format!("mount {fstype} on {dst}"), e)),
        }
    }
    Ok(())
}

/// finit_module(2) for every module in `/modules.order`, in order. EEXIST
/// (already loaded) is fine.
fn load_modules() -> Result<(), GuestError> {
    let order = fs::read_to_string("/modules.order").map_err(|e| fail("read /modules.order", e))?;
    for name in order.lines().filter(|l| !l.is_empty()) {
        let path = format!("/strata/modules/{name}.ko");
        let f = File::open(&path).map_err(|e| fail(format!("open {path}"), e))?;
        let params = c"";
        // SAFETY: finit_module(2) reads the module from the open fd and
        // the NUL-terminated parameter string; both outlive the call. No
        // memory of this process is written.
        let rc =
            unsafe { libc::syscall(libc::SYS_finit_module, f.as_raw_fd(), params.as_ptr(), 0i32) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EEXIST) {
                return Err(fail(format!("load the kernel module {name}"), e));
            }
        }
    }
    Ok(())
}

/// The host's system directories, lent read-only over virtio-9p
/// ([`crate::userland`]): each `TAG PATH` line of `/shares` mounted at
/// PATH read-only, nosuid, nodev. The virtio-9p device registers its tag
/// asynchronously after the driver loads, so a mount that finds no such
/// tag (ENOENT) is tried again for up to 30 s.
fn mount_userland() -> Result<(), GuestError> {
    let shares = fs::read_to_string(format!("/{}", crate::userland::SHARES_FILE))
        .map_err(|e| fail("read /shares", e))?;
    for line in shares.lines() {
        let Some((tag, path)) = line.split_once(' ') else {
            continue;
        };
        fs::create_dir_all(path).map_err(|e| fail(format!("create {path}"), e))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            // msize: 9p's largest message; the default 8 KiB makes every
            // large read many round trips through emulated virtio.
            let r = mount(
                tag,
                path,
                "9p",
                MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV,
                c"trans=virtio,version=9p2000.L,msize=262144,cache=loose",
            );
            match r {
                Ok(()) => break,
                Err(rustix::io::Errno::NOENT) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => {
                    return Err(fail(
                        format!("mount the host's {path} (9p tag {tag}) read-only"),
                        e,
                    ))
                }
            }
        }
    }
    Ok(())
}

/// cgroup v2 at /sys/fs/cgroup: the native backend puts each Sandbox's
/// limits there (strata-sandbox's cgroup.rs detects v2 by
/// `cgroup.controllers` at that root).
fn mount_cgroup2() -> Result<(), GuestError> {
    let dst = "/sys/fs/cgroup";
    mount(
        "cgroup2",
        dst,
        "cgroup2",
        MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        None::<&std::ffi::CStr>,
    )
    .map_err(|e| fail(format!("mount cgroup2 on {dst}"), e))
}

/// user.max_user_namespaces = 0: nothing in the guest needs a user
/// namespace (the native backend runs as root without one), so the
/// kernel refuses them to everyone, behind the per-command seccomp filter
/// that already does (user_namespaces(7), /proc/sys/user).
fn no_user_namespaces() -> Result<(), GuestError> {
    let p = "/proc/sys/user/max_user_namespaces";
    fs::write(p, "0").map_err(|e| fail(format!("write 0 to {p}"), e))
}

/// Wait for a path to appear (devices show up asynchronously after their
/// driver is loaded).
fn wait_for(path: &Path, what: &str) -> Result<(), GuestError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        if Instant::now() > deadline {
            return Err(fail(
                format!("wait for {what}"),
                format!("{} did not appear within 30 s", path.display()),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// The virtio-serial port named [`CTL_PORT_NAME`], found through
/// /sys/class/virtio-ports/*/name (the device number depends on probe
/// order).
fn open_ctl() -> Result<File, GuestError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(rd) = fs::read_dir("/sys/class/virtio-ports") {
            for e in rd.flatten() {
                let name = fs::read_to_string(e.path().join("name")).unwrap_or_default();
                if name.trim() == CTL_PORT_NAME {
                    let dev = Path::new("/dev").join(e.file_name());
                    wait_for(&dev, "the control channel's device")?;
                    return OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open(&dev)
                        .map_err(|e| fail(format!("open {}", dev.display()), e));
                }
            }
        }
        if Instant::now() > deadline {
            return Err(fail(
                "find the control channel",
                format!("no virtio-serial port named {CTL_PORT_NAME} within 30 s"),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `lo` up, and the first Ethernet interface at 10.0.2.15/24 (slirp's
/// network; the host reaches the guest only through the hostfwd qemu
/// binds on the host's loopback).
fn network() -> Result<(), GuestError> {
    set_if("lo", [127, 0, 0, 1], [255, 0, 0, 0])?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let eth = loop {
        let found = fs::read_dir("/sys/class/net").ok().and_then(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .find(|n| n != "lo")
        });
        if let Some(n) = found {
            break n;
        }
        if Instant::now() > deadline {
            return Err(fail(
                "find the network interface",
                "no interface but lo within 30 s",
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    set_if(&eth, GUEST_ADDR, [255, 255, 255, 0])
}

fn set_if(name: &str, addr: [u8; 4], mask: [u8; 4]) -> Result<(), GuestError> {
    let step = |what: &str| format!("{what} of {name}");
    let sock = std::net::UdpSocket::bind("0.0.0.0:0")
        .map_err(|e| fail(step("open a socket to set the address"), e))?;
    let fd = sock.as_raw_fd();
    let ifreq_with = |v: [u8; 4]| {
        // SAFETY: ifreq is plain old data; all-zero is a valid value.
        let mut r: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in r.ifr_name.iter_mut().zip(name.bytes()) {
            *d = s as libc::c_char;
        }
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(v),
            },
            sin_zero: [0; 8],
        };
        // SAFETY: sockaddr_in fits in the ifr_ifru union (sockaddr is 16
        // bytes, as is sockaddr_in); netdevice(7) says SIOCSIFADDR and
        // SIOCSIFNETMASK read an AF_INET sockaddr there.
        unsafe {
            std::ptr::write(
                std::ptr::addr_of_mut!(r.ifr_ifru).cast::<libc::sockaddr_in>(),
                sin,
            );
        }
        r
    };
    for (req, v, what) in [
        (libc::SIOCSIFADDR, addr, "set the address"),
        (libc::SIOCSIFNETMASK, mask, "set the netmask"),
    ] {
        let r = ifreq_with(v);
        // SAFETY: the ioctls of netdevice(7) read one ifreq that lives
        // across the call.
        if unsafe { libc::ioctl(fd, req as _, &r) } != 0 {
            return Err(fail(step(what), std::io::Error::last_os_error()));
        }
    }
    let mut r = ifreq_with([0; 4]);
    r.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    // SAFETY: as above; SIOCSIFFLAGS reads ifr_flags.
    if unsafe { libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &r) } != 0 {
        return Err(fail(step("bring up"), std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The project's disk: the first virtio-blk device, ext4.
fn mount_disk() -> Result<(), GuestError> {
    let dev = Path::new("/dev/vda");
    wait_for(dev, "the project's disk (virtio-blk)")?;
    fs::create_dir_all(DISK_MOUNT).map_err(|e| fail(format!("create {DISK_MOUNT}"), e))?;
    mount(
        dev,
        DISK_MOUNT,
        "ext4",
        MountFlags::NOSUID | MountFlags::NODEV,
        None::<&std::ffi::CStr>,
    )
    .map_err(|e| {
        fail(
            "mount the project's disk /dev/vda as ext4",
            format!("{e} (is the disk image an ext4 filesystem?)"),
        )
    })
}

/// Read the control channel until the host writes `stop`, then return.
pub fn wait_for_stop(ctl: File) {
    let mut lines = BufReader::new(ctl).lines();
    loop {
        match lines.next() {
            Some(Ok(l)) if l.trim() == "stop" => return,
            Some(_) => {}
            // No host end yet (EOF on a virtio port with no reader): look again.
            None => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// Flush everything to the disk, unmount it and power the VM off; qemu
/// exits (`-no-reboot`, and reboot(2) RB_POWER_OFF through ACPI).
pub fn power_off() -> ! {
    rustix::fs::sync();
    let _ = rustix::mount::unmount(DISK_MOUNT, rustix::mount::UnmountFlags::empty());
    rustix::fs::sync();
    // SAFETY: reboot(2) with a valid command; as init (pid 1) this ends
    // the machine, which is the point.
    unsafe {
        libc::reboot(libc::RB_POWER_OFF);
        libc::reboot(libc::RB_AUTOBOOT);
    }
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}
