//! The host as a command sees it by default ([`crate::RootFs::HostReadOnly`]):
//! only what a program needs from the host, never the host's data.
//!
//! The view is built on an empty tmpfs (the new root), into which the
//! system directories of [`SYSTEM_DIRS`] are bound (recursively, so their
//! submounts come along) and the symlinks among them recreated (on Debian 12
//! `/bin`, `/sbin` and `/lib*` are symlinks into `/usr`: binding them would
//! bind `/usr` twice). `/etc` comes without what is not world-readable
//! ([`unreadable_under`]): a command runs as another uid than the file's
//! owner and could not read those on the host either, so hiding them takes
//! nothing a program may use, while it does stop a leak through a mistake
//! elsewhere (a uid or group shared with the file's owner, a capability).
//! Nothing else of the host is there: not /home, /root, /srv, /opt, /var,
//! /mnt, /media, /run, nor any Store or strata state. More of the host is
//! shown only when asked for (`--expose`, [`crate::backend::Expose`]).
//!
//! The same view serves `strata run --isolate` (crates/strata-rootless),
//! through [`crate::mounts::build_view`]: one list, one function.

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::mounts::{bind, mkdir_p, mount, step, under, MountError};

/// Host directories every program needs, read-only at the same path
/// inside. Missing ones are skipped; symlinks are recreated as symlinks.
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
];

/// The one directory whose non-world-readable entries are masked.
pub const ETC: &str = "/etc";

/// At most this many entries of /etc are looked at when the view is built
/// (a Debian 12 /etc has about 1,200). A directory the walk does not reach
/// within the bound is masked whole: the bound can hide too much, never
/// show too much.
pub const ETC_WALK_MAX_ENTRIES: usize = 20_000;

/// Deeper directories under /etc are masked whole (same reason).
pub const ETC_WALK_MAX_DEPTH: usize = 32;

/// The tmpfs under the view: it holds the directories and symlinks above,
/// mount points and placeholders, never data (it is read-only before any
/// command runs).
const ROOT_TMPFS_DATA: &str = "mode=0755,size=1m,nr_inodes=16384";

/// Build the host view in `new_root` (an empty directory, before the
/// read-only step): a tmpfs there, the system directories, the mount points
/// of the fresh /tmp, /proc, /sys and /dev. The paths under /etc to mask
/// come from [`unreadable_under`], walked by the caller of
/// [`crate::mounts::build_view_with`] (the Sandbox's monitor walks it
/// beside PID 1's setup).
pub(crate) fn stage(new_root: &Path) -> Result<(), MountError> {
    mount(
        "tmpfs",
        new_root,
        "tmpfs",
        libc::MS_NOSUID | libc::MS_NODEV,
        ROOT_TMPFS_DATA,
        "tmpfs for the new root",
    )?;
    for d in SYSTEM_DIRS {
        let host = Path::new(d);
        let meta = match fs::symlink_metadata(host) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return step("stat a system directory", host, Err(e)),
        };
        let inside = under(new_root, d);
        if meta.file_type().is_symlink() {
            // Recreated verbatim: `usr/bin` resolves the same way inside.
            let to = step("read a system symlink", host, fs::read_link(host))?;
            step(
                "recreate a system symlink",
                &inside,
                std::os::unix::fs::symlink(to, &inside),
            )?;
        } else if meta.is_dir() {
            mkdir_p(&inside, 0o755)?;
            bind(host, &inside, true, "bind a system directory")?;
        }
    }
    for d in ["/tmp", "/proc", "/sys", "/dev"] {
        mkdir_p(&under(new_root, d), 0o755)?;
    }
    step(
        "chmod the new root 0755",
        new_root,
        fs::set_permissions(new_root, fs::Permissions::from_mode(0o755)),
    )?;
    Ok(())
}

/// Is `mode` readable (and, for a directory, searchable) by others?
fn world_readable(mode: u32, is_dir: bool) -> bool {
    mode & 0o004 != 0 && (!is_dir || mode & 0o001 != 0)
}

