//! `strata sandbox ...`, `strata exec` and `strata probe` through the real
//! binary (root with /dev/fuse and namespaces; CI runs as root). The
//! Sandbox records go to a private state root (STRATA_SANDBOX_STATE under
//! /var/tmp: a Sandbox has its own /tmp, so the root cannot be there).

mod common;

use common::{write, Env, BIN};
use serde_json::Value;
use std::io::Write;
use std::process::{Command, Output, Stdio};

struct Sb {
    env: Env,
    state: tempfile::TempDir,
}

impl Sb {
    fn new() -> Sb {
        assert!(
            rustix::process::geteuid().is_root(),
            "Sandboxes need root (namespaces, mount(2), /dev/fuse); CI runs as root"
        );
        assert!(
            std::path::Path::new("/dev/fuse").exists(),
            "Sandboxes need /dev/fuse; CI provides it"
        );
        let env = Env::new();
        let state = tempfile::Builder::new()
            .prefix("strata-cli-sb-state-")
            .tempdir_in("/var/tmp")
            .expect("state dir under /var/tmp");
        Sb { env, state }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.env_remove("STRATA_STORE")
            .env("STRATA_SANDBOX_STATE", self.state.path())
            .arg("--store")
            .arg(&self.env.store)
            .args(args);
        c
    }

    fn run(&self, args: &[&str], stdin: Option<&[u8]>) -> Output {
        let mut c = self.cmd(args);
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        c.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        let mut child = c.spawn().expect("run strata");
        if let Some(data) = stdin {
            let mut si = child.stdin.take().unwrap();
            si.write_all(data).unwrap();
            drop(si);
        }
        child.wait_with_output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> Vec<u8> {
        let out = self.run(args, None);
        assert!(
            out.status.success(),
            "strata {args:?}: {:?}\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let out = self.ok(&a);
        serde_json::from_slice(&out).unwrap_or_else(|e| {
            panic!(
                "strata {a:?}: bad JSON ({e}): {}",
                String::from_utf8_lossy(&out)
            )
        })
    }
}

/// Removes the Sandbox if the test fails half way.
struct Rm<'a>(&'a Sb, String);
impl Drop for Rm<'_> {
    fn drop(&mut self) {
        let _ = self.0.run(&["sandbox", "rm", &self.1], None);
    }
}

