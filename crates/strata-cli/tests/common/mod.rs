//! Helpers shared by the CLI tests: run `strata` against a Store in a
//! temporary directory, parse its JSON, and build source trees.
#![allow(dead_code)]

pub mod canary;
pub mod sb;

use assert_cmd::Command;
use serde_json::Value;
use std::path::{Path, PathBuf};

pub const BIN: &str = env!("CARGO_BIN_EXE_strata");

/// A temporary directory with a Store path inside it (not yet created).
pub struct Env {
    pub tmp: tempfile::TempDir,
    pub store: PathBuf,
}

impl Env {
    /// A fresh directory; the Store is not created.
    pub fn bare() -> Env {
        let tmp = tempfile::Builder::new()
            .prefix("strata-cli-test-")
            .tempdir()
            .expect("temp dir");
        let store = tmp.path().join("store");
        Env { tmp, store }
    }

    /// A fresh directory with an initialized Store.
    pub fn new() -> Env {
        let e = Env::bare();
        e.ok(&["init"]);
        e
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// `strata --store STORE ARGS...` with a clean environment for strata's
    /// own variables.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.env_remove("STRATA_STORE")
            .env_remove("XDG_DATA_HOME")
            .arg("--store")
            .arg(&self.store)
            .args(args)
            .timeout(std::time::Duration::from_secs(300));
        c
    }

    /// Run and require success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> Vec<u8> {
        let out = self.cmd(args).output().expect("run strata");
        assert!(
            out.status.success(),
            "strata {args:?} failed with {:?}\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// Run with `--json`, require success, and parse stdout.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let out = self.ok(&a);
        serde_json::from_slice(&out).unwrap_or_else(|e| {
            panic!(
                "strata {args:?} --json printed invalid JSON ({e}):\n{}",
                String::from_utf8_lossy(&out)
            )
        })
    }

    /// Run and require failure with `code`; returns stderr as text.
    pub fn fails(&self, args: &[&str], code: i32) -> String {
        let out = self.cmd(args).output().expect("run strata");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(
            out.status.code(),
            Some(code),
            "strata {args:?}: expected exit {code}\nstdout: {}\nstderr: {stderr}",
            String::from_utf8_lossy(&out.stdout),
        );
        assert!(
            stderr.starts_with("strata: error: ") || code == 2,
            "strata {args:?}: error not in the expected form: {stderr}"
        );
        // One or two sentences on one line, not a backtrace or a debug dump.
        assert!(
            stderr.trim_end().lines().count() <= 2 || code == 2,
            "strata {args:?}: error too long: {stderr}"
        );
        stderr
    }
}

/// A 64-digit lowercase hex id.
/// The `name` of each entry of a `strata ls --json` listing, in order.
pub fn entry_names(ls: &Value) -> Vec<&str> {
    ls.as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect()
}

pub fn is_id(v: &Value) -> bool {
    v.as_str()
        .is_some_and(|s| s.len() == 64 && s.bytes().all(|c| c.is_ascii_hexdigit()))
}

pub fn s(p: &Path) -> &str {
    p.to_str().expect("test paths are UTF-8")
}

/// Write `content` to `root/rel`, creating parents.
pub fn write(root: &Path, rel: &str, content: &[u8]) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
}

/// Deterministic pseudo-random bytes (incompressible, so the Store has to
/// do real work with them).
pub fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}
