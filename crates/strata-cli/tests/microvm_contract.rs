//! The Backend contract suite (strata-testkit's `contract`, B1–B10, the
//! one the native and docker backends pass on the host) inside a project
//! VM's guest under TCG: a one-shot boot (strata-microvm's `oneshot`) of
//! the same kernel, initramfs, userland and project disk a served VM
//! uses, whose init runs `strata-contract-native` as root on the native
//! backend with its state on the project disk, where the guest's server
//! keeps its Sandboxes' state (docs/microvm.md, "The contract suite in the
//! guest"). What the microVM route adds on the host (a killed VM booted
//! again, the disk kept, another project's own VM) is `microvm.rs`'s.
//!
//! Needs qemu-system-x86, linux-image-amd64 and the binaries the guest
//! runs, built beside `strata` (`cargo build -p strata-testkit -p
//! strata-sandbox --bins`; scripts/test does); without them it fails and
//! says so.

use std::path::{Path, PathBuf};
use std::time::Duration;

use strata_microvm::oneshot::{self, RunOutput, RunSpec};
use strata_microvm::vm::qemus_under;
use strata_microvm::VmConfig;
use strata_testkit::contract::CASES;

mod microvm_common;
use microvm_common::{require_qemu_and_kernel, Cleanup};

const BIN: &str = env!("CARGO_BIN_EXE_strata");

/// The one-shot boot ended as it should: nothing of the program left
/// running in the guest, the guest powered off by itself, no qemu left
/// under the test's directory.
fn ended_cleanly(out: &RunOutput, dir: &Path) {
    assert!(
        out.left.is_empty(),
        "left running in the guest: {:?}",
        out.left
    );
    assert!(out.clean_power_off, "the guest did not power off by itself");
    assert!(qemus_under(dir).is_empty(), "a qemu is left running");
}

/// A binary of this build directory (beside `strata`), or a failure that
/// says how to build it.
fn sibling(name: &str) -> PathBuf {
    let p = Path::new(BIN).with_file_name(name);
    assert!(
        p.is_file(),
        "{} is missing: build it with `cargo build -p strata-testkit -p strata-sandbox --bins` (scripts/test does)",
        p.display()
    );
    p
}

#[test]
fn the_contract_suite_passes_in_a_project_vms_guest() {
    require_qemu_and_kernel();
    let runner = sibling("strata-contract-native");
    let fake = sibling("strata-sandbox-fake-daemon");
    let tmp = tempfile::tempdir().unwrap();
    let _cleanup = Cleanup(tmp.path());
    let cfg = VmConfig::new(tmp.path().join("vms"), "contract", BIN.into());
    let spec = RunSpec {
        program: runner,
        // The project disk, where a served guest keeps its Sandboxes'
        // state (strata-microvm's guest::SANDBOX_ROOT is beside it).
        args: vec!["--dir".into(), "/mnt/disk/contract".into()],
        files: vec![fake],
        env: vec![],
        timeout: Duration::from_secs(900),
    };
    let out = oneshot::run(&cfg, &spec).expect("the one-shot boot");
    // Each case's line, then the suite's own figures (start and restart
    // to ready) from its stderr.
    eprintln!("{}", out.stdout);
    for l in out.stderr.lines().filter(|l| l.starts_with("native: ")) {
        eprintln!("in the guest: {l}");
    }
    eprintln!(
        "accel {:?}: boot to the program {} ms, the suite {} ms, powered off by itself: {}",
        out.accel, out.boot_ms, out.run_ms, out.clean_power_off
    );
    let report = format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert!(
        out.success(),
        "the suite failed in the guest (exit {:?}, signal {:?}):\n{report}\nconsole: {}",
        out.code,
        out.signal,
        out.console.display()
    );
    // It ran in the guest: its kernel, as root, on the project disk.
    let kernel =
        strata_microvm::Kernel::find(None, None, Path::new("/boot"), Path::new("/lib/modules"))
            .expect("the guest kernel");
    let head = out.stdout.lines().next().unwrap_or("");
    assert!(
        head.starts_with(&format!(
            "contract: Linux {} as uid 0, under /mnt/disk/contract/",
            kernel.version
        )),
        "not the guest's kernel, root and disk ({}): {head}",
        kernel.image.display()
    );
    // Every case, by name: one missing from the output fails here.
    let missing: Vec<&str> = CASES
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| {
            !out.stdout
                .lines()
                .any(|l| l.starts_with(&format!("contract {name} ... ok")))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "cases not passed in the guest: {missing:?} (a case added to the suite since \
         strata-contract-native was built? `cargo build -p strata-testkit --bins`)\n{report}"
    );
    let summary = format!("contract: {} passed, 0 failed", CASES.len());
    assert!(out.stdout.contains(&summary), "no {summary:?}:\n{report}");
    // Nothing left running: no process of the suite in the guest after
    // it (its Sandboxes' monitors, inits and daemons all stopped), the
    // guest powered off, qemu is gone.
    ended_cleanly(&out, tmp.path());
}

/// The one-shot boot hands back a failure as it is: the runner asked for a
/// case that does not exist exits 1 with its reason on stderr, and the VM
/// still powers off by itself, nothing left running.
#[test]
fn a_one_shot_boot_hands_back_a_failing_programs_status_and_stderr() {
    require_qemu_and_kernel();
    let tmp = tempfile::tempdir().unwrap();
    let _cleanup = Cleanup(tmp.path());
    let cfg = VmConfig::new(tmp.path().join("vms"), "failing", BIN.into());
    let spec = RunSpec {
        program: sibling("strata-contract-native"),
        args: vec!["no-such-case".into()],
        files: vec![sibling("strata-sandbox-fake-daemon")],
        env: vec![],
        timeout: Duration::from_secs(600),
    };
    let out = oneshot::run(&cfg, &spec).expect("the one-shot boot");
    assert_eq!(
        out.code,
        Some(1),
        "stdout {}\nstderr {}",
        out.stdout,
        out.stderr
    );
    assert!(!out.success());
    assert!(
        out.stderr.contains("no case matches [\"no-such-case\"]"),
        "stderr: {}",
        out.stderr
    );
    ended_cleanly(&out, tmp.path());
}

/// A program that does not end within the run's timeout: an error that
/// says so (with its output so far), and qemu killed, not left running.
#[test]
fn a_one_shot_program_that_does_not_end_is_stopped_with_its_vm() {
    require_qemu_and_kernel();
    let tmp = tempfile::tempdir().unwrap();
    let _cleanup = Cleanup(tmp.path());
    let cfg = VmConfig::new(tmp.path().join("vms"), "hanging", BIN.into());
    let spec = RunSpec {
        // The host's shell, lent /usr and all: it runs in the guest too.
        program: "/bin/sh".into(),
        args: vec!["-c".into(), "echo begun; exec sleep 3600".into()],
        files: vec![],
        env: vec![],
        timeout: Duration::from_secs(30),
    };
    let t0 = std::time::Instant::now();
    let e = oneshot::run(&cfg, &spec).unwrap_err().to_string();
    assert!(
        e.contains("the one-shot run in the VM of project hanging did not finish")
            && e.contains("the program did not end within 30 s of qemu's start")
            && e.contains("qemu was stopped"),
        "{e}"
    );
    assert!(t0.elapsed() < Duration::from_secs(90), "{:?}", t0.elapsed());
    assert!(qemus_under(tmp.path()).is_empty(), "a qemu is left running");
}
