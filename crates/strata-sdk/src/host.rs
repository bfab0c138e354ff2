//! Workspaces mounted on the host (`strata mount`, `strata ws ...`): the
//! serving process is the same daemon a Sandbox runs (`__strata-daemon`),
//! started here in the host's namespaces, one per mount, with its socket
//! and token (both 0600) in a per-user run directory. Only this module and
//! the daemon know the wire format; the CLI calls these functions.
//!
//! Layout: `<run>/host/<id>.json` records a mounted Workspace (socket, token
//! file, log, pid, mountpoint); `<run>/host/d-<rand>/` holds one daemon's
//! config, token, socket and log. Workspace scratch (journal and upper
//! layer) lives under `scratch`, on local disk, and outlives the daemon: a
//! Workspace whose daemon died keeps its uncommitted changes.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hyper::Method;
use serde::{Deserialize, Serialize};
use strata_daemon::api::{
    CommitRequest, CommitResponse, MountRequest, StatusResponse, UnmountRequest, WorkspaceInfo,
};

use crate::client::DaemonClient;
use crate::error::{Error, Result};
use crate::workspace::CommitOutcome;

/// Where host mounts keep their state.
#[derive(Clone, Debug)]
pub struct HostDirs {
    /// Per-user run directory (records, daemon sockets): `$XDG_RUNTIME_DIR/strata`.
    pub run: PathBuf,
    /// Workspace scratch root: `$XDG_STATE_HOME/strata/workspaces`.
    pub scratch: PathBuf,
}

impl HostDirs {
    /// The defaults for the calling user.
    pub fn for_user() -> HostDirs {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/root"));
        let state = std::env::var_os("XDG_STATE_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(".local/state"))
            .join("strata");
        let run = std::env::var_os("XDG_RUNTIME_DIR")
            .map(|r| PathBuf::from(r).join("strata"))
            .unwrap_or_else(|| state.join("run"));
        HostDirs {
            run,
            scratch: state.join("workspaces"),
        }
    }

    fn records(&self) -> PathBuf {
        self.run.join("host")
    }
}

/// A Workspace mounted on the host, as recorded.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HostMount {
    /// The Workspace ID (what `strata ws status|commit|unmount` take).
    pub workspace: String,
    /// Where the Workspace is mounted on the host.
    pub mountpoint: PathBuf,
    /// The branch the Workspace publishes to, `project/branch`.
    pub branch: String,
    /// The serving process's private directory (socket, token, log).
    pub daemon_dir: PathBuf,
    /// The serving process's Unix socket (mode 0600).
    pub socket: PathBuf,
    /// The file holding the bearer token for `socket` (mode 0600).
    pub token_file: PathBuf,
    /// The serving process's log, for a bounded tail on failure.
    pub log_file: PathBuf,
    /// The serving process's pid (to tell a dead server from a live one).
    pub pid: u32,
}

impl HostMount {
    /// Whether its serving daemon is still alive.
    pub fn alive(&self) -> bool {
        // A killed daemon may linger as a zombie until whoever adopted it
        // reaps it, so a /proc entry is not enough: the socket must answer.
        let zombie = std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .map(|s| s.contains("State:\tZ"))
            .unwrap_or(true);
        !zombie && std::os::unix::net::UnixStream::connect(&self.socket).is_ok()
    }

    fn client(&self) -> Result<DaemonClient> {
        let token = strata_daemon::read_token(&self.token_file).map_err(|e| Error::Backend {
            what: format!("workspace {}: cannot read its token: {e}", self.workspace),
            log_tail: String::new(),
            source: None,
        })?;
        Ok(DaemonClient::new(
            self.socket.clone(),
            token,
            format!("workspace {}", self.workspace),
            Some(self.log_file.clone()),
        ))
    }

    fn dead_error(&self, dirs: &HostDirs) -> Error {
        Error::Backend {
            what: format!(
                "the process serving workspace {} (pid {}) has died; its uncommitted changes are kept in {}. Recover with `strata ws commit {} --offline -m MSG` (publishes them without a mount) or drop them with `strata ws unmount {} --discard`",
                self.workspace,
                self.pid,
                dirs.scratch.join(&self.workspace).display(),
                self.workspace,
                self.workspace
            ),
            log_tail: strata_daemon::tail_file(&self.log_file, 20).unwrap_or_default(),
            source: None,
        }
    }
}

