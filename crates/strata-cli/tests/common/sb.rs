//! The Sandbox fixture of the CLI tests (`sandbox.rs`, `sandbox_exec.rs`):
//! root with /dev/fuse and namespaces (CI runs as root). The Sandbox
//! records go to a private state root (STRATA_SANDBOX_STATE under
//! /var/tmp: a Sandbox has its own /tmp, so the root cannot be there).

use super::{Env, BIN};
use serde_json::Value;
use std::io::Write;
use std::process::{Command, Output, Stdio};

pub struct Sb {
    pub env: Env,
    pub state: tempfile::TempDir,
}

impl Sb {
    pub fn new() -> Sb {
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

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.env_remove("STRATA_STORE")
            .env("STRATA_SANDBOX_STATE", self.state.path())
            .arg("--store")
            .arg(&self.env.store)
            .args(args);
        c
    }

    pub fn run(&self, args: &[&str], stdin: Option<&[u8]>) -> Output {
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

    pub fn ok(&self, args: &[&str]) -> Vec<u8> {
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

    pub fn json(&self, args: &[&str]) -> Value {
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
pub struct Rm<'a>(pub &'a Sb, pub String);
impl Drop for Rm<'_> {
    fn drop(&mut self) {
        let _ = self.0.run(&["sandbox", "rm", "--discard", &self.1], None);
    }
}

impl Sb {
    /// A Sandbox (removed on drop) and project `p` imported from `files`.
    pub fn with_project(files: &[(&str, &[u8])]) -> Sb {
        let sb = Sb::new();
        let src = sb.env.path("src");
        for (p, b) in files {
            super::write(&src, p, b);
        }
        sb.ok(&["project", "create", "p", "--from", src.to_str().unwrap()]);
        sb
    }

    /// `strata --json sandbox create ARGS`: the new ID.
    pub fn create(&self, args: &[&str]) -> String {
        let mut a = vec!["sandbox", "create", "--label", "suite=cli-sandbox"];
        a.extend_from_slice(args);
        let v = self.json(&a);
        v["sandbox"].as_str().expect("sandbox id").to_string()
    }

    /// `strata --json ws mount SB REF`: the Workspace ID.
    pub fn mount(&self, sandbox: &str, reference: &str) -> String {
        let v = self.json(&["ws", "mount", sandbox, reference]);
        assert_eq!(v["path"], "/workspace", "{v}");
        v["workspace"].as_str().expect("workspace id").to_string()
    }

    /// `strata exec WS -- sh -c SCRIPT` with no stdin.
    pub fn sh(&self, ws: &str, script: &str) -> Output {
        self.run(&["exec", ws, "--no-stdin", "--", "sh", "-c", script], None)
    }
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
