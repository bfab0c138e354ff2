//! The native backend (route A): a Sandbox is a set of fresh namespaces on
//! this kernel, its daemon the strata binary run as root under the
//! Sandbox's reaping init ([`SandboxCommand::privileged`] with
//! `dev_fuse`). Per contract step:
//!
//! * B1 [`NativeBackend::create`]: ID `sb-<24 hex>` (96 random bits from
//!   the kernel), a private 0700 state directory created with `mkdir`
//!   (never reused), the name checked against every record under an
//!   `flock` of the state root: a taken name is refused, never adopted.
//! * B2: at start, the Store is bound read-write at `<state>/<id>/store`
//!   inside the Sandbox only; that path is under the root-only 0700 state
//!   root, which commands (uid 1500) cannot traverse, and the Store's own
//!   host path is masked in the Sandbox.
//! * B3: the token (32 random bytes, hex) at create, the daemon's config
//!   at [`NativeBackend::install_daemon`], both 0600 in the state
//!   directory; the binary runs in place from the read-only host root, or
//!   from a 0755 copy in the state directory where the path would not be
//!   reachable (rootfs directory, /tmp, /run).
//! * B4/B5 [`NativeBackend::start`]: `EXE __strata-init … -- EXE ARGS`
//!   in a session of its own (no controlling terminal), stdin from
//!   /dev/null, stdout to `daemon.out`, stderr appended to `daemon.log`; the marker
//!   line is polled from `daemon.out` until the deadline, the monitor's
//!   exit ends the wait at once. A file rather than a pipe, so that the
//!   daemon's stdout outlives the creating process.
//! * B4/B5 again, [`NativeBackend::restart`] (a Stopped Sandbox only):
//!   the previous run's monitor must be gone; its cgroup, `report.json`
//!   and `daemon.out` are removed, then the same daemon is started the
//!   same way on the same state directory (token, config, log, scratch).
//!   Start and restart hold `run.lock` so two never race.
//! * B6: the Unix socket from the marker (it must be in the state
//!   directory, which is bound at the same path, and mode 0600) and the
//!   token file.
//! * B8/B10: `sandbox.json`; running = the recorded monitor (pid + start
//!   time) is alive and has written no report.
//! * B9: SIGTERM to the monitor (forwarded by PID 1 to the daemon), SIGKILL
//!   after the grace period (PID 1 dies of PR_SET_PDEATHSIG and the kernel
//!   ends the PID namespace), then the cgroup goes: removed here, once the
//!   monitor is gone, because a monitor told to stop exits without moving
//!   itself out of it (two cgroup v1 migrations, see `init::run_monitor`).
//!   A monitor signalled by anyone else leaves the empty cgroup the same
//!   way, to this `stop`, `delete` or `restart`. Delete removes the
//!   state directory, after checking that no host mount is below it.

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::backend::marker::{marker_socket, wait_marker, Look, NotReady};
use crate::backend::state::{
    delete_state_dir, invalid, lock_exclusive, lock_runs, mkdir_private, new_state_dir,
    now_unix_ms, read_record, state_err, tail, write_new_token, write_private, write_record,
    RECORD,
};
use crate::backend::validate::{refuse_token_in_args, valid_id};
use crate::backend::{
    Backend, BackendError, BackendKind, CreateRequest, DaemonInstall, Endpoint, Filter, SandboxId,
    SandboxInfo, Started, State,
};
use crate::cgroup::Cgroup;
use crate::mounts::BindMount;
use crate::native_state::{check_request, paths, ProcId, Record};
use crate::ns::{SandboxChild, SandboxCommand, SandboxConfig};

/// Lines of log carried by a start failure.
const FAILURE_TAIL_LINES: usize = 40;
/// How long stop waits after SIGKILL before it reports the monitor stuck.
const KILL_WAIT: Duration = Duration::from_secs(5);
/// How long a cgroup may stay busy (tasks still exiting) before removal fails.
const CGROUP_WAIT: Duration = Duration::from_secs(2);

/// The native backend, keeping its records under one state root.
#[derive(Debug, Clone)]
pub struct NativeBackend {
    root: PathBuf,
}

