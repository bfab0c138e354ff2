//! The fs group: the same workloads on a native ext4 directory, a Workspace
//! with FUSE passthrough, a Workspace without it, a Workspace served over
//! FUSE io_uring without passthrough (when the kernel allows it), and
//! fuse-overlayfs over the same data (when installed). Data rows report MiB/s (higher is
//! better; ratio = strata / native); metadata rows report ms (lower is
//! better; ratio = strata / native).

use crate::report::{median, ms, time, Row};
use crate::store::make_small_tree;
use crate::Ctx;
use anyhow::Context;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use strata_store::{Store, StoreOptions};
use strata_workspace::{MountHandle, MountOptions, Transport, Workspace, WorkspaceOptions};

/// One place to run the workloads in.
struct Target {
    name: &'static str,
    dir: PathBuf,
    _ws: Option<(Workspace, MountHandle)>,
    overlay: Option<PathBuf>,
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Some((_, h)) = self._ws.take() {
            let _ = h.unmount();
        }
        if let Some(mp) = &self.overlay {
            let _ = Command::new("fusermount3").arg("-u").arg(mp).status();
        }
    }
}

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd} >/dev/null")])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn drop_caches() {
    // Root only; elsewhere reads are measured warm and the docs say so.
    let _ = Command::new("sync").status();
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}

fn targets(ctx: &Ctx, store: &Store) -> anyhow::Result<Vec<Target>> {
    let mut out = Vec::new();
    let native = ctx.scratch.join("fs-native");
    std::fs::create_dir_all(&native)?;
    out.push(Target {
        name: "native ext4",
        dir: native,
        _ws: None,
        overlay: None,
    });
    // The /dev/fuse columns say so explicitly (the default transport
    // follows STRATA_FUSE_TRANSPORT); the io_uring column only where the
    // kernel lets a mount use it.
    let mut mounts = vec![
        ("workspace passthrough", true, Transport::DevFuse),
        ("workspace no-passthrough", false, Transport::DevFuse),
    ];
    let uring = strata_workspace::uring::probe();
    match &uring.unusable {
        None => mounts.push((URING, true, Transport::IoUring)),
        Some(why) => eprintln!("FUSE io_uring is unusable ({why}): its column is left out"),
    }
    for (name, passthrough, transport) in mounts {
        let mp = ctx
            .scratch
            .join(format!("fs-mnt-{passthrough}-{transport:?}"));
        std::fs::create_dir_all(&mp)?;
        let ws = Workspace::create(
            store,
            "bench/main",
            &ctx.scratch.join("fs-scratch"),
            &WorkspaceOptions::default(),
        )?;
        let h = ws.mount(
            &mp,
            &MountOptions {
                passthrough,
                transport,
                ..Default::default()
            },
        )?;
        if transport == Transport::IoUring {
            anyhow::ensure!(
                h.transport() == "io_uring",
                "the io_uring mount reads /dev/fuse"
            );
        }
        out.push(Target {
            name,
            dir: mp,
            _ws: Some((ws, h)),
            overlay: None,
        });
    }
    if have("fuse-overlayfs") {
        let base = ctx.scratch.join("fs-overlay");
        for d in ["lower", "upper", "work", "mnt"] {
            std::fs::create_dir_all(base.join(d))?;
        }
        let mp = base.join("mnt");
        let st = Command::new("fuse-overlayfs")
            .arg("-o")
            .arg(format!(
                "lowerdir={},upperdir={},workdir={}",
                base.join("lower").display(),
                base.join("upper").display(),
                base.join("work").display()
            ))
            .arg(&mp)
            .status()?;
        anyhow::ensure!(st.success(), "fuse-overlayfs failed to mount");
        out.push(Target {
            name: "fuse-overlayfs",
            dir: mp.clone(),
            _ws: None,
            overlay: Some(mp),
        });
    } else {
        eprintln!("fuse-overlayfs is not installed: its column is skipped (apt-get install fuse-overlayfs)");
    }
    Ok(out)
}

type Workload = fn(&Ctx, &Path, &Path) -> anyhow::Result<f64>;

/// The column of the Workspace served over FUSE io_uring, with passthrough
/// like the default mount: what `STRATA_FUSE_TRANSPORT=auto` mounts, set
/// beside the /dev/fuse passthrough column it would replace
/// (docs/benchmarks.md; until 2026-12-02 this column had no passthrough).
const URING: &str = "workspace io_uring";

