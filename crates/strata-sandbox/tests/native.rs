//! The native backend (B1–B10) with a fake daemon
//! (`strata-sandbox-fake-daemon`): real namespaces, cgroups and processes.
//! The contract checks are the shared suite in strata-testkit's `contract`
//! (the docker backend runs the same one); this file is the native
//! harness, its native-only checks (cgroups, the monitor, the state-root
//! mask, a rootfs directory) and one test per contract function.
//! Needs root; without it every test FAILS with the reason.

mod common;
use common::require_root;
use strata_testkit::contract;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use contract::{Edit, Harness};
use strata_sandbox::{
    Backend, Cgroup, CreateRequest, Limits, NativeBackend, SandboxId, SandboxInfo,
};

const FAKE: &str = env!("CARGO_BIN_EXE_strata-sandbox-fake-daemon");

/// A state root and a Store of our own (under /var/tmp: a Sandbox has a
/// private /tmp, so a state root there is refused).
struct Env {
    _root: tempfile::TempDir,
    store: tempfile::TempDir,
    backend: NativeBackend,
}

fn env() -> Env {
    require_root();
    let root = tempfile::tempdir_in("/var/tmp").expect("state root");
    let store = tempfile::tempdir_in("/var/tmp").expect("store");
    std::fs::write(store.path().join("seen-by-daemon"), "store content").unwrap();
    let backend = NativeBackend::new(root.path()).expect("backend");
    Env {
        _root: root,
        store,
        backend,
    }
}

fn host_mounts_mention(s: &str) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains(s))
        .map(String::from)
        .collect()
}

/// Run the fake daemon binary's backend subcommands from a fresh process.
fn fake(args: &[&std::ffi::OsStr]) -> Result<String, String> {
    let out = std::process::Command::new(FAKE)
        .args(args)
        .output()
        .expect("run the fake daemon");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Harness for Env {
    fn backend(&self) -> &dyn Backend {
        &self.backend
    }
    fn suite(&self) -> &'static str {
        "native"
    }
    fn store(&self) -> &Path {
        self.store.path()
    }
    fn request(&self, name: Option<&str>) -> CreateRequest {
        let mut req = CreateRequest::new(self.store.path());
        req.name = name.map(String::from);
        req.labels = BTreeMap::from([("suite".to_string(), "native".to_string())]);
        req.daemon_exe = Some(FAKE.into());
        // A limit, so that the Sandbox gets a cgroup and its removal is tested.
        req.limits = Limits {
            pids: Some(256),
            ..Limits::default()
        };
        req
    }
    fn host_path(&self, _info: &SandboxInfo, inside: &Path) -> PathBuf {
        // The state directory is bound at the same path inside and out.
        inside.to_path_buf()
    }
    fn open_elsewhere(&self, id: &SandboxId) -> Result<SandboxInfo, String> {
        let root = self.backend.state_root();
        let out = fake(&["open".as_ref(), root.as_os_str(), id.as_str().as_ref()])?;
        Ok(serde_json::from_str(&out).expect("SandboxInfo JSON"))
    }
    fn stop_elsewhere(&self, id: &SandboxId, grace: Duration) -> Result<(), String> {
        let root = self.backend.state_root();
        let ms = grace.as_millis().to_string();
        fake(&[
            "stop".as_ref(),
            root.as_os_str(),
            id.as_str().as_ref(),
            ms.as_ref(),
        ])
        .map(drop)
    }
    fn launch_elsewhere(&self) -> Result<SandboxId, String> {
        let root = self.backend.state_root();
        let out = fake(&[
            "launch".as_ref(),
            root.as_os_str(),
            self.store.path().as_os_str(),
        ])?;
        Ok(SandboxId(out.trim().to_string()))
    }
    fn extra_bad_requests(&self) -> Vec<(&'static str, Edit)> {
        use strata_sandbox::Expose;
        let expose =
            |p: PathBuf| -> Edit { Box::new(move |r| r.expose = vec![Expose::writable(&p)]) };
        let store = self.store.path().to_path_buf();
        let state = self.backend.state_root().to_path_buf();
        vec![
            ("image", Box::new(|r| r.image = Some("alpine".into()))),
            // Commands must never see a Store or strata's state, nor have
            // the Sandbox's own /proc replaced.
            ("overlaps the Store", expose(store.clone())),
            ("overlaps the Store", expose(store.parent().unwrap().into())),
            ("overlaps strata's Sandbox state", expose(state)),
            ("own /tmp, /proc", expose("/proc/self".into())),
            ("cannot be resolved", expose("/no/such/strata/path".into())),
            ("without '..'", expose("/usr/../etc".into())),
        ]
    }
    fn kill_daemon(&self, info: &SandboxInfo) {
        let monitor: u32 = info
            .handle
            .as_deref()
            .and_then(|h| h.parse().ok())
            .unwrap_or_else(|| panic!("no monitor pid in {:?}", info.handle));
        contract::kill9_daemon_below(monitor);
    }
    fn check_running(&self, info: &SandboxInfo, log: &str) {
        // Commands find the state root masked: an empty directory, not
        // even EACCES on the real one.
        assert!(
            log.contains("command_ls_state_root=exit=0 out=[]"),
            "command view of the state root: {log}"
        );
        // The Sandbox's mounts are not the host's; its cgroup exists.
        assert!(host_mounts_mention(info.id.as_str()).is_empty());
        let cg = format!("strata-{}", info.id);
        assert!(Cgroup::find(&cg).unwrap().is_some(), "no cgroup {cg}");
    }
    fn check_stopped(&self, info: &SandboxInfo) {
        let cg = format!("strata-{}", info.id);
        assert!(Cgroup::find(&cg).unwrap().is_none(), "cgroup {cg} left");
        if let Some(pid) = &info.handle {
            let alive = std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                .map(|c| c.contains("__strata-init"))
                .unwrap_or(false);
            assert!(!alive, "monitor {pid} still running");
        }
    }
    fn check_deleted(&self, info: &SandboxInfo) {
        assert!(host_mounts_mention(info.id.as_str()).is_empty());
    }
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
    let b = &env.backend;
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
