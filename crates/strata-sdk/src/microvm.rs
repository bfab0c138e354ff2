//! Sandboxes in a project's microVM (docs/microvm.md, "Sandboxes in the
//! VM"): [`SandboxSpec::microvm`] set, [`crate::Client::create_sandbox`]
//! starts the project's VM (or finds it running, strata-microvm), makes
//! the project in the VM's Store if it is not there yet, and creates the
//! Sandbox through the guest's server with the remote client: inside the
//! VM it is a native Sandbox (namespaces, seccomp, cgroups of the guest's
//! kernel). Every Sandbox of a project shares that VM and its Store.
//!
//! How an ID finds its VM: at create, an empty file
//! `STATE_ROOT/PROJECT/sandboxes/ID` (the VM's 0700 directory) records
//! which project's VM holds the Sandbox; [`open`] (used by
//! [`crate::Client::sandbox`] and the CLI's commands taking an ID) looks
//! there first and reaches the Sandbox through the VM's endpoint. A record
//! whose Sandbox the guest no longer knows is removed when met. Closing a
//! Sandbox made or opened here ([`Sandbox::close`], `close_discard`)
//! drops its record and, when it was the project's last, stops the VM
//! ([`closed`]).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use strata_microvm::{vm, VmConfig, VmError};

/// The live qemu processes whose command line names a directory (see
/// strata-microvm), for checks that no VM is left running.
pub use strata_microvm::vm::qemus_under;
use strata_sandbox::BackendKind;

use crate::connect::Client;
use crate::error::{Error, Result};
use crate::exec::ExecHandle;
use crate::sandbox::{Sandbox, SandboxFilter, SandboxInfo, SandboxSpec};
use crate::workspace::Workspace;

/// Which project's VM a Sandbox runs in, and how to boot it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MicroVm {
    /// The project: one VM, one disk and one Store per project; also the
    /// project in that Store whose branches the Sandbox mounts.
    pub project: String,
    /// The VMs' state root (default: `$STRATA_VM_STATE`, else
    /// `/var/lib/strata/vms`).
    pub state_root: Option<PathBuf>,
    /// The static strata binary that becomes the guest's `/init` (default:
    /// the current executable, which must then be the strata CLI).
    pub exe: Option<PathBuf>,
}

impl MicroVm {
    /// The VM of `project`, at the default state root, booting this binary.
    pub fn new(project: impl Into<String>) -> MicroVm {
        MicroVm {
            project: project.into(),
            state_root: None,
            exe: None,
        }
    }

    fn config(&self) -> Result<VmConfig> {
        let exe = match &self.exe {
            Some(e) => e.clone(),
            None => std::env::current_exe().map_err(Error::io(
                "find the strata binary (the guest's /init) of",
                "/proc/self/exe",
            ))?,
        };
        Ok(VmConfig::new(
            root(self.state_root.clone()),
            &self.project,
            exe,
        ))
    }
}

fn root(r: Option<PathBuf>) -> PathBuf {
    r.unwrap_or_else(vm::default_state_root)
}

/// A VM failure as the SDK's error: bad input stays bad input.
fn vm_error(e: VmError) -> Error {
    let msg = e.to_string();
    match e {
        VmError::BadProject(_)
        | VmError::BadInput { .. }
        | VmError::NotExt4 { .. }
        | VmError::NoQemu { .. }
        | VmError::NoKernel(_)
        | VmError::KernelMissing { .. } => Error::invalid(msg, "see docs/microvm.md"),
        VmError::DiskInUse { .. } => Error::busy(msg, "one VM per disk"),
        _ => Error::backend(msg, String::new()),
    }
}

/// A Sandbox ID is `sb-` and hex: anything else cannot name a record (and
/// cannot reach outside the records directory).
fn plausible_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn records_dir(root: &Path, project: &str) -> PathBuf {
    root.join(project).join("sandboxes")
}

/// The project whose VM holds Sandbox `id`, by the records.
fn project_of(root: &Path, id: &str) -> Option<String> {
    if !plausible_id(id) {
        return None;
    }
    fs::read_dir(root).ok()?.flatten().find_map(|e| {
        records_dir(root, &e.file_name().to_string_lossy())
            .join(id)
            .is_file()
            .then(|| e.file_name().to_string_lossy().into_owned())
    })
}

