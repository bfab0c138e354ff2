//! The MCP handler: the sixteen tools, their descriptions, and serving
//! them over stdio.

use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, ErrorData, Implementation, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_handler, tool_router, RoleServer, ServerHandler, ServiceExt};
use serde_json::json;
use strata_sdk::Network;

use crate::backend::{Backend, NewSandbox};
use crate::error::{ServeError, ToolError, ToolResult};
use crate::files;
use crate::params as p;
use crate::run;
use crate::state::{Caller, Registry, WorkspaceEntry};

const INSTRUCTIONS: &str = "strata: versioned workspaces and sandboxes. Typical flow: \
fork (PROJECT/main -> PROJECT/agent-1), sandbox_create, workspace_mount (the branch), then \
read_file/write_file/edit_file/list_files/glob/grep and run (commands run as an unprivileged \
user inside the Sandbox), status to see what changed, commit to record it on the branch, \
diff/log to compare history, restore to go back. Close the Sandbox with sandbox_close when done.";

/// What every handler instance shares: the backend and the registry.
pub(crate) struct Shared {
    pub backend: Backend,
    pub registry: Registry,
    /// Every request must carry a verified [`Caller`] (HTTP).
    pub authenticated: bool,
}

/// The MCP server: one per client over stdio; over HTTP the transport
/// makes one per session from the same [`Shared`] state.
#[derive(Clone)]
pub struct StrataMcp {
    pub(crate) shared: Arc<Shared>,
    // Read by the code `tool_handler` generates.
    #[allow(dead_code)]
    tool_router: ToolRouter<Self>,
}

fn done(r: ToolResult) -> Result<CallToolResult, ErrorData> {
    Ok(r.unwrap_or_else(ToolError::into_result))
}

fn ok_json(text: String, v: serde_json::Value) -> CallToolResult {
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(v);
    r
}

/// The caller of a request: the token the HTTP layer verified and put in
/// the request's extensions. A server behind that layer refuses a request
/// without one (never falling back to the unrestricted local caller); over
/// stdio the caller is the local user.
fn caller(shared: &Shared, ctx: &RequestContext<RoleServer>) -> Result<Caller, ToolError> {
    let verified = ctx
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Caller>().cloned());
    match verified {
        Some(c) => Ok(c),
        None if shared.authenticated => Err(ToolError::new(
            "this request carries no verified token: send `Authorization: Bearer TOKEN`",
        )),
        None => Ok(Caller::local()),
    }
}

impl StrataMcp {
    /// A server over `backend` with a fresh registry.
    pub fn new(backend: Backend) -> StrataMcp {
        StrataMcp::with_shared(Arc::new(Shared {
            backend,
            registry: Registry::default(),
            authenticated: false,
        }))
    }

    pub(crate) fn with_shared(shared: Arc<Shared>) -> StrataMcp {
        StrataMcp {
            shared,
            tool_router: Self::tool_router(),
        }
    }

    fn ws(&self, ctx: &RequestContext<RoleServer>, id: &str) -> Result<WorkspaceEntry, ToolError> {
        self.shared
            .registry
            .workspace(&caller(&self.shared, ctx)?, id)
    }

    async fn sandbox_create_inner(&self, c: &Caller, a: p::SandboxCreate) -> ToolResult {
        let network = match a.network.as_deref() {
            None | Some("none") => Network::None,
            Some("host") => Network::Host,
            Some(other) => {
                return Err(ToolError::new(format!(
                    "network {other:?} is not known: give \"none\" (loopback only) or \"host\""
                )))
            }
        };
        let sb = self
            .shared
            .backend
            .create_sandbox(NewSandbox {
                name: a.name,
                labels: a.labels,
                network,
                memory_bytes: a.memory_mib.map(|m| m << 20),
            })
            .await?;
        let id = self.shared.registry.add_sandbox(c, sb);
        Ok(ok_json(
            format!("created sandbox {id}; mount a branch in it with workspace_mount"),
            json!({ "sandbox_id": id }),
        ))
    }

