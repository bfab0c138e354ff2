//! Sandboxes: create, reopen, list, logs, close.
//!
//! **Minimal native launcher** (`native_min`): strata-sandbox's native
//! backend lifecycle (the `Backend` trait in `strata_sandbox::backend`) is
//! not implemented yet, so the SDK starts Sandboxes itself with
//! strata-sandbox's public API (`SandboxCommand::privileged` with
//! `dev_fuse`), keeping one record per Sandbox in a state directory. When
//! the native backend lands, [`Sandbox::create`] and friends switch to it
//! without changing this API. What it does, per contract step:
//!
//! * B1: a fresh ID `sb-<24 hex>`; a name that exists is refused (the check
//!   and the record creation happen under an flock of the state root).
//! * B2: the Store directory is bound read-write into the Sandbox at
//!   `<state>/<id>/store`, a path inside the 0700 root-owned state
//!   directory, which commands (uid 1500) cannot traverse; the Store's own
//!   host path is masked in the Sandbox as well.
//! * B3: the daemon's config (0600) and token (0600, 32 random bytes hex)
//!   are written to the Sandbox's state directory; the daemon binary is the
//!   caller's executable (or [`SandboxSpec::daemon_exe`]), run in place
//!   from the read-only host root (not copied).
//! * B4: `EXE __strata-init … -- EXE __strata-daemon --config PATH`: a
//!   reaping PID 1 in fresh namespaces, the daemon as root with /dev/fuse.
//! * B5: the marker line is read from the daemon's stdout within
//!   [`SandboxSpec::startup_timeout`]; on failure the error carries the log
//!   tail. The log is `<state>/<id>/daemon.log`.
//! * B6: the daemon's Unix socket `<state>/<id>/daemon.sock` (0600).
//! * B8/B10: `<state>/<id>/sandbox.json`.
//! * B9: `POST /v1/shutdown`, wait for the monitor (SIGTERM then SIGKILL
//!   if it hangs), then the state directory is removed. The Store is never
//!   touched.
//!
//! Default Workspace mount path: `/workspace` when that directory exists in
//! the Sandbox's view, else `/tmp/workspace` (the host root is read-only in
//! the Sandbox and the launcher cannot create `/workspace` in it; see
//! docs/sandbox-requests.md).

use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hyper::Method;
use serde::{Deserialize, Serialize};
use strata_daemon::api;

use crate::client::DaemonClient;
use crate::error::{Error, Result};
use crate::workspace::Workspace;

pub use strata_sandbox::{Limits, Network};

/// What to create.
#[derive(Debug, Clone)]
pub struct SandboxSpec {
    /// The Store the Sandbox's Workspaces come from (B2).
    pub store: PathBuf,
    /// Unique among existing Sandboxes; an existing name is refused.
    pub name: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// `None` (loopback only, the default) or `Host`.
    pub network: Network,
    /// Memory, pids and CPU limits (cgroups).
    pub limits: Limits,
    /// A binary that calls [`crate::maybe_run_internal`] first in `main`
    /// (the strata CLI). Default: the current executable.
    pub daemon_exe: Option<PathBuf>,
    /// State root (default: `/var/lib/strata/sandboxes` as root, else
    /// `$XDG_STATE_HOME/strata/sandboxes`). Must not be under /tmp (the
    /// Sandbox gets a private /tmp).
    pub state_dir: Option<PathBuf>,
    /// How long to wait for the daemon's marker (default 10 s).
    pub startup_timeout: Duration,
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
            daemon_exe: None,
            state_dir: None,
            startup_timeout: Duration::from_secs(10),
        }
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

/// Which Sandboxes [`Sandbox::list`] returns.
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxState {
    Running,
    Stopped,
}

/// The persistent record of a Sandbox (B8), `<state>/<id>/sandbox.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxRecord {
    pub id: String,
    /// Always `native_min` for now (see the module docs).
    pub backend: String,
    pub name: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub created_ns: i64,
    /// Host pid of the Sandbox's monitor.
    pub monitor_pid: u32,
    pub socket: PathBuf,
    pub token_file: PathBuf,
    pub log_file: PathBuf,
    pub report: PathBuf,
    pub store: PathBuf,
    pub daemon_exe: PathBuf,
    pub default_mount: String,
    pub marker: String,
    pub network: Network,
    pub limits: Limits,
}

/// An open Sandbox.
#[derive(Debug)]
pub struct Sandbox {
    record: SandboxRecord,
    dir: PathBuf,
    client: DaemonClient,
}

/// Monitors started by this process, waited for on close (no zombie).
static CHILDREN: Mutex<Option<HashMap<String, strata_sandbox::SandboxChild>>> = Mutex::new(None);

