#![allow(dead_code)]
//! The harness of `tests/serve.rs`: a real `strata serve` child and a
//! minimal HTTP/1.1 client over its Unix socket or loopback TCP port.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Child, Stdio};

use serde_json::{json, Value};

use crate::common::{Env, BIN};
pub use strata_testkit::http::{parse, Resp};

pub mod clients;
pub mod sandbox;
// Each test binary uses some of these.
#[allow(unused_imports)]
pub use clients::*;
#[allow(unused_imports)]
pub use sandbox::*;

/// A running `strata serve`, killed on drop.
pub struct Server {
    pub child: Child,
    pub addr: String,
    /// The whole ready line, parsed.
    pub ready: Value,
}

impl Server {
    pub fn start(env: &Env, extra: &[&str]) -> Server {
        Server::start_with(env, extra, &[])
    }

    /// [`Server::start`] with extra environment variables.
    pub fn start_with(env: &Env, extra: &[&str], vars: &[(&str, &std::path::Path)]) -> Server {
        let mut c = std::process::Command::new(BIN);
        for (k, v) in vars {
            c.env(k, v);
        }
        c.env_remove("STRATA_STORE")
            .env_remove("XDG_DATA_HOME")
            .arg("--store")
            .arg(&env.store)
            .arg("--json")
            .arg("serve")
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = c.spawn().expect("spawn strata serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("read the ready line");
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("ready line is not JSON ({e}): {line:?}"));
        let addr = v["listening"]
            .as_str()
            .unwrap_or_else(|| panic!("no listening in {line:?}"))
            .to_string();
        Server {
            child,
            addr,
            ready: v,
        }
    }

    pub fn unix(env: &Env) -> Server {
        let sock = env.path("s.sock");
        Server::start(env, &["--listen", &format!("unix:{}", sock.display())])
    }

    pub fn req(&self, method: &str, path: &str, token: Option<&str>, body: Option<&Value>) -> Resp {
        let b = body.map(|v| serde_json::to_vec(v).unwrap());
        self.raw(method, path, token, b.as_deref(), "application/json", &[])
    }

    /// GET with a token and no body.
    pub fn get(&self, path: &str, token: &str) -> Resp {
        self.req("GET", path, Some(token), None)
    }

    /// POST raw bytes with a given content type and no extra headers.
    pub fn post(&self, path: &str, token: &str, body: &[u8], ctype: &str) -> Resp {
        self.raw("POST", path, Some(token), Some(body), ctype, &[])
    }

    /// GET with a `Range` header.
    pub fn get_range(&self, path: &str, token: &str, range: &str) -> Resp {
        self.raw("GET", path, Some(token), None, "", &[("Range", range)])
    }

    pub fn raw(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&[u8]>,
        ctype: &str,
        headers: &[(&str, &str)],
    ) -> Resp {
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: strata\r\nConnection: close\r\n");
        if let Some(t) = token {
            req.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        if let Some(b) = body {
            req.push_str(&format!(
                "Content-Type: {ctype}\r\nContent-Length: {}\r\n",
                b.len()
            ));
        }
        req.push_str("\r\n");
        let mut bytes = req.into_bytes();
        bytes.extend_from_slice(body.unwrap_or(b""));
        let raw = if let Some(p) = self.addr.strip_prefix("unix:") {
            exchange(UnixStream::connect(p).expect("connect"), &bytes)
        } else {
            let a = self.addr.strip_prefix("tcp:").unwrap();
            exchange(std::net::TcpStream::connect(a).expect("connect"), &bytes)
        };
        parse(&raw)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Send everything, then read the whole answer. A server that answers
/// from the head alone (401, 413) may close before the body is written:
/// a failed write is tolerated, the answer is still readable (unix(7)).
pub fn exchange<S: Read + Write>(mut s: S, bytes: &[u8]) -> Vec<u8> {
    let _ = s.write_all(bytes);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    raw
}

pub fn token(env: &Env, projects: &[&str]) -> (String, String) {
    let mut args = vec!["token", "create"];
    for p in projects {
        args.push("--project");
        args.push(p);
    }
    let v = env.json(&args);
    (
        v["token"].as_str().unwrap().to_string(),
        v["id"].as_str().unwrap().to_string(),
    )
}

pub fn head(env: &Env, branch: &str) -> String {
    env.json(&["log", branch, "-n", "1"])[0]["commit"]
        .as_str()
        .unwrap()
        .to_string()
}

pub fn log_len(env: &Env, branch: &str) -> usize {
    env.json(&["log", branch]).as_array().unwrap().len()
}

pub fn create_project(s: &Server, t: &str, name: &str) -> String {
    let r = s.req(
        "POST",
        "/v1/projects",
        Some(t),
        Some(&json!({ "name": name })),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    r.json()["head"].as_str().unwrap().to_string()
}

pub fn commit(s: &Server, t: &str, branch_path: &str, expected: &str, changes: Value) -> Resp {
    s.req(
        "POST",
        &format!("/v1/projects/{branch_path}/commits"),
        Some(t),
        Some(&json!({"expected_head": expected, "message": "via api", "changes": changes})),
    )
}

/// A `strata` command's exit code, stdout and stderr.
pub type Output = (Option<i32>, Vec<u8>, String);

/// Run `c` to its end.
pub fn run(mut c: assert_cmd::Command) -> Output {
    let o = c.output().expect("run strata");
    (
        o.status.code(),
        o.stdout,
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The `--remote` URL of a server: `unix:///path` or `http://HOST:PORT`.
pub fn url_of(s: &Server) -> String {
    match s.addr.strip_prefix("unix:") {
        Some(p) => format!("unix://{p}"),
        None => format!("http://{}", s.addr.strip_prefix("tcp:").unwrap()),
    }
}
