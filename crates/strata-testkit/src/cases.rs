//! The harness of the test binaries that run with `harness = false`.
//!
//! Those binaries (strata-sdk's Sandbox tests, strata-torture's
//! `sandbox.rs` and `sandbox_limits.rs`) have their own `main` because the
//! binary is re-executed as the Sandbox init, the daemon and the exec
//! helper: `main` must call `strata_sdk::maybe_run_internal()` before
//! anything else, which libtest's generated `main` cannot do. This is what
//! such a `main` then needs from a harness: each case runs to its end or
//! panics; a panic is reported and counted and the next case still runs;
//! names given on the command line pick cases as libtest's filter does,
//! and `--skip NAME` leaves out the cases whose name contains NAME (as
//! libtest's, so that `cargo test --workspace -- --skip NAME` means the
//! same to every test binary);
//! `--ignored` (or `--include-ignored`) asks for the full forms; at the end
//! the caller's clean-up runs (closing what failed cases left running) and
//! the process exits 1 if a case failed or if the filter picked none.

use std::future::Future;
use std::path::Path;
use std::time::Instant;

/// Fail at once, with the reason, unless this process is root: the cases
/// of these binaries create native Sandboxes (CI runs them as root).
pub fn require_root() {
    assert!(
        rustix::process::geteuid().is_root(),
        "these tests create native Sandboxes: run them as root (CI does)"
    );
}

/// Runs cases one after the other on one runtime.
pub struct Cases<'a> {
    rt: &'a tokio::runtime::Runtime,
    dir: &'a Path,
    filter: Vec<String>,
    skip: Vec<String>,
    full: bool,
    ran: usize,
    failed: usize,
}

impl<'a> Cases<'a> {
    /// Cases under `dir`, picked by this process's arguments: every
    /// argument that does not start with `-` is a filter (a case runs when
    /// its name contains one); `--ignored` or `--include-ignored` sets
    /// [`Cases::full`].
    pub fn from_args(rt: &'a tokio::runtime::Runtime, dir: &'a Path) -> Self {
        let (mut filter, mut skip, mut full) = (Vec::new(), Vec::new(), false);
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            match a.as_str() {
                "--ignored" | "--include-ignored" => full = true,
                "--skip" => skip.extend(args.next()),
                _ => match a.strip_prefix("--skip=") {
                    Some(name) => skip.push(name.to_string()),
                    None if !a.starts_with('-') => filter.push(a),
                    None => {}
                },
            }
        }
        Cases {
            rt,
            dir,
            full,
            filter,
            skip,
            ran: 0,
            failed: 0,
        }
    }

    /// Whether the full (slow) forms were asked for.
    pub fn full(&self) -> bool {
        self.full
    }

    fn picked(&self, name: &str) -> bool {
        (self.filter.is_empty() || self.filter.iter().any(|f| name.contains(f.as_str())))
            && !self.skip.iter().any(|s| name.contains(s.as_str()))
    }

    /// Run one case with the shared directory; prints `test NAME ... ok
    /// (TIME)` or `test NAME ... FAILED` as libtest does.
    pub fn run<Fut: Future<Output = ()>>(
        &mut self,
        name: &str,
        case: impl FnOnce(&'a Path) -> Fut,
    ) {
        if !self.picked(name) {
            return;
        }
        let dir = self.dir;
        self.run_with(name, || case(dir));
    }

    /// Run one case with a fresh directory of its own, `DIR/NAME`.
    pub fn run_in_own_dir(&mut self, name: &str, case: impl AsyncFnOnce(&Path)) {
        if !self.picked(name) {
            return;
        }
        let dir = self.dir.join(name);
        if let Err(e) = std::fs::create_dir(&dir) {
            println!("test {name} ... FAILED (creating {}: {e})", dir.display());
            self.ran += 1;
            self.failed += 1;
            return;
        }
        self.run_with(name, || case(&dir));
    }

    fn run_with<Fut: Future<Output = ()>>(&mut self, name: &str, case: impl FnOnce() -> Fut) {
        self.ran += 1;
        let t = Instant::now();
        let rt = self.rt;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rt.block_on(case())));
        match r {
            Ok(()) => println!("test {name} ... ok ({:?})", t.elapsed()),
            Err(_) => {
                println!("test {name} ... FAILED");
                self.failed += 1;
            }
        }
    }

    /// Run `cleanup` (what failed cases left running), then exit 1 if a
    /// case failed or the filter picked none; return when all passed.
    pub fn finish<Fut: Future<Output = ()>>(self, cleanup: Fut) {
        self.rt.block_on(cleanup);
        if self.ran == 0 {
            eprintln!("no case matches {:?}", self.filter);
            std::process::exit(1);
        }
        if self.failed > 0 {
            eprintln!("{} test(s) failed", self.failed);
            std::process::exit(1);
        }
    }
}
