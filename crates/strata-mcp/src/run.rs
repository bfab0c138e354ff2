//! The `run` tool and the one helper every file tool runs its command
//! through. Output of `run` is streamed to the client as progress
//! notifications when the request carries a progress token, and kept for
//! the result as its first and last [`KEEP_HALF`] bytes per stream, with a
//! notice saying how much was left out.

use std::time::Duration;

use rmcp::model::{CallToolResult, ContentBlock, ProgressNotificationParam};
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use serde_json::json;
use strata_sdk::{ExitStatus, Output, Workspace};

use crate::error::{ToolError, ToolResult};
use crate::params;

/// Bytes kept from the start and from the end of each output stream.
pub(crate) const KEEP_HALF: usize = 16 * 1024;
/// Default and largest `timeout_secs`.
const DEFAULT_TIMEOUT: u64 = 600;
const MAX_TIMEOUT: u64 = 24 * 3600;

/// The first and last [`KEEP_HALF`] bytes of a stream, and its length.
#[derive(Default)]
pub(crate) struct HeadTail {
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    total: usize,
}

impl HeadTail {
    pub fn push(&mut self, mut data: &[u8]) {
        self.total += data.len();
        let room = KEEP_HALF - self.head.len();
        let n = room.min(data.len());
        self.head.extend_from_slice(&data[..n]);
        data = &data[n..];
        self.tail.extend(data);
        while self.tail.len() > KEEP_HALF {
            self.tail.pop_front();
        }
    }

