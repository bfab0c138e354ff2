//! Running a command in a fresh native Sandbox (namespaces + mounts +
//! cgroup), from any process, including a multi-threaded one.
//!
//! How: [`SandboxCommand::spawn`] starts `init_exe __strata-init FD` with a
//! plain `std::process::Command` (fork+exec; `pre_exec` only clears
//! close-on-exec on the settings memfd FD, see [`crate::internal`]). That
//! binary must call [`crate::maybe_run_internal`] first thing in `main`;
//! it then runs single-threaded as:
//!
//! * the **monitor** (host namespaces): makes the Sandbox's cgroups (and
//!   stays out of them), creates the PID namespace, forks PID 1 and moves
//!   it into the cgroup while PID 1 builds its view, forwards signals to
//!   it, writes the report, cleans the cgroup up and exits with the
//!   command's status (or dies of the command's signal);
//! * **PID 1** (new PID, mount, network, IPC, UTS, cgroup namespaces):
//!   builds the view ([`crate::mounts`]), brings `lo` up, forks the
//!   command (which drops privileges, [`crate::exec`]), reaps every
//!   orphan and forwards signals to the command.
//!
//! The outcome travels back in a small JSON report file in a private
//! directory (mode 0700), so a failure of the Sandbox itself is an error
//! for the caller and never looks like an exit status of the command.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::cgroup::Limits;
use crate::exec::{ExecSpec, Failure, Identity, Session, SpecError};
use crate::internal::{init_command, InitWire, INIT_ARG};
use crate::mounts::{BindMount, RootFs};
use crate::net::Network;
use crate::rlimit::Rlimit;

/// Exit code of the monitor when the Sandbox itself failed (the report
/// says why). Chosen like `docker run`'s 125; callers use the report, not
/// this number.
pub const SANDBOX_FAILURE_EXIT: i32 = 125;

/// How the Sandbox is built.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxConfig {
    pub root: RootFs,
    pub network: Network,
    /// Hostname in the Sandbox's UTS namespace (default "strata").
    pub hostname: Option<String>,
    pub limits: Limits,
    /// Name of the cgroup created for `limits` (default `strata-<pid>`).
    pub cgroup_name: Option<String>,
    /// Size of the private /tmp (default: tmpfs default, half of RAM;
    /// charged to the memory cgroup either way).
    pub tmp_size_bytes: Option<u64>,
    /// Extra bind mounts (the daemon's state, exposed host paths). A
    /// missing target is created on the host view's tmpfs, in the fresh
    /// /tmp, or like a mount point (`mountpoints`); a file target gets an
    /// empty placeholder file.
    pub binds: Vec<BindMount>,
    /// Bind /dev/fuse into the Sandbox's /dev for the daemon (root). Commands
    /// never see it: the privilege drop takes it away in a mount namespace
    /// shared by all of them (`exec::hide_dev_fuse`, `commands_ns`).
    #[serde(default)]
    pub dev_fuse: bool,
    /// Paths inside the Sandbox to hide (empty read-only tmpfs over a
    /// directory, /dev/null over a file), on top of
    /// `mounts::DEFAULT_MASKED` and, for the host view, what /etc holds
    /// that others may not read (`hostview`). The Store's directory
    /// belongs here in case a view shows it. Missing paths are skipped.
    #[serde(default)]
    pub masked_paths: Vec<PathBuf>,
    /// Empty directories (root-owned, 0755) that must exist in the
    /// Sandbox's root, e.g. `/workspace` for Workspace mounts and bind
    /// targets. Missing ones are added on a small read-only tmpfs layer
    /// (`mountpoints` module): the host root is never written to. Existing
    /// directories are left as they are.
    #[serde(default)]
    pub mountpoints: Vec<PathBuf>,
    /// Paths hidden from commands only, e.g. the native backend's state
    /// root (the Store's bind, tokens, sockets): masked like
    /// `masked_paths`, but in the commands' mount namespace, so the
    /// daemon keeps them. Carried to the exec helper in the daemon's /dev
    /// layer, so this needs `dev_fuse`; without it they are masked for
    /// everyone. Missing paths are skipped.
    #[serde(default)]
    pub command_masked_paths: Vec<PathBuf>,
}

