//! KVM or TCG. `/dev/kvm` existing is not enough: on some hosts (nested
//! virtualisation) a bare vCPU runs but a Linux guest hangs early in boot
//! (docs/microvm.md). So KVM is used only after a probe boot under it
//! reached the guest's init; the verdict is cached per kernel, qemu and
//! strata binary in the state root.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::guest::PROBE_MARKER;

/// How a probe boot may take before KVM is declared unusable.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accel {
    Kvm,
    Tcg,
}

impl Accel {
    pub fn as_str(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

/// The choice and why.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Verdict {
    pub accel: Accel,
    pub reason: String,
    /// What the cached verdict was made for.
    key: String,
}

/// Pick KVM or TCG for this kernel and initramfs; `STRATA_VM_ACCEL=tcg`
/// forces TCG (no probe boot). Without `may_boot`, only a cached verdict
/// counts (None when there is none).
pub fn choose(
    qemu: &Path,
    kernel: &Path,
    initrd: &Path,
    memory_mib: u64,
    cache: &Path,
    may_boot: bool,
) -> Option<Verdict> {
    let key = format!("{} {}", qemu.display(), kernel.display());
    choose_inner(qemu, kernel, initrd, memory_mib, cache, may_boot, key)
}

fn choose_inner(
    qemu: &Path,
    kernel: &Path,
    initrd: &Path,
    memory_mib: u64,
    cache: &Path,
    may_boot: bool,
    key: String,
) -> Option<Verdict> {
    if std::env::var("STRATA_VM_ACCEL").is_ok_and(|v| v == "tcg") {
        return Some(Verdict {
            accel: Accel::Tcg,
            reason: "STRATA_VM_ACCEL=tcg".into(),
            key,
        });
    }
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
    {
        return Some(Verdict {
            accel: Accel::Tcg,
            reason: format!("/dev/kvm: {e}"),
            key,
        });
    }
    if let Some(v) = std::fs::read(cache)
        .ok()
        .and_then(|b| serde_json::from_slice::<Verdict>(&b).ok())
        .filter(|v| v.key == key)
    {
        return Some(v);
    }
    if !may_boot {
        return None;
    }
    let (accel, reason) = match probe_boot(qemu, kernel, initrd, memory_mib) {
        Ok(ms) => (
            Accel::Kvm,
            format!("a probe boot under KVM reached init in {ms} ms"),
        ),
        Err(why) => (Accel::Tcg, format!("a probe boot under KVM failed: {why}")),
    };
    let v = Verdict { accel, reason, key };
    if let Ok(b) = serde_json::to_vec(&v) {
        let _ = std::fs::write(cache, b);
    }
    Some(v)
}

/// Boot the kernel under KVM with `/init __strata-vm-init probe`; Ok(ms)
/// when the marker reached the console, else why not. qemu is always
/// killed and reaped before returning.
fn probe_boot(qemu: &Path, kernel: &Path, initrd: &Path, memory_mib: u64) -> Result<u128, String> {
    let dir = tempdir().map_err(|e| format!("make a temporary directory: {e}"))?;
    let log = dir.join("console.log");
    let start = Instant::now();
    let mut child = Command::new(qemu)
        .args([
            "-M",
            crate::MACHINE,
            "-accel",
            "kvm",
            "-cpu",
            "host",
            "-nodefaults",
            "-no-user-config",
        ])
        .args(["-display", "none", "-no-reboot", "-m"])
        .arg(memory_mib.to_string())
        .arg("-kernel")
        .arg(kernel)
        .arg("-initrd")
        .arg(initrd)
        .args([
            "-append",
            "console=ttyS0 panic=-1 quiet -- __strata-vm-init probe",
        ])
        .arg("-serial")
        .arg(format!("file:{}", log.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("run {}: {e}", qemu.display()))?;
    let r = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains(PROBE_MARKER) {
            break Ok(start.elapsed().as_millis());
        }
        if let Ok(Some(st)) = child.try_wait() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                use std::io::Read;
                let _ = e.read_to_string(&mut err);
            }
            // One line: the reason goes into a warning and a JSON field.
            let err = err.split_whitespace().collect::<Vec<_>>().join(" ");
            break Err(format!("qemu exited ({st}) before init: {err}"));
        }
        if start.elapsed() > PROBE_TIMEOUT {
            break Err(format!(
                "the guest did not reach init within {} s (it hangs under KVM on this host)",
                PROBE_TIMEOUT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    r
}

fn tempdir() -> std::io::Result<PathBuf> {
    let d = std::env::temp_dir().join(format!("strata-kvm-probe.{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}
