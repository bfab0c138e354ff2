//! The SDK test binaries' own harness (they run with `harness = false`:
//! each binary is re-executed as the Sandbox init, the daemon and the exec
//! helper, so `main` must call `strata_sdk::maybe_run_internal()` first).
//! Each case runs to the end or panics; a panic is reported and counted,
//! the next case still runs, and the Sandboxes a failed case left running
//! (found by this run's label) are closed at the end.

#![allow(dead_code)] // each test binary uses a part

use std::future::Future;
use std::path::Path;

use strata_sdk::{Sandbox, SandboxFilter};

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

/// Runs cases one after the other on one runtime, each with `dir`.
pub struct Cases<'a> {
    rt: &'a tokio::runtime::Runtime,
    dir: &'a Path,
    label_key: &'static str,
    failed: usize,
}

impl<'a> Cases<'a> {
    pub fn new(rt: &'a tokio::runtime::Runtime, dir: &'a Path, label_key: &'static str) -> Self {
        Cases {
            rt,
            dir,
            label_key,
            failed: 0,
        }
    }

    /// Run one case; prints `test NAME ... ok (TIME)` or `... FAILED`.
    pub fn run<Fut: Future<Output = ()>>(
        &mut self,
        name: &str,
        case: impl FnOnce(&'a Path) -> Fut,
    ) {
        let t = std::time::Instant::now();
        let dir = self.dir;
        let r =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.rt.block_on(case(dir))));
        match r {
            Ok(()) => println!("test {name} ... ok ({:?})", t.elapsed()),
            Err(_) => {
                println!("test {name} ... FAILED");
                self.failed += 1;
            }
        }
    }

    /// Close what failed cases left running; exit 1 if any case failed.
    pub fn finish(self) {
        self.rt.block_on(close_leftovers(self.label_key));
        if self.failed > 0 {
            eprintln!("{} test(s) failed", self.failed);
            std::process::exit(1);
        }
    }
}
