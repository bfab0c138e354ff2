//! Export: materialize a commit into a directory, restoring content, modes,
//! owners (when permitted), times, symlinks, fifos, hard links and xattrs.
//!
//! Privileges are not restored unless asked for (`ExportOptions::
//! preserve_privileges`): a Sandbox command can commit a setuid copy of a
//! shell, and anyone who can write strata.db can forge an entry owned by
//! uid 0 with mode 04755 or a `security.capability` xattr (readers do not
//! re-hash). An export as root would otherwise create a setuid-root file
//! on the host. So by default the setuid and setgid bits are cleared and
//! only `user.` xattrs are written (`trusted.`, `security.` and `system.`
//! ones carry privilege or policy); the Store keeps them unchanged.

use crate::error::{Result, StoreError};
use crate::id::ObjectId;
use crate::meta::{set_mtime, set_xattrs};
use crate::object::{EntryKind, TreeEntry};
use crate::progress::Progress;
use crate::store::Store;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// What an export wrote.
#[derive(Clone, Debug, Default)]
pub struct ExportReport {
    pub files: u64,
    pub dirs: u64,
    pub bytes: u64,
    /// Entries whose setuid/setgid bits or non-`user.` xattrs were not
    /// written (without `preserve_privileges`).
    pub dropped_privileges: u64,
    /// Entries whose setuid/setgid bits or non-`user.` xattrs were
    /// restored (with `preserve_privileges`).
    pub restored_privileges: u64,
}

/// How to export.
#[derive(Clone, Debug, Default)]
pub struct ExportOptions {
    /// Write into a non-empty directory, replacing what is in the way.
    pub force: bool,
    /// Restore the setuid and setgid bits and the xattrs outside `user.`
    /// exactly as stored. Off by default: see the module documentation.
    pub preserve_privileges: bool,
}

/// The mode bits that grant privilege to whoever executes a file.
const PRIVILEGE_BITS: u32 = 0o6000;

/// Whether export writes this xattr without `preserve_privileges`.
fn unprivileged_xattr(name: &[u8]) -> bool {
    name.starts_with(b"user.")
}

struct Ctx<'a> {
    store: &'a Store,
    progress: &'a dyn Progress,
    as_root: bool,
    preserve_privileges: bool,
    /// Hard-linked entries, exported after the parallel pass.
    linked: Mutex<Vec<(PathBuf, TreeEntry)>>,
    /// Directories whose mode and mtime are set last (writing into a
    /// directory changes its mtime; a read-only mode would stop the writes).
    /// With their depth below the target.
    dirs: Mutex<Vec<(PathBuf, TreeEntry, usize)>>,
    report: Mutex<ExportReport>,
    /// Every directory being exported: its tree and its parent's index
    /// (the cycle check walks up it).
    tree_chain: Mutex<Vec<(ObjectId, Option<usize>)>>,
    failed: AtomicBool,
    error: Mutex<Option<StoreError>>,
}

/// Entries handed to one task (see `snapshot::NAMES_PER_TASK`).
const ENTRIES_PER_TASK: usize = 64;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Ctx<'_> {
    /// Record the first error; every task not yet started then does nothing.
    fn fail(&self, e: StoreError) {
        self.failed.store(true, Ordering::Relaxed);
        lock(&self.error).get_or_insert(e);
    }
}

impl Store {
    /// Write the tree of `commit` into `dir` (created if missing). A
    /// non-empty `dir` is refused unless `force`. Privileges are dropped
    /// (see `export_with`).
    pub fn export(
        &self,
        commit: ObjectId,
        dir: &Path,
        force: bool,
        progress: &dyn Progress,
    ) -> Result<ExportReport> {
        let opts = ExportOptions {
            force,
            preserve_privileges: false,
        };
        self.export_with(commit, dir, &opts, progress)
    }

