//! The file tools, each one command inside the Sandbox as the command uid
//! (`cat`, `sh -c 'cat > FILE'`, `ls`, `find`, `grep`), so the Sandbox's
//! confinement and the Workspace's permissions apply to them exactly as to
//! `run`: a tool reads and writes what the agent's own commands could.
//! Paths are relative to the Workspace root (the commands' cwd); an
//! absolute path is a path inside the Sandbox.

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::json;
use strata_sdk::{Output, Workspace};

use crate::error::{ToolError, ToolResult};
use crate::glob;
use crate::params;
use crate::run::exec;

/// Largest text `read_file` returns without `offset`/`limit`.
const READ_LIMIT: usize = 256 * 1024;
/// Largest file `edit_file` edits.
const EDIT_LIMIT: usize = 8 << 20;
/// Most entries `list_files` and `glob` return.
const LIST_LIMIT: usize = 2000;
/// Longest line `grep` returns (longer ones are cut).
const GREP_LINE: usize = 500;

/// Writes stdin to "$1", creating missing parent directories.
const WRITE_SCRIPT: &str = r#"case "$1" in */*) mkdir -p -- "${1%/*}" || exit ;; esac; cat > "$1""#;

fn check_path(p: &str) -> Result<&str, ToolError> {
    if p.is_empty() {
        return Err(ToolError::new(
            "path is empty: give a path relative to the Workspace root",
        ));
    }
    if p.contains('\0') {
        return Err(ToolError::new(format!("path {p:?} contains a NUL byte")));
    }
    Ok(p)
}

fn text(s: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(s.into())])
}

fn failed(what: &str, out: &Output) -> ToolError {
    let err = out.stderr_str();
    let err = err.trim();
    ToolError::new(if err.is_empty() {
        format!("{what} failed ({})", describe(out))
    } else {
        format!("{what} failed: {err}")
    })
}

fn describe(out: &Output) -> String {
    match out.status.code {
        Some(c) => format!("exit code {c}"),
        None => format!(
            "killed by {}",
            out.status.signal_name.as_deref().unwrap_or("a signal")
        ),
    }
}

/// The content of `path` as text, if it is at most `max` bytes: the
/// command reads at most `max + 1` (`head -c`), so a huge file never
/// reaches this process whole. `Ok(None)` when it is larger.
async fn read_text(ws: &Workspace, path: &str, max: usize) -> Result<Option<String>, ToolError> {
    let n = (max + 1).to_string();
    // `head` opens a missing file or a directory with an error, like cat.
    let out = exec(ws, &["head", "-c", &n, "--", path], None).await?;
    if !out.status.success() {
        return Err(failed(&format!("reading {path:?}"), &out));
    }
    if out.stdout.len() > max {
        return Ok(None);
    }
    utf8(path, out.stdout).map(Some)
}

fn utf8(path: &str, bytes: Vec<u8>) -> Result<String, ToolError> {
    let n = bytes.len();
    String::from_utf8(bytes).map_err(|_| {
        ToolError::new(format!(
            "{path:?} is not UTF-8 text (at least {n} bytes): use `run` with e.g. `od -c` or `file` to look at binary files"
        ))
    })
}

async fn write_bytes(ws: &Workspace, path: &str, data: &[u8]) -> Result<(), ToolError> {
    let out = exec(ws, &["sh", "-c", WRITE_SCRIPT, "sh", path], Some(data)).await?;
    if !out.status.success() {
        return Err(failed(&format!("writing {path:?}"), &out));
    }
    Ok(())
}

