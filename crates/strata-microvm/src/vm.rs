//! One project's VM on the host: its directory under the state root, the
//! ext4 disk (sparse, persistent), the lock that keeps a disk to one VM,
//! qemu, the ready line, the endpoint, and stop.
//!
//! The VM directory (0700, root's): `disk.img` (unless `--disk`),
//! `initramfs.img` and `init.bin` (the stripped strata binary), the
//! control FIFOs `ctl.in`/`ctl.out` (qemu's `pipe` chardev, a virtio-serial
//! port in the guest), `console.log` (the serial console), `qemu.log`
//! (qemu's own stderr) and `endpoint.json` (0600: URL, token, pid; a
//! served boot's only), and `run/`, where a one-shot boot's files are
//! stripped before they go into its initramfs ([`crate::oneshot`]).

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::accel::Accel;
use crate::boot::{boot, CtlLines, Host};
use crate::VmError;

/// What to boot and where.
#[derive(Debug, Clone)]
pub struct VmConfig {
    /// Holds one directory per project (default `/var/lib/strata/vms`).
    pub state_root: PathBuf,
    pub project: String,
    /// The qemu binary, a name looked up on PATH or a path.
    pub qemu: String,
    pub kernel: Option<PathBuf>,
    pub modules: Option<PathBuf>,
    pub boot_dir: PathBuf,
    pub modules_root: PathBuf,
    /// A disk image to use instead of the project's own `disk.img`.
    pub disk: Option<PathBuf>,
    /// Size of a new disk.
    pub disk_mib: u64,
    pub memory_mib: u64,
    /// The static strata binary that becomes the guest's `/init`.
    pub exe: PathBuf,
    /// How long the guest may take from qemu's start to the ready line.
    pub ready_timeout: Duration,
}

impl VmConfig {
    pub fn new(state_root: PathBuf, project: &str, exe: PathBuf) -> VmConfig {
        VmConfig {
            state_root,
            project: project.to_string(),
            qemu: "qemu-system-x86_64".into(),
            kernel: None,
            modules: None,
            boot_dir: "/boot".into(),
            modules_root: "/lib/modules".into(),
            disk: None,
            disk_mib: 1024,
            memory_mib: 1024,
            exe,
            ready_timeout: Duration::from_secs(180),
        }
    }

    pub fn vm_dir(&self) -> PathBuf {
        self.state_root.join(&self.project)
    }

    pub(crate) fn disk_path(&self) -> PathBuf {
        self.disk
            .clone()
            .unwrap_or_else(|| self.vm_dir().join("disk.img"))
    }
}

/// The default state root.
pub fn default_state_root() -> PathBuf {
    std::env::var_os("STRATA_VM_STATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/lib/strata/vms"))
}

/// How the host reaches a running VM's server.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Endpoint {
    pub project: String,
    /// `http://127.0.0.1:PORT` (the hostfwd qemu binds on the loopback).
    pub url: String,
    /// A bearer token of the guest's server, made at this boot.
    pub token: String,
    pub pid: u32,
    pub accel: Accel,
    pub accel_reason: String,
    /// From qemu's start to the guest's ready line.
    pub boot_ms: u64,
    pub disk: PathBuf,
    /// The guest kernel this boot used (the initramfs is `initramfs.img`
    /// beside this file, built from the same kernel's modules).
    #[serde(default)]
    pub kernel: PathBuf,
    pub console: PathBuf,
}

/// `status`: running (with its endpoint) or not.
#[derive(Debug, Clone, Serialize)]
pub struct VmStatus {
    pub project: String,
    pub running: bool,
    pub endpoint: Option<Endpoint>,
    pub disk: PathBuf,
}

pub(crate) fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> VmError {
    let path = path.to_path_buf();
    move |source| VmError::Io {
        action,
        path,
        source,
    }
}

