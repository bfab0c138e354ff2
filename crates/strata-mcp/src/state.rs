//! What a server keeps between tool calls: the Sandboxes and Workspaces
//! its clients created, by ID, each with the caller that created it, and
//! who the caller of a request is.
//!
//! Over stdio there is one client and one caller ([`Caller::local`]). Over
//! HTTP every request carries a token; a Sandbox or Workspace belongs to
//! the token that created it, and another token sees it as unknown (the
//! same message as an ID that does not exist).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use strata_sdk::{Sandbox, Workspace};

use crate::error::ToolError;

/// Which projects a caller may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every project, and commit ids anywhere in the Store.
    All,
    /// Only these projects; a commit id counts only if the first-parent
    /// history of a branch of one of them holds it.
    Projects(BTreeSet<String>),
}

impl Scope {
    /// Whether `project` is visible.
    pub fn sees(&self, project: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Projects(p) => p.contains(project),
        }
    }
}

/// Who makes a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's id (`None` over stdio: the local user).
    pub token_id: Option<String>,
    /// What it may see.
    pub scope: Scope,
}

impl Caller {
    /// The stdio client: the user who started `strata mcp`, unrestricted.
    pub fn local() -> Caller {
        Caller {
            token_id: None,
            scope: Scope::All,
        }
    }
}

/// A Sandbox this server created. The lock is held while a call uses it
/// (mount, close); `None` once closed.
pub(crate) struct SandboxEntry {
    pub owner: Option<String>,
    pub sandbox: Arc<tokio::sync::Mutex<Option<Sandbox>>>,
}

/// A Workspace mounted through this server.
#[derive(Clone)]
pub(crate) struct WorkspaceEntry {
    pub owner: Option<String>,
    pub sandbox_id: String,
    pub workspace: Workspace,
}

/// The server's registry, shared by every request (and, over HTTP, every
/// handler instance the transport makes).
#[derive(Default)]
pub(crate) struct Registry {
    sandboxes: Mutex<HashMap<String, SandboxEntry>>,
    workspaces: Mutex<HashMap<String, WorkspaceEntry>>,
}

fn unknown(kind: &str, id: &str, tool: &str) -> ToolError {
    ToolError::new(format!(
        "unknown {kind} {id:?}: this server has no such {kind} (IDs come from {tool}; a closed one is gone)"
    ))
}

impl Registry {
    pub fn add_sandbox(&self, caller: &Caller, sandbox: Sandbox) -> String {
        let id = sandbox.id().to_string();
        self.sandboxes.lock().expect("registry lock").insert(
            id.clone(),
            SandboxEntry {
                owner: caller.token_id.clone(),
                sandbox: Arc::new(tokio::sync::Mutex::new(Some(sandbox))),
            },
        );
        id
    }

    /// The Sandbox `id` if `caller` created it.
    pub fn sandbox(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<Arc<tokio::sync::Mutex<Option<Sandbox>>>, ToolError> {
        let map = self.sandboxes.lock().expect("registry lock");
        match map.get(id) {
            Some(e) if e.owner == caller.token_id => Ok(e.sandbox.clone()),
            _ => Err(unknown("sandbox", id, "sandbox_create")),
        }
    }

    /// Forget Sandbox `id` and its Workspaces (after it closed).
    pub fn remove_sandbox(&self, id: &str) {
        self.sandboxes.lock().expect("registry lock").remove(id);
        self.workspaces
            .lock()
            .expect("registry lock")
            .retain(|_, w| w.sandbox_id != id);
    }

    pub fn add_workspace(&self, caller: &Caller, sandbox_id: &str, ws: Workspace) {
        self.workspaces.lock().expect("registry lock").insert(
            ws.id().to_string(),
            WorkspaceEntry {
                owner: caller.token_id.clone(),
                sandbox_id: sandbox_id.to_string(),
                workspace: ws,
            },
        );
    }

    /// Workspace `id` if `caller` mounted it.
    pub fn workspace(&self, caller: &Caller, id: &str) -> Result<WorkspaceEntry, ToolError> {
        let map = self.workspaces.lock().expect("registry lock");
        match map.get(id) {
            Some(e) if e.owner == caller.token_id => Ok(e.clone()),
            _ => Err(unknown("workspace", id, "workspace_mount")),
        }
    }

    /// Point the ID `id` at a new mount of the same branch (restore), so
    /// the agent keeps using the ID it has.
    pub fn replace_workspace(&self, id: &str, ws: Workspace) {
        if let Some(e) = self.workspaces.lock().expect("registry lock").get_mut(id) {
            e.workspace = ws;
        }
    }

    /// Every Sandbox, removed from the registry (for the end of a server).
    pub fn drain_sandboxes(&self) -> Vec<(String, Arc<tokio::sync::Mutex<Option<Sandbox>>>)> {
        self.workspaces.lock().expect("registry lock").clear();
        self.sandboxes
            .lock()
            .expect("registry lock")
            .drain()
            .map(|(id, e)| (id, e.sandbox))
            .collect()
    }
}
