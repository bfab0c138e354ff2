//! `strata mount` and `strata ws ...`: Workspaces mounted on the host
//! (served by the strata daemon, the same program a Sandbox runs, reached
//! over its 0600 Unix socket; all of it in `strata_sdk::host`) and
//! Workspaces mounted in Sandboxes (`strata ws mount SANDBOX REF`, over
//! `strata_sdk::Sandbox`). `ws status|commit|unmount WS` look for a host
//! mount first, then ask the running Sandboxes (IDs are unique). With
//! `--remote` the same commands act on the server's Sandboxes: a Workspace
//! ID is looked up in the running Sandboxes the token sees.

use crate::ctx::{open, runtime, state_dir, Ctx};
use anyhow::{anyhow, Result};
use clap::{Args, Subcommand};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use strata_sdk::host::{self, HostDirs, HostMountOptions};
use strata_sdk::workspaces::{self, Found};

#[derive(Debug, Args)]
pub struct MountArgs {
    /// PROJECT/BRANCH to project.
    #[arg(value_name = "REF")]
    pub reference: String,
    /// An existing, empty directory outside the Store.
    pub mountpoint: PathBuf,
    /// Let other users use the mount (the daemon mounts with allow_other and
    /// the kernel's permission checks either way; without this flag the
    /// mount point is left 0700 to its owner).
    #[arg(long)]
    pub allow_other: bool,
    /// Serve in the foreground until interrupted, instead of in the background.
    #[arg(long)]
    pub foreground: bool,
}

#[derive(Debug, Args)]
pub struct WsMountArgs {
    /// The Sandbox ID.
    pub sandbox: String,
    /// PROJECT/BRANCH to project.
    #[arg(value_name = "REF")]
    pub reference: String,
    /// Mount path inside the Sandbox.
    #[arg(long, value_name = "PATH", default_value = strata_sdk::DEFAULT_MOUNT)]
    pub at: String,
}

#[derive(Debug, Subcommand)]
pub enum WsCmd {
    /// List the Workspaces mounted on this host by this user and in the
    /// running Sandboxes.
    #[command(after_help = "Example:\n  strata ws list --json")]
    List,
    /// Mount branch REF as a Workspace in a Sandbox; prints the Workspace ID.
    #[command(
        after_help = "Example:\n  WS=$(strata ws mount $SB web/agent-1)\n  strata exec $WS -- make test"
    )]
    Mount(WsMountArgs),
    /// Paths added, modified, deleted or changed in type since the base.
    #[command(after_help = "Example:\n  strata ws status $WS")]
    Status { workspace: String },
    /// Publish the changes as the next commit on the branch; the mount
    /// continues from the new head.
    #[command(after_help = "Example:\n  strata ws commit $WS -m \"fix the build\"")]
    Commit {
        workspace: String,
        #[arg(short, long)]
        message: String,
        /// Commit a host Workspace whose serving process died, from its
        /// scratch directory (no mount needed).
        #[arg(long)]
        offline: bool,
    },
    /// Unmount; refuses while there are uncommitted changes unless --discard.
    #[command(after_help = "Example:\n  strata ws unmount $WS --discard")]
    Unmount {
        workspace: String,
        /// Drop uncommitted changes.
        #[arg(long)]
        discard: bool,
    },
}

fn current_thread() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