/// Options of [`mount`].
#[derive(Clone, Debug, Default)]
pub struct HostMountOptions {
    /// Skip the Store's filesystem-type check.
    pub allow_any_fs: bool,
    /// Stay attached: wait for the daemon to exit (Ctrl-C unmounts).
    pub foreground: bool,
}

fn io(what: &str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let (what, path) = (what.to_string(), path.to_path_buf());
    move |source| Error::Io { what, path, source }
}

fn invalid(what: String, hint: &str) -> Error {
    Error::InvalidInput {
        what,
        hint: hint.to_string(),
        source: None,
    }
}

/// Mount branch `reference` at `mountpoint` (an existing empty directory
/// outside the Store). Needs root (mount(2) and /dev/fuse).
pub async fn mount(
    store: &Path,
    reference: &str,
    mountpoint: &Path,
    dirs: &HostDirs,
    opts: &HostMountOptions,
) -> Result<(HostMount, Option<std::process::Child>)> {
    // Bad input first, before anything is started.
    let mp = mountpoint.canonicalize().map_err(|e| {
        invalid(
            format!("mount point {}: {e}", mountpoint.display()),
            "create an empty directory and mount there",
        )
    })?;
    if !mp.is_dir() {
        return Err(invalid(
            format!("mount point {} is not a directory", mp.display()),
            "mount on an empty directory",
        ));
    }
    if std::fs::read_dir(&mp)
        .map_err(io("list the mount point", &mp))?
        .next()
        .is_some()
    {
        return Err(invalid(
            format!("mount point {} is not empty", mp.display()),
            "mount on an empty directory (a Workspace would hide what is there)",
        ));
    }
    let store_dir = store.canonicalize().map_err(io("open the Store", store))?;
    if mp.starts_with(&store_dir) {
        return Err(invalid(
            format!(
                "mount point {} is inside the Store {}",
                mp.display(),
                store_dir.display()
            ),
            "mount outside the Store directory",
        ));
    }
    let s = strata_store::Store::open(
        &store_dir,
        &strata_store::StoreOptions {
            allow_any_fs: opts.allow_any_fs,
            ..Default::default()
        },
    )?;
    let resolved = s.resolve(reference)?;
    let Some(branch) = resolved.branch else {
        return Err(invalid(
            format!("{reference} is a commit, not a branch"),
            "mount PROJECT/BRANCH (fork one from the commit with `strata branch create`)",
        ));
    };
    drop(s);

    // The daemon's private directory: config, token, socket, log (0700).
    let records = dirs.records();
    private_dirs(&records).map_err(io("create the run directory", &records))?;
    set_mode(&dirs.run, 0o700)?;
    // The scratch root holds every host Workspace's changed files: made
    // private here with any missing directory above it (existing ones are
    // the user's choice and left alone).
    private_dirs(&dirs.scratch).map_err(io("create the scratch directory", &dirs.scratch))?;
    let ddir = records.join(format!("d-{:016x}", rand::random::<u64>()));
    std::fs::create_dir(&ddir).map_err(io("create the daemon directory", &ddir))?;
    set_mode(&ddir, 0o700)?;
    let token = strata_daemon::new_token().map_err(io("make a token for", &ddir))?;
    let token_file = ddir.join("token");
    strata_daemon::write_token(&token_file, &token).map_err(io("write the token", &token_file))?;
    let socket = ddir.join("daemon.sock");
    let log_file = ddir.join("daemon.log");
    let mut cfg = strata_daemon::DaemonConfig::new(
        socket.clone(),
        token_file.clone(),
        log_file.clone(),
        store_dir.clone(),
        dirs.scratch.clone(),
    );
    // Files the user creates through the mount are the user's, and so is the root.
    cfg.default_user = Some((
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw(),
    ));
    cfg.allow_any_fs = opts.allow_any_fs;
    let cfg_file = ddir.join("config.json");
    strata_daemon::write_private(
        &cfg_file,
        &serde_json::to_vec(&cfg).expect("config serializes"),
    )
    .map_err(io("write the daemon config", &cfg_file))?;

    // Start the daemon: this same executable, re-executed.
    let exe = std::env::current_exe().map_err(io(
        "find the strata executable",
        Path::new("/proc/self/exe"),
    ))?;
    let out_file = ddir.join("daemon.out");
    let out = std::fs::File::create(&out_file).map_err(io("create", &out_file))?;
    let err = out.try_clone().map_err(io("dup", &out_file))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg(strata_daemon::DAEMON_ARG)
        .arg("--config")
        .arg(&cfg_file)
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err);
    if !opts.foreground {
        // Its own session: it outlives this command and a Ctrl-C here.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    }
    let mut child = cmd.spawn().map_err(io("start the daemon", &cfg_file))?;
    let pid = child.id();
    wait_marker(&out_file, &mut child, &log_file)?;

    let client = DaemonClient::new(
        socket.clone(),
        token,
        "host mount".into(),
        Some(log_file.clone()),
    );
    let req = MountRequest {
        reference: branch.to_string(),
        at: Some(mp.display().to_string()),
    };
    let info: WorkspaceInfo = match client
        .call(Method::POST, "/v1/workspaces", Some(&req))
        .await
    {
        Ok(i) => i,
        Err(e) => {
            let _ = client
                .call::<serde_json::Value>(Method::POST, "/v1/shutdown", None::<&()>)
                .await;
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(&ddir);
            return Err(e);
        }
    };
    let m = HostMount {
        workspace: info.id.to_string(),
        mountpoint: mp,
        branch: info.branch,
        daemon_dir: ddir,
        socket,
        token_file,
        log_file,
        pid,
    };
    let rec = records.join(format!("{}.json", m.workspace));
    strata_daemon::write_private(
        &rec,
        &serde_json::to_vec_pretty(&m).expect("record serializes"),
    )
    .map_err(io("record the mount", &rec))?;
    Ok((m, opts.foreground.then_some(child)))
}

