//! The daemon's startup marker (B5) and the wait for it, the same for
//! every backend: the daemon prints one line on stdout,
//! `STRATA-DAEMON-READY socket=<path> pid=<pid>`, once it listens; only
//! where that stdout lives differs (a file for the native backend, the
//! container log for docker), so a backend hands [`wait_marker`] a probe
//! that reads it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// First word of the daemon's one-line startup marker on stdout:
/// `STRATA-DAEMON-READY socket=<path> pid=<pid>` (B5).
pub const DAEMON_MARKER: &str = "STRATA-DAEMON-READY";

/// The most a daemon may write to stdout before its marker line.
pub const MAX_BEFORE_MARKER: usize = 4096;

/// Why the daemon did not become ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotReady {
    /// No marker within the timeout; the daemon may still be running.
    Timeout,
    /// It can never become ready; the message says why.
    Failed(String),
}

/// One look at a starting daemon, as a backend's probe sees it.
pub struct Look {
    /// Everything the daemon wrote to stdout so far (this run's only).
    pub stdout: Vec<u8>,
    /// How the Sandbox ended, if it has, e.g. "the Sandbox ended (monitor:
    /// exit status: 1)". Sampled *before* `stdout` is read, so that a
    /// daemon that printed its marker and exited at once never passes as
    /// ready.
    pub ended: Option<String>,
}

/// Is `line` a marker line (the marker word, a space, fields)?
pub fn is_marker(line: &str) -> bool {
    line.strip_prefix(DAEMON_MARKER)
        .is_some_and(|r| r.starts_with(' '))
}

/// The `socket=` field of a marker line.
pub fn marker_socket(marker: &str) -> Option<PathBuf> {
    marker
        .split_whitespace()
        .find_map(|f| f.strip_prefix("socket="))
        .map(PathBuf::from)
}

/// Call `look` every `poll` until the daemon's first stdout line is there,
/// the Sandbox ends or `timeout` passes; the marker line on success. The
/// first line must be the marker; more than [`MAX_BEFORE_MARKER`] bytes
/// without a line, an end before (or right after) the marker, or a probe
/// that fails (`Err(message)`) is [`NotReady::Failed`].
pub fn wait_marker(
    timeout: Duration,
    poll: Duration,
    mut look: impl FnMut() -> Result<Look, String>,
) -> Result<String, NotReady> {
    let start = Instant::now();
    loop {
        let Look { stdout, ended } = look().map_err(NotReady::Failed)?;
        if let Some(nl) = stdout.iter().position(|&b| b == b'\n') {
            let line = String::from_utf8_lossy(&stdout[..nl]).trim().to_string();
            if !is_marker(&line) {
                return Err(NotReady::Failed(format!(
                    "the daemon's first line on stdout is not its startup marker: {line:?}"
                )));
            }
            if let Some(how) = ended {
                return Err(NotReady::Failed(format!(
                    "the daemon printed its marker but {how}"
                )));
            }
            return Ok(line);
        }
        if stdout.len() > MAX_BEFORE_MARKER {
            return Err(NotReady::Failed(
                "the daemon wrote 4 KiB to stdout without a marker line".into(),
            ));
        }
        if let Some(how) = ended {
            return Err(NotReady::Failed(format!(
                "the daemon exited before its startup marker ({how})"
            )));
        }
        if start.elapsed() >= timeout {
            return Err(NotReady::Timeout);
        }
        std::thread::sleep(poll);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn looks(
        seq: Vec<(&'static str, Option<&'static str>)>,
    ) -> impl FnMut() -> Result<Look, String> {
        let mut it = seq.into_iter();
        let mut last = None;
        move || {
            let (out, ended) = it.next().or(last).expect("a look");
            last = Some((out, ended));
            Ok(Look {
                stdout: out.as_bytes().to_vec(),
                ended: ended.map(String::from),
            })
        }
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn marker_fields() {
        let m = format!("{DAEMON_MARKER} socket=/var/lib/x/daemon.sock pid=2");
        assert!(is_marker(&m));
        assert_eq!(
            marker_socket(&m),
            Some(PathBuf::from("/var/lib/x/daemon.sock"))
        );
        assert_eq!(marker_socket(DAEMON_MARKER), None);
        assert!(!is_marker(DAEMON_MARKER), "the word alone has no fields");
        assert!(!is_marker("STRATA-DAEMON-READYX socket=/s"));
    }

    #[test]
    fn waits_for_the_line_and_refuses_what_is_not_ready() {
        let ready = format!("{DAEMON_MARKER} socket=/s pid=1\n").leak();
        let got = wait_marker(
            Duration::from_secs(5),
            MS,
            looks(vec![("", None), ("STRATA", None), (ready, None)]),
        );
        assert_eq!(got.unwrap(), ready.trim());

        let e = wait_marker(Duration::from_secs(5), MS, looks(vec![("hello\n", None)]));
        assert!(matches!(e, Err(NotReady::Failed(m)) if m.contains("not its startup marker")));

        let e = wait_marker(
            Duration::from_secs(5),
            MS,
            looks(vec![(ready, Some("the Sandbox ended (x)"))]),
        );
        assert!(
            matches!(e, Err(NotReady::Failed(m)) if m.contains("printed its marker but the Sandbox ended"))
        );

        let e = wait_marker(
            Duration::from_secs(5),
            MS,
            looks(vec![("", Some("monitor: exit status: 3"))]),
        );
        assert!(
            matches!(e, Err(NotReady::Failed(m)) if m.contains("exited before its startup marker (monitor: exit status: 3)"))
        );

        let big = "x".repeat(MAX_BEFORE_MARKER + 1).leak();
        let e = wait_marker(Duration::from_secs(5), MS, looks(vec![(big, None)]));
        assert!(matches!(e, Err(NotReady::Failed(m)) if m.contains("4 KiB")));

        let e = wait_marker(Duration::ZERO, MS, looks(vec![("", None)]));
        assert_eq!(e, Err(NotReady::Timeout));
    }
}
