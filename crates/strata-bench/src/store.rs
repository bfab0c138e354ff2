//! The store group: import rate, storage growth per edit, and the cost of
//! committing a one-file edit as the namespace grows.

use crate::report::{median, ms, time, Row};
use crate::Ctx;
use anyhow::Context;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use strata_store::{BranchRef, EntryKind, NoProgress, ObjectId, Store, StoreOptions, TreeEntry};

const MIB: f64 = 1024.0 * 1024.0;

/// Deterministic pseudo-random bytes (xorshift64*).
pub fn seeded_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.max(1);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Text-like small files (source code compresses; random bytes would not).
fn small_file(i: u64) -> Vec<u8> {
    let len = 1024 + (i.wrapping_mul(2654435761) % 3072) as usize;
    let mut s = String::with_capacity(len + 64);
    let mut n = i;
    while s.len() < len {
        n = n
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        s.push_str(&format!(
            "let v{} = compute({}, \"{:x}\");\n",
            n % 997,
            n % 10007,
            n >> 40
        ));
    }
    s.truncate(len);
    s.into_bytes()
}

pub fn make_small_tree(root: &Path, files: u64, dirs: u64) -> anyhow::Result<()> {
    for d in 0..dirs {
        std::fs::create_dir_all(root.join(format!("d{d:04}")))?;
    }
    for i in 0..files {
        let p = root.join(format!("d{:04}/f{i:06}.rs", i % dirs));
        std::fs::write(p, small_file(i))?;
    }
    Ok(())
}

fn new_store(dir: &Path, no_deltas: bool) -> anyhow::Result<Store> {
    Ok(Store::create(
        dir,
        &StoreOptions {
            no_deltas,
            ..Default::default()
        },
    )?)
}

pub fn run(ctx: &Ctx) -> anyhow::Result<Vec<Row>> {
    let want = |w: &str| ctx.wants(w);
    let mut rows = Vec::new();
    if want("import") {
        rows.push(import(ctx)?);
    }
    if want("growth") {
        rows.extend(growth(ctx)?);
    }
    if want("commit") {
        rows.extend(commit_scaling(ctx)?);
    }
    Ok(rows)
}

/// Import 100,000 small files in 1,000 directories; compare with `cp -a`
/// of the same tree to the same disk.
fn import(ctx: &Ctx) -> anyhow::Result<Row> {
    let src = ctx.scratch.join("small-tree");
    eprintln!("generating 100,000 small files");
    make_small_tree(&src, 100_000, 1_000)?;
    // --quick: one timed run after the warm-up (CI only checks that a
    // figure comes out; each run also pays a `cp -a` of 100,000 files).
    let runs = if ctx.quick { 1 } else { 4 };
    let mut s = Vec::new();
    let mut c = Vec::new();
    for r in 0..=runs {
        let dir = ctx.scratch.join(format!("import-store-{r}"));
        let store = new_store(&dir, false)?;
        let (rep, d) = time(|| store.create_project_from("import", &src, "import", &NoProgress));
        let rep = rep?;
        anyhow::ensure!(rep.files == 100_000, "imported {} files", rep.files);
        drop(store);
        std::fs::remove_dir_all(&dir)?;
        if r == 0 {
            // Run 0 warms the page cache for the import. It skips `cp -a`:
            // on this journal-less ext4 a copy of 100,000 files takes ~30 s
            // (ext4_create scans recently deleted inodes), and the source
            // is already cached for the timed copies after it.
            eprintln!("  import warm-up: strata {:.3} s", d.as_secs_f64());
            continue;
        }
        let dst = ctx.scratch.join(format!("import-cp-{r}"));
        let (st, dc) = time(|| Command::new("cp").arg("-a").arg(&src).arg(&dst).status());
        anyhow::ensure!(st?.success(), "cp -a failed");
        std::fs::remove_dir_all(&dst)?;
        s.push(d.as_secs_f64());
        c.push(dc.as_secs_f64());
        eprintln!(
            "  import run {r}: strata {:.3} s, cp -a {:.3} s",
            d.as_secs_f64(),
            dc.as_secs_f64()
        );
    }
    let m = median(s);
    Ok(
        Row::new("store", "import 100,000 small files (1,000 dirs)", "s", m)
            .compare("cp -a (native ext4)", median(c))
            .goal("< 2 s (ref 4.99 s)", m < 2.0),
    )
}

