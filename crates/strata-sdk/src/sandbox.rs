//! Sandboxes: create, reopen, list, logs, close, through strata-sandbox's
//! native backend ([`strata_sandbox::NativeBackend`], route A), which does
//! B1–B6 and B8–B10 (see its docs). The SDK adds what is the daemon's:
//! its config ([`strata_daemon::DaemonConfig`], written 0600 by the
//! backend at B3) and the client over the endpoint (B6, B7).
//!
//! * Default Workspace mount path: `/workspace` (an empty mount point the
//!   backend creates in the Sandbox's view).
//! * Limits: unless [`SandboxSpec::no_limits`], memory and pids limits
//!   the spec leaves unset get the host defaults (half of the RAM, 4,096
//!   tasks); the Sandbox's info records what applies.
//! * Restart: [`Sandbox::restart`] runs the backend's B4–B6 again on a
//!   stopped Sandbox; its daemon (config `recover_workspaces`) mounts the
//!   Workspaces it finds recorded in its scratch directory again.
//! * Close (B9): `POST /v1/shutdown` first (the daemon cancels its execs
//!   and unmounts its Workspaces cleanly), then the backend's stop (SIGTERM,
//!   SIGKILL after the grace period) and delete. The Store is untouched.
//!
//! An earlier version of this module carried its own minimal launcher
//! (`native_min`, see git history) while the backend was being built.

use std::path::PathBuf;
use std::time::Duration;

use hyper::Method;
use strata_daemon::api;
use strata_docker::DockerBackend;
use strata_sandbox::backend::{
    Backend, BackendError, CreateRequest, DaemonInstall, Endpoint, Filter, SandboxId, State,
};
use strata_sandbox::{BackendKind, NativeBackend};

use crate::client::DaemonClient;
use crate::error::{Error, Result};
use crate::exec::ExecHandle;
use crate::remote::Remote;
use crate::workspace::Workspace;

pub use crate::sandbox_spec::{SandboxFilter, SandboxSpec, SandboxState};
pub use strata_sandbox::backend::SandboxInfo;
pub use strata_sandbox::{Expose, Limits, Network};

/// Default mount path of a Workspace.
pub const DEFAULT_MOUNT: &str = "/workspace";
/// How long a lookup by Workspace or exec ID waits for one daemon: a hung
/// Sandbox must not hang `strata ws` / `strata exec` for all the others.
pub(crate) const LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);
/// SIGTERM -> SIGKILL grace period of close.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// How long [`Sandbox::restart`] waits for a Sandbox whose daemon does
/// not answer to read stopped (its init and monitor ending).
const STOPPING_WAIT: Duration = Duration::from_secs(10);
/// How long [`Sandbox::restart`] waits for the daemon's marker: longer
/// than a first start, since the daemon reopens and mounts its Workspaces
/// before it prints it.
const RESTART_TIMEOUT: Duration = Duration::from_secs(30);

/// An open Sandbox. Dropping it leaves the Sandbox running (reopen it by
/// ID); [`Sandbox::close`] ends it.
#[derive(Debug)]
pub struct Sandbox {
    pub(crate) place: Place,
    pub(crate) info: SandboxInfo,
    pub(crate) client: DaemonClient,
    /// In a project's VM: the VMs' state root, where its record is
    /// (`microvm.rs`), and the project; its close drops the record and
    /// stops the VM when it was the last.
    pub(crate) vm: Option<(PathBuf, String)>,
}

/// Where a Sandbox is driven from.
#[derive(Debug, Clone)]
pub(crate) enum Place {
    /// Its backend, in this process.
    Local(AnyBackend),
    /// A server's Sandbox routes (`sandbox_remote.rs`).
    Remote(Remote),
}