/// `mkdir -p` with mode 0700 for every directory it creates (existing
/// ones are left as they are).
fn private_dirs(p: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(p)
}

fn set_mode(p: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).map_err(io("chmod", p))
}

/// Wait for the daemon's one startup marker line (bounded; strata-sandbox's
/// one marker wait), or report its death with the log tail.
fn wait_marker(out_file: &Path, child: &mut std::process::Child, log: &Path) -> Result<()> {
    use strata_sandbox::backend::marker::{wait_marker, Look, NotReady};
    let within = Duration::from_secs(15);
    let ready = wait_marker(within, Duration::from_millis(5), || {
        // The process first, then its stdout (see `Look::ended`).
        let ended = child
            .try_wait()
            .map_err(|e| format!("waiting for the workspace daemon: {e}"))?
            .map(|st| format!("the workspace daemon exited ({st})"));
        Ok(Look {
            stdout: std::fs::read(out_file).unwrap_or_default(),
            ended,
        })
    });
    let tail = || {
        let out = std::fs::read_to_string(out_file).unwrap_or_default();
        format!(
            "{}\n{}",
            out.trim_end(),
            strata_daemon::tail_file(log, 20).unwrap_or_default()
        )
    };
    match ready {
        Ok(_) => Ok(()),
        Err(NotReady::Failed(why)) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(Error::Backend {
                what: format!("the workspace daemon was not ready: {why}"),
                log_tail: tail(),
                source: None,
            })
        }
        Err(NotReady::Timeout) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(Error::Backend {
                what: "the workspace daemon did not report ready within 15 s".into(),
                log_tail: tail(),
                source: None,
            })
        }
    }
}

/// Every recorded host mount, alive or not.
pub fn list(dirs: &HostDirs) -> Result<Vec<HostMount>> {
    let mut out = Vec::new();
    let records = dirs.records();
    let rd = match std::fs::read_dir(&records) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(io("list", &records)(e)),
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "json") {
            if let Ok(bytes) = std::fs::read(&p) {
                if let Ok(m) = serde_json::from_slice::<HostMount>(&bytes) {
                    out.push(m);
                }
            }
        }
    }
    out.sort_by(|a, b| a.workspace.cmp(&b.workspace));
    Ok(out)
}

/// The record of one host mount.
pub fn find(dirs: &HostDirs, workspace: &str) -> Result<HostMount> {
    if workspace.is_empty()
        || !workspace
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(invalid(
            format!("{workspace:?} is not a Workspace ID"),
            "list them with `strata ws list`",
        ));
    }
    let rec = dirs.records().join(format!("{workspace}.json"));
    let bytes = std::fs::read(&rec).map_err(|_| Error::NotFound {
        what: format!(
            "workspace {workspace} (no host mount recorded in {})",
            dirs.records().display()
        ),
        hint: "list them with `strata ws list`".into(),
        source: None,
    })?;
    serde_json::from_slice(&bytes).map_err(|e| {
        invalid(
            format!("record {}: {e}", rec.display()),
            "remove the record",
        )
    })
}

