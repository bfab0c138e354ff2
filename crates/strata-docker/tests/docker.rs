//! The docker backend against a real Docker Engine: the shared Backend
//! contract suite (strata-testkit's `contract`: one source for every
//! backend) with the static fake daemon in a
//! busybox image, then what only the docker backend has (pinning, labels,
//! inspect-after-start verification, the Engine's failure modes).
//! Needs root, docker.io, busybox-static and the static binaries (see
//! strata-testkit's `docker`); without them every test FAILS with the reason.

use strata_testkit::contract;
use strata_testkit::docker as common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use contract::{Edit, Harness};
use hyper::Method;
use serde_json::Value;
use strata_docker::container::{self, labels, Expected};
use strata_docker::{DockerBackend, Engine, DEFAULT_SOCKET};
use strata_sandbox::{
    launch, Backend, BackendError, CreateRequest, Filter, SandboxId, SandboxInfo, State,
};

/// A state root and a Store of our own, one backend, the test image.
struct Env {
    root: tempfile::TempDir,
    store: tempfile::TempDir,
    backend: DockerBackend,
    image: String,
    fake: PathBuf,
}

fn env() -> Env {
    let engine = common::engine();
    let image = common::image();
    let fake = common::static_bin("strata-sandbox-fake-daemon");
    let root = tempfile::tempdir_in("/var/tmp").expect("state root");
    let store = tempfile::tempdir_in("/var/tmp").expect("store");
    std::fs::write(store.path().join("seen-by-daemon"), "store content").unwrap();
    let backend = DockerBackend::new(engine, root.path()).expect("backend");
    Env {
        root,
        store,
        backend,
        image,
        fake,
    }
}

impl Env {
    /// Another backend object on the same root: shares nothing in memory.
    fn fresh(&self) -> Result<DockerBackend, String> {
        let engine = Engine::connect(DEFAULT_SOCKET).map_err(|e| e.to_string())?;
        DockerBackend::new(engine, self.root.path()).map_err(|e| e.to_string())
    }

    fn inspect(&self, container: &str) -> Option<Value> {
        match self.backend.engine().json::<Value>(
            Method::GET,
            &format!("/containers/{container}/json"),
            None,
        ) {
            Ok(v) => Some(v),
            Err(strata_docker::DockerError::Engine { status: 404, .. }) => None,
            Err(e) => panic!("inspect {container}: {e}"),
        }
    }

    /// Containers of this state root, by label.
    fn containers(&self) -> Vec<Value> {
        let f = serde_json::json!({"label": [format!("{}={}", labels::ROOT, self.backend.state_root().display())]});
        self.backend
            .engine()
            .json(
                Method::GET,
                &format!(
                    "/containers/json?all=1&filters={}",
                    strata_docker::engine::q(&f.to_string())
                ),
                None,
            )
            .unwrap()
    }
}

impl Drop for Env {
    /// A failed test must not leave containers running.
    fn drop(&mut self) {
        for c in self.containers() {
            if let Some(id) = c["Id"].as_str() {
                let _ = self.backend.engine().expect(
                    Method::DELETE,
                    &format!("/containers/{id}?force=1"),
                    None,
                    &[404],
                );
            }
        }
    }
}

