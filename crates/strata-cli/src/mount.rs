//! `strata mount` and `strata ws ...`: Workspaces mounted on the host
//! (served by the strata daemon, the same program a Sandbox runs, reached
//! over its 0600 Unix socket; all of it in `strata_sdk::host`) and
//! Workspaces mounted in Sandboxes (`strata ws mount SANDBOX REF`, over
//! `strata_sdk::Sandbox`). `ws status|commit|unmount WS` look for a host
//! mount first, then ask the running Sandboxes (IDs are unique).

use crate::commands::Ctx;
use crate::sandbox::state_dir;
use anyhow::{anyhow, Result};
use clap::{Args, Subcommand};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use strata_sdk::host::{self, HostDirs, HostMountOptions};
use strata_sdk::{CommitOutcome, Sandbox, SandboxFilter, Workspace as SdkWorkspace};

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

fn runtime() -> Result<tokio::runtime::Runtime> {
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
    let (m, child) = runtime()?.block_on(host::mount(
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

/// Where a Workspace ID lives: a host mount, or a Sandbox.
enum Found {
    Host(host::HostMount),
    Sandbox(Box<(Sandbox, SdkWorkspace)>),
}

async fn find(dirs: &HostDirs, id: &str) -> Result<Found> {
    match host::find(dirs, id) {
        Ok(m) => Ok(Found::Host(m)),
        Err(strata_sdk::Error::NotFound { .. }) => {
            match Sandbox::find_workspace(id, state_dir()).await {
                Ok(x) => Ok(Found::Sandbox(Box::new(x))),
                Err(strata_sdk::Error::NotFound { .. }) => Err(anyhow!(
                    "no Workspace {id} is mounted on this host or in a running Sandbox; list them with `strata ws list`"
                )),
                Err(e) => Err(e.into()),
            }
        }
        Err(e) => Err(e.into()),
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
    let sb = crate::sandbox::open(&a.sandbox).await?;
    let ws = sb.mount(&a.reference, Some(&a.at)).await?;
    let (id, path) = (ws.id().to_string(), ws.path().to_string());
    ctx.emit(
        json!({"workspace": id, "path": path, "sandbox": sb.id(), "branch": ws.branch(), "base": ws.base()}),
        || id.clone(),
    )
}

pub fn ws(ctx: &Ctx, cmd: WsCmd) -> Result<ExitCode> {
    let dirs = HostDirs::for_user();
    let rt = crate::sandbox::runtime()?;
    rt.block_on(ws_async(ctx, &dirs, cmd))?;
    Ok(ExitCode::SUCCESS)
}

async fn ws_async(ctx: &Ctx, dirs: &HostDirs, cmd: WsCmd) -> Result<()> {
    match cmd {
        WsCmd::Mount(a) => ws_mount(ctx, a).await,
        WsCmd::List => {
            // Probing a daemon connects to its socket: do it once per mount.
            let mut rows: Vec<serde_json::Value> = host::list(dirs)?
                .into_iter()
                .map(|m| {
                    let alive = m.alive();
                    json!({"workspace": m.workspace, "sandbox": null, "mountpoint": m.mountpoint,
                           "branch": m.branch, "alive": alive, "pid": m.pid})
                })
                .collect();
            // Sandboxes the caller cannot see (e.g. root's, for a user)
            // are not an error for a listing.
            let list = Sandbox::list(SandboxFilter {
                state_dir: state_dir(),
                ..Default::default()
            })
            .await
            .unwrap_or_default();
            for info in list {
                let Ok(sb) = Sandbox::open_in(info.id.as_str(), state_dir()).await else {
                    continue;
                };
                // A hung daemon must not hang the listing.
                let wss = tokio::time::timeout(Duration::from_secs(2), sb.workspaces()).await;
                for w in wss.ok().and_then(|r| r.ok()).unwrap_or_default() {
                    rows.push(
                        json!({"workspace": w.id(), "sandbox": sb.id(), "mountpoint": w.path(),
                                     "branch": w.branch(), "alive": true, "pid": null}),
                    );
                }
            }
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
            let (base, sandbox, changes): (String, Option<String>, Vec<(String, String)>) =
                match find(dirs, &workspace).await? {
                    Found::Host(m) => {
                        let st = host::status(dirs, &m).await?;
                        let c = st.changes.into_iter().map(|c| (c.path, c.kind)).collect();
                        (st.base, None, c)
                    }
                    Found::Sandbox(x) => {
                        let (sb, ws) = *x;
                        let c = ws.status().await?;
                        let c = c
                            .into_iter()
                            .map(|c| (String::from_utf8_lossy(&c.path).into_owned(), c.kind))
                            .collect();
                        (ws.base().to_string(), Some(sb.id().to_string()), c)
                    }
                };
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
            let (branch, commit, committed) = match find(dirs, &workspace).await? {
                Found::Host(m) if offline => {
                    let store = ctx.store_path()?.to_path_buf();
                    let out = host::commit_offline(&store, dirs, &m, &message, ctx.allow_any_fs)
                        .map_err(|e| conflict(e, &workspace, &m.branch, None))?;
                    match out {
                        strata_workspace::CommitOutcome::Committed(c) => {
                            (m.branch, Some(c.to_hex()), true)
                        }
                        strata_workspace::CommitOutcome::UpToDate => (m.branch, None, false),
                    }
                }
                Found::Host(m) => {
                    let r = host::commit(dirs, &m, &message)
                        .await
                        .map_err(|e| conflict(e, &workspace, &m.branch, None))?;
                    (m.branch, Some(r.commit), r.outcome == "committed")
                }
                Found::Sandbox(_) if offline => {
                    return Err(anyhow!(
                        "--offline is for host Workspaces whose serving process died; workspace {workspace} is served by a running Sandbox: commit it without --offline"
                    ))
                }
                Found::Sandbox(x) => {
                    let (sb, ws) = *x;
                    let out = ws
                        .commit(&message)
                        .await
                        .map_err(|e| conflict(e, &workspace, ws.branch(), Some(sb.id())))?;
                    let committed = matches!(out, CommitOutcome::Committed(_));
                    (ws.branch().to_string(), Some(out.commit().to_string()), committed)
                }
            };
            ctx.emit(
                json!({"workspace": workspace, "branch": branch, "commit": commit, "committed": committed}),
                || match (&commit, committed) {
                    (Some(c), true) => format!("committed {c} on {branch}"),
                    _ => format!("up to date: nothing to commit on {branch}"),
                },
            )
        }
        WsCmd::Unmount { workspace, discard } => {
            match find(dirs, &workspace).await? {
                Found::Host(m) => {
                    let store = ctx.store_path()?.to_path_buf();
                    host::unmount(&store, dirs, &m, discard, ctx.allow_any_fs).await?;
                }
                Found::Sandbox(x) => {
                    let (_sb, ws) = *x;
                    ws.unmount(discard).await?;
                }
            }
            ctx.emit(
                json!({"workspace": workspace, "unmounted": true, "discarded": discard}),
                || format!("unmounted {workspace}"),
            )
        }
    }
}
