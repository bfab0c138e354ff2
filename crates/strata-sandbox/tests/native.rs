//! The native backend (B1–B10) with a fake daemon
//! (`strata-sandbox-fake-daemon`): real namespaces, cgroups and processes.
//! Needs root; without it every test FAILS with the reason.

mod common;
use common::require_root;

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use strata_sandbox::{
    launch, Backend, BackendError, Cgroup, CreateRequest, DaemonInstall, Endpoint, Filter, Limits,
    NativeBackend, SandboxId, SandboxInfo, State,
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

fn request(env: &Env, name: Option<&str>) -> CreateRequest {
    let mut req = CreateRequest::new(env.store.path());
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

fn install(env: &Env, info: &SandboxInfo, mode: &str) -> DaemonInstall {
    let config = serde_json::json!({
        "socket": info.daemon.socket,
        "log_file": info.daemon.log_file,
        "store": info.daemon.store,
        "host_store": env.store.path(),
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

fn mode_of(p: &Path) -> u32 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .mode()
        & 0o7777
}

fn store_snapshot(p: &Path) -> Vec<(String, Vec<u8>)> {
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

fn host_mounts_mention(s: &str) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains(s))
        .map(String::from)
        .collect()
}

/// Reopen by ID from a fresh process (the fake daemon binary's `open`).
fn open_elsewhere(root: &Path, id: &SandboxId) -> Result<SandboxInfo, String> {
    let out = std::process::Command::new(FAKE)
        .args(["open".as_ref(), root.as_os_str(), id.as_str().as_ref()])
        .output()
        .expect("run the fake daemon's open");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(serde_json::from_slice(&out.stdout).expect("SandboxInfo JSON"))
}

#[test]
fn lifecycle_create_start_list_reopen_stop_delete() {
    let env = env();
    let b = &env.backend;
    let before = store_snapshot(env.store.path());
    let name = format!("life-{}", std::process::id());
    let info = b.create(&request(&env, Some(&name))).expect("create");
    let id = info.id.clone();
    assert_eq!(info.state, State::Created);
    assert!(
        id.as_str().starts_with("sb-") && id.as_str().len() == 27,
        "{id}"
    );
    // B3: token 0600, 64 hex digits, in a 0700 directory.
    assert_eq!(mode_of(&info.daemon.state_dir), 0o700);
    assert_eq!(mode_of(&info.token_file), 0o600);
    let token = std::fs::read_to_string(&info.token_file).unwrap();
    assert_eq!(token.trim().len(), 64);
    assert!(token.trim().bytes().all(|c| c.is_ascii_hexdigit()));
    // Starting before the daemon is installed is refused.
    let e = b.start(&id, Duration::from_secs(5)).unwrap_err();
    assert!(matches!(e, BackendError::WrongState { .. }), "{e}");

    b.install_daemon(&id, &install(&env, &info, "ok"))
        .expect("install");
    assert_eq!(mode_of(&info.daemon.config), 0o600);
    let t0 = Instant::now();
    let started = b.start(&id, Duration::from_secs(10)).expect("start");
    eprintln!("create-to-ready (start): {:?}", t0.elapsed());
    assert!(started.marker.starts_with("STRATA-DAEMON-READY socket="));
    // B6: the socket, 0600, reachable from the host.
    let Endpoint::Unix { path: sock } = &started.endpoint else {
        panic!("{:?}", started.endpoint)
    };
    assert_eq!(sock, &info.daemon.socket);
    let meta = std::fs::metadata(sock).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.mode() & 0o777, 0o600);
    let mut reply = String::new();
    std::os::unix::net::UnixStream::connect(sock)
        .expect("connect to the daemon")
        .read_to_string(&mut reply)
        .unwrap();
    assert_eq!(reply, "ok\n");
    assert_eq!(started.token_file, info.token_file);

    // B4 and B2, as the daemon saw them: root with CAP_SYS_ADMIN and
    // /dev/fuse, the Store bound for it, its host path hidden.
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
    // A command (exec helper, uid 1500) finds the state root masked: an
    // empty directory, not even EACCES on the real one.
    assert!(
        log.contains("command_ls_state_root=exit=0 out=[]"),
        "command view of the state root: {log}"
    );

    // B10: by label and by name prefix.
    let by_label = b
        .list(&Filter {
            labels: BTreeMap::from([("suite".into(), "native".into())]),
            name_prefix: None,
        })
        .unwrap();
    assert_eq!(
        by_label.iter().map(|i| &i.id).collect::<Vec<_>>(),
        vec![&id]
    );
    let by_prefix = b
        .list(&Filter {
            name_prefix: Some("life-".into()),
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
            labels: BTreeMap::from([("suite".into(), "docker".into())]),
            name_prefix: None,
        },
    ] {
        assert!(b.list(&miss).unwrap().is_empty(), "{miss:?}");
    }

    // B8: reopen by exact ID from a fresh process.
    let other = open_elsewhere(b.state_root(), &id).expect("reopen from a fresh process");
    assert_eq!(other.state, State::Running);
    assert_eq!(other.name.as_deref(), Some(name.as_str()));
    assert_eq!(other.endpoint, Some(started.endpoint.clone()));
    assert_eq!(other.config.store, env.store.path().canonicalize().unwrap());

    // The Sandbox's mounts are not the host's; its cgroup exists.
    assert!(host_mounts_mention(id.as_str()).is_empty());
    let cg = format!("strata-{id}");
    assert!(Cgroup::find(&cg).unwrap().is_some(), "no cgroup {cg}");
    // Deleting a running Sandbox and starting it twice are refused.
    let e = b.delete(&id).unwrap_err();
    assert!(matches!(e, BackendError::WrongState { .. }), "{e}");
    let e = b.start(&id, Duration::from_secs(1)).unwrap_err();
    assert!(matches!(e, BackendError::WrongState { .. }), "{e}");

    // B9: stop, then delete.
    let monitor: u32 = other.handle.unwrap().parse().unwrap();
    b.stop(&id, Duration::from_secs(5)).expect("stop");
    assert_eq!(b.open(&id).unwrap().state, State::Stopped);
    assert_eq!(
        open_elsewhere(b.state_root(), &id).unwrap().state,
        State::Stopped
    );
    assert!(Cgroup::find(&cg).unwrap().is_none(), "cgroup {cg} left");
    b.stop(&id, Duration::from_secs(1))
        .expect("stopping twice is fine");
    b.delete(&id).expect("delete");
    assert!(!info.daemon.state_dir.exists(), "state directory left");
    assert!(host_mounts_mention(id.as_str()).is_empty());
    assert!(
        !Path::new(&format!("/proc/{monitor}")).exists()
            || std::fs::read_to_string(format!("/proc/{monitor}/cmdline"))
                .map(|c| !c.contains("__strata-init"))
                .unwrap_or(true),
        "monitor {monitor} still running"
    );
    assert_eq!(store_snapshot(env.store.path()), before, "Store changed");
    assert!(matches!(b.open(&id), Err(BackendError::NotFound(_))));
}

#[test]
fn a_daemon_that_dies_before_the_marker_is_reported_with_its_log() {
    let env = env();
    let b = &env.backend;
    let info = b.create(&request(&env, None)).unwrap();
    b.install_daemon(&info.id, &install(&env, &info, "die"))
        .unwrap();
    let t0 = Instant::now();
    // A long deadline: the monitor's exit must end the wait, not the deadline.
    let e = b.start(&info.id, Duration::from_secs(30)).unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    let BackendError::Step { step, log_tail, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!(*step, "start");
    assert!(
        log_tail.contains("simulated failure before the marker"),
        "{e}"
    );
    assert!(
        e.to_string().contains("exited before its startup marker"),
        "{e}"
    );
    assert_eq!(b.open(&info.id).unwrap().state, State::Stopped);
    b.delete(&info.id).unwrap();
    assert!(!info.daemon.state_dir.exists());
    assert!(Cgroup::find(&format!("strata-{}", info.id))
        .unwrap()
        .is_none());
}

#[test]
fn a_daemon_without_a_marker_hits_the_deadline_and_is_killed() {
    let env = env();
    let b = &env.backend;
    let info = b.create(&request(&env, None)).unwrap();
    b.install_daemon(&info.id, &install(&env, &info, "hang"))
        .unwrap();
    let t0 = Instant::now();
    let e = b.start(&info.id, Duration::from_millis(800)).unwrap_err();
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(800) && took < Duration::from_secs(5),
        "{took:?}"
    );
    let BackendError::NoMarker { log_tail, .. } = &e else {
        panic!("{e}")
    };
    assert!(log_tail.contains("hanging without a marker"), "{e}");
    let opened = b.open(&info.id).unwrap();
    assert_eq!(opened.state, State::Stopped);
    let pid = opened.handle.unwrap();
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "monitor {pid} left"
    );
    assert!(Cgroup::find(&format!("strata-{}", info.id))
        .unwrap()
        .is_none());
    b.delete(&info.id).unwrap();
}

#[test]
fn a_wrong_first_line_is_not_a_marker() {
    let env = env();
    let b = &env.backend;
    let info = b.create(&request(&env, None)).unwrap();
    b.install_daemon(&info.id, &install(&env, &info, "garbage"))
        .unwrap();
    let e = b.start(&info.id, Duration::from_secs(10)).unwrap_err();
    assert!(e.to_string().contains("not its startup marker"), "{e}");
    b.delete(&info.id).unwrap();
}

#[test]
fn a_taken_name_is_refused_never_adopted() {
    let env = env();
    let b = &env.backend;
    let first = b.create(&request(&env, Some("dup"))).unwrap();
    let e = b.create(&request(&env, Some("dup"))).unwrap_err();
    match &e {
        BackendError::NameTaken { name, id } => {
            assert_eq!(name, "dup");
            assert_eq!(id, &first.id);
        }
        other => panic!("{other}"),
    }
    assert_eq!(b.list(&Filter::default()).unwrap().len(), 1);
    b.delete(&first.id).unwrap();
    let again = b.create(&request(&env, Some("dup"))).unwrap();
    assert_ne!(again.id, first.id, "an ID is never reused");
    b.delete(&again.id).unwrap();
}

#[test]
fn unknown_and_malformed_ids() {
    let env = env();
    let b = &env.backend;
    let unknown = SandboxId("sb-000000000000000000000000".into());
    assert!(matches!(b.open(&unknown), Err(BackendError::NotFound(_))));
    assert!(matches!(
        b.stop(&unknown, Duration::ZERO),
        Err(BackendError::NotFound(_))
    ));
    assert!(matches!(b.delete(&unknown), Err(BackendError::NotFound(_))));
    assert!(open_elsewhere(b.state_root(), &unknown)
        .unwrap_err()
        .contains("not found"));
    for bad in ["../../etc", "sb-1", "", "sb-000000000000000000000000/.."] {
        let e = b.open(&SandboxId(bad.into())).unwrap_err();
        assert!(matches!(e, BackendError::BadId(_)), "{bad}: {e}");
    }
}

#[test]
fn the_token_never_goes_into_argv_or_env() {
    let env = env();
    let b = &env.backend;
    let info = b.create(&request(&env, None)).unwrap();
    let token = std::fs::read_to_string(&info.token_file).unwrap();
    let mut bad = install(&env, &info, "ok");
    bad.env.push(("STRATA_TOKEN".into(), token.trim().into()));
    let e = b.install_daemon(&info.id, &bad).unwrap_err();
    assert!(e.to_string().contains("bearer token"), "{e}");
    let mut bad = install(&env, &info, "ok");
    bad.args.push(format!("--token={}", token.trim()));
    assert!(b.install_daemon(&info.id, &bad).is_err());
    b.delete(&info.id).unwrap();
}

/// One change that makes a request invalid.
type Edit = Box<dyn Fn(&mut CreateRequest)>;

#[test]
fn bad_requests_are_refused_before_anything_is_created() {
    let env = env();
    let b = &env.backend;
    // A plain file (0644) in the Store's parent cannot be the daemon.
    let not_exe_file = tempfile::NamedTempFile::new_in("/var/tmp").unwrap();
    let not_exe = not_exe_file.path().to_path_buf();
    let cases: Vec<(&str, Edit)> = vec![
        ("name", Box::new(|r| r.name = Some("a/b".into()))),
        ("image", Box::new(|r| r.image = Some("alpine".into()))),
        (
            "mount point",
            Box::new(|r| r.mountpoints = vec!["rel".into()]),
        ),
        (
            "Store",
            Box::new(|r| r.store = PathBuf::from("/var/tmp/strata-no-such-store")),
        ),
        (
            "daemon binary",
            Box::new(move |r| r.daemon_exe = Some(not_exe.clone())),
        ),
    ];
    for (what, edit) in cases {
        let mut req = request(&env, None);
        edit(&mut req);
        let e = b.create(&req).unwrap_err();
        assert!(e.to_string().contains(what), "{what}: {e}");
    }
    // The Store must not contain the state root.
    let mut req = request(&env, None);
    req.store = "/var".into();
    assert!(b.create(&req).is_err());
    assert!(b.list(&Filter::default()).unwrap().is_empty());
}

#[test]
fn launch_cleans_up_after_a_failed_start() {
    let env = env();
    let b = &env.backend;
    let e = launch(
        b,
        &request(&env, Some("launched")),
        &|info| install(&env, info, "die"),
        Duration::from_secs(10),
    )
    .unwrap_err();
    assert!(e.to_string().contains("simulated failure"), "{e}");
    assert!(b.list(&Filter::default()).unwrap().is_empty());
    let (info, started) = launch(
        b,
        &request(&env, Some("launched")),
        &|info| install(&env, info, "ok"),
        Duration::from_secs(10),
    )
    .expect("launch");
    assert_eq!(info.state, State::Running);
    assert_eq!(info.marker.as_deref(), Some(started.marker.as_str()));
    b.stop(&info.id, Duration::from_secs(5)).unwrap();
    b.delete(&info.id).unwrap();
}

#[test]
fn stop_from_another_process_kills_a_daemon_that_ignores_sigterm() {
    let env = env();
    let b = &env.backend;
    let info = b.create(&request(&env, None)).unwrap();
    b.install_daemon(&info.id, &install(&env, &info, "stubborn"))
        .unwrap();
    b.start(&info.id, Duration::from_secs(10)).unwrap();
    let t0 = Instant::now();
    let out = std::process::Command::new(FAKE)
        .args([
            "stop".as_ref(),
            b.state_root().as_os_str(),
            info.id.as_str().as_ref(),
            "300".as_ref(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "stop from a fresh process: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // SIGTERM ignored: the grace period passed, then SIGKILL ended it.
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert!(b
        .log_tail(&info.id, 10)
        .unwrap()
        .contains("ignoring SIGTERM"));
    assert_eq!(b.open(&info.id).unwrap().state, State::Stopped);
    assert!(Cgroup::find(&format!("strata-{}", info.id))
        .unwrap()
        .is_none());
    b.delete(&info.id).unwrap();
    assert!(!info.daemon.state_dir.exists());
}

#[test]
fn a_rootfs_directory_gets_a_copy_of_the_daemon_and_the_state_directory() {
    let env = env();
    let b = &env.backend;
    let rootfs = tempfile::tempdir_in("/var/tmp").unwrap();
    copy_libs(rootfs.path());
    let mut req = request(&env, Some("rootfs"));
    req.root = strata_sandbox::RootFs::Dir {
        path: rootfs.path().into(),
        readonly: true,
    };
    let before = top_names(rootfs.path());
    let info = b.create(&req).unwrap();
    // Not reachable in place: run from a 0755 copy in the state directory.
    assert_eq!(info.daemon.exe, info.daemon.state_dir.join("bin/strata"));
    b.install_daemon(&info.id, &install(&env, &info, "ok"))
        .unwrap();
    assert_eq!(mode_of(&info.daemon.exe), 0o755);
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
fn a_sandbox_outlives_the_process_that_created_it() {
    let env = env();
    let b = &env.backend;
    let out = std::process::Command::new(FAKE)
        .args([
            "launch".as_ref(),
            b.state_root().as_os_str(),
            env.store.path().as_os_str(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "launch: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = SandboxId(String::from_utf8_lossy(&out.stdout).trim().to_string());
    // The creator has exited: the Sandbox runs on and answers.
    let info = b.open(&id).expect("reopen after the creator exited");
    assert_eq!(info.state, State::Running);
    let Some(Endpoint::Unix { path }) = &info.endpoint else {
        panic!("{info:?}")
    };
    let mut reply = String::new();
    std::os::unix::net::UnixStream::connect(path)
        .expect("connect")
        .read_to_string(&mut reply)
        .unwrap();
    assert_eq!(reply, "ok\n");
    b.stop(&id, Duration::from_secs(5)).unwrap();
    assert_eq!(b.open(&id).unwrap().state, State::Stopped);
    b.delete(&id).unwrap();
}

#[test]
fn concurrent_creates_with_one_name_give_one_sandbox() {
    let env = env();
    let results: Vec<Result<SandboxInfo, BackendError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|_| s.spawn(|| env.backend.create(&request(&env, Some("race")))))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ok: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(ok.len(), 1, "{results:?}");
    for r in &results {
        if let Err(e) = r {
            assert!(
                matches!(e, BackendError::NameTaken { id, .. } if id == &ok[0].id),
                "{e}"
            );
        }
    }
    env.backend.delete(&ok[0].id).unwrap();
}

#[test]
fn delete_never_removes_through_a_host_mount() {
    let env = env();
    let b = &env.backend;
    let info = b.create(&request(&env, None)).unwrap();
    // Something (not the backend) bound the Store at the mount point on
    // the host: a recursive removal would delete the Store's files.
    let store_mp = &info.daemon.store;
    let st = std::process::Command::new("mount")
        .args([
            "--bind".as_ref(),
            env.store.path().as_os_str(),
            store_mp.as_os_str(),
        ])
        .status()
        .unwrap();
    assert!(st.success(), "mount --bind");
    let e = b.delete(&info.id).unwrap_err();
    let unmounted = std::process::Command::new("umount")
        .arg(store_mp)
        .status()
        .unwrap();
    assert!(e.to_string().contains("host mounts below it"), "{e}");
    assert!(
        env.store.path().join("seen-by-daemon").exists(),
        "Store damaged"
    );
    assert!(unmounted.success());
    b.delete(&info.id).unwrap();
    assert!(env.store.path().join("seen-by-daemon").exists());
}
