//! The Store's part of a fresh large file's commit, alone and repeatable
//! under a profiler: `Store::write_file_from_path` of fresh 32 MiB random
//! files (written to DIR first, untimed), each timed, then the median.
//!
//! Run: `[MIXED=1] cargo run --release -p strata-store --example
//! fresh_commit [-- DIR [RUNS]]` (DIR on the Store's disk, default
//! /var/tmp; MIXED: each file shares half its chunks with the one before;
//! PRELOAD=N: first fill the Store with N fresh 32 MiB files, untimed;
//! GAP=MS: idle that long before each commit).
//! Each run also prints the bytes the process wrote since the run before:
//! the pack's 32 MiB, the WAL frames and the checkpoint's copies. At the
//! end it prints the process's resident memory, a second after the last
//! commit.

mod common;
use common::random;

use strata_store::{Store, StoreOptions};

/// CPU time of the whole process (every thread, exited ones too), in ms.
fn cpu_ms() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 * 1e3 + t.tv_nsec as f64 / 1e6
}

/// Bytes this process has passed to write(2) and its kin (`wchar` in
/// /proc/self/io, proc(5)), every thread's, the checkpoint thread's too.
fn written() -> Result<u64, Box<dyn std::error::Error>> {
    let io = std::fs::read_to_string("/proc/self/io")?;
    let v = io.lines().find_map(|l| l.strip_prefix("wchar:"));
    Ok(v.ok_or("/proc/self/io has no wchar line")?.trim().parse()?)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let base = args.next().unwrap_or_else(|| "/var/tmp".into());
    let runs: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(9);
    let dir = tempfile::tempdir_in(base)?;
    let store = Store::create(&dir.path().join("store"), &StoreOptions::default())?;
    let (mut t, mut cpu) = (Vec::new(), Vec::new());
    // PRELOAD=N first commits N fresh 32 MiB files, untimed: the Store
    // then holds N * 8,192 chunks, as a Store in use does.
    let preload: usize = std::env::var("PRELOAD").map_or(Ok(0), |v| v.parse())?;
    let pre = dir.path().join("preload");
    for n in 0..preload {
        std::fs::write(&pre, random(32 << 20, 1_000_000 + n as u64))?;
        store.write_file_from_path(&pre, None)?;
    }
    // With MIXED=1 every file after the first is half the file before it
    // (alternate 64 KiB runs), half new bytes: every part of its batch
    // then holds stored and new chunks.
    let mixed = std::env::var_os("MIXED").is_some();
    let mut prev: Option<Vec<u8>> = None;
    let srcs: Vec<_> = (0..=runs)
        .map(|r| {
            let src = dir.path().join(format!("src{r}"));
            let mut bytes = random(32 << 20, 1000 + r as u64);
            if let (true, Some(p)) = (mixed, &prev) {
                for (k, run) in bytes.chunks_mut(64 << 10).enumerate() {
                    if k % 2 == 0 {
                        let at = k * (64 << 10);
                        run.copy_from_slice(&p[at..at + run.len()]);
                    }
                }
            }
            let wrote = std::fs::write(&src, &bytes).map(|_| src);
            prev = Some(bytes);
            wrote
        })
        .collect::<Result<_, _>>()?;
    // The commits start here (CLOCK_MONOTONIC, perf's clock): profile
    // them alone with `perf report --time START,`.
    let mut last_w = written()?;
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    eprintln!("commits start at {}.{:06}", now.tv_sec, now.tv_nsec / 1000);
    // GAP=MS idles that long before each commit, as the bench's row does
    // while it writes the next file: the checkpoint of the commit before
    // then runs outside the timed commit.
    let gap: u64 = std::env::var("GAP").map_or(Ok(0), |v| v.parse())?;
    for (r, src) in srcs.iter().enumerate() {
        std::thread::sleep(std::time::Duration::from_millis(gap));
        let (start, cpu0) = (std::time::Instant::now(), cpu_ms());
        store.write_file_from_path(src, None)?;
        let d = start.elapsed().as_secs_f64() * 1e3;
        let c = cpu_ms() - cpu0;
        if r > 0 {
            t.push(d);
            cpu.push(c);
        }
        // Since the last run ended: this commit's pack bytes and WAL
        // frames, and the checkpoint the commit before it started.
        let w = written()?;
        let mib = (w - std::mem::replace(&mut last_w, w)) as f64 / (1 << 20) as f64;
        eprintln!("run {r}: {d:.1} ms, CPU {c:.1} ms, {mib:.1} MiB written since the run before");
    }
    t.sort_by(f64::total_cmp);
    cpu.sort_by(f64::total_cmp);
    eprintln!(
        "median {:.1} ms, CPU (all threads) {:.1} ms, over {runs}",
        t[t.len() / 2],
        cpu[cpu.len() / 2]
    );
    // What the process keeps once its threads are idle (a daemon forks
    // with it): after a second for the checkpoint thread's last work.
    std::thread::sleep(std::time::Duration::from_secs(1));
    let status = std::fs::read_to_string("/proc/self/status")?;
    let rss = status.lines().find(|l| l.starts_with("VmRSS:"));
    eprintln!("{}", rss.ok_or("/proc/self/status has no VmRSS line")?);
    Ok(())
}
