//! The fixture of the `strata run` tests (`run.rs`, `run_process.rs`):
//! a nonroot user (uid 1500) with /dev/fuse, a Store it owns, and helpers
//! to watch its processes and mounts.
//!
//!
//! Setup (needs root, as CI has): create the user if missing, give it
//! /dev/fuse the way an administrator would (`chmod 0666`, restored after),
//! and a Store it owns. Every assertion about data reads the committed tree
//! back from the Store (docs/design.md §4: a version elsewhere reported
//! success while discarding every write), never the exit status alone.
//!
//! The tests share /dev/fuse's mode and uid 1500's process list, so they
//! run one at a time (a lock). A test that cannot run fails with the reason.
#![allow(dead_code)]

use crate::common;
use assert_cmd::Command;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use strata_store::{EntryKind, ObjectId, Store, StoreOptions};

pub const UID: u32 = 1500;
pub const USER: &str = "strata-test";
/// strata's own failures in `strata run` (never the command's status).
pub const RUN_FAILED: i32 = 125;

pub static SERIAL: Mutex<()> = Mutex::new(());

/// The tests of both binaries change /dev/fuse's mode and count uid 1500's
/// processes: a lock file serializes them across test binaries too (cargo
/// runs binaries one after another, other runners may not).
fn cross_binary_lock() -> std::fs::File {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(std::env::temp_dir().join("strata-rootless-tests.lock"))
        .unwrap();
    rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive).unwrap();
    f
}

pub struct Fixture {
    pub tmp: tempfile::TempDir,
    pub store: PathBuf,
    _fuse: FuseMode,
    _serial: MutexGuard<'static, ()>,
    _lock: std::fs::File,
}

/// Sets /dev/fuse's mode, restores the original on drop (also on panic).
pub struct FuseMode(u32);

impl FuseMode {
    fn set(mode: u32) -> FuseMode {
        let old = std::fs::metadata("/dev/fuse")
            .unwrap_or_else(|e| panic!("cannot run: no /dev/fuse ({e})"))
            .mode()
            & 0o7777;
        std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(mode))
            .unwrap_or_else(|e| panic!("cannot run: chmod /dev/fuse: {e}"));
        FuseMode(old)
    }
}

impl Drop for FuseMode {
    fn drop(&mut self) {
        let _ = std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(self.0));
    }
}

pub fn ensure_user() {
    // Is uid 1500 known?
    let known = std::process::Command::new("getent")
        .args(["passwd", &UID.to_string()])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !known {
        let st = std::process::Command::new("useradd")
            .args([
                "-u",
                &UID.to_string(),
                "-M",
                "-N",
                "-s",
                "/usr/sbin/nologin",
                USER,
            ])
            .status()
            .unwrap_or_else(|e| panic!("cannot run: useradd: {e}"));
        assert!(
            st.success(),
            "cannot run: useradd -u {UID} {USER} failed: {st}"
        );
    }
}

pub fn chown_tree(p: &Path) {
    std::os::unix::fs::lchown(p, Some(UID), Some(UID)).unwrap();
    if p.is_dir() && !p.is_symlink() {
        for e in std::fs::read_dir(p).unwrap() {
            chown_tree(&e.unwrap().path());
        }
    }
}