#[test]
fn sandbox_create_list_mount_exec_commit_rm() {
    let sb = Sb::new();
    let src = sb.env.path("src");
    write(&src, "hello.txt", b"hello\n");
    sb.ok(&["project", "create", "p", "--from", src.to_str().unwrap()]);

    let created = sb.json(&[
        "sandbox",
        "create",
        "--name",
        "cli-test-a",
        "--label",
        "suite=cli-sandbox",
        "--pids",
        "256",
        "--memory",
        "512M",
    ]);
    let id = created["sandbox"].as_str().expect("sandbox id").to_string();
    let _rm = Rm(&sb, id.clone());

    // List by label and by prefix; a non-matching label lists nothing.
    let list = sb.json(&["sandbox", "list", "--label", "suite=cli-sandbox"]);
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![id.as_str()], "{list}");
    let list = sb.json(&["sandbox", "list", "--prefix", "cli-test"]);
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    let list = sb.json(&["sandbox", "list", "--label", "suite=other"]);
    assert_eq!(list.as_array().unwrap().len(), 0, "{list}");
    let text = String::from_utf8(sb.ok(&["sandbox", "list"])).unwrap();
    assert!(text.contains(&id), "{text}");

    let inspect = sb.json(&["sandbox", "inspect", &id]);
    assert_eq!(inspect["running"], true, "{inspect}");
    assert_eq!(inspect["name"], "cli-test-a", "{inspect}");

    // Mount a branch.
    sb.ok(&["branch", "create", "p/agent"]);
    let m = sb.json(&["sandbox", "mount", &id, "p/agent"]);
    let ws = m["workspace"].as_str().expect("workspace id").to_string();
    assert_eq!(m["path"], "/workspace", "{m}");

    // Separate streams, exit code, uid.
    let out = sb.run(
        &[
            "exec",
            &id,
            &ws,
            "--no-stdin",
            "--",
            "sh",
            "-c",
            "id -u; echo out; echo err >&2; exit 42",
        ],
        None,
    );
    assert_eq!(
        out.status.code(),
        Some(42),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1500\nout\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err\n");

    // A signal comes back as 128+N.
    let out = sb.run(&["exec", &id, &ws, "--", "sh", "-c", "kill -9 $$"], None);
    assert_eq!(out.status.code(), Some(137));

    // --env, --cwd and the file the command writes.
    sb.ok(&["exec", &id, &ws, "--", "mkdir", "d"]);
    let out = sb.ok(&[
        "exec",
        &id,
        &ws,
        "--env",
        "GREETING=hi there",
        "--cwd",
        "/workspace/d",
        "--",
        "sh",
        "-c",
        "echo \"$GREETING\" > f.txt; pwd",
    ]);
    assert_eq!(String::from_utf8_lossy(&out), "/workspace/d\n");

    // stdin reaches the command, and its EOF ends it.
    let data: Vec<u8> = (0..200_000u32).flat_map(|i| i.to_le_bytes()).collect();
    let out = sb.run(&["exec", &id, &ws, "--", "cat"], Some(&data));
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stdout.len(), data.len());
    assert!(out.stdout == data, "cat echoed different bytes");
    // --no-stdin: EOF at once.
    let out = sb.run(&["exec", &id, &ws, "--no-stdin", "--", "wc", "-c"], None);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0");

    // A command that cannot start is strata's failure (125), not 127.
    let out = sb.run(&["exec", &id, &ws, "--", "/no/such/binary"], None);
    assert_eq!(out.status.code(), Some(125), "{out:?}");

    // Status, commit, read back from the Store.
    let st = sb.json(&["sandbox", "status", &id, &ws]);
    assert!(
        st.as_array()
            .unwrap()
            .iter()
            .any(|c| c["path"] == "d/f.txt"),
        "{st}"
    );
    let c = sb.json(&["sandbox", "commit", &id, &ws, "-m", "from the sandbox"]);
    assert_eq!(c["committed"], true, "{c}");
    let cat = sb.ok(&["cat", "p/agent", "d/f.txt"]);
    assert_eq!(cat, b"hi there\n");
    assert_eq!(sb.ok(&["cat", "p/agent", "hello.txt"]), b"hello\n");

    let logs = sb.ok(&["sandbox", "logs", &id, "--tail", "20"]);
    assert!(!logs.is_empty(), "empty daemon log");

    sb.ok(&["sandbox", "unmount", &id, &ws]);
    let rm = sb.json(&["sandbox", "rm", &id]);
    assert_eq!(rm["removed"], id.as_str());
    let list = sb.json(&["sandbox", "list"]);
    assert_eq!(list.as_array().unwrap().len(), 0, "{list}");
    let out = sb.run(&["sandbox", "inspect", &id], None);
    assert_eq!(out.status.code(), Some(1), "{out:?}");

    let fsck = sb.json(&["fsck"]);
    assert_eq!(fsck["ok"], true, "{fsck}");
}

#[test]
fn probe_prints_key_value_lines_and_json() {
    let sb = Sb::new();
    let text = String::from_utf8(sb.ok(&["probe"])).unwrap();
    let keys: Vec<&str> = text
        .lines()
        .map(|l| {
            let (k, _) = l
                .split_once('=')
                .unwrap_or_else(|| panic!("not KEY=VALUE: {l}"));
            k
        })
        .collect();
    for k in [
        "kernel",
        "dev_fuse",
        "fuse_filesystem",
        "euid",
        "capeff",
        "user_namespaces",
        "cgroup",
        "dev_kvm",
        "rootless",
    ] {
        assert!(keys.contains(&k), "no {k} in:\n{text}");
    }
    assert!(text.contains("euid=0\n"), "{text}");
    let j = sb.json(&["probe"]);
    assert_eq!(j["euid"], "0", "{j}");
    assert_eq!(j["dev_fuse"], "present", "{j}");
}
