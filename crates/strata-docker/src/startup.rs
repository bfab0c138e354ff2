//! The docker backend's checks and waits around start (B1 image paths,
//! B4 inspect-after-start, B5 marker and log tail), apart from the
//! contract methods in `backend.rs`.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper::Method;
use serde_json::Value;
use strata_sandbox::backend::marker::{wait_marker, Look, NotReady};
use strata_sandbox::backend::state::{invalid, tail};
use strata_sandbox::BackendError;

use crate::backend::{step, DockerBackend, MARKER_POLL};
use crate::container::{self, Expected};
use crate::engine::{demux_logs, q};
use crate::state::Record;
use crate::DockerError;

impl DockerBackend {
    /// The container's stdout+stderr, last `lines` lines, if it exists.
    pub(crate) fn container_output(
        &self,
        rec: &Record,
        lines: usize,
    ) -> Result<Option<String>, DockerError> {
        let path = format!(
            "/containers/{}/logs?stdout=1&stderr=1&tail={lines}",
            rec.container
        );
        let r = self.engine.call(Method::GET, &path, None)?;
        if r.status.as_u16() == 404 {
            return Ok(None);
        }
        if !r.status.is_success() {
            return Err(DockerError::Engine {
                action: format!("GET {path}"),
                status: r.status.as_u16(),
                message: r.message(),
            });
        }
        let (out, err) = demux_logs(&r.body);
        let mut text = String::from_utf8_lossy(&out).into_owned();
        text.push_str(&String::from_utf8_lossy(&err));
        Ok(Some(text))
    }

    /// The daemon's log file and the container's own output (marker, early
    /// errors before the daemon's logging starts), both bounded.
    pub(crate) fn tail_of(&self, dir: &Path, rec: &Record, lines: usize) -> String {
        let log = dir.join("daemon.log");
        let mut s = tail(&log, lines)
            .unwrap_or_else(|e| format!("(log {} unreadable: {e})", log.display()));
        match self.container_output(rec, lines) {
            Ok(Some(out)) if !out.trim().is_empty() => {
                s.push_str("\n--- container output ---\n");
                s.push_str(out.trim_end());
            }
            Ok(Some(_)) => {}
            Ok(None) => s.push_str(&format!(
                "\n(container {} no longer exists: it was removed outside strata)",
                rec.container
            )),
            Err(e) => s.push_str(&format!("\n(container output unreadable: {e})")),
        }
        s
    }

    /// Resolve `image` to its ID once (B1: a tag that moves later never
    /// changes this Sandbox). Only local images: no registry is contacted.
    pub(crate) fn pin_image(&self, image: &str) -> Result<String, BackendError> {
        #[derive(serde::Deserialize)]
        struct Img {
            #[serde(rename = "Id")]
            id: String,
        }
        let path = format!("/images/{}/json", q(image));
        match self.engine.json::<Img>(Method::GET, &path, None) {
            Ok(i) => Ok(i.id),
            Err(DockerError::Engine { status: 404, .. }) => Err(invalid(
                format!("image {image}"),
                "not found in the local Engine; import or pull it first (strata does not contact registries)",
            )),
            Err(e) => Err(invalid(format!("image {image}"), e.to_string())),
        }
    }

