//! Commit cost against the size of the edit, not of the file: a committed
//! file of 32 MiB, 256 MiB (and 1 GiB in the full form) gets one 10-byte
//! overwrite through a mounted Workspace, then the commit is timed, with
//! the bytes of the file it read (the Store's count). And a fresh 32 MiB
//! random file: its commit step alone, and the same on a Store that
//! already holds 1 GiB of chunks (4 GiB in the full form) beside an empty
//! one, with the bytes each such commit wrote. Part of the fs group.

use crate::report::{median, ms, time, Row};
use crate::Ctx;
use std::os::unix::fs::FileExt;
use strata_store::{NoProgress, Store, StoreOptions};
use strata_workspace::{CommitOutcome, MountOptions, Workspace, WorkspaceOptions};

const MIB: u64 = 1 << 20;

/// Writes `len` pseudo-random (incompressible) bytes to `path`.
fn random_file(path: &std::path::Path, len: u64, seed: u64) -> anyhow::Result<()> {
    use std::io::Write;
    let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    // Spread before forcing the state odd: `seed | 1` made the seeds 2k
    // and 2k + 1 one stream, so the fresh-file row's consecutive runs
    // (seeds 1000 + r) wrote the same bytes every other time and three of
    // its five measured commits found every chunk already stored
    // (docs/benchmarks.md, "The commit step through a Sandbox's daemon").
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut buf = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        for c in buf.chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            c.copy_from_slice(&x.to_le_bytes());
        }
        let n = left.min(buf.len() as u64) as usize;
        f.write_all(&buf[..n])?;
        left -= n as u64;
    }
    f.flush()?;
    Ok(())
}

fn commit(ws: &Workspace) -> anyhow::Result<()> {
    anyhow::ensure!(
        matches!(ws.commit("bench")?, CommitOutcome::Committed(_)),
        "the commit found nothing to commit"
    );
    Ok(())
}

pub fn run(ctx: &Ctx) -> anyhow::Result<Vec<Row>> {
    let runs = if ctx.quick { 5 } else { 11 };
    let mut sizes = vec![32 * MIB, 256 * MIB];
    if !ctx.quick {
        sizes.push(1024 * MIB);
    }
    let mut rows = Vec::new();
    for size in sizes {
        let label = if size >= 1024 * MIB {
            format!("{} GiB", size / (1024 * MIB))
        } else {
            format!("{} MiB", size / MIB)
        };
        let name = format!("commit after a 10-byte overwrite, {label} file");
        if !ctx.wants(&name) {
            continue;
        }
        let dir = ctx.scratch.join(format!("edit-{}", size / MIB));
        let src = dir.join("src");
        std::fs::create_dir_all(&src)?;
        random_file(&src.join("big"), size, size)?;
        let store = Store::create(&dir.join("store"), &StoreOptions::default())?;
        store.create_project_from("e", &src, "base", &NoProgress)?;
        std::fs::remove_dir_all(&src)?;
        let mnt = dir.join("mnt");
        std::fs::create_dir_all(&mnt)?;
        let ws = Workspace::create(
            &store,
            "e/main",
            &dir.join("scratch"),
            &WorkspaceOptions::default(),
        )?;
        let h = ws.mount(&mnt, &MountOptions::default())?;
        let file = mnt.join("big");
        let (mut t, mut read) = (Vec::new(), Vec::new());
        // Run 0 copies the file up (the first write to a base file): not
        // measured.
        for r in 0..=runs {
            let off = (r as u64 + 1) * (size / (runs as u64 + 2)) + 7;
            let f = std::fs::OpenOptions::new().write(true).open(&file)?;
            f.write_all_at(b"0123456789", off)?;
            drop(f);
            let before = store.source_bytes_read();
            let (res, d) = time(|| commit(&ws));
            res?;
            if r > 0 {
                t.push(ms(d));
                read.push((store.source_bytes_read() - before) as f64 / 1024.0);
            }
        }
        h.unmount()?;
        drop(ws);
        let _ = std::fs::remove_dir_all(&dir);
        let (m, kib) = (median(t), median(read));
        eprintln!("  {name}: {m:.2} ms, {kib:.0} KiB read");
        rows.push(Row::new("fs", &name, "ms", m).goal("< 3 ms", m < 3.0));
        rows.push(Row::new(
            "fs",
            &format!("  bytes that commit read, {label} file"),
            "KiB",
            kib,
        ));
    }
    let name = "commit step alone: a fresh 32 MiB random file";
    if ctx.wants(name) {
        let dir = ctx.scratch.join("fresh-32");
        std::fs::create_dir_all(&dir)?;
        let store = Store::create(&dir.join("store"), &StoreOptions::default())?;
        store.create_project("f", "empty")?;
        let mnt = dir.join("mnt");
        std::fs::create_dir_all(&mnt)?;
        let ws = Workspace::create(
            &store,
            "f/main",
            &dir.join("scratch"),
            &WorkspaceOptions::default(),
        )?;
        let h = ws.mount(&mnt, &MountOptions::default())?;
        let mut t = Vec::new();
        for r in 0..=runs {
            random_file(&mnt.join(format!("new{r}")), 32 * MIB, 1000 + r as u64)?;
            let (res, d) = time(|| commit(&ws));
            res?;
            if r > 0 {
                t.push(ms(d));
            }
        }
        h.unmount()?;
        drop(ws);
        let _ = std::fs::remove_dir_all(&dir);
        let m = median(t);
        eprintln!("  {name}: {m:.1} ms");
        rows.push(Row::new("fs", name, "ms", m).goal("< 40 ms", m < 40.0));
    }
    rows.extend(fresh_on_full_store(ctx, runs)?);
    Ok(rows)
}

