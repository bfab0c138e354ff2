//! The commands that manage a Store: init, projects, branches, snapshot,
//! log, diff and maintenance. Each is a thin call into the library and a
//! rendering of its result. Those that work through a server (`--remote`,
//! docs/server.md) go through `strata_sdk::Client`, the same code path
//! locally and remotely (snapshot, `project create --from` and export
//! carry a directory as a tar archive, remote_tar.rs); the others refuse
//! `--remote` (exit 2).

use crate::cli::{BranchCmd, Cli, Command, InitArgs, ProjectCmd};
use crate::ctx::{default_store_path, sdk, Ctx, RemoteOpts};
use crate::output::{commit_json, commit_text, human_bytes, lossy, warn};
use crate::progress::Bar;
use crate::sandbox::SandboxCmd;
use anyhow::Result;
use serde_json::json;
use std::path::Path;
use std::process::ExitCode;
use strata_store::{BranchRef, SnapshotReport, Store, StoreError, StoreOptions};

/// Why a command cannot run through a server, or `None` if it can.
fn local_only(cmd: &Command) -> Option<&'static str> {
    Some(match cmd {
        Command::Project(ProjectCmd::Create { .. })
        | Command::Project(ProjectCmd::List)
        | Command::Snapshot { .. }
        | Command::Export { .. }
        | Command::Ws(_)
        | Command::Exec(_)
        | Command::ExecLogs(_)
        | Command::ExecWait(_)
        | Command::ExecCancel(_)
        | Command::Branch(_)
        | Command::Log { .. }
        | Command::Diff { .. }
        | Command::Ls { .. }
        | Command::Cat { .. }
        | Command::Mcp(_)
        | Command::Sandbox(
            SandboxCmd::Create(_)
            | SandboxCmd::List { .. }
            | SandboxCmd::Inspect { .. }
            | SandboxCmd::Logs { .. }
            | SandboxCmd::Restart { .. }
            | SandboxCmd::Rm { .. }
            | SandboxCmd::Mount(_),
        ) => return None,
        Command::Init(_) | Command::Stats | Command::Fsck | Command::Gc => {
            "the server has no route for Store maintenance; run it on the server's host"
        }
        Command::Demo => "the demo makes its own temporary Store",
        Command::Run(_) => "`strata run` runs a command on this host",
        Command::Mount(_) => "`strata mount` mounts on this host",
        Command::Serve(_) | Command::Token(_) => "it manages the server itself, on its host",
        Command::Probe(_) => "it probes this host",
        Command::Vm(_) => "it boots and stops VMs on this host",
        Command::Completions { .. } => "it prints a script and needs no Store",
    })
}

fn command_name(cmd: &Command) -> String {
    let dbg = format!("{cmd:?}");
    let head: String = dbg.chars().take_while(|c| c.is_alphanumeric()).collect();
    head.to_lowercase()
}

