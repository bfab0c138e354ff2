//! Sandboxes from a [`Client`]: in-process through the backends
//! ([`Sandbox::create`], `sandbox.rs`), or through a server's Sandbox
//! routes (`POST/GET /v1/sandboxes`, `GET|DELETE /v1/sandboxes/{id}`,
//! `/logs`, `/restart`; docs/server.md). A Sandbox reached through a
//! server talks to its daemon through the server's relay
//! ([`DaemonClient::through_server`]), so its Workspaces and execs are the
//! same API as in-process.
//!
//! A Sandbox's [`Sandbox::info`] through a server carries what the server
//! tells (ID, name, labels, state, backend, limits); its host paths (state
//! directory, token file, log file) are empty: they are the server's host's.

use std::path::PathBuf;

use bytes::Bytes;
use hyper::Method;
use strata_api as wire;
use strata_sandbox::backend::{CreateRequest, DaemonPaths, SandboxId, State};
use strata_sandbox::BackendKind;

use crate::client::DaemonClient;
use crate::connect::{enc, Client, Inner};
use crate::error::{Error, Result};
use crate::exec::ExecHandle;
use crate::remote::Remote;
use crate::sandbox::{
    Place, Sandbox, SandboxFilter, SandboxInfo, SandboxSpec, SandboxState, LOOKUP_TIMEOUT,
};
use crate::workspace::Workspace;
use crate::Network;

/// The server's view of a Sandbox as the SDK's [`SandboxInfo`].
fn info_from_wire(w: wire::SandboxInfo) -> SandboxInfo {
    let mut config = CreateRequest::new(PathBuf::new());
    config.name = w.name.clone();
    config.labels = w.labels.clone();
    config.network = match w.network {
        wire::SandboxNetwork::None => Network::None,
        wire::SandboxNetwork::Host => Network::Host,
    };
    config.limits.memory_bytes = w.memory;
    config.limits.pids = w.pids;
    config.limits.cpu_millis = w.cpus.map(|c| (c * 1000.0).round() as u64);
    config.image = w.image.clone();
    SandboxInfo {
        id: SandboxId(w.id),
        backend: match w.backend.as_str() {
            "docker" => BackendKind::Docker,
            "micro_vm" => BackendKind::MicroVm,
            _ => BackendKind::Native,
        },
        name: w.name,
        labels: w.labels,
        state: match w.state {
            wire::SandboxState::Created => State::Created,
            wire::SandboxState::Running => State::Running,
            wire::SandboxState::Stopped => State::Stopped,
        },
        created_unix_ms: w.created_unix_ms,
        endpoint: None,
        token_file: PathBuf::new(),
        log_file: PathBuf::new(),
        daemon: DaemonPaths {
            exe: PathBuf::new(),
            config: PathBuf::new(),
            token_file: PathBuf::new(),
            socket: PathBuf::new(),
            log_file: PathBuf::new(),
            store: PathBuf::new(),
            scratch_dir: PathBuf::new(),
            state_dir: PathBuf::new(),
        },
        config,
        marker: None,
        handle: None,
    }
}

fn sandbox(remote: &Remote, w: wire::SandboxInfo) -> Sandbox {
    let client = DaemonClient::through_server(remote.clone(), &w.id);
    Sandbox {
        place: Place::Remote(remote.clone()),
        info: info_from_wire(w),
        client,
        vm: None,
    }
}

fn no_host_paths(spec: &SandboxSpec) -> Result<()> {
    if spec.fuse_transport.is_some() {
        return Err(Error::invalid(
            "SandboxSpec::fuse_transport through a server",
            "the server's host decides how its mounts serve FUSE (its STRATA_FUSE_TRANSPORT); leave it unset",
        ));
    }
    let given = [
        ("rootfs", spec.rootfs.is_some()),
        ("daemon_exe", spec.daemon_exe.is_some()),
        ("state_dir", spec.state_dir.is_some()),
        ("expose", !spec.expose.is_empty()),
    ];
    match given.iter().find(|(_, set)| *set) {
        Some((field, _)) => Err(Error::invalid(
            format!("SandboxSpec::{field} through a server"),
            "host paths are the server's host's and are not offered over the wire; leave it unset (the server chooses)",
        )),
        None => Ok(()),
    }
}

