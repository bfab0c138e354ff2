//! `snapshot`, `project create --from` and `export` through a server
//! (`--remote`, docs/server.md): a directory of this host travels as a tar
//! archive, the server's import and export routes
//! (`POST /v1/projects/P/branches/B/tar`, `GET /v1/projects/P/tar`).
//!
//! Bad input is refused before anything is sent: a source that is not a
//! directory, an export target that is not a directory or is not empty
//! (without --force). The counts printed are those of the archive, counted
//! as the Store counts a snapshot or an export (each hard link a file, its
//! bytes once; the root directory not counted). What the archive cannot
//! carry is said, not hidden: the server's import takes files,
//! directories, symlinks and hard links (a fifo is skipped with a warning,
//! as a socket or device is locally), and keeps modes but not owners,
//! mtimes or xattrs; the Store's own figures of a snapshot (new objects,
//! new bytes) are not reported by the server (null).

use anyhow::{anyhow, Context, Result};
use std::collections::HashMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// A directory packed as a tar archive, with the counts of its contents.
pub struct Packed {
    pub tar: Vec<u8>,
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub bytes: u64,
    pub warnings: Vec<String>,
}

/// Refuse a snapshot source that is not a directory (before any request).
pub fn check_source(dir: &Path) -> Result<()> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(anyhow!(
            "{} is not a directory; snapshot takes a directory (its contents become the branch's tree)",
            dir.display()
        )),
        Err(e) => Err(anyhow!(
            "cannot read the directory {}: {e}; pass an existing directory",
            dir.display()
        )),
    }
}

/// Pack `dir`'s contents (not `dir` itself) as a GNU tar archive, walking
/// with its own stack (depth costs heap, not call stack, as the Store's
/// snapshot walk). Entries are sorted by name within each directory.
pub fn pack(dir: &Path) -> Result<Packed> {
    check_source(dir)?;
    let mut b = tar::Builder::new(Vec::new());
    b.mode(tar::HeaderMode::Complete);
    let mut p = Packed {
        tar: Vec::new(),
        files: 0,
        dirs: 0,
        symlinks: 0,
        bytes: 0,
        warnings: Vec::new(),
    };
    // (device, inode) of a file with several links -> its first path.
    let mut linked: HashMap<(u64, u64), PathBuf> = HashMap::new();
    let mut stack: Vec<PathBuf> = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let abs = dir.join(&rel);
        let mut names: Vec<_> = std::fs::read_dir(&abs)
            .with_context(|| format!("listing {}", abs.display()))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<std::io::Result<_>>()
            .with_context(|| format!("listing {}", abs.display()))?;
        names.sort();
        // Pushed in reverse so that the walk visits names in order.
        let mut subdirs = Vec::new();
        for name in names {
            let r = rel.join(&name);
            let a = dir.join(&r);
            let m = std::fs::symlink_metadata(&a)
                .with_context(|| format!("reading the metadata of {}", a.display()))?;
            let ft = m.file_type();
            let mut h = tar::Header::new_gnu();
            h.set_mode(m.mode() & 0o7777);
            h.set_uid(m.uid() as u64);
            h.set_gid(m.gid() as u64);
            h.set_mtime(m.mtime().max(0) as u64);
            h.set_size(0);
            let io = |e: std::io::Error| anyhow!("packing {}: {e}", a.display());
            if ft.is_dir() {
                h.set_entry_type(tar::EntryType::Directory);
                b.append_data(&mut h, &r, std::io::empty()).map_err(io)?;
                p.dirs += 1;
                subdirs.push(r);
            } else if ft.is_symlink() {
                let target = std::fs::read_link(&a).map_err(io)?;
                h.set_entry_type(tar::EntryType::Symlink);
                b.append_link(&mut h, &r, &target).map_err(io)?;
                p.symlinks += 1;
            } else if ft.is_file() {
                p.files += 1;
                if m.nlink() > 1 {
                    if let Some(first) = linked.get(&(m.dev(), m.ino())) {
                        h.set_entry_type(tar::EntryType::Link);
                        b.append_link(&mut h, &r, first).map_err(io)?;
                        continue;
                    }
                    linked.insert((m.dev(), m.ino()), r.clone());
                }
                let f = std::fs::File::open(&a).map_err(io)?;
                h.set_entry_type(tar::EntryType::Regular);
                h.set_size(m.len());
                b.append_data(&mut h, &r, f).map_err(io)?;
                p.bytes += m.len();
            } else {
                let what = if ft.is_fifo() {
                    "a fifo: the server's tar import takes files, directories, symlinks and hard links"
                } else if ft.is_socket() {
                    "a socket"
                } else if ft.is_block_device() {
                    "a block device"
                } else {
                    "a character device"
                };
                p.warnings.push(format!(
                    "skipped {} ({what}): it cannot be stored as file content",
                    a.display()
                ));
            }
        }
        stack.extend(subdirs.into_iter().rev());
    }
    p.tar = b
        .into_inner()
        .with_context(|| format!("packing {}", dir.display()))?;
    Ok(p)
}

