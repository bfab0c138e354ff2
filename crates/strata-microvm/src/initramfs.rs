//! The guest's initramfs, built by strata itself: the static strata binary
//! as `/init` plus the kernel modules the guest needs (virtio over PCI and
//! MMIO,
//! virtio-blk, virtio-net, the virtio console, virtio-rng (entropy for the
//! server's token at early boot), ext4, FUSE and what
//! `modules.dep` says they depend on), taken from the same kernel's
//! `/lib/modules/VERSION`. `/modules.order` lists them dependencies first;
//! the guest init loads them in that order with finit_module(2).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use crate::cpio::CpioWriter;
use crate::VmError;

/// The modules the guest loads, by name (dependencies are added from
/// `modules.dep`). A module the kernel has built in is simply absent.
pub const GUEST_MODULES: &[&str] = &[
    "virtio_pci",
    "virtio_mmio",
    "virtio_blk",
    "virtio_net",
    "virtio_console",
    "virtio_rng",
    "crc32c_generic",
    "ext4",
    "fuse",
    "9pnet_virtio",
    "9p",
];

/// Modules without which the guest cannot do its job: when such a module
/// is neither in `modules.dep` nor built in (`modules.builtin`), the
/// kernel cannot serve a Store and is refused.
pub const REQUIRED: &[(&str, &str)] = &[
    ("virtio_blk", "the project's disk"),
    ("virtio_net", "the endpoint"),
    ("virtio_console", "the control channel"),
    ("ext4", "the project's disk"),
    ("fuse", "Workspaces"),
    (
        "9pnet_virtio",
        "the Sandbox commands' /usr, lent by the host",
    ),
    ("9p", "the Sandbox commands' /usr, lent by the host"),
];

/// A module file to load, in load order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module {
    pub name: String,
    pub path: PathBuf,
}

/// The modules to load for `GUEST_MODULES`, dependencies first, from a
/// kernel's module directory. Compressed modules (`.ko.xz`, `.ko.zst`,
/// `.ko.gz`) are refused with a clear message: finit_module(2) takes them
/// only with MODULE_INIT_COMPRESSED_FILE, which Debian 12's 6.1 kernel
/// ships uncompressed anyway.
pub fn resolve_modules(moddir: &Path) -> Result<Vec<Module>, VmError> {
    let dep_path = moddir.join("modules.dep");
    let dep = fs::read_to_string(&dep_path).map_err(|source| VmError::Io {
        action: "read the kernel's module list",
        path: dep_path.clone(),
        source,
    })?;
    let builtin = fs::read_to_string(moddir.join("modules.builtin")).unwrap_or_default();
    let mut deps = std::collections::HashMap::new();
    for line in dep.lines() {
        let Some((file, rest)) = line.split_once(':') else {
            continue;
        };
        let list: Vec<String> = rest.split_whitespace().map(str::to_string).collect();
        deps.insert(module_name(file), (file.to_string(), list));
    }
    let is_builtin = |name: &str| {
        builtin
            .lines()
            .any(|l| module_name(l) == name.replace('-', "_"))
    };
    let mut order = Vec::new();
    let mut seen = BTreeSet::new();
    for want in GUEST_MODULES {
        match deps.get(*want) {
            Some((file, list)) => {
                // modules.dep lists the full closure, innermost last.
                for d in list.iter().rev().chain(std::iter::once(file)) {
                    let name = module_name(d);
                    if seen.insert(name.clone()) {
                        order.push(Module {
                            name,
                            path: moddir.join(d),
                        });
                    }
                }
            }
            None if is_builtin(want) => {}
            None => {
                if let Some((_, why)) = REQUIRED.iter().find(|(n, _)| n == want) {
                    return Err(VmError::KernelMissing {
                        what: format!("the {want} module (needed for {why})"),
                        moddir: moddir.to_path_buf(),
                    });
                }
            }
        }
    }
    for m in &order {
        let s = m.path.to_string_lossy();
        if !s.ends_with(".ko") {
            return Err(VmError::KernelMissing {
                what: format!("an uncompressed {} module (found {s}; decompress the kernel's modules, e.g. `xz -d`)", m.name),
                moddir: moddir.to_path_buf(),
            });
        }
    }
    Ok(order)
}

