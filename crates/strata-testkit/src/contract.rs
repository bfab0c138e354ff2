//! The Backend contract suite (docs/design.md §3, B1–B10), one suite for every
//! backend: each function takes a [`Harness`] and checks one part of the
//! contract through `&dyn Backend` only, with the stand-in daemon
//! `strata-sandbox-fake-daemon` (it prints the marker, listens on the
//! socket, logs what it observes, and has failure modes). Backends run it
//! from their own test files: strata-sandbox's `tests/native.rs` and
//! strata-docker's `tests/docker.rs` (one source, not a copy).
//!
//! What differs between backends goes through the harness: where the
//! daemon binary comes from, how a path the daemon sees maps to the host,
//! how a fresh process reopens a Sandbox, and checks only one backend can
//! make (cgroups, containers).

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use strata_sandbox::{
    launch, Backend, BackendError, CreateRequest, DaemonInstall, Endpoint, Filter, SandboxId,
    SandboxInfo, State,
};

/// What the suite needs from one backend.
pub trait Harness: Sync {
    fn backend(&self) -> &dyn Backend;
    /// The value of the `suite` label this harness's requests carry.
    fn suite(&self) -> &'static str;
    /// The Store directory (holds `seen-by-daemon`).
    fn store(&self) -> &Path;
    /// The backend's state root (a Store must neither contain it nor lie
    /// in it). Its parent directory also holds the suite's scratch files.
    fn state_root(&self) -> &Path;
    /// A valid request: the Store, label `suite=<suite>`, the fake daemon,
    /// whatever the backend needs (an image, a limit).
    fn request(&self, name: Option<&str>) -> CreateRequest;
    /// A path the daemon sees ([`SandboxInfo::daemon`]) as the host sees it.
    fn host_path(&self, info: &SandboxInfo, inside: &Path) -> PathBuf;
    /// Reopen by ID with no state shared with this process's backend.
    fn open_elsewhere(&self, id: &SandboxId) -> Result<SandboxInfo, String>;
    /// Stop with `grace` with no state shared with this process's backend.
    fn stop_elsewhere(&self, id: &SandboxId, grace: Duration) -> Result<(), String>;
    /// Create and start a Sandbox from a creator that then goes away.
    fn launch_elsewhere(&self) -> Result<SandboxId, String>;
    /// Invalid requests only this backend refuses: (what the error names, edit).
    fn extra_bad_requests(&self) -> Vec<(&'static str, Edit)>;
    /// SIGKILL the Sandbox's daemon process alone (not its init), as a
    /// crash would; e.g. with [`kill9_daemon_below`].
    fn kill_daemon(&self, info: &SandboxInfo);
    /// Backend-specific checks while running, after stop, after delete.
    fn check_running(&self, _info: &SandboxInfo, _log: &str) {}
    fn check_stopped(&self, _info: &SandboxInfo) {}
    fn check_deleted(&self, _info: &SandboxInfo) {}
}

/// One case of the suite.
pub type Case = fn(&dyn Harness);

// The cases where the start fails or a request is refused (B2, B5, B10).
mod refusals;
pub use refusals::{
    bad_names_and_labels_refused, bad_requests_refused, concurrent_creates_with_one_name,
    dies_before_marker, no_marker_hits_the_deadline, taken_name_refused,
    token_never_in_argv_or_env, unknown_and_malformed_ids, wrong_first_line,
};

/// Every case of the suite by name, in the order a whole-suite runner
/// takes them (strata-testkit's `strata-contract-native`, which a project
/// VM's guest runs, docs/microvm.md): a case listed here is run there and
/// asserted by name, so a new case belongs here as well as in each
/// backend's test file (strata-cli's `tests/tidy.rs` checks those).
pub const CASES: &[(&str, Case)] = &[
    ("lifecycle", lifecycle),
    (
        "commands_see_no_fuse_and_no_state",
        commands_see_no_fuse_and_no_state,
    ),
    ("dies_before_marker", dies_before_marker),
    ("no_marker_hits_the_deadline", no_marker_hits_the_deadline),
    ("wrong_first_line", wrong_first_line),
    ("taken_name_refused", taken_name_refused),
    (
        "concurrent_creates_with_one_name",
        concurrent_creates_with_one_name,
    ),
    ("unknown_and_malformed_ids", unknown_and_malformed_ids),
    ("token_never_in_argv_or_env", token_never_in_argv_or_env),
    ("bad_requests_refused", bad_requests_refused),
    ("bad_names_and_labels_refused", bad_names_and_labels_refused),
    ("launch_cleans_up", launch_cleans_up),
    ("stop_kills_a_stubborn_daemon", stop_kills_a_stubborn_daemon),
    ("outlives_its_creator", outlives_its_creator),
    (
        "delete_never_removes_through_a_host_mount",
        delete_never_removes_through_a_host_mount,
    ),
    (
        "restart_after_the_daemon_dies",
        restart_after_the_daemon_dies,
    ),
];

/// The request every harness starts [`Harness::request`] from: the Store,
/// label `suite=<suite>`, the fake daemon `daemon`, and a pids limit so
/// that the Sandbox gets a cgroup whose removal is tested.
pub fn suite_request(
    store: &Path,
    suite: &str,
    daemon: &Path,
    name: Option<&str>,
) -> CreateRequest {
    let mut req = CreateRequest::new(store);
    req.name = name.map(String::from);
    req.labels = BTreeMap::from([("suite".to_string(), suite.to_string())]);
    req.daemon_exe = Some(daemon.to_path_buf());
    req.limits = strata_sandbox::Limits {
        pids: Some(256),
        ..Default::default()
    };
    req
}

/// One change that makes a request invalid.
pub type Edit = Box<dyn Fn(&mut CreateRequest) + Sync>;

/// The fake daemon's install: its config names the daemon's paths.
pub fn install(h: &dyn Harness, info: &SandboxInfo, mode: &str) -> DaemonInstall {
    let config = serde_json::json!({
        "socket": info.daemon.socket,
        "log_file": info.daemon.log_file,
        "store": info.daemon.store,
        "host_store": h.store(),
        "mode": mode,
    });
    DaemonInstall {
        args: vec![
            "__strata-daemon".into(),
            "--config".into(),
            info.daemon.config.display().to_string(),
        ],
        env: vec![],
        config: serde_json::to_vec(&config).unwrap(),
    }
}

pub fn mode_of(p: &Path) -> u32 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .mode()
        & 0o7777
}