/// The endpoint's client of the running VM of `project`.
async fn connect(cfg: VmConfig) -> Result<Client> {
    let project = cfg.project.clone();
    let st = tokio::task::spawn_blocking(move || vm::status(&cfg))
        .await
        .map_err(|e| Error::backend(format!("worker thread failed: {e}"), String::new()))?
        .map_err(vm_error)?;
    let Some(ep) = st.endpoint else {
        return Err(Error::Unreachable {
            what: format!("the VM of project {project} is not running"),
            hint: format!("start it with `strata vm start --project {project}`: its disk keeps the Store and the Sandboxes' records"),
        });
    };
    Client::connect_with(&ep.url, &ep.token, None)
}

/// Create a Sandbox in the VM of `vm.project` (started if it is not);
/// what [`crate::Client::create_sandbox`] does with [`SandboxSpec::microvm`]
/// set (the spec's Store is ignored: the Store is the VM's).
pub async fn create(mut spec: SandboxSpec, vm_spec: MicroVm) -> Result<Sandbox> {
    let host_only = [
        ("rootfs", spec.rootfs.is_some()),
        ("daemon_exe", spec.daemon_exe.is_some()),
        ("state_dir", spec.state_dir.is_some()),
        ("expose", !spec.expose.is_empty()),
        ("docker_image", spec.docker_image.is_some()),
    ];
    if let Some((field, _)) = host_only.iter().find(|(_, set)| *set) {
        return Err(Error::invalid(
            format!("SandboxSpec::{field} with microvm"),
            "a Sandbox in a VM sees the guest's view of the host's system directories only; leave it unset",
        ));
    }
    if spec.fuse_transport.is_some() {
        return Err(Error::invalid(
            "SandboxSpec::fuse_transport with microvm",
            "the guest's server decides how its mounts serve FUSE (its STRATA_FUSE_TRANSPORT); leave it unset",
        ));
    }
    let cfg = vm_spec.config()?;
    let root = cfg.state_root.clone();
    let project = cfg.project.clone();
    let start_cfg = cfg.clone();
    tokio::task::spawn_blocking(move || vm::start(&start_cfg))
        .await
        .map_err(|e| Error::backend(format!("worker thread failed: {e}"), String::new()))?
        .map_err(vm_error)?;
    let client = connect(cfg).await?;
    if !client.projects().await?.contains(&project) {
        client
            .create_project(&project, "project made for its VM's first Sandbox")
            .await?;
    }
    spec.project = Some(project.clone());
    // Boxed: create_sandbox calls back here for a spec with `microvm` set
    // (this one has none, but the future type is recursive).
    let mut sb = Box::pin(client.create_sandbox(spec)).await?;
    sb.info.backend = BackendKind::MicroVm;
    let dir = records_dir(&root, &project);
    let record = dir.join(sb.id());
    let written = fs::create_dir_all(&dir).and_then(|()| fs::write(&record, b""));
    if let Err(e) = written {
        // Unreachable by ID without its record: do not leave it running.
        let _ = sb.close_discard().await;
        return Err(Error::io("write the Sandbox's record", record)(e));
    }
    sb.vm = Some((root, project));
    Ok(sb)
}

/// Sandbox `id` if a VM under `state_root` (default: `$STRATA_VM_STATE`,
/// else `/var/lib/strata/vms`) holds it; `None` when no record names it.
pub async fn open(id: &str, state_root: Option<PathBuf>) -> Result<Option<Sandbox>> {
    let root = root(state_root);
    let Some(project) = project_of(&root, id) else {
        return Ok(None);
    };
    let cfg = VmConfig::new(root.clone(), &project, PathBuf::new());
    let client = connect(cfg).await?;
    // Boxed: Client::sandbox looks here first (a recursive future type).
    match Box::pin(client.sandbox(id)).await {
        Ok(mut sb) => {
            sb.info.backend = BackendKind::MicroVm;
            sb.vm = Some((root, project));
            Ok(Some(sb))
        }
        Err(e @ Error::NotFound { .. }) => {
            forget(id, Some(root));
            Err(e)
        }
        Err(e) => Err(e),
    }
}