/// Storage growth: prepend 10 bytes to a 32 MiB file and commit; and 16
/// separate 10-byte overwrites spread across it, each committed. Measured
/// as the growth of stored object bytes, plain and with chunk deltas.
fn growth(ctx: &Ctx) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for no_deltas in [true, false] {
        let label = if no_deltas { "plain" } else { "deltas" };
        let base = ctx.scratch.join(format!("growth-{label}"));
        let tree = base.join("tree");
        std::fs::create_dir_all(&tree)?;
        let data = seeded_bytes(32, 32 << 20);
        std::fs::write(tree.join("big.bin"), &data)?;
        let store = new_store(&base.join("store"), no_deltas)?;
        store.create_project_from("g", &tree, "base", &NoProgress)?;
        let b = BranchRef::parse("g/main")?;
        let before = store.stored_bytes()?;
        let mut edited = b"0123456789".to_vec();
        edited.extend_from_slice(&data);
        std::fs::write(tree.join("big.bin"), &edited)?;
        store.snapshot(&b, &tree, "prepend", &NoProgress)?;
        let prepend = (store.stored_bytes()? - before) as f64 / MIB;
        let (goal, limit) = if no_deltas {
            ("< 0.025 MiB", 0.025)
        } else {
            ("< 0.01 MiB", 0.01)
        };
        rows.push(
            Row::new(
                "store",
                &format!("growth: prepend 10 B to 32 MiB ({label})"),
                "MiB",
                prepend,
            )
            .compare("reference (published)", 0.0256)
            .goal(goal, prepend < limit),
        );
        // 16 overwrites on the prepended file, each committed.
        let before = store.stored_bytes()?;
        for k in 0..16u64 {
            let off = 10 + (k * (32 << 20) / 16 + 12_345) as usize;
            edited[off..off + 10].copy_from_slice(b"ABCDEFGHIJ");
            std::fs::write(tree.join("big.bin"), &edited)?;
            store.snapshot(&b, &tree, &format!("edit {k}"), &NoProgress)?;
        }
        let over = (store.stored_bytes()? - before) as f64 / MIB;
        let (goal, limit) = if no_deltas {
            ("< 0.20 MiB", 0.20)
        } else {
            ("< 0.05 MiB", 0.05)
        };
        rows.push(
            Row::new(
                "store",
                &format!("growth: 16 x 10 B overwrites, 32 MiB ({label})"),
                "MiB",
                over,
            )
            .compare("reference (published)", 0.2250)
            .goal(goal, over < limit),
        );
        // Every version must still read back exactly.
        let head = store.branch_head(&b)?;
        let e = store
            .read_path(head, b"big.bin")?
            .context("big.bin missing")?;
        let EntryKind::File(c) = e.kind else {
            anyhow::bail!("not a file")
        };
        anyhow::ensure!(
            store.read_file_range(&c, 0, edited.len())? == edited,
            "read-back differs"
        );
        drop(store);
        std::fs::remove_dir_all(&base)?;
    }
    Ok(rows)
}