pub fn validate_project(p: &str) -> Result<(), VmError> {
    let ok = !p.is_empty()
        && p.len() <= 64
        && p.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && p.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(VmError::BadProject(p.to_string()))
    }
}

/// The qemu binary: a path as given, or the first match on PATH.
pub fn find_qemu(name: &str) -> Result<PathBuf, VmError> {
    let path = std::env::var("PATH").unwrap_or_default();
    if name.contains('/') {
        return if Path::new(name).is_file() {
            Ok(PathBuf::from(name))
        } else {
            Err(VmError::NoQemu {
                binary: name.into(),
                path: "given as a path; no such file".into(),
            })
        };
    }
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or(VmError::NoQemu {
            binary: name.into(),
            path: format!("PATH={path}"),
        })
}

/// The ext4 superblock's magic 0xEF53 at byte 1024 + 56 (ext4(5),
/// "The Super Block"); anything else is refused before qemu starts.
pub fn check_ext4(path: &Path) -> Result<(), VmError> {
    let mut f = File::open(path).map_err(io("open the disk image", path))?;
    let mut sb = [0u8; 1024 + 58];
    let n = f.read(&mut sb).map_err(io("read the disk image", path))?;
    if n < sb.len() {
        return Err(VmError::NotExt4 {
            path: path.into(),
            why: format!("only {n} bytes"),
        });
    }
    if sb[1080..1082] != [0x53, 0xEF] {
        return Err(VmError::NotExt4 {
            path: path.into(),
            why: "no ext4 superblock magic at byte 1080".into(),
        });
    }
    Ok(())
}

/// A sparse file of `mib` MiB made into ext4 by mkfs.ext4 (inode tables
/// and journal written now, so the guest does not spend its CPU on lazy
/// initialisation).
pub(crate) fn create_disk(path: &Path, mib: u64) -> Result<(), VmError> {
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io("create the disk image", path))?;
    f.set_len(mib << 20)
        .map_err(io("size the disk image", path))?;
    drop(f);
    let out = Command::new("mkfs.ext4")
        .args([
            "-q",
            "-F",
            "-m",
            "0",
            "-E",
            "lazy_itable_init=0,lazy_journal_init=0",
        ])
        .arg(path)
        .output();
    let fail = |message: String| {
        let _ = fs::remove_file(path);
        VmError::Tool {
            command: format!("mkfs.ext4 {}", path.display()),
            message,
        }
    };
    match out {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(fail(format!(
            "{}: {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        ))),
        Err(e) => Err(fail(format!("{e} (install e2fsprogs)"))),
    }
}

/// Hold the disk: flock(2) LOCK_EX|LOCK_NB on the image itself. The
/// descriptor is inherited by qemu, so the lock lives exactly as long as
/// the VM (flock locks belong to the open file description, flock(2)).
pub(crate) fn lock_disk(cfg: &VmConfig, disk: &Path) -> Result<File, VmError> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(disk)
        .map_err(io("open the disk image", disk))?;
    // A qemu killed a moment ago may still hold the lock: its main thread
    // shows as a zombie while its other threads are still exiting, and
    // the descriptor table (with the lock's file) goes with the last of
    // them. So while no live process holds it, try again for a while.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(f),
            Err(rustix::io::Errno::WOULDBLOCK) => {
                let holder = holder_of(cfg, disk);
                if holder.is_some_and(live) || Instant::now() > deadline {
                    return Err(VmError::DiskInUse {
                        path: disk.into(),
                        holder,
                    });
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(io("lock the disk image", disk)(e.into())),
        }
    }
}

/// Whether `pid` is a process that is not a zombie.
fn live(pid: u32) -> bool {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    matches!(stat.rsplit_once(") ").map(|(_, r)| r.chars().next()), Some(Some(c)) if c != 'Z' && c != 'X')
}

/// Which running VM (by the endpoints in the state root) holds `disk`.
fn holder_of(cfg: &VmConfig, disk: &Path) -> Option<u32> {
    let disk = fs::canonicalize(disk).ok()?;
    fs::read_dir(&cfg.state_root)
        .ok()?
        .flatten()
        .filter_map(|e| read_endpoint(&e.path().join("endpoint.json")))
        .find(|ep| fs::canonicalize(&ep.disk).ok().as_deref() == Some(&disk))
        .map(|ep| ep.pid)
}

fn read_endpoint(p: &Path) -> Option<Endpoint> {
    serde_json::from_slice(&fs::read(p).ok()?).ok()
}

/// Whether `pid` is a live (not zombie) process whose command line names
/// `dir` (a VM directory, or a state root above VM directories).
fn alive(pid: u32, dir: &Path) -> bool {
    if !live(pid) {
        return false;
    }
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let needle = dir.to_string_lossy();
    String::from_utf8_lossy(&cmdline).contains(needle.as_ref())
}

/// The live (not zombie) qemu processes whose command line names `dir`:
/// the VMs of a state root or of one VM directory, found from `/proc`
/// rather than from their records, so that a check that nothing is left
/// running cannot be fooled by a record that was removed.
pub fn qemus_under(dir: &Path) -> Vec<u32> {
    let Ok(rd) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            alive(pid, dir)
                && String::from_utf8_lossy(
                    &fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default(),
                )
                .contains("qemu-system")
        })
        .collect()
}

