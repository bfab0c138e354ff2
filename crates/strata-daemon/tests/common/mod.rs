//! A real daemon (the crate's binary, as root) on a temp Unix socket with a
//! real Store, and a small blocking HTTP/1.1 client for the tests.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use base64::Engine;
use strata_daemon::api::Frame;
use strata_store::{NoProgress, Store, StoreOptions};

pub const DAEMON: &str = env!("CARGO_BIN_EXE_strata-daemon");

pub struct Daemon {
    pub tmp: tempfile::TempDir,
    pub child: Child,
    pub socket: PathBuf,
    pub token: String,
    pub store_dir: PathBuf,
    pub log: PathBuf,
    pub marker: String,
}

pub fn require_root() {
    assert!(
        rustix::process::geteuid().is_root(),
        "the daemon tests mount FUSE and drop privileges: run them as root (CI does)"
    );
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: load the fuse module"
    );
}

impl Daemon {
    /// Store with project `p` (main: hello.txt, dir/a.txt), daemon started.
    pub fn start() -> Daemon {
        Self::start_with(None)
    }

    /// With `tcp_port`, also serve on 127.0.0.1.
    pub fn start_with(tcp_port: Option<u16>) -> Daemon {
        Self::start_opts(tcp_port, false)
    }

    /// With `recover_workspaces` on (a Sandbox's daemon): see `restart`.
    pub fn start_recovering() -> Daemon {
        Self::start_opts(None, true)
    }

    fn start_opts(tcp_port: Option<u16>, recover: bool) -> Daemon {
        Self::start_configured(|cfg| {
            cfg.tcp_port = tcp_port;
            cfg.recover_workspaces = recover;
        })
    }

    /// With the config changed by `f` before the daemon reads it.
    pub fn start_configured(f: impl FnOnce(&mut strata_daemon::DaemonConfig)) -> Daemon {
        require_root();
        let tmp = tempfile::tempdir().expect("tempdir");
        // Commands (uid 1500) must reach the mount point under it.
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let src = tmp.path().join("src");
        std::fs::create_dir_all(src.join("dir")).unwrap();
        std::fs::write(src.join("hello.txt"), b"hello\n").unwrap();
        std::fs::write(src.join("dir/a.txt"), b"a\n").unwrap();
        let store_dir = tmp.path().join("store");
        let store = Store::create(&store_dir, &StoreOptions::default()).expect("store");
        store
            .create_project_from("p", &src, "base", &NoProgress)
            .expect("project");
        drop(store);
        let private = tmp.path().join("private");
        std::fs::create_dir(&private).unwrap();
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
        let token = strata_daemon::new_token().unwrap();
        let token_file = private.join("token");
        strata_daemon::write_token(&token_file, &token).unwrap();
        let socket = private.join("daemon.sock");
        let log = private.join("daemon.log");
        let cfg = strata_daemon::DaemonConfig::new(
            socket.clone(),
            token_file,
            log.clone(),
            store_dir.clone(),
            private.join("scratch"),
        );
        let mut cfg = cfg;
        f(&mut cfg);
        let cfg_path = private.join("config.json");
        strata_daemon::write_private(&cfg_path, &serde_json::to_vec(&cfg).unwrap()).unwrap();
        let (child, marker) = spawn(&cfg_path, &log);
        Daemon {
            tmp,
            child,
            socket,
            token,
            store_dir,
            log,
            marker,
        }
    }

    /// Start the daemon again on the same config (socket, token, Store,
    /// scratch) after the previous one ended; returns the new marker.
    pub fn restart(&mut self) -> String {
        let _ = self.child.wait();
        let cfg_path = self.tmp.path().join("private/config.json");
        let (child, marker) = spawn(&cfg_path, &self.log);
        self.child = child;
        self.marker = marker.clone();
        marker
    }

    /// The scratch root (one directory per Workspace ID).
    pub fn scratch(&self) -> PathBuf {
        self.tmp.path().join("private/scratch")
    }

    pub fn store(&self) -> Store {
        Store::open(&self.store_dir, &StoreOptions::default()).expect("open store")
    }

    pub fn req(&self, method: &str, path: &str, body: Option<&serde_json::Value>) -> Resp {
        let b = body.map(|v| serde_json::to_vec(v).unwrap());
        raw_request(
            &self.socket,
            method,
            path,
            Some(&self.token),
            b.as_deref(),
            "application/json",
        )
    }

    pub fn req_bytes(&self, method: &str, path: &str, body: &[u8]) -> Resp {
        raw_request(
            &self.socket,
            method,
            path,
            Some(&self.token),
            Some(body),
            "application/octet-stream",
        )
    }

