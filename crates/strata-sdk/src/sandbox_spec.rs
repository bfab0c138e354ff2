//! What a Sandbox is created from ([`SandboxSpec`]), which ones
//! [`crate::Sandbox::list`] returns ([`SandboxFilter`]) and where one is in
//! its life ([`SandboxState`]); re-exported by `sandbox.rs`, which does the
//! creating.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use strata_sandbox::{Expose, Limits, Network};

/// What to create.
#[derive(Debug, Clone)]
pub struct SandboxSpec {
    /// The Store the Sandbox's Workspaces come from (B2).
    pub store: PathBuf,
    /// Unique among existing Sandboxes; an existing name is refused
    /// ([`Error::Busy`](crate::Error::Busy)), never adopted.
    pub name: Option<String>,
    /// Labels, for [`Sandbox::list`](crate::Sandbox::list).
    pub labels: BTreeMap<String, String>,
    /// `None` (loopback only, the default) or `Host`.
    pub network: Network,
    /// Memory, pids and CPU limits (cgroups). Unset memory and pids get
    /// the defaults (half of the host's RAM, 4,096 tasks) unless
    /// `no_limits` is set.
    pub limits: Limits,
    /// No default limits: only what `limits` sets applies. A command can
    /// then exhaust the host's memory or pids.
    pub no_limits: bool,
    /// A directory holding a root filesystem (e.g. an unpacked image) to
    /// show commands, read-only, instead of the host's root. It must have
    /// what the commands run (a missing program is
    /// [`Error::ExecFailed`](crate::Error::ExecFailed) with ENOENT).
    pub rootfs: Option<PathBuf>,
    /// A binary that calls [`crate::maybe_run_internal`] first in `main`
    /// (the strata CLI). Default: the current executable.
    pub daemon_exe: Option<PathBuf>,
    /// State root (default: `/var/lib/strata/sandboxes` as root, else
    /// `$XDG_STATE_HOME/strata/sandboxes`). Not under /tmp or /run.
    pub state_dir: Option<PathBuf>,
    /// How long to wait for the daemon's marker (default 10 s).
    pub startup_timeout: Duration,
    /// Through a server ([`crate::Client::create_sandbox`]): the project
    /// whose branches the Sandbox mounts (required for a token scoped to
    /// projects). Not used in-process.
    pub project: Option<String>,
    /// Run on the docker backend (strata-docker) with this image (a local
    /// image, `NAME:TAG` or `NAME@sha256:…`, pinned to its ID at create)
    /// instead of the native one. The daemon uploaded is `daemon_exe`, else
    /// `$STRATA_STATIC_EXE`, else this program if it is statically linked
    /// (everything this workspace builds is); `rootfs` and
    /// `state_dir` do not apply (its state is under
    /// `/var/lib/strata/docker`).
    pub docker_image: Option<String>,
    /// Host paths commands see at the same path, on top of the default
    /// view (the host's system directories and /etc only, see
    /// docs/security.md): read-only unless [`Expose::writable`]. Refused
    /// when a path does not exist or overlaps the Store, strata's state or
    /// host Workspaces' scratch and run directories; not supported by the
    /// docker backend yet.
    pub expose: Vec<Expose>,
    /// Run in this project's microVM ([`crate::microvm`]), started if
    /// needed: a native Sandbox inside the VM, reached through its server.
    pub microvm: Option<crate::microvm::MicroVm>,
    /// How the Sandbox's Workspaces serve FUSE requests: `DevFuse`
    /// (read(2)/write(2) on /dev/fuse), `IoUringIfAvailable` (FUSE over
    /// io_uring when the kernel offers it, else /dev/fuse) or `IoUring`
    /// (io_uring, or every mount fails saying why). `None`: this process's
    /// `STRATA_FUSE_TRANSPORT` (`dev-fuse`, `auto`, `uring`; unset:
    /// /dev/fuse), read at create. Either way the choice is written into
    /// the daemon's configuration, so a restart keeps it; the daemon's
    /// health (`fuse_transport`) and each Workspace
    /// ([`crate::Workspace::transport`]) report it. Native and docker
    /// backends; through a server or in a microVM, the environment of
    /// the server that creates the Sandbox decides.
    pub fuse_transport: Option<strata_workspace::Transport>,
}

impl SandboxSpec {
    /// A spec with defaults for everything but the Store.
    pub fn new(store: impl Into<PathBuf>) -> Self {
        SandboxSpec {
            store: store.into(),
            name: None,
            labels: BTreeMap::new(),
            network: Network::None,
            limits: Limits::default(),
            no_limits: false,
            rootfs: None,
            daemon_exe: None,
            state_dir: None,
            startup_timeout: Duration::from_secs(10),
            docker_image: None,
            expose: Vec::new(),
            project: None,
            microvm: None,
            fuse_transport: None,
        }
    }
    /// Set the FUSE transport (see [`SandboxSpec::fuse_transport`]).
    pub fn fuse_transport(mut self, t: strata_workspace::Transport) -> Self {
        self.fuse_transport = Some(t);
        self
    }
    /// Show the host path `path` to commands, read-only (`writable`:
    /// read-write), at the same path.
    pub fn expose(mut self, path: impl Into<PathBuf>, writable: bool) -> Self {
        self.expose.push(Expose {
            path: path.into(),
            writable,
        });
        self
    }
    /// Set the name.
    pub fn name(mut self, n: impl Into<String>) -> Self {
        self.name = Some(n.into());
        self
    }
    /// Add a label.
    pub fn label(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
        self.labels.insert(k.into(), v.into());
        self
    }
}

/// Which Sandboxes [`Sandbox::list`](crate::Sandbox::list) returns.
#[derive(Debug, Clone, Default)]
pub struct SandboxFilter {
    /// Every label must match.
    pub labels: BTreeMap<String, String>,
    /// Name prefix.
    pub name_prefix: Option<String>,
    /// State root (default as in [`SandboxSpec::state_dir`]).
    pub state_dir: Option<PathBuf>,
}

/// Where a Sandbox is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxState {
    /// The daemon answers.
    Running,
    /// The daemon is gone (stopped, crashed, or never got ready).
    Stopped,
}