fn backend_error(e: BackendError) -> Error {
    let msg = e.to_string();
    match e {
        BackendError::NotFound(_) => Error::not_found(
            msg,
            "it was closed or never existed; list them with Sandbox::list",
        ),
        BackendError::BadId(_) => Error::invalid(msg, "IDs look like sb-<24 hex digits>"),
        BackendError::NameTaken { .. } => Error::Busy {
            what: msg,
            hint: "names are never adopted: pick another name or close that Sandbox".into(),
            source: None,
        },
        BackendError::Invalid { .. } => Error::invalid(msg, "fix the request and retry"),
        BackendError::WrongState { .. } => Error::Busy {
            what: msg,
            hint: "check Sandbox::state: only a stopped Sandbox restarts (Sandbox::restart); a running one needs nothing, or close it and create a new one".into(),
            source: None,
        },
        BackendError::Step { log_tail, .. } | BackendError::NoMarker { log_tail, .. } => {
            Error::Backend {
                what: msg
                    .split("\n--- log tail ---")
                    .next()
                    .unwrap_or("")
                    .to_string(),
                log_tail,
                source: None,
            }
        }
        BackendError::State {
            action,
            path,
            source,
        } => Error::Io {
            what: action.to_string(),
            path,
            source,
        },
    }
}

/// The backend a Sandbox lives on.
#[derive(Debug, Clone)]
pub(crate) enum AnyBackend {
    Native(NativeBackend),
    Docker(DockerBackend),
}

impl AnyBackend {
    fn get(&self) -> &dyn Backend {
        match self {
            AnyBackend::Native(b) => b,
            AnyBackend::Docker(b) => b,
        }
    }
}

/// The docker backend at its default state root; `None` when no docker
/// Sandbox has a record there, so that native-only use never needs an
/// Engine (and a stopped dockerd does not break listing native ones).
fn docker_if_used() -> Result<Option<DockerBackend>> {
    let any = std::fs::read_dir(DockerBackend::default_root())
        .map(|rd| {
            rd.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("sb-"))
        })
        .unwrap_or(false);
    if !any {
        return Ok(None);
    }
    DockerBackend::from_env().map(Some).map_err(backend_error)
}

fn backend_at(root: Option<PathBuf>) -> Result<NativeBackend> {
    match root {
        Some(r) => NativeBackend::new(r),
        None => NativeBackend::with_default_root(),
    }
    .map_err(backend_error)
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::backend(format!("worker thread failed: {e}"), String::new()))?
}

impl Sandbox {
    /// Create a Sandbox and start its daemon (B1–B6). Needs root,
    /// /dev/fuse and namespaces (route A).
    pub async fn create(spec: SandboxSpec) -> Result<Sandbox> {
        blocking(move || create_native(spec)).await
    }

    /// Reopen by exact ID (B8), e.g. from a fresh process. A Sandbox whose
    /// daemon is gone opens as [`SandboxState::Stopped`]; calls on it fail
    /// with [`Error::Backend`] and its log tail.
    pub async fn open(id: &str) -> Result<Sandbox> {
        Self::open_in(id, None).await
    }

    /// [`Sandbox::open`] with an explicit state root.
    pub async fn open_in(id: &str, state_dir: Option<PathBuf>) -> Result<Sandbox> {
        let id = id.to_string();
        blocking(move || {
            let backend = backend_at(state_dir)?;
            let sid = SandboxId(id);
            match backend.open(&sid) {
                Ok(info) => Sandbox::from_info(AnyBackend::Native(backend), info),
                // Not a native one: a docker Sandbox has a record under the
                // docker backend's root.
                Err(BackendError::NotFound(_))
                    if DockerBackend::default_root().join(sid.as_str()).is_dir() =>
                {
                    let docker = DockerBackend::from_env().map_err(backend_error)?;
                    let info = docker.open(&sid).map_err(backend_error)?;
                    Sandbox::from_info(AnyBackend::Docker(docker), info)
                }
                Err(e) => Err(backend_error(e)),
            }
        })
        .await
    }

