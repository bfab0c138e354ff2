//! [`DockerBackend`]: the Backend contract on the Engine API. See the crate
//! docs for the step-by-step map; the comments here say why each step is
//! done the way it is.

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use serde_json::Value;
use strata_sandbox::backend::marker::{marker_socket, NotReady};
use strata_sandbox::backend::state::{
    delete_state_dir, invalid, lock_runs, mkdir_private, new_state_dir, now_unix_ms, read_record,
    state_err, write_new_token, write_record, RECORD,
};
use strata_sandbox::backend::validate::{
    check_name_and_labels, check_store, refuse_token_in_args, valid_id,
};
use strata_sandbox::{
    Backend, BackendError, BackendKind, CreateRequest, DaemonInstall, Endpoint, Filter, SandboxId,
    SandboxInfo, Started, State,
};

use crate::container::{self, labels, INSIDE_ROOT};
use crate::engine::{q, Engine};
use crate::state::{inside_paths, install_tar, to_host, valid_container_id, Record};
use crate::DockerError;

/// Lines of log carried by a start failure.
const FAILURE_TAIL_LINES: usize = 40;
/// How often start polls the container log for the marker.
pub(crate) const MARKER_POLL: Duration = Duration::from_millis(5);

/// The docker backend: one Engine, records under one state root.
#[derive(Debug, Clone)]
pub struct DockerBackend {
    pub(crate) engine: Engine,
    pub(crate) root: PathBuf,
}

pub(crate) fn step(id: &SandboxId, step: &'static str, e: impl ToString) -> BackendError {
    BackendError::Step {
        id: id.clone(),
        step,
        message: e.to_string(),
        log_tail: String::new(),
    }
}

impl DockerBackend {
    /// `/var/lib/strata/docker`.
    pub fn default_root() -> PathBuf {
        PathBuf::from("/var/lib/strata/docker")
    }

    /// A backend on `engine` with its state under `root` (created 0700).
    /// Needs root: the daemon's files must be root's (it checks that its
    /// config and token are owned by its uid, 0) and the host reads them.
    pub fn new(engine: Engine, root: impl Into<PathBuf>) -> Result<Self, BackendError> {
        if !rustix::process::geteuid().is_root() {
            return Err(invalid(
                "docker backend",
                "needs root on the host (the daemon's token and config are root's, 0600)",
            ));
        }
        let root = root.into();
        if !root.is_absolute() {
            return Err(invalid(
                format!("state root {}", root.display()),
                "must be an absolute path",
            ));
        }
        mkdir_private(&root, true)?;
        let root = root
            .canonicalize()
            .map_err(state_err("resolve the state root", &root))?;
        Ok(DockerBackend { engine, root })
    }

    /// The Engine at `$DOCKER_HOST` (or the default socket), state at
    /// [`DockerBackend::default_root`].
    pub fn from_env() -> Result<Self, BackendError> {
        let engine = crate::engine::socket_from_env()
            .and_then(Engine::connect)
            .map_err(|e| invalid("docker backend", e.to_string()))?;
        Self::new(engine, Self::default_root())
    }

