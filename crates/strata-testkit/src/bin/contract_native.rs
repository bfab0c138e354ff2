//! `strata-contract-native [--dir BASE] [--fake PATH] [NAME...]`: the
//! Backend contract suite (strata-testkit's `contract::CASES`) on the
//! native backend where this binary runs, through the same harness as
//! strata-sandbox's `tests/native.rs` (strata-testkit's `native`). Made to
//! run as root inside a project VM's guest (strata-microvm's one-shot
//! boot, docs/microvm.md), where libtest's runner and cargo are absent.
//!
//! It first prints `contract: Linux RELEASE as uid N, under DIR`. Each
//! case gets a fresh state root and Store under DIR, a new directory in
//! BASE (default `/var/tmp`; in a VM the project disk), and prints one
//! line on stdout,
//! `contract NAME ... ok (SECS s)` or `contract NAME ... FAILED: WHY`,
//! then a summary line `contract: N passed, M failed`. NAMEs pick the
//! cases whose name contains one of them. The fake daemon is `--fake`, or
//! `strata-sandbox-fake-daemon` beside this binary. Exit status 0 only if
//! every picked case passed and at least one was picked.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use strata_testkit::contract::CASES;
use strata_testkit::native::Native;

fn main() -> ExitCode {
    // Nothing re-executes this binary (the fake daemon is each Sandbox's
    // init), but every binary that starts Sandboxes calls this first
    // (ARCHITECTURE.md, strata-sandbox), so that it stays true if one does.
    strata_sandbox::maybe_run_internal();
    let mut base = PathBuf::from("/var/tmp");
    let mut fake = None;
    let mut filter = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--dir" | "--fake" => {
                let Some(v) = args.next() else {
                    eprintln!("strata-contract-native: {a} needs a value");
                    return ExitCode::from(2);
                };
                if a == "--dir" {
                    base = v.into();
                } else {
                    fake = Some(PathBuf::from(v));
                }
            }
            s if s.starts_with('-') => {
                eprintln!(
                    "strata-contract-native: unknown option {s}; usage: strata-contract-native [--dir BASE] [--fake PATH] [NAME...]"
                );
                return ExitCode::from(2);
            }
            _ => filter.push(a),
        }
    }
    let fake = match fake {
        Some(f) => f,
        None => match std::env::current_exe() {
            Ok(me) => me.with_file_name("strata-sandbox-fake-daemon"),
            Err(e) => {
                eprintln!("strata-contract-native: find this binary's directory: {e}");
                return ExitCode::from(2);
            }
        },
    };
    // One directory of this run's own under BASE (which others may share,
    // as /var/tmp), holding every case's state root and Store.
    let run = match std::fs::create_dir_all(&base).and_then(|()| {
        tempfile::Builder::new()
            .prefix("strata-contract-")
            .tempdir_in(&base)
    }) {
        Ok(d) => d,
        Err(e) => {
            eprintln!(
                "strata-contract-native: a directory under {}: {e}",
                base.display()
            );
            return ExitCode::from(2);
        }
    };
    let picked: Vec<_> = CASES
        .iter()
        .filter(|(name, _)| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str())))
        .collect();
    if picked.is_empty() {
        eprintln!("strata-contract-native: no case matches {filter:?}");
        return ExitCode::FAILURE;
    }
    // Where the suite ran, for a caller to check (a VM's test compares it
    // with the guest kernel it booted).
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    println!(
        "contract: Linux {} as uid {}, under {}",
        release.trim(),
        rustix::process::geteuid().as_raw(),
        run.path().display()
    );
    let all = Instant::now();
    let mut failed = 0;
    for (name, case) in &picked {
        let t = Instant::now();
        let r = std::panic::catch_unwind(|| case(&Native::new(run.path(), &fake)));
        match r {
            Ok(()) => println!(
                "contract {name} ... ok ({:.1} s)",
                t.elapsed().as_secs_f64()
            ),
            Err(p) => {
                failed += 1;
                println!("contract {name} ... FAILED: {}", panic_message(&*p));
            }
        }
        let _ = std::io::stdout().flush();
    }
    println!(
        "contract: {} passed, {failed} failed, {:.1} s",
        picked.len() - failed,
        all.elapsed().as_secs_f64()
    );
    leftover_report(run.path());
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The first line of a panic's message (the panic hook printed all of it
/// on stderr already).
fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    let s = p
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| p.downcast_ref::<&str>().copied())
        .unwrap_or("(a panic without a message)");
    s.lines().next().unwrap_or("").to_string()
}

/// Say on stderr what the cases left in the run's directory (each harness
/// removes its directories when it is dropped; a failed case may leave
/// some, e.g. a state directory a Sandbox still has mounts below).
fn leftover_report(base: &Path) {
    let left: Vec<String> = std::fs::read_dir(base)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    if !left.is_empty() {
        eprintln!(
            "strata-contract-native: left under {}: {}",
            base.display(),
            left.join(" ")
        );
    }
}
