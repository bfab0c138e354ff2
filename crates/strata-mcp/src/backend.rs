//! Where the tools' Store calls and Sandboxes come from. Today the local
//! Store in this process (`strata mcp --store DIR`); a server
//! (`strata mcp --remote URL`) becomes a second variant here once the SDK
//! has a remote client, and the tools do not change: they call only these
//! methods and the SDK's `Sandbox`/`Workspace`/`ExecBuilder`.

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
    store: strata_sdk::Store,
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
    /// Serve the Store `store`, opened in this process.
    pub fn local(store: strata_sdk::Store, defaults: SandboxDefaults) -> Backend {
        Backend { store, defaults }
    }

    pub(crate) async fn create_sandbox(&self, req: NewSandbox) -> Result<Sandbox, ToolError> {
        let mut spec = SandboxSpec::new(self.store.dir());
        spec.name = req.name;
        spec.labels = req.labels;
        spec.network = req.network;
        spec.limits.memory_bytes = req.memory_bytes;
        spec.daemon_exe = self.defaults.daemon_exe.clone();
        spec.state_dir = self.defaults.state_dir.clone();
        Ok(Sandbox::create(spec).await?)
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
            for (branch, _) in self.store.branches(Some(p)).await? {
                let log = self.store.log(&branch, SCOPE_LOG_DEPTH).await?;
                if log.iter().any(|(c, _)| c.starts_with(&id)) {
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
        Ok(self.store.fork(from, new).await?)
    }

    pub(crate) async fn log(
        &self,
        r: &str,
        limit: usize,
    ) -> Result<Vec<(String, String)>, ToolError> {
        Ok(self.store.log(r, limit).await?)
    }

    pub(crate) async fn diff(&self, a: &str, b: &str) -> Result<Vec<(Vec<u8>, String)>, ToolError> {
        Ok(self.store.diff(a, b).await?)
    }

    /// The bytes of `path` in REF `r`.
    pub(crate) async fn read_file(
        &self,
        r: &str,
        path: &str,
    ) -> Result<Vec<u8>, strata_sdk::Error> {
        self.store.read_file(r, path).await
    }
}
