//! The SDK test binaries' harness: strata-testkit's `cases` (they run with
//! `harness = false`, see there) with this crate's clean-up, closing the
//! Sandboxes a failed case left running (found by this run's label).

#![allow(dead_code)] // each test binary uses a part

use std::future::Future;
use std::path::Path;

use strata_sdk::{Sandbox, SandboxFilter, SandboxSpec, Store, Workspace};

/// The label every Sandbox of this run carries: `KEY=<this pid>`.
pub fn run_label(key: &str) -> (String, String) {
    (key.to_string(), std::process::id().to_string())
}

/// Close every Sandbox labelled `key=<this pid>` (what a failed case left).
pub async fn close_leftovers(key: &str) {
    let mut f = SandboxFilter::default();
    let (k, v) = run_label(key);
    f.labels.insert(k, v);
    for info in Sandbox::list(f).await.unwrap_or_default() {
        if let Ok(sb) = Sandbox::open(info.id.as_str()).await {
            eprintln!("closing leftover Sandbox {}", sb.id());
            let _ = sb.close_discard().await;
        }
    }
}

/// Runs cases one after the other on one runtime, each with `dir`; at the
/// end closes what failed cases left running (by `label_key`).
pub struct Cases<'a> {
    inner: strata_testkit::cases::Cases<'a>,
    label_key: &'static str,
}

impl<'a> Cases<'a> {
    pub fn new(rt: &'a tokio::runtime::Runtime, dir: &'a Path, label_key: &'static str) -> Self {
        Cases {
            inner: strata_testkit::cases::Cases::from_args(rt, dir),
            label_key,
        }
    }

    /// Run one case; prints `test NAME ... ok (TIME)` or `... FAILED`.
    pub fn run<Fut: Future<Output = ()>>(
        &mut self,
        name: &str,
        case: impl FnOnce(&'a Path) -> Fut,
    ) {
        self.inner.run(name, case)
    }

    /// Close what failed cases left running; exit 1 if any case failed.
    pub fn finish(self) {
        self.inner.finish(close_leftovers(self.label_key));
    }
}

/// A Store under `dir` (named after `name`) whose project `p` holds
/// `files` (relative path, bytes), a Sandbox labelled with this run's
/// `label_key`, and `p/main` mounted in it.
pub async fn sandbox(
    dir: &Path,
    name: &str,
    label_key: &str,
    files: &[(&str, &[u8])],
) -> (Store, Sandbox, Workspace) {
    let src = dir.join(format!("src-{name}"));
    for (path, bytes) in files {
        let p = src.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
    let store = Store::create(dir.join(format!("store-{name}")))
        .await
        .unwrap();
    store.create_project_from("p", &src).await.unwrap();
    let (k, v) = run_label(label_key);
    let sb = Sandbox::create(SandboxSpec::new(store.dir()).label(k, v))
        .await
        .expect("create a Sandbox");
    let ws = sb.mount("p/main", None).await.expect("mount");
    (store, sb, ws)
}

/// `sh -c SCRIPT` in `ws`, which must succeed: its stdout.
pub async fn sh(ws: &Workspace, script: &str) -> String {
    let o = ws.exec(["sh", "-c", script]).output().await.expect("exec");
    assert!(o.status.success(), "{script}: {o:?}");
    o.stdout_str()
}