    /// The docker Sandboxes recorded under `root` that match `filter`, as
    /// seen without an Engine: every one is `Stopped` (with dockerd down no
    /// container runs; with `live-restore` one may, and the next listing
    /// with the Engine up says so). Listing must not fail because Docker
    /// is not running: the native Sandboxes and these records are still
    /// there to see and to close.
    pub fn list_without_engine(
        root: &Path,
        filter: &Filter,
    ) -> Result<Vec<SandboxInfo>, BackendError> {
        let rd = match fs::read_dir(root) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(state_err("list", root)(e)),
        };
        let mut out = Vec::new();
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !valid_id(&name) {
                continue;
            }
            let Ok(rec) = read_record::<Record>(&e.path()) else {
                continue;
            };
            if filter.matches(rec.name.as_deref(), &rec.labels) {
                out.push(Self::info_of(&e.path(), &rec, None));
            }
        }
        out.sort_by(|a, b| (a.created_unix_ms, &a.id).cmp(&(b.created_unix_ms, &b.id)));
        Ok(out)
    }

    pub fn state_root(&self) -> &Path {
        &self.root
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    fn load(&self, id: &SandboxId) -> Result<(PathBuf, Record), BackendError> {
        if !valid_id(id.as_str()) {
            return Err(BackendError::BadId(id.0.clone()));
        }
        let dir = self.root.join(id.as_str());
        if !dir.join(RECORD).exists() {
            return Err(BackendError::NotFound(id.clone()));
        }
        Ok((dir.clone(), read_record(&dir)?))
    }

    /// `GET /containers/{id}/json`; `None` if the container is gone.
    pub(crate) fn inspect(&self, rec: &Record) -> Result<Option<Value>, BackendError> {
        let path = format!("/containers/{}/json", rec.container);
        match self.engine.json::<Value>(Method::GET, &path, None) {
            Ok(v) => Ok(Some(v)),
            Err(DockerError::Engine { status: 404, .. }) => Ok(None),
            Err(e) => Err(step(&rec.id, "inspect the container", e)),
        }
    }

    fn state_of(rec: &Record, inspect: Option<&Value>) -> State {
        let Some(i) = inspect else {
            return State::Stopped;
        };
        match i["State"]["Status"].as_str() {
            Some("created") => State::Created,
            Some("running" | "paused" | "restarting") if rec.marker.is_some() => State::Running,
            // Started but not ready (start failed or is in progress):
            // running only once the marker was seen.
            Some("running" | "paused" | "restarting") => State::Created,
            _ => State::Stopped,
        }
    }

    fn info(&self, dir: &Path, rec: &Record, inspect: Option<&Value>) -> SandboxInfo {
        Self::info_of(dir, rec, inspect)
    }

    fn info_of(dir: &Path, rec: &Record, inspect: Option<&Value>) -> SandboxInfo {
        SandboxInfo {
            id: rec.id.clone(),
            backend: BackendKind::Docker,
            name: rec.name.clone(),
            labels: rec.labels.clone(),
            state: Self::state_of(rec, inspect),
            created_unix_ms: rec.created_unix_ms,
            endpoint: rec.socket.clone().map(|path| Endpoint::Unix { path }),
            token_file: dir.join("token"),
            log_file: dir.join("daemon.log"),
            daemon: inside_paths(),
            config: rec.config.clone(),
            marker: rec.marker.clone(),
            handle: Some(rec.container.clone()),
        }
    }
}

