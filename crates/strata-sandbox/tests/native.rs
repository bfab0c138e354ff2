//! The native backend (B1–B10) with a fake daemon
//! (`strata-sandbox-fake-daemon`): real namespaces, cgroups and processes.
//! The contract checks are the shared suite in strata-testkit's `contract`
//! (the docker backend runs the same one) through the native harness,
//! strata-testkit's `native` (the one a project VM's guest runs too,
//! docs/microvm.md); this file has one test per contract function and the
//! native-only check of a rootfs directory.
//! Needs root; without it every test FAILS with the reason.

use strata_testkit::contract;

use std::path::Path;
use std::time::Duration;

use contract::Harness;
use strata_sandbox::Backend;
use strata_testkit::native::Native;

const FAKE: &str = env!("CARGO_BIN_EXE_strata-sandbox-fake-daemon");

/// A state root and a Store of our own (under /var/tmp: a Sandbox has a
/// private /tmp, so a state root there is refused).
fn env() -> Native {
    Native::new(Path::new("/var/tmp"), Path::new(FAKE))
}

#[test]
fn lifecycle_create_start_list_reopen_stop_delete() {
    contract::lifecycle(&env());
}

#[test]
fn commands_see_no_fuse_and_no_state() {
    contract::commands_see_no_fuse_and_no_state(&env());
}

#[test]
fn a_daemon_that_dies_before_the_marker_is_reported_with_its_log() {
    contract::dies_before_marker(&env());
}

#[test]
fn a_daemon_without_a_marker_hits_the_deadline_and_is_killed() {
    contract::no_marker_hits_the_deadline(&env());
}

#[test]
fn a_wrong_first_line_is_not_a_marker() {
    contract::wrong_first_line(&env());
}

#[test]
fn a_taken_name_is_refused_never_adopted() {
    contract::taken_name_refused(&env());
}

#[test]
fn unknown_and_malformed_ids() {
    contract::unknown_and_malformed_ids(&env());
}

#[test]
fn the_token_never_goes_into_argv_or_env() {
    contract::token_never_in_argv_or_env(&env());
}

#[test]
fn bad_requests_are_refused_before_anything_is_created() {
    contract::bad_requests_refused(&env());
}

#[test]
fn both_backends_refuse_the_same_names_and_labels() {
    contract::bad_names_and_labels_refused(&env());
}

#[test]
fn launch_cleans_up_after_a_failed_start() {
    contract::launch_cleans_up(&env());
}

#[test]
fn stop_from_another_process_kills_a_daemon_that_ignores_sigterm() {
    contract::stop_kills_a_stubborn_daemon(&env());
}

#[test]
fn a_sandbox_outlives_the_process_that_created_it() {
    contract::outlives_its_creator(&env());
}

#[test]
fn concurrent_creates_with_one_name_give_one_sandbox() {
    contract::concurrent_creates_with_one_name(&env());
}

#[test]
fn delete_never_removes_through_a_host_mount() {
    contract::delete_never_removes_through_a_host_mount(&env());
}

#[test]
fn a_rootfs_directory_gets_a_copy_of_the_daemon_and_the_state_directory() {
    let env = env();
    let b = env.native();
    let rootfs = tempfile::tempdir_in("/var/tmp").unwrap();
    copy_libs(rootfs.path());
    let mut req = env.request(Some("rootfs"));
    req.root = strata_sandbox::RootFs::Dir {
        path: rootfs.path().into(),
        readonly: true,
    };
    let before = top_names(rootfs.path());
    let info = b.create(&req).unwrap();
    // Not reachable in place: run from a 0755 copy in the state directory.
    assert_eq!(info.daemon.exe, info.daemon.state_dir.join("bin/strata"));
    b.install_daemon(&info.id, &contract::install(&env, &info, "ok"))
        .unwrap();
    assert_eq!(contract::mode_of(&info.daemon.exe), 0o755);
    let started = b.start(&info.id, Duration::from_secs(10)).expect("start");
    assert!(started.marker.contains("socket="));
    let log = b.log_tail(&info.id, 20).unwrap();
    assert!(log.contains("store_ok=true"), "{log}");
    b.stop(&info.id, Duration::from_secs(5)).unwrap();
    b.delete(&info.id).unwrap();
    // No /workspace and no state directory path in the read-only rootfs:
    // both came from mount point layers. (/dev, /proc, /sys and /tmp are
    // created in it if missing, as documented on RootFs::Dir.)
    let mut after = top_names(rootfs.path());
    after.retain(|n| !["dev", "proc", "sys", "tmp"].contains(&n.as_str()));
    assert_eq!(after, before);
}

/// The shared libraries of the fake daemon at their host paths, for a
/// minimal rootfs.
fn copy_libs(dir: &Path) {
    let out = std::process::Command::new("ldd")
        .arg(FAKE)
        .output()
        .expect("run ldd");
    let text = String::from_utf8_lossy(&out.stdout);
    for l in text.lines() {
        let path = match l.split_once("=>") {
            Some((_, r)) => r.split_whitespace().next(),
            None => l.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            let dst = dir.join(&p[1..]);
            std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
            std::fs::copy(p, &dst).unwrap_or_else(|e| panic!("copy {p}: {e}"));
        }
    }
}

fn top_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_killed_daemon_restarts_on_the_same_state() {
    contract::restart_after_the_daemon_dies(&env());
}
