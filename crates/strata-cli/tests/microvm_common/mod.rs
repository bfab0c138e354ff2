//! What the VM tests (`microvm.rs`, `microvm_contract.rs`) share: the
//! check that qemu and a guest kernel are installed, and the guard that
//! kills every qemu a test started, even when an assertion failed.

use std::path::Path;
use std::process::Command;

use strata_microvm::vm::qemus_under;

pub fn require_qemu_and_kernel() {
    let qemu = Command::new("qemu-system-x86_64").arg("-version").output();
    assert!(
        qemu.is_ok_and(|o| o.status.success()),
        "qemu-system-x86_64 is missing: install qemu-system-x86 (scripts/test does)"
    );
    let kernel = std::fs::read_dir("/boot")
        .map(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("vmlinuz-"))
        })
        .unwrap_or(false);
    assert!(
        kernel,
        "no /boot/vmlinuz-*: install linux-image-amd64 (scripts/test does)"
    );
}

/// Kills, on drop, every qemu whose command line names the directory.
pub struct Cleanup<'a>(pub &'a Path);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        // Never leave a VM behind, even when an assertion failed.
        for pid in qemus_under(self.0) {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        }
    }
}
