//! Where the tools' Store calls and Sandboxes come from: a
//! [`strata_sdk::Client`], so the local Store in this process
//! (`strata mcp --store DIR`) and a server (`strata mcp --remote URL`) are
//! the same code; the tools call only these methods and the SDK's
//! `Sandbox`/`Workspace`/`ExecBuilder`, which work in both modes.

use std::collections::BTreeMap;
use std::path::PathBuf;

use strata_sdk::{Network, Sandbox, SandboxSpec};

use crate::error::ToolError;
use crate::state::{Caller, Scope};

/// How Sandboxes are made (the `strata sandbox create` defaults).
#[derive(Debug, Clone, Default)]
pub struct SandboxDefaults {
    /// The binary re-executed as init, daemon and exec helper (default:
    /// the current executable, `strata`).
    pub daemon_exe: Option<PathBuf>,
    /// Sandbox state root (default as `strata sandbox`).
    pub state_dir: Option<PathBuf>,
}

/// The Store and Sandbox source of one server.
#[derive(Debug, Clone)]
pub struct Backend {
    client: strata_sdk::Client,
    defaults: SandboxDefaults,
}

/// What `sandbox_create` asked for.
pub(crate) struct NewSandbox {
    pub name: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub network: Network,
    pub memory_bytes: Option<u64>,
}

/// How many first-parent commits of each in-scope branch a scoped caller's
/// commit id is looked for in.
const SCOPE_LOG_DEPTH: usize = 100_000;

impl Backend {
    /// Serve what `client` reaches: its local Store, or a server's (whose
    /// token then decides what the tools see, as for every client).
    pub fn new(client: strata_sdk::Client, defaults: SandboxDefaults) -> Backend {
        Backend { client, defaults }
    }

    pub(crate) async fn create_sandbox(&self, req: NewSandbox) -> Result<Sandbox, ToolError> {
        // The Client puts its own Store in the spec (a server's, remotely).
        let mut spec = SandboxSpec::new("");
        spec.name = req.name;
        spec.labels = req.labels;
        spec.network = req.network;
        spec.limits.memory_bytes = req.memory_bytes;
        spec.daemon_exe = self.defaults.daemon_exe.clone();
        spec.state_dir = self.defaults.state_dir.clone();
        Ok(self.client.create_sandbox(spec).await?)
    }

    /// Check that `caller` may use REF `r` (`PROJECT/BRANCH` or a commit
    /// id): its project must be in scope; a scoped caller's commit id must
    /// be in the history of a branch it sees. Out-of-scope reads as not
    /// found, like a name that does not exist.
    pub(crate) async fn check_ref(&self, caller: &Caller, r: &str) -> Result<(), ToolError> {
        let Scope::Projects(projects) = &caller.scope else {
            return Ok(());
        };
        let not_found = || {
            ToolError::new(format!(
                "REF {r:?} not found: give PROJECT/BRANCH of a project this token may use, or a commit id from its `log`"
            ))
        };
        if let Some((project, _)) = r.split_once('/') {
            return if projects.contains(project) {
                Ok(())
            } else {
                Err(not_found())
            };
        }
        let id = r.to_ascii_lowercase();
        for p in projects {
            for b in self.client.branches(Some(p)).await? {
                let branch = format!("{}/{}", b.project, b.name);
                let log = self.client.log(&branch, Some(SCOPE_LOG_DEPTH)).await?;
                if log.iter().any(|c| c.id.starts_with(&id)) {
                    return Ok(());
                }
            }
        }
        Err(not_found())
    }

    /// Check that `caller` may use branch `b` (`PROJECT/BRANCH`).
    pub(crate) fn check_branch(&self, caller: &Caller, b: &str) -> Result<(), ToolError> {
        let project = b.split_once('/').map(|(p, _)| p).ok_or_else(|| {
            ToolError::new(format!(
                "{b:?} is not a branch: give PROJECT/BRANCH, e.g. web/main"
            ))
        })?;
        if caller.scope.sees(project) {
            Ok(())
        } else {
            Err(ToolError::new(format!(
                "branch {b:?} not found: this token may use only its own projects"
            )))
        }
    }

    pub(crate) async fn fork(&self, from: &str, new: &str) -> Result<String, ToolError> {
        Ok(self.client.fork(from, new).await?)
    }

    pub(crate) async fn log(
        &self,
        r: &str,
        limit: usize,
    ) -> Result<Vec<(String, String)>, ToolError> {
        let log = self.client.log(r, Some(limit)).await?;
        Ok(log.into_iter().map(|c| (c.id, c.message)).collect())
    }

    pub(crate) async fn diff(&self, a: &str, b: &str) -> Result<Vec<(Vec<u8>, String)>, ToolError> {
        let d = self.client.diff(a, b).await?;
        Ok(d.changes.into_iter().map(|c| (c.path, c.kind)).collect())
    }

    /// The bytes of `path` in REF `r`.
    pub(crate) async fn read_file(
        &self,
        r: &str,
        path: &str,
    ) -> Result<Vec<u8>, strata_sdk::Error> {
        self.client.read_file(r, path.as_bytes()).await
    }
}