    /// Write the tree of `commit` into `dir` (created if missing). A
    /// non-empty `dir` is refused unless `opts.force`. Owners are restored
    /// when running as root; setuid/setgid bits and xattrs outside `user.`
    /// only with `opts.preserve_privileges` (the report counts the entries
    /// either way).
    pub fn export_with(
        &self,
        commit: ObjectId,
        dir: &Path,
        opts: &ExportOptions,
        progress: &dyn Progress,
    ) -> Result<ExportReport> {
        let force = opts.force;
        let c = self.read_commit(commit)?;
        // Readers do not re-hash, so the tree may be a forged DAG whose
        // shared subtrees expand exponentially: count it first, reading
        // each stored tree once, and refuse what no filesystem could hold.
        crate::trees::expanded_entries(&self.reader(), c.tree)?;
        if dir.exists() {
            let mut it = std::fs::read_dir(dir).map_err(|e| StoreError::io("list", dir, e))?;
            if it.next().is_some() && !force {
                return Err(StoreError::NotEmpty {
                    path: dir.to_path_buf(),
                });
            }
        } else {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::io("create", dir, e))?;
        }
        let ctx = Ctx {
            store: self,
            progress,
            as_root: rustix::process::geteuid().is_root(),
            preserve_privileges: opts.preserve_privileges,
            linked: Mutex::new(Vec::new()),
            dirs: Mutex::new(Vec::new()),
            report: Mutex::new(ExportReport::default()),
            tree_chain: Mutex::new(Vec::new()),
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
        };
        progress.start("export", c.entries);
        // Every directory is a task of one scope and no task waits for
        // another, so no stack grows with the depth of the tree.
        let root = Arc::new(dir.to_path_buf());
        rayon::scope(|s| s.spawn(|s| export_dir(&ctx, s, c.tree, root, None, 0)));
        if let Some(e) = lock(&ctx.error).take() {
            return Err(e);
        }
        // Hard links: the first path of each group gets the content, the
        // others link to it.
        let mut linked = std::mem::take(&mut *ctx.linked.lock().unwrap_or_else(|p| p.into_inner()));
        linked.sort_by(|a, b| a.0.cmp(&b.0));
        let mut first: std::collections::HashMap<u64, PathBuf> = Default::default();
        for (path, e) in linked {
            if let Some(target) = first.get(&e.link_group) {
                if std::fs::symlink_metadata(&path).is_ok_and(|m| !m.is_dir()) {
                    std::fs::remove_file(&path)
                        .map_err(|err| StoreError::io("replace", &path, err))?;
                }
                std::fs::hard_link(target, &path)
                    .map_err(|err| StoreError::io("link", &path, err))?;
            } else {
                write_entry(&ctx, &path, &e)?;
                first.insert(e.link_group, path);
            }
        }
        let mut dirs = std::mem::take(&mut *ctx.dirs.lock().unwrap_or_else(|p| p.into_inner()));
        // Deepest first, so setting a parent's mtime is the last touch on it.
        dirs.sort_by_key(|d| std::cmp::Reverse(d.2));
        for (path, e, _) in dirs {
            apply_meta(&ctx, &path, &e)?;
        }
        if let Some(mut root_mode) = c
            .metadata
            .get("root_mode")
            .and_then(|m| u32::from_str_radix(m, 8).ok())
        {
            root_mode &= 0o7777;
            if root_mode & PRIVILEGE_BITS != 0 {
                let mut r = lock(&ctx.report);
                if ctx.preserve_privileges {
                    r.restored_privileges += 1;
                } else {
                    r.dropped_privileges += 1;
                    root_mode &= !PRIVILEGE_BITS;
                }
            }
            rustix::fs::chmod(dir, rustix::fs::Mode::from_raw_mode(root_mode))
                .map_err(|e| StoreError::io("chmod", dir, e.into()))?;
        }
        progress.finish();
        Ok(ctx.report.into_inner().unwrap_or_default())
    }
}

/// Export tree `tree` into the existing directory `dir`, `depth` levels
/// below the target; `parent` is the index of the tree above in
/// `tree_chain`. Readers do not re-hash objects (fsck does), so a damaged
/// Store can hold a tree that contains itself: it is refused, or the
/// export would never end.
fn export_dir<'s>(
    ctx: &'s Ctx<'s>,
    s: &rayon::Scope<'s>,
    tree: ObjectId,
    dir: Arc<PathBuf>,
    parent: Option<usize>,
    depth: usize,
) {
    if ctx.failed.load(Ordering::Relaxed) {
        return;
    }
    match list_dir(ctx, tree, parent) {
        Ok((me, entries)) => {
            let mut files = Vec::new();
            for e in entries {
                let path = dir.join(OsStr::from_bytes(&e.name));
                if e.link_group != 0 {
                    lock(&ctx.linked).push((path, e));
                } else if let EntryKind::Dir(t) = e.kind {
                    if let Err(err) = create_dir(&path) {
                        return ctx.fail(err);
                    }
                    lock(&ctx.dirs).push((path.clone(), e, depth + 1));
                    lock(&ctx.report).dirs += 1;
                    let path = Arc::new(path);
                    s.spawn(move |s| export_dir(ctx, s, t, path, Some(me), depth + 1));
                } else {
                    files.push((path, e));
                    if files.len() == ENTRIES_PER_TASK {
                        let batch = std::mem::take(&mut files);
                        s.spawn(move |_| write_entries(ctx, batch));
                    }
                }
            }
            write_entries(ctx, files);
        }
        Err(e) => ctx.fail(e),
    }
}

/// Check and list `tree`; returns its index in `tree_chain` and its entries.
fn list_dir(
    ctx: &Ctx<'_>,
    tree: ObjectId,
    parent: Option<usize>,
) -> Result<(usize, Vec<TreeEntry>)> {
    let me = {
        let mut chain = lock(&ctx.tree_chain);
        let mut up = parent;
        while let Some(i) = up {
            if chain[i].0 == tree {
                return Err(StoreError::Corrupt {
                    id: tree,
                    reason: "a directory tree contains itself".into(),
                });
            }
            up = chain[i].1;
        }
        chain.push((tree, parent));
        chain.len() - 1
    };
    let entries = ctx.store.list_tree(tree)?;
    // A stored tree may hold what `write_tree` refuses (written by another
    // build, or by hand): every name must be one path component and unique,
    // or joining it onto `dir` could reach outside the target (`..`, '/'),
    // or one entry could be a symlink that another entry of the same name
    // is then written through.
    let mut names: Vec<&[u8]> = Vec::with_capacity(entries.len());
    for e in &entries {
        if let Some(why) = crate::trees::bad_name(&e.name) {
            return Err(StoreError::Corrupt {
                id: tree,
                reason: format!("{why} ({:?})", String::from_utf8_lossy(&e.name)),
            });
        }
        names.push(&e.name);
    }
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(StoreError::Corrupt {
            id: tree,
            reason: format!("duplicate name {:?}", String::from_utf8_lossy(w[0])),
        });
    }
    Ok((me, entries))
}