/// Refuse an export target before anything is fetched, as the Store's
/// export does: an existing non-directory, or a non-empty directory
/// without `force`.
pub fn check_target(dir: &Path, force: bool) -> Result<()> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(anyhow!("cannot read {}: {e}", dir.display())),
        Ok(m) if !m.is_dir() => Err(anyhow!(
            "{} exists and is not a directory; export writes into a directory: choose another path",
            dir.display()
        )),
        Ok(_) => {
            let mut it =
                std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))?;
            if it.next().is_some() && !force {
                return Err(strata_store::StoreError::NotEmpty {
                    path: dir.to_path_buf(),
                }
                .into());
            }
            Ok(())
        }
    }
}

/// What [`unpack`] wrote, counted as the Store's export counts.
pub struct Unpacked {
    pub files: u64,
    pub dirs: u64,
    pub bytes: u64,
    pub dropped_privileges: u64,
    pub restored_privileges: u64,
}

/// Write the archive `tar` into `dir` (created if missing; checked by
/// [`check_target`] first). setuid/setgid bits are kept only with
/// `preserve_privileges`, owners only as root, as the Store's export.
pub fn unpack(tar: &[u8], dir: &Path, preserve_privileges: bool) -> Result<Unpacked> {
    let mut u = Unpacked {
        files: 0,
        dirs: 0,
        bytes: 0,
        dropped_privileges: 0,
        restored_privileges: 0,
    };
    let bad = |e: std::io::Error| anyhow!("the server's tar archive: {e}");
    let mut headers = tar::Archive::new(tar);
    for e in headers.entries().map_err(bad)? {
        let e = e.map_err(bad)?;
        let h = e.header();
        match h.entry_type() {
            tar::EntryType::Regular => {
                u.files += 1;
                u.bytes += h.size().map_err(bad)?;
            }
            tar::EntryType::Directory => u.dirs += 1,
            _ => {}
        }
        if h.mode().map_err(bad)? & 0o6000 != 0 {
            if preserve_privileges {
                u.restored_privileges += 1;
            } else {
                u.dropped_privileges += 1;
            }
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut ar = tar::Archive::new(tar);
    // Without preservation the tar crate keeps mode & 0o777 (setuid,
    // setgid and sticky dropped); `unpack` refuses paths that leave `dir`
    // (`..`, absolute, through a symlink) and sets directory modes last.
    ar.set_preserve_permissions(preserve_privileges);
    ar.set_preserve_ownerships(rustix::process::geteuid().is_root());
    ar.set_overwrite(true);
    ar.unpack(dir)
        .with_context(|| format!("writing the export into {}", dir.display()))?;
    Ok(u)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tar entry with a raw name (the tar crate's builder refuses `..`,
    /// a hostile server need not use it).
    fn raw_entry(out: &mut Vec<u8>, name: &[u8], kind: tar::EntryType, link: &[u8], data: &[u8]) {
        let mut h = tar::Header::new_old();
        h.as_old_mut().name[..name.len()].copy_from_slice(name);
        h.as_old_mut().linkname[..link.len()].copy_from_slice(link);
        h.set_entry_type(kind);
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        h.set_cksum();
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }

    #[test]
    fn a_hostile_archive_writes_nothing_outside_the_target() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        let cases: Vec<Vec<u8>> = vec![
            {
                let mut t = Vec::new();
                raw_entry(&mut t, b"../escape", tar::EntryType::Regular, b"", b"pwned");
                t
            },
            {
                let mut t = Vec::new();
                let abs = outside.join("abs");
                raw_entry(
                    &mut t,
                    abs.as_os_str().as_encoded_bytes(),
                    tar::EntryType::Regular,
                    b"",
                    b"pwned",
                );
                t
            },
            {
                let mut t = Vec::new();
                let target = outside.as_os_str().as_encoded_bytes().to_vec();
                raw_entry(&mut t, b"l", tar::EntryType::Symlink, &target, b"");
                raw_entry(&mut t, b"l/through", tar::EntryType::Regular, b"", b"pwned");
                t
            },
        ];
        for (i, mut t) in cases.into_iter().enumerate() {
            t.extend_from_slice(&[0u8; 1024]);
            let target = tmp.path().join(format!("target{i}"));
            // Refused, or the entry kept inside the target: never outside.
            let _ = unpack(&t, &target, false);
            assert!(!tmp.path().join("escape").exists(), "case {i}");
            assert_eq!(
                std::fs::read_dir(&outside).unwrap().count(),
                0,
                "case {i}: something was written outside the target"
            );
        }
    }
}