impl Backend for DockerBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Docker
    }

    fn create(&self, req: &CreateRequest) -> Result<SandboxInfo, BackendError> {
        // The default limits, as for the native backend; the record and
        // the container get the result.
        let mut resolved = req.clone();
        resolved.limits = req.effective_limits()?;
        let req = &resolved;
        // One rule for names and label keys (every backend's); a key also
        // becomes the Docker label dev.strata.label.KEY.
        check_name_and_labels(req)?;
        if req.root != strata_sandbox::RootFs::HostReadOnly {
            return Err(invalid(
                "root",
                "the docker backend runs an image (CreateRequest::image); a rootfs directory is the native backend's",
            ));
        }
        if let Some(e) = req.expose.first() {
            return Err(invalid(
                format!("expose {}", e.path.display()),
                "not supported by the docker backend yet (its commands see the image only); use the native backend, or put the files in the image",
            ));
        }
        let image = req.image.clone().ok_or_else(|| {
            invalid(
                "image",
                "the docker backend needs an image, e.g. busybox@sha256:… or a local image ID",
            )
        })?;
        for m in &req.mountpoints {
            let s = m.to_string_lossy();
            let ok = m.is_absolute()
                && s != "/"
                && !m.components().any(|c| c == std::path::Component::ParentDir)
                && !m.starts_with(INSIDE_ROOT)
                && !m.starts_with("/tmp");
            if !ok {
                return Err(invalid(
                    format!("mount point {s}"),
                    format!("must be an absolute path without '..', not /, not under /tmp or {INSIDE_ROOT}"),
                ));
            }
        }
        let store = check_store(req, &self.root)?;
        let exe = crate::exe::resolve_static_exe(req.daemon_exe.as_deref())
            .map_err(|e| invalid("daemon binary", e.to_string()))?;
        let image_id = self.pin_image(&image)?;

        let (id, dir) = new_state_dir(&self.root)?;
        let setup = || -> Result<Record, BackendError> {
            mkdir_private(&dir.join("store"), false)?;
            mkdir_private(&dir.join("scratch"), false)?;
            write_new_token(&dir.join("token"))?;
            let body =
                container::create_body(req, id.as_str(), &image_id, &self.root, &dir, &store);
            let path = match &req.name {
                Some(n) => format!(
                    "/containers/create?name={}",
                    q(&container::container_name(n))
                ),
                None => "/containers/create".to_string(),
            };
            #[derive(serde::Deserialize)]
            struct Created {
                #[serde(rename = "Id")]
                id: String,
            }
            let created: Created = match self.engine.json(Method::POST, &path, Some(&body)) {
                Ok(c) => c,
                // 409: the name is in use. Refused, never adopted; say
                // whose it is if it is a strata Sandbox.
                Err(DockerError::Engine {
                    status: 409,
                    message,
                    ..
                }) => {
                    let n = req.name.clone().unwrap_or_default();
                    // The Engine reserves a name before the container is
                    // registered, so a concurrent create's container may
                    // not be inspectable yet: retry briefly.
                    let mut owner = None;
                    for _ in 0..50 {
                        let found = self.engine.json::<Value>(
                            Method::GET,
                            &format!("/containers/{}/json", q(&container::container_name(&n))),
                            None,
                        );
                        match found {
                            Ok(v) => {
                                owner = v["Config"]["Labels"][labels::SANDBOX]
                                    .as_str()
                                    .map(String::from);
                                break;
                            }
                            Err(DockerError::Engine { status: 404, .. }) => {
                                std::thread::sleep(Duration::from_millis(20))
                            }
                            Err(_) => break,
                        }
                    }
                    return Err(match owner {
                        Some(o) => BackendError::NameTaken {
                            name: n,
                            id: SandboxId(o),
                        },
                        None => invalid(
                            format!("name {n:?}"),
                            format!("the Engine refused it: {message}"),
                        ),
                    });
                }
                Err(e) => return Err(step(&id, "create the container", e)),
            };
            if !valid_container_id(&created.id) {
                return Err(step(
                    &id,
                    "create the container",
                    format!(
                        "the Engine answered a malformed container ID {:?}",
                        created.id
                    ),
                ));
            }
            let mut config = req.clone();
            config.store = store.clone();
            config.daemon_exe = Some(exe.clone());
            let rec = Record {
                id: id.clone(),
                name: req.name.clone(),
                labels: req.labels.clone(),
                created_unix_ms: now_unix_ms(),
                config,
                image_ref: image.clone(),
                image_id: image_id.clone(),
                container: created.id,
                exe_host: exe.clone(),
                install: None,
                started: false,
                marker: None,
                socket: None,
            };
            if let Err(e) = write_record(&dir, &rec).and_then(|()| self.check_image_paths(&rec)) {
                let _ = self.remove_container(&rec);
                return Err(e);
            }
            Ok(rec)
        };
        let rec = setup().inspect_err(|_| {
            let _ = fs::remove_dir_all(&dir);
        })?;
        Ok(self.info(&dir, &rec, None).with_state(State::Created))
    }

    fn install_daemon(&self, id: &SandboxId, daemon: &DaemonInstall) -> Result<(), BackendError> {
        let (dir, mut rec) = self.load(id)?;
        if rec.started {
            return Err(BackendError::WrongState {
                id: id.clone(),
                action: "install_daemon",
                state: Self::state_of(&rec, self.inspect(&rec)?.as_ref()),
            });
        }
        refuse_token_in_args(&dir.join("token"), daemon)?;
        if daemon.args != container::daemon_args() || !daemon.env.is_empty() {
            return Err(invalid(
                "daemon arguments",
                format!(
                    "the docker backend fixes the container's command at create: arguments must be {:?} (the paths of SandboxInfo::daemon) and the environment empty; put settings in the config",
                    container::daemon_args()
                ),
            ));
        }
        // B3 through the archive API: the Engine extracts the tar into the
        // stopped container at INSIDE_ROOT, which is the bind-mounted
        // private directory (the read-only root itself refuses uploads:
        // "container rootfs is marked read-only").
        let tar = install_tar(&rec.exe_host, &daemon.config)
            .map_err(state_err("pack the daemon binary", &rec.exe_host))?;
        self.engine
            .expect(
                Method::PUT,
                &format!(
                    "/containers/{}/archive?path={}",
                    rec.container,
                    q(INSIDE_ROOT)
                ),
                Some(("application/x-tar", Bytes::from(tar))),
                &[],
            )
            .map_err(|e| match e {
                DockerError::Engine { status: 404, .. } => step(
                    id,
                    "install the daemon",
                    format!("container {} was removed outside strata", rec.container),
                ),
                e => step(id, "install the daemon (archive upload)", e),
            })?;
        rec.install = Some(DaemonInstall {
            args: daemon.args.clone(),
            env: Vec::new(),
            config: Vec::new(),
        });
        write_record(&dir, &rec)
    }

    fn start(&self, id: &SandboxId, timeout: Duration) -> Result<Started, BackendError> {
        let (dir, _) = self.load(id)?;
        let _lock = lock_runs(&dir)?;
        let (dir, mut rec) = self.load(id)?;
        if rec.install.is_none() || rec.started {
            return Err(BackendError::WrongState {
                id: id.clone(),
                action: if rec.install.is_none() {
                    "start before install_daemon"
                } else {
                    "a second start"
                },
                state: Self::state_of(&rec, self.inspect(&rec)?.as_ref()),
            });
        }
        rec.started = true;
        write_record(&dir, &rec)?;
        self.run_container(id, &dir, rec, timeout, 0)
    }

    /// B4+B5 again: `POST /containers/{id}/start` on the same stopped
    /// container, so the same binds (state directory with the token,
    /// config, log and Workspace scratch; the Store), the same image and
    /// options; Docker makes fresh tmpfs mounts and a fresh init.
    fn restart(&self, id: &SandboxId, timeout: Duration) -> Result<Started, BackendError> {
        let (dir, _) = self.load(id)?;
        // Two restarts at once would both find the container stopped; the
        // second waits here, then finds it running and is refused.
        let _lock = lock_runs(&dir)?;
        let (dir, mut rec) = self.load(id)?;
        let inspect = self.inspect(&rec)?;
        let state = Self::state_of(&rec, inspect.as_ref());
        if rec.install.is_none() || !rec.started || state != State::Stopped {
            return Err(BackendError::WrongState {
                id: id.clone(),
                action: "restart (only a stopped Sandbox restarts; stop a running one first)",
                state,
            });
        }
        if inspect.is_none() {
            return Err(step(
                id,
                "restart",
                format!(
                    "container {} was removed outside strata; nothing to restart (delete the Sandbox)",
                    rec.container
                ),
            ));
        }
        // The container log keeps every run's output: the new marker is
        // the first line after what the stopped container already wrote
        // (nothing is added to it while it is stopped).
        let skip = self
            .stdout_so_far(&rec)
            .map_err(|e| step(id, "read the container log before restart", e))?;
        rec.marker = None;
        rec.socket = None;
        write_record(&dir, &rec)?;
        self.run_container(id, &dir, rec, timeout, skip)
    }

    fn log_tail(&self, id: &SandboxId, lines: usize) -> Result<String, BackendError> {
        let (dir, rec) = self.load(id)?;
        Ok(self.tail_of(&dir, &rec, lines.min(10_000)))
    }

    fn open(&self, id: &SandboxId) -> Result<SandboxInfo, BackendError> {
        let (dir, rec) = self.load(id)?;
        let i = self.inspect(&rec)?;
        Ok(self.info(&dir, &rec, i.as_ref()))
    }

    /// B10: the Engine lists this root's containers by label (one call);
    /// each is joined with its record. A record whose container was removed
    /// outside strata is listed too, as stopped, so that it can be deleted.
    fn list(&self, filter: &Filter) -> Result<Vec<SandboxInfo>, BackendError> {
        let mut want = vec![format!("{}={}", labels::ROOT, self.root.display())];
        for (k, v) in &filter.labels {
            want.push(format!("{}{k}={v}", labels::USER_PREFIX));
        }
        let filters = serde_json::json!({ "label": want }).to_string();
        let listed: Vec<Value> = self
            .engine
            .json(
                Method::GET,
                &format!("/containers/json?all=1&filters={}", q(&filters)),
                None,
            )
            .map_err(|e| invalid("list containers", e.to_string()))?;
        let rd = fs::read_dir(&self.root).map_err(state_err("list", &self.root))?;
        let mut out = Vec::new();
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !valid_id(&name) {
                continue;
            }
            let Ok(rec) = read_record::<Record>(&e.path()) else {
                continue;
            };
            if !filter.matches(rec.name.as_deref(), &rec.labels) {
                continue;
            }
            let summary = listed
                .iter()
                .find(|c| c["Id"].as_str() == Some(&rec.container));
            // The list's `State` is the same word inspect's Status is.
            let fake = summary.map(|c| serde_json::json!({"State": {"Status": c["State"]}}));
            out.push(self.info(&e.path(), &rec, fake.as_ref()));
        }
        out.sort_by(|a, b| (a.created_unix_ms, &a.id).cmp(&(b.created_unix_ms, &b.id)));
        Ok(out)
    }

    fn stop(&self, id: &SandboxId, grace: Duration) -> Result<(), BackendError> {
        let (_, rec) = self.load(id)?;
        // SIGTERM to Docker's init (which forwards it to the daemon), SIGKILL
        // after `t` seconds (whole seconds in the API: rounded up). 304:
        // already stopped; 404: removed outside strata, nothing to stop.
        let t = grace.as_secs() + u64::from(grace.subsec_nanos() > 0);
        self.engine
            .expect(
                Method::POST,
                &format!("/containers/{}/stop?t={t}", rec.container),
                None,
                &[304, 404],
            )
            .map(drop)
            .map_err(|e| step(id, "stop", e))
    }

    fn delete(&self, id: &SandboxId) -> Result<(), BackendError> {
        let (dir, rec) = self.load(id)?;
        let i = self.inspect(&rec)?;
        let state = Self::state_of(&rec, i.as_ref());
        if state == State::Running {
            return Err(BackendError::WrongState {
                id: id.clone(),
                action: "delete",
                state,
            });
        }
        if i.is_some() {
            self.remove_container(&rec)?;
        }
        delete_state_dir(id, &dir, &dir.join("store"), "unmount them first")
    }
}