/// Make the directory `path`. A real directory left by an earlier export
/// (--force) is reused. Anything else in the way is replaced, never
/// followed: a symlink there (from a commit where this name was a link)
/// would take the entries outside the target.
fn create_dir(path: &Path) -> Result<()> {
    match std::fs::create_dir(path) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            let md = std::fs::symlink_metadata(path)
                .map_err(|err| StoreError::io("inspect", path, err))?;
            if !md.is_dir() {
                std::fs::remove_file(path).map_err(|err| StoreError::io("replace", path, err))?;
                std::fs::create_dir(path).map_err(|err| StoreError::io("create", path, err))?;
            }
            Ok(())
        }
        Err(err) => Err(StoreError::io("create", path, err)),
    }
}

fn write_entries(ctx: &Ctx<'_>, entries: Vec<(PathBuf, TreeEntry)>) {
    for (path, e) in entries {
        if ctx.failed.load(Ordering::Relaxed) {
            return;
        }
        if let Err(err) = write_entry(ctx, &path, &e) {
            return ctx.fail(err);
        }
    }
}

fn write_entry(ctx: &Ctx<'_>, path: &Path, e: &TreeEntry) -> Result<()> {
    // With --force an older file may be in the way; replace it.
    if let Ok(md) = std::fs::symlink_metadata(path) {
        if !md.is_dir() {
            std::fs::remove_file(path).map_err(|err| StoreError::io("replace", path, err))?;
        }
    }
    match &e.kind {
        EntryKind::File(c) => {
            ctx.store.materialize(c, path)?;
            let mut r = ctx.report.lock().unwrap_or_else(|p| p.into_inner());
            r.files += 1;
            r.bytes += c.size;
        }
        EntryKind::Symlink(t) => {
            std::os::unix::fs::symlink(OsStr::from_bytes(t), path)
                .map_err(|err| StoreError::io("create the symlink", path, err))?;
        }
        EntryKind::Fifo | EntryKind::Socket => {
            let ft = if matches!(e.kind, EntryKind::Fifo) {
                rustix::fs::FileType::Fifo
            } else {
                rustix::fs::FileType::Socket
            };
            rustix::fs::mknodat(
                rustix::fs::CWD,
                path,
                ft,
                rustix::fs::Mode::from_raw_mode(e.mode & 0o777),
                0,
            )
            .map_err(|err| StoreError::io("create the special file", path, err.into()))?;
        }
        EntryKind::Dir(_) => {
            return Err(StoreError::Invalid(format!(
                "{} is a directory entry passed as a file (an internal error)",
                path.display()
            )))
        }
    }
    ctx.progress.advance(1);
    apply_meta(ctx, path, e)
}

/// Owners first (chown clears setuid/setgid and `security.capability`),
/// then xattrs, mode, and times last. Without `preserve_privileges`, the
/// setuid/setgid bits and the xattrs outside `user.` are left out.
fn apply_meta(ctx: &Ctx<'_>, path: &Path, e: &TreeEntry) -> Result<()> {
    let is_link = matches!(e.kind, EntryKind::Symlink(_));
    let mut mode = e.mode & 0o7777;
    let mut xattrs: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    if !is_link {
        let privileged =
            mode & PRIVILEGE_BITS != 0 || e.xattrs.iter().any(|(k, _)| !unprivileged_xattr(k));
        if privileged {
            let mut r = lock(&ctx.report);
            if ctx.preserve_privileges {
                r.restored_privileges += 1;
            } else {
                r.dropped_privileges += 1;
                mode &= !PRIVILEGE_BITS;
            }
        }
        xattrs = if ctx.preserve_privileges {
            e.xattrs.clone()
        } else {
            e.xattrs
                .iter()
                .filter(|(k, _)| unprivileged_xattr(k))
                .cloned()
                .collect()
        };
    }
    if ctx.as_root {
        rustix::fs::chownat(
            rustix::fs::CWD,
            path,
            Some(rustix::process::Uid::from_raw(e.uid)),
            Some(rustix::process::Gid::from_raw(e.gid)),
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(|err| StoreError::io("chown", path, err.into()))?;
    }
    if !is_link {
        set_xattrs(path, &xattrs)?;
        rustix::fs::chmod(path, rustix::fs::Mode::from_raw_mode(mode))
            .map_err(|err| StoreError::io("chmod", path, err.into()))?;
    }
    set_mtime(path, e.mtime_ns)
}