/// Remove Sandbox `id`'s record (after it was closed); the project whose
/// VM held it.
pub fn forget(id: &str, state_root: Option<PathBuf>) -> Option<String> {
    let root = root(state_root);
    let project = project_of(&root, id)?;
    let _ = fs::remove_file(records_dir(&root, &project).join(id));
    Some(project)
}

/// After Sandbox `id` was closed: drop its record and, when it was the
/// last Sandbox of its project's VM, stop that VM (a clean power-off; the
/// disk stays). Returns the project whose VM was stopped.
pub async fn closed(id: &str, state_root: Option<PathBuf>) -> Result<Option<String>> {
    let root = root(state_root);
    let Some(project) = forget(id, Some(root.clone())) else {
        return Ok(None);
    };
    let left = fs::read_dir(records_dir(&root, &project))
        .map(|rd| rd.count())
        .unwrap_or(0);
    if left > 0 {
        return Ok(None);
    }
    let cfg = VmConfig::new(root, &project, PathBuf::new());
    let stopped = tokio::task::spawn_blocking(move || vm::stop(&cfg, Duration::from_secs(60)))
        .await
        .map_err(|e| Error::backend(format!("worker thread failed: {e}"), String::new()))?;
    match stopped {
        Ok(_) => Ok(Some(project)),
        // Stopped by someone else meanwhile: nothing to do.
        Err(VmError::NotRunning(_)) => Ok(None),
        Err(e) => Err(vm_error(e)),
    }
}

/// How long one Sandbox in a VM may take to answer a lookup by ID.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// The Sandbox in a running VM that has Workspace `id` mounted; asked by
/// [`Sandbox::find_workspace`] only when no Sandbox on the host has it.
pub(crate) async fn find_workspace(id: &str) -> Option<(Sandbox, Workspace)> {
    for sb in running(None).await {
        if let Ok(Ok(wss)) = tokio::time::timeout(LOOKUP_TIMEOUT, sb.workspaces()).await {
            if let Some(ws) = wss.into_iter().find(|w| w.id() == id) {
                return Some((sb, ws));
            }
        }
    }
    None
}

/// The Sandbox in a running VM that knows exec `id` (as
/// [`find_workspace`]).
pub(crate) async fn find_exec(id: &str) -> Option<(Sandbox, ExecHandle)> {
    for sb in running(None).await {
        if let Ok(Ok(h)) = tokio::time::timeout(LOOKUP_TIMEOUT, sb.exec_by_id(id)).await {
            return Some((sb, h));
        }
    }
    None
}

/// The Sandboxes of the running VMs that match `filter`'s labels and name
/// prefix (its `state_dir` does not apply), for `strata sandbox list`.
pub async fn list(filter: &SandboxFilter, state_root: Option<PathBuf>) -> Vec<SandboxInfo> {
    let prefix_ok = |i: &SandboxInfo| match &filter.name_prefix {
        Some(p) => i.name.as_deref().is_some_and(|n| n.starts_with(p.as_str())),
        None => true,
    };
    running(state_root)
        .await
        .into_iter()
        .map(|sb| sb.info().clone())
        .filter(|i| {
            filter
                .labels
                .iter()
                .all(|(k, v)| i.labels.get(k) == Some(v))
        })
        .filter(prefix_ok)
        .collect()
}

/// Every recorded Sandbox of the VMs that run; a VM that is down or a
/// Sandbox that does not answer is left out.
pub async fn running(state_root: Option<PathBuf>) -> Vec<Sandbox> {
    let root = root(state_root);
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir(&root) else {
        return out;
    };
    for e in rd.flatten() {
        let Ok(ids) = fs::read_dir(records_dir(&root, &e.file_name().to_string_lossy())) else {
            continue;
        };
        for id in ids.flatten() {
            let id = id.file_name().to_string_lossy().into_owned();
            if let Ok(Some(sb)) = open(&id, Some(root.clone())).await {
                out.push(sb);
            }
        }
    }
    out
}