pub fn store_snapshot(p: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(p)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

fn socket_of(e: &Endpoint) -> &Path {
    match e {
        Endpoint::Unix { path } => path,
        other => panic!("expected a Unix socket endpoint, got {other:?}"),
    }
}

/// The fake daemon answers `ok` to every connection.
pub fn ask(sock: &Path) -> String {
    let mut reply = String::new();
    std::os::unix::net::UnixStream::connect(sock)
        .unwrap_or_else(|e| panic!("connect to the daemon at {}: {e}", sock.display()))
        .read_to_string(&mut reply)
        .unwrap();
    reply
}

/// Parent pid of `pid` (field 4 of /proc/PID/stat, counted after the
/// last ')' since the command name may hold spaces and parentheses).
fn ppid_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// SIGKILL the daemon below host process `root` (the native monitor, the
/// container's init): the descendant whose argv[1] is `__strata-daemon`
/// (the init's own argv carries it only after `--`). Returns its pid.
pub fn kill9_daemon_below(root: u32) -> u32 {
    let procs: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    let below = |mut p: u32| {
        for _ in 0..64 {
            match ppid_of(p) {
                Some(q) if q == root => return true,
                Some(q) if q > 1 => p = q,
                _ => return false,
            }
        }
        false
    };
    let daemon = procs
        .into_iter()
        .find(|&p| {
            let argv1 = std::fs::read(format!("/proc/{p}/cmdline"))
                .ok()
                .and_then(|c| c.split(|b| *b == 0).nth(1).map(<[u8]>::to_vec));
            argv1.as_deref() == Some(&b"__strata-daemon"[..]) && below(p)
        })
        .unwrap_or_else(|| panic!("no daemon process below {root}"));
    let pid = rustix::process::Pid::from_raw(daemon as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    daemon
}

/// Poll the backend until the Sandbox reads `want` (bounded).
fn wait_state(b: &dyn Backend, id: &SandboxId, want: State, within: Duration) -> SandboxInfo {
    let t0 = Instant::now();
    loop {
        let info = b.open(id).unwrap();
        if info.state == want {
            return info;
        }
        assert!(
            t0.elapsed() < within,
            "{id} still {:?} after {within:?}, want {want:?}",
            info.state
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// B1–B10 in one Sandbox's life.
pub fn lifecycle(h: &dyn Harness) {
    let b = h.backend();
    let before = store_snapshot(h.store());
    let name = format!("life-{}-{}", h.suite(), std::process::id());
    let info = b.create(&h.request(Some(&name))).expect("create");
    let id = info.id.clone();
    assert_eq!(info.state, State::Created);
    assert!(
        id.as_str().starts_with("sb-") && id.as_str().len() == 27,
        "{id}"
    );
    // B3: the token 0600, 64 hex digits, in a 0700 directory.
    assert_eq!(mode_of(&h.host_path(&info, &info.daemon.state_dir)), 0o700);
    assert_eq!(mode_of(&info.token_file), 0o600);
    let token = std::fs::read_to_string(&info.token_file).unwrap();
    assert_eq!(token.trim().len(), 64);
    assert!(token.trim().bytes().all(|c| c.is_ascii_hexdigit()));
    // Starting before the daemon is installed is refused.
    let e = b.start(&id, Duration::from_secs(5)).unwrap_err();
    assert!(matches!(e, BackendError::WrongState { .. }), "{e}");

    b.install_daemon(&id, &install(h, &info, "ok"))
        .expect("install");
    assert_eq!(mode_of(&h.host_path(&info, &info.daemon.config)), 0o600);
    let t0 = Instant::now();
    let started = b.start(&id, Duration::from_secs(20)).expect("start");
    eprintln!("{}: start to ready: {:?}", h.suite(), t0.elapsed());
    assert!(started.marker.starts_with("STRATA-DAEMON-READY socket="));
    // B6: the socket, 0600, reachable from the host.
    let sock = socket_of(&started.endpoint);
    assert_eq!(sock, h.host_path(&info, &info.daemon.socket));
    let meta = std::fs::metadata(sock).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.mode() & 0o777, 0o600);
    assert_eq!(ask(sock), "ok\n");
    assert_eq!(started.token_file, info.token_file);

    // B4 and B2, as the daemon saw them: root with CAP_SYS_ADMIN and
    // /dev/fuse, the Store bound for it, its host path not visible.
    let log = b.log_tail(&id, 50).unwrap();
    let seen = log
        .lines()
        .find(|l| l.starts_with("observed "))
        .unwrap_or_else(|| panic!("no observations in the log: {log}"));
    let capeff = seen
        .split_whitespace()
        .find_map(|f| f.strip_prefix("capeff="))
        .unwrap();
    let capeff = u64::from_str_radix(capeff, 16).unwrap();
    assert!(capeff & (1 << 21) != 0, "no CAP_SYS_ADMIN: {seen}");
    for want in [
        "uid=0",
        "dev_fuse=true",
        "store_ok=true",
        "host_store_hidden=true",
    ] {
        assert!(seen.contains(want), "{want} missing: {seen}");
    }
    // A command (exec helper, uid 1500) cannot list the daemon's private
    // directory (token, config, socket, the Store's mount point).
    let state_dir_view = log
        .lines()
        .find_map(|l| l.strip_prefix("command_ls_state_dir="))
        .unwrap_or_else(|| panic!("no command view of the state dir: {log}"));
    assert!(
        (!state_dir_view.starts_with("exit=0") || state_dir_view == "exit=0 out=[]")
            && !state_dir_view.starts_with("spawn"),
        "a command listed the daemon's state directory: {state_dir_view}"
    );
    h.check_running(&info, &log);

    // B10: by label and by name prefix.
    let by_label = b
        .list(&Filter {
            labels: BTreeMap::from([("suite".into(), h.suite().into())]),
            name_prefix: None,
        })
        .unwrap();
    assert_eq!(
        by_label.iter().map(|i| &i.id).collect::<Vec<_>>(),
        vec![&id]
    );
    let by_prefix = b
        .list(&Filter {
            name_prefix: Some(format!("life-{}-", h.suite())),
            ..Filter::default()
        })
        .unwrap();
    assert_eq!(by_prefix.len(), 1);
    assert_eq!(by_prefix[0].state, State::Running);
    for miss in [
        Filter {
            name_prefix: Some("other-".into()),
            ..Filter::default()
        },
        Filter {
            labels: BTreeMap::from([("suite".into(), "no-such-suite".into())]),
            name_prefix: None,
        },
    ] {
        assert!(b.list(&miss).unwrap().is_empty(), "{miss:?}");
    }

    // B8: reopen by exact ID, sharing nothing with this backend object.
    let other = h.open_elsewhere(&id).expect("reopen elsewhere");
    assert_eq!(other.state, State::Running);
    assert_eq!(other.name.as_deref(), Some(name.as_str()));
    assert_eq!(other.endpoint, Some(started.endpoint.clone()));
    assert_eq!(other.config.store, h.store().canonicalize().unwrap());
    assert_eq!(
        other.labels.get("suite").map(String::as_str),
        Some(h.suite())
    );

    // Deleting a running Sandbox and starting it twice are refused.
    let e = b.delete(&id).unwrap_err();
    assert!(matches!(e, BackendError::WrongState { .. }), "{e}");
    let e = b.start(&id, Duration::from_secs(1)).unwrap_err();
    assert!(matches!(e, BackendError::WrongState { .. }), "{e}");

    // B9: stop, then delete; the Store is untouched.
    b.stop(&id, Duration::from_secs(5)).expect("stop");
    assert_eq!(b.open(&id).unwrap().state, State::Stopped);
    assert_eq!(h.open_elsewhere(&id).unwrap().state, State::Stopped);
    h.check_stopped(&other);
    b.stop(&id, Duration::from_secs(1))
        .expect("stopping twice is fine");
    b.delete(&id).expect("delete");
    assert!(
        !h.host_path(&info, &info.daemon.state_dir).exists(),
        "state directory left"
    );
    h.check_deleted(&other);
    assert_eq!(store_snapshot(h.store()), before, "Store changed");
    assert!(matches!(b.open(&id), Err(BackendError::NotFound(_))));
}

/// What the daemon's commands see: no `/dev/fuse` (no FUSE mounts of
/// their own) and nothing of the Sandbox's private state directory (token,
/// config, socket, the Store's mount point), while the daemon itself has
/// both. The fake daemon runs each command through the real exec helper
/// as uid 1500 and logs its exit status and output.
pub fn commands_see_no_fuse_and_no_state(h: &dyn Harness) {
    let b = h.backend();
    let (info, _) = launch(
        b,
        &h.request(None),
        &|info| install(h, info, "ok"),
        Duration::from_secs(20),
    )
    .expect("launch");
    let log = b.log_tail(&info.id, 50).unwrap();
    let field = |key: &str| -> String {
        log.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in the log: {log}"))
            .to_string()
    };
    // The daemon has /dev/fuse, so the command's view is the one taking it away.
    assert!(field("observed ").contains("dev_fuse=true"), "{log}");
    // /dev lists fine, without fuse.
    let dev = field("command_ls_dev=");
    assert!(
        dev.starts_with("exit=0 "),
        "a command cannot list /dev: {dev}"
    );
    for want in ["null", "zero", "urandom", "tty", "pts", "shm"] {
        assert!(
            dev.split(['[', ']', ' ']).any(|w| w == want),
            "/dev lacks {want}: {dev}"
        );
    }
    assert!(
        !dev.split(['[', ']', ' ']).any(|w| w == "fuse"),
        "a command sees /dev/fuse: {dev}"
    );
    let fuse = field("command_stat_dev_fuse=");
    assert!(
        !fuse.starts_with("exit=0") && fuse.contains("No such file"),
        "/dev/fuse exists for a command: {fuse}"
    );
    // The state directory: absent or an empty mask, never its files.
    let state = field("command_ls_state_dir=");
    assert!(
        state == "exit=0 out=[]" || state.contains("No such file"),
        "a command sees the state directory: {state}"
    );
    let token = std::fs::read_to_string(&info.token_file).unwrap();
    let cat = field("command_cat_token=");
    assert!(
        !cat.starts_with("exit=0") && !cat.contains(token.trim()),
        "a command read the token: {cat}"
    );
    b.stop(&info.id, Duration::from_secs(5)).expect("stop");
    b.delete(&info.id).expect("delete");
}

/// `launch` deletes what a failed start left; succeeds otherwise.
pub fn launch_cleans_up(h: &dyn Harness) {
    let b = h.backend();
    let name = format!("launched-{}-{}", h.suite(), std::process::id());
    let e = launch(
        b,
        &h.request(Some(&name)),
        &|info| install(h, info, "die"),
        Duration::from_secs(10),
    )
    .unwrap_err();
    assert!(e.to_string().contains("simulated failure"), "{e}");
    assert!(b.list(&Filter::default()).unwrap().is_empty());
    let (info, started) = launch(
        b,
        &h.request(Some(&name)),
        &|info| install(h, info, "ok"),
        Duration::from_secs(20),
    )
    .expect("launch");
    assert_eq!(info.state, State::Running);
    assert_eq!(info.marker.as_deref(), Some(started.marker.as_str()));
    b.stop(&info.id, Duration::from_secs(5)).unwrap();
    b.delete(&info.id).unwrap();
}

/// B9: stop from elsewhere kills a daemon that ignores SIGTERM once the
/// grace period has passed.
pub fn stop_kills_a_stubborn_daemon(h: &dyn Harness) {
    let b = h.backend();
    let info = b.create(&h.request(None)).unwrap();
    b.install_daemon(&info.id, &install(h, &info, "stubborn"))
        .unwrap();
    b.start(&info.id, Duration::from_secs(20)).unwrap();
    let t0 = Instant::now();
    h.stop_elsewhere(&info.id, Duration::from_millis(300))
        .expect("stop from elsewhere");
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(8),
        "{took:?}"
    );
    assert!(b
        .log_tail(&info.id, 10)
        .unwrap()
        .contains("ignoring SIGTERM"));
    let opened = b.open(&info.id).unwrap();
    assert_eq!(opened.state, State::Stopped);
    h.check_stopped(&opened);
    b.delete(&info.id).unwrap();
    assert!(!h.host_path(&info, &info.daemon.state_dir).exists());
}

/// B8: a Sandbox outlives the process (or object) that created it.
pub fn outlives_its_creator(h: &dyn Harness) {
    let b = h.backend();
    let id = h.launch_elsewhere().expect("launch elsewhere");
    let info = b.open(&id).expect("reopen after the creator went away");
    assert_eq!(info.state, State::Running);
    let sock = socket_of(info.endpoint.as_ref().expect("an endpoint"));
    assert_eq!(ask(sock), "ok\n");
    b.stop(&id, Duration::from_secs(5)).unwrap();
    assert_eq!(b.open(&id).unwrap().state, State::Stopped);
    b.delete(&id).unwrap();
}

/// B9: delete never removes through a host mount (the Store survives).
pub fn delete_never_removes_through_a_host_mount(h: &dyn Harness) {
    let b = h.backend();
    let info = b.create(&h.request(None)).unwrap();
    let store_mp = h.host_path(&info, &info.daemon.store);
    let st = std::process::Command::new("mount")
        .args([
            "--bind".as_ref(),
            h.store().as_os_str(),
            store_mp.as_os_str(),
        ])
        .status()
        .unwrap();
    assert!(st.success(), "mount --bind");
    let e = b.delete(&info.id).unwrap_err();
    let unmounted = std::process::Command::new("umount")
        .arg(&store_mp)
        .status()
        .unwrap();
    assert!(e.to_string().contains("host mounts below it"), "{e}");
    assert!(h.store().join("seen-by-daemon").exists(), "Store damaged");
    assert!(unmounted.success());
    b.delete(&info.id).unwrap();
    assert!(h.store().join("seen-by-daemon").exists());
}

/// B4+B5 again: a Sandbox whose daemon was killed (SIGKILL, the daemon
/// alone) restarts on the same state: same ID, token, socket, log and
/// record; a stopped one restarts too; a running or never-started one is
/// refused and left as it was.
pub fn restart_after_the_daemon_dies(h: &dyn Harness) {
    let b = h.backend();
    let before = store_snapshot(h.store());
    let name = format!("restart-{}-{}", h.suite(), std::process::id());
    let info = b.create(&h.request(Some(&name))).unwrap();
    let id = info.id.clone();
    let e = b.restart(&id, Duration::from_secs(5)).unwrap_err();
    assert!(matches!(e, BackendError::WrongState { .. }), "created: {e}");
    b.install_daemon(&id, &install(h, &info, "ok")).unwrap();
    let e = b.restart(&id, Duration::from_secs(5)).unwrap_err();
    assert!(
        matches!(e, BackendError::WrongState { .. }),
        "installed: {e}"
    );
    let first = b.start(&id, Duration::from_secs(20)).expect("start");
    let sock = socket_of(&first.endpoint).to_path_buf();
    let token = std::fs::read_to_string(&info.token_file).unwrap();

    // Running: refused, and the daemon is untouched.
    let e = b.restart(&id, Duration::from_secs(5)).unwrap_err();
    assert!(
        matches!(
            e,
            BackendError::WrongState {
                state: State::Running,
                ..
            }
        ),
        "running: {e}"
    );
    assert_eq!(ask(&sock), "ok\n");

    // The daemon dies alone; the Sandbox reads stopped, its record stays.
    let running = b.open(&id).unwrap();
    h.kill_daemon(&running);
    wait_state(b, &id, State::Stopped, Duration::from_secs(20));
    assert!(
        std::os::unix::net::UnixStream::connect(&sock).is_err(),
        "a dead daemon still answers"
    );

    let t0 = Instant::now();
    let again = b.restart(&id, Duration::from_secs(20)).expect("restart");
    eprintln!("{}: restart to ready: {:?}", h.suite(), t0.elapsed());
    assert!(again.marker.starts_with("STRATA-DAEMON-READY socket="));
    assert_eq!(again.endpoint, first.endpoint, "same socket path");
    assert_eq!(again.token_file, first.token_file, "same token file");
    assert_eq!(std::fs::read_to_string(&info.token_file).unwrap(), token);
    assert_eq!(ask(&sock), "ok\n");
    let reopened = h.open_elsewhere(&id).expect("reopen after restart");
    assert_eq!(reopened.state, State::Running);
    assert_eq!(reopened.id, id);
    assert_eq!(reopened.name.as_deref(), Some(name.as_str()));
    assert_eq!(reopened.config, running.config, "same config");
    assert_eq!(reopened.marker.as_deref(), Some(again.marker.as_str()));
    // One log for the Sandbox's life: both runs are in it.
    let log = b.log_tail(&id, 400).unwrap();
    assert_eq!(log.matches("fake daemon starting").count(), 2, "{log}");
    h.check_running(&reopened, &log);

    // After a clean stop it restarts as well.
    b.stop(&id, Duration::from_secs(5)).unwrap();
    h.check_stopped(&b.open(&id).unwrap());
    b.restart(&id, Duration::from_secs(20))
        .expect("restart after stop");
    assert_eq!(ask(&sock), "ok\n");
    assert_eq!(b.open(&id).unwrap().state, State::Running);

    b.stop(&id, Duration::from_secs(5)).unwrap();
    b.delete(&id).unwrap();
    h.check_deleted(&reopened);
    assert_eq!(store_snapshot(h.store()), before, "Store changed");
}