/// Running or not, with the endpoint when running.
pub fn status(cfg: &VmConfig) -> Result<VmStatus, VmError> {
    validate_project(&cfg.project)?;
    let dir = cfg.vm_dir();
    let endpoint = read_endpoint(&dir.join("endpoint.json")).filter(|e| alive(e.pid, &dir));
    Ok(VmStatus {
        project: cfg.project.clone(),
        running: endpoint.is_some(),
        disk: endpoint
            .as_ref()
            .map(|e| e.disk.clone())
            .unwrap_or_else(|| cfg.disk_path()),
        endpoint,
    })
}

/// The stripped copy of the strata binary for the guest (debug symbols
/// are most of a debug build and would be unpacked into guest RAM);
/// rebuilt when the binary is newer. Without `strip`, the binary as is.
pub(crate) fn guest_binary(exe: &Path, dir: &Path) -> PathBuf {
    stripped(exe, &dir.join("init.bin"))
}

/// `exe` stripped of its debug symbols into `out`, unless `out` is as new
/// already; without `strip`, `exe` as is.
pub(crate) fn stripped(exe: &Path, out: &Path) -> PathBuf {
    let newer = |a: &Path, b: &Path| {
        let m = |p: &Path| fs::metadata(p).and_then(|m| m.modified()).ok();
        matches!((m(a), m(b)), (Some(x), Some(y)) if x >= y)
    };
    if newer(out, exe) {
        return out.to_path_buf();
    }
    let ok = Command::new("strip")
        .arg("-o")
        .arg(out)
        .arg(exe)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        out.to_path_buf()
    } else {
        exe.to_path_buf()
    }
}

/// Boot the project's VM and wait for its server; returns the endpoint
/// and whether this call started it (false: it was running already).
pub fn start(cfg: &VmConfig) -> Result<(Endpoint, bool), VmError> {
    let host = Host::find(cfg)?;
    let st = status(cfg)?;
    if let Some(ep) = st.endpoint {
        return Ok((ep, false));
    }
    let dir = cfg.vm_dir();
    let _ = fs::remove_file(dir.join("endpoint.json"));
    let b = boot(cfg, &host, None)?;
    let pid = b.child.id();
    let token = match wait_ready(b.child, &b.ctl_out, cfg.ready_timeout) {
        Ok(t) => t,
        Err(reason) => {
            return Err(VmError::Boot {
                project: cfg.project.clone(),
                reason,
                console: tail(&b.console, &b.qemu_log),
                log: b.console,
            })
        }
    };
    let ep = Endpoint {
        project: cfg.project.clone(),
        url: format!("http://127.0.0.1:{}", b.port),
        token,
        pid,
        accel: b.verdict.accel,
        accel_reason: b.verdict.reason,
        boot_ms: b.started.elapsed().as_millis() as u64,
        disk: b.disk,
        kernel: b.kernel,
        console: b.console,
    };
    let path = dir.join("endpoint.json");
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .map_err(io("write", &path))?;
    f.write_all(&serde_json::to_vec_pretty(&ep).unwrap_or_default())
        .map_err(io("write", &path))?;
    Ok((ep, true))
}

