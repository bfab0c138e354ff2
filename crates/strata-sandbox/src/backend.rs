//! The Backend contract (docs/design.md §3, B1–B10). [`crate::NativeBackend`]
//! implements it on [`crate::ns`] and [`crate::exec`]; the Docker and
//! microVM backends come later, as added arms, not API changes.
//!
//! | step | method |
//! |---|---|
//! | B1 create (rootfs or host root, labels, one full unique ID, no adoption by name) | [`Backend::create`] |
//! | B2 attach the Store | [`CreateRequest::store`], bound at [`DaemonPaths::store`] by [`Backend::start`] |
//! | B3 install the daemon binary (0755) and its private config (0600) | [`Backend::create`] writes the token, [`Backend::install_daemon`] the config |
//! | B4 start the daemon as root with CAP_SYS_ADMIN and /dev/fuse under a reaping init | [`Backend::start`] |
//! | B5 startup marker, bounded log tail on failure | [`Backend::start`] returns [`Started`]; [`Backend::log_tail`] |
//! | B4+B5 again after the daemon died (same ID, token, Store, config, scratch) | [`Backend::restart`] |
//! | B6 a private endpoint | [`Endpoint`] + [`SandboxInfo::token_file`] |
//! | B7 exec (nonroot, argv, env, cwd, stdin+EOF, separate streams, exit, ID, cancel) | daemon API over B6; [`ExecRequest`] is its shape |
//! | B8 reopen by exact ID (running vs stopped, config readable) | [`Backend::open`] |
//! | B9 stop then delete; the Store survives | [`Backend::stop`], [`Backend::delete`] |
//! | B10 discover by label or name prefix | [`Backend::list`] |
//!
//! The backend knows nothing of the daemon's wire format or config type
//! (layering: the daemon and the SDK sit above this crate). The caller
//! creates the Sandbox, learns where the daemon's files are
//! ([`SandboxInfo::daemon`], paths as the daemon sees them), serializes the
//! daemon's config with those paths and hands it over as opaque bytes with
//! the daemon's arguments ([`DaemonInstall`]), then starts it. [`launch`]
//! does the three steps and deletes the Sandbox if one fails.
//!
//! What every backend shares beyond the types lives here too, so that a
//! backend is only what differs: [`validate`] (one rule for IDs, names,
//! labels, the Store's place, the token never in argv), [`state`] (the
//! private state directory: creation, record, lock, delete that never
//! crosses a mount; private writes, tokens, log tails) and [`marker`]
//! (the startup marker and the wait for it).

pub mod marker;
pub mod state;
pub mod validate;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cgroup::Limits;
use crate::exec::Identity;
use crate::mounts::{BindMount, RootFs};
use crate::net::Network;

pub use marker::DAEMON_MARKER;

/// One full unique Sandbox ID (never a prefix, never a name).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SandboxId(pub String);

impl SandboxId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for SandboxId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

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
    /// Unique among existing Sandboxes; an existing name is refused, never
    /// adopted. 1-64 characters of `[A-Za-z0-9._-]` (it is the hostname).
    pub name: Option<String>,
    /// Keys are 1-128 characters of `[A-Za-z0-9._/-]`
    /// ([`validate::valid_label_key`], every backend's rule); values are free.
    pub labels: BTreeMap<String, String>,
    /// Pinned image/rootfs or the host root (native).
    pub root: RootFs,
    /// Docker/microVM image reference, pinned by digest.
    pub image: Option<String>,
    pub network: Network,
    /// Limits of the whole Sandbox. Unset memory and pids limits get the
    /// host defaults ([`Limits::host_defaults`]: half of the RAM, 4,096
    /// tasks) unless `no_limits` is set; the record holds the result.
    pub limits: Limits,
    /// Opt out of the default limits: only what `limits` sets applies
    /// (nothing, if it is empty). A command can then take the host down
    /// with a fork bomb or a memory hog.
    #[serde(default)]
    pub no_limits: bool,
    /// B2: the Store directory the daemon serves Workspaces from. Commands
    /// never see it.
    pub store: PathBuf,
    /// Empty directories that must exist in the Sandbox, e.g. `/workspace`
    /// for Workspace mounts ([`crate::SandboxConfig::mountpoints`]).
    #[serde(default)]
    pub mountpoints: Vec<PathBuf>,
    /// B3: the strata binary, which is both the Sandbox's init and the
    /// daemon (it calls [`crate::maybe_run_internal`] first in `main`).
    /// Default: the current executable.
    #[serde(default)]
    pub daemon_exe: Option<PathBuf>,
    /// Host paths shown at the same path inside, on top of the default
    /// view ([`crate::hostview`]): read-only unless writable. Refused if
    /// it is not an existing absolute path, overlaps the Store or the
    /// backend's state, or is the Sandbox's own /tmp, /proc, /sys or /dev.
    /// Symlinks in it are resolved at create (the record keeps the result).
    #[serde(default)]
    pub expose: Vec<Expose>,
}