impl Client {
    /// Create a Sandbox (B1–B6) and start its daemon: in-process (its
    /// Store is this client's, whatever `spec.store` says) or by the
    /// server, for `spec.project` when given.
    pub async fn create_sandbox(&self, mut spec: SandboxSpec) -> Result<Sandbox> {
        if let Some(vm) = spec.microvm.take() {
            return match &self.inner {
                Inner::Local(_) => crate::microvm::create(spec, vm).await,
                Inner::Remote(_) => Err(Error::invalid(
                    "SandboxSpec::microvm through a server",
                    "a project's VM is started by a client on the VM's host; create it in-process",
                )),
            };
        }
        match &self.inner {
            Inner::Local(s) => {
                spec.store = s.dir().to_path_buf();
                if spec.state_dir.is_none() {
                    spec.state_dir = self.sandbox_state.clone();
                }
                Sandbox::create(spec).await
            }
            Inner::Remote(r) => {
                no_host_paths(&spec)?;
                let body = wire::CreateSandbox {
                    project: spec.project.clone(),
                    name: spec.name.clone(),
                    labels: spec.labels.clone(),
                    network: match spec.network {
                        Network::None => wire::SandboxNetwork::None,
                        Network::Host => wire::SandboxNetwork::Host,
                    },
                    memory: spec.limits.memory_bytes,
                    pids: spec.limits.pids,
                    cpus: spec.limits.cpu_millis.map(|m| m as f64 / 1000.0),
                    no_limits: spec.no_limits,
                    image: spec.docker_image.clone(),
                };
                let w: wire::SandboxInfo =
                    r.call(Method::POST, "/v1/sandboxes", Some(&body)).await?;
                Ok(sandbox(r, w))
            }
        }
    }

    /// Sandboxes matching `filter` (B10), oldest first; through a server,
    /// those of its Store the token sees (`filter.state_dir` must be unset).
    pub async fn sandboxes(&self, mut filter: SandboxFilter) -> Result<Vec<SandboxInfo>> {
        match &self.inner {
            Inner::Local(_) => {
                if filter.state_dir.is_none() {
                    filter.state_dir = self.sandbox_state.clone();
                }
                Sandbox::list(filter).await
            }
            Inner::Remote(r) => {
                if filter.state_dir.is_some() {
                    return Err(Error::invalid(
                        "SandboxFilter::state_dir through a server",
                        "the server lists its own Sandboxes; leave it unset",
                    ));
                }
                let q: Vec<String> = filter
                    .labels
                    .iter()
                    .map(|(k, v)| format!("label={}", enc(&format!("{k}={v}"))))
                    .collect();
                let path = if q.is_empty() {
                    "/v1/sandboxes".to_string()
                } else {
                    format!("/v1/sandboxes?{}", q.join("&"))
                };
                let l: wire::SandboxList = r.call(Method::GET, &path, None::<&()>).await?;
                Ok(l.sandboxes
                    .into_iter()
                    .filter(|s| match &filter.name_prefix {
                        Some(p) => s.name.as_deref().is_some_and(|n| n.starts_with(p)),
                        None => true,
                    })
                    .map(info_from_wire)
                    .collect())
            }
        }
    }

    /// Open Sandbox `id` (B8), e.g. from another process.
    pub async fn sandbox(&self, id: &str) -> Result<Sandbox> {
        match &self.inner {
            Inner::Local(_) => match crate::microvm::open(id, None).await? {
                Some(sb) => Ok(sb),
                None => Sandbox::open_in(id, self.sandbox_state.clone()).await,
            },
            Inner::Remote(r) => {
                let w: wire::SandboxInfo = r
                    .call(
                        Method::GET,
                        &format!("/v1/sandboxes/{}", enc(id)),
                        None::<&()>,
                    )
                    .await?;
                Ok(sandbox(r, w))
            }
        }
    }
}

/// Which Sandbox holds a Workspace or an exec, through a server: IDs are
/// unique across Sandboxes (as on one host), so the running Sandboxes the
/// token sees are asked in turn (`GET /v1/sandboxes`, then each one's
/// `/workspaces` or `/execs/{id}` through the relay); a daemon that does
/// not answer within [`LOOKUP_TIMEOUT`] is passed over, as in-process.
impl Client {
    /// The running Sandboxes, opened (through a server: those the token
    /// sees; in-process: under this client's state root).
    async fn running_sandboxes(&self) -> Result<Vec<Sandbox>> {
        match &self.inner {
            Inner::Local(_) => {
                let mut out = Vec::new();
                for i in self.sandboxes(SandboxFilter::default()).await? {
                    if i.state != State::Running {
                        continue;
                    }
                    if let Ok(sb) =
                        Sandbox::open_in(i.id.as_str(), self.sandbox_state.clone()).await
                    {
                        out.push(sb);
                    }
                }
                Ok(out)
            }
            Inner::Remote(r) => {
                let l: wire::SandboxList =
                    r.call(Method::GET, "/v1/sandboxes", None::<&()>).await?;
                Ok(l.sandboxes
                    .into_iter()
                    .filter(|w| w.state == wire::SandboxState::Running)
                    .map(|w| sandbox(r, w))
                    .collect())
            }
        }
    }