    async fn sandbox_close_inner(&self, c: &Caller, a: p::SandboxClose) -> ToolResult {
        let slot = self.shared.registry.sandbox(c, &a.sandbox_id)?;
        let mut guard = slot.lock().await;
        let Some(sb) = guard.take() else {
            return Err(ToolError::new(format!(
                "sandbox {} is already closed",
                a.sandbox_id
            )));
        };
        if !a.discard {
            if let Err(e) = sb.close_check().await {
                *guard = Some(sb);
                return Err(ToolError::new(format!(
                    "{e} (commit first, or call sandbox_close with discard=true to drop the changes)"
                )));
            }
        }
        let r = if a.discard {
            sb.close_discard().await
        } else {
            sb.close().await
        };
        drop(guard);
        self.shared.registry.remove_sandbox(&a.sandbox_id);
        r?;
        Ok(ok_json(
            format!("closed sandbox {}", a.sandbox_id),
            json!({ "sandbox_id": a.sandbox_id, "closed": true }),
        ))
    }

    async fn workspace_mount_inner(&self, c: &Caller, a: p::WorkspaceMount) -> ToolResult {
        self.shared.backend.check_branch(c, &a.branch)?;
        let slot = self.shared.registry.sandbox(c, &a.sandbox_id)?;
        let guard = slot.lock().await;
        let sb = guard
            .as_ref()
            .ok_or_else(|| ToolError::new(format!("sandbox {} is closed", a.sandbox_id)))?;
        let ws = sb.mount(&a.branch, a.path.as_deref()).await?;
        drop(guard);
        let v = json!({
            "workspace_id": ws.id(),
            "path": ws.path(),
            "branch": ws.branch(),
            "base": ws.base(),
        });
        let text = format!(
            "mounted {} at {} in sandbox {} (workspace {}, base commit {})",
            ws.branch(),
            ws.path(),
            a.sandbox_id,
            ws.id(),
            ws.base()
        );
        self.shared.registry.add_workspace(c, &a.sandbox_id, ws);
        Ok(ok_json(text, v))
    }

    async fn restore_inner(&self, c: &Caller, e: WorkspaceEntry, a: p::Restore) -> ToolResult {
        if let Some(r) = &a.reference {
            self.shared.backend.check_ref(c, r).await?;
        }
        let slot = self.shared.registry.sandbox(c, &e.sandbox_id)?;
        let guard = slot.lock().await;
        let sb = guard
            .as_ref()
            .ok_or_else(|| ToolError::new(format!("sandbox {} is closed", e.sandbox_id)))?;
        let (branch, path) = (
            e.workspace.branch().to_string(),
            e.workspace.path().to_string(),
        );
        // Discard: the only way a mounted Workspace drops its upper layer
        // is an unmount with discard; the same branch is mounted again at
        // the same path, at its head.
        e.workspace.clone().unmount(true).await?;
        let ws = sb.mount(&branch, Some(&path)).await?;
        drop(guard);
        self.shared
            .registry
            .replace_workspace(&a.workspace_id, ws.clone());
        let head = ws.base().to_string();
        let Some(target) = a.reference else {
            return Ok(ok_json(
                format!("discarded uncommitted changes; {path} holds {branch} at {head}"),
                json!({ "workspace_id": a.workspace_id, "head": head, "written": 0, "removed": 0 }),
            ));
        };
        let (written, removed, skipped) =
            files::apply_tree(&ws, &self.shared.backend, &head, &target).await?;
        let mut text = format!(
            "{path} now holds the files of {target} ({written} written, {removed} removed) as uncommitted changes on {branch} (head {head}); commit to record the restore, or restore without ref to undo it"
        );
        if !skipped.is_empty() {
            text.push_str(&format!("\nnot restored: {}", skipped.join(", ")));
        }
        Ok(ok_json(
            text,
            json!({ "workspace_id": a.workspace_id, "head": head, "ref": target,
                    "written": written, "removed": removed, "not_restored": skipped }),
        ))
    }
}

