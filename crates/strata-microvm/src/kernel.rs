//! Which guest kernel: a path the user gives, or the newest
//! `/boot/vmlinuz-*` (Debian's linux-image-amd64), with its modules in
//! `/lib/modules/VERSION`.

use std::path::{Path, PathBuf};

use crate::VmError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kernel {
    pub image: PathBuf,
    pub modules: PathBuf,
    pub version: String,
}

impl Kernel {
    /// `image` given: it must exist; its version is taken from its name
    /// (`vmlinuz-VERSION`) unless `modules` is given. Not given: the
    /// newest `vmlinuz-*` in `boot_dir`.
    pub fn find(
        image: Option<&Path>,
        modules: Option<&Path>,
        boot_dir: &Path,
        modules_root: &Path,
    ) -> Result<Kernel, VmError> {
        let image = match image {
            Some(p) => {
                if !p.is_file() {
                    return Err(VmError::NoKernel(format!(
                        "--kernel {}: no such file",
                        p.display()
                    )));
                }
                p.to_path_buf()
            }
            None => newest(boot_dir)?,
        };
        let name = image
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let version = name.strip_prefix("vmlinuz-").unwrap_or(&name).to_string();
        let modules = match modules {
            Some(m) => m.to_path_buf(),
            None => modules_root.join(&version),
        };
        if !modules.join("modules.dep").is_file() {
            return Err(VmError::KernelMissing {
                what: format!(
                    "its modules ({} has no modules.dep; the guest needs the kernel's own virtio, ext4 and fuse modules)",
                    modules.display()
                ),
                moddir: modules,
            });
        }
        Ok(Kernel {
            image,
            modules,
            version,
        })
    }
}

fn newest(boot_dir: &Path) -> Result<PathBuf, VmError> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(boot_dir)
        .map_err(|e| VmError::NoKernel(format!("cannot read {}: {e}", boot_dir.display())))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
        })
        .collect();
    // Version order is close enough to name order for one distribution's
    // kernels; the last is the newest.
    found.sort();
    found
        .pop()
        .ok_or_else(|| VmError::NoKernel(format!("no vmlinuz-* in {}", boot_dir.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_kernel_says_where_it_looked() {
        let d = tempfile::tempdir().unwrap();
        let e = Kernel::find(None, None, d.path(), d.path())
            .unwrap_err()
            .to_string();
        assert!(e.contains("no vmlinuz-*"), "{e}");
        assert!(e.contains("linux-image-amd64"), "{e}");
        let e = Kernel::find(Some(&d.path().join("nope")), None, d.path(), d.path())
            .unwrap_err()
            .to_string();
        assert!(e.contains("no such file"), "{e}");
    }
}
