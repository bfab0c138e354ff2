//! Booting a project's VM up to a running qemu, shared by a served boot
//! ([`crate::vm::start`]) and a one-shot boot ([`crate::oneshot::run`]):
//! what the host must offer, the VM directory, the disk and its lock, the
//! initramfs, KVM or TCG, qemu's command line, and the host's end of the
//! control channel.

use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::accel::{self, Accel};
use crate::guest::{GUEST_PORT, INIT_ARG};
use crate::initramfs;
use crate::kernel::Kernel;
use crate::vm::{
    check_ext4, create_disk, find_qemu, guest_binary, io, lock_disk, validate_project, VmConfig,
};
use crate::VmError;

/// What a boot needs from the host, found before anything is created.
pub(crate) struct Host {
    qemu: PathBuf,
    kernel: Kernel,
    modules: Vec<initramfs::Module>,
}

impl Host {
    /// qemu, the kernel and its modules; each missing one is an error that
    /// names it.
    pub(crate) fn find(cfg: &VmConfig) -> Result<Host, VmError> {
        validate_project(&cfg.project)?;
        let qemu = find_qemu(&cfg.qemu)?;
        let kernel = Kernel::find(
            cfg.kernel.as_deref(),
            cfg.modules.as_deref(),
            &cfg.boot_dir,
            &cfg.modules_root,
        )?;
        let modules = initramfs::resolve_modules(&kernel.modules)?;
        Ok(Host {
            qemu,
            kernel,
            modules,
        })
    }
}

/// The state root and the VM directory, made 0700 (root's).
pub(crate) fn prepare_dir(cfg: &VmConfig) -> Result<PathBuf, VmError> {
    let dir = cfg.vm_dir();
    for d in [&cfg.state_root, &dir] {
        fs::create_dir_all(d).map_err(io("create", d))?;
        fs::set_permissions(d, fs::Permissions::from_mode(0o700)).map_err(io("chmod 700", d))?;
    }
    Ok(dir)
}

/// A qemu just started by [`boot`], its guest on its way up.
pub(crate) struct Booted {
    pub child: Child,
    pub started: Instant,
    pub verdict: accel::Verdict,
    pub kernel: PathBuf,
    pub disk: PathBuf,
    pub port: u16,
    pub console: PathBuf,
    pub qemu_log: PathBuf,
    pub ctl_out: PathBuf,
}