/// Changes of a live host mount relative to its base.
pub async fn status(dirs: &HostDirs, m: &HostMount) -> Result<StatusResponse> {
    if !m.alive() {
        return Err(m.dead_error(dirs));
    }
    m.client()?
        .call(
            Method::GET,
            &format!("/v1/workspaces/{}/status", m.workspace),
            None::<&()>,
        )
        .await
}

/// Commit a live host mount; the mount continues from the new head.
pub async fn commit(dirs: &HostDirs, m: &HostMount, message: &str) -> Result<CommitOutcome> {
    if !m.alive() {
        return Err(m.dead_error(dirs));
    }
    let req = CommitRequest {
        message: message.to_string(),
    };
    let r: CommitResponse = m
        .client()?
        .call(
            Method::POST,
            &format!("/v1/workspaces/{}/commit", m.workspace),
            Some(&req),
        )
        .await?;
    Ok(CommitOutcome::from_api(r))
}

/// Unmount (refusing uncommitted changes unless `discard`), stop the
/// daemon and remove the record. A dead daemon's Workspace is recovered
/// from its scratch directory (discard) and its stale mount detached.
pub async fn unmount(
    store: &Path,
    dirs: &HostDirs,
    m: &HostMount,
    discard: bool,
    allow_any_fs: bool,
) -> Result<()> {
    if m.alive() {
        let client = m.client()?;
        if !discard {
            let st = status(dirs, m).await?;
            if !st.changes.is_empty() {
                return Err(Error::Busy {
                    what: format!("workspace {} ({} uncommitted change(s))", m.workspace, st.changes.len()),
                    hint: format!(
                        "Commit them with `strata ws commit {} -m MSG`, or pass --discard to drop them",
                        m.workspace
                    ),
                    source: None,
                });
            }
        }
        let _: serde_json::Value = client
            .call(
                Method::POST,
                &format!("/v1/workspaces/{}/unmount", m.workspace),
                Some(&UnmountRequest { discard: true }),
            )
            .await?;
        let _ = client
            .call::<serde_json::Value>(Method::POST, "/v1/shutdown", None::<&()>)
            .await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while Path::new(&format!("/proc/{}", m.pid)).exists() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    } else {
        let st = offline(store, dirs, m, allow_any_fs)?;
        if !discard && !st.status()?.is_empty() {
            return Err(Error::Busy {
                what: format!(
                    "workspace {} (its daemon died; uncommitted changes kept)",
                    m.workspace
                ),
                hint: format!(
                    "Commit them with `strata ws commit {} --offline -m MSG`, or pass --discard",
                    m.workspace
                ),
                source: None,
            });
        }
        st.discard()?;
        // The dead server's mount answers ENOTCONN: detach it.
        let _ = rustix::mount::unmount(&m.mountpoint, rustix::mount::UnmountFlags::DETACH);
    }
    let _ = std::fs::remove_file(dirs.records().join(format!("{}.json", m.workspace)));
    let _ = std::fs::remove_dir_all(&m.daemon_dir);
    Ok(())
}

/// Commit a Workspace whose daemon died, straight from its scratch
/// directory (no mount needed), then forget the dead mount.
pub fn commit_offline(
    store: &Path,
    dirs: &HostDirs,
    m: &HostMount,
    message: &str,
    allow_any_fs: bool,
) -> Result<CommitOutcome> {
    if m.alive() {
        return Err(invalid(
            format!(
                "workspace {} is served by a live daemon (pid {})",
                m.workspace, m.pid
            ),
            "commit it without --offline",
        ));
    }
    let ws = offline(store, dirs, m, allow_any_fs)?;
    Ok(match ws.commit(message)? {
        strata_workspace::CommitOutcome::Committed(c) => CommitOutcome::Committed(c.to_hex()),
        strata_workspace::CommitOutcome::UpToDate => CommitOutcome::UpToDate(ws.base().to_hex()),
    })
}

fn offline(
    store: &Path,
    dirs: &HostDirs,
    m: &HostMount,
    allow_any_fs: bool,
) -> Result<strata_workspace::Workspace> {
    crate::workspaces::open_offline(store, &dirs.scratch, &m.workspace, allow_any_fs)
}
