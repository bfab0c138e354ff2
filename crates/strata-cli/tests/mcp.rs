//! `strata mcp` driven by a real MCP client no one here wrote: the official
//! Python SDK (`mcp` from PyPI, in the venv scripts/test makes from
//! scripts/requirements-test.txt) runs `crates/strata-mcp/tests/mcp_client.py`
//! against the real binary over stdio and over streamable HTTP, with real
//! Sandboxes and FUSE (root, /dev/fuse; CI runs as root). The client
//! asserts what the protocol shows; this test reads the Store back with
//! the CLI and checks it holds exactly the expected tree.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::chown;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::sb::Sb;
use common::BIN;
use serde_json::Value;

/// The venv's python: `$STRATA_TEST_PYTHON`, else `<repo>/target/py-venv`.
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("STRATA_TEST_PYTHON").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let p = repo.join("target/py-venv/bin/python");
    assert!(
        p.exists(),
        "{} is missing: the MCP tests need the Python venv with the `mcp` package. \
         Run `scripts/test --setup-only` (it creates target/py-venv from \
         scripts/requirements-test.txt), or set STRATA_TEST_PYTHON to a python that has it",
        p.display()
    );
    p
}

fn client() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../strata-mcp/tests/mcp_client.py")
}

/// Run the client script; require success and return its one JSON line.
fn run_client(sb: &Sb, args: &[&str]) -> Value {
    run_client_with_stderr(sb, args).0
}