    fn from_info(backend: AnyBackend, info: SandboxInfo) -> Result<Sandbox> {
        let socket = match &info.endpoint {
            Some(Endpoint::Unix { path }) => path.clone(),
            _ => info.daemon.socket.clone(),
        };
        let token = std::fs::read_to_string(&info.token_file)
            .map_err(Error::io("read the Sandbox token", &info.token_file))?
            .trim()
            .to_string();
        let client = DaemonClient::new(
            socket,
            token,
            format!("sandbox {}", info.id),
            Some(info.log_file.clone()),
        );
        Ok(Sandbox {
            place: Place::Local(backend),
            vm: None,
            info,
            client,
        })
    }

    /// Sandboxes matching `filter` (B10), oldest first.
    pub async fn list(filter: SandboxFilter) -> Result<Vec<SandboxInfo>> {
        blocking(move || {
            let backend = backend_at(filter.state_dir.clone())?;
            let f = Filter {
                labels: filter.labels,
                name_prefix: filter.name_prefix,
            };
            let mut all = backend.list(&f).map_err(backend_error)?;
            // Docker Sandboxes too, unless a native state root was named.
            // With no Engine answering, the docker records are still listed
            // (as stopped) instead of failing the whole listing.
            if filter.state_dir.is_none() {
                let docker = match docker_if_used() {
                    Ok(Some(docker)) => docker.list(&f).map_err(backend_error)?,
                    Ok(None) => Vec::new(),
                    Err(e) => {
                        tracing::warn!(%e, "docker Sandboxes listed from their records only");
                        DockerBackend::list_without_engine(&DockerBackend::default_root(), &f)
                            .map_err(backend_error)?
                    }
                };
                all.extend(docker);
                all.sort_by(|a, b| (a.created_unix_ms, &a.id).cmp(&(b.created_unix_ms, &b.id)));
            }
            Ok(all)
        })
        .await
    }

    /// The full Sandbox ID.
    pub fn id(&self) -> &str {
        self.info.id.as_str()
    }

    /// What the backend recorded (config readable after a reopen).
    pub fn info(&self) -> &SandboxInfo {
        &self.info
    }

    /// The daemon's Unix socket (host side) and its bearer token: what a
    /// relay such as `strata serve` needs to speak to the daemon itself.
    /// Read from the backend's record and the 0600 token file, as this
    /// handle's own client does.
    pub fn daemon_endpoint(&self) -> Result<(PathBuf, String)> {
        let socket = match &self.info.endpoint {
            Some(Endpoint::Unix { path }) => path.clone(),
            _ => self.info.daemon.socket.clone(),
        };
        let token = std::fs::read_to_string(&self.info.token_file)
            .map_err(Error::io("read the Sandbox token", &self.info.token_file))?
            .trim()
            .to_string();
        Ok((socket, token))
    }

    /// Running (the backend says so and the daemon answers) or stopped.
    pub async fn state(&self) -> SandboxState {
        let b = match &self.place {
            Place::Local(b) => b.clone(),
            Place::Remote(r) => return crate::sandbox_remote::state(r, self).await,
        };
        let id = self.info.id.clone();
        let st = blocking(move || b.get().open(&id).map_err(backend_error)).await;
        match st {
            Ok(i) if i.state == State::Running => match self.health().await {
                Ok(_) => SandboxState::Running,
                Err(_) => SandboxState::Stopped,
            },
            _ => SandboxState::Stopped,
        }
    }