/// Run one parsed command line; the exit code is for outcomes that are not
/// errors but still failures (fsck finding problems, a failed demo check).
pub fn run(cli: Cli) -> Result<ExitCode> {
    let ctx = Ctx {
        json: cli.json,
        store_path: cli.store.or_else(default_store_path),
        allow_any_fs: cli.allow_any_fs,
        remote: cli.remote.map(|url| RemoteOpts {
            url,
            token_file: cli.token_file,
            fingerprint: cli.remote_fingerprint,
        }),
    };
    if ctx.remote.is_some() {
        if let Some(why) = local_only(&cli.command) {
            return Err(crate::args::Usage {
                kind: clap::error::ErrorKind::ArgumentConflict,
                msg: format!(
                    "`strata {}` cannot run through a server (--remote, STRATA_REMOTE): {why}",
                    command_name(&cli.command)
                ),
            }
            .into());
        }
    }
    match cli.command {
        Command::Init(a) => init(&ctx, &a)?,
        Command::Project(ProjectCmd::Create {
            name,
            from,
            message,
        }) => project_create(&ctx, &name, from.as_deref(), message)?,
        Command::Project(ProjectCmd::List) => project_list(&ctx)?,
        Command::Branch(BranchCmd::Create { branch, from }) => {
            branch_create(&ctx, &branch, from.as_deref())?
        }
        Command::Branch(BranchCmd::List { project }) => branch_list(&ctx, project.as_deref())?,
        Command::Branch(BranchCmd::Delete { branch }) => branch_delete(&ctx, &branch)?,
        Command::Snapshot {
            branch,
            dir,
            message,
        } => snapshot(&ctx, &branch, &dir, message)?,
        Command::Log {
            reference,
            max_count,
        } => log(&ctx, &reference, max_count)?,
        Command::Diff { from, to } => diff(&ctx, &from, &to)?,
        Command::Ls { reference, path } => crate::read::ls(&ctx, &reference, path.as_deref())?,
        Command::Cat { reference, path } => crate::read::cat(&ctx, &reference, &path)?,
        Command::Export {
            reference,
            dir,
            force,
            preserve_privileges,
        } => {
            let opts = strata_store::ExportOptions {
                force,
                preserve_privileges,
            };
            crate::read::export(&ctx, &reference, &dir, &opts)?
        }
        Command::Stats => stats(&ctx)?,
        Command::Fsck => return fsck(&ctx),
        Command::Gc => gc(&ctx)?,
        Command::Demo => return crate::demo::run(&ctx),
        Command::Run(a) => return crate::run::run(&ctx, a),
        Command::Mount(a) => return crate::mount::mount(&ctx, a),
        Command::Ws(c) => return crate::mount::ws(&ctx, c),
        Command::Sandbox(c) => return crate::sandbox::sandbox(&ctx, c),
        Command::Exec(a) => return crate::exec::exec(&ctx, a),
        Command::ExecLogs(a) => return crate::exec::sub(&ctx, crate::exec::ExecSub::Logs(a)),
        Command::ExecWait(a) => return crate::exec::sub(&ctx, crate::exec::ExecSub::Wait(a)),
        Command::ExecCancel(a) => return crate::exec::sub(&ctx, crate::exec::ExecSub::Cancel(a)),
        Command::Probe(a) => return crate::probe::probe(&ctx, a),
        Command::Serve(a) => return crate::serve::serve(&ctx, a),
        Command::Token(c) => return crate::serve::token(&ctx, c),
        Command::Mcp(a) => return crate::mcp::mcp(&ctx, a),
        Command::Vm(c) => return crate::vm::run(&ctx, c),
        Command::Completions { shell } => return crate::cli::completions(shell),
    }
    Ok(ExitCode::SUCCESS)
}

fn init(ctx: &Ctx, a: &InitArgs) -> Result<()> {
    let path = ctx.store_path()?;
    let opts = StoreOptions {
        durable: a.durable,
        no_deltas: a.no_deltas,
        allow_any_fs: ctx.allow_any_fs,
    };
    // An existing Store is reported, not recreated; anything else that is
    // not a Store is refused by `Store::create` with its own message.
    let (store, created) = match Store::open(path, &opts) {
        Ok(s) => (s, false),
        Err(StoreError::NoStore { .. }) => (Store::create(path, &opts)?, true),
        Err(e) => return Err(e.into()),
    };
    let shown = store.dir().display().to_string();
    ctx.emit(
        json!({
            "store": shown,
            "created": created,
            "deltas": store.deltas(),
        }),
        || {
            if created {
                format!("Created a Store at {shown}")
            } else {
                format!("A Store already exists at {shown}; its options are unchanged")
            }
        },
    )
}

fn snapshot_json(r: &SnapshotReport, branch: &str) -> serde_json::Value {
    json!({
        "commit": r.commit.map(|c| c.to_hex()),
        "unchanged": r.unchanged,
        "branch": branch,
        "files": r.files,
        "dirs": r.dirs,
        "symlinks": r.symlinks,
        "bytes": r.bytes,
        "new_objects": r.new_objects,
        "new_bytes": r.new_bytes,
        "warnings": r.warnings,
    })
}

fn snapshot_text(r: &SnapshotReport, branch: &str) -> String {
    if r.unchanged {
        return format!(
            "nothing changed: {branch} stays at {}",
            r.commit.map(|c| c.to_hex()).unwrap_or_default()
        );
    }
    format!(
        "{branch} is now at {}\n{} files, {} directories, {} symlinks, {}; {} new objects, {} stored",
        r.commit.map(|c| c.to_hex()).unwrap_or_default(),
        r.files,
        r.dirs,
        r.symlinks,
        human_bytes(r.bytes),
        r.new_objects,
        human_bytes(r.new_bytes),
    )
}

/// [`snapshot_json`] of a snapshot through a server: the archive's
/// counts; the server makes a commit whatever changed and does not report
/// the Store's new objects (null).
fn packed_json(p: &crate::remote_tar::Packed, branch: &str, commit: &str) -> serde_json::Value {
    for w in &p.warnings {
        warn(w);
    }
    json!({
        "commit": commit,
        "unchanged": false,
        "branch": branch,
        "files": p.files,
        "dirs": p.dirs,
        "symlinks": p.symlinks,
        "bytes": p.bytes,
        "new_objects": null,
        "new_bytes": null,
        "warnings": p.warnings,
    })
}