/// `kernel/fs/ext4/ext4.ko` -> `ext4` (dashes as underscores, as the
/// kernel names modules).
fn module_name(path: &str) -> String {
    let base = path.rsplit('/').next().unwrap_or(path);
    let stem = base.split(".ko").next().unwrap_or(base);
    stem.replace('-', "_")
}

/// A file added to the initramfs beyond strata's own (a one-shot boot's
/// program and its arguments, [`crate::oneshot`]).
#[derive(Debug, Clone)]
pub struct Extra {
    /// Its path in the initramfs, without the leading `/`; its parent
    /// directories are created.
    pub path: String,
    pub mode: u32,
    pub data: Vec<u8>,
}

/// Write the initramfs to `out`: `/init` (the static strata binary), the
/// modules under `/strata/modules/` (`/lib` is the host's symlink into
/// /usr), `/modules.order`, and the userland of
/// the Sandbox commands (the symlinks among the system directories, the
/// 9p shares to mount, the filtered /etc: [`crate::userland`]).
pub fn build(
    exe: &Path,
    modules: &[Module],
    userland: &crate::userland::Userland,
    out: &Path,
) -> Result<u64, VmError> {
    build_with(exe, modules, userland, &[], out)
}

/// [`build`] with `extra` files as well.
pub fn build_with(
    exe: &Path,
    modules: &[Module],
    userland: &crate::userland::Userland,
    extra: &[Extra],
    out: &Path,
) -> Result<u64, VmError> {
    let io = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| VmError::Io {
            action,
            path,
            source,
        }
    };
    let init = fs::read(exe).map_err(io("read the strata binary for the guest", exe))?;
    let tmp = out.with_extension("tmp");
    let f = fs::File::create(&tmp).map_err(io("create", &tmp))?;
    let mut w = CpioWriter::new(std::io::BufWriter::new(f));
    let mut order = String::new();
    let write = |w: &mut CpioWriter<_>| -> std::io::Result<()> {
        for d in [
            "dev",
            "proc",
            "sys",
            "tmp",
            "mnt",
            "strata",
            "strata/modules",
        ] {
            w.dir(d, 0o755)?;
        }
        // The kernel opens /dev/console for init's stdin, stdout and
        // stderr before init runs (init/main.c, console_on_rootfs); without
        // the node init starts with fds 0-2 closed, and the first files it
        // opens would become its stdout and stderr. Rust's runtime opens
        // /dev/null for closed standard fds and aborts if it cannot, so
        // that node is here too (devtmpfs covers both later).
        w.char_dev("dev/console", 0o600, 5, 1)?;
        w.char_dev("dev/null", 0o666, 1, 3)?;
        w.file("init", 0o755, &init)?;
        Ok(())
    };
    write(&mut w).map_err(io("write", &tmp))?;
    for m in modules {
        let data = fs::read(&m.path).map_err(io("read the kernel module", &m.path))?;
        w.file(&format!("strata/modules/{}.ko", m.name), 0o644, &data)
            .map_err(io("write", &tmp))?;
        order.push_str(&m.name);
        order.push('\n');
    }
    w.file("modules.order", 0o644, order.as_bytes())
        .map_err(io("write", &tmp))?;
    userland.write(&mut w)?;
    // The kernel's unpacker does not create missing parents: each
    // directory above an extra file is written once, before it.
    let mut dirs = BTreeSet::from(["strata".to_string()]);
    for x in extra {
        let mut parent = String::new();
        for part in x
            .path
            .split('/')
            .rev()
            .skip(1)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
        {
            if !parent.is_empty() {
                parent.push('/');
            }
            parent.push_str(part);
            if dirs.insert(parent.clone()) {
                w.dir(&parent, 0o755).map_err(io("write", &tmp))?;
            }
        }
        w.file(&x.path, x.mode, &x.data)
            .map_err(io("write", &tmp))?;
    }
    w.finish().map_err(io("write", &tmp))?;
    fs::rename(&tmp, out).map_err(io("move into place", out))?;
    Ok(fs::metadata(out).map(|m| m.len()).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependencies_come_first_and_once() {
        let d = tempfile::tempdir().unwrap();
        fs::write(
            d.path().join("modules.dep"),
            "kernel/a/virtio_ring.ko:\n\
             kernel/a/virtio.ko: kernel/a/virtio_ring.ko\n\
             kernel/a/virtio_mmio.ko: kernel/a/virtio.ko kernel/a/virtio_ring.ko\n\
             kernel/a/virtio_blk.ko: kernel/a/virtio.ko kernel/a/virtio_ring.ko\n\
             kernel/a/virtio_net.ko: kernel/a/virtio.ko kernel/a/virtio_ring.ko\n\
             kernel/a/virtio_console.ko: kernel/a/virtio.ko kernel/a/virtio_ring.ko\n\
             kernel/fs/ext4/ext4.ko: kernel/lib/crc16.ko kernel/fs/jbd2/jbd2.ko\n\
             kernel/fs/jbd2/jbd2.ko:\nkernel/lib/crc16.ko:\n\
             kernel/net/9p/9pnet.ko:\n\
             kernel/net/9p/9pnet_virtio.ko: kernel/net/9p/9pnet.ko kernel/a/virtio.ko\n\
             kernel/fs/9p/9p.ko: kernel/net/9p/9pnet.ko\n",
        )
        .unwrap();
        fs::write(d.path().join("modules.builtin"), "kernel/fs/fuse/fuse.ko\n").unwrap();
        let names: Vec<String> = resolve_modules(d.path())
            .unwrap()
            .into_iter()
            .map(|m| m.name)
            .collect();
        assert_eq!(
            names,
            [
                "virtio_ring",
                "virtio",
                "virtio_mmio",
                "virtio_blk",
                "virtio_net",
                "virtio_console",
                "jbd2",
                "crc16",
                "ext4",
                "9pnet",
                "9pnet_virtio",
                "9p"
            ]
        );
    }

    #[test]
    fn extra_files_come_after_their_parent_directories() {
        let d = tempfile::tempdir().unwrap();
        let exe = d.path().join("strata");
        fs::write(&exe, b"init").unwrap();
        let out = d.path().join("initramfs.img");
        let extra = |path: &str| Extra {
            path: path.into(),
            mode: 0o755,
            data: b"x".to_vec(),
        };
        let none = crate::userland::Userland::default();
        build_with(
            &exe,
            &[],
            &none,
            &[extra("strata/run/bin/prog"), extra("strata/run/spec.json")],
            &out,
        )
        .unwrap();
        let img = fs::read(&out).unwrap();
        let at = |name: &str| {
            let needle = format!("{name}\0");
            let hits: Vec<usize> = img
                .windows(needle.len())
                .enumerate()
                .filter(|(i, w)| *w == needle.as_bytes() && img[i - 1] != b'/')
                .map(|(i, _)| i)
                .collect();
            assert_eq!(hits.len(), 1, "{name}: {hits:?}");
            hits[0]
        };
        // `strata` itself is written once, with strata's own directories.
        assert!(at("strata") < at("strata/run"));
        assert!(at("strata/run") < at("strata/run/bin"));
        assert!(at("strata/run/bin") < at("strata/run/bin/prog"));
        assert!(at("strata/run") < at("strata/run/spec.json"));
    }

    #[test]
    fn a_kernel_without_fuse_is_refused_by_name() {
        let d = tempfile::tempdir().unwrap();
        fs::write(
            d.path().join("modules.dep"),
            "kernel/a/virtio_blk.ko:\nkernel/a/virtio_net.ko:\nkernel/a/virtio_console.ko:\nkernel/fs/ext4/ext4.ko:\n",
        )
        .unwrap();
        let e = resolve_modules(d.path()).unwrap_err().to_string();
        assert!(e.contains("the fuse module (needed for Workspaces)"), "{e}");
    }
}