/// One `--expose HOST_PATH[:rw]`: a host path bound at the same path
/// inside the Sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expose {
    pub path: PathBuf,
    /// `:rw`: commands may write through to the host (as their uid).
    #[serde(default)]
    pub writable: bool,
}

/// A `HOST_PATH[:rw]` argument that can never be right.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expose {arg:?}: {why}; give an absolute host path without '..', optionally followed by :ro or :rw (e.g. /srv/data:rw)")]
pub struct ExposeSyntaxError {
    pub arg: String,
    pub why: &'static str,
}

impl Expose {
    /// A read-only exposure of `path`.
    pub fn read_only(path: impl Into<PathBuf>) -> Self {
        Expose {
            path: path.into(),
            writable: false,
        }
    }

    /// A writable exposure of `path`.
    pub fn writable(path: impl Into<PathBuf>) -> Self {
        Expose {
            path: path.into(),
            writable: true,
        }
    }

    /// Parse `HOST_PATH`, `HOST_PATH:ro` or `HOST_PATH:rw`. Only the syntax
    /// is checked here (absolute, no `..`, no NUL); whether the path
    /// exists and may be shown is checked at create.
    pub fn parse(arg: &str) -> Result<Expose, ExposeSyntaxError> {
        let bad = |why| ExposeSyntaxError {
            arg: arg.to_string(),
            why,
        };
        let (path, writable) = match arg.rsplit_once(':') {
            Some((p, "rw")) => (p, true),
            Some((p, "ro")) => (p, false),
            _ => (arg, false),
        };
        if path.is_empty() {
            return Err(bad("no path"));
        }
        if path.contains('\0') {
            return Err(bad("NUL byte in the path"));
        }
        let p = PathBuf::from(path);
        if !p.is_absolute() {
            return Err(bad("not an absolute path"));
        }
        if !crate::exec::is_clean_absolute(&p) {
            return Err(bad("'..' in the path"));
        }
        Ok(Expose { path: p, writable })
    }

    /// The bind mount that shows it.
    pub fn bind(&self) -> BindMount {
        BindMount {
            source: self.path.clone(),
            target: self.path.clone(),
            readonly: !self.writable,
        }
    }
}

impl CreateRequest {
    /// Defaults for everything but the Store: host root, no network, no
    /// limits, `/workspace` as a mount point.
    pub fn new(store: impl Into<PathBuf>) -> Self {
        CreateRequest {
            name: None,
            labels: BTreeMap::new(),
            root: RootFs::HostReadOnly,
            image: None,
            network: Network::None,
            limits: Limits::default(),
            no_limits: false,
            store: store.into(),
            mountpoints: vec![PathBuf::from("/workspace")],
            daemon_exe: None,
            expose: Vec::new(),
        }
    }
}

impl CreateRequest {
    /// The limits this Sandbox gets: `limits` with the host defaults for
    /// what it leaves unset, or `limits` alone with `no_limits`.
    pub fn effective_limits(&self) -> Result<Limits, BackendError> {
        if self.no_limits {
            return Ok(self.limits);
        }
        self.limits
            .or_host_defaults()
            .map_err(|e| BackendError::Invalid {
                what: "default limits".into(),
                message: format!(
                    "{e} (set --memory and --pids explicitly, or --no-limits to run without)"
                ),
            })
    }
}

/// Where the daemon's files are, as the daemon sees them inside the
/// Sandbox (for the native backend the same paths as on the host). The
/// caller writes these into the daemon's config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonPaths {
    /// The daemon binary (0755); also the exec helper to re-execute.
    pub exe: PathBuf,
    /// The private config (0600) that [`Backend::install_daemon`] writes.
    pub config: PathBuf,
    /// The bearer token: 64 hex digits (32 random bytes), 0600.
    pub token_file: PathBuf,
    /// Where the daemon must listen (its Unix socket, mode 0600).
    pub socket: PathBuf,
    /// Where the daemon must log ([`Backend::log_tail`] reads it).
    pub log_file: PathBuf,
    /// The Store, bound read-write here (reachable by the daemon only).
    pub store: PathBuf,
    /// Scratch space for Workspaces (journals, upper layers), private.
    pub scratch_dir: PathBuf,
    /// The Sandbox's private state directory (root-only, 0700).
    pub state_dir: PathBuf,
}