/// A [`SandboxConfig`] that cannot work; refused before anything starts.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("sandbox config: hostname {0:?} must be 1-64 bytes without NUL or '/'")]
    Hostname(String),
    #[error("sandbox config: {0}")]
    Cgroup(#[from] crate::cgroup::CgroupError),
    #[error("sandbox config: bind target {0} must be an absolute path without '..'")]
    BindTarget(PathBuf),
    #[error("sandbox config: bind source {0} does not exist")]
    BindSource(PathBuf),
    #[error("sandbox config: masked path {0} must be an absolute path without '..'")]
    Mask(PathBuf),
    #[error("sandbox config: mount point {0} must be an absolute path without '..', not /")]
    Mountpoint(PathBuf),
    #[error("sandbox config: rootfs {0} is not a directory")]
    Rootfs(PathBuf),
}

impl SandboxConfig {
    /// Check what can be checked from outside (paths are checked again,
    /// race-free, by the init).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(h) = &self.hostname {
            if h.is_empty() || h.len() > 64 || h.contains('\0') || h.contains('/') {
                return Err(ConfigError::Hostname(h.clone()));
            }
        }
        if let Some(n) = &self.cgroup_name {
            crate::cgroup::check_name(n)?;
        }
        if let RootFs::Dir { path, .. } = &self.root {
            if !path.is_dir() {
                return Err(ConfigError::Rootfs(path.clone()));
            }
        }
        for b in &self.binds {
            if !crate::exec::is_clean_absolute(&b.target) {
                return Err(ConfigError::BindTarget(b.target.clone()));
            }
            if !b.source.exists() {
                return Err(ConfigError::BindSource(b.source.clone()));
            }
        }
        for m in &self.mountpoints {
            if !crate::mountpoints::valid(m) {
                return Err(ConfigError::Mountpoint(m.clone()));
            }
        }
        for m in self.masked_paths.iter().chain(&self.command_masked_paths) {
            if !crate::exec::is_clean_absolute(m) {
                return Err(ConfigError::Mask(m.clone()));
            }
        }
        Ok(())
    }
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            root: RootFs::HostReadOnly,
            network: Network::None,
            hostname: None,
            limits: Limits::default(),
            cgroup_name: None,
            tmp_size_bytes: None,
            binds: Vec::new(),
            dev_fuse: false,
            masked_paths: Vec::new(),
            mountpoints: Vec::new(),
            command_masked_paths: Vec::new(),
        }
    }
}

/// Who the command runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunAs {
    /// A command: privileges dropped to this identity, seccomp applied.
    User(Identity),
    /// The Sandbox's daemon: root with capabilities, no filter.
    Root,
}

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Exited(i32),
    Signaled(i32),
}

impl Outcome {
    /// Shell convention: the code, or 128+N for signal N.
    pub fn code(&self) -> i32 {
        match *self {
            Outcome::Exited(c) => c,
            Outcome::Signaled(s) => 128 + s,
        }
    }
}

/// The report the monitor writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Report {
    Finished(Outcome),
    Failed(Failure),
}

/// Starting the Sandbox failed (before anything ran).
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("sandbox spawn: {0}")]
    Spec(#[from] SpecError),
    #[error("sandbox spawn: {0}")]
    Config(#[from] ConfigError),
    #[error("sandbox spawn: encoding the init configuration: {source}")]
    Encode { source: serde_json::Error },
    #[error("sandbox spawn: finding the current executable for the init: {source}")]
    CurrentExe { source: io::Error },
    #[error("sandbox spawn: creating the report directory {path}: {source}")]
    ReportDir { path: PathBuf, source: io::Error },
    #[error("sandbox spawn: passing the settings through a memfd or pipe: {source}")]
    Settings { source: io::Error },
    #[error("sandbox spawn: the commands' cgroup handed over by the Sandbox's init is unusable: {message}")]
    CommandsCgroup { message: String },
    #[error("sandbox spawn: starting {exe} {INIT_ARG}: {source}")]
    Start { exe: PathBuf, source: io::Error },
    #[error(
        "starting the exec helper {exe} {}: {source}",
        crate::internal::EXEC_ARG
    )]
    StartHelper { exe: PathBuf, source: io::Error },
}