/// The goal of a metadata row (ms, lower is better) for column `name`:
/// 2 x native, except over io_uring, whose point is fewer round trips:
/// rm -rf within 3 x native, create+stat+unlink within 1.5 x native,
/// and git status no slower than the default mount (/dev/fuse with
/// passthrough).
fn metadata_goal(wname: &str, name: &str, m: f64, native: f64, default: f64) -> (String, bool) {
    if name == URING && wname.starts_with("rm -rf") {
        ("<= 3 x native".into(), m <= 3.0 * native)
    } else if name == URING && wname.starts_with("create+stat+unlink") {
        ("<= 1.5 x native".into(), m <= 1.5 * native)
    } else if name == URING && wname.starts_with("git status") {
        (
            format!("<= /dev/fuse passthrough ({default:.1})"),
            m <= default,
        )
    } else {
        ("<= 2 x native".into(), m <= 2.0 * native)
    }
}

pub fn run(ctx: &Ctx) -> anyhow::Result<Vec<Row>> {
    let store = Store::create(&ctx.scratch.join("fs-store"), &StoreOptions::default())?;
    store.create_project("bench", "empty")?;
    let ts = targets(ctx, &store)?;
    // Shared inputs, generated once on the native disk.
    let inputs = ctx.scratch.join("fs-inputs");
    let tree = inputs.join("tree");
    make_small_tree(&tree, files(ctx), 100)?;
    let tar = inputs.join("tree.tar");
    let st = Command::new("tar")
        .arg("-C")
        .arg(&inputs)
        .arg("-cf")
        .arg(&tar)
        .arg("tree")
        .status()?;
    anyhow::ensure!(st.success(), "tar -c failed");

    // --quick (CI: every workload runs and yields a figure) uses 2,000
    // files and 64 MiB instead of 10,000 and 256 MiB; the names say which.
    let (n, mb) = (fmt_thousands(files(ctx)), seq(ctx) >> 20);
    let workloads: Vec<(String, &str, bool, Workload)> = vec![
        (format!("seq write {mb} MiB"), "MiB/s", true, seq_write),
        (format!("seq read {mb} MiB (cold)"), "MiB/s", true, seq_read),
        (
            "4 KiB random read, 64 MiB file".into(),
            "MiB/s",
            true,
            rand_read,
        ),
        (
            "4 KiB random write, 64 MiB file".into(),
            "MiB/s",
            true,
            rand_write,
        ),
        (
            format!("create+stat+unlink {n} files"),
            "ms",
            false,
            create_stat_unlink,
        ),
        (format!("extract a {n}-file tar"), "ms", false, untar),
        (
            format!("git status, {n}-file repo"),
            "ms",
            false,
            git_status,
        ),
        (format!("rm -rf {n} files"), "ms", false, rm_rf),
        // Not a goal: the price of one request, which bounds the rows above.
        (
            "one round trip: statx forced sync (us)".into(),
            "us",
            false,
            round_trip,
        ),
    ];
    let runs = if ctx.quick { 3 } else { 7 };
    let mut rows = Vec::new();
    for (wname, unit, higher_better, f) in &workloads {
        if !ctx.wants(wname) {
            continue;
        }
        let mut med = Vec::new();
        for t in &ts {
            let mut v = Vec::new();
            for r in 0..=runs {
                let work = t.dir.join(format!("w{r}"));
                std::fs::create_dir_all(&work)?;
                let x = f(ctx, &work, &inputs).with_context(|| format!("{wname} on {}", t.name))?;
                let _ = std::fs::remove_dir_all(&work);
                if r > 0 {
                    v.push(x);
                }
            }
            let m = median(v);
            eprintln!("  {wname} on {}: {m:.1} {unit}", t.name);
            med.push((t.name, m));
        }
        let native = med[0].1;
        let default = med[1].1;
        let overlay = med.iter().find(|m| m.0 == "fuse-overlayfs").map(|m| m.1);
        for (name, m) in med.iter().skip(1).filter(|m| m.0 != "fuse-overlayfs") {
            let (goal, met) = if *higher_better {
                let g = if *name == "workspace passthrough" {
                    0.8
                } else {
                    0.0
                };
                (
                    if g > 0.0 {
                        ">= 0.8 x native".to_string()
                    } else {
                        "(report)".to_string()
                    },
                    (g == 0.0 || *m >= g * native) && overlay.is_none_or(|o| *m >= o),
                )
            } else if *unit == "us" {
                // The io_uring row shows the /dev/fuse figure beside it.
                match *name == URING {
                    true => (format!("(report) /dev/fuse {default:.1}"), true),
                    false => ("(report)".to_string(), true),
                }
            } else {
                let (g, met) = metadata_goal(wname, name, *m, native, default);
                (g, met && overlay.is_none_or(|o| *m <= o))
            };
            let mut row = Row::new("fs", &format!("{wname} ({name})"), unit, *m)
                .compare("native ext4", native)
                .goal(&goal, met);
            if let Some(o) = overlay {
                row.goal = format!("{} ; fuse-overlayfs {o:.1}", row.goal);
            }
            rows.push(row);
        }
        if let Some(o) = overlay {
            rows.push(
                Row::new("fs", &format!("{wname} (fuse-overlayfs, peer)"), unit, o)
                    .compare("native ext4", native),
            );
        }
    }
    drop(ts);
    rows.extend(crate::edit_commit::run(ctx)?);
    Ok(rows)
}