    /// Each Workspace mount point must be a directory in the image, or
    /// absent (the Engine then creates it for the tmpfs): a file or a
    /// symlink there is refused before anything runs. Uses `HEAD
    /// /containers/{id}/archive`, whose `X-Docker-Container-Path-Stat`
    /// header is base64 JSON with a Go `os.FileMode` (dir bit 1<<31,
    /// symlink bit 1<<27).
    pub(crate) fn check_image_paths(&self, rec: &Record) -> Result<(), BackendError> {
        use base64::Engine as _;
        let mut paths: Vec<PathBuf> = rec.config.mountpoints.clone();
        paths.push(PathBuf::from("/run"));
        paths.push(PathBuf::from("/tmp"));
        for p in paths {
            let s = p.display().to_string();
            let url = format!("/containers/{}/archive?path={}", rec.container, q(&s));
            let r = self
                .engine
                .call(Method::HEAD, &url, None)
                .map_err(|e| step(&rec.id, "stat paths in the image", e))?;
            if r.status.as_u16() == 404 {
                continue;
            }
            let stat = r
                .headers
                .get("X-Docker-Container-Path-Stat")
                .and_then(|h| base64::engine::general_purpose::STANDARD.decode(h).ok())
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
            let mode = stat.as_ref().and_then(|v| v["mode"].as_u64()).unwrap_or(0);
            let link = stat
                .as_ref()
                .and_then(|v| v["linkTarget"].as_str())
                .unwrap_or("");
            let is_dir = mode & (1 << 31) != 0;
            if !is_dir || mode & (1 << 27) != 0 || (!link.is_empty() && link != s) {
                return Err(invalid(
                    format!("image {} path {s}", rec.image_ref),
                    format!(
                        "must be a directory (or absent): strata mounts there; it is {}",
                        if link.is_empty() {
                            format!("mode {mode:#o}")
                        } else {
                            format!("a symlink to {link}")
                        }
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Remove the container (stopping it first); a container already gone
    /// is fine. `v=0`: anonymous volumes are never removed (strata makes
    /// none, and a user's are not ours).
    pub(crate) fn remove_container(&self, rec: &Record) -> Result<(), BackendError> {
        let _ = self.engine.expect(
            Method::POST,
            &format!("/containers/{}/kill", rec.container),
            None,
            &[404, 409],
        );
        self.engine
            .expect(
                Method::DELETE,
                &format!("/containers/{}?v=0&force=1", rec.container),
                None,
                &[404],
            )
            .map(drop)
            .map_err(|e| step(&rec.id, "remove the container", e))
    }

    /// How many bytes of stdout the container's earlier runs left in its
    /// log (a restart's marker is the first line after them).
    pub(crate) fn stdout_so_far(&self, rec: &Record) -> Result<usize, DockerError> {
        let path = format!("/containers/{}/logs?stdout=1&stderr=0", rec.container);
        let r = self.engine.call(Method::GET, &path, None)?;
        if !r.status.is_success() {
            return Err(DockerError::Engine {
                action: format!("GET {path}"),
                status: r.status.as_u16(),
                message: r.message(),
            });
        }
        Ok(demux_logs(&r.body).0.len())
    }

    /// Wait for the first stdout line of the container (B5) after the
    /// `skip` bytes of earlier runs, polling its log ([`wait_marker`]);
    /// the container's exit ends the wait at once.
    pub(crate) fn wait_daemon_marker(
        &self,
        rec: &Record,
        timeout: Duration,
        skip: usize,
    ) -> Result<String, NotReady> {
        let logs = format!("/containers/{}/logs?stdout=1&stderr=0", rec.container);
        wait_marker(timeout, MARKER_POLL, || {
            // The container's state first, then its log (see `Look::ended`).
            let ended = match self.inspect(rec) {
                Ok(Some(i)) => match i["State"]["Status"].as_str() {
                    Some("running") => None,
                    other => Some(format!(
                        "the container ended: {} (exit code {})",
                        other.unwrap_or("unknown"),
                        i["State"]["ExitCode"]
                    )),
                },
                Ok(None) => {
                    return Err(format!(
                        "container {} was removed outside strata while starting",
                        rec.container
                    ))
                }
                Err(e) => return Err(e.to_string()),
            };
            let stdout = match self.engine.call(Method::GET, &logs, None) {
                Ok(r) if r.status.is_success() => {
                    let mut out = demux_logs(&r.body).0;
                    out.drain(..skip.min(out.len()));
                    out
                }
                Ok(r) => return Err(format!("container log: HTTP {}: {}", r.status, r.message())),
                Err(e) => return Err(e.to_string()),
            };
            Ok(Look { stdout, ended })
        })
    }

    /// B4: the container as the Engine made it, and its init as the kernel
    /// sees it; any difference from what was asked is refused.
    pub(crate) fn verify_started(&self, rec: &Record) -> Result<(), String> {
        let i = self
            .inspect(rec)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("container {} vanished after start", rec.container))?;
        let mut bad = container::verify(&i, &Expected::of(&rec.config));
        // The daemon may already have exited (the marker wait reports why).
        if let Some(pid) = i["State"]["Pid"].as_u64().filter(|p| *p > 0) {
            match fs::read_to_string(format!("/proc/{pid}/status")) {
                Ok(s) => bad.extend(container::verify_process(&s)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => bad.push(format!("/proc/{pid}/status: {e}")),
            }
        }
        if bad.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "refusing container {}: the Engine did not make what strata asked for: {}",
                rec.container,
                bad.join("; ")
            ))
        }
    }
}