impl DockerBackend {
    /// B4+B5+B6 for one run of the container (first start or restart):
    /// start it, verify what the Engine made, wait for the marker (the
    /// first stdout line after the `skip` bytes earlier runs wrote), check
    /// the socket. On failure the container is killed (it stays, stopped,
    /// for its log) and the error carries the log tail.
    fn run_container(
        &self,
        id: &SandboxId,
        dir: &Path,
        mut rec: Record,
        timeout: Duration,
        skip: usize,
    ) -> Result<Started, BackendError> {
        let fail = |this: &Self, rec: &Record, message: String| {
            // Nothing of the Sandbox may keep running; the container stays
            // (stopped) for its log until delete.
            let _ = this.engine.expect(
                Method::POST,
                &format!("/containers/{}/kill", rec.container),
                None,
                &[404, 409],
            );
            let _ = this.engine.expect(
                Method::POST,
                &format!("/containers/{}/wait?condition=not-running", rec.container),
                None,
                &[404],
            );
            BackendError::Step {
                id: rec.id.clone(),
                step: "start",
                message,
                log_tail: this.tail_of(dir, rec, FAILURE_TAIL_LINES),
            }
        };
        match self.engine.expect(
            Method::POST,
            &format!("/containers/{}/start", rec.container),
            None,
            &[],
        ) {
            Ok(_) => {}
            Err(DockerError::Engine { status: 404, .. }) => {
                return Err(fail(
                    self,
                    &rec,
                    format!("container {} was removed outside strata", rec.container),
                ))
            }
            Err(e) => return Err(fail(self, &rec, e.to_string())),
        }
        if let Err(why) = self.verify_started(&rec) {
            return Err(fail(self, &rec, why));
        }
        let marker = match self.wait_daemon_marker(&rec, timeout, skip) {
            Ok(m) => m,
            Err(NotReady::Failed(why)) => return Err(fail(self, &rec, why)),
            Err(NotReady::Timeout) => {
                let e = fail(self, &rec, String::new());
                let BackendError::Step { log_tail, .. } = e else {
                    unreachable!("fail returns Step")
                };
                return Err(BackendError::NoMarker {
                    id: id.clone(),
                    waited: timeout,
                    log_tail,
                });
            }
        };
        // B6: the daemon's socket, named as it sees it, must be in the
        // bind-mounted directory (so the host reaches it) and 0600.
        let socket = marker_socket(&marker).and_then(|s| to_host(dir, &s));
        let socket = match socket {
            Some(s) => s,
            None => {
                return Err(fail(
                    self,
                    &rec,
                    format!("marker without a socket= under {INSIDE_ROOT}: {marker:?}"),
                ))
            }
        };
        let ok = fs::metadata(&socket)
            .map(|m| m.file_type().is_socket() && m.mode() & 0o077 == 0)
            .unwrap_or(false);
        if !ok {
            return Err(fail(
                self,
                &rec,
                format!(
                    "the daemon's socket {} must be a socket of mode 0600",
                    socket.display()
                ),
            ));
        }
        rec.marker = Some(marker.clone());
        rec.socket = Some(socket.clone());
        write_record(dir, &rec)?;
        Ok(Started {
            marker,
            endpoint: Endpoint::Unix { path: socket },
            token_file: dir.join("token"),
        })
    }
}