/// Waiting for the Sandbox failed, or the Sandbox (not the command) failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("sandbox wait: {source}")]
    Wait { source: io::Error },
    #[error("sandbox failed at {}: {}", .0.stage, .0.message)]
    Sandbox(Failure),
    #[error("sandbox init ended with {status} and left no report at {path} (was {INIT_ARG} handled by maybe_run_internal() in the init binary's main?)")]
    NoReport { status: ExitStatus, path: PathBuf },
    #[error("sandbox: reading report {path}: {source}")]
    ReadReport { path: PathBuf, source: io::Error },
    #[error("sandbox: unreadable report {path}: {source}")]
    BadReport {
        path: PathBuf,
        source: serde_json::Error,
    },
}

/// A command to run in a new Sandbox. Build, set stdio, [`spawn`](Self::spawn).
#[derive(Debug)]
pub struct SandboxCommand {
    config: SandboxConfig,
    run_as: RunAs,
    argv: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    cwd: PathBuf,
    rlimits: Vec<Rlimit>,
    session: Session,
    init_exe: Option<PathBuf>,
    report_path: Option<PathBuf>,
    process_group: Option<i32>,
    new_session: bool,
    stdio: [Option<Stdio>; 3],
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

impl SandboxCommand {
    /// A command with dropped privileges (the normal case).
    pub fn new(config: SandboxConfig, spec: ExecSpec) -> Self {
        SandboxCommand {
            config,
            run_as: RunAs::User(spec.identity),
            argv: spec.argv,
            env: spec.env,
            cwd: spec.cwd,
            rlimits: spec.rlimits,
            session: spec.session,
            init_exe: None,
            report_path: None,
            process_group: None,
            new_session: false,
            stdio: [None, None, None],
        }
    }

    /// The Sandbox's daemon: runs as root with capabilities. Never use
    /// this for a user's command.
    pub fn privileged(
        config: SandboxConfig,
        argv: Vec<OsString>,
        env: Vec<(OsString, OsString)>,
        cwd: PathBuf,
    ) -> Self {
        SandboxCommand {
            config,
            run_as: RunAs::Root,
            argv,
            env,
            cwd,
            rlimits: Vec::new(),
            session: Session::Inherit,
            init_exe: None,
            report_path: None,
            process_group: None,
            new_session: false,
            stdio: [None, None, None],
        }
    }

    /// The binary re-executed as the init; it must call
    /// [`crate::maybe_run_internal`]. Default: `std::env::current_exe()`.
    pub fn init_exe(mut self, path: impl Into<PathBuf>) -> Self {
        self.init_exe = Some(path.into());
        self
    }
    /// Where the monitor writes its [`Report`] (must not exist yet; its
    /// directory must). Default: a fresh 0700 directory under the temp dir,
    /// removed when the [`SandboxChild`] is dropped. A backend whose
    /// Sandbox outlives the creating process (the daemon, B8 reopen) puts
    /// it in the Sandbox's state directory and reads it with [`read_report`].
    pub fn report_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.report_path = Some(path.into());
        self
    }

    /// Put the monitor in process group `pgid` (0: a new group of its own),
    /// e.g. so that a terminal's Ctrl-C does not reach a background Sandbox.
    /// Passed to `CommandExt::process_group` (posix_spawn attributes, no
    /// `pre_exec`).
    pub fn process_group(mut self, pgid: i32) -> Self {
        self.process_group = Some(pgid);
        self.new_session = false;
        self
    }