impl NativeBackend {
    /// `/var/lib/strata/sandboxes` as root, else
    /// `$XDG_STATE_HOME/strata/sandboxes` (the SDK's default too).
    pub fn default_root() -> PathBuf {
        if rustix::process::geteuid().is_root() {
            return PathBuf::from("/var/lib/strata/sandboxes");
        }
        let base = std::env::var_os("XDG_STATE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
            .unwrap_or_else(|| PathBuf::from("/var/tmp"));
        base.join("strata/sandboxes")
    }

    /// A backend with its state under `root` (created 0700 if missing).
    /// The root must be visible in a Sandbox at the same path: not under
    /// /tmp (each Sandbox has a private one) nor /run (masked).
    pub fn new(root: impl Into<PathBuf>) -> Result<Self, BackendError> {
        let root = root.into();
        if !root.is_absolute() {
            return Err(invalid(
                format!("state root {}", root.display()),
                "must be an absolute path",
            ));
        }
        let hidden = |r: &Path| {
            ["/tmp", "/run", "/proc", "/dev"]
                .iter()
                .any(|p| r.starts_with(p))
        };
        let refuse = |r: &Path| {
            invalid(
                format!("state root {}", r.display()),
                "a Sandbox has its own /tmp, /run, /proc and /dev and could not see it there; use e.g. /var/lib/strata/sandboxes",
            )
        };
        // Checked before creating anything, and again once resolved.
        if hidden(&root) {
            return Err(refuse(&root));
        }
        mkdir_private(&root, true)?;
        let root = root
            .canonicalize()
            .map_err(state_err("resolve the state root", &root))?;
        if hidden(&root) {
            return Err(refuse(&root));
        }
        Ok(NativeBackend { root })
    }

    /// [`NativeBackend::new`] at [`NativeBackend::default_root`].
    pub fn with_default_root() -> Result<Self, BackendError> {
        Self::new(Self::default_root())
    }

    pub fn state_root(&self) -> &Path {
        &self.root
    }

    fn load(&self, id: &SandboxId) -> Result<(PathBuf, Record), BackendError> {
        if !valid_id(id.as_str()) {
            return Err(BackendError::BadId(id.0.clone()));
        }
        let dir = self.root.join(id.as_str());
        if !dir.join(RECORD).exists() {
            return Err(BackendError::NotFound(id.clone()));
        }
        let rec = read_record(&dir)?;
        Ok((dir, rec))
    }

    /// Every readable native record (others are skipped: a half-created
    /// directory, another tool's files).
    fn records(&self) -> Result<Vec<(PathBuf, Record)>, BackendError> {
        let rd = fs::read_dir(&self.root).map_err(state_err("list", &self.root))?;
        let mut out = Vec::new();
        for e in rd.flatten() {
            let name = e.file_name();
            if !valid_id(&name.to_string_lossy()) {
                continue;
            }
            if let Ok(r) = read_record::<Record>(&e.path()) {
                if r.backend == BackendKind::Native {
                    out.push((e.path(), r));
                }
            }
        }
        out.sort_by(|a, b| (a.1.created_unix_ms, &a.1.id).cmp(&(b.1.created_unix_ms, &b.1.id)));
        Ok(out)
    }

    /// Exclusive lock of the state root, held while a name is checked and
    /// claimed (released when the file is dropped).
    fn lock(&self) -> Result<fs::File, BackendError> {
        lock_exclusive(&self.root.join(".lock"))
    }

    fn state_of(dir: &Path, rec: &Record) -> State {
        match rec.monitor {
            None => State::Created,
            Some(m) if m.alive() && !dir.join("report.json").exists() => State::Running,
            Some(_) => State::Stopped,
        }
    }

    fn info(dir: &Path, rec: &Record) -> SandboxInfo {
        SandboxInfo {
            id: rec.id.clone(),
            backend: BackendKind::Native,
            name: rec.name.clone(),
            labels: rec.labels.clone(),
            state: Self::state_of(dir, rec),
            created_unix_ms: rec.created_unix_ms,
            endpoint: rec.socket.clone().map(|path| Endpoint::Unix { path }),
            token_file: rec.daemon.token_file.clone(),
            log_file: rec.daemon.log_file.clone(),
            daemon: rec.daemon.clone(),
            config: rec.config.clone(),
            marker: rec.marker.clone(),
            handle: rec.monitor.map(|m| m.pid.to_string()),
        }
    }

    fn log_tail_of(rec: &Record) -> String {
        tail(&rec.daemon.log_file, FAILURE_TAIL_LINES)
            .unwrap_or_else(|e| format!("(log {} unreadable: {e})", rec.daemon.log_file.display()))
    }

    /// Remove the Sandbox's cgroup if anything of it is left (a monitor
    /// killed with SIGKILL cannot remove its own).
    fn cleanup_cgroup(rec: &Record) -> Result<(), BackendError> {
        let cg = match &rec.cgroup {
            Some(cg) => Some(cg.clone()),
            None if !rec.config.limits.is_empty() => {
                Cgroup::find(&cgroup_name(&rec.id)).unwrap_or(None)
            }
            None => None,
        };
        if let Some(cg) = cg {
            cg.destroy(CGROUP_WAIT).map_err(|e| BackendError::Step {
                id: rec.id.clone(),
                step: "remove the cgroup",
                message: e.to_string(),
                log_tail: String::new(),
            })?;
        }
        Ok(())
    }
}

fn cgroup_name(id: &SandboxId) -> String {
    format!("strata-{id}")
}

fn signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        // ESRCH: already gone, which is what we want.
        let _ = rustix::process::kill_process(p, sig);
    }
}