pub(crate) async fn read_file(ws: &Workspace, p: params::ReadFile) -> ToolResult {
    let path = check_path(&p.path)?;
    if p.offset.is_none() && p.limit.is_none() {
        return match read_text(ws, path, READ_LIMIT).await? {
            Some(content) => Ok(text(content)),
            None => {
                // Too large to return whole: its first READ_LIMIT bytes,
                // cut at a line end, and how to read on.
                let part = read_lines(ws, path, 1, None, READ_LIMIT).await?;
                let shown = part.1.lines().count();
                Ok(text(format!(
                    "{}\n[... {path} is larger than {READ_LIMIT} bytes ({} lines in all); shown: lines 1-{shown}. Read on with offset={} and limit ...]",
                    part.1,
                    part.0,
                    shown + 1
                )))
            }
        };
    }
    let offset = p.offset.unwrap_or(1);
    if offset == 0 {
        return Err(ToolError::new(
            "offset is 1-based: give 1 for the first line",
        ));
    }
    let (total, lines) = read_lines(ws, path, offset, p.limit, READ_LIMIT).await?;
    if lines.is_empty() && total > 0 && offset > total {
        return Err(ToolError::new(format!(
            "offset {offset} is past the end of {path:?} ({total} lines)"
        )));
    }
    Ok(text(lines))
}

/// (line count of the file, lines `offset..offset+limit` cut to at most
/// `max` bytes at a line end), with `wc -l` and `sed -n` in the Sandbox.
async fn read_lines(
    ws: &Workspace,
    path: &str,
    offset: usize,
    limit: Option<usize>,
    max: usize,
) -> Result<(usize, String), ToolError> {
    const SCRIPT: &str =
        r#"n=$(wc -l < "$1") || exit; echo "$n"; sed -n "$2,$3p" -- "$1" | head -c "$4""#;
    let last = match limit {
        Some(0) => {
            return Err(ToolError::new(
                "limit is 0: give the number of lines to read",
            ))
        }
        Some(l) => offset.saturating_add(l - 1).to_string(),
        None => "$".to_string(),
    };
    let (first, cap) = (offset.to_string(), (max + 1).to_string());
    let out = exec(
        ws,
        &["sh", "-c", SCRIPT, "sh", path, &first, &last, &cap],
        None,
    )
    .await?;
    if !out.status.success() {
        return Err(failed(&format!("reading {path:?}"), &out));
    }
    let nl = out
        .stdout
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(out.stdout.len());
    let total = String::from_utf8_lossy(&out.stdout[..nl])
        .trim()
        .parse()
        .unwrap_or(0);
    let mut body = out.stdout.get(nl + 1..).unwrap_or_default().to_vec();
    if body.len() > max {
        // Cut at the last whole line that fits.
        body.truncate(max);
        let end = body.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        body.truncate(end);
    }
    Ok((total, utf8(path, body)?))
}

pub(crate) async fn write_file(ws: &Workspace, p: params::WriteFile) -> ToolResult {
    let path = check_path(&p.path)?;
    write_bytes(ws, path, p.content.as_bytes()).await?;
    Ok(text(format!("wrote {} bytes to {path}", p.content.len())))
}

pub(crate) async fn edit_file(ws: &Workspace, p: params::EditFile) -> ToolResult {
    let path = check_path(&p.path)?;
    if p.old_string.is_empty() {
        return Err(ToolError::new(
            "old_string is empty: give the exact text to replace (use write_file to create a file)",
        ));
    }
    if p.old_string == p.new_string {
        return Err(ToolError::new(
            "old_string and new_string are the same: nothing to change",
        ));
    }
    let content = read_text(ws, path, EDIT_LIMIT).await?.ok_or_else(|| {
        ToolError::new(format!(
            "{path} is larger than {EDIT_LIMIT} bytes, too large to edit here: use `run` with sed or a script"
        ))
    })?;
    let n = content.matches(&p.old_string).count();
    if n == 0 {
        return Err(ToolError::new(format!(
            "old_string was not found in {path}: read_file it and copy the text exactly, whitespace and indentation included"
        )));
    }
    if n > 1 && !p.replace_all {
        return Err(ToolError::new(format!(
            "old_string occurs {n} times in {path}: include more surrounding lines to make it unique, or set replace_all"
        )));
    }
    let new = if p.replace_all {
        content.replace(&p.old_string, &p.new_string)
    } else {
        content.replacen(&p.old_string, &p.new_string, 1)
    };
    write_bytes(ws, path, new.as_bytes()).await?;
    Ok(text(format!(
        "replaced {n} occurrence{} in {path}",
        if n == 1 { "" } else { "s" }
    )))
}