trait WithState {
    fn with_state(self, s: State) -> Self;
}

impl WithState for SandboxInfo {
    fn with_state(mut self, s: State) -> Self {
        self.state = s;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_sandbox::backend::state::write_record;

    fn record(root: &Path, id: &str, label: &str) -> SandboxId {
        let id = SandboxId(id.to_string());
        let dir = root.join(id.as_str());
        fs::create_dir_all(&dir).unwrap();
        let mut config = CreateRequest::new("/var/tmp/store");
        config.labels.insert("team".into(), label.into());
        let rec = Record {
            id: id.clone(),
            name: None,
            labels: config.labels.clone(),
            created_unix_ms: 1,
            config,
            image_ref: "debian:12".into(),
            image_id: "sha256:00".into(),
            container: "0".repeat(64),
            exe_host: PathBuf::from("/usr/bin/strata"),
            install: None,
            started: true,
            marker: Some("ready".into()),
            socket: None,
        };
        write_record(&dir, &rec).unwrap();
        id
    }

    #[test]
    fn records_are_listed_as_stopped_without_an_engine() {
        // A listing must not fail because dockerd is down (the SDK lists
        // native and docker Sandboxes together): the records are read and
        // each is Stopped, filters applied.
        let t = tempfile::tempdir().unwrap();
        let a = record(t.path(), "sb-aaaaaaaaaaaaaaaaaaaaaaaa", "a");
        record(t.path(), "sb-bbbbbbbbbbbbbbbbbbbbbbbb", "b");
        fs::create_dir(t.path().join("not-a-sandbox")).unwrap();
        let all = DockerBackend::list_without_engine(t.path(), &Filter::default()).unwrap();
        assert_eq!(all.len(), 2);
        assert!(all.iter().all(|i| i.state == State::Stopped));
        let mut f = Filter::default();
        f.labels.insert("team".into(), "a".into());
        let only = DockerBackend::list_without_engine(t.path(), &f).unwrap();
        assert_eq!(only.iter().map(|i| i.id.clone()).collect::<Vec<_>>(), [a]);
        let missing = t.path().join("missing");
        assert!(DockerBackend::list_without_engine(&missing, &f)
            .unwrap()
            .is_empty());
    }
}