/// Wait until `m` is gone or `within` has passed; true if gone. Woken by
/// the monitor's end through a pidfd (pidfd_open(2): "readable when the
/// process terminates", poll(2)) rather than a timer step, which left a
/// stop up to 2 ms late; the /proc check stays the judge (a zombie or a
/// reused pid counts as gone), and without a pidfd (a kernel before 5.3)
/// it polls every 2 ms as before.
fn wait_gone(m: ProcId, within: Duration) -> bool {
    let start = Instant::now();
    let pidfd = rustix::process::Pid::from_raw(m.pid as i32)
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok());
    loop {
        if !m.alive() {
            return true;
        }
        let left = within.saturating_sub(start.elapsed());
        if left.is_zero() {
            return false;
        }
        match &pidfd {
            // Bounded steps all the same: a pidfd of a reused pid (not
            // our monitor) never becomes readable for us.
            Some(fd) => wait_readable(fd, left.min(Duration::from_millis(50))),
            None => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

/// poll(2) `fd` for POLLIN for at most `d`; how it ended does not matter
/// (the caller checks the process itself).
fn wait_readable(fd: &std::os::fd::OwnedFd, d: Duration) {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let timeout = Timespec::try_from(d).ok();
    let _ = poll(&mut [PollFd::new(fd, PollFlags::IN)], timeout.as_ref());
}

/// How often start polls `daemon.out` for the marker. Short:
/// create-to-ready is meant to take well under 100 ms.
const MARKER_POLL: Duration = Duration::from_millis(1);

/// The marker wait ([`wait_marker`]) on `out`, ended early by the monitor's end.
fn wait_daemon_marker(
    child: &mut SandboxChild,
    out: &Path,
    timeout: Duration,
) -> Result<String, NotReady> {
    wait_marker(timeout, MARKER_POLL, || {
        // The monitor first, then stdout (see `Look::ended`).
        let ended = child
            .child_mut()
            .try_wait()
            .map_err(|e| format!("waiting for the monitor: {e}"))?
            .map(|status| format!("the Sandbox ended (monitor: {status})"));
        Ok(Look {
            stdout: fs::read(out).unwrap_or_default(),
            ended,
        })
    })
}

impl NativeBackend {
    /// [`Backend::create`], and with `daemon` [`Backend::create_installed`].
    fn create_with(
        &self,
        req: &CreateRequest,
        install_with: Option<&dyn Fn(&SandboxInfo) -> DaemonInstall>,
    ) -> Result<SandboxInfo, BackendError> {
        let checked = check_request(&self.root, req)?;
        // The start moves PID 1 into the Sandbox's cgroup a few ms from
        // now; begin that move's RCU grace period here, beside the state
        // files (crates/strata-sandbox/src/cgroup_warm.rs).
        if req.effective_limits().is_ok_and(|l| !l.is_empty()) {
            crate::cgroup_warm::warm_moves();
        }
        let (store, exe, copy_exe) = (checked.store, checked.exe, checked.copy_exe);
        let lock = self.lock()?;
        if let Some(n) = &req.name {
            if let Some((_, r)) = self
                .records()?
                .into_iter()
                .find(|(_, r)| r.name.as_deref() == Some(n.as_str()))
            {
                return Err(BackendError::NameTaken {
                    name: n.clone(),
                    id: r.id,
                });
            }
        }
        let (id, dir) = new_state_dir(&self.root)?;
        let setup = || -> Result<Record, BackendError> {
            let exe_inside = if copy_exe {
                mkdir_private(&dir.join("bin"), false)?;
                dir.join("bin/strata")
            } else {
                exe.clone()
            };
            let daemon = paths(&dir, &exe_inside);
            mkdir_private(&daemon.store, false)?;
            mkdir_private(&daemon.scratch_dir, false)?;
            write_new_token(&daemon.token_file)?;
            let mut config = req.clone();
            config.store = store.clone();
            // Recorded as applied: `sandbox inspect` shows the defaults.
            config.limits = req.effective_limits()?;
            config.daemon_exe = Some(exe.clone());
            config.expose = checked.expose.clone();
            let mut rec = Record {
                id: id.clone(),
                backend: BackendKind::Native,
                name: req.name.clone(),
                labels: req.labels.clone(),
                created_unix_ms: now_unix_ms(),
                config,
                exe_host: exe.clone(),
                copy_exe,
                daemon,
                install: None,
                monitor: None,
                marker: None,
                socket: None,
                cgroup: None,
            };
            if let Some(make) = install_with {
                // Installed before the record's one write: the token and
                // config are each synced before their rename, then the
                // record, already with its install. The record without it
                // (what `create` then `install_daemon` write first) would
                // be replaced within milliseconds and read by no one; a
                // crash before this write leaves what a crash before
                // `create`'s own write leaves (a state directory with no
                // record), so every record is as durable as before, with
                // one fsync'ed write fewer.
                let install = make(&Self::info(&dir, &rec));
                Self::install_files(&mut rec, &install)?;
            }
            write_record(&dir, &rec)?;
            Ok(rec)
        };
        let rec = setup().inspect_err(|_| {
            let _ = fs::remove_dir_all(&dir);
        })?;
        drop(lock);
        Ok(Self::info(&dir, &rec))
    }

    /// B3's files: the daemon's config (0600) and, when copied, its
    /// binary; `rec.install` set (the caller writes the record).
    fn install_files(rec: &mut Record, daemon: &DaemonInstall) -> Result<(), BackendError> {
        refuse_token_in_args(&rec.daemon.token_file, daemon)?;
        write_private(&rec.daemon.config, &daemon.config)
            .map_err(state_err("write the daemon's config", &rec.daemon.config))?;
        if rec.copy_exe {
            // A copy through a temporary name: a running binary is never
            // overwritten in place (ETXTBSY) and a reader never sees half.
            let dst = &rec.daemon.exe;
            let tmp = dst.with_extension("tmp");
            fs::copy(&rec.exe_host, &tmp).map_err(state_err("copy the daemon binary to", &tmp))?;
            fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755))
                .map_err(state_err("chmod 0755", &tmp))?;
            fs::rename(&tmp, dst).map_err(state_err("install the daemon binary", dst))?;
        }
        rec.install = Some(DaemonInstall {
            args: daemon.args.clone(),
            env: daemon.env.clone(),
            // The bytes are in their 0600 file, not in the record.
            config: Vec::new(),
        });
        Ok(())
    }
}