/// [`run_client`], and the stderr of the client and the stdio server.
fn run_client_with_stderr(sb: &Sb, args: &[&str]) -> (Value, String) {
    let out = Command::new(python())
        .arg(client())
        .args(args)
        .env("STRATA_SANDBOX_STATE", sb.state.path())
        .env("STRATA_TEST_STORE", &sb.env.store)
        .output()
        .expect("run the python MCP client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "mcp_client.py {args:?}: {:?}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout.lines().last().unwrap_or_default();
    let v = serde_json::from_str(line).unwrap_or_else(|e| panic!("client output {stdout:?}: {e}"));
    (v, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Project `demo` with files the command uid (1500) owns, so an agent may
/// edit them, as a project imported for agents would be.
fn demo_project(sb: &Sb) {
    let src = sb.env.path("src");
    common::write(&src, "README.md", b"# demo\n");
    common::write(&src, "src/main.c", b"int main(void) { return 0; }\n");
    for p in ["", "README.md", "src", "src/main.c"] {
        chown(src.join(p), Some(1500), Some(1500)).unwrap();
    }
    sb.ok(&["project", "create", "demo", "--from", src.to_str().unwrap()]);
}

/// Every path of `dir` (relative, sorted) with the content of its files.
fn tree(dir: &Path) -> Vec<(String, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    for e in walk(dir) {
        let rel = e.strip_prefix(dir).unwrap().to_str().unwrap().to_string();
        let content = e.is_file().then(|| std::fs::read(&e).unwrap());
        out.push((rel, content));
    }
    out.sort();
    out
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            v.extend(walk(&p));
        }
        v.push(p);
    }
    v
}

/// The Store holds exactly what the agent committed on demo/agent, and
/// demo/main is untouched.
fn assert_store_after_flow(sb: &Sb, result: &Value) {
    let export = sb.env.path("export");
    sb.ok(&["export", "demo/agent", export.to_str().unwrap()]);
    let f = |s: &str| Some(s.as_bytes().to_vec());
    assert_eq!(
        tree(&export),
        vec![
            ("README.md".to_string(), f("# demo\n")),
            ("notes".to_string(), None),
            ("notes/hello.txt".to_string(), f("hello\nstrata\n")),
            ("src".to_string(), None),
            (
                "src/main.c".to_string(),
                f("int main(void) { return 0; }\n")
            ),
        ]
    );
    let log = sb.json(&["log", "demo/agent"]);
    assert_eq!(log[0]["commit"], result["commit"]);
    assert_eq!(log[0]["message"], "agent: hello notes");
    assert_eq!(log[1]["commit"], result["base"]);
    assert_eq!(log.as_array().unwrap().len(), 2);
    let main = sb.json(&["log", "demo/main"]);
    assert_eq!(main[0]["commit"], result["base"]);
    // The file tools' attempt at the host's /etc landed nowhere.
    assert!(!Path::new("/etc/strata-mcp-escape").exists());
    // The client closed its Sandbox: no record is left.
    assert_no_sandbox(sb, result["sandbox_id"].as_str().unwrap());
}

fn assert_no_sandbox(sb: &Sb, id: &str) {
    let list = sb.json(&["sandbox", "list"]);
    let ids: Vec<&str> = list
        .as_array()
        .unwrap_or_else(|| list["sandboxes"].as_array().expect("sandbox list"))
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert!(!ids.contains(&id), "sandbox {id} still listed: {list}");
}

#[test]
fn an_agent_flow_over_stdio_lands_in_the_store_and_errors_are_tool_errors() {
    let sb = Sb::new();
    demo_project(&sb);
    let store = sb.env.store.to_str().unwrap();
    let result = run_client(&sb, &["stdio", BIN, store]);
    assert_store_after_flow(&sb, &result);
}

#[test]
fn the_agent_flow_through_a_server_with_remote() {
    // `strata --remote unix://… mcp`: the same tools, every Store call and
    // Sandbox through `strata serve` and its token (docs/mcp.md).
    let sb = Sb::new();
    demo_project(&sb);
    let token: Value = serde_json::from_slice(&sb.ok(&["--json", "token", "create"])).unwrap();
    let token = token["token"].as_str().unwrap().to_string();
    let sock = sb.env.path("serve.sock");
    let mut serve = sb
        .cmd(&["serve", "--listen", &format!("unix:{}", sock.display())])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start strata serve");
    let mut line = String::new();
    BufReader::new(serve.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("listening"), "ready line: {line:?}");
    let url = format!("unix://{}", sock.display());
    let result = run_client(&sb, &["stdio-remote", BIN, &url, &token]);
    let _ = serve.kill();
    let _ = serve.wait();
    assert_store_after_flow(&sb, &result);
    // --http checks this host's tokens: refused with --remote.
    let out = Command::new(BIN)
        .args(["--remote", &url, "mcp", "--http", "127.0.0.1:0"])
        .env("STRATA_TOKEN", &token)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("serve MCP on stdio"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_sandbox_left_open_is_closed_when_the_client_closes_stdin() {
    let sb = Sb::new();
    demo_project(&sb);
    let store = sb.env.store.to_str().unwrap();
    let result = run_client(&sb, &["leave", BIN, store]);
    assert_no_sandbox(&sb, result["sandbox_id"].as_str().unwrap());
}

/// Closing would delete uncommitted work: such a Sandbox is left running,
/// named on stderr, and its file is still there for `strata ws commit`.
#[test]
fn a_sandbox_with_uncommitted_work_is_left_running_and_named_at_the_end() {
    let sb = Sb::new();
    demo_project(&sb);
    let store = sb.env.store.to_str().unwrap();
    let (r, stderr) = run_client_with_stderr(&sb, &["leave-dirty", BIN, store]);
    let (sid, wid) = (
        r["sandbox_id"].as_str().unwrap(),
        r["workspace_id"].as_str().unwrap(),
    );
    assert!(
        stderr.contains(&format!("left sandbox {sid} running")),
        "{stderr}"
    );
    assert!(stderr.contains("strata sandbox rm --discard"), "{stderr}");
    let st = sb.json(&["ws", "status", wid]);
    assert!(st.to_string().contains("wip.txt"), "{st}");
    sb.ok(&["ws", "commit", wid, "-m", "saved after the session"]);
    assert_eq!(sb.ok(&["cat", "demo/main", "wip.txt"]), b"wip");
    sb.ok(&["sandbox", "rm", sid]);
    assert_no_sandbox(&sb, sid);
}

/// `strata mcp --http 127.0.0.1:0`, with its ready line read.
struct HttpServer {
    child: Child,
    url: String,
}

impl HttpServer {
    fn start(sb: &Sb) -> HttpServer {
        let mut child = sb
            .cmd(&["mcp", "--http", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start strata mcp --http");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("ready line: {line:?}"))
            .to_string();
        HttpServer { child, url }
    }

    /// SIGTERM, then the exit status.
    fn stop(mut self) -> std::process::ExitStatus {
        rustix::process::kill_process(
            rustix::process::Pid::from_child(&self.child),
            rustix::process::Signal::TERM,
        )
        .unwrap();
        self.child.wait().unwrap()
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_agent_flow_over_streamable_http_needs_a_token() {
    let sb = Sb::new();
    demo_project(&sb);
    let token = sb.json(&["token", "create"])["token"]
        .as_str()
        .unwrap()
        .to_string();
    let server = HttpServer::start(&sb);
    assert!(
        server.url.starts_with("http://127.0.0.1:"),
        "{}",
        server.url
    );
    let r = run_client(&sb, &["unauthorized", &server.url]);
    assert_eq!(r["statuses"], serde_json::json!([401, 401, 401]));
    let result = run_client(&sb, &["http", &server.url, &token]);
    assert_store_after_flow(&sb, &result);
    assert!(server.stop().success());
}

/// Over HTTP a Sandbox belongs to the token that made it, a project
/// scope holds for every REF, and a Sandbox left open is closed when the
/// server stops.
#[test]
fn over_http_tokens_see_only_their_sandboxes_and_projects() {
    let sb = Sb::new();
    demo_project(&sb);
    let a = sb.json(&["token", "create"])["token"]
        .as_str()
        .unwrap()
        .to_string();
    let b = sb.json(&["token", "create", "--project", "other"])["token"]
        .as_str()
        .unwrap()
        .to_string();
    let server = HttpServer::start(&sb);
    let left = run_client(&sb, &["http-leave", &server.url, &a]);
    let (sid, wid) = (
        left["sandbox_id"].as_str().unwrap(),
        left["workspace_id"].as_str().unwrap(),
    );
    let r = run_client(&sb, &["foreign", &server.url, &b, sid, wid]);
    assert_eq!(r["ok"], true);
    // Token B's attempts left A's Sandbox running.
    let list = sb.json(&["sandbox", "list"]);
    assert!(list.to_string().contains(sid), "{list}");
    assert!(server.stop().success());
    assert_no_sandbox(&sb, sid);
}

#[test]
fn http_on_a_non_loopback_address_is_refused() {
    let sb = Sb::new();
    let out = sb.run(&["mcp", "--http", "0.0.0.0:8766"], None);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a loopback address"), "{err}");
}