/// Everything under `dir` that others may not read: each entry whose mode
/// lacks o+r (a directory also o+x), each directory that cannot be listed,
/// and each directory the bounded walk does not reach
/// ([`ETC_WALK_MAX_ENTRIES`], [`ETC_WALK_MAX_DEPTH`]). Symlinks are not
/// followed (a link resolves inside the view, where its target is masked
/// or absent). `dir` itself is never in the list. An explicit stack, no
/// recursion (ARCHITECTURE.md: no walk recurses on tree depth).
pub fn unreadable_under(dir: &Path) -> Vec<PathBuf> {
    let mut masks = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), 0usize)];
    let mut seen = 0usize;
    while let Some((d, depth)) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            masks.push(d);
            continue;
        };
        for e in entries {
            let Ok(e) = e else {
                masks.push(d.clone());
                break;
            };
            seen += 1;
            if seen > ETC_WALK_MAX_ENTRIES {
                // Out of budget: this directory and all not yet walked go
                // whole (`d` only if it is not `dir` itself).
                if d != dir {
                    masks.push(d.clone());
                }
                masks.extend(stack.drain(..).map(|(p, _)| p));
                return masks;
            }
            let p = e.path();
            // Symlinks are skipped on the directory entry's own type (no
            // stat: readdir's d_type, getdents64(2)), and the others are
            // stat'ed relative to the open directory (std's
            // `DirEntry::metadata` is a statx on the directory's
            // descriptor, not following a symlink), not by a full path
            // resolved from / again: this walk of ~1,250 entries is on
            // every Sandbox's start (docs/benchmarks.md, "The cgroup move").
            if e.file_type().is_ok_and(|t| t.is_symlink()) {
                continue;
            }
            let Ok(m) = e.metadata() else {
                masks.push(p);
                continue;
            };
            if m.file_type().is_symlink() {
                continue;
            }
            if !world_readable(m.mode(), m.is_dir()) {
                masks.push(p);
            } else if m.is_dir() {
                if depth + 1 >= ETC_WALK_MAX_DEPTH {
                    masks.push(p);
                } else {
                    stack.push((p, depth + 1));
                }
            }
        }
    }
    masks
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn chmod(p: &Path, mode: u32) {
        fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn unreadable_entries_are_found_and_not_descended() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        fs::write(d.join("passwd"), "x").unwrap();
        fs::write(d.join("shadow"), "x").unwrap();
        chmod(&d.join("shadow"), 0o640);
        fs::create_dir_all(d.join("ssl/private")).unwrap();
        fs::write(d.join("ssl/private/key"), "k").unwrap();
        chmod(&d.join("ssl/private"), 0o700);
        fs::create_dir_all(d.join("ssl/certs")).unwrap();
        fs::write(d.join("ssl/certs/ca"), "c").unwrap();
        fs::create_dir(d.join("noexec")).unwrap();
        chmod(&d.join("noexec"), 0o744);
        std::os::unix::fs::symlink("/root/secret", d.join("link")).unwrap();
        let mut got = unreadable_under(d);
        got.sort();
        let mut want = vec![d.join("noexec"), d.join("shadow"), d.join("ssl/private")];
        want.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn too_deep_directories_are_masked_whole() {
        let t = tempfile::tempdir().unwrap();
        let mut p = t.path().to_path_buf();
        for i in 0..ETC_WALK_MAX_DEPTH + 3 {
            p.push(format!("d{i}"));
        }
        fs::create_dir_all(&p).unwrap();
        let got = unreadable_under(t.path());
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(
            got[0].components().count() - t.path().components().count(),
            ETC_WALK_MAX_DEPTH
        );
    }

    #[test]
    fn world_readable_needs_search_for_directories() {
        assert!(world_readable(0o644, false));
        assert!(!world_readable(0o640, false));
        assert!(world_readable(0o755, true));
        assert!(!world_readable(0o754, true));
        assert!(!world_readable(0o751, true));
    }
}
