//! Reading a commit without a Workspace: ls, cat and export.

use crate::ctx::Ctx;
use crate::output::{entry_json, entry_line, lossy, print_json};
use crate::progress::Bar;
use anyhow::{anyhow, Result};
use serde_json::json;
use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use strata_store::{EntryKind, ExportOptions, ObjectId, Store, TreeEntry};

/// The entry at `path` in the commit `reference` names, or a clear error.
fn entry_at(store: &Store, reference: &str, path: &[u8]) -> Result<(ObjectId, TreeEntry)> {
    let commit = store.resolve(reference)?.commit;
    match store.read_path(commit, path)? {
        Some(e) => Ok((commit, e)),
        None => Err(anyhow!(
            "no such path {:?} in {reference} (commit {}). List what is there with `strata ls {reference}`",
            lossy(path),
            commit.short()
        )),
    }
}

pub fn ls(ctx: &Ctx, reference: &str, path: Option<&OsStr>) -> Result<()> {
    let store = ctx.open()?;
    let path = path.map(|p| p.as_bytes()).unwrap_or(b"");
    let (_, entry) = entry_at(&store, reference, path)?;
    let entries = match entry.kind {
        EntryKind::Dir(t) => store.list_tree(t)?,
        _ => vec![entry],
    };
    ctx.emit(
        json!(entries.iter().map(entry_json).collect::<Vec<_>>()),
        || entries.iter().map(|e| entry_line(e) + "\n").collect(),
    )
}

pub fn cat(ctx: &Ctx, reference: &str, path: &OsStr) -> Result<()> {
    let store = ctx.open()?;
    let p = path.as_bytes();
    let (_, entry) = entry_at(&store, reference, p)?;
    let content = match &entry.kind {
        EntryKind::File(c) => c.clone(),
        EntryKind::Dir(_) => {
            return Err(anyhow!(
                "{:?} in {reference} is a directory; list it with `strata ls {reference} {}`",
                lossy(p),
                lossy(p)
            ))
        }
        EntryKind::Symlink(t) => {
            return Err(anyhow!(
                "{:?} in {reference} is a symlink to {:?}; strata never follows symlinks, cat the target instead",
                lossy(p),
                lossy(t)
            ))
        }
        other => {
            return Err(anyhow!(
                "{:?} in {reference} is a {}, which has no content",
                lossy(p),
                other.type_name()
            ))
        }
    };
    if ctx.json {
        let mut bytes = Vec::new();
        store.read_to(&content, &mut bytes)?;
        let (encoding, text) = match String::from_utf8(bytes) {
            Ok(s) => ("utf8", s),
            Err(e) => ("hex", crate::output::hex(e.as_bytes())),
        };
        return print_json(&json!({
            "path": lossy(p),
            "size": content.size,
            "encoding": encoding,
            "content": text,
        }));
    }
    // Stream chunk by chunk: memory stays at one chunk whatever the file
    // size, and the manifest is walked as it is read (bounded by the
    // file's declared size, see `Store::read_to`).
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    store.read_to(&content, &mut out)?;
    out.flush()?;
    Ok(())
}

pub fn export(ctx: &Ctx, reference: &str, dir: &Path, opts: &ExportOptions) -> Result<()> {
    let store = ctx.open()?;
    let commit = store.resolve(reference)?.commit;
    let bar = Bar::stderr();
    let r = store.export_with(commit, dir, opts, &bar)?;
    drop(bar);
    // On stderr in both modes, so a --json reader sees it in the field and
    // a person sees it whatever stdout goes to.
    if r.dropped_privileges > 0 {
        eprintln!(
            "strata: warning: dropped setuid/setgid bits or xattrs outside user. from {} entries of {commit}; pass --preserve-privileges to restore them exactly",
            r.dropped_privileges
        );
    }
    if r.restored_privileges > 0 {
        eprintln!(
            "strata: restored setuid/setgid bits or xattrs outside user. on {} entries (--preserve-privileges)",
            r.restored_privileges
        );
    }
    ctx.emit(
        json!({
            "commit": commit.to_hex(),
            "dir": dir.display().to_string(),
            "files": r.files,
            "dirs": r.dirs,
            "bytes": r.bytes,
            "dropped_privileges": r.dropped_privileges,
            "restored_privileges": r.restored_privileges,
        }),
        || {
            format!(
                "Exported {commit} to {}: {} files, {} directories, {}",
                dir.display(),
                r.files,
                r.dirs,
                crate::output::human_bytes(r.bytes)
            )
        },
    )
}