#[tool_router]
impl StrataMcp {
    #[tool(
        description = "Create a Sandbox: an isolated Linux environment (own namespaces, no internet by default, limits) whose commands run as an unprivileged user. Returns sandbox_id. Mount a branch in it with workspace_mount; close it with sandbox_close when done."
    )]
    async fn sandbox_create(
        &self,
        Parameters(a): Parameters<p::SandboxCreate>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let r = match caller(&self.shared, &ctx) {
            Ok(c) => self.sandbox_create_inner(&c, a).await,
            Err(e) => Err(e),
        };
        done(r)
    }

    #[tool(
        description = "Close a Sandbox: stops its commands and unmounts its Workspaces. Refused while a Workspace has uncommitted changes (commit them, or pass discard=true). Committed history stays in the Store."
    )]
    async fn sandbox_close(
        &self,
        Parameters(a): Parameters<p::SandboxClose>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let r = match caller(&self.shared, &ctx) {
            Ok(c) => self.sandbox_close_inner(&c, a).await,
            Err(e) => Err(e),
        };
        done(r)
    }

    #[tool(
        description = "Mount a branch (PROJECT/BRANCH) in a Sandbox as a writable Workspace (default path /workspace). Returns workspace_id, which the file tools, run, status, commit and restore take. Changes stay uncommitted until commit."
    )]
    async fn workspace_mount(
        &self,
        Parameters(a): Parameters<p::WorkspaceMount>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let r = match caller(&self.shared, &ctx) {
            Ok(c) => self.workspace_mount_inner(&c, a).await,
            Err(e) => Err(e),
        };
        done(r)
    }

    #[tool(
        description = "Run a command in a Workspace (cwd: its root) inside its Sandbox, as an unprivileged user, and wait for it. Give `command` (run by sh -c) or `argv`. Output streams as progress notifications when the request has a progress token; the result has the exit code and stdout/stderr (each cut to its first and last 16 KiB with a notice). A non-zero exit is reported as an error result. Default timeout 600 s."
    )]
    async fn run(
        &self,
        Parameters(a): Parameters<p::Run>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let r = match self.ws(&ctx, &a.workspace_id) {
            Ok(e) => run::run(&e.workspace, a, &ctx).await,
            Err(e) => Err(e),
        };
        done(r)
    }

    #[tool(
        description = "Read a text file of a Workspace (path relative to its root). Optional offset (1-based line) and limit (lines) for large files; without them at most 256 KiB is returned, with a notice."
    )]
    async fn read_file(
        &self,
        Parameters(a): Parameters<p::ReadFile>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let r = match self.ws(&ctx, &a.workspace_id) {
            Ok(e) => files::read_file(&e.workspace, a).await,
            Err(e) => Err(e),
        };
        done(r)
    }

    #[tool(
        description = "Write a whole file in a Workspace (path relative to its root), creating it and missing parent directories, replacing any content. For small changes to an existing file prefer edit_file."
    )]
    async fn write_file(
        &self,
        Parameters(a): Parameters<p::WriteFile>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let r = match self.ws(&ctx, &a.workspace_id) {
            Ok(e) => files::write_file(&e.workspace, a).await,
            Err(e) => Err(e),
        };
        done(r)
    }

    #[tool(
        description = "Edit a file by exact string replacement: old_string must occur exactly once (whitespace included) and is replaced by new_string; with replace_all every occurrence is. An absent or non-unique old_string is an error and the file is left unchanged."
    )]
    async fn edit_file(
        &self,
        Parameters(a): Parameters<p::EditFile>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let r = match self.ws(&ctx, &a.workspace_id) {
            Ok(e) => files::edit_file(&e.workspace, a).await,
            Err(e) => Err(e),
        };
        done(r)
    }

    #[tool(
        description = "List a directory of a Workspace (default its root), one entry per line, directories with a trailing /; recursive=true lists the whole subtree."
    )]
    async fn list_files(
        &self,
        Parameters(a): Parameters<p::ListFiles>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let r = match self.ws(&ctx, &a.workspace_id) {
            Ok(e) => files::list_files(&e.workspace, a).await,
            Err(e) => Err(e),
        };
        done(r)
    }

    #[tool(
        description = "Find files of a Workspace whose path matches a glob, e.g. **/*.rs or src/*.py (* and ? stay within a directory, **/ spans directories). Paths are relative to `path` (default the root), sorted."
    )]
    async fn glob(
        &self,
        Parameters(a): Parameters<p::Glob>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let r = match self.ws(&ctx, &a.workspace_id) {
            Ok(e) => files::glob(&e.workspace, a).await,
            Err(e) => Err(e),
        };
        done(r)
    }

    #[tool(
        description = "Search file contents of a Workspace with an extended regular expression (grep -rnE; binary files skipped). Returns PATH:LINE:TEXT lines; `include` limits to file names matching a glob such as *.rs."
    )]
    async fn grep(
        &self,
        Parameters(a): Parameters<p::Grep>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let r = match self.ws(&ctx, &a.workspace_id) {
            Ok(e) => files::grep(&e.workspace, a).await,
            Err(e) => Err(e),
        };
        done(r)
    }

    #[tool(
        description = "The uncommitted changes of a Workspace: each changed path with added, modified, deleted or type_changed, relative to the commit it is based on."
    )]
    async fn status(
        &self,
        Parameters(a): Parameters<p::WorkspaceOnly>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let r = async {
            let e = self.ws(&ctx, &a.workspace_id)?;
            let changes = e.workspace.status().await?;
            let list: Vec<_> = changes
                .iter()
                .map(|c| json!({ "path": String::from_utf8_lossy(&c.path), "kind": c.kind }))
                .collect();
            let text = if changes.is_empty() {
                "no uncommitted changes".to_string()
            } else {
                changes
                    .iter()
                    .map(|c| format!("{}\t{}", c.kind, String::from_utf8_lossy(&c.path)))
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            Ok(ok_json(text, json!({ "changes": list })))
        }
        .await;
        done(r)
    }

    #[tool(
        description = "Commit a Workspace's changes to its branch with a message; the Workspace continues from the new commit. Returns the commit id (or up_to_date when nothing changed). Fails, changing nothing, if another writer moved the branch meanwhile."
    )]
    async fn commit(
        &self,
        Parameters(a): Parameters<p::Commit>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let r = async {
            let e = self.ws(&ctx, &a.workspace_id)?;
            if a.message.trim().is_empty() {
                return Err(ToolError::new(
                    "the commit message is empty: say what changed and why",
                ));
            }
            let out = e.workspace.commit(&a.message).await?;
            let (word, text) = if out.committed() {
                (
                    "committed",
                    format!("committed {} on {}", out.commit(), e.workspace.branch()),
                )
            } else {
                (
                    "up_to_date",
                    format!(
                        "nothing to commit; {} is at {}",
                        e.workspace.branch(),
                        out.commit()
                    ),
                )
            };
            Ok(ok_json(
                text,
                json!({ "outcome": word, "commit": out.commit(), "branch": e.workspace.branch() }),
            ))
        }
        .await;
        done(r)
    }

    #[tool(
        description = "Paths that differ between two REFs (PROJECT/BRANCH or commit id), each added, modified, deleted or type_changed, e.g. from=web/main to=web/agent-1. For uncommitted changes use status."
    )]
    async fn diff(
        &self,
        Parameters(a): Parameters<p::Diff>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let r = async {
            let c = caller(&self.shared, &ctx)?;
            self.shared.backend.check_ref(&c, &a.from).await?;
            self.shared.backend.check_ref(&c, &a.to).await?;
            let changes = self.shared.backend.diff(&a.from, &a.to).await?;
            let list: Vec<_> = changes
                .iter()
                .map(|(p, k)| json!({ "path": String::from_utf8_lossy(p), "kind": k }))
                .collect();
            let text = if changes.is_empty() {
                format!("no differences between {} and {}", a.from, a.to)
            } else {
                changes
                    .iter()
                    .map(|(p, k)| format!("{k}\t{}", String::from_utf8_lossy(p)))
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            Ok(ok_json(text, json!({ "changes": list })))
        }
        .await;
        done(r)
    }

    #[tool(
        description = "History of a REF (PROJECT/BRANCH or commit id), newest first: commit ids and messages (default 20)."
    )]
    async fn log(
        &self,
        Parameters(a): Parameters<p::Log>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let r = async {
            self.shared
                .backend
                .check_ref(&caller(&self.shared, &ctx)?, &a.reference)
                .await?;
            let commits = self
                .shared
                .backend
                .log(&a.reference, a.limit.unwrap_or(20).max(1))
                .await?;
            let text = commits
                .iter()
                .map(|(id, m)| format!("{id} {m}"))
                .collect::<Vec<_>>()
                .join("\n");
            let list: Vec<_> = commits
                .iter()
                .map(|(id, m)| json!({ "commit": id, "message": m }))
                .collect();
            Ok(ok_json(text, json!({ "commits": list })))
        }
        .await;
        done(r)
    }

    #[tool(
        description = "Create branch `new` (PROJECT/BRANCH) at `from` (a branch or commit id), instantly and without copying: e.g. from=web/main new=web/agent-1, then mount the new branch to work on it."
    )]
    async fn fork(
        &self,
        Parameters(a): Parameters<p::Fork>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let r = async {
            let c = caller(&self.shared, &ctx)?;
            self.shared.backend.check_ref(&c, &a.from).await?;
            self.shared.backend.check_branch(&c, &a.new)?;
            let at = self.shared.backend.fork(&a.from, &a.new).await?;
            Ok(ok_json(
                format!("created {} at {at}", a.new),
                json!({ "branch": a.new, "commit": at }),
            ))
        }
        .await;
        done(r)
    }

    #[tool(
        description = "Restore a Workspace. Without ref: discard all uncommitted changes (back to the branch head). With ref (a commit id from log, or a branch): the Workspace's files become that commit's, as uncommitted changes on top of the head, so commit records the restore as a new commit and no history is lost. The workspace_id stays valid."
    )]
    async fn restore(
        &self,
        Parameters(a): Parameters<p::Restore>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let r = match (caller(&self.shared, &ctx), self.ws(&ctx, &a.workspace_id)) {
            (Ok(c), Ok(e)) => self.restore_inner(&c, e, a).await,
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        done(r)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for StrataMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("strata", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }
}

/// Close the Sandboxes a server created, at its end. One whose Workspaces
/// hold uncommitted changes is left running (closing would delete them)
/// and named on stderr with how to reach it.
pub(crate) async fn close_all(shared: &Shared) {
    for (id, slot) in shared.registry.drain_sandboxes() {
        let Some(sb) = slot.lock().await.take() else {
            continue;
        };
        if let Err(e) = sb.close_check().await {
            eprintln!(
                "strata mcp: left sandbox {id} running: {e}. Commit with `strata ws commit`, or drop it with `strata sandbox rm --discard {id}`"
            );
            continue;
        }
        if let Err(e) = sb.close().await {
            eprintln!("strata mcp: could not close sandbox {id}: {e}");
        }
    }
}

/// Serve one client on stdin/stdout until stdin closes (or SIGTERM/SIGINT),
/// then close the Sandboxes it created (see [`close_all`]).
pub async fn serve_stdio(backend: Backend) -> Result<(), ServeError> {
    let server = StrataMcp::new(backend);
    let shared = server.shared.clone();
    let err = |e: &dyn std::fmt::Display| ServeError::Transport {
        transport: "stdio",
        message: e.to_string(),
    };
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| err(&e))?;
    let ct = running.cancellation_token();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| err(&e))?;
    let stop = tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        ct.cancel();
    });
    let r = running.waiting().await;
    stop.abort();
    close_all(&shared).await;
    r.map(|_| ()).map_err(|e| err(&e))
}