/// Every path below `dir` (relative to it, directories with a trailing
/// `/`), through `find`, which busybox has too.
async fn walk(ws: &Workspace, dir: &str, dirs: bool) -> Result<Vec<String>, ToolError> {
    let script = if dirs {
        r#"cd -- "$1" && find . -mindepth 1 -type d -exec printf '%s/\n' {} + && find . -mindepth 1 ! -type d"#
    } else {
        r#"cd -- "$1" && find . -mindepth 1 ! -type d"#
    };
    let out = exec(ws, &["sh", "-c", script, "sh", dir], None).await?;
    if !out.status.success() {
        return Err(failed(&format!("listing {dir:?}"), &out));
    }
    let mut v: Vec<String> = out
        .stdout_str()
        .lines()
        .map(|l| l.strip_prefix("./").unwrap_or(l).to_string())
        .collect();
    v.sort();
    Ok(v)
}

fn capped(mut v: Vec<String>, what: &str) -> CallToolResult {
    let total = v.len();
    let mut notice = String::new();
    if total > LIST_LIMIT {
        v.truncate(LIST_LIMIT);
        notice = format!(
            "\n[... {} more {what} not shown; narrow the path or pattern ...]",
            total - LIST_LIMIT
        );
    }
    let mut r = text(format!("{}{notice}", v.join("\n")));
    r.structured_content = Some(json!({ what: v, "total": total }));
    r
}

pub(crate) async fn list_files(ws: &Workspace, p: params::ListFiles) -> ToolResult {
    let dir = check_path(p.path.as_deref().unwrap_or("."))?;
    if p.recursive {
        return Ok(capped(walk(ws, dir, true).await?, "entries"));
    }
    let out = exec(ws, &["ls", "-1Ap", "--", dir], None).await?;
    if !out.status.success() {
        return Err(failed(&format!("listing {dir:?}"), &out));
    }
    let mut v: Vec<String> = out.stdout_str().lines().map(str::to_string).collect();
    v.sort();
    Ok(capped(v, "entries"))
}

pub(crate) async fn glob(ws: &Workspace, p: params::Glob) -> ToolResult {
    let re = glob::compile(&p.pattern)?;
    let dir = check_path(p.path.as_deref().unwrap_or("."))?;
    let v = walk(ws, dir, false).await?;
    let hits: Vec<String> = v.into_iter().filter(|f| re.is_match(f)).collect();
    Ok(capped(hits, "files"))
}