    /// The kept text, with a notice in the middle if bytes were left out.
    pub fn render(&self, stream: &str) -> String {
        let omitted = self.total - self.head.len() - self.tail.len();
        let mut s = String::from_utf8_lossy(&self.head).into_owned();
        if omitted > 0 {
            s.push_str(&format!(
                "\n[... {omitted} bytes of {stream} not shown ({} in all); redirect the output to a file and use read_file or grep on it ...]\n",
                self.total
            ));
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        s.push_str(&String::from_utf8_lossy(&tail));
        s
    }

    pub fn omitted(&self) -> usize {
        self.total - self.head.len() - self.tail.len()
    }
}

/// An absolute working directory inside the Workspace for `cwd`.
pub(crate) fn workdir(ws: &Workspace, cwd: Option<&str>) -> Result<String, ToolError> {
    let root = ws.path().trim_end_matches('/');
    match cwd {
        None | Some("") | Some(".") => Ok(root.to_string()),
        Some(c) if c.contains('\0') => Err(ToolError::new("cwd contains a NUL byte")),
        Some(c) if c.starts_with('/') => {
            if c == root || c.starts_with(&format!("{root}/")) {
                Ok(c.to_string())
            } else {
                Err(ToolError::new(format!(
                    "cwd {c:?} is outside the Workspace (mounted at {root}): give a path relative to its root"
                )))
            }
        }
        Some(c) => Ok(format!("{root}/{c}")),
    }
}

/// Run `argv` in the Workspace root to its end (a file tool's command).
pub(crate) async fn exec(
    ws: &Workspace,
    argv: &[&str],
    stdin: Option<&[u8]>,
) -> Result<Output, ToolError> {
    let mut b = ws.exec(argv.iter().copied()).cwd(ws.path());
    if let Some(data) = stdin {
        b = b.stdin_bytes(data);
    }
    Ok(b.output().await?)
}

fn describe(st: &ExitStatus, timeout: u64) -> String {
    if st.timed_out {
        format!(
            "timed out after {timeout} s (stopped with {})",
            st.signal_name.as_deref().unwrap_or("a signal")
        )
    } else if st.cancelled {
        "cancelled".to_string()
    } else if let Some(code) = st.code {
        format!("exit code {code}")
    } else {
        format!(
            "killed by {}",
            st.signal_name.as_deref().unwrap_or("a signal")
        )
    }
}

pub(crate) async fn run(
    ws: &Workspace,
    p: params::Run,
    ctx: &RequestContext<RoleServer>,
) -> ToolResult {
    let argv: Vec<String> = match (p.command, p.argv) {
        (Some(c), None) => vec!["sh".into(), "-c".into(), c],
        (None, Some(a)) if !a.is_empty() => a,
        (None, Some(_)) => {
            return Err(ToolError::new(
                "argv is empty: give the program and its arguments",
            ))
        }
        (None, None) => {
            return Err(ToolError::new(
                "give `command` (a shell command line) or `argv`",
            ))
        }
        (Some(_), Some(_)) => {
            return Err(ToolError::new("give either `command` or `argv`, not both"))
        }
    };
    let timeout = p.timeout_secs.unwrap_or(DEFAULT_TIMEOUT);
    if timeout == 0 || timeout > MAX_TIMEOUT {
        return Err(ToolError::new(format!(
            "timeout_secs {timeout} is out of range: give 1 to {MAX_TIMEOUT}"
        )));
    }
    let mut b = ws
        .exec(argv)
        .cwd(workdir(ws, p.cwd.as_deref())?)
        .timeout(Duration::from_secs(timeout));
    for (k, v) in p.env {
        b = b.env(k, v);
    }
    if let Some(s) = p.stdin {
        b = b.stdin_bytes(s.into_bytes());
    }
    let mut h = b.spawn().await?;
    let (mut out, mut err) = (h.stdout.take(), h.stderr.take());
    let (mut o, mut e) = (HeadTail::default(), HeadTail::default());
    let token = ctx.meta.get_progress_token();
    let mut sent = 0u64;
    let mut cancelled = false;
    while out.is_some() || err.is_some() {
        let (chunk, is_err) = tokio::select! {
            c = async { out.as_mut().expect("checked").next().await }, if out.is_some() => (c, false),
            c = async { err.as_mut().expect("checked").next().await }, if err.is_some() => (c, true),
            _ = ctx.ct.cancelled(), if !cancelled => {
                // The client gave up on the request: stop the command too.
                cancelled = true;
                h.handle_clone().cancel().await?;
                continue;
            }
        };
        let Some(chunk) = chunk else {
            if is_err {
                err = None
            } else {
                out = None
            }
            continue;
        };
        if is_err {
            e.push(&chunk)
        } else {
            o.push(&chunk)
        }
        if let Some(t) = &token {
            sent += chunk.len() as u64;
            let text = String::from_utf8_lossy(&chunk);
            let msg = if is_err {
                format!("[stderr] {text}")
            } else {
                text.into_owned()
            };
            // A client that went away only misses a notification; the
            // result still carries the output.
            let _ = ctx
                .peer
                .notify_progress(
                    ProgressNotificationParam::new(t.clone(), sent as f64).with_message(msg),
                )
                .await;
        }
    }
    let st = h.wait().await?;
    let how = describe(&st, timeout);
    let (stdout, stderr) = (o.render("stdout"), e.render("stderr"));
    let text = format!("{how}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}");
    let structured = json!({
        "exit_code": st.code,
        "signal": st.signal_name,
        "timed_out": st.timed_out,
        "stdout": stdout,
        "stderr": stderr,
        "stdout_bytes": o.total,
        "stderr_bytes": e.total,
        "stdout_omitted_bytes": o.omitted(),
        "stderr_omitted_bytes": e.omitted(),
    });
    let mut r = if st.success() {
        CallToolResult::success(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::error(vec![ContentBlock::text(text)])
    };
    r.structured_content = Some(structured);
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::{HeadTail, KEEP_HALF};

    #[test]
    fn head_tail_keeps_both_ends_and_says_what_it_left_out() {
        let mut h = HeadTail::default();
        h.push(b"start\n");
        h.push(&vec![b'x'; 3 * KEEP_HALF]);
        h.push(b"\nend\n");
        let s = h.render("stdout");
        assert!(s.starts_with("start\n"));
        assert!(s.ends_with("\nend\n"));
        assert_eq!(h.omitted(), 6 + 3 * KEEP_HALF + 5 - 2 * KEEP_HALF);
        assert!(s.contains(&format!("[... {} bytes of stdout not shown", h.omitted())));
        let mut small = HeadTail::default();
        small.push(b"hi\n");
        assert_eq!(small.render("stdout"), "hi\n");
    }
}
