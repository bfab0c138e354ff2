//! The native backend's [`Harness`] for the contract suite: a state root
//! and a Store of its own, the stand-in daemon `strata-sandbox-fake-daemon`
//! (which also reopens, stops and launches Sandboxes from a fresh process)
//! and the checks only the native backend can make (cgroups, the monitor,
//! the state-root mask). One source for the two places the native backend
//! runs the suite: strata-sandbox's `tests/native.rs` on the host, and
//! `strata-contract-native` (this crate's binary) inside a project VM's
//! guest (docs/microvm.md).

use std::path::{Path, PathBuf};
use std::time::Duration;

use strata_sandbox::{
    Backend, Cgroup, CreateRequest, Expose, NativeBackend, SandboxId, SandboxInfo,
};

use crate::contract::{self, Edit, Harness};

/// A native backend on a state root of its own, with a Store of its own,
/// both fresh directories under one base directory (removed on drop).
pub struct Native {
    _root: tempfile::TempDir,
    store: tempfile::TempDir,
    backend: NativeBackend,
    fake: PathBuf,
}

impl Native {
    /// A state root and a Store under `base`, which a Sandbox must see at
    /// the same path: not /tmp (a Sandbox has its own), e.g. /var/tmp on a
    /// host or the project disk in a VM. `fake` is the
    /// `strata-sandbox-fake-daemon` binary. Fails at once without root.
    pub fn new(base: &Path, fake: &Path) -> Native {
        crate::cases::require_root();
        let root = tempfile::tempdir_in(base)
            .unwrap_or_else(|e| panic!("a state root under {}: {e}", base.display()));
        let store = tempfile::tempdir_in(base)
            .unwrap_or_else(|e| panic!("a Store under {}: {e}", base.display()));
        std::fs::write(store.path().join("seen-by-daemon"), "store content").unwrap();
        let backend = NativeBackend::new(root.path()).expect("backend");
        assert!(
            fake.is_file(),
            "no fake daemon at {}: build it with `cargo build -p strata-sandbox --bins`",
            fake.display()
        );
        Native {
            _root: root,
            store,
            backend,
            fake: fake.to_path_buf(),
        }
    }

    /// The backend itself, for checks beyond the suite.
    pub fn native(&self) -> &NativeBackend {
        &self.backend
    }

    /// Run the fake daemon binary's backend subcommands from a fresh process.
    fn fake(&self, args: &[&std::ffi::OsStr]) -> Result<String, String> {
        let out = std::process::Command::new(&self.fake)
            .args(args)
            .output()
            .expect("run the fake daemon");
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
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

impl Harness for Native {
    fn backend(&self) -> &dyn Backend {
        &self.backend
    }
    fn suite(&self) -> &'static str {
        "native"
    }
    fn store(&self) -> &Path {
        self.store.path()
    }
    fn state_root(&self) -> &Path {
        self.backend.state_root()
    }
    fn request(&self, name: Option<&str>) -> CreateRequest {
        contract::suite_request(self.store.path(), "native", &self.fake, name)
    }
    fn host_path(&self, _info: &SandboxInfo, inside: &Path) -> PathBuf {
        // The state directory is bound at the same path inside and out.
        inside.to_path_buf()
    }
    fn open_elsewhere(&self, id: &SandboxId) -> Result<SandboxInfo, String> {
        let root = self.backend.state_root();
        let out = self.fake(&["open".as_ref(), root.as_os_str(), id.as_str().as_ref()])?;
        Ok(serde_json::from_str(&out).expect("SandboxInfo JSON"))
    }
    fn stop_elsewhere(&self, id: &SandboxId, grace: Duration) -> Result<(), String> {
        let root = self.backend.state_root();
        let ms = grace.as_millis().to_string();
        self.fake(&[
            "stop".as_ref(),
            root.as_os_str(),
            id.as_str().as_ref(),
            ms.as_ref(),
        ])
        .map(drop)
    }
    fn launch_elsewhere(&self) -> Result<SandboxId, String> {
        let root = self.backend.state_root();
        let out = self.fake(&[
            "launch".as_ref(),
            root.as_os_str(),
            self.store.path().as_os_str(),
        ])?;
        Ok(SandboxId(out.trim().to_string()))
    }
    fn extra_bad_requests(&self) -> Vec<(&'static str, Edit)> {
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