/// Commit a one-file edit into a namespace of N files (100 per directory)
/// the way a Workspace does: store the changed file, rebuild the trees on
/// its path, compare-and-swap the branch. Compared with `git add` +
/// `git commit` of the same edit in a git repository of the same files.
fn commit_scaling(ctx: &Ctx) -> anyhow::Result<Vec<Row>> {
    let sizes: &[u64] = if ctx.quick {
        &[100, 1_000, 10_000]
    } else {
        &[100, 1_000, 10_000, 100_000]
    };
    let reference = |n: u64| match n {
        100 => Some(98.9),
        1_000 => Some(1_102.0),
        _ => None,
    };
    let mut rows = Vec::new();
    for &n in sizes {
        let base = ctx.scratch.join(format!("commit-{n}"));
        let tree = base.join("tree");
        let dirs = (n / 100).max(1);
        make_small_tree(&tree, n, dirs)?;
        let store = new_store(&base.join("store"), false)?;
        store.create_project_from("c", &tree, "base", &NoProgress)?;
        let b = BranchRef::parse("c/main")?;
        let git = |args: &[&str]| -> anyhow::Result<()> {
            let st = Command::new("git")
                .arg("-C")
                .arg(&tree)
                .args([
                    "-c",
                    "user.name=bench",
                    "-c",
                    "user.email=bench@strata.invalid",
                ])
                .args(args)
                .output()?;
            anyhow::ensure!(
                st.status.success(),
                "git {args:?}: {}",
                String::from_utf8_lossy(&st.stderr)
            );
            Ok(())
        };
        git(&["init", "-q"])?;
        git(&["add", "-A"])?;
        git(&["commit", "-qm", "base"])?;
        let runs = if ctx.quick { 5 } else { 11 };
        let (mut s, mut g) = (Vec::new(), Vec::new());
        for r in 0..=runs {
            let i = (r * 7919) % n;
            let dir = format!("d{:04}", i % dirs);
            let name = format!("f{i:06}.rs");
            let body = format!("// edit {r}\n").into_bytes();
            let (res, d) = time(|| commit_one(&store, &b, dir.as_bytes(), name.as_bytes(), &body));
            res?;
            std::fs::write(tree.join(&dir).join(&name), &body)?;
            let (res, dg) = time(|| -> anyhow::Result<()> {
                git(&["add", &format!("{dir}/{name}")])?;
                git(&["commit", "-qm", "edit"])
            });
            res?;
            if r > 0 {
                s.push(ms(d));
                g.push(ms(dg));
            }
        }
        let m = median(s);
        let mut row = Row::new(
            "store",
            &format!("commit one-file edit, {n} files"),
            "ms",
            m,
        )
        .compare("git add + commit", median(g));
        if let Some(rf) = reference(n) {
            row.goal = format!("< 20 ms (ref {rf} ms)");
        } else {
            row.goal = "< 20 ms".into();
        }
        row.met = Some(m < 20.0);
        rows.push(row);
        drop(store);
        std::fs::remove_dir_all(&base)?;
    }
    Ok(rows)
}

/// Replace `dir/name` with `body` and publish: touches one file, one
/// directory tree and the root tree.
fn commit_one(
    store: &Store,
    b: &BranchRef,
    dir: &[u8],
    name: &[u8],
    body: &[u8],
) -> anyhow::Result<ObjectId> {
    let _session = store.write_session()?;
    let head = store.branch_head(b)?;
    let root = store.read_commit(head)?.tree;
    let mut root_entries = store.list_tree(root)?;
    let di = root_entries
        .iter()
        .position(|e| e.name == dir)
        .context("directory missing")?;
    let EntryKind::Dir(dt) = root_entries[di].kind else {
        anyhow::bail!("not a dir")
    };
    let mut entries: Vec<TreeEntry> = store.list_tree(dt)?;
    let fi = entries
        .iter()
        .position(|e| e.name == name)
        .context("file missing")?;
    let prev = match &entries[fi].kind {
        EntryKind::File(c) => Some(c.clone()),
        _ => None,
    };
    let c = store.write_file_bytes(body, prev.as_ref())?;
    entries[fi].kind = EntryKind::File(c);
    let new_dt = store.write_tree(entries)?;
    root_entries[di].kind = EntryKind::Dir(new_dt);
    let new_root = store.write_tree(root_entries)?;
    Ok(store.commit_tree(b, head, new_root, "edit", BTreeMap::new())?)
}
