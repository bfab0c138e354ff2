//! Sandboxes through `strata serve` for the tests: a private state root
//! cleaned up on drop, and short forms of the calls (create, mount, exec,
//! the NDJSON output).

use std::path::{Path, PathBuf};

use base64::Engine;
use serde_json::{json, Value};

use super::*;
use crate::common::{self, Env};

/// Sandboxes need root, namespaces and /dev/fuse: without them the test
/// fails with the reason (never a silent pass).
pub fn require_root() {
    assert!(
        rustix::process::geteuid().is_root(),
        "these tests create Sandboxes and need root (run scripts/test as root)"
    );
    assert!(
        Path::new("/dev/fuse").exists(),
        "these tests mount Workspaces and need /dev/fuse"
    );
}

/// A Sandbox state root of its own (not under /tmp: the SDK refuses it),
/// whose leftover Sandboxes are closed on drop even when a test fails.
pub struct SbState {
    pub dir: tempfile::TempDir,
    store: PathBuf,
}

impl SbState {
    pub fn new(env: &Env) -> SbState {
        SbState {
            dir: tempfile::Builder::new()
                .prefix("strata-serve-sb-")
                .tempdir_in("/var/tmp")
                .unwrap(),
            store: env.store.clone(),
        }
    }
    pub fn vars(&self) -> [(&str, &Path); 1] {
        [("STRATA_SANDBOX_STATE", self.dir.path())]
    }
}

impl Drop for SbState {
    fn drop(&mut self) {
        let run = |args: &[&str]| {
            std::process::Command::new(common::BIN)
                .env("STRATA_SANDBOX_STATE", self.dir.path())
                .arg("--store")
                .arg(&self.store)
                .arg("--json")
                .args(args)
                .output()
        };
        if let Ok(out) = run(&["sandbox", "list"]) {
            let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
            for sb in v.as_array().into_iter().flatten() {
                if let Some(id) = sb["id"].as_str() {
                    let _ = run(&["sandbox", "rm", "--discard", id]);
                }
            }
        }
    }
}

pub fn start(env: &Env, st: &SbState) -> Server {
    let sock = env.path("s.sock");
    Server::start_with(
        env,
        &["--listen", &format!("unix:{}", sock.display())],
        &st.vars(),
    )
}

pub fn ok(r: &Resp, want: u16, what: &str) -> Value {
    assert_eq!(r.status, want, "{what}: {}", r.text());
    if r.body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&r.body).unwrap_or(Value::Null)
    }
}

pub fn post_json(s: &Server, t: &str, path: &str, body: Value) -> Resp {
    s.req("POST", path, Some(t), Some(&body))
}

pub fn create_sandbox(s: &Server, t: &str, body: Value) -> String {
    let v = ok(
        &post_json(s, t, "/v1/sandboxes", body),
        201,
        "create a Sandbox",
    );
    assert_eq!(v["state"], "running", "{v}");
    v["id"].as_str().unwrap().to_string()
}

pub fn mount(s: &Server, t: &str, sb: &str, reference: &str) -> String {
    let r = post_json(
        s,
        t,
        &format!("/v1/sandboxes/{sb}/workspaces"),
        json!({ "ref": reference }),
    );
    assert!(r.status == 201 || r.status == 200, "mount: {}", r.text());
    r.json()["id"].as_str().unwrap().to_string()
}

pub fn exec(s: &Server, t: &str, sb: &str, body: Value) -> String {
    let v = ok(
        &post_json(s, t, &format!("/v1/sandboxes/{sb}/execs"), body),
        201,
        "exec",
    );
    v["id"].as_str().unwrap().to_string()
}

/// `GET …/execs/{eid}/wait`: the exec's state once it ended.
pub fn wait(s: &Server, t: &str, sb: &str, eid: &str) -> Value {
    ok(
        &s.get(&format!("/v1/sandboxes/{sb}/execs/{eid}/wait"), t),
        200,
        "wait",
    )
}

/// `sh -c SCRIPT` in the Sandbox's Workspace, waited for; its exec id.
pub fn run_sh(s: &Server, t: &str, sb: &str, script: &str) -> String {
    let e = exec(s, t, sb, json!({"argv": ["sh", "-c", script]}));
    wait(s, t, sb, &e);
    e
}

/// The NDJSON output (`?format=ndjson`): (stdout, stderr, the last line).
pub fn ndjson_output(s: &Server, t: &str, sb: &str, eid: &str) -> (Vec<u8>, Vec<u8>, Value) {
    let r = s.get(
        &format!("/v1/sandboxes/{sb}/execs/{eid}/output?format=ndjson"),
        t,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let (mut out, mut err, mut last) = (Vec::new(), Vec::new(), Value::Null);
    for line in r.text().lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        if let Some(stream) = v["stream"].as_str() {
            let data = base64::engine::general_purpose::STANDARD
                .decode(v["data_b64"].as_str().unwrap())
                .unwrap();
            match stream {
                "stdout" => out.extend(data),
                "stderr" => err.extend(data),
                other => panic!("stream {other}"),
            }
        } else {
            last = v;
        }
    }
    (out, err, last)
}

pub fn head_of(s: &Server, t: &str, project: &str) -> String {
    let v = ok(
        &s.get(&format!("/v1/projects/{project}/branches"), t),
        200,
        "branches",
    );
    v["branches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "main")
        .unwrap()["head"]
        .as_str()
        .unwrap()
        .to_string()
}