    /// Mount p/main at `<tmp>/mnt-<name>`; returns (id, path).
    pub fn mount(&self, name: &str) -> (String, String) {
        let at = self.tmp.path().join(format!("mnt-{name}"));
        let r = self.req(
            "POST",
            "/v1/workspaces",
            Some(&serde_json::json!({"ref": "p/main", "at": at})),
        );
        assert_eq!(r.status, 201, "{}", r.text());
        let v = r.json();
        (
            v["id"].as_str().unwrap().to_string(),
            v["path"].as_str().unwrap().to_string(),
        )
    }

    /// Start an exec; returns its ID.
    pub fn exec(&self, body: serde_json::Value) -> String {
        let r = self.req("POST", "/v1/execs", Some(&body));
        assert_eq!(r.status, 201, "{}", r.text());
        r.json()["id"].as_str().unwrap().to_string()
    }

    /// Read the whole output stream of an exec.
    pub fn output(&self, id: &str) -> Output {
        let r = self.req("GET", &format!("/v1/execs/{id}/output"), None);
        assert_eq!(r.status, 200, "{}", r.text());
        let mut out = Output::default();
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut last_seq = None;
        for line in r.text().lines() {
            let f: Frame = serde_json::from_str(line).expect("frame");
            let seq = match &f {
                Frame::Stdout { seq, .. }
                | Frame::Stderr { seq, .. }
                | Frame::Exit { seq, .. }
                | Frame::Error { seq, .. } => *seq,
            };
            if let Some(l) = last_seq {
                assert!(seq > l, "seq not increasing: {l} then {seq}");
            }
            last_seq = Some(seq);
            match f {
                Frame::Stdout { data, .. } => out.stdout.extend(b64.decode(data).unwrap()),
                Frame::Stderr { data, .. } => out.stderr.extend(b64.decode(data).unwrap()),
                Frame::Exit { exit, .. } => out.exit = Some(exit),
                Frame::Error { failure, .. } => out.error = Some(failure),
            }
            out.frames += 1;
        }
        out
    }

    pub fn run(&self, argv: &[&str]) -> Output {
        let id = self.exec(serde_json::json!({ "argv": argv }));
        self.output(&id)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.req("POST", "/v1/shutdown", None);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            if std::time::Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// Spawn the daemon binary on `cfg_path` and read its marker line.
fn spawn(cfg_path: &Path, log: &Path) -> (Child, String) {
    let mut child = Command::new(DAEMON)
        .arg("--config")
        .arg(cfg_path)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn daemon");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .expect("marker");
    assert!(
        line.starts_with("STRATA-DAEMON-READY socket="),
        "no marker: {line:?}; log: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    (child, line.trim().to_string())
}

#[derive(Debug, Default)]
pub struct Output {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit: Option<strata_daemon::api::ExitInfo>,
    pub error: Option<strata_daemon::api::ExecFailure>,
    pub frames: usize,
}

impl Output {
    pub fn out(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    pub fn err(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
    pub fn code(&self) -> Option<i32> {
        self.exit.as_ref().and_then(|e| e.code)
    }
}

pub use strata_testkit::http::Resp;

/// One HTTP/1.1 request with `Connection: close`; decodes chunked bodies.
pub fn raw_request(
    socket: &Path,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
    ctype: &str,
) -> Resp {
    raw_request_with(socket, method, path, token, body, ctype, &[])
}

/// [`raw_request`] with extra header lines (`Range: bytes=0-1`).
pub fn raw_request_with(
    socket: &Path,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
    ctype: &str,
    extra: &[&str],
) -> Resp {
    let mut s = UnixStream::connect(socket).expect("connect");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: daemon\r\nConnection: close\r\n");
    for h in extra {
        req.push_str(h);
        req.push_str("\r\n");
    }
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    let body = body.unwrap_or(b"");
    if !body.is_empty() || method == "POST" || method == "PUT" {
        req.push_str(&format!(
            "Content-Type: {ctype}\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    req.push_str("\r\n");
    // Head and body in one write: the daemon answers 401 from the head
    // alone and closes, so a second write for the body could meet a closed
    // peer (EPIPE; seen once in CI). A client that sent everything before
    // the answer still reads the answer: a Unix socket's buffered data
    // stays readable after the peer closes (unix(7)), so only a write that
    // fails this way is tolerated.
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    match s.write_all(&bytes) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(e) => panic!("write the request: {e}"),
    }
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    strata_testkit::http::parse(&raw)
}