/// B3: how to run the daemon. Nothing here may be secret: argv and env are
/// visible in /proc; the token stays in its file (the backend refuses
/// arguments or environment that contain it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonInstall {
    /// Arguments after the binary, e.g.
    /// `["__strata-daemon", "--config", <DaemonPaths::config>]`.
    pub args: Vec<String>,
    /// The daemon's environment (nothing else is inherited).
    pub env: Vec<(String, String)>,
    /// The daemon's config, opaque bytes, written 0600 to [`DaemonPaths::config`].
    pub config: Vec<u8>,
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
    /// Created, daemon not started yet.
    Created,
    Running,
    /// The daemon ended (stopped, crashed or never got ready).
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
    /// Creation time, milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
    /// B6, host side; `None` until the daemon is ready.
    pub endpoint: Option<Endpoint>,
    /// B6, host side: the bearer token file (0600).
    pub token_file: PathBuf,
    /// B5, host side: the daemon's log.
    pub log_file: PathBuf,
    /// The daemon's files as it sees them (for its config).
    pub daemon: DaemonPaths,
    /// The creation request, readable after a reopen (B8).
    pub config: CreateRequest,
    /// The daemon's startup marker, once ready.
    pub marker: Option<String>,
    /// Host pid of the native monitor, container ID, VM pid.
    pub handle: Option<String>,
}

/// B4/B5: result of a successful start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Started {
    /// The daemon's startup marker line, e.g. `STRATA-DAEMON-READY socket=… pid=…`.
    pub marker: String,
    pub endpoint: Endpoint,
    pub token_file: PathBuf,
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
    /// Name prefix (a Sandbox without a name never matches one).
    pub name_prefix: Option<String>,
}

impl Filter {
    pub fn matches(&self, name: Option<&str>, labels: &BTreeMap<String, String>) -> bool {
        let labels_ok = self.labels.iter().all(|(k, v)| labels.get(k) == Some(v));
        let name_ok = match &self.name_prefix {
            Some(p) => name.is_some_and(|n| n.starts_with(p.as_str())),
            None => true,
        };
        labels_ok && name_ok
    }
}