/// The strata binary as uid 1500 can execute it. The build directory may
/// sit under a directory others cannot enter (e.g. a checkout in /root):
/// then a hard link (or copy) under /tmp/strata-rtest-bin/PID is used, and
/// those of dead test processes are removed.
pub fn user_bin() -> &'static Path {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let ok = std::process::Command::new("setpriv")
            .args([
                &format!("--reuid={UID}"),
                &format!("--regid={UID}"),
                "--clear-groups",
            ])
            .args(["--", "/bin/sh", "-c", r#"test -x "$0""#, common::BIN])
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return PathBuf::from(common::BIN);
        }
        let root = Path::new("/tmp/strata-rtest-bin");
        if let Ok(rd) = std::fs::read_dir(root) {
            for e in rd.flatten() {
                let alive = e
                    .file_name()
                    .to_str()
                    .is_some_and(|p| Path::new("/proc").join(p).exists());
                if !alive {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let dir = root.join(std::process::id().to_string());
        std::fs::create_dir_all(&dir).unwrap();
        for d in [root, dir.as_path()] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let bin = dir.join("strata");
        if std::fs::hard_link(common::BIN, &bin).is_err() {
            std::fs::copy(common::BIN, &bin).unwrap();
        }
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        bin
    })
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

impl Fixture {
    /// A Store owned by uid 1500 with project `p` imported from a tree
    /// that `populate` writes; /dev/fuse set to `fuse_mode`.
    pub fn new(fuse_mode: u32, populate: impl FnOnce(&Path)) -> Fixture {
        let serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let lock = cross_binary_lock();
        assert!(
            // SAFETY: geteuid has no preconditions.
            unsafe { libc::geteuid() } == 0,
            "cannot run: these tests need root to create uid {UID} and grant it /dev/fuse (CI runs them as root)"
        );
        assert!(
            Path::new("/usr/bin/setpriv").exists() || which("setpriv"),
            "cannot run: setpriv (util-linux) is missing"
        );
        ensure_user();
        let fuse = FuseMode::set(fuse_mode);
        let tmp = tempfile::Builder::new()
            .prefix("strata-rtest-")
            .tempdir()
            .unwrap();
        let src = tmp.path().join("src");
        std::fs::create_dir(&src).unwrap();
        populate(&src);
        std::fs::create_dir(tmp.path().join("sync")).unwrap();
        chown_tree(tmp.path());
        let f = Fixture {
            store: tmp.path().join("store"),
            tmp,
            _fuse: fuse,
            _serial: serial,
            _lock: lock,
        };
        f.user_ok(&["init"]);
        f.user_ok(&["project", "create", "p", "--from", s(&src), "-m", "base"]);
        f
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// `strata --store STORE ARGS` as uid 1500 with no supplementary groups.
    pub fn user(&self, args: &[&str]) -> Command {
        let mut c = Command::new("setpriv");
        c.args([
            &format!("--reuid={UID}"),
            &format!("--regid={UID}"),
            "--clear-groups",
            "--",
            s(user_bin()),
            "--store",
            s(&self.store),
        ])
        .args(args)
        .env_remove("STRATA_STORE")
        .env_remove("XDG_DATA_HOME")
        .env("STRATA_RTEST_TAG", tag())
        .env("HOME", self.tmp.path())
        .current_dir(self.tmp.path())
        .timeout(Duration::from_secs(120));
        c
    }

    pub fn user_ok(&self, args: &[&str]) -> Vec<u8> {
        let out = self.user(args).output().unwrap();
        assert!(
            out.status.success(),
            "strata {args:?} as uid {UID}: {:?}\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// `strata run p/main [FLAGS] -- sh -c SCRIPT` as the user.
    pub fn run_sh(&self, flags: &[&str], script: &str) -> std::process::Output {
        let mut args = vec!["run", "p/main"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--", "sh", "-c", script]);
        self.user(&args).output().unwrap()
    }

    /// Open a copy of the Store (as root, without leaving root-owned files
    /// in the user's Store) and return it with the head of p/main.
    pub fn read_back(&self) -> (Store, ObjectId, tempfile::TempDir) {
        let copy = tempfile::tempdir().unwrap();
        let dst = copy.path().join("store");
        std::fs::create_dir(&dst).unwrap();
        for e in std::fs::read_dir(&self.store).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
        }
        let store = Store::open(&dst, &StoreOptions::default()).unwrap();
        let head = store.resolve("p/main").unwrap().commit;
        (store, head, copy)
    }
}

pub fn kill9(pid: u32) {
    // SAFETY: kill has no memory arguments; the pid is one we just saw.
    let r = unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    assert_eq!(r, 0, "kill -9 {pid}: {}", std::io::Error::last_os_error());
}

pub fn which(p: &str) -> bool {
    std::env::var_os("PATH")
        .map(|ps| std::env::split_paths(&ps).any(|d| d.join(p).exists()))
        .unwrap_or(false)
}

pub fn file_bytes(store: &Store, head: ObjectId, path: &str) -> Option<Vec<u8>> {
    let e = store.read_path(head, path.as_bytes()).unwrap()?;
    match &e.kind {
        EntryKind::File(c) => Some(store.read_file_range(c, 0, c.size as usize).unwrap()),
        k => panic!("{path} is a {}", k.type_name()),
    }
}

pub fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn host_mounts() -> String {
    std::fs::read_to_string("/proc/self/mounts").unwrap()
}

/// Marks the processes of this test binary's runs (strata, helper, init,
/// command all inherit it), so that other uid 1500 processes on the machine
/// (a sandbox test's commands run as 1500 too) never count.
pub fn tag() -> &'static str {
    static TAG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TAG.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        format!("{}-{nanos}", std::process::id())
    })
}

/// Processes of uid 1500 started by this test binary's runs, right now.
pub fn user_pids() -> Vec<u32> {
    let needle = format!("STRATA_RTEST_TAG={}\0", tag());
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Ok(st) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            let uid = st
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u32>().ok());
            let ours = std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.windows(needle.len()).any(|w| w == needle.as_bytes()));
            if uid == Some(UID) && ours {
                out.push(pid);
            }
        }
    }
    out
}