fn default_state_root() -> PathBuf {
    if rustix::process::geteuid().is_root() {
        return PathBuf::from("/var/lib/strata/sandboxes");
    }
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(|| PathBuf::from("/var/tmp"));
    base.join("strata/sandboxes")
}

fn mkdir_private(p: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(p)
        .map_err(Error::io("create the directory", p))
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::backend(format!("worker thread failed: {e}"), String::new()))?
}

fn read_record(dir: &Path) -> Result<SandboxRecord> {
    let p = dir.join("sandbox.json");
    let text = std::fs::read(&p).map_err(Error::io("read the Sandbox record", &p))?;
    serde_json::from_slice(&text).map_err(|e| {
        Error::backend(
            format!("Sandbox record {} is unreadable: {e}", p.display()),
            String::new(),
        )
    })
}

fn pid_alive(pid: u32) -> bool {
    // Reap it first if it is our own child that ended.
    if let Some(map) = CHILDREN.lock().unwrap().as_mut() {
        for c in map.values_mut() {
            if c.id() == pid {
                if let Ok(Some(_)) = c.child_mut().try_wait() {
                    return false;
                }
            }
        }
    }
    // A zombie counts as dead.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

impl Sandbox {
    /// Create a Sandbox and start its daemon (B1–B6). Needs root,
    /// /dev/fuse and namespaces (route A).
    pub async fn create(spec: SandboxSpec) -> Result<Sandbox> {
        blocking(move || create_native_min(spec)).await
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
            let ok = id.starts_with("sb-")
                && id[3..].bytes().all(|b| b.is_ascii_hexdigit())
                && id.len() == 27;
            if !ok {
                return Err(Error::invalid(
                    format!("{id:?} is not a Sandbox ID"),
                    "IDs look like sb-<24 hex digits>; list them with Sandbox::list",
                ));
            }
            let dir = state_dir.unwrap_or_else(default_state_root).join(&id);
            if !dir.join("sandbox.json").exists() {
                return Err(Error::not_found(
                    format!("Sandbox {id}"),
                    "it was closed or never existed; list them with Sandbox::list",
                ));
            }
            Sandbox::from_dir(dir)
        })
        .await
    }

    fn from_dir(dir: PathBuf) -> Result<Sandbox> {
        let record = read_record(&dir)?;
        let token = std::fs::read_to_string(&record.token_file)
            .map_err(Error::io("read the Sandbox token", &record.token_file))?
            .trim()
            .to_string();
        let client = DaemonClient::new(
            record.socket.clone(),
            token,
            format!("sandbox {}", record.id),
            Some(record.log_file.clone()),
        );
        Ok(Sandbox {
            record,
            dir,
            client,
        })
    }

    /// Sandboxes matching `filter` (B10), sorted by creation time.
    pub async fn list(filter: SandboxFilter) -> Result<Vec<SandboxRecord>> {
        blocking(move || {
            let root = filter.state_dir.clone().unwrap_or_else(default_state_root);
            let mut out = Vec::new();
            let rd = match std::fs::read_dir(&root) {
                Ok(rd) => rd,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
                Err(e) => return Err(Error::io("list", &root)(e)),
            };
            for e in rd.flatten() {
                let Ok(r) = read_record(&e.path()) else {
                    continue;
                };
                if filter
                    .labels
                    .iter()
                    .any(|(k, v)| r.labels.get(k) != Some(v))
                {
                    continue;
                }
                if let Some(p) = &filter.name_prefix {
                    if !r.name.as_deref().unwrap_or("").starts_with(p.as_str()) {
                        continue;
                    }
                }
                out.push(r);
            }
            out.sort_by_key(|r| r.created_ns);
            Ok(out)
        })
        .await
    }

    /// The full Sandbox ID.
    pub fn id(&self) -> &str {
        &self.record.id
    }

    /// Its record (config readable after a reopen).
    pub fn record(&self) -> &SandboxRecord {
        &self.record
    }

    /// Running (monitor alive and the daemon answering) or stopped.
    pub async fn state(&self) -> SandboxState {
        if !pid_alive(self.record.monitor_pid) {
            return SandboxState::Stopped;
        }
        match self.health().await {
            Ok(_) => SandboxState::Running,
            Err(_) => SandboxState::Stopped,
        }
    }

    /// The daemon's health.
    pub async fn health(&self) -> Result<api::Health> {
        self.client
            .call(Method::GET, "/v1/health", None::<&()>)
            .await
    }

    /// The last `lines` lines of the daemon's log (B5), read from the host
    /// side: works when the daemon is dead too.
    pub async fn logs(&self, lines: usize) -> Result<String> {
        let p = self.record.log_file.clone();
        blocking(move || strata_daemon::tail_file(&p, lines).map_err(Error::io("read the log", &p)))
            .await
    }

    /// Mount branch `reference` (`PROJECT/BRANCH`) at `at` (default: the
    /// Sandbox's default mount path).
    pub async fn mount(&self, reference: &str, at: Option<&str>) -> Result<Workspace> {
        let info: api::WorkspaceInfo = self
            .client
            .call(
                Method::POST,
                "/v1/workspaces",
                Some(&api::MountRequest {
                    reference: reference.into(),
                    at: Some(at.unwrap_or(&self.record.default_mount).to_string()),
                }),
            )
            .await?;
        Ok(Workspace {
            client: self.client.clone(),
            info,
        })
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
    /// Workspaces), wait for the Sandbox to end, delete its record and
    /// state (B9). The Store is untouched.
    pub async fn close(self) -> Result<()> {
        let _ = self
            .client
            .send(
                Method::POST,
                "/v1/shutdown",
                bytes::Bytes::new(),
                "application/json",
            )
            .await;
        let rec = self.record.clone();
        let dir = self.dir.clone();
        blocking(move || {
            let pid = rec.monitor_pid;
            let mut mine = CHILDREN
                .lock()
                .unwrap()
                .as_mut()
                .and_then(|m| m.remove(&rec.id));
            let mut deadline = Instant::now() + Duration::from_secs(5);
            let mut signalled = false;
            loop {
                let ended = match mine.as_mut() {
                    // Our own child: try_wait reaps it (no zombie).
                    Some(c) => !matches!(c.child_mut().try_wait(), Ok(None)),
                    None => !pid_alive(pid),
                };
                if ended {
                    break;
                }
                if Instant::now() > deadline {
                    if signalled {
                        // SAFETY: kill(2) on the monitor's pid.
                        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                        if let Some(c) = mine.as_mut() {
                            let _ = c.child_mut().wait();
                        }
                        break;
                    }
                    // The monitor forwards SIGTERM to PID 1 and the daemon.
                    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
                    signalled = true;
                    deadline = Instant::now() + Duration::from_secs(2);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            std::fs::remove_dir_all(&dir).map_err(Error::io("remove the Sandbox state", &dir))?;
            Ok(())
        })
        .await
    }
}

fn create_native_min(spec: SandboxSpec) -> Result<Sandbox> {
    if !rustix::process::geteuid().is_root() {
        return Err(Error::invalid(
            "the native Sandbox needs root (namespaces, FUSE mounts as root, cgroups)",
            "run as root, or use rootless `strata run` for one command",
        ));
    }
    if !Path::new("/dev/fuse").exists() {
        return Err(Error::invalid(
            "/dev/fuse is missing",
            "load the fuse module (modprobe fuse)",
        ));
    }
    let store = spec
        .store
        .canonicalize()
        .map_err(Error::io("resolve the Store path", &spec.store))?;
    if !store.join("strata.db").exists()
        && std::fs::read_dir(&store)
            .map(|mut d| d.next().is_none())
            .unwrap_or(true)
    {
        return Err(Error::not_found(
            format!("a Store at {}", store.display()),
            "create one with Store::create first",
        ));
    }
    let exe = match &spec.daemon_exe {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .map_err(Error::io("find the current executable", "/proc/self/exe"))?,
    };
    let root = spec.state_dir.clone().unwrap_or_else(default_state_root);
    if root.starts_with("/tmp") {
        return Err(Error::invalid(
            format!("state directory {} is under /tmp", root.display()),
            "the Sandbox has a private /tmp and could not see it; use another directory",
        ));
    }
    mkdir_private(&root)?;
    // B1: name uniqueness under a lock of the state root.
    let lock_path = root.join(".lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(Error::io("open the state lock", &lock_path))?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| Error::io("lock", &lock_path)(e.into()))?;
    if let Some(n) = &spec.name {
        let ok = !n.is_empty()
            && n.len() <= 64
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !ok {
            return Err(Error::invalid(
                format!("Sandbox name {n:?}"),
                "use 1-64 characters of [A-Za-z0-9._-]",
            ));
        }
        if let Ok(rd) = std::fs::read_dir(&root) {
            for e in rd.flatten() {
                if let Ok(r) = read_record(&e.path()) {
                    if r.name.as_deref() == Some(n.as_str()) {
                        return Err(Error::Busy {
                            what: format!("the name {n:?} (Sandbox {})", r.id),
                            hint:
                                "names are never adopted: pick another name or close that Sandbox"
                                    .into(),
                        });
                    }
                }
            }
        }
    }
    let id = format!("sb-{}", hex::encode(rand::random::<[u8; 12]>()));
    let dir = root.join(&id);
    mkdir_private(&dir)?;
    let fail = |e: Error| {
        let _ = std::fs::remove_dir_all(&dir);
        e
    };
    let store_mnt = dir.join("store");
    let scratch = dir.join("scratch");
    let socket = dir.join("daemon.sock");
    let log_file = dir.join("daemon.log");
    let token_file = dir.join("token");
    let cfg_path = dir.join("config.json");
    let report = dir.join("report.json");
    for d in [&store_mnt, &scratch] {
        mkdir_private(d).map_err(fail)?;
    }
    // B3: token and config, both 0600.
    let token = strata_daemon::new_token();
    strata_daemon::write_token(&token_file, &token)
        .map_err(|e| fail(Error::io("write the token", &token_file)(e)))?;
    let default_mount = if Path::new("/workspace").is_dir() {
        "/workspace".to_string()
    } else {
        "/tmp/workspace".to_string()
    };
    let mut dcfg = strata_daemon::DaemonConfig::new(
        socket.clone(),
        token_file.clone(),
        log_file.clone(),
        store_mnt.clone(),
        scratch.clone(),
    );
    dcfg.default_mount = Some(PathBuf::from(&default_mount));
    dcfg.helper_exe = Some(exe.clone());
    // The exec helper may fail after dropping to the command's uid and must
    // still write its report: the state directory (0700) is out of its
    // reach, the Sandbox's private /tmp is not. The daemon creates this
    // directory (root, 0711) before any command runs.
    dcfg.run_dir = Some(PathBuf::from("/tmp/.strata-execs"));
    strata_daemon::write_private(
        &cfg_path,
        &serde_json::to_vec_pretty(&dcfg).expect("config serializes"),
    )
    .map_err(|e| fail(Error::io("write the daemon config", &cfg_path)(e)))?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_file)
        .map_err(|e| fail(Error::io("create the log", &log_file)(e)))?;
    // B2 + B4: the view and the daemon under a reaping init.
    let cfg = strata_sandbox::SandboxConfig {
        network: spec.network,
        limits: spec.limits,
        hostname: spec.name.clone().or_else(|| Some("strata".into())),
        cgroup_name: Some(format!("strata-{id}")),
        dev_fuse: true,
        binds: vec![
            strata_sandbox::BindMount {
                source: dir.clone(),
                target: dir.clone(),
                readonly: false,
            },
            strata_sandbox::BindMount {
                source: store.clone(),
                target: store_mnt.clone(),
                readonly: false,
            },
        ],
        masked_paths: vec![store.clone()],
        ..Default::default()
    };
    let argv = vec![
        exe.clone().into_os_string(),
        strata_daemon::DAEMON_ARG.into(),
        "--config".into(),
        cfg_path.clone().into_os_string(),
    ];
    let started = Instant::now();
    let mut child =
        strata_sandbox::SandboxCommand::privileged(cfg, argv, Vec::new(), PathBuf::from("/"))
            .init_exe(&exe)
            .report_path(&report)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|e| {
                fail(Error::backend(
                    format!("sandbox {id}: start failed: {e}"),
                    String::new(),
                ))
            })?;
    // B5: the marker, bounded.
    let stdout = child.child_mut().stdout.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let r = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(r.map(|_| line));
    });
    let marker = match rx.recv_timeout(spec.startup_timeout) {
        Ok(Ok(line)) if line.starts_with(strata_daemon::MARKER) => line.trim().to_string(),
        other => {
            let why = match other {
                Ok(Ok(l)) if l.is_empty() => {
                    "the daemon exited before its startup marker".to_string()
                }
                Ok(Ok(l)) => format!("unexpected first line {l:?}"),
                Ok(Err(e)) => format!("reading its stdout: {e}"),
                Err(_) => format!("no startup marker within {:?}", spec.startup_timeout),
            };
            let _ = child.signal(libc::SIGKILL);
            let outcome = child.wait();
            let tail = strata_daemon::tail_file(&log_file, 30).unwrap_or_default();
            let _ = std::fs::remove_dir_all(&dir);
            return Err(Error::backend(
                format!("sandbox {id}: daemon start failed: {why} (init: {outcome:?})"),
                tail,
            ));
        }
    };
    tracing::debug!(sandbox = %id, took = ?started.elapsed(), "daemon ready");
    let record = SandboxRecord {
        id: id.clone(),
        backend: "native_min".into(),
        name: spec.name.clone(),
        labels: spec.labels.clone(),
        created_ns: strata_store::now_ns(),
        monitor_pid: child.id(),
        socket,
        token_file,
        log_file,
        report,
        store,
        daemon_exe: exe,
        default_mount,
        marker,
        network: spec.network,
        limits: spec.limits,
    };
    let rec_path = dir.join("sandbox.json");
    strata_daemon::write_private(
        &rec_path,
        &serde_json::to_vec_pretty(&record).expect("record serializes"),
    )
    .map_err(Error::io("write the Sandbox record", &rec_path))?;
    drop(lock);
    CHILDREN
        .lock()
        .unwrap()
        .get_or_insert_with(HashMap::new)
        .insert(id.clone(), child);
    Sandbox::from_dir(dir)
}
