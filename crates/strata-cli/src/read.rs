//! Reading a commit without a Workspace: ls, cat (through the SDK client,
//! so also with `--remote`) and export.

use crate::ctx::{sdk, Ctx};
use crate::output::{entry_json, entry_line, lossy, print_json};
use crate::progress::Bar;
use anyhow::{anyhow, Result};
use serde_json::json;
use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use strata_store::ExportOptions;

fn no_such_path(reference: &str, path: &[u8]) -> anyhow::Error {
    anyhow!(
        "no such path {:?} in {reference}. List what is there with `strata ls {reference}`",
        lossy(path)
    )
}

pub fn ls(ctx: &Ctx, reference: &str, path: Option<&OsStr>) -> Result<()> {
    let path = path.map(|p| p.as_bytes()).unwrap_or(b"");
    let entries = sdk(ctx, |c| async move { c.ls(reference, path).await })?
        .ok_or_else(|| no_such_path(reference, path))?;
    ctx.emit(
        json!(entries.iter().map(entry_json).collect::<Vec<_>>()),
        || entries.iter().map(|e| entry_line(e) + "\n").collect(),
    )
}

pub fn cat(ctx: &Ctx, reference: &str, path: &OsStr) -> Result<()> {
    let p = path.as_bytes();
    let rt = crate::ctx::runtime()?;
    let client = rt.block_on(ctx.client())?;
    let entry = rt
        .block_on(client.stat(reference, p))?
        .ok_or_else(|| no_such_path(reference, p))?;
    match entry.kind.as_str() {
        "file" => {}
        "dir" => {
            return Err(anyhow!(
                "{:?} in {reference} is a directory; list it with `strata ls {reference} {}`",
                lossy(p),
                lossy(p)
            ))
        }
        "symlink" => {
            return Err(anyhow!(
                "{:?} in {reference} is a symlink to {:?}; strata never follows symlinks, cat the target instead",
                lossy(p),
                lossy(entry.target.as_deref().unwrap_or_default())
            ))
        }
        other => {
            return Err(anyhow!(
                "{:?} in {reference} is a {other}, which has no content",
                lossy(p),
            ))
        }
    };
    if ctx.json {
        let bytes = rt.block_on(client.read_file(reference, p))?;
        let (encoding, text) = match String::from_utf8(bytes) {
            Ok(s) => ("utf8", s),
            Err(e) => ("hex", crate::output::hex(e.as_bytes())),
        };
        return print_json(&json!({
            "path": lossy(p),
            "size": entry.size,
            "encoding": encoding,
            "content": text,
        }));
    }
    // Stream piece by piece: memory stays at one chunk whatever the file
    // size (the Store walks the manifest as it reads, bounded by the
    // file's declared size; the server streams its body).
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    rt.block_on(client.read_file_to(reference, p, &mut out))?;
    out.flush()?;
    Ok(())
}

pub fn export(ctx: &Ctx, reference: &str, dir: &Path, opts: &ExportOptions) -> Result<()> {
    let (commit, r) = if ctx.remote.is_some() {
        // Refused before anything is fetched; then the server's tar.
        crate::remote_tar::check_target(dir, opts.force)?;
        let (commit, tar) = sdk(ctx, |c| async move {
            let commit = c.resolve(reference).await?;
            Ok((commit.clone(), c.export_tar(&commit).await?))
        })?;
        let u = crate::remote_tar::unpack(&tar, dir, opts.preserve_privileges)?;
        let r = strata_store::ExportReport {
            files: u.files,
            dirs: u.dirs,
            bytes: u.bytes,
            dropped_privileges: u.dropped_privileges,
            restored_privileges: u.restored_privileges,
        };
        (commit, r)
    } else {
        let store = ctx.open()?;
        let commit = store.resolve(reference)?.commit;
        let bar = Bar::stderr();
        let r = store.export_with(commit, dir, opts, &bar)?;
        drop(bar);
        (commit.to_hex(), r)
    };
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
            "commit": commit,
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