/// [`snapshot_text`] of a snapshot through a server.
fn packed_text(p: &crate::remote_tar::Packed, branch: &str, commit: &str) -> String {
    format!(
        "{branch} is now at {commit}\n{} files, {} directories, {} symlinks, {}; sent through the server",
        p.files,
        p.dirs,
        p.symlinks,
        human_bytes(p.bytes),
    )
}

fn project_create(
    ctx: &Ctx,
    name: &str,
    from: Option<&Path>,
    message: Option<String>,
) -> Result<()> {
    strata_store::validate_name("project", name)?;
    let branch = format!("{name}/main");
    match from {
        Some(dir) if ctx.remote.is_some() => {
            let msg = message.unwrap_or_else(|| format!("import {}", dir.display()));
            let mut packed = crate::remote_tar::pack(dir)?;
            let tar = std::mem::take(&mut packed.tar);
            let b = branch.clone();
            // Two commits through a server: the project's first (empty)
            // one, then the archive on top of it.
            let commit = sdk(ctx, |c| async move {
                let first = c
                    .create_project(name, &format!("create project {name}"))
                    .await?;
                c.import_tar(&b, &first, &msg, tar).await
            })?;
            let mut v = packed_json(&packed, &branch, &commit);
            v["project"] = json!(name);
            ctx.emit(v, || {
                format!(
                    "Created project {name}\n{}",
                    packed_text(&packed, &branch, &commit)
                )
            })
        }
        Some(dir) => {
            let store = ctx.open()?;
            let msg = message.unwrap_or_else(|| format!("import {}", dir.display()));
            let bar = Bar::stderr();
            let r = store.create_project_from(name, dir, &msg, &bar)?;
            drop(bar);
            for w in &r.warnings {
                warn(w);
            }
            let mut v = snapshot_json(&r, &branch);
            v["project"] = json!(name);
            ctx.emit(v, || {
                format!("Created project {name}\n{}", snapshot_text(&r, &branch))
            })
        }
        None => {
            let msg = message.unwrap_or_else(|| format!("create project {name}"));
            let id = sdk(ctx, |c| async move { c.create_project(name, &msg).await })?;
            ctx.emit(
                json!({"commit": id, "project": name, "branch": branch}),
                || format!("Created project {name}; {branch} is at {id}"),
            )
        }
    }
}

fn project_list(ctx: &Ctx) -> Result<()> {
    let (projects, branches) = sdk(ctx, |c| async move {
        Ok((c.projects().await?, c.branches(None).await?))
    })?;
    let rows: Vec<(String, Vec<String>)> = projects
        .into_iter()
        .map(|p| {
            let bs = branches
                .iter()
                .filter(|b| b.project == p)
                .map(|b| b.name.clone())
                .collect();
            (p, bs)
        })
        .collect();
    ctx.emit(
        json!(rows
            .iter()
            .map(|(p, bs)| json!({"name": p, "branches": bs}))
            .collect::<Vec<_>>()),
        || {
            rows.iter()
                .map(|(p, bs)| format!("{p}\t{}\n", bs.join(" ")))
                .collect()
        },
    )
}

fn branch_create(ctx: &Ctx, branch: &str, from: Option<&str>) -> Result<()> {
    let b = BranchRef::parse(branch)?;
    let from = from
        .map(str::to_string)
        .unwrap_or_else(|| format!("{}/main", b.project));
    let at = sdk(ctx, |c| {
        let from = from.clone();
        async move { c.fork(&from, branch).await }
    })?;
    ctx.emit(
        json!({"branch": b.to_string(), "commit": at, "from": from}),
        || format!("Created branch {b} at {at} (from {from})"),
    )
}

fn branch_list(ctx: &Ctx, project: Option<&str>) -> Result<()> {
    if let Some(p) = project {
        strata_store::validate_name("project", p)?;
    }
    let list = sdk(ctx, |c| async move { c.branches(project).await })?;
    ctx.emit(
        json!(list
            .iter()
            .map(|b| json!({
                "branch": format!("{}/{}", b.project, b.name),
                "project": b.project,
                "name": b.name,
                "head": b.head,
            }))
            .collect::<Vec<_>>()),
        || {
            list.iter()
                .map(|b| format!("{}/{}\t{}\n", b.project, b.name, b.head))
                .collect()
        },
    )
}

fn branch_delete(ctx: &Ctx, branch: &str) -> Result<()> {
    let b = BranchRef::parse(branch)?;
    let head = sdk(ctx, |c| async move { c.delete_branch(branch).await })?;
    ctx.emit(json!({"deleted": b.to_string(), "head": head}), || {
        format!("Deleted branch {b} (was at {head}; its commits stay until `strata gc`)")
    })
}

