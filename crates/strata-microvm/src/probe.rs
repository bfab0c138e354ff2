//! What this host offers the microVM route, one `microvm.*` line per fact
//! for `strata probe`: qemu and its version, the guest kernel, KVM (by a
//! probe boot, cached in the state root; the reason when not), vsock, and
//! what a VM start will use.

use std::path::Path;
use std::process::Command;

use crate::accel::{self, Accel};
use crate::kernel::Kernel;
use crate::vm::{find_qemu, VmConfig};

/// The facts, in order. With `may_boot`, runs a probe boot under KVM when
/// `/dev/kvm` opens and no verdict is cached (at most
/// `accel::PROBE_TIMEOUT`); without, reports the cached verdict only.
pub fn facts(cfg: &VmConfig, may_boot: bool) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut push = |k: &str, v: String| out.push((format!("microvm.{k}"), v));
    let qemu = find_qemu(&cfg.qemu);
    match &qemu {
        Ok(q) => push("qemu", format!("{} ({})", version(q), q.display())),
        Err(e) => push("qemu", format!("missing: {e}")),
    }
    let kernel = Kernel::find(
        cfg.kernel.as_deref(),
        cfg.modules.as_deref(),
        &cfg.boot_dir,
        &cfg.modules_root,
    )
    .and_then(|k| crate::initramfs::resolve_modules(&k.modules).map(|m| (k, m)));
    match &kernel {
        Ok((k, m)) => push(
            "kernel",
            format!(
                "{} (modules {}, {} to load)",
                k.image.display(),
                k.modules.display(),
                m.len()
            ),
        ),
        Err(e) => push("kernel", format!("missing: {e}")),
    }
    push(
        "vsock",
        if Path::new("/dev/vhost-vsock").exists() {
            "present (/dev/vhost-vsock); not used yet: the endpoint is a loopback port forward"
                .into()
        } else {
            "absent (no /dev/vhost-vsock): the endpoint is a loopback port forward".into()
        },
    );
    let (Ok(q), Ok((k, m))) = (&qemu, &kernel) else {
        push("kvm", "not probed: needs qemu and a kernel".into());
        push("use", "unavailable: see the lines above".into());
        return out;
    };
    // A probe boot needs an initramfs; build one in the state root only
    // when it may boot.
    let dir = cfg.state_root.join(".probe");
    let initrd = dir.join("initramfs.img");
    let built = if may_boot {
        std::fs::create_dir_all(&dir)
            .map_err(|e| e.to_string())
            .and_then(|()| {
                // A probe boot only prints its marker: no userland.
                let none = crate::userland::Userland::default();
                crate::initramfs::build(&crate::vm::guest_binary(&cfg.exe, &dir), m, &none, &initrd)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
    } else {
        Ok(())
    };
    let verdict = built.map(|()| {
        accel::choose(
            q,
            &k.image,
            &initrd,
            cfg.memory_mib,
            &cfg.state_root.join("kvm-probe.json"),
            may_boot,
        )
    });
    match verdict {
        Ok(None) => {
            push(
                "kvm",
                "not probed (--no-self-check; no cached probe boot): /dev/kvm opens".into(),
            );
            push(
                "use",
                "qemu -M pc; KVM or TCG decided by a probe boot at the first `strata vm start`"
                    .into(),
            );
        }
        Ok(Some(v)) => {
            push(
                "kvm",
                match v.accel {
                    Accel::Kvm => format!("usable: {}", v.reason),
                    Accel::Tcg => format!("not usable: {}", v.reason),
                },
            );
            push(
                "use",
                format!(
                    "qemu -M {} under {}, virtio-blk ext4 disk, endpoint tcp 127.0.0.1 (hostfwd){}",
                    crate::MACHINE,
                    v.accel.as_str().to_uppercase(),
                    if v.accel == Accel::Tcg {
                        " (TCG: slow, boot takes seconds)"
                    } else {
                        ""
                    }
                ),
            );
        }
        Err(e) => {
            push(
                "kvm",
                format!("not probed: building the probe initramfs failed: {e}"),
            );
            push("use", "unavailable: see microvm.kvm".into());
        }
    }
    out
}

fn version(qemu: &Path) -> String {
    Command::new(qemu)
        .arg("-version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_string))
        .unwrap_or_else(|| "version unknown".into())
}