pub fn mount(ctx: &Ctx, a: MountArgs) -> Result<ExitCode> {
    let dirs = HostDirs::for_user();
    let store = ctx.store_path()?.to_path_buf();
    let opts = HostMountOptions {
        allow_any_fs: ctx.allow_any_fs,
        foreground: a.foreground,
    };
    let (m, child) = current_thread()?.block_on(host::mount(
        &store,
        &a.reference,
        &a.mountpoint,
        &dirs,
        &opts,
    ))?;
    if !a.allow_other {
        // The mount's root is owned by the caller; other users are kept out
        // by its mode, as the kernel checks permissions (default_permissions).
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&m.mountpoint, std::fs::Permissions::from_mode(0o700));
    }
    ctx.emit(
        json!({"workspace": m.workspace, "mountpoint": m.mountpoint, "branch": m.branch}),
        || {
            format!(
                "mounted {} at {} as workspace {}",
                m.branch,
                m.mountpoint.display(),
                m.workspace
            )
        },
    )?;
    if let Some(mut child) = child {
        // Foreground: Ctrl-C reaches the daemon too (same process group);
        // it unmounts and keeps uncommitted work in the scratch directory.
        let st = child.wait()?;
        let _ = std::fs::remove_file(dirs.run.join("host").join(format!("{}.json", m.workspace)));
        if !st.success() {
            return Ok(ExitCode::from(1));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Workspace `id` on the host or in a running Sandbox, or the message
/// that neither has it.
async fn find(ctx: &Ctx, dirs: &HostDirs, id: &str) -> Result<Found> {
    if ctx.remote.is_some() {
        // Through a server there are no host mounts: the server's running
        // Sandboxes are asked (`Client::find_workspace`).
        let client = ctx.client().await?;
        return match client.find_workspace(id).await {
            Err(strata_sdk::Error::NotFound { .. }) => Err(anyhow!(
                "no Workspace {id} is mounted in a running Sandbox of the server {}; list them with `strata ws list`",
                client.describe()
            )),
            r => Ok(Found::Sandbox(Box::new(r?))),
        };
    }
    match workspaces::find(dirs, state_dir(), id).await {
        Err(strata_sdk::Error::NotFound { .. }) => Err(anyhow!(
            "no Workspace {id} is mounted on this host or in a running Sandbox; list them with `strata ws list`"
        )),
        r => Ok(r?),
    }
}

/// A lost commit race says what won and how to go on (the Workspace still
/// holds the work; it cannot be rebased onto the new head).
fn conflict(e: strata_sdk::Error, ws: &str, branch: &str, sandbox: Option<&str>) -> anyhow::Error {
    match e {
        strata_sdk::Error::Conflict { actual_head, .. } => {
            let remount = match sandbox {
                Some(sb) => format!("strata ws mount {sb} {branch}"),
                None => format!("strata mount {branch} MOUNTPOINT"),
            };
            anyhow!(
                "commit of workspace {ws} lost a race: {branch} is now at {actual_head} (another commit won); nothing was published. Your changes are still in the Workspace: copy out what you need, then continue from the new head with `strata ws unmount {ws} --discard` and `{remount}`"
            )
        }
        e => e.into(),
    }
}

pub async fn ws_mount(ctx: &Ctx, a: WsMountArgs) -> Result<()> {
    let sb = if ctx.remote.is_some() {
        ctx.client().await?.sandbox(&a.sandbox).await?
    } else {
        open(&a.sandbox).await?
    };
    let ws = sb.mount(&a.reference, Some(&a.at)).await?;
    let (id, path) = (ws.id().to_string(), ws.path().to_string());
    ctx.emit(
        json!({"workspace": id, "path": path, "sandbox": sb.id(), "branch": ws.branch(), "base": ws.base(), "transport": ws.transport()}),
        || id.clone(),
    )
}

pub fn ws(ctx: &Ctx, cmd: WsCmd) -> Result<ExitCode> {
    let dirs = HostDirs::for_user();
    let rt = runtime()?;
    rt.block_on(ws_async(ctx, &dirs, cmd))?;
    Ok(ExitCode::SUCCESS)
}

async fn ws_async(ctx: &Ctx, dirs: &HostDirs, cmd: WsCmd) -> Result<()> {
    match cmd {
        WsCmd::Mount(a) => ws_mount(ctx, a).await,
        WsCmd::List => {
            let listed = if ctx.remote.is_some() {
                // The server's Sandboxes' Workspaces (its host mounts are
                // its host's, not served through it).
                ctx.client()
                    .await?
                    .sandbox_workspaces()
                    .await?
                    .into_iter()
                    .map(|(sb, w)| workspaces::Listed {
                        workspace: w.id().to_string(),
                        sandbox: Some(sb),
                        mountpoint: PathBuf::from(w.path()),
                        branch: w.branch().to_string(),
                        alive: true,
                        pid: None,
                    })
                    .collect()
            } else {
                workspaces::list(dirs, state_dir()).await?
            };
            let rows: Vec<serde_json::Value> = listed
                .into_iter()
                .map(|w| {
                    json!({"workspace": w.workspace, "sandbox": w.sandbox, "mountpoint": w.mountpoint,
                           "branch": w.branch, "alive": w.alive, "pid": w.pid})
                })
                .collect();
            ctx.emit(json!(rows), || {
                rows.iter()
                    .map(|r| {
                        let s = |k: &str| r[k].as_str().unwrap_or("-").to_string();
                        format!(
                            "{}  {}  {}{}{}",
                            s("workspace"),
                            s("branch"),
                            s("mountpoint"),
                            match r["sandbox"].as_str() {
                                Some(sb) => format!("  (in {sb})"),
                                None => String::new(),
                            },
                            if r["alive"] == true {
                                ""
                            } else {
                                "  (serving process died)"
                            }
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            })
        }
        WsCmd::Status { workspace } => {
            let found = find(ctx, dirs, &workspace).await?;
            let st = found.status(dirs).await?;
            let changes: Vec<(String, String)> = st
                .changes
                .into_iter()
                .map(|c| (String::from_utf8_lossy(&c.path).into_owned(), c.kind))
                .collect();
            let (base, sandbox) = (st.base, found.sandbox_id().map(str::to_string));
            let v: Vec<_> = changes
                .iter()
                .map(|(p, k)| json!({"path": p, "kind": k}))
                .collect();
            ctx.emit(
                json!({"workspace": workspace, "sandbox": sandbox, "base": base, "changes": v}),
                || {
                    if changes.is_empty() {
                        "no changes".to_string()
                    } else {
                        changes
                            .iter()
                            .map(|(p, k)| format!("{} {p}", crate::output::paint_change(k)))
                            .collect::<Vec<_>>()
                            .join("\n")
                    }
                },
            )
        }
        WsCmd::Commit {
            workspace,
            message,
            offline,
        } => {
            let found = find(ctx, dirs, &workspace).await?;
            let branch = found.branch().to_string();
            let sandbox = found.sandbox_id().map(str::to_string);
            let out = if offline {
                let store = ctx.store_path()?.to_path_buf();
                found.commit_offline(&store, dirs, &message, ctx.allow_any_fs)
            } else {
                found.commit(dirs, &message).await
            }
            .map_err(|e| conflict(e, &workspace, &branch, sandbox.as_deref()))?;
            let committed = out.committed();
            // docs/cli.md: an offline commit with nothing to commit has no
            // commit id to show (null).
            let commit = (committed || !offline).then(|| out.commit().to_string());
            ctx.emit(
                json!({"workspace": workspace, "branch": branch, "commit": commit, "committed": committed}),
                || match (&commit, committed) {
                    (Some(c), true) => format!("committed {c} on {branch}"),
                    _ => format!("up to date: nothing to commit on {branch}"),
                },
            )
        }
        WsCmd::Unmount { workspace, discard } => {
            let found = find(ctx, dirs, &workspace).await?;
            // The Store path is needed only to clean up a dead host mount.
            let store = match &found {
                Found::Host(_) => ctx.store_path()?.to_path_buf(),
                Found::Sandbox(_) => Default::default(),
            };
            found
                .unmount(&store, dirs, discard, ctx.allow_any_fs)
                .await?;
            ctx.emit(
                json!({"workspace": workspace, "unmounted": true, "discarded": discard}),
                || format!("unmounted {workspace}"),
            )
        }
    }
}