impl Backend for NativeBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Native
    }

    fn create(&self, req: &CreateRequest) -> Result<SandboxInfo, BackendError> {
        self.create_with(req, None)
    }

    fn create_installed(
        &self,
        req: &CreateRequest,
        daemon: &dyn Fn(&SandboxInfo) -> DaemonInstall,
    ) -> Result<SandboxInfo, BackendError> {
        self.create_with(req, Some(daemon))
    }

    fn install_daemon(&self, id: &SandboxId, daemon: &DaemonInstall) -> Result<(), BackendError> {
        let (dir, mut rec) = self.load(id)?;
        if rec.monitor.is_some() {
            return Err(BackendError::WrongState {
                id: id.clone(),
                action: "install_daemon",
                state: Self::state_of(&dir, &rec),
            });
        }
        Self::install_files(&mut rec, daemon)?;
        write_record(&dir, &rec)
    }

    fn start(&self, id: &SandboxId, timeout: Duration) -> Result<Started, BackendError> {
        let (dir, _) = self.load(id)?;
        let _lock = lock_runs(&dir)?;
        let (dir, rec) = self.load(id)?;
        let state = Self::state_of(&dir, &rec);
        // One start per Sandbox: its report, stdout and cgroup belong to
        // one run (a later run is `restart`, which clears them first).
        let (Some(install), None) = (rec.install.clone(), rec.monitor) else {
            return Err(BackendError::WrongState {
                id: id.clone(),
                action: if rec.install.is_none() {
                    "start before install_daemon"
                } else {
                    "a second start"
                },
                state,
            });
        };
        self.run_daemon(id, dir, rec, install, timeout)
    }

    fn restart(&self, id: &SandboxId, timeout: Duration) -> Result<Started, BackendError> {
        let (dir, _) = self.load(id)?;
        // Two restarts at once would both see the Sandbox stopped and start
        // two daemons on one scratch directory: the second waits here, then
        // finds it running and is refused.
        let _lock = lock_runs(&dir)?;
        let (dir, mut rec) = self.load(id)?;
        let state = Self::state_of(&dir, &rec);
        let (Some(install), State::Stopped) = (rec.install.clone(), state) else {
            return Err(BackendError::WrongState {
                id: id.clone(),
                action: "restart (only a stopped Sandbox restarts; stop a running one first)",
                state,
            });
        };
        // The monitor may still be on its way out (report written, process
        // not yet gone): the old run must be over before a new one starts.
        if let Some(m) = rec.monitor {
            if !wait_gone(m, KILL_WAIT) {
                return Err(BackendError::Step {
                    id: id.clone(),
                    step: "restart",
                    message: format!(
                        "the previous monitor {} is still alive {KILL_WAIT:?} after it reported",
                        m.pid
                    ),
                    log_tail: Self::log_tail_of(&rec),
                });
            }
        }
        // What belongs to the previous run: its cgroup (a monitor killed
        // with SIGKILL cannot remove its own), its report (which reads as
        // stopped) and its stdout (the new marker is read from a new file).
        // The log, token, config, binary and scratch stay: same Sandbox.
        Self::cleanup_cgroup(&rec)?;
        for f in ["report.json", "daemon.out"] {
            let p = dir.join(f);
            match fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(state_err("remove the previous run's file", &p)(e)),
            }
        }
        // The dead monitor stays recorded until the new one replaces it:
        // a restart that fails before spawning leaves the Sandbox Stopped
        // (restartable), not Created.
        rec.marker = None;
        rec.socket = None;
        rec.cgroup = None;
        write_record(&dir, &rec)?;
        self.run_daemon(id, dir, rec, install, timeout)
    }

    fn log_tail(&self, id: &SandboxId, lines: usize) -> Result<String, BackendError> {
        let (_, rec) = self.load(id)?;
        let p = &rec.daemon.log_file;
        tail(p, lines.min(10_000)).map_err(state_err("read the log", p))
    }

    fn open(&self, id: &SandboxId) -> Result<SandboxInfo, BackendError> {
        let (dir, rec) = self.load(id)?;
        Ok(Self::info(&dir, &rec))
    }

    fn list(&self, filter: &Filter) -> Result<Vec<SandboxInfo>, BackendError> {
        Ok(self
            .records()?
            .into_iter()
            .filter(|(_, r)| filter.matches(r.name.as_deref(), &r.labels))
            .map(|(d, r)| Self::info(&d, &r))
            .collect())
    }

    fn stop(&self, id: &SandboxId, grace: Duration) -> Result<(), BackendError> {
        let (_, rec) = self.load(id)?;
        if let Some(m) = rec.monitor.filter(ProcId::alive) {
            // The monitor forwards SIGTERM to PID 1, PID 1 to the daemon,
            // which unmounts its Workspaces and exits.
            signal(m.pid, rustix::process::Signal::TERM);
            if !wait_gone(m, grace) {
                signal(m.pid, rustix::process::Signal::KILL);
                if !wait_gone(m, KILL_WAIT) {
                    return Err(BackendError::Step {
                        id: id.clone(),
                        step: "stop",
                        message: format!(
                            "monitor {} still alive {KILL_WAIT:?} after SIGKILL",
                            m.pid
                        ),
                        log_tail: Self::log_tail_of(&rec),
                    });
                }
            }
        }
        Self::cleanup_cgroup(&rec)
    }

    fn delete(&self, id: &SandboxId) -> Result<(), BackendError> {
        let (dir, rec) = self.load(id)?;
        let state = Self::state_of(&dir, &rec);
        if state == State::Running {
            return Err(BackendError::WrongState {
                id: id.clone(),
                action: "delete",
                state,
            });
        }
        Self::cleanup_cgroup(&rec)?;
        delete_state_dir(
            id,
            &dir,
            &rec.daemon.store,
            "the native backend makes none, unmount them first",
        )
    }
}

