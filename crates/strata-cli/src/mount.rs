//! `strata mount` and `strata ws ...`: Workspaces mounted on the host. The
//! serving process is the strata daemon (the same program a Sandbox runs),
//! reached over its 0600 Unix socket; all of it is in `strata_sdk::host`.

use crate::commands::Ctx;
use anyhow::{anyhow, Result};
use clap::{Args, Subcommand};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use strata_sdk::host::{self, HostDirs, HostMountOptions};

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

#[derive(Debug, Subcommand)]
pub enum WsCmd {
    /// List the Workspaces mounted on this host by this user.
    List,
    /// Paths added, modified, deleted or changed in type since the base.
    Status { workspace: String },
    /// Publish the changes as the next commit on the branch; the mount
    /// continues from the new head.
    Commit {
        workspace: String,
        #[arg(short, long)]
        message: String,
        /// Commit a Workspace whose serving process died, from its scratch
        /// directory (no mount needed).
        #[arg(long)]
        offline: bool,
    },
    /// Unmount; refuses while there are uncommitted changes unless --discard.
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

pub fn ws(ctx: &Ctx, cmd: WsCmd) -> Result<ExitCode> {
    let dirs = HostDirs::for_user();
    let rt = runtime()?;
    match cmd {
        WsCmd::List => {
            // Probing a daemon connects to its socket: do it once per mount.
            let all: Vec<_> = host::list(&dirs)?
                .into_iter()
                .map(|m| {
                    let alive = m.alive();
                    (m, alive)
                })
                .collect();
            let v: Vec<_> = all
                .iter()
                .map(|(m, alive)| {
                    json!({"workspace": m.workspace, "mountpoint": m.mountpoint,
                           "branch": m.branch, "alive": alive, "pid": m.pid})
                })
                .collect();
            ctx.emit(json!(v), || {
                all.iter()
                    .map(|(m, alive)| {
                        format!(
                            "{}  {}  {}{}",
                            m.workspace,
                            m.branch,
                            m.mountpoint.display(),
                            if *alive {
                                ""
                            } else {
                                "  (serving process died)"
                            }
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            })?;
        }
        WsCmd::Status { workspace } => {
            let m = host::find(&dirs, &workspace)?;
            let st = rt.block_on(host::status(&dirs, &m))?;
            let v: Vec<_> = st
                .changes
                .iter()
                .map(|c| json!({"path": c.path, "kind": c.kind}))
                .collect();
            ctx.emit(
                json!({"workspace": workspace, "base": st.base, "changes": v}),
                || {
                    if st.changes.is_empty() {
                        "no changes".to_string()
                    } else {
                        st.changes
                            .iter()
                            .map(|c| format!("{:<12} {}", c.kind, c.path))
                            .collect::<Vec<_>>()
                            .join("\n")
                    }
                },
            )?;
        }
        WsCmd::Commit {
            workspace,
            message,
            offline,
        } => {
            let m = host::find(&dirs, &workspace)?;
            let store = ctx.store_path()?.to_path_buf();
            let (committed, id) = if offline {
                match host::commit_offline(&store, &dirs, &m, &message, ctx.allow_any_fs)? {
                    strata_workspace::CommitOutcome::Committed(c) => (true, c.to_hex()),
                    strata_workspace::CommitOutcome::UpToDate => (false, String::new()),
                }
            } else {
                let r = rt.block_on(host::commit(&dirs, &m, &message))?;
                (r.outcome == "committed", r.commit)
            };
            if committed {
                ctx.emit(json!({"commit": id}), || {
                    format!("committed {id} on {}", m.branch)
                })?;
            } else {
                ctx.emit(json!({"up_to_date": true}), || {
                    "up to date: nothing to commit".into()
                })?;
            }
        }
        WsCmd::Unmount { workspace, discard } => {
            let m = host::find(&dirs, &workspace)?;
            let store = ctx.store_path()?.to_path_buf();
            rt.block_on(host::unmount(&store, &dirs, &m, discard, ctx.allow_any_fs))
                .map_err(|e| anyhow!(e))?;
            ctx.emit(
                json!({"workspace": workspace, "unmounted": true, "discarded": discard}),
                || format!("unmounted {workspace}"),
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