    /// Detach the whole Sandbox from the caller's session: the monitor
    /// calls `setsid(2)` first thing, so it, PID 1 and everything below
    /// run in a session of their own with **no controlling terminal**.
    /// A background Sandbox needs this: in the caller's session its
    /// processes could open `/dev/tty` (the caller's terminal: write
    /// escape sequences to it, or take it over with TIOCSPGRP and read
    /// keystrokes) and would get the terminal's signals. Replaces
    /// [`process_group`](Self::process_group): setsid fails for a process
    /// group leader, and a new session is a new process group too.
    pub fn new_session(mut self) -> Self {
        self.new_session = true;
        self.process_group = None;
        self
    }

    pub fn stdin(mut self, s: Stdio) -> Self {
        self.stdio[0] = Some(s);
        self
    }
    pub fn stdout(mut self, s: Stdio) -> Self {
        self.stdio[1] = Some(s);
        self
    }
    pub fn stderr(mut self, s: Stdio) -> Self {
        self.stdio[2] = Some(s);
        self
    }

    /// Start the Sandbox. Bad input is refused here, before any process.
    pub fn spawn(self) -> Result<SandboxChild, SpawnError> {
        self.config.validate()?;
        // Validate argv/env/cwd/rlimits exactly as the init will.
        let identity = match self.run_as {
            RunAs::User(i) => i,
            RunAs::Root => Identity::default(),
        };
        ExecSpec {
            argv: self.argv.clone(),
            env: self.env.clone(),
            cwd: self.cwd.clone(),
            identity,
            rlimits: self.rlimits.clone(),
            session: self.session,
        }
        .prepare()?;
        let exe = match self.init_exe {
            Some(p) => p,
            None => std::env::current_exe().map_err(|source| SpawnError::CurrentExe { source })?,
        };
        let (report, owned_dir) = match self.report_path {
            Some(p) => {
                if p.exists() {
                    return Err(SpawnError::ReportDir {
                        path: p,
                        source: io::ErrorKind::AlreadyExists.into(),
                    });
                }
                (p, None)
            }
            None => {
                // pid + counter + clock: unique within this process and very
                // unlikely to meet a stale directory of an earlier process.
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.subsec_nanos())
                    .unwrap_or(0);
                let dir = std::env::temp_dir().join(format!(
                    "strata-sandbox-{}-{}-{nanos:08x}",
                    std::process::id(),
                    COUNTER.fetch_add(1, Ordering::Relaxed)
                ));
                // 0700: the report is only for us; a pre-existing path is an
                // error (create, not open), so nobody can plant a report.
                fs::DirBuilder::new()
                    .mode(0o700)
                    .create(&dir)
                    .map_err(|source| SpawnError::ReportDir {
                        path: dir.clone(),
                        source,
                    })?;
                (dir.join("report.json"), Some(dir))
            }
        };
        let wire = InitWire {
            config: self.config,
            run_as: self.run_as,
            cwd: self.cwd,
            rlimits: self.rlimits,
            session: self.session,
            new_session: self.new_session,
            report: report.clone(),
        };
        let json = serde_json::to_string(&wire).map_err(|source| SpawnError::Encode { source })?;
        // Settings, argv and env in a memfd, never in argv (internal.rs).
        let mut cmd = init_command(&exe, &json, &self.env, &self.argv).inspect_err(|_| {
            if let Some(d) = &owned_dir {
                let _ = fs::remove_dir_all(d);
            }
        })?;
        let [i, o, e] = self.stdio;
        if let Some(pgid) = self.process_group {
            std::os::unix::process::CommandExt::process_group(&mut cmd, pgid);
        }
        if let Some(s) = i {
            cmd.stdin(s);
        }
        if let Some(s) = o {
            cmd.stdout(s);
        }
        if let Some(s) = e {
            cmd.stderr(s);
        }
        let child = match cmd.spawn() {
            Ok(c) => c,
            Err(source) => {
                if let Some(d) = &owned_dir {
                    let _ = fs::remove_dir_all(d);
                }
                return Err(SpawnError::Start { exe, source });
            }
        };
        Ok(SandboxChild {
            child,
            owned_dir,
            report,
        })
    }
}

