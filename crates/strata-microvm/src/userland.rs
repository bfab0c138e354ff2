//! The userland Sandbox commands see inside the guest (docs/microvm.md,
//! "The guest's userland"). The native backend's default view binds the
//! system directories (/usr, /bin, /sbin, /lib*, /etc) of the root it runs
//! in; in the guest that root is the initramfs, which holds only strata.
//! So the host lends its system directories to the guest:
//!
//! * every real directory among [`SYSTEM_DIRS`] (on Debian 12 only /usr:
//!   /bin, /sbin and /lib* are symlinks into it) is shared read-only over
//!   virtio-9p (`-fsdev local,readonly=on`: qemu refuses every write, so
//!   even the guest's kernel cannot change the host's files) and mounted
//!   by the guest's init at the same path, read-only, nosuid, nodev;
//! * the symlinks among them are recreated in the initramfs;
//! * /etc is not shared: a filtered copy goes into the initramfs, holding
//!   only what every user of the host may read (world-readable files and
//!   symlinks under world-searchable directories). A guest whose kernel
//!   is taken over then sees no more of the host's /etc than an
//!   unprivileged host user does (no /etc/shadow, no private keys), and
//!   writes to the guest's /etc stay in guest memory.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::cpio::CpioWriter;
use crate::VmError;

/// The host's system directories lent to the guest (the native backend's
/// host view binds the same ones, plus /etc, in strata-sandbox's
/// hostview.rs).
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// The file in the initramfs naming the 9p shares to mount, one
/// `TAG PATH` a line.
pub const SHARES_FILE: &str = "shares";

/// At most this many bytes of the host's /etc go into the initramfs (a
/// Debian 12 /etc is about 3.4 MB); a larger one is refused by name.
pub const ETC_MAX_BYTES: u64 = 64 << 20;

/// One directory shared read-only over virtio-9p.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    /// The 9p mount tag (the guest mounts it by this name).
    pub tag: String,
    /// The directory on the host.
    pub host: PathBuf,
    /// Where the guest mounts it: the same path as on the host.
    pub path: PathBuf,
}

/// What the guest gets of the host.
#[derive(Debug, Clone, Default)]
pub struct Userland {
    pub shares: Vec<Share>,
    /// `(path without the leading /, target)`, e.g. `("bin", "usr/bin")`.
    pub symlinks: Vec<(String, String)>,
    /// The host's /etc to copy (filtered) into the initramfs.
    pub etc: Option<PathBuf>,
}

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> VmError {
    let path = path.to_path_buf();
    move |source| VmError::Io {
        action,
        path,
        source,
    }
}

impl Userland {
    /// The system directories of the host whose root is `root` (`/`).
    pub fn of_host(root: &Path) -> Result<Userland, VmError> {
        let mut u = Userland::default();
        for d in SYSTEM_DIRS {
            let host = root.join(&d[1..]);
            let meta = match fs::symlink_metadata(&host) {
                Ok(m) => m,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err("look at a system directory", &host)(e)),
            };
            if meta.file_type().is_symlink() {
                let to = fs::read_link(&host).map_err(io_err("read a system symlink", &host))?;
                u.symlinks
                    .push((d[1..].to_string(), to.to_string_lossy().into_owned()));
            } else if meta.is_dir() {
                u.shares.push(Share {
                    tag: format!("strata.{}", &d[1..]),
                    host,
                    path: PathBuf::from(d),
                });
            }
        }
        if !u.shares.iter().any(|s| s.path == Path::new("/usr")) {
            return Err(VmError::BadInput {
                what: "the host has no /usr directory to lend to the guest's Sandbox commands"
                    .into(),
                path: root.join("usr"),
            });
        }
        let etc = root.join("etc");
        u.etc = etc.is_dir().then_some(etc);
        Ok(u)
    }

    /// The `shares` file's content.
    pub fn shares_file(&self) -> String {
        self.shares
            .iter()
            .map(|s| format!("{} {}\n", s.tag, s.path.display()))
            .collect()
    }

    /// qemu's arguments for the shares: a read-only `local` fsdev and a
    /// virtio-9p-pci device each. `security_model=none`: qemu (root)
    /// reads the files as they are; `readonly=on` fails every write.
    pub fn qemu_args(&self) -> Vec<String> {
        let mut a = Vec::new();
        for (i, s) in self.shares.iter().enumerate() {
            a.push("-fsdev".into());
            a.push(format!(
                "local,id=fs{i},path={},security_model=none,readonly=on",
                s.host.display()
            ));
            a.push("-device".into());
            a.push(format!("virtio-9p-pci,fsdev=fs{i},mount_tag={}", s.tag));
        }
        a
    }

    /// Write the symlinks, the `shares` file and the filtered /etc into
    /// the initramfs.
    pub fn write<W: Write>(&self, w: &mut CpioWriter<W>) -> Result<(), VmError> {
        let wr = |e: io::Error| VmError::Io {
            action: "write the initramfs",
            path: PathBuf::from("initramfs.img"),
            source: e,
        };
        for (name, to) in &self.symlinks {
            w.symlink(name, to).map_err(wr)?;
        }
        w.file(SHARES_FILE, 0o644, self.shares_file().as_bytes())
            .map_err(wr)?;
        if let Some(etc) = &self.etc {
            let mut budget = ETC_MAX_BYTES;
            w.dir("etc", 0o755).map_err(wr)?;
            copy_readable(w, etc, "etc", &mut budget)?;
        }
        Ok(())
    }
}

