//! The probe: this test binary run inside a Sandbox as the command
//! (`probe all read=PATH connect=PATH expect-read=PATH`). It prints one
//! line per attempt; `BREACH ...` for anything that must not work, and
//! `CONTROL ok` when the positive control (a read in its Workspace)
//! works. And the request-body corpus and mutator for the daemon fuzzing.

use rand::Rng;
use std::os::unix::net::UnixStream;

pub fn main(args: &[String]) {
    assert_eq!(
        args.first().map(String::as_str),
        Some("all"),
        "usage: probe all ..."
    );
    let me = rustix::process::getuid().as_raw();
    println!("probe uid {me}");
    for a in &args[1..] {
        if let Some(p) = a.strip_prefix("read=") {
            match std::fs::read(p) {
                Ok(b) => println!("BREACH read {p} ({} bytes)", b.len()),
                Err(e) => println!("denied read {p}: {e}"),
            }
        } else if let Some(p) = a.strip_prefix("connect=") {
            match UnixStream::connect(p) {
                Ok(_) => println!("BREACH connect {p}"),
                Err(e) => println!("denied connect {p}: {e}"),
            }
        } else if let Some(p) = a.strip_prefix("expect-read=") {
            match std::fs::read(p) {
                Ok(_) => println!("CONTROL ok"),
                Err(e) => println!("CONTROL failed: read {p}: {e}"),
            }
        }
    }
    // Every process the command can list (its PID namespace, and of it
    // only its own uid's: /proc has hidepid=invisible), then PID 1 (the
    // init) and PID 2 (the daemon) by number, listed or not: a pid needs no
    // listing to be signalled or traced.
    let listed: Vec<i32> = std::fs::read_dir("/proc")
        .expect("list /proc")
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
        .collect();
    for &pid in &listed {
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let uid: u32 = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(u32::MAX);
        if uid == me {
            // Another command of the same Sandbox (same uid): signals are
            // allowed (same uid, kill(2)), ptrace is not (the seccomp
            // filter denies it to every command).
            let mine = pid == std::process::id() as i32;
            if !mine {
                // SAFETY: PTRACE_ATTACH takes a pid and two ignored
                // arguments; no memory of ours is passed.
                let pt = unsafe { libc::ptrace(libc::PTRACE_ATTACH, pid, 0usize, 0usize) };
                let err = std::io::Error::last_os_error();
                println!(
                    "same-uid pid {pid}: ptrace {}",
                    if pt == 0 {
                        "ok".to_string()
                    } else {
                        err.to_string()
                    }
                );
                if pt == 0 {
                    // SAFETY: as above.
                    unsafe { libc::ptrace(libc::PTRACE_DETACH, pid, 0usize, 0usize) };
                    println!("BREACH ptrace same-uid pid {pid}");
                }
            }
            continue;
        }
        println!("listed pid {pid} of uid {uid}");
        attack(pid);
    }
    for pid in [1, 2].into_iter().filter(|p| !listed.contains(p)) {
        attack(pid);
    }
}

/// Signal, trace and read the memory and environment of `pid` (another
/// uid's process); one `pid N:` line, a `BREACH` line per success.
fn attack(pid: i32) {
    let p = rustix::process::Pid::from_raw(pid).expect("pid > 0");
    // Signal 0 runs the same permission check as a real signal
    // (kill(2): "existence and permission checks are still performed").
    let kill = rustix::process::test_kill_process(p);
    // SAFETY: PTRACE_ATTACH takes a pid and two ignored arguments; no
    // memory of ours is passed. If it ever succeeded we detach below.
    let pt = unsafe { libc::ptrace(libc::PTRACE_ATTACH, pid, 0usize, 0usize) };
    let pt_err = std::io::Error::last_os_error();
    if pt == 0 {
        // SAFETY: as above.
        unsafe { libc::ptrace(libc::PTRACE_DETACH, pid, 0usize, 0usize) };
    }
    let env = std::fs::read(format!("/proc/{pid}/environ"));
    let mem = std::fs::File::open(format!("/proc/{pid}/mem"));
    println!(
        "pid {pid}: kill0 {kill:?}, ptrace {}, environ {}, mem {}",
        if pt == 0 {
            "ok".to_string()
        } else {
            pt_err.to_string()
        },
        env.as_ref()
            .map(|_| "ok".to_string())
            .unwrap_or_else(|e| e.to_string()),
        mem.as_ref()
            .map(|_| "ok".to_string())
            .unwrap_or_else(|e| e.to_string()),
    );
    if kill.is_ok() {
        println!("BREACH signal pid {pid}");
    }
    if pt == 0 {
        println!("BREACH ptrace pid {pid}");
    }
    if env.is_ok() {
        println!("BREACH environ pid {pid}");
    }
    if mem.is_ok() {
        println!("BREACH mem pid {pid}");
    }
}

/// The seed corpus of request bodies (crates/strata-torture/corpus/daemon).
pub fn corpus() -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/daemon");
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read the corpus {}: {e}", dir.display()))
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    v.sort();
    assert!(!v.is_empty(), "empty corpus in {}", dir.display());
    v
}

/// A mutated copy of `seed`: byte flips, insertions of JSON-significant
/// bytes, truncation, duplication of a slice, or a type swap.
pub fn mutate(seed: &[u8], rng: &mut impl Rng) -> Vec<u8> {
    let mut v = seed.to_vec();
    let tokens: [&[u8]; 12] = [
        b"{",
        b"}",
        b"[",
        b"]",
        b"\"",
        b":",
        b",",
        b"null",
        b"-1",
        b"1e999",
        b"\"\\u0000\"",
        b"18446744073709551616",
    ];
    for _ in 0..rng.random_range(1..=4) {
        let at = if v.is_empty() {
            0
        } else {
            rng.random_range(0..=v.len())
        };
        match rng.random_range(0..5) {
            0 if !v.is_empty() => {
                let i = rng.random_range(0..v.len());
                v[i] = rng.random();
            }
            1 => {
                let t = tokens[rng.random_range(0..tokens.len())];
                v.splice(at..at, t.iter().copied());
            }
            2 => v.truncate(at),
            3 if !v.is_empty() => {
                let a = rng.random_range(0..v.len());
                let b = rng.random_range(a..v.len().min(a + 64) + 1).min(v.len());
                let s = v[a..b].to_vec();
                v.splice(at..at, s);
            }
            _ => {
                // Replace a scalar with a value of another type.
                let t = tokens[rng.random_range(7..tokens.len())];
                if let Some(i) = v.iter().position(|b| *b == b':') {
                    v.splice(i + 1..(i + 2).min(v.len()), t.iter().copied());
                }
            }
        }
    }
    v
}
