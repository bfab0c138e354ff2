//! `strata demo`: a self-checking tour in a fresh temporary directory: the
//! Store (import, fork, snapshot, diff, log, export, stats, fsck, gc) and,
//! with root and /dev/fuse, two Sandboxes working on two branches side by
//! side (`demo_sandbox.rs`); without them it says what is missing and runs
//! the Store part. Every step prints what it did and how long it took; the
//! exit status is 0 only if every check passed.

use crate::ctx::Ctx;
use crate::demo_steps::{Demo, Failed};
use crate::output::{human_bytes, lossy, print_json};
use anyhow::{anyhow, bail, ensure, Context, Result};
use serde_json::json;
use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;
use strata_store::{BranchRef, ChangeKind, EntryKind, NoProgress, Store, StoreOptions};

const BIG: usize = 8 << 20;
const DIRS: usize = 20;
const FILES_PER_DIR: usize = 25;

pub fn run(ctx: &Ctx) -> Result<ExitCode> {
    let tmp = tempfile::Builder::new()
        .prefix("strata-demo-")
        .tempdir()
        .context("could not create a temporary directory for the demo")?;
    let mut d = Demo::new(ctx.json);
    if !ctx.json {
        println!("strata demo in {}", tmp.path().display());
    }
    let t = Instant::now();
    let ok = steps(&mut d, tmp.path(), ctx.allow_any_fs).is_ok();
    let total_ms = t.elapsed().as_secs_f64() * 1e3;
    if ctx.json {
        print_json(&json!({"ok": ok, "total_ms": total_ms, "steps": d.steps}))?;
    } else if ok {
        println!(
            "all {} checks passed in {}",
            d.steps.len(),
            crate::output::human_duration(t.elapsed())
        );
    } else {
        println!("the demo FAILED (see the step marked FAIL above)");
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn steps(d: &mut Demo, tmp: &Path, allow_any_fs: bool) -> Result<(), Failed> {
    let src = tmp.join("src");
    let opts = StoreOptions {
        allow_any_fs,
        ..StoreOptions::default()
    };
    let store = d.step("create a Store", || {
        let s = Store::create(&tmp.join("store"), &opts)?;
        let detail = format!("{} (deltas {})", s.dir().display(), s.deltas());
        Ok((s, detail))
    })?;
    let generated = d.step("generate a source tree", || {
        let n = generate(&src)?;
        Ok((
            n,
            format!("{n} files, one of them {}", human_bytes(BIG as u64)),
        ))
    })?;
    let main = BranchRef::new("demo", "main").map_err(|_| Failed)?;
    let agent = BranchRef::new("demo", "agent-1").map_err(|_| Failed)?;
    let c1 = d.step("import it as project `demo`", || {
        let r = store.create_project_from("demo", &src, "import", &NoProgress)?;
        ensure!(
            r.files == generated,
            "imported {} files, expected {generated}",
            r.files
        );
        let c = r
            .commit
            .ok_or_else(|| anyhow!("the import made no commit"))?;
        Ok((
            c,
            format!(
                "{} in {} files -> commit {}",
                human_bytes(r.bytes),
                r.files,
                c.short()
            ),
        ))
    })?;
    d.step("fork branch demo/agent-1 (O(1))", || {
        store.create_branch(&agent, c1)?;
        Ok(((), format!("at {}", c1.short())))
    })?;
    d.step(
        "edit: prepend 10 bytes to the big file, add one, delete one",
        || {
            edit(&src)?;
            Ok(((), "data/big.bin, notes.txt, src/d00/f00.txt".into()))
        },
    )?;
    let c2 = d.step("snapshot the edit onto demo/agent-1", || {
        let r = store.snapshot(&agent, &src, "agent edit", &NoProgress)?;
        let c = r
            .commit
            .ok_or_else(|| anyhow!("the snapshot made no commit"))?;
        // O(edit), not O(file): a few chunks and manifest pages, not 8 MiB.
        let bound = 8 * strata_store::Cdc::for_size(BIG as u64).max as u64;
        ensure!(
            r.new_bytes < bound,
            "the edit stored {} new bytes, more than {} for a 10-byte edit",
            r.new_bytes,
            bound
        );
        Ok((
            c,
            format!(
                "commit {}; {} new objects, {} stored",
                c.short(),
                r.new_objects,
                human_bytes(r.new_bytes)
            ),
        ))
    })?;
    d.step("diff demo/main demo/agent-1", || {
        let got: BTreeSet<(String, &str)> = store
            .diff(c1, c2)?
            .into_iter()
            .map(|c| (lossy(&c.path), c.kind.as_str()))
            .collect();
        let want: BTreeSet<(String, &str)> = [
            ("data/big.bin", ChangeKind::Modified),
            ("notes.txt", ChangeKind::Added),
            ("src/d00/f00.txt", ChangeKind::Deleted),
        ]
        .into_iter()
        .map(|(p, k)| (p.to_string(), k.as_str()))
        .collect();
        ensure!(got == want, "diff gave {got:?}, expected {want:?}");
        Ok(((), format!("{} changes, as expected", got.len())))
    })?;
    d.step("log demo/agent-1", || {
        let log = store.log(store.branch_head(&agent)?, usize::MAX)?;
        let ids: Vec<_> = log.iter().map(|(id, _)| *id).collect();
        ensure!(ids == vec![c2, c1], "log gave {ids:?}, expected [c2, c1]");
        ensure!(log[0].1.parents == vec![c1], "c2's parent is not c1");
        Ok(((), format!("{} commits: {}", ids.len(), log[0].1.message)))
    })?;
    d.step("demo/main is untouched", || {
        let h = store.branch_head(&main)?;
        ensure!(h == c1, "demo/main moved to {h}");
        Ok(((), format!("still at {}", c1.short())))
    })?;
    match crate::demo_sandbox::missing() {
        None => crate::demo_sandbox::steps(d, &store, c1)?,
        Some(why) => d.skip(
            "two Sandboxes on two branches",
            &format!("needs {why}; ran the Store part only (try: sudo strata demo)"),
        ),
    }
    d.step("read 10 bytes of a file without exporting", || {
        let e = store
            .read_path(c2, b"data/big.bin")?
            .ok_or_else(|| anyhow!("data/big.bin is missing from the commit"))?;
        let EntryKind::File(c) = &e.kind else {
            bail!("data/big.bin is a {}", e.kind.type_name());
        };
        let head = store.read_file_range(c, 0, 10)?;
        ensure!(
            head == PREFIX,
            "read {head:?}, expected the prepended bytes"
        );
        Ok(((), format!("{:?}", lossy(&head))))
    })?;
    d.step("export demo/agent-1 and compare with the source", || {
        let out = tmp.join("export");
        let r = store.export(c2, &out, false, &NoProgress)?;
        let n = compare_trees(&src, &out)?;
        Ok((
            (),
            format!(
                "{} files, {}; {n} entries identical",
                r.files,
                human_bytes(r.bytes)
            ),
        ))
    })?;
    d.step("stats", || {
        let s = store.stats()?;
        Ok((
            (),
            format!(
                "{} objects, {} stored for {} logical, dedup {:.2}",
                s.objects,
                human_bytes(s.stored_bytes),
                human_bytes(s.logical_bytes),
                s.dedup_ratio
            ),
        ))
    })?;
    d.step("fsck", || fsck(&store))?;
    d.step("delete demo/agent-1, then gc", || {
        store.delete_branch(&agent)?;
        let r = store.gc(&NoProgress)?;
        ensure!(r.deleted_objects > 0, "gc deleted nothing");
        Ok((
            (),
            format!(
                "{} objects ({}) deleted",
                r.deleted_objects,
                human_bytes(r.deleted_bytes)
            ),
        ))
    })?;
    d.step("fsck after gc", || fsck(&store))?;
    Ok(())
}

fn fsck(store: &Store) -> Result<((), String)> {
    let r = store.fsck(&NoProgress)?;
    ensure!(r.ok, "fsck found problems: {:?}", r.problems);
    Ok((
        (),
        format!("{} objects re-hashed, no problems", r.objects_checked),
    ))
}

const PREFIX: &[u8] = b"# edited\n\n";

/// A small deterministic tree: text files in nested directories, an 8 MiB
/// incompressible file, an executable, an empty file and two symlinks (one
/// pointing outside the tree, stored and never followed). Returns the number
/// of regular files.
fn generate(src: &Path) -> Result<u64> {
    let mut rng = XorShift(0x5EED_CAFE_F00D_D00D);
    let mut files = 0;
    for d in 0..DIRS {
        let dir = src.join(format!("src/d{d:02}"));
        std::fs::create_dir_all(&dir)?;
        for f in 0..FILES_PER_DIR {
            let lines = 20 + rng.next() as usize % 80;
            let text: String = (0..lines)
                .map(|i| format!("line {i} of file {f} in dir {d}: {:016x}\n", rng.next()))
                .collect();
            std::fs::write(dir.join(format!("f{f:02}.txt")), text)?;
            files += 1;
        }
    }
    std::fs::create_dir_all(src.join("data"))?;
    let big: Vec<u8> = (0..BIG / 8)
        .flat_map(|_| rng.next().to_le_bytes())
        .collect();
    std::fs::write(src.join("data/big.bin"), big)?;
    std::fs::create_dir_all(src.join("bin"))?;
    let script = src.join("bin/run.sh");
    std::fs::write(&script, "#!/bin/sh\necho hello from strata\n")?;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
    std::fs::write(src.join("empty"), "")?;
    std::fs::write(src.join("README.md"), "# a demo tree\n")?;
    files += 4;
    std::os::unix::fs::symlink("README.md", src.join("readme-link"))?;
    std::os::unix::fs::symlink("/etc/hostname", src.join("outside-link"))?;
    if crate::demo_sandbox::missing().is_none() {
        // The Sandbox agents run as uid 1500 and edit files in place: the
        // project is theirs, as a checkout is its developer's.
        chown_tree(src, crate::demo_sandbox::AGENT_UID)?;
    }
    Ok(files)
}

fn chown_tree(p: &Path, id: u32) -> Result<()> {
    std::os::unix::fs::lchown(p, Some(id), Some(id))?;
    if p.is_dir() && !p.is_symlink() {
        for e in std::fs::read_dir(p)? {
            chown_tree(&e?.path(), id)?;
        }
    }
    Ok(())
}

fn edit(src: &Path) -> Result<()> {
    let p = src.join("data/big.bin");
    let mut bytes = PREFIX.to_vec();
    bytes.extend(std::fs::read(&p)?);
    std::fs::write(&p, bytes)?;
    std::fs::write(src.join("notes.txt"), "an agent was here\n")?;
    std::fs::remove_file(src.join("src/d00/f00.txt"))?;
    Ok(())
}

/// Compare two trees entry by entry: type, mode, owner, mtime, content and
/// symlink targets. Returns the number of entries compared.
fn compare_trees(a: &Path, b: &Path) -> Result<u64> {
    let names = |p: &Path| -> Result<BTreeSet<std::ffi::OsString>> {
        std::fs::read_dir(p)?.map(|e| Ok(e?.file_name())).collect()
    };
    let (na, nb) = (names(a)?, names(b)?);
    ensure!(
        na == nb,
        "{} and {} list different names",
        a.display(),
        b.display()
    );
    let mut n = 0;
    for name in na {
        let (pa, pb) = (a.join(&name), b.join(&name));
        let (ma, mb) = (
            std::fs::symlink_metadata(&pa)?,
            std::fs::symlink_metadata(&pb)?,
        );
        let what = pa.display();
        ensure!(
            ma.mode() == mb.mode(),
            "{what}: mode {:o} vs {:o}",
            ma.mode(),
            mb.mode()
        );
        ensure!(
            (ma.uid(), ma.gid()) == (mb.uid(), mb.gid()),
            "{what}: owner differs"
        );
        let (ta, tb) = (
            ma.mtime() * 1_000_000_000 + ma.mtime_nsec(),
            mb.mtime() * 1_000_000_000 + mb.mtime_nsec(),
        );
        ensure!(ta == tb, "{what}: mtime {ta} vs {tb}");
        if ma.is_dir() {
            n += compare_trees(&pa, &pb)?;
        } else if ma.file_type().is_symlink() {
            ensure!(
                std::fs::read_link(&pa)? == std::fs::read_link(&pb)?,
                "{what}: symlink target differs"
            );
        } else if ma.is_file() {
            ensure!(
                std::fs::read(&pa)? == std::fs::read(&pb)?,
                "{what}: content differs"
            );
        }
        n += 1;
    }
    Ok(n)
}

/// A tiny deterministic generator: the demo needs varied bytes, not secrets.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}