impl Harness for Env {
    fn backend(&self) -> &dyn Backend {
        &self.backend
    }
    fn suite(&self) -> &'static str {
        "docker"
    }
    fn store(&self) -> &Path {
        self.store.path()
    }
    fn state_root(&self) -> &Path {
        self.backend.state_root()
    }
    fn request(&self, name: Option<&str>) -> CreateRequest {
        let mut req = contract::suite_request(self.store.path(), "docker", &self.fake, name);
        req.image = Some(self.image.clone());
        req
    }
    fn host_path(&self, info: &SandboxInfo, inside: &Path) -> PathBuf {
        let dir = info.token_file.parent().unwrap();
        let rel = inside
            .strip_prefix(container::INSIDE_ROOT)
            .unwrap_or_else(|_| {
                panic!(
                    "{} is not under {}",
                    inside.display(),
                    container::INSIDE_ROOT
                )
            });
        dir.join(rel)
    }
    fn open_elsewhere(&self, id: &SandboxId) -> Result<SandboxInfo, String> {
        self.fresh()?.open(id).map_err(|e| e.to_string())
    }
    fn stop_elsewhere(&self, id: &SandboxId, grace: Duration) -> Result<(), String> {
        self.fresh()?.stop(id, grace).map_err(|e| e.to_string())
    }
    fn launch_elsewhere(&self) -> Result<SandboxId, String> {
        let b = self.fresh()?;
        let (info, _) = launch(
            &b,
            &self.request(None),
            &|info| contract::install(self, info, "ok"),
            Duration::from_secs(20),
        )
        .map_err(|e| e.to_string())?;
        drop(b);
        Ok(info.id)
    }
    fn extra_bad_requests(&self) -> Vec<(&'static str, Edit)> {
        vec![
            ("image", Box::new(|r| r.image = None)),
            (
                "not found in the local Engine",
                Box::new(|r| r.image = Some("strata-no-such-image:none".into())),
            ),
            (
                "dynamically linked",
                Box::new(|r| r.daemon_exe = Some(PathBuf::from("/usr/bin/env"))),
            ),
            (
                "root",
                Box::new(|r| {
                    r.root = strata_sandbox::RootFs::Dir {
                        path: "/".into(),
                        readonly: true,
                    }
                }),
            ),
            (
                "not supported by the docker backend yet",
                Box::new(|r| r.expose = vec![strata_sandbox::Expose::read_only("/usr")]),
            ),
        ]
    }
    fn kill_daemon(&self, info: &SandboxInfo) {
        // The container's init (docker-init) is State.Pid; the daemon is
        // its child.
        let c = info.handle.as_deref().expect("container ID");
        let i = self.inspect(c).expect("container exists");
        let init = i["State"]["Pid"].as_u64().expect("a running container") as u32;
        contract::kill9_daemon_below(init);
    }
    fn check_running(&self, info: &SandboxInfo, _log: &str) {
        // B1: a full container ID, the image pinned by ID, the labels.
        let c = info.handle.as_deref().expect("container ID");
        assert!(
            c.len() == 64 && c.bytes().all(|b| b.is_ascii_hexdigit()),
            "{c}"
        );
        let i = self.inspect(c).expect("container exists");
        assert!(
            i["Config"]["Image"]
                .as_str()
                .unwrap()
                .starts_with("sha256:"),
            "{}",
            i["Config"]["Image"]
        );
        let l = &i["Config"]["Labels"];
        assert_eq!(l[labels::SANDBOX], info.id.as_str());
        assert_eq!(l["dev.strata.label.suite"], "docker");
        assert_eq!(l[labels::IMAGE], self.image.as_str());
        // B3: the binary as uploaded.
        assert_eq!(
            contract::mode_of(&self.host_path(info, &info.daemon.exe)),
            0o755
        );
        // B4: Docker's init is PID 1 (it reaps orphans), the daemon under it.
        let pid = i["State"]["Pid"].as_u64().unwrap();
        let cmd = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap();
        assert!(cmd.contains("docker-init"), "PID 1 is {cmd:?}");
        assert!(container::verify(&i, &Expected::of(&info.config)).is_empty());
        // The Sandbox's mounts are not the host's.
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(
            !mounts.contains(info.id.as_str()),
            "host mounts name {}",
            info.id
        );
    }
    fn check_stopped(&self, info: &SandboxInfo) {
        if let Some(i) = info.handle.as_deref().and_then(|c| self.inspect(c)) {
            assert_ne!(i["State"]["Status"], "running", "container still runs");
        }
    }
    fn check_deleted(&self, info: &SandboxInfo) {
        let c = info.handle.as_deref().unwrap();
        assert!(self.inspect(c).is_none(), "container {c} left after delete");
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
fn a_killed_daemon_restarts_in_the_same_container() {
    contract::restart_after_the_daemon_dies(&env());
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
    let env = env();
    contract::bad_requests_refused(&env);
    assert!(
        env.containers().is_empty(),
        "a refused request left a container"
    );
}

#[test]
fn both_backends_refuse_the_same_names_and_labels() {
    let env = env();
    contract::bad_names_and_labels_refused(&env);
    assert!(
        env.containers().is_empty(),
        "a refused request left a container"
    );
}

#[test]
fn launch_cleans_up_after_a_failed_start() {
    let env = env();
    contract::launch_cleans_up(&env);
    assert!(env.containers().is_empty());
}

#[test]
fn stop_from_elsewhere_kills_a_daemon_that_ignores_sigterm() {
    contract::stop_kills_a_stubborn_daemon(&env());
}

#[test]
fn a_sandbox_outlives_the_backend_that_created_it() {
    contract::outlives_its_creator(&env());
}

#[test]
fn concurrent_creates_with_one_name_give_one_sandbox() {
    let env = env();
    contract::concurrent_creates_with_one_name(&env);
    assert!(env.containers().is_empty());
}

#[test]
fn delete_never_removes_through_a_host_mount() {
    contract::delete_never_removes_through_a_host_mount(&env());
}

// ---- docker only -------------------------------------------------------

#[test]
fn daemon_args_other_than_the_fixed_ones_are_refused() {
    let env = env();
    let b = &env.backend;
    let info = b.create(&env.request(None)).unwrap();
    let mut i = contract::install(&env, &info, "ok");
    i.args.push("--verbose".into());
    let e = b.install_daemon(&info.id, &i).unwrap_err();
    assert!(
        e.to_string().contains("fixes the container's command"),
        "{e}"
    );
    b.delete(&info.id).unwrap();
}

#[test]
fn the_inspect_check_refuses_every_widening() {
    let env = env();
    let b = &env.backend;
    let (info, _) = launch(
        b,
        &env.request(None),
        &|info| contract::install(&env, info, "ok"),
        Duration::from_secs(20),
    )
    .unwrap();
    let real = env.inspect(info.handle.as_deref().unwrap()).unwrap();
    let want = Expected::of(&info.config);
    assert_eq!(container::verify(&real, &want), Vec::<String>::new());
    type Widen = fn(&mut Value);
    let cases: Vec<(&str, Widen)> = vec![
        ("CapAdd", |v| {
            v["HostConfig"]["CapAdd"] = serde_json::json!(["CAP_SYS_ADMIN", "CAP_NET_ADMIN"])
        }),
        ("CapDrop", |v| {
            v["HostConfig"]["CapDrop"] = serde_json::json!([])
        }),
        ("Privileged", |v| {
            v["HostConfig"]["Privileged"] = true.into()
        }),
        ("Devices", |v| {
            v["HostConfig"]["Devices"]
                .as_array_mut()
                .unwrap()
                .push(serde_json::json!({"PathOnHost": "/dev/kvm", "PathInContainer": "/dev/kvm"}))
        }),
        ("DeviceCgroupRules", |v| {
            v["HostConfig"]["DeviceCgroupRules"] = serde_json::json!(["c *:* rwm"])
        }),
        ("SecurityOpt", |v| {
            v["HostConfig"]["SecurityOpt"] =
                serde_json::json!(["no-new-privileges", "seccomp=unconfined"])
        }),
        ("SecurityOpt", |v| {
            v["HostConfig"]["SecurityOpt"] = serde_json::json!(["apparmor=unconfined"])
        }),
        ("writable", |v| {
            v["HostConfig"]["ReadonlyRootfs"] = false.into()
        }),
        ("init", |v| v["HostConfig"]["Init"] = false.into()),
        ("Tty", |v| v["Config"]["Tty"] = true.into()),
        ("OpenStdin", |v| v["Config"]["OpenStdin"] = true.into()),
        ("PidMode", |v| v["HostConfig"]["PidMode"] = "host".into()),
        ("NetworkMode", |v| {
            v["HostConfig"]["NetworkMode"] = "host".into()
        }),
        ("mounts", |v| {
            v["Mounts"]
                .as_array_mut()
                .unwrap()
                .push(serde_json::json!({"Type": "bind", "Destination": "/host"}))
        }),
    ];
    for (what, widen) in cases {
        let mut v = real.clone();
        widen(&mut v);
        let bad = container::verify(&v, &want);
        assert!(
            bad.iter().any(|m| m.contains(what)),
            "{what} not refused: {bad:?}"
        );
    }
    // The kernel's view of the container's init.
    let pid = real["State"]["Pid"].as_u64().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert_eq!(container::verify_process(&status), Vec::<String>::new());
    let widened = status
        .lines()
        .map(|l| {
            if l.starts_with("CapBnd:") {
                "CapBnd:\t000001ffffffffff".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(!container::verify_process(&widened).is_empty());
    b.stop(&info.id, Duration::from_secs(5)).unwrap();
    b.delete(&info.id).unwrap();
}

#[test]
fn no_engine_socket_is_a_clear_error() {
    let e = Engine::connect("/var/tmp/strata-no-such-docker.sock").unwrap_err();
    let m = e.to_string();
    assert!(
        matches!(e, strata_docker::DockerError::NoEngine { .. }),
        "{m}"
    );
    assert!(
        m.contains("/var/tmp/strata-no-such-docker.sock") && m.contains("dockerd"),
        "{m}"
    );
}

#[test]
fn an_old_engine_api_is_refused_up_front() {
    // A stand-in Engine that answers GET /version like Docker 1.12 did.
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("old-docker.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let server = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let (mut c, _) = listener.accept().unwrap();
        let mut buf = [0u8; 4096];
        let n = c.read(&mut buf).unwrap();
        let req = String::from_utf8_lossy(&buf[..n]).into_owned();
        let body = r#"{"ApiVersion":"1.24","Version":"1.12.6"}"#;
        write!(
            c,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        req
    });
    let e = Engine::connect(&sock).unwrap_err();
    assert!(req_line(&server.join().unwrap()).starts_with("GET /version "));
    let m = e.to_string();
    assert!(
        matches!(e, strata_docker::DockerError::ApiTooOld { .. }),
        "{m}"
    );
    assert!(m.contains("1.24") && m.contains("1.41"), "{m}");
}

fn req_line(req: &str) -> &str {
    req.lines().next().unwrap_or("")
}

#[test]
fn an_image_without_the_needed_paths_is_refused_and_nothing_is_left() {
    let env = env();
    // /workspace is a regular file in this image: nothing can be mounted there.
    let tar = common::busybox_rootfs(&[("workspace", b"not a directory")]);
    env.backend
        .engine()
        .import_image(tar, common::IMAGE_REPO, "workspace-is-a-file")
        .unwrap();
    let mut req = env.request(None);
    req.image = Some(format!("{}:workspace-is-a-file", common::IMAGE_REPO));
    let e = env.backend.create(&req).unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains("/workspace") && m.contains("must be a directory"),
        "{m}"
    );
    assert!(env.containers().is_empty(), "a container was left");
    assert!(env.backend.list(&Filter::default()).unwrap().is_empty());
    assert_eq!(
        std::fs::read_dir(env.root.path()).unwrap().count(),
        0,
        "state left"
    );
}

#[test]
fn a_tag_is_pinned_to_its_image_id_at_create() {
    let env = env();
    let b = &env.backend;
    let info = b.create(&env.request(None)).unwrap();
    let c = env.inspect(info.handle.as_deref().unwrap()).unwrap();
    let pinned = c["Image"].as_str().unwrap().to_string();
    // Move the tag: the Sandbox keeps the image it was created from.
    env.backend
        .engine()
        .import_image(
            common::busybox_rootfs(&[("moved", b"1")]),
            common::IMAGE_REPO,
            "pin-test",
        )
        .unwrap();
    let mut req = env.request(None);
    req.image = Some(format!("{}:pin-test", common::IMAGE_REPO));
    let first = b.create(&req).unwrap();
    let first_image = env.inspect(first.handle.as_deref().unwrap()).unwrap()["Image"].clone();
    env.backend
        .engine()
        .import_image(
            common::busybox_rootfs(&[("moved", b"2")]),
            common::IMAGE_REPO,
            "pin-test",
        )
        .unwrap();
    let again = env.inspect(first.handle.as_deref().unwrap()).unwrap();
    assert_eq!(
        again["Image"], first_image,
        "the container's image moved with the tag"
    );
    assert_eq!(again["Config"]["Image"], first_image);
    assert!(pinned.starts_with("sha256:"));
    b.delete(&first.id).unwrap();
    b.delete(&info.id).unwrap();
}

#[test]
fn a_container_removed_behind_stratas_back_reads_as_stopped_and_says_so() {
    let env = env();
    let b = &env.backend;
    let (info, _) = launch(
        b,
        &env.request(None),
        &|info| contract::install(&env, info, "ok"),
        Duration::from_secs(20),
    )
    .unwrap();
    let c = info.handle.clone().unwrap();
    b.engine()
        .expect(
            Method::DELETE,
            &format!("/containers/{c}?force=1"),
            None,
            &[],
        )
        .unwrap();
    let opened = b.open(&info.id).unwrap();
    assert_eq!(opened.state, State::Stopped);
    let tail = b.log_tail(&info.id, 20).unwrap();
    assert!(
        tail.contains("removed outside strata") && tail.contains(&c),
        "{tail}"
    );
    b.stop(&info.id, Duration::from_secs(1))
        .expect("stop of a removed container");
    b.delete(&info.id).expect("delete of a removed container");
    assert!(env.store.path().join("seen-by-daemon").exists());

    // Removed between install and start: start says so, nothing runs.
    let info = b.create(&env.request(None)).unwrap();
    b.install_daemon(&info.id, &contract::install(&env, &info, "ok"))
        .unwrap();
    b.engine()
        .expect(
            Method::DELETE,
            &format!("/containers/{}?force=1", info.handle.as_deref().unwrap()),
            None,
            &[],
        )
        .unwrap();
    let e = b.start(&info.id, Duration::from_secs(5)).unwrap_err();
    assert!(matches!(e, BackendError::Step { .. }), "{e}");
    assert!(e.to_string().contains("removed outside strata"), "{e}");
    b.delete(&info.id).unwrap();
    assert!(env.containers().is_empty());
}