fn snapshot(ctx: &Ctx, branch: &str, dir: &Path, message: Option<String>) -> Result<()> {
    let b = BranchRef::parse(branch)?;
    if ctx.remote.is_some() {
        let msg = message.unwrap_or_else(|| format!("snapshot of {}", dir.display()));
        let mut packed = crate::remote_tar::pack(dir)?;
        let tar = std::mem::take(&mut packed.tar);
        let commit = sdk(ctx, |c| async move {
            let head = c.head(branch).await?;
            c.import_tar(branch, &head, &msg, tar).await
        })?;
        return ctx.emit(packed_json(&packed, branch, &commit), || {
            packed_text(&packed, branch, &commit)
        });
    }
    let store = ctx.open()?;
    let msg = message.unwrap_or_else(|| format!("snapshot of {}", dir.display()));
    let bar = Bar::stderr();
    let r = store.snapshot(&b, dir, &msg, &bar)?;
    drop(bar);
    for w in &r.warnings {
        warn(w);
    }
    ctx.emit(snapshot_json(&r, branch), || snapshot_text(&r, branch))
}

fn log(ctx: &Ctx, reference: &str, max: Option<usize>) -> Result<()> {
    let commits = sdk(ctx, |c| async move { c.log(reference, max).await })?;
    ctx.emit(
        json!(commits.iter().map(commit_json).collect::<Vec<_>>()),
        || {
            commits
                .iter()
                .map(commit_text)
                .collect::<Vec<_>>()
                .join("\n")
        },
    )
}

fn diff(ctx: &Ctx, from: &str, to: &str) -> Result<()> {
    let d = sdk(ctx, |c| async move { c.diff(from, to).await })?;
    let items: Vec<serde_json::Value> = d
        .changes
        .iter()
        .map(|c| {
            let mut m = serde_json::Map::new();
            crate::output::put_bytes(&mut m, "path", &c.path);
            m.insert("change".into(), json!(c.kind));
            serde_json::Value::Object(m)
        })
        .collect();
    ctx.emit(
        json!({"from": d.from, "to": d.to, "changes": items}),
        || {
            d.changes
                .iter()
                .map(|c| {
                    let tag = match c.kind.as_str() {
                        "added" => "A",
                        "modified" => "M",
                        "deleted" => "D",
                        _ => "T",
                    };
                    let tag = crate::output::paint_change(tag);
                    format!("{tag}\t{}\n", lossy(&c.path))
                })
                .collect()
        },
    )
}

fn stats(ctx: &Ctx) -> Result<()> {
    let store = ctx.open()?;
    let s = store.stats()?;
    ctx.emit(serde_json::to_value(&s)?, || {
        format!(
            "objects        {} ({} stored as deltas)\n\
             stored bytes   {}\n\
             logical bytes  {}\n\
             database files {}\n\
             projects {}, branches {}, commits {}\n\
             dedup ratio    {:.2} ({} referenced by all commits)",
            s.objects,
            s.delta_objects,
            human_bytes(s.stored_bytes),
            human_bytes(s.logical_bytes),
            human_bytes(s.db_bytes),
            s.projects,
            s.branches,
            s.commits,
            s.dedup_ratio,
            human_bytes(s.referenced_bytes),
        )
    })
}

fn fsck(ctx: &Ctx) -> Result<ExitCode> {
    let store = ctx.open()?;
    let bar = Bar::stderr();
    let r = store.fsck(&bar)?;
    drop(bar);
    // On stderr in both modes: a warning is not the result.
    for w in &r.warnings {
        eprintln!("strata: warning: {w}");
    }
    ctx.emit(serde_json::to_value(&r)?, || {
        let mut s = String::new();
        for p in &r.problems {
            s.push_str(&format!("problem: {p}\n"));
        }
        if r.ok {
            s.push_str(&format!(
                "ok: {} objects re-hashed, {} reachable, no problems",
                r.objects_checked, r.reachable
            ));
        } else {
            s.push_str(&format!(
                "{} problems found in {} objects",
                r.problems.len(),
                r.objects_checked
            ));
        }
        s
    })?;
    if !r.ok && !ctx.json {
        eprintln!(
            "strata: fsck found problems in the Store at {}",
            store.dir().display()
        );
    }
    Ok(if r.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn gc(ctx: &Ctx) -> Result<()> {
    let store = ctx.open()?;
    let bar = Bar::stderr();
    let r = store.gc(&bar)?;
    drop(bar);
    ctx.emit(serde_json::to_value(&r)?, || {
        format!(
            "deleted {} unreachable objects ({}); {} reachable objects kept",
            r.deleted_objects,
            human_bytes(r.deleted_bytes),
            r.reachable
        )
    })
}