    /// Every Workspace mounted in a running Sandbox, with its Sandbox's ID
    /// (Sandboxes whose daemon does not answer are left out).
    pub async fn sandbox_workspaces(&self) -> Result<Vec<(String, Workspace)>> {
        let mut out = Vec::new();
        for sb in self.running_sandboxes().await? {
            if let Ok(Ok(wss)) = tokio::time::timeout(LOOKUP_TIMEOUT, sb.workspaces()).await {
                out.extend(wss.into_iter().map(|w| (sb.id().to_string(), w)));
            }
        }
        Ok(out)
    }

    /// The running Sandbox that has Workspace `id` mounted, and the
    /// Workspace ([`Error::NotFound`] when none has it).
    pub async fn find_workspace(&self, id: &str) -> Result<(Sandbox, Workspace)> {
        for sb in self.running_sandboxes().await? {
            if let Ok(Ok(wss)) = tokio::time::timeout(LOOKUP_TIMEOUT, sb.workspaces()).await {
                if let Some(ws) = wss.into_iter().find(|w| w.id() == id) {
                    return Ok((sb, ws));
                }
            }
        }
        Err(Error::not_found(
            format!("Workspace {id} in a running Sandbox of {}", self.describe()),
            "no running Sandbox has it mounted; list them with `strata ws list`",
        ))
    }

    /// The running Sandbox that knows exec `id`, and a handle to it
    /// ([`Error::NotFound`] when none does).
    pub async fn find_exec(&self, id: &str) -> Result<(Sandbox, ExecHandle)> {
        for sb in self.running_sandboxes().await? {
            if let Ok(Ok(h)) = tokio::time::timeout(LOOKUP_TIMEOUT, sb.exec_by_id(id)).await {
                return Ok((sb, h));
            }
        }
        Err(Error::not_found(
            format!("exec {id} in a running Sandbox of {}", self.describe()),
            "no running Sandbox knows it (finished execs are kept for a while, until their Sandbox closes)",
        ))
    }
}

/// `GET /v1/sandboxes/{id}`: running when the server says so and the
/// daemon answers through the relay.
pub(crate) async fn state(r: &Remote, sb: &Sandbox) -> SandboxState {
    let path = format!("/v1/sandboxes/{}", enc(sb.id()));
    match r
        .call::<wire::SandboxInfo>(Method::GET, &path, None::<&()>)
        .await
    {
        Ok(w) if w.state == wire::SandboxState::Running && sb.health().await.is_ok() => {
            SandboxState::Running
        }
        _ => SandboxState::Stopped,
    }
}

/// `GET /v1/sandboxes/{id}/logs?lines=N`.
pub(crate) async fn logs(r: &Remote, id: &str, lines: usize) -> Result<String> {
    let path = format!("/v1/sandboxes/{}/logs?lines={}", enc(id), lines.min(10_000));
    let resp = r
        .send(Method::GET, &path, Bytes::new(), "application/json", &[])
        .await?;
    Ok(String::from_utf8_lossy(&r.bytes(resp).await?).into_owned())
}

/// `POST /v1/sandboxes/{id}/restart`: the Sandbox again.
pub(crate) async fn restart(r: &Remote, id: &str) -> Result<Sandbox> {
    let path = format!("/v1/sandboxes/{}/restart", enc(id));
    let w: wire::SandboxInfo = r.call(Method::POST, &path, None::<&()>).await?;
    Ok(sandbox(r, w))
}

/// `DELETE /v1/sandboxes/{id}[?discard=true]`: the server refuses (409,
/// [`Error::Busy`]) uncommitted work unless `discard`.
pub(crate) async fn close(r: &Remote, id: &str, discard: bool) -> Result<()> {
    let mut path = format!("/v1/sandboxes/{}", enc(id));
    if discard {
        path.push_str("?discard=true");
    }
    let resp = r
        .send(Method::DELETE, &path, Bytes::new(), "application/json", &[])
        .await?;
    r.bytes(resp).await?;
    Ok(())
}