pub(crate) async fn grep(ws: &Workspace, p: params::Grep) -> ToolResult {
    let dir = check_path(p.path.as_deref().unwrap_or("."))?;
    let max = p.max_results.unwrap_or(200).max(1);
    let mut argv = vec!["grep", "-rnIE"];
    if p.ignore_case {
        argv.push("-i");
    }
    let include = p.include.map(|g| format!("--include={g}"));
    if let Some(i) = &include {
        argv.push(i);
    }
    argv.extend(["--", &p.pattern, dir]);
    // At most max + 1 lines reach this process (`head`); grep's own
    // status comes back on stderr's last line (141, SIGPIPE, when head
    // stopped reading: there were more matches).
    let script = format!(
        r#"{{ "$@"; echo "grep-status:$?" >&2; }} | head -n {}"#,
        max + 1
    );
    let mut full = vec!["sh", "-c", script.as_str(), "sh"];
    full.extend(argv.iter().copied());
    let out = exec(ws, &full, None).await?;
    let err = out.stderr_str();
    let status = err
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("grep-status:"))
        .and_then(|c| c.trim().parse::<i32>().ok());
    // 141: killed by SIGPIPE; 2 with EPIPE if the command ignores SIGPIPE.
    let cut_short = status == Some(141) || (status == Some(2) && err.contains("Broken pipe"));
    match status {
        _ if cut_short => {}
        Some(0) => {}
        Some(1) => return Ok(text(format!("no matches for {:?} in {dir}", p.pattern))),
        _ => {
            let msg: Vec<&str> = err
                .lines()
                .filter(|l| !l.starts_with("grep-status:"))
                .collect();
            return Err(ToolError::new(format!(
                "grep {:?} failed: {}",
                p.pattern,
                msg.join("\n")
            )));
        }
    }
    let all = out.stdout_str();
    let mut lines: Vec<String> = Vec::new();
    let mut total = 0;
    for l in all.lines() {
        total += 1;
        if lines.len() < max {
            let l = l.strip_prefix("./").unwrap_or(l);
            let mut cut = l.len().min(GREP_LINE);
            while !l.is_char_boundary(cut) {
                cut -= 1;
            }
            lines.push(if cut < l.len() {
                format!("{}…", &l[..cut])
            } else {
                l.to_string()
            });
        }
    }
    let mut s = lines.join("\n");
    if total > max {
        s.push_str(&format!(
            "\n[... more than {max} matching lines; the rest are not shown: narrow the pattern, path or include, or raise max_results ...]"
        ));
    }
    Ok(text(s))
}

/// Make the files of a freshly mounted Workspace (at its branch head
/// `head`) those of `target`, as uncommitted changes: every path the
/// Store's diff names is written from `target`'s content, created as a
/// directory, or removed. Returns (written, removed, not restored).
pub(crate) async fn apply_tree(
    ws: &Workspace,
    backend: &crate::backend::Backend,
    head: &str,
    target: &str,
) -> Result<(usize, usize, Vec<String>), ToolError> {
    let changes = backend.diff(head, target).await?;
    let (mut written, mut removed, mut skipped) = (0, Vec::new(), Vec::new());
    let mut dirs: Vec<String> = Vec::new();
    for (path, kind) in changes {
        let Ok(path) = String::from_utf8(path) else {
            skipped.push("(a path that is not UTF-8)".to_string());
            continue;
        };
        if kind == "deleted" {
            removed.push(path);
            continue;
        }
        match backend.read_file(target, &path).await {
            Ok(bytes) => {
                if kind == "type_changed" {
                    rm(ws, std::slice::from_ref(&path)).await?;
                }
                write_bytes(ws, &path, &bytes).await?;
                written += 1;
            }
            // A directory: created (its files follow in the diff when it
            // is new); a modified directory (mode, owner) is left as is.
            Err(strata_sdk::Error::InvalidInput { ref what, .. })
                if what.ends_with("is a dir, not a file") =>
            {
                if kind == "type_changed" {
                    skipped.push(format!(
                        "{path} (became a directory; its files are not restored)"
                    ));
                } else if kind == "added" {
                    dirs.push(path);
                }
            }
            Err(strata_sdk::Error::InvalidInput { .. }) => {
                skipped.push(format!("{path} (a symlink or special file)"));
            }
            Err(e) => return Err(e.into()),
        }
    }
    if !dirs.is_empty() {
        let mut argv = vec!["mkdir", "-p", "--"];
        argv.extend(dirs.iter().map(String::as_str));
        let out = exec(ws, &argv, None).await?;
        if !out.status.success() {
            return Err(failed("creating directories", &out));
        }
    }
    let n_removed = removed.len();
    if !removed.is_empty() {
        rm(ws, &removed).await?;
    }
    Ok((written, n_removed, skipped))
}

async fn rm(ws: &Workspace, paths: &[String]) -> Result<(), ToolError> {
    let mut argv = vec!["rm", "-rf", "--"];
    argv.extend(paths.iter().map(String::as_str));
    let out = exec(ws, &argv, None).await?;
    if !out.status.success() {
        return Err(failed("removing files", &out));
    }
    Ok(())
}