/// Everything from the VM directory to a running qemu: the disk (made on
/// first use) and its lock, the initramfs (with `oneshot`'s files and its
/// init mode when given, [`crate::oneshot`]), KVM or TCG, the control
/// FIFOs, the console, qemu. The guest is not waited for.
pub(crate) fn boot(
    cfg: &VmConfig,
    host: &Host,
    oneshot: Option<&[initramfs::Extra]>,
) -> Result<Booted, VmError> {
    let dir = prepare_dir(cfg)?;
    let disk = cfg.disk_path();
    if !disk.exists() {
        if cfg.disk.is_some() {
            return Err(VmError::BadInput {
                what: "--disk: no such disk image".into(),
                path: disk,
            });
        }
        create_disk(&disk, cfg.disk_mib)?;
    }
    check_ext4(&disk)?;
    let lock = lock_disk(cfg, &disk)?;
    let userland = crate::userland::Userland::of_host(Path::new("/"))?;
    let initrd = dir.join("initramfs.img");
    initramfs::build_with(
        &guest_binary(&cfg.exe, &dir),
        &host.modules,
        &userland,
        oneshot.unwrap_or_default(),
        &initrd,
    )?;
    let verdict = accel::choose(
        &host.qemu,
        &host.kernel.image,
        &initrd,
        cfg.memory_mib,
        &cfg.state_root.join("kvm-probe.json"),
        true,
    )
    .expect("a verdict when a probe boot is allowed");
    if verdict.accel == Accel::Tcg {
        eprintln!(
            "strata: warning: the VM of project {} runs under TCG (emulation, slow): {}",
            cfg.project, verdict.reason
        );
    }
    let port = free_port()?;
    let (ctl_in, ctl_out) = (dir.join("ctl.in"), dir.join("ctl.out"));
    for p in [&ctl_in, &ctl_out] {
        let _ = fs::remove_file(p);
        rustix::fs::mknodat(
            rustix::fs::CWD,
            p.as_path(),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .map_err(|e| io("mkfifo", p)(e.into()))?;
    }
    let console = dir.join("console.log");
    let qemu_log = dir.join("qemu.log");
    for p in [&console, &qemu_log] {
        File::create(p).map_err(io("create", p))?;
        fs::set_permissions(p, fs::Permissions::from_mode(0o600)).map_err(io("chmod 600", p))?;
    }
    // The lock's descriptor goes to qemu (see lock_disk): clear CLOEXEC.
    rustix::io::fcntl_setfd(lock.as_fd(), rustix::io::FdFlags::empty())
        .map_err(|e| io("pass the disk lock to qemu", &disk)(e.into()))?;
    let log = File::options()
        .append(true)
        .open(&qemu_log)
        .map_err(io("open", &qemu_log))?;
    let log2 = log.try_clone().map_err(io("open", &qemu_log))?;
    let started = Instant::now();
    let init_args = match oneshot {
        Some(_) => format!("{INIT_ARG} {}", crate::oneshot::RUN_ARG),
        None => INIT_ARG.to_string(),
    };
    let mut cmd = Command::new(&host.qemu);
    cmd.args(qemu_args(
        cfg,
        &host.kernel,
        &initrd,
        &disk,
        verdict.accel,
        port,
        &init_args,
    ))
    .args(userland.qemu_args())
    .stdin(Stdio::null())
    .stdout(log)
    .stderr(log2)
    // Its own process group: a Ctrl-C at the terminal that ran
    // `strata vm start` does not reach the VM.
    .process_group(0);
    let child = cmd.spawn().map_err(io("run qemu", &host.qemu))?;
    drop(lock);
    Ok(Booted {
        child,
        started,
        verdict,
        kernel: host.kernel.image.clone(),
        disk: fs::canonicalize(&disk).unwrap_or(disk),
        port,
        console,
        qemu_log,
        ctl_out,
    })
}

fn qemu_args(
    cfg: &VmConfig,
    kernel: &Kernel,
    initrd: &Path,
    disk: &Path,
    accel: Accel,
    port: u16,
    init_args: &str,
) -> Vec<std::ffi::OsString> {
    let dir = cfg.vm_dir();
    let mut a: Vec<std::ffi::OsString> = Vec::new();
    let mut push = |s: String| a.push(s.into());
    push("-M".into());
    push(crate::MACHINE.into());
    push("-accel".into());
    push(accel.as_str().into());
    if accel == Accel::Kvm {
        push("-cpu".into());
        push("host".into());
    }
    for s in [
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-no-reboot",
    ] {
        push(s.into());
    }
    push("-m".into());
    push(cfg.memory_mib.to_string());
    push("-kernel".into());
    push(kernel.image.display().to_string());
    push("-initrd".into());
    push(initrd.display().to_string());
    push("-append".into());
    push(format!("console=ttyS0 panic=-1 quiet -- {init_args}"));
    push("-serial".into());
    push(format!("file:{}", dir.join("console.log").display()));
    push("-drive".into());
    push(format!(
        "id=disk,file={},format=raw,if=none,cache=writeback",
        disk.display()
    ));
    push("-device".into());
    push("virtio-blk-pci,drive=disk".into());
    // restrict=on: the guest has no route out (slirp only delivers the
    // forwarded port); the forward listens on the host's loopback only.
    push("-netdev".into());
    push(format!(
        "user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:{port}-10.0.2.15:{GUEST_PORT}"
    ));
    push("-device".into());
    push("virtio-net-pci,netdev=net0".into());
    push("-device".into());
    push("virtio-serial-pci".into());
    push("-chardev".into());
    push(format!("pipe,id=ctl,path={}", dir.join("ctl").display()));
    push("-device".into());
    push(format!(
        "virtserialport,chardev=ctl,name={}",
        crate::guest::CTL_PORT_NAME
    ));
    // Entropy for the guest's getrandom(2) right after boot (the token).
    push("-device".into());
    push("virtio-rng-pci".into());
    a
}

/// A port the kernel says is free on 127.0.0.1 now (qemu binds it a
/// moment later; a lost race is a clear qemu error in the boot report).
fn free_port() -> Result<u16, VmError> {
    let l =
        std::net::TcpListener::bind("127.0.0.1:0").map_err(io("bind", Path::new("127.0.0.1:0")))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(io("read the address of", Path::new("127.0.0.1:0")))
}

/// Lines from the guest's end of the control channel (the FIFO qemu
/// writes into), read without blocking.
pub(crate) struct CtlLines {
    f: File,
    buf: Vec<u8>,
}

impl CtlLines {
    pub(crate) fn open(ctl_out: &Path) -> Result<CtlLines, String> {
        let f = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(ctl_out)
            .map_err(|e| format!("open {}: {e}", ctl_out.display()))?;
        Ok(CtlLines { f, buf: Vec::new() })
    }

    /// The next whole line (without its newline, lossy UTF-8) if one has
    /// arrived; otherwise waits up to 50 ms for more and returns None.
    pub(crate) fn next_line(&mut self) -> Option<String> {
        loop {
            if let Some(end) = self.buf.iter().position(|&b| b == b'\n') {
                let line = String::from_utf8_lossy(&self.buf[..end]).into_owned();
                self.buf.drain(..=end);
                return Some(line);
            }
            let mut chunk = [0u8; 4096];
            match self.f.read(&mut chunk) {
                Ok(n) if n > 0 => self.buf.extend_from_slice(&chunk[..n]),
                _ => {
                    std::thread::sleep(Duration::from_millis(50));
                    return None;
                }
            }
        }
    }
}