/// Whether "others" may read (and for a directory, search) `meta`.
fn world_readable(meta: &fs::Metadata) -> bool {
    let m = meta.permissions().mode();
    if meta.is_dir() {
        m & 0o005 == 0o005
    } else {
        m & 0o004 != 0
    }
}

/// Pre-order walk of `dir` into the archive at `name`: world-readable
/// regular files, symlinks, and world-searchable directories; nothing else
/// (no device nodes, sockets or FIFOs). Set-id bits are dropped.
fn copy_readable<W: Write>(
    w: &mut CpioWriter<W>,
    dir: &Path,
    name: &str,
    budget: &mut u64,
) -> Result<(), VmError> {
    let rd = fs::read_dir(dir).map_err(io_err("read the host's /etc", dir))?;
    let mut entries: Vec<_> = rd.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        let Some(fname) = e.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let inside = format!("{name}/{fname}");
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        let wr = io_err("write the initramfs from", &path);
        let perm = meta.mode() & 0o777;
        if meta.file_type().is_symlink() {
            let to = fs::read_link(&path).map_err(io_err("read a symlink", &path))?;
            w.symlink(&inside, &to.to_string_lossy()).map_err(wr)?;
        } else if meta.is_dir() && world_readable(&meta) {
            w.dir(&inside, perm).map_err(wr)?;
            copy_readable(w, &path, &inside, budget)?;
        } else if meta.is_file() && world_readable(&meta) {
            if meta.len() > *budget {
                return Err(VmError::BadInput {
                    what: format!(
                        "the host's /etc holds more than {} MiB of world-readable files; the guest gets a copy in its initramfs",
                        ETC_MAX_BYTES >> 20
                    ),
                    path,
                });
            }
            *budget -= meta.len();
            let data = fs::read(&path).map_err(io_err("read", &path))?;
            w.file(&inside, perm, &data).map_err(wr)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_dirs_are_shared_symlinks_recreated_and_etc_filtered() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        fs::create_dir_all(r.join("usr/bin")).unwrap();
        fs::create_dir_all(r.join("lib32")).unwrap();
        std::os::unix::fs::symlink("usr/bin", r.join("bin")).unwrap();
        fs::create_dir_all(r.join("etc/ssl/private")).unwrap();
        fs::write(r.join("etc/passwd"), "root:x:0:0::/root:/bin/sh\n").unwrap();
        fs::write(r.join("etc/shadow"), "root:secret\n").unwrap();
        fs::set_permissions(r.join("etc/shadow"), fs::Permissions::from_mode(0o640)).unwrap();
        fs::write(r.join("etc/ssl/private/key.pem"), "KEY").unwrap();
        fs::set_permissions(r.join("etc/ssl/private"), fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink("passwd", r.join("etc/link")).unwrap();

        let u = Userland::of_host(r).unwrap();
        let tags: Vec<_> = u.shares.iter().map(|s| s.tag.as_str()).collect();
        assert_eq!(tags, ["strata.usr", "strata.lib32"]);
        assert_eq!(u.symlinks, [("bin".to_string(), "usr/bin".to_string())]);
        assert_eq!(u.shares_file(), "strata.usr /usr\nstrata.lib32 /lib32\n");
        let args = u.qemu_args().join(" ");
        assert!(args.contains("security_model=none,readonly=on"), "{args}");

        let mut w = CpioWriter::new(Vec::new());
        u.write(&mut w).unwrap();
        let raw = w.finish().unwrap();
        let s = String::from_utf8_lossy(&raw);
        assert!(s.contains("etc/passwd") && s.contains("root:x:0:0"), "{s}");
        assert!(s.contains("etc/link"), "{s}");
        assert!(!s.contains("etc/shadow") && !s.contains("secret"), "{s}");
        assert!(s.contains("etc/ssl\0") && !s.contains("private"), "{s}");
    }

    #[test]
    fn a_host_without_usr_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let e = Userland::of_host(d.path()).unwrap_err().to_string();
        assert!(e.contains("no /usr directory"), "{e}");
    }
}
