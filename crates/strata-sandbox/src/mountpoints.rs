//! Empty directories the staged root lacks, e.g. `/workspace` for the
//! Workspace mounts (docs/sandbox-requests.md, request 1).
//!
//! The staged root is the host's own root (or a rootfs directory), and a
//! `mkdir` there before the read-only step would create the directory *on
//! the host*. Instead the deepest existing ancestor of each missing path is
//! "spliced": a small tmpfs gets one placeholder per entry of the ancestor,
//! each bound back from the original (symlinks copied as symlinks), plus
//! the missing directories; the tmpfs is then moved on top of the ancestor.
//! The host is never written to, everything that was visible stays visible,
//! and the read-only step that follows covers the new layer too.
//!
//! A writable rootfs directory (`RootFs::Dir { readonly: false }`) gets the
//! directories created in it directly, as /tmp, /proc, /sys and /dev
//! already are: a layer on top would swallow writes to that directory.
//! So does the host view's own tmpfs root (crate::hostview): only below a
//! bound system directory is a layer needed there.
//!
//! Bind targets are mount points too ([`bind_targets`]): on the host view
//! an exposed `/home/u/data` or the daemon's state directory does not
//! exist until it is created here; a file target gets an empty placeholder
//! file. A target in the Sandbox's fresh /tmp is created after that tmpfs
//! is mounted ([`create_in_tmp`]).

use std::fs;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use crate::mounts::{bind, inside, mkdir_p, mount, step, touch, under, BindMount, MountError};

/// Where the Sandbox gets fresh filesystems of its own (mounted after the
/// mount points are made): a bind target below one is made later, or never.
const FRESH: &[&str] = &["/tmp", "/proc", "/sys", "/dev"];

/// Size of a splice layer: it only holds directory entries and empty
/// placeholder files, never data (it is read-only once the root is).
const LAYER_DATA: &str = "size=1m,nr_inodes=4096";

/// Is `p` a valid mount point to ask for: absolute, clean, not `/`?
pub(crate) fn valid(p: &Path) -> bool {
    crate::exec::is_clean_absolute(p) && p.components().any(|c| matches!(c, Component::Normal(_)))
}

/// Create every path of `points` in the staged root `new_root` (before it
/// is made read-only). `staging` is a private scratch directory (the
/// staging tmpfs) for building layers; `in_place(ancestor)` says whether a
/// missing directory may be created directly in that existing directory
/// (a writable rootfs, the host view's tmpfs) rather than on a layer.
pub(crate) fn create(
    new_root: &Path,
    staging: &Path,
    points: &[PathBuf],
    in_place: &dyn Fn(&Path) -> bool,
) -> Result<(), MountError> {
    for (n, p) in points.iter().enumerate() {
        if !valid(p) {
            return Err(MountError::BadTarget { target: p.clone() });
        }
        let names: Vec<_> = p
            .components()
            .filter_map(|c| match c {
                Component::Normal(s) => Some(s.to_os_string()),
                _ => None,
            })
            .collect();
        // Deepest existing ancestor, resolved inside the new root (symlinks
        // followed, but never out of it: `inside` checks).
        let mut ancestor = new_root.to_path_buf();
        let mut missing = Vec::new();
        let mut prefix = PathBuf::from("/");
        for (i, name) in names.iter().enumerate() {
            prefix.push(name);
            match inside(new_root, &prefix)? {
                Some(real) => ancestor = real,
                None => {
                    missing = names[i..].to_vec();
                    break;
                }
            }
        }
        if missing.is_empty() {
            if ancestor.is_dir() {
                continue;
            }
            // Something that is not a directory is there: refuse rather
            // than hide it.
            return Err(MountError::BadTarget { target: p.clone() });
        }
        let rel: PathBuf = missing.iter().collect();
        if in_place(&ancestor) {
            make_dirs(&ancestor, &rel)?;
        } else {
            let layer = staging.join(format!(".strata-layer-{}", next_layer(staging, n)));
            splice(&ancestor, &layer, &rel)?;
        }
    }
    Ok(())
}

/// A layer name not used yet in `staging` (create runs more than once).
fn next_layer(staging: &Path, from: usize) -> usize {
    (from..)
        .find(|i| !staging.join(format!(".strata-layer-{i}")).exists())
        .unwrap_or(from)
}

/// Is `p` (inside the Sandbox) on one of the fresh filesystems?
fn on_fresh(p: &Path) -> bool {
    FRESH.iter().any(|f| p.starts_with(f))
}