/// A running Sandbox (its monitor process).
#[derive(Debug)]
pub struct SandboxChild {
    child: Child,
    /// The temp directory we created for the report (removed on drop).
    owned_dir: Option<PathBuf>,
    report: PathBuf,
}

impl SandboxChild {
    /// Host pid of the monitor.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The monitor process, e.g. to take its stdout/stderr pipes.
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Send `sig` to the monitor, which forwards it to PID 1 and PID 1 to
    /// the command (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1/2, SIGWINCH).
    pub fn signal(&self, sig: i32) -> io::Result<()> {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let sig = rustix::process::Signal::from_named_raw(sig)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        rustix::process::kill_process(pid, sig).map_err(Into::into)
    }

    /// Wait for the end and return the command's outcome.
    pub fn wait(mut self) -> Result<Outcome, RunError> {
        let status = self
            .child
            .wait()
            .map_err(|source| RunError::Wait { source })?;
        self.read_report(status)
    }

    /// Wait, collecting piped stdout and stderr separately (stdin, if
    /// piped, is closed first so the command sees EOF).
    pub fn wait_with_output(mut self) -> Result<(Outcome, Vec<u8>, Vec<u8>), RunError> {
        use std::io::Read;
        drop(self.child.stdin.take());
        let out = self.child.stdout.take();
        let err = self.child.stderr.take();
        // stderr on its own thread so neither pipe can fill up and block
        // the command while we read the other.
        let err_reader = std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut e) = err {
                let _ = e.read_to_end(&mut v);
            }
            v
        });
        let mut stdout = Vec::new();
        if let Some(mut o) = out {
            o.read_to_end(&mut stdout)
                .map_err(|source| RunError::Wait { source })?;
        }
        let stderr = err_reader.join().unwrap_or_default();
        let status = self
            .child
            .wait()
            .map_err(|source| RunError::Wait { source })?;
        let outcome = self.read_report(status)?;
        Ok((outcome, stdout, stderr))
    }

    fn read_report(&self, status: ExitStatus) -> Result<Outcome, RunError> {
        let text = match fs::read(&self.report) {
            Ok(t) => t,
            Err(_) => {
                return Err(RunError::NoReport {
                    status,
                    path: self.report.clone(),
                })
            }
        };
        let report: Report =
            serde_json::from_slice(&text).map_err(|source| RunError::BadReport {
                path: self.report.clone(),
                source,
            })?;
        match report {
            Report::Finished(o) => {
                // Cross-check with the monitor's own status: they must agree.
                let agrees = match o {
                    Outcome::Exited(c) => status.code() == Some(c),
                    Outcome::Signaled(s) => {
                        status.signal() == Some(s) || status.code() == Some(128 + s)
                    }
                };
                if !agrees {
                    return Err(RunError::Sandbox(Failure {
                        stage: "monitor".into(),
                        message: format!("report says {o:?} but the monitor ended with {status}"),
                        errno: None,
                    }));
                }
                Ok(o)
            }
            Report::Failed(f) => Err(RunError::Sandbox(f)),
        }
    }
}

impl Drop for SandboxChild {
    fn drop(&mut self) {
        if let Some(d) = &self.owned_dir {
            let _ = fs::remove_dir_all(d);
        }
    }
}

/// Read a monitor's report, e.g. of a Sandbox started by another process
/// (B8). `Ok(None)` while the Sandbox is still running (no report yet).
pub fn read_report(path: &Path) -> Result<Option<Report>, RunError> {
    match fs::read(path) {
        Ok(text) => serde_json::from_slice(&text)
            .map(Some)
            .map_err(|source| RunError::BadReport {
                path: path.into(),
                source,
            }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(RunError::ReadReport {
            path: path.into(),
            source,
        }),
    }
}
