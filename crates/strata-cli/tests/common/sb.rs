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

impl Sb {
    /// SIGKILL the daemon of Sandbox `id` alone (a crash), found below the
    /// monitor its record names (`sandbox.json` in the state root), and
    /// wait until `sandbox inspect` says it is no longer running.
    pub fn kill9_daemon(&self, id: &str) {
        let rec: Value = serde_json::from_slice(
            &std::fs::read(self.state.path().join(id).join("sandbox.json")).expect("record"),
        )
        .expect("record JSON");
        let monitor = rec["monitor"]["pid"].as_u64().expect("monitor pid") as u32;
        let ppid = |p: u32| -> Option<u32> {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            stat.rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        };
        let below = |mut p: u32| {
            while let Some(q) = ppid(p) {
                if q == monitor {
                    return true;
                }
                if q <= 1 {
                    return false;
                }
                p = q;
            }
            false
        };
        // The daemon's argv[1] is `__strata-daemon` (the init carries it
        // only after `--`).
        let daemon = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .find(|&p| {
                let c = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
                c.split(|b| *b == 0).nth(1) == Some(&b"__strata-daemon"[..]) && below(p)
            })
            .unwrap_or_else(|| panic!("no daemon below monitor {monitor}"));
        let pid = rustix::process::Pid::from_raw(daemon as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
        let t0 = std::time::Instant::now();
        while self.json(&["sandbox", "inspect", id])["running"] != false {
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(10),
                "Sandbox {id} still running after its daemon was killed"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