fn seq(ctx: &Ctx) -> usize {
    if ctx.quick {
        64 << 20
    } else {
        256 << 20
    }
}

fn files(ctx: &Ctx) -> u64 {
    if ctx.quick {
        2_000
    } else {
        10_000
    }
}

fn fmt_thousands(n: u64) -> String {
    if n >= 1000 {
        format!("{},{:03}", n / 1000, n % 1000)
    } else {
        n.to_string()
    }
}

fn mibs(bytes: usize, d: std::time::Duration) -> f64 {
    bytes as f64 / (1 << 20) as f64 / d.as_secs_f64()
}

fn seq_write(ctx: &Ctx, dir: &Path, _: &Path) -> anyhow::Result<f64> {
    let buf = crate::store::seeded_bytes(1, 1 << 20);
    let (r, d) = time(|| -> anyhow::Result<()> {
        let mut f = std::fs::File::create(dir.join("seq"))?;
        for _ in 0..seq(ctx) >> 20 {
            f.write_all(&buf)?;
        }
        f.sync_all()?;
        Ok(())
    });
    r?;
    Ok(mibs(seq(ctx), d))
}

fn seq_read(ctx: &Ctx, dir: &Path, _: &Path) -> anyhow::Result<f64> {
    let buf = crate::store::seeded_bytes(2, 1 << 20);
    {
        let mut f = std::fs::File::create(dir.join("seq"))?;
        for _ in 0..seq(ctx) >> 20 {
            f.write_all(&buf)?;
        }
        f.sync_all()?;
    }
    drop_caches();
    let (r, d) = time(|| -> anyhow::Result<usize> {
        let mut f = std::fs::File::open(dir.join("seq"))?;
        let mut b = vec![0u8; 1 << 20];
        let mut n = 0;
        loop {
            let k = f.read(&mut b)?;
            if k == 0 {
                break;
            }
            n += k;
        }
        Ok(n)
    });
    anyhow::ensure!(r? == seq(ctx), "short read");
    Ok(mibs(seq(ctx), d))
}

const RAND_FILE: u64 = 64 << 20;
const RAND_OPS: u64 = 16_384;

fn rand_file(dir: &Path) -> anyhow::Result<std::fs::File> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(dir.join("rand"))?;
    let buf = crate::store::seeded_bytes(3, 1 << 20);
    for _ in 0..RAND_FILE >> 20 {
        f.write_all(&buf)?;
    }
    f.sync_all()?;
    f.seek(SeekFrom::Start(0))?;
    Ok(f)
}

fn offsets() -> impl Iterator<Item = u64> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..RAND_OPS).map(move |_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % (RAND_FILE / 4096)) * 4096
    })
}