/// Read `ready TOKEN` (or `error: ...`) from the control channel. On any
/// failure qemu is killed and reaped before returning.
fn wait_ready(mut child: Child, ctl_out: &Path, timeout: Duration) -> Result<String, String> {
    let r = (|| {
        let mut lines = CtlLines::open(ctl_out)?;
        let deadline = Instant::now() + timeout;
        loop {
            // Read before the channel is drained, so that a guest's last
            // line (`error: ...` just before it powers off) is not lost.
            let exited = child.try_wait().ok().flatten();
            if let Some(line) = lines.next_line() {
                let line = line.trim();
                if let Some(t) = line.strip_prefix("ready ") {
                    return Ok(t.to_string());
                }
                return Err(line.strip_prefix("error: ").unwrap_or(line).to_string());
            }
            if let Some(st) = exited {
                return Err(format!("qemu exited ({st}) before the guest was ready"));
            }
            if Instant::now() > deadline {
                return Err(format!("no ready line within {} s", timeout.as_secs()));
            }
        }
    })();
    if r.is_err() {
        let _ = child.kill();
        let _ = child.wait();
    }
    r
}

/// The last lines of the console and qemu's own log, for a boot report.
pub(crate) fn tail(console: &Path, qemu_log: &Path) -> String {
    let last = |p: &Path, n: usize| {
        let s = fs::read_to_string(p).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    };
    let q = last(qemu_log, 5);
    let c = last(console, 15);
    if q.is_empty() {
        c
    } else {
        format!("{c}\nqemu: {q}")
    }
}

/// Ask the guest to stop (it syncs, unmounts its disk and powers off),
/// wait for qemu to exit, then kill it if it has not after `grace`.
/// Returns whether the guest stopped cleanly.
pub fn stop(cfg: &VmConfig, grace: Duration) -> Result<bool, VmError> {
    let st = status(cfg)?;
    let Some(ep) = st.endpoint else {
        return Err(VmError::NotRunning(cfg.project.clone()));
    };
    let dir = cfg.vm_dir();
    let ctl_in = dir.join("ctl.in");
    // qemu holds the FIFO open read-write, so this open does not block.
    if let Ok(mut f) = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&ctl_in)
    {
        let _ = f.write_all(b"stop\n");
    }
    let deadline = Instant::now() + grace;
    let mut clean = true;
    while alive(ep.pid, &dir) {
        if Instant::now() > deadline {
            clean = false;
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_raw(ep.pid as i32).expect("a qemu pid is positive"),
                rustix::process::Signal::KILL,
            );
            let until = Instant::now() + Duration::from_secs(10);
            while alive(ep.pid, &dir) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(50));
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for p in ["endpoint.json", "ctl.in", "ctl.out"] {
        let _ = fs::remove_file(dir.join(p));
    }
    Ok(clean)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_names_are_checked() {
        for ok in ["web", "a1", "my-proj_2"] {
            validate_project(ok).unwrap();
        }
        for bad in ["", "Web", "../x", "-a", "a/b"] {
            assert!(validate_project(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_file_that_is_not_ext4_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.img");
        fs::write(&p, vec![0u8; 4096]).unwrap();
        let e = check_ext4(&p).unwrap_err().to_string();
        assert!(e.contains("not an ext4 filesystem image"), "{e}");
    }
}
