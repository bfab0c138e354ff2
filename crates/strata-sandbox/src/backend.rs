//! The Backend contract (BRIEF §3, B1–B10), as types. Not implemented yet:
//! the native backend will be built on [`crate::ns`] and [`crate::exec`],
//! the Docker and microVM backends later, as added arms, not API changes.
//!
//! | step | method |
//! |---|---|
//! | B1 create (rootfs or host root, labels, one full unique ID, no adoption by name) | [`Backend::create`] |
//! | B2 attach the Store | [`CreateRequest::store`], checked by [`Backend::create`] |
//! | B3 install the daemon binary (0755) and its private config (0600) | [`Backend::install_daemon`] |
//! | B4 start the daemon as root with CAP_SYS_ADMIN and /dev/fuse under a reaping init | [`Backend::start`] |
//! | B5 startup marker, bounded log tail on failure | [`Backend::start`] returns [`Started`]; [`Backend::log_tail`] |
//! | B6 a private endpoint | [`Endpoint`], in [`Started`] and [`SandboxInfo`] |
//! | B7 exec (nonroot, argv, env, cwd, stdin+EOF, separate streams, exit, ID, cancel) | daemon API over B6; [`ExecRequest`] is its shape |
//! | B8 reopen by exact ID (running vs stopped, config readable) | [`Backend::open`] |
//! | B9 stop then delete; the Store survives | [`Backend::stop`], [`Backend::delete`] |
//! | B10 discover by label or name prefix | [`Backend::list`] |

//!
//! How the native backend maps onto this crate:
//!
//! * B1/B4: [`crate::SandboxCommand::privileged`] starts the daemon as root
//!   with capabilities under the Sandbox's init, with
//!   [`crate::SandboxConfig::dev_fuse`] so that it can serve Workspaces,
//!   [`crate::SandboxConfig::masked_paths`] holding the Store's directory
//!   (commands never see it), `report_path` in the Sandbox's state
//!   directory and `process_group(0)` so it outlives the creating CLI.
//! * B5: the daemon's stdout (startup marker) and log go to files in the
//!   state directory; the monitor's report says how the Sandbox ended.
//! * B7: the daemon runs each command with [`crate::exec_helper_command`]
//!   (privilege drop, seccomp, Session for cancel by process group and PTY
//!   mode), inside the Sandbox's namespaces.
//! * B8: the record holds the monitor's host pid and the report path;
//!   "running" is "pid alive and no report yet" ([`crate::read_report`]).
//! * B9: SIGTERM to the monitor reaches the daemon through PID 1; SIGKILL
//!   of the monitor takes the whole PID namespace down (PR_SET_PDEATHSIG).
//! * Probe: [`crate::run_selfcheck`] and
//!   [`crate::host_allows_unprivileged_userns`].

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cgroup::Limits;
use crate::exec::Identity;
use crate::mounts::RootFs;
use crate::net::Network;

/// One full unique Sandbox ID (never a prefix, never a name).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SandboxId(pub String);

/// Which backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    Native,
    Docker,
    MicroVm,
}

/// B1/B2: what to create.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateRequest {
    /// Unique among live Sandboxes; an existing name is refused, never adopted.
    pub name: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// Pinned image/rootfs or the host root (native).
    pub root: RootFs,
    /// Docker/microVM image reference, pinned by digest.
    pub image: Option<String>,
    pub network: Network,
    pub limits: Limits,
    /// B2: the Store directory the daemon serves Workspaces from. Commands
    /// never see it.
    pub store: PathBuf,
}

/// B6: how the host reaches the daemon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Endpoint {
    /// HTTP over a Unix socket (mode 0600).
    Unix { path: PathBuf },
    /// HTTP on 127.0.0.1 only.
    Tcp { port: u16 },
}

/// Where a Sandbox is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Created,
    Running,
    Stopped,
}

/// B8/B10: what a record says about a Sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxInfo {
    pub id: SandboxId,
    pub backend: BackendKind,
    pub name: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub state: State,
    pub endpoint: Option<Endpoint>,
    /// The creation request, readable after a reopen (B8).
    pub config: CreateRequest,
    /// Host pid of the native monitor, container ID, VM pid.
    pub handle: Option<String>,
}

/// B4/B5: result of a successful start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Started {
    /// The daemon's startup marker line, e.g. `STRATA-DAEMON-READY socket=… pid=…`.
    pub marker: String,
    pub endpoint: Endpoint,
}

/// B7: the shape of an exec request the daemon accepts (over B6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecRequest {
    pub argv: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
    /// Default: the Workspace mount; must be inside the Sandbox.
    pub cwd: Option<PathBuf>,
    pub identity: Identity,
    pub stdin: bool,
    pub tty: bool,
    pub timeout: Option<Duration>,
}

/// B10: which Sandboxes to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Every label must match.
    pub labels: BTreeMap<String, String>,
    /// Name prefix.
    pub name_prefix: Option<String>,
}

/// Backend failures, each naming the Sandbox and the step.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("sandbox {0:?} not found")]
    NotFound(SandboxId),
    #[error("a sandbox named {name:?} already exists ({id:?}); names are never adopted")]
    NameTaken { name: String, id: SandboxId },
    #[error("sandbox {id:?}: {step} failed: {message}\n--- log tail ---\n{log_tail}")]
    Step {
        id: SandboxId,
        step: &'static str,
        message: String,
        log_tail: String,
    },
    #[error("sandbox {id:?}: daemon did not print its startup marker within {waited:?}\n--- log tail ---\n{log_tail}")]
    NoMarker {
        id: SandboxId,
        waited: Duration,
        log_tail: String,
    },
    #[error("sandbox state directory {path}: {source}")]
    State {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Every backend implements the whole contract.
pub trait Backend {
    fn kind(&self) -> BackendKind;
    /// B1+B2: make a new Sandbox with a fresh full ID; refuse a taken name.
    fn create(&self, req: &CreateRequest) -> Result<SandboxInfo, BackendError>;
    /// B3: put the daemon binary (0755) and its private config (0600,
    /// holding the bearer token) where the Sandbox can run them.
    fn install_daemon(&self, id: &SandboxId, daemon: &std::path::Path) -> Result<(), BackendError>;
    /// B4+B5+B6: start the daemon under the Sandbox's init and wait, bounded,
    /// for its startup marker; on failure the error carries the log tail.
    fn start(&self, id: &SandboxId, timeout: Duration) -> Result<Started, BackendError>;
    /// B5: last `lines` of the daemon's log (bounded).
    fn log_tail(&self, id: &SandboxId, lines: usize) -> Result<String, BackendError>;
    /// B8: reopen by exact ID from any process.
    fn open(&self, id: &SandboxId) -> Result<SandboxInfo, BackendError>;
    /// B10: list by labels and/or name prefix.
    fn list(&self, filter: &Filter) -> Result<Vec<SandboxInfo>, BackendError>;
    /// B9: stop the daemon (it unmounts its Workspaces), init and namespaces.
    fn stop(&self, id: &SandboxId, grace: Duration) -> Result<(), BackendError>;
    /// B9: delete the record and everything private to the Sandbox; never the Store.
    fn delete(&self, id: &SandboxId) -> Result<(), BackendError>;
}