fn rand_read(_: &Ctx, dir: &Path, _: &Path) -> anyhow::Result<f64> {
    let f = rand_file(dir)?;
    drop(f);
    drop_caches();
    let f = std::fs::File::open(dir.join("rand"))?;
    let mut b = [0u8; 4096];
    let (r, d) = time(|| -> anyhow::Result<()> {
        for off in offsets() {
            f.read_exact_at(&mut b, off)?;
        }
        Ok(())
    });
    r?;
    Ok(mibs((RAND_OPS * 4096) as usize, d))
}

fn rand_write(_: &Ctx, dir: &Path, _: &Path) -> anyhow::Result<f64> {
    let f = rand_file(dir)?;
    let b = [0x5au8; 4096];
    let (r, d) = time(|| -> anyhow::Result<()> {
        for off in offsets() {
            f.write_all_at(&b, off)?;
        }
        f.sync_all()?;
        Ok(())
    });
    r?;
    Ok(mibs((RAND_OPS * 4096) as usize, d))
}

fn create_stat_unlink(ctx: &Ctx, dir: &Path, _: &Path) -> anyhow::Result<f64> {
    let (r, d) = time(|| -> anyhow::Result<()> {
        for i in 0..files(ctx) {
            std::fs::write(dir.join(format!("f{i}")), b"x")?;
        }
        for i in 0..files(ctx) {
            std::fs::metadata(dir.join(format!("f{i}")))?;
        }
        for i in 0..files(ctx) {
            std::fs::remove_file(dir.join(format!("f{i}")))?;
        }
        Ok(())
    });
    r?;
    Ok(ms(d))
}

fn sh(dir: &Path, cmd: &mut Command) -> anyhow::Result<()> {
    let out = cmd.current_dir(dir).output()?;
    anyhow::ensure!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

fn untar(_: &Ctx, dir: &Path, inputs: &Path) -> anyhow::Result<f64> {
    let tar = inputs.join("tree.tar");
    let (r, d) = time(|| sh(dir, Command::new("tar").arg("-xf").arg(&tar)));
    r?;
    Ok(ms(d))
}

fn git_repo(dir: &Path, inputs: &Path) -> anyhow::Result<()> {
    sh(
        dir,
        Command::new("tar").arg("-xf").arg(inputs.join("tree.tar")),
    )?;
    let repo = dir.join("tree");
    let git = |args: &[&str]| {
        sh(
            &repo,
            Command::new("git")
                .args(["-c", "user.name=b", "-c", "user.email=b@strata.invalid"])
                .args(args),
        )
    };
    git(&["init", "-q"])?;
    git(&["add", "-A"])?;
    git(&["commit", "-qm", "base"])?;
    Ok(())
}

fn git_status(_: &Ctx, dir: &Path, inputs: &Path) -> anyhow::Result<f64> {
    git_repo(dir, inputs)?;
    let repo = dir.join("tree");
    // One warm-up status refreshes the index's stat data.
    sh(&repo, Command::new("git").args(["status", "--porcelain"]))?;
    let (r, d) = time(|| sh(&repo, Command::new("git").args(["status", "--porcelain"])));
    r?;
    Ok(ms(d))
}

fn rm_rf(_: &Ctx, dir: &Path, inputs: &Path) -> anyhow::Result<f64> {
    sh(
        dir,
        Command::new("tar").arg("-xf").arg(inputs.join("tree.tar")),
    )?;
    let (r, d) = time(|| sh(dir, Command::new("rm").args(["-rf", "tree"])));
    r?;
    Ok(ms(d))
}

const TRIPS: u32 = 10_000;

/// Mean microseconds of a `statx` with AT_STATX_FORCE_SYNC on one file: on
/// FUSE every call is one GETATTR round trip through the daemon (the
/// kernel skips its attribute cache, fuse_update_get_attr()), on ext4 a
/// local stat. The difference is the fixed cost each metadata request pays.
fn round_trip(_: &Ctx, dir: &Path, _: &Path) -> anyhow::Result<f64> {
    use rustix::fs::{statx, AtFlags, StatxFlags, CWD};
    let p = dir.join("rt");
    std::fs::write(&p, b"x")?;
    let (r, d) = time(|| -> anyhow::Result<()> {
        for _ in 0..TRIPS {
            statx(CWD, &p, AtFlags::STATX_FORCE_SYNC, StatxFlags::BASIC_STATS)?;
        }
        Ok(())
    });
    r?;
    Ok(d.as_secs_f64() * 1e6 / f64::from(TRIPS))
}