/// Backend failures, each naming the Sandbox or path and the step.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("sandbox {0} not found")]
    NotFound(SandboxId),
    #[error("{0:?} is not a sandbox ID (IDs look like sb-<24 hex digits>)")]
    BadId(String),
    #[error("a sandbox named {name:?} already exists ({id}); names are never adopted")]
    NameTaken { name: String, id: SandboxId },
    #[error("sandbox request: {what}: {message}")]
    Invalid { what: String, message: String },
    #[error("sandbox {id}: {action} refused: it is {state:?}")]
    WrongState {
        id: SandboxId,
        action: &'static str,
        state: State,
    },
    #[error("sandbox {id}: {step} failed: {message}\n--- log tail ---\n{log_tail}")]
    Step {
        id: SandboxId,
        step: &'static str,
        message: String,
        log_tail: String,
    },
    #[error("sandbox {id}: daemon did not print its startup marker within {waited:?}\n--- log tail ---\n{log_tail}")]
    NoMarker {
        id: SandboxId,
        waited: Duration,
        log_tail: String,
    },
    #[error("sandbox state: {action} {path}: {source}")]
    State {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Every backend implements the whole contract.
pub trait Backend {
    fn kind(&self) -> BackendKind;
    /// B1+B2(+B3 token): a new Sandbox with a fresh full ID, its private
    /// state and bearer token; refuses a taken name. The daemon is not
    /// running yet ([`State::Created`]).
    fn create(&self, req: &CreateRequest) -> Result<SandboxInfo, BackendError>;
    /// B3: the daemon binary (0755) where the Sandbox can run it, and its
    /// private config (0600) from `daemon.config`.
    fn install_daemon(&self, id: &SandboxId, daemon: &DaemonInstall) -> Result<(), BackendError>;
    /// B1–B3 as one step: [`Backend::create`], then
    /// [`Backend::install_daemon`] with what `daemon` builds from the new
    /// Sandbox's paths; on a failure of the install the Sandbox is
    /// deleted. A backend may write its record once, already installed
    /// (the native backend does: one fsync'ed record write fewer per
    /// Sandbox), so the Sandbox is never seen [`State::Created`].
    fn create_installed(
        &self,
        req: &CreateRequest,
        daemon: &dyn Fn(&SandboxInfo) -> DaemonInstall,
    ) -> Result<SandboxInfo, BackendError> {
        let info = self.create(req)?;
        if let Err(e) = self.install_daemon(&info.id, &daemon(&info)) {
            let _ = self.delete(&info.id);
            return Err(e);
        }
        Ok(info)
    }
    /// B4+B5+B6: start the daemon under the Sandbox's init and wait, bounded,
    /// for its startup marker; on failure the error carries the log tail
    /// and nothing of the Sandbox keeps running (its record stays, Stopped).
    fn start(&self, id: &SandboxId, timeout: Duration) -> Result<Started, BackendError>;
    /// B4+B5+B6 again for a [`State::Stopped`] Sandbox (its daemon
    /// crashed, was killed or was stopped): the same ID, token, Store,
    /// config and state directory (so the daemon finds its Workspaces'
    /// scratch), the daemon as installed. Same contract as
    /// [`Backend::start`] on failure (log tail, nothing left running, the
    /// Sandbox stays Stopped and may be restarted again). A Running or
    /// never-started ([`State::Created`]) Sandbox is refused with
    /// [`BackendError::WrongState`]: restarting a live daemon would kill
    /// its running commands, so the caller stops it first, explicitly.
    fn restart(&self, id: &SandboxId, timeout: Duration) -> Result<Started, BackendError>;
    /// B5: last `lines` of the daemon's log (bounded).
    fn log_tail(&self, id: &SandboxId, lines: usize) -> Result<String, BackendError>;
    /// B8: reopen by exact ID from any process.
    fn open(&self, id: &SandboxId) -> Result<SandboxInfo, BackendError>;
    /// B10: list by labels and/or name prefix, oldest first.
    fn list(&self, filter: &Filter) -> Result<Vec<SandboxInfo>, BackendError>;
    /// B9: stop the daemon (SIGTERM, after `grace` SIGKILL), its init and
    /// namespaces, and remove its cgroup. Stopping a stopped Sandbox is fine.
    fn stop(&self, id: &SandboxId, grace: Duration) -> Result<(), BackendError>;
    /// B9: delete the record and everything private to the Sandbox; never
    /// the Store. Refused while it runs.
    fn delete(&self, id: &SandboxId) -> Result<(), BackendError>;
}

/// create_installed + start; `daemon` builds the daemon's install
/// from the new Sandbox's paths. On any failure after create, the Sandbox
/// is stopped and deleted and the error (with the log tail) returned.
pub fn launch(
    backend: &dyn Backend,
    req: &CreateRequest,
    daemon: &dyn Fn(&SandboxInfo) -> DaemonInstall,
    timeout: Duration,
) -> Result<(SandboxInfo, Started), BackendError> {
    let info = backend.create_installed(req, daemon)?;
    let started = backend.start(&info.id, timeout);
    match started {
        Ok(s) => {
            let info = backend.open(&info.id)?;
            Ok((info, s))
        }
        Err(e) => {
            let _ = backend.stop(&info.id, Duration::ZERO);
            let _ = backend.delete(&info.id);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn expose_syntax() {
        assert_eq!(
            Expose::parse("/srv/data").unwrap(),
            Expose::read_only("/srv/data")
        );
        assert_eq!(
            Expose::parse("/srv/data:ro").unwrap(),
            Expose::read_only("/srv/data")
        );
        assert_eq!(
            Expose::parse("/srv/data:rw").unwrap(),
            Expose::writable("/srv/data")
        );
        // A colon that is not a mode belongs to the path.
        assert_eq!(
            Expose::parse("/srv/a:b").unwrap(),
            Expose::read_only("/srv/a:b")
        );
        for (bad, why) in [
            ("", "no path"),
            (":rw", "no path"),
            ("srv/data", "absolute"),
            ("/srv/../etc:rw", "'..'"),
            ("/srv/a\0b", "NUL"),
        ] {
            let e = Expose::parse(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        let b = Expose::writable("/srv/x").bind();
        assert_eq!(
            (b.source.as_path(), b.target.as_path()),
            (Path::new("/srv/x"), Path::new("/srv/x"))
        );
        assert!(!b.readonly);
    }
}