impl NativeBackend {
    /// B4+B5+B6 for one run of the daemon (first start or restart): spawn
    /// the monitor, record it, wait for the marker and check the socket.
    fn run_daemon(
        &self,
        id: &SandboxId,
        dir: PathBuf,
        mut rec: Record,
        install: DaemonInstall,
        timeout: Duration,
    ) -> Result<Started, BackendError> {
        let req = &rec.config;
        // The state directory must exist in a rootfs directory to be bound.
        let mut mountpoints = req.mountpoints.clone();
        mountpoints.push(dir.clone());
        let mut binds = vec![
            // Same path inside and out: the daemon's config names host
            // paths, and the host reaches the socket where it is.
            BindMount {
                source: dir.clone(),
                target: dir.clone(),
                readonly: false,
            },
            BindMount {
                source: req.store.clone(),
                target: rec.daemon.store.clone(),
                readonly: false,
            },
        ];
        // The daemon binary in place (the host view shows only system
        // directories): read-only, at its host path, which the daemon's
        // exec helper re-executes.
        if !rec.copy_exe {
            binds.push(BindMount {
                source: rec.exe_host.clone(),
                target: rec.daemon.exe.clone(),
                readonly: true,
            });
        }
        binds.extend(req.expose.iter().map(|e| e.bind()));
        let cfg = SandboxConfig {
            root: req.root.clone(),
            network: req.network,
            hostname: Some(req.name.clone().unwrap_or_else(|| "strata".into())),
            limits: req.limits,
            cgroup_name: Some(cgroup_name(id)),
            tmp_size_bytes: None,
            binds,
            dev_fuse: true,
            masked_paths: vec![req.store.clone()],
            // Commands never see the state root (this Sandbox's Store bind,
            // token and socket, and every other Sandbox's): a mask in their
            // own mount namespace on top of its 0700 mode. The daemon does.
            command_masked_paths: vec![self.root.clone()],
            mountpoints,
        };
        let mut argv: Vec<OsString> = vec![rec.daemon.exe.clone().into()];
        argv.extend(install.args.iter().map(OsString::from));
        let env = install
            .env
            .iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        let out_path = dir.join("daemon.out");
        let out = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&out_path)
            .map_err(state_err("create the daemon's stdout", &out_path))?;
        let log_path = &rec.daemon.log_file;
        let log = fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(log_path)
            .map_err(state_err("open the daemon's log", log_path))?;
        let mut child = SandboxCommand::privileged(cfg, argv, env, PathBuf::from("/"))
            .init_exe(&rec.exe_host)
            .report_path(dir.join("report.json"))
            // Its own session, without the creator's controlling
            // terminal: a terminal's Ctrl-C or hang-up for the creating CLI
            // must not reach a Sandbox meant to outlive it, and no command
            // may open the creator's terminal through /dev/tty
            // (docs/security.md).
            .new_session()
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|e| BackendError::Step {
                id: id.clone(),
                step: "start",
                message: e.to_string(),
                log_tail: Self::log_tail_of(&rec),
            })?;
        // Record the monitor at once, so that another process sees the
        // Sandbox as running (or stopped) and can stop it, even if this
        // one dies while waiting for the marker.
        rec.monitor = Some(ProcId::of(child.id()).unwrap_or(ProcId {
            pid: child.id(),
            start_time: 0,
        }));
        if let Err(e) = write_record(&dir, &rec) {
            // Unrecorded, nobody could stop it later: end it now.
            let _ = child.signal(libc::SIGKILL);
            let _ = child.wait();
            let _ = Self::cleanup_cgroup(&rec);
            return Err(e);
        }

        let ready = wait_daemon_marker(&mut child, &out_path, timeout).and_then(|marker| {
            let socket = marker_socket(&marker)
                .ok_or_else(|| NotReady::Failed(format!("marker without socket=: {marker:?}")))?;
            // Reachable from the host only if it is in the state directory
            // (bound at the same path); private only if 0600 or stricter.
            let meta = fs::metadata(&socket).map_err(|e| {
                NotReady::Failed(format!("the daemon's socket {}: {e}", socket.display()))
            })?;
            if !socket.starts_with(&dir)
                || !meta.file_type().is_socket()
                || meta.mode() & 0o077 != 0
            {
                return Err(NotReady::Failed(format!(
                    "the daemon's socket {} must be a socket of mode 0600 in {}",
                    socket.display(),
                    dir.display()
                )));
            }
            Ok((marker, socket))
        });
        match ready {
            Ok((marker, socket)) => {
                rec.marker = Some(marker.clone());
                rec.socket = Some(socket.clone());
                if !rec.config.limits.is_empty() {
                    rec.cgroup = Cgroup::find(&cgroup_name(id)).unwrap_or(None);
                }
                write_record(&dir, &rec)?;
                // Reap the monitor when it ends, so that this process never
                // holds a zombie; if the thread cannot start, the zombie
                // stays until this process exits (state still reads right).
                let _ = std::thread::Builder::new()
                    .name(format!("reap-{id}"))
                    .spawn(move || drop(child.wait()));
                Ok(Started {
                    marker,
                    endpoint: Endpoint::Unix { path: socket },
                    token_file: rec.daemon.token_file.clone(),
                })
            }
            Err(why) => {
                // Nothing of the Sandbox may keep running: SIGKILL of the
                // monitor takes PID 1 and the namespace down with it.
                let _ = child.signal(libc::SIGKILL);
                let how = child.wait();
                let _ = Self::cleanup_cgroup(&rec);
                let log_tail = Self::log_tail_of(&rec);
                Err(match why {
                    NotReady::Timeout => BackendError::NoMarker {
                        id: id.clone(),
                        waited: timeout,
                        log_tail,
                    },
                    NotReady::Failed(message) => BackendError::Step {
                        id: id.clone(),
                        step: "start",
                        message: match how {
                            Err(e) => format!("{message}; {e}"),
                            Ok(o) => format!("{message}; the daemon ended with {o:?}"),
                        },
                        log_tail,
                    },
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_root_under_tmp_is_refused() {
        let e = NativeBackend::new("/tmp/strata-state-test").unwrap_err();
        assert!(e.to_string().contains("/tmp"), "{e}");
        assert!(!Path::new("/tmp/strata-state-test").exists());
    }
}