    /// Start the daemon again after it died (crashed, was killed) or was
    /// stopped: contract steps B4–B6 once more on the same Sandbox, with
    /// the same ID, token, Store, config and scratch directory, on the
    /// same backend (native or docker). The new daemon mounts the
    /// Workspaces that were mounted when the old one ended again, under
    /// their IDs and at their paths, uncommitted changes included:
    /// [`Sandbox::workspaces`] lists them, `status` shows the changes,
    /// commands see the files, `commit` publishes them, and handles from
    /// before keep working. A Workspace the daemon could not recover is
    /// named in [`api::Health::unrecovered`] (its scratch is kept, and
    /// [`Sandbox::close`] refuses to delete it). Execs do not survive a
    /// restart.
    ///
    /// Only a stopped Sandbox restarts: a running one is refused
    /// ([`Error::Busy`]) rather than restarted, because that would kill its
    /// running commands. One whose daemon is dead but which has not read
    /// stopped yet is waited for (up to 10 s; then [`Error::Backend`]: a
    /// hung Sandbox is closed, not restarted). A daemon that does not come up is
    /// [`Error::Backend`] with its log tail, and the Sandbox stays stopped
    /// (restart may be tried again).
    pub async fn restart(&mut self) -> Result<()> {
        let backend = match &self.place {
            Place::Local(b) => b.clone(),
            Place::Remote(r) => {
                *self = crate::sandbox_remote::restart(r, self.id()).await?;
                return Ok(());
            }
        };
        // A caller sees the daemon's death at once (its socket refuses);
        // the backend sees it when the Sandbox's init has reaped it and
        // the monitor has cleaned up and reported, a moment later. Wait,
        // bounded, for the backend to agree, rather than refuse to restart
        // a Sandbox that is going down.
        let t0 = std::time::Instant::now();
        loop {
            let (b, id) = (backend.clone(), self.info.id.clone());
            let st = blocking(move || b.get().open(&id).map_err(backend_error)).await?;
            if st.state != State::Running || self.health().await.is_ok() {
                break;
            }
            if t0.elapsed() >= STOPPING_WAIT {
                return Err(Error::backend(
                    format!(
                        "sandbox {}: its daemon does not answer, but the Sandbox has not stopped within {STOPPING_WAIT:?}: it is not restarted while it may still run; close it (Sandbox::close_discard, `strata sandbox rm --discard`) or stop it through its backend first",
                        self.id()
                    ),
                    self.logs(40).await.unwrap_or_default(),
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (b, id) = (backend.clone(), self.info.id.clone());
        let info = blocking(move || {
            b.get()
                .restart(&id, RESTART_TIMEOUT)
                .map_err(backend_error)?;
            b.get().open(&id).map_err(backend_error)
        })
        .await?;
        *self = Sandbox::from_info(backend, info)?;
        Ok(())
    }

    /// The daemon's health.
    pub async fn health(&self) -> Result<api::Health> {
        self.client
            .call(Method::GET, "/v1/health", None::<&()>)
            .await
    }

    /// The last `lines` lines of the daemon's log (B5), read by the backend
    /// on the host side: works when the daemon is dead too.
    pub async fn logs(&self, lines: usize) -> Result<String> {
        let b = match &self.place {
            Place::Local(b) => b.clone(),
            Place::Remote(r) => return crate::sandbox_remote::logs(r, self.id(), lines).await,
        };
        let id = self.info.id.clone();
        blocking(move || b.get().log_tail(&id, lines).map_err(backend_error)).await
    }

    /// Mount branch `reference` (`PROJECT/BRANCH`) at `at` (default
    /// [`DEFAULT_MOUNT`]).
    pub async fn mount(&self, reference: &str, at: Option<&str>) -> Result<Workspace> {
        let info: api::WorkspaceInfo = self
            .client
            .call(
                Method::POST,
                "/v1/workspaces",
                Some(&api::MountRequest {
                    reference: reference.into(),
                    at: Some(at.unwrap_or(DEFAULT_MOUNT).to_string()),
                }),
            )
            .await?;
        Ok(Workspace {
            client: self.client.clone(),
            info,
        })
    }

    /// The exec `id` of this Sandbox (e.g. from another process): a
    /// handle to [`ExecHandle::attach`], wait for or cancel it.
    pub async fn exec_by_id(&self, id: &str) -> Result<ExecHandle> {
        let st: api::ExecStatus = self
            .client
            .call(Method::GET, &format!("/v1/execs/{id}"), None::<&()>)
            .await?;
        Ok(ExecHandle::by_id(self.client.clone(), &st))
    }

    /// The running Sandboxes under `state_dir` (default root), opened.
    async fn running(state_dir: Option<PathBuf>) -> Result<Vec<Sandbox>> {
        let list = Sandbox::list(SandboxFilter {
            state_dir: state_dir.clone(),
            ..Default::default()
        })
        .await?;
        let mut out = Vec::new();
        for i in list.into_iter().filter(|i| i.state == State::Running) {
            if let Ok(sb) = Sandbox::open_in(i.id.as_str(), state_dir.clone()).await {
                out.push(sb);
            }
        }
        Ok(out)
    }

    /// Find the running Sandbox that has Workspace `id` mounted (IDs are
    /// unique across Sandboxes), e.g. for `strata ws status WS`.
    pub async fn find_workspace(
        id: &str,
        state_dir: Option<PathBuf>,
    ) -> Result<(Sandbox, Workspace)> {
        for sb in Sandbox::running(state_dir).await? {
            if let Ok(Ok(wss)) = tokio::time::timeout(LOOKUP_TIMEOUT, sb.workspaces()).await {
                if let Some(ws) = wss.into_iter().find(|w| w.id() == id) {
                    return Ok((sb, ws));
                }
            }
        }
        if let Some(found) = crate::microvm::find_workspace(id).await {
            return Ok(found);
        }
        Err(Error::not_found(
            format!("Workspace {id}"),
            "no running Sandbox has it mounted; list them with `strata ws list`",
        ))
    }

    /// Find the running Sandbox that has exec `id`, e.g. for
    /// `strata exec wait EXEC`.
    pub async fn find_exec(id: &str, state_dir: Option<PathBuf>) -> Result<(Sandbox, ExecHandle)> {
        for sb in Sandbox::running(state_dir).await? {
            if let Ok(Ok(h)) = tokio::time::timeout(LOOKUP_TIMEOUT, sb.exec_by_id(id)).await {
                return Ok((sb, h));
            }
        }
        if let Some(found) = crate::microvm::find_exec(id).await {
            return Ok(found);
        }
        Err(Error::not_found(
            format!("exec {id}"),
            "no running Sandbox knows it (finished execs are kept for a while, until their Sandbox closes)",
        ))
    }

    /// The Workspaces mounted now (e.g. after a reopen).
    pub async fn workspaces(&self) -> Result<Vec<Workspace>> {
        let v: Vec<api::WorkspaceInfo> = self
            .client
            .call(Method::GET, "/v1/workspaces", None::<&()>)
            .await?;
        Ok(v.into_iter()
            .map(|info| Workspace {
                client: self.client.clone(),
                info,
            })
            .collect())
    }

    /// Stop the daemon (it cancels running execs and unmounts its
    /// Workspaces), stop the Sandbox and delete its record and state (B9).
    /// The Store is untouched.
    ///
    /// Closing deletes the Workspaces' scratch, so it **refuses**
    /// ([`Error::Busy`], naming them) while a Workspace holds uncommitted
    /// changes: commit them first, or call [`Sandbox::close_discard`].
    /// With the daemon dead, the Workspaces left in its scratch directory
    /// are checked offline the same way.
    pub async fn close(self) -> Result<()> {
        if let Place::Remote(r) = &self.place {
            // The server checks, with the Sandbox's own view.
            crate::sandbox_remote::close(r, self.id(), false).await?;
            return self.vm_closed().await;
        }
        self.close_check().await?;
        self.close_discard().await
    }

    /// The project whose VM runs this Sandbox (docs/microvm.md); `None`
    /// for a Sandbox on this host or of a server.
    pub fn vm_project(&self) -> Option<&str> {
        self.vm.as_ref().map(|(_, p)| p.as_str())
    }

    /// After a close: a Sandbox of a project's VM drops its record there,
    /// and the VM stops when it was its last (`microvm::closed`).
    async fn vm_closed(&self) -> Result<()> {
        if let Some((root, _)) = &self.vm {
            crate::microvm::closed(self.id(), Some(root.clone())).await?;
        }
        Ok(())
    }

    /// What [`Sandbox::close`] checks first, without closing: `Ok` when no
    /// Workspace holds uncommitted changes, else [`Error::Busy`] naming
    /// them.
    pub async fn close_check(&self) -> Result<()> {
        let dirty = self.uncommitted().await?;
        if dirty.is_empty() {
            return Ok(());
        }
        Err(Error::Busy {
            what: format!(
                "Sandbox {} has uncommitted work ({})",
                self.id(),
                dirty.join(", ")
            ),
            hint: "commit it (Workspace::commit, `strata ws commit WS -m MSG`) or close with discard (`strata sandbox rm --discard`)".into(),
            source: None,
        })
    }

    /// Workspaces with uncommitted changes, as `ID (BRANCH, N changes)`.
    async fn uncommitted(&self) -> Result<Vec<String>> {
        if let Ok(health) = self.health().await {
            // Not served, but its scratch is there and may hold work.
            let mut out: Vec<String> = health
                .unrecovered
                .iter()
                .map(|u| format!("{} (not recovered at restart: {})", u.id, u.error))
                .collect();
            for ws in self.workspaces().await? {
                let n = ws.status().await?.len();
                if n > 0 {
                    out.push(format!("{} ({}, {n} changes)", ws.id(), ws.branch()));
                }
            }
            return Ok(out);
        }
        // The daemon is gone: what it left in its scratch directory is all
        // there is to lose. Open each Workspace offline (nothing serves it).
        let store = self.info.config.store.clone();
        // The daemon's paths are its own view; a docker Sandbox's state
        // directory is bind-mounted, and the host sees it beside the token.
        let scratch = match (self.info.backend, self.info.token_file.parent()) {
            (BackendKind::Docker, Some(dir)) => dir.join("scratch"),
            _ => self.info.daemon.scratch_dir.clone(),
        };
        blocking(move || {
            let ids = match strata_workspace::Workspace::list(&scratch) {
                Ok(ids) => ids,
                Err(_) if !scratch.exists() => return Ok(Vec::new()),
                Err(e) => return Err(e.into()),
            };
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            let mut out = Vec::new();
            for id in ids {
                let opened = crate::workspaces::open_offline(&store, &scratch, &id, false);
                match opened.and_then(|w| {
                    let c = w.status()?;
                    Ok((w.branch().to_string(), c.len()))
                }) {
                    Ok((_, 0)) => {}
                    Ok((b, n)) => out.push(format!("{id} ({b}, {n} changes)")),
                    Err(e) => out.push(format!("{id} (unreadable: {e})")),
                }
            }
            Ok(out)
        })
        .await
    }

    /// [`Sandbox::close`] without the check: uncommitted changes of its
    /// Workspaces are dropped.
    pub async fn close_discard(self) -> Result<()> {
        let b = match &self.place {
            Place::Local(b) => b.clone(),
            Place::Remote(r) => {
                crate::sandbox_remote::close(r, self.id(), true).await?;
                return self.vm_closed().await;
            }
        };
        let _ = self
            .client
            .send(
                Method::POST,
                "/v1/shutdown",
                bytes::Bytes::new(),
                "application/json",
            )
            .await;
        let id = self.info.id.clone();
        blocking(move || {
            b.get().stop(&id, STOP_GRACE).map_err(backend_error)?;
            b.get().delete(&id).map_err(backend_error)
        })
        .await
    }
}

fn create_native(spec: SandboxSpec) -> Result<Sandbox> {
    let backend = match &spec.docker_image {
        None => AnyBackend::Native(backend_at(spec.state_dir.clone())?),
        Some(_) => AnyBackend::Docker(DockerBackend::from_env().map_err(backend_error)?),
    };
    let mut req = CreateRequest::new(spec.store.clone());
    req.image = spec.docker_image.clone();
    req.name = spec.name.clone();
    req.labels = spec.labels.clone();
    req.network = spec.network;
    req.limits = spec.limits;
    req.no_limits = spec.no_limits;
    req.daemon_exe = spec.daemon_exe.clone();
    req.expose = checked_expose(&spec.expose)?;
    if let Some(dir) = &spec.rootfs {
        if !dir.is_absolute() || !dir.is_dir() {
            return Err(Error::invalid(
                format!(
                    "rootfs {} is not an absolute path to a directory",
                    dir.display()
                ),
                "give an unpacked root filesystem, e.g. from `docker export` or debootstrap",
            ));
        }
        req.root = strata_sandbox::RootFs::Dir {
            path: dir.clone(),
            readonly: true,
        };
    }
    // The backend's record is written once, already installed
    // (`Backend::create_installed`).
    let fuse_transport = spec
        .fuse_transport
        .unwrap_or_else(strata_workspace::Transport::from_env);
    let make_install = |info: &strata_sandbox::backend::SandboxInfo| {
        let d = &info.daemon;
        let mut cfg = strata_daemon::DaemonConfig::new(
            d.socket.clone(),
            d.token_file.clone(),
            d.log_file.clone(),
            d.store.clone(),
            d.scratch_dir.clone(),
        );
        cfg.helper_exe = Some(d.exe.clone());
        cfg.default_mount = Some(PathBuf::from(DEFAULT_MOUNT));
        // The scratch directory is this Sandbox's alone: a restarted daemon
        // mounts its Workspaces again (Sandbox::restart).
        cfg.recover_workspaces = true;
        // The daemon starts with a cleared environment: the creator's choice
        // (the spec, else its STRATA_FUSE_TRANSPORT) travels in the config.
        cfg.fuse_transport = Some(fuse_transport);
        DaemonInstall {
            args: vec![
                strata_daemon::DAEMON_ARG.into(),
                "--config".into(),
                d.config.display().to_string(),
            ],
            env: Vec::new(),
            config: serde_json::to_vec_pretty(&cfg).expect("config serializes"),
        }
    };
    let info = backend
        .get()
        .create_installed(&req, &make_install)
        .map_err(backend_error)?;
    let id = info.id.clone();
    let started = backend.get().start(&id, spec.startup_timeout);
    if let Err(e) = started {
        // Nothing of it keeps running; drop the record too.
        let _ = backend.get().stop(&id, Duration::ZERO);
        let _ = backend.get().delete(&id);
        return Err(backend_error(e));
    }
    let info = backend.get().open(&id).map_err(backend_error)?;
    Sandbox::from_info(backend, info)
}

/// The SDK's own part of checking `expose` (the backend checks the Store
/// and its state): host Workspaces' scratch (other agents' uncommitted
/// files) and run directory (daemon sockets and tokens) stay out of sight.
fn checked_expose(expose: &[Expose]) -> Result<Vec<Expose>> {
    let dirs = crate::host::HostDirs::for_user();
    for e in expose {
        let resolved = e.path.canonicalize().unwrap_or_else(|_| e.path.clone());
        for (dir, what) in [
            (&dirs.scratch, "host Workspaces' scratch"),
            (&dirs.run, "host Workspaces' run directory"),
        ] {
            let dir = dir.canonicalize().unwrap_or_else(|_| dir.clone());
            if resolved.starts_with(&dir) || dir.starts_with(&resolved) {
                return Err(Error::invalid(
                    format!("expose {}", e.path.display()),
                    format!(
                        "overlaps {what} {}; expose a directory that holds neither",
                        dir.display()
                    ),
                ));
            }
        }
    }
    Ok(expose.to_vec())
}