/// uid 1500's scratch directories of `strata run` under the temp dir.
pub fn user_scratch_dirs() -> std::collections::BTreeSet<PathBuf> {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name().to_string_lossy().starts_with("strata-run-")
                && e.metadata().map(|m| m.uid() == UID).unwrap_or(false)
        })
        .map(|e| e.path())
        .collect()
}

pub fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn base_tree(src: &Path) {
    let w = |p: &str, b: &[u8]| {
        let p = src.join(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b).unwrap();
    };
    w("keep.txt", b"keep\n");
    w("del.txt", b"delete me\n");
    w("mv_src.txt", b"moved\n");
    w("link_src.txt", b"linked\n");
    w("trunc.txt", b"0123456789");
    w("chmod.txt", b"mode\n");
    w("sub/inner.txt", b"inner\n");
    std::fs::create_dir(src.join("dir_rm")).unwrap();
    std::fs::set_permissions(
        src.join("chmod.txt"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
}

/// Host pids of uid 1500's processes whose cmdline contains `needle`.
pub fn user_pids_with(needle: &str) -> Vec<u32> {
    user_pids()
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.windows(needle.len()).any(|w| w == needle.as_bytes()))
        })
        .collect()
}

/// The helper (the parent of the namespace init) and the init (pid 1 of
/// the command's PID namespace) both run as `strata __rootless-helper`.
pub fn helper_and_init() -> (u32, u32) {
    let hs = user_pids_with("__rootless-helper");
    assert_eq!(hs.len(), 2, "expected helper and init: {hs:?}");
    let ppid = |p: u32| -> u32 {
        let st = std::fs::read_to_string(format!("/proc/{p}/status")).unwrap();
        st.lines()
            .find_map(|l| l.strip_prefix("PPid:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    if ppid(hs[1]) == hs[0] {
        (hs[0], hs[1])
    } else {
        assert_eq!(ppid(hs[0]), hs[1]);
        (hs[1], hs[0])
    }
}

/// A spawned `assert_cmd` command whose output is collected at the end.
pub struct Running {
    pub child: Option<std::process::Child>,
    done: Option<std::process::Output>,
}

pub trait SpawnLater {
    fn spawn_output_later(&mut self) -> Running {
        self.spawn_output_later_in(None)
    }
    /// With `Some(0)`: in a new process group (as a shell does for a job).
    fn spawn_output_later_in(&mut self, pgroup: Option<i32>) -> Running;
}

impl SpawnLater for Command {
    fn spawn_output_later_in(&mut self, pgroup: Option<i32>) -> Running {
        let mut std_cmd = std::process::Command::new(self.get_program());
        std_cmd.args(self.get_args());
        for (k, v) in self.get_envs() {
            match v {
                Some(v) => std_cmd.env(k, v),
                None => std_cmd.env_remove(k),
            };
        }
        if let Some(d) = self.get_current_dir() {
            std_cmd.current_dir(d);
        }
        if let Some(g) = pgroup {
            std::os::unix::process::CommandExt::process_group(&mut std_cmd, g);
        }
        std_cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        Running {
            child: Some(std_cmd.spawn().unwrap()),
            done: None,
        }
    }
}

impl Running {
    pub fn try_wait_done(&mut self) -> bool {
        if self.done.is_some() {
            return true;
        }
        let exited = self
            .child
            .as_mut()
            .map(|c| c.try_wait().unwrap().is_some())
            .unwrap_or(true);
        if exited {
            let out = self.child.take().unwrap().wait_with_output().unwrap();
            panic!(
                "strata run ended early: {:?}\nstdout: {}\nstderr: {}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        false
    }

    pub fn kill9(&mut self) {
        let c = self.child.as_mut().unwrap();
        // setpriv execs strata, so this pid is the serving parent itself.
        kill9(c.id());
        let _ = c.wait();
        self.child = None;
    }

    pub fn finish(&mut self) -> std::process::Output {
        let c = self.child.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let pid = c.id();
        std::thread::spawn(move || {
            let _ = tx.send(c.wait_with_output().unwrap());
        });
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(o) => o,
            Err(_) => {
                let _ = std::process::Command::new("kill")
                    .args(["-9", &pid.to_string()])
                    .status();
                panic!("strata run did not finish within 120 s");
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