/// Make the targets of `binds` exist in the staged root (step 2c of
/// crate::mounts::build_view): a directory target like a mount point, a
/// file target as an empty placeholder file (its parent like a mount
/// point). `fds` are the binds' sources (O_PATH), for their type. Skipped:
/// targets on the fresh /tmp, /proc, /sys and /dev (see [`create_in_tmp`]),
/// and targets inside an earlier bind's target (that bind brings them).
pub(crate) fn bind_targets(
    new_root: &Path,
    staging: &Path,
    binds: &[BindMount],
    fds: &[OwnedFd],
    in_place: &dyn Fn(&Path) -> bool,
) -> Result<(), MountError> {
    for (i, (b, fd)) in binds.iter().zip(fds).enumerate() {
        let t = &b.target;
        if !valid(t) {
            return Err(MountError::BadTarget { target: t.clone() });
        }
        if on_fresh(t) || binds[..i].iter().any(|e| t.starts_with(&e.target)) {
            continue;
        }
        if source_is_dir(fd, &b.source)? {
            create(new_root, staging, std::slice::from_ref(t), in_place)?;
            continue;
        }
        if let Some(parent) = t.parent().filter(|p| valid(p)) {
            create(new_root, staging, &[parent.to_path_buf()], in_place)?;
        }
        if inside(new_root, t)?.is_some() {
            continue;
        }
        let parent = t.parent().map(|p| inside(new_root, p)).transpose()?;
        if let (Some(parent), Some(name)) = (parent.flatten(), t.file_name()) {
            // Elsewhere (a spliced layer) the bind step refuses it.
            if in_place(&parent) {
                touch(&parent.join(name))?;
            }
        }
    }
    Ok(())
}

/// A bind target in the fresh /tmp (mounted in step 4a), created there
/// just before the bind: directories 0755, a file target as an empty
/// file. Anything else is left to the bind step, which refuses a missing
/// target.
pub(crate) fn create_in_tmp(
    new_root: &Path,
    target: &Path,
    fd: &OwnedFd,
) -> Result<(), MountError> {
    if !target.starts_with("/tmp") || inside(new_root, target)?.is_some() {
        return Ok(());
    }
    let is_dir = source_is_dir(fd, target)?;
    let dir = if is_dir {
        Some(target)
    } else {
        target.parent()
    };
    if let Some(dir) = dir {
        mkdir_p(&under(new_root, &dir.to_string_lossy()), 0o755)?;
    }
    if !is_dir {
        touch(&under(new_root, &target.to_string_lossy()))?;
    }
    Ok(())
}

fn source_is_dir(fd: &OwnedFd, source: &Path) -> Result<bool, MountError> {
    let st = step("stat a bind source", source, rustix::fs::fstat(fd))?;
    Ok(rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory)
}

/// `base/rel`, each new level root-owned 0755 whatever the umask.
fn make_dirs(base: &Path, rel: &Path) -> Result<(), MountError> {
    let mut cur = base.to_path_buf();
    for c in rel.components() {
        cur.push(c);
        if !cur.exists() {
            mkdir_p(&cur, 0o755)?;
            step(
                "chmod mount point 0755",
                &cur,
                fs::set_permissions(&cur, fs::Permissions::from_mode(0o755)),
            )?;
        }
    }
    Ok(())
}

/// Cover `dir` with a tmpfs that shows the same entries plus `rel`.
fn splice(dir: &Path, layer: &Path, rel: &Path) -> Result<(), MountError> {
    let meta = step("stat the directory to splice", dir, fs::metadata(dir))?;
    mkdir_p(layer, 0o700)?;
    // Same mode and owner as the directory it covers, so nothing about
    // the directory itself changes for a command.
    let data = format!(
        "mode={:o},uid={},gid={},{LAYER_DATA}",
        meta.mode() & 0o7777,
        meta.uid(),
        meta.gid()
    );
    mount(
        "tmpfs",
        layer,
        "tmpfs",
        libc::MS_NOSUID | libc::MS_NODEV,
        &data,
        "tmpfs for a mount point layer",
    )?;
    let entries = step("list the directory to splice", dir, fs::read_dir(dir))?;
    for entry in entries {
        let entry = step("list the directory to splice", dir, entry)?;
        let src = entry.path();
        let dst = layer.join(entry.file_name());
        let ft = step("stat an entry to splice", &src, entry.file_type())?;
        if ft.is_symlink() {
            // A symlink cannot be a bind target; the copy resolves the same
            // way (relative links stay relative, absolute ones are resolved
            // in the Sandbox's root after pivot_root anyway).
            let to = step("read a symlink to splice", &src, fs::read_link(&src))?;
            step(
                "copy a symlink into the layer",
                &dst,
                std::os::unix::fs::symlink(to, &dst),
            )?;
        } else if ft.is_dir() {
            mkdir_p(&dst, 0o755)?;
            // Recursive: the host's submounts below it come along, as they
            // did in the plain copy of the root.
            bind(&src, &dst, true, "bind a directory into the layer")?;
        } else {
            // Files, sockets, fifos, device nodes: a bind works for any of
            // them onto an empty regular file.
            touch(&dst)?;
            bind(&src, &dst, false, "bind a file into the layer")?;
        }
    }
    make_dirs(layer, rel)?;
    step(
        "move the mount point layer into place (MS_MOVE)",
        dir,
        rustix::mount::mount_move(layer, dir),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity() {
        assert!(valid(Path::new("/workspace")));
        assert!(valid(Path::new("/a/b/c")));
        for bad in ["/", "workspace", "/a/../b", ""] {
            assert!(!valid(Path::new(bad)), "{bad:?}");
        }
    }
}