/// The bytes this process has passed to write(2) and its kin so far
/// (`wchar` in /proc/self/io, proc(5)): the pack's bytes and SQLite's WAL
/// frames, whichever thread wrote them.
fn written() -> anyhow::Result<u64> {
    let io = std::fs::read_to_string("/proc/self/io")
        .map_err(|e| anyhow::anyhow!("read /proc/self/io (task I/O accounting): {e}"))?;
    io.lines()
        .find_map(|l| l.strip_prefix("wchar:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("/proc/self/io has no wchar line: {io}"))
}

/// A fresh 32 MiB file's commit step (`Store::write_file_from_path`, the
/// Store's part of it) on a Store already holding `GIB` GiB of distinct
/// chunks, alternated commit by commit with the same on an empty Store.
/// The figure that grows with the Store is the chunk index: every new
/// chunk's row lands on a random page of the `id` index, so a commit
/// dirties up to one page per chunk, written to the WAL at the commit and
/// copied into the database by the next checkpoint (docs/benchmarks.md,
/// "The chunk index grows with the Store").
fn fresh_on_full_store(ctx: &Ctx, runs: usize) -> anyhow::Result<Vec<Row>> {
    let gib: u64 = if ctx.quick { 1 } else { 4 };
    let name = format!("commit step alone: a fresh 32 MiB file, Store holding {gib} GiB");
    if !ctx.wants(&name) {
        return Ok(Vec::new());
    }
    let dir = ctx.scratch.join("fresh-full");
    std::fs::create_dir_all(&dir)?;
    let empty = Store::create(&dir.join("empty"), &StoreOptions::default())?;
    let full = Store::create(&dir.join("full"), &StoreOptions::default())?;
    let pre = dir.join("preload");
    eprintln!("  filling a Store with {gib} GiB of fresh chunks");
    for n in 0..gib * 32 {
        random_file(&pre, 32 * MIB, 1_000_000 + n)?;
        full.write_file_from_path(&pre, None)?;
    }
    let srcs: Vec<_> = (0..=runs)
        .map(|r| {
            let p = dir.join(format!("src{r}"));
            random_file(&p, 32 * MIB, 2000 + r as u64).map(|_| p)
        })
        .collect::<anyhow::Result<_>>()?;
    let (mut te, mut tf, mut wf) = (Vec::new(), Vec::new(), Vec::new());
    for (r, src) in srcs.iter().enumerate() {
        // Each Store commits the same bytes, the empty one first.
        let (res, de) = time(|| empty.write_file_from_path(src, None));
        res?;
        let w0 = written()?;
        let (res, df) = time(|| full.write_file_from_path(src, None));
        res?;
        let w = written()? - w0;
        if r > 0 {
            te.push(ms(de));
            tf.push(ms(df));
            wf.push(w as f64 / MIB as f64);
        }
    }
    drop((empty, full));
    let _ = std::fs::remove_dir_all(&dir);
    let (me, mf, mw) = (median(te), median(tf), median(wf));
    eprintln!("  {name}: {mf:.1} ms (empty Store {me:.1} ms), {mw:.1} MiB written");
    Ok(vec![
        Row::new("fs", &name, "ms", mf)
            .compare("the same on an empty Store", me)
            .goal("< 40 ms", mf < 40.0),
        Row::new(
            "fs",
            &format!("  MiB that commit wrote (pack + WAL), Store holding {gib} GiB"),
            "MiB",
            mw,
        )
        .note("32 MiB of chunks"),
    ])
}
