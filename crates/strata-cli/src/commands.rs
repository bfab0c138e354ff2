//! The commands that manage a Store: init, projects, branches, snapshot,
//! log, diff and maintenance. Each is a thin call into `strata_store` and
//! a rendering of its result.

use crate::cli::{BranchCmd, Cli, Command, InitArgs, ProjectCmd};
use crate::ctx::{default_store_path, Ctx};
use crate::output::{commit_json, commit_text, human_bytes, lossy, warn};
use crate::progress::Bar;
use anyhow::Result;
use serde_json::json;
use std::path::Path;
use std::process::ExitCode;
use strata_store::{BranchRef, SnapshotReport, Store, StoreError, StoreOptions};

/// Run one parsed command line; the exit code is for outcomes that are not
/// errors but still failures (fsck finding problems, a failed demo check).
pub fn run(cli: Cli) -> Result<ExitCode> {
    let ctx = Ctx {
        json: cli.json,
        store_path: cli.store.or_else(default_store_path),
        allow_any_fs: cli.allow_any_fs,
    };
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

fn project_create(
    ctx: &Ctx,
    name: &str,
    from: Option<&Path>,
    message: Option<String>,
) -> Result<()> {
    strata_store::validate_name("project", name)?;
    let store = ctx.open()?;
    let branch = format!("{name}/main");
    match from {
        Some(dir) => {
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
            let id = store.create_project(name, &msg)?;
            ctx.emit(
                json!({"commit": id.to_hex(), "project": name, "branch": branch}),
                || format!("Created project {name}; {branch} is at {id}"),
            )
        }
    }
}

fn project_list(ctx: &Ctx) -> Result<()> {
    let store = ctx.open()?;
    let projects = store.list_projects()?;
    let branches = store.list_branches(None)?;
    let rows: Vec<(String, Vec<String>)> = projects
        .into_iter()
        .map(|p| {
            let bs = branches
                .iter()
                .filter(|(b, _)| b.project == p)
                .map(|(b, _)| b.branch.clone())
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
    let store = ctx.open()?;
    let from = from
        .map(str::to_string)
        .unwrap_or_else(|| format!("{}/main", b.project));
    let at = store.resolve(&from)?.commit;
    store.create_branch(&b, at)?;
    ctx.emit(
        json!({"branch": b.to_string(), "commit": at.to_hex(), "from": from}),
        || format!("Created branch {b} at {at} (from {from})"),
    )
}

fn branch_list(ctx: &Ctx, project: Option<&str>) -> Result<()> {
    if let Some(p) = project {
        strata_store::validate_name("project", p)?;
    }
    let store = ctx.open()?;
    let list = store.list_branches(project)?;
    ctx.emit(
        json!(list
            .iter()
            .map(|(b, head)| json!({
                "branch": b.to_string(),
                "project": b.project,
                "name": b.branch,
                "head": head.to_hex(),
            }))
            .collect::<Vec<_>>()),
        || {
            list.iter()
                .map(|(b, head)| format!("{b}\t{head}\n"))
                .collect()
        },
    )
}

fn branch_delete(ctx: &Ctx, branch: &str) -> Result<()> {
    let b = BranchRef::parse(branch)?;
    let store = ctx.open()?;
    let head = store.branch_head(&b)?;
    store.delete_branch(&b)?;
    ctx.emit(
        json!({"deleted": b.to_string(), "head": head.to_hex()}),
        || format!("Deleted branch {b} (was at {head}; its commits stay until `strata gc`)"),
    )
}

fn snapshot(ctx: &Ctx, branch: &str, dir: &Path, message: Option<String>) -> Result<()> {
    let b = BranchRef::parse(branch)?;
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
    let store = ctx.open()?;
    let at = store.resolve(reference)?.commit;
    let commits = store.log(at, max.unwrap_or(usize::MAX))?;
    ctx.emit(
        json!(commits
            .iter()
            .map(|(id, c)| commit_json(*id, c))
            .collect::<Vec<_>>()),
        || {
            commits
                .iter()
                .map(|(id, c)| commit_text(*id, c))
                .collect::<Vec<_>>()
                .join("\n")
        },
    )
}

fn diff(ctx: &Ctx, from: &str, to: &str) -> Result<()> {
    let store = ctx.open()?;
    let a = store.resolve(from)?.commit;
    let b = store.resolve(to)?.commit;
    let changes = store.diff(a, b)?;
    let items: Vec<serde_json::Value> = changes
        .iter()
        .map(|c| {
            let mut m = serde_json::Map::new();
            crate::output::put_bytes(&mut m, "path", &c.path);
            m.insert("change".into(), json!(c.kind.as_str()));
            serde_json::Value::Object(m)
        })
        .collect();
    ctx.emit(
        json!({"from": a.to_hex(), "to": b.to_hex(), "changes": items}),
        || {
            changes
                .iter()
                .map(|c| {
                    let tag = match c.kind {
                        strata_store::ChangeKind::Added => "A",
                        strata_store::ChangeKind::Modified => "M",
                        strata_store::ChangeKind::Deleted => "D",
                        strata_store::ChangeKind::TypeChanged => "T",
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
