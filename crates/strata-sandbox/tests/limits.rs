//! cgroup limits (v1 on these machines, v2 elsewhere) and rlimits.

mod common;
use common::*;
use strata_sandbox::{Cgroup, Limits, Outcome, Resource, Rlimit, SandboxConfig};

fn with_limits(name: &str, limits: Limits) -> SandboxConfig {
    SandboxConfig {
        limits,
        cgroup_name: Some(format!("{name}-{}", std::process::id())),
        ..SandboxConfig::default()
    }
}

#[test]
fn pids_limit_stops_a_fork_bomb() {
    let cfg = with_limits(
        "strata-test-pids",
        Limits {
            pids: Some(20),
            ..Limits::default()
        },
    );
    // The probe forks until refused, capped at 1000 so a missing limit
    // cannot hurt the machine (it would then report forks=1000).
    let (o, out, err) = run_in(cfg, probe(&["forkbomb", "1000"]));
    assert_eq!(o, Outcome::Exited(0), "stderr: {err}");
    let forks: u32 = out
        .split_whitespace()
        .find_map(|w| w.strip_prefix("forks="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("bad output {out}"));
    assert!(forks < 20, "{out}");
    assert!(out.contains(&format!("errno={}", libc::EAGAIN)), "{out}");
}

#[test]
fn memory_limit_kills_the_hog() {
    let cfg = with_limits(
        "strata-test-mem",
        Limits {
            memory_bytes: Some(64 << 20),
            ..Limits::default()
        },
    );
    let (o, out, err) = run_in(cfg, probe(&["alloc", "512"]));
    assert_eq!(
        o,
        Outcome::Signaled(libc::SIGKILL),
        "stdout: {out} stderr: {err}"
    );
    // And under the limit it works.
    let cfg = with_limits(
        "strata-test-mem-ok",
        Limits {
            memory_bytes: Some(64 << 20),
            ..Limits::default()
        },
    );
    let (o, out, _) = run_in(cfg, probe(&["alloc", "16"]));
    assert_eq!(o, Outcome::Exited(0));
    assert_eq!(out.trim(), "allocated=16");
}

#[test]
fn cgroup_namespace_and_cleanup() {
    let cfg = with_limits(
        "strata-test-cg",
        Limits {
            cpu_millis: Some(500),
            ..Limits::default()
        },
    );
    let name = cfg.cgroup_name.clone().unwrap();
    let (o, out, _) = run_in(cfg, probe(&["cat", "/proc/self/cgroup"]));
    assert_eq!(o, Outcome::Exited(0));
    // Inside a cgroup namespace rooted at the Sandbox's cgroup the path is "/".
    let cpu_line = out
        .lines()
        .find(|l| {
            l.split(':')
                .nth(1)
                .is_some_and(|c| c.split(',').any(|c| c == "cpu"))
        })
        .or_else(|| out.lines().find(|l| l.starts_with("0::")))
        .unwrap_or_else(|| panic!("no cpu line in {out}"));
    assert!(cpu_line.ends_with(":/"), "{cpu_line}");
    // The cgroup is removed afterwards.
    let leftovers: Vec<_> = walk_for(&name);
    assert!(
        leftovers.is_empty(),
        "cgroup dirs left behind: {leftovers:?}"
    );
}

/// The monitor moves PID 1 into the Sandbox's `init` cgroup and stays
/// out itself (crates/strata-sandbox/src/init.rs, step 6b): read from the
/// host, `init/cgroup.procs` of every hierarchy holds PID 1 and the
/// command PID 1 forked (born inside), never the monitor; the monitor's
/// own /proc/PID/cgroup names no cgroup of the Sandbox. When the command
/// ends, the monitor removes the cgroup (it has nothing to move out).
#[test]
fn pid1_is_moved_in_and_the_monitor_stays_out() {
    require_root();
    let cfg = with_limits(
        "strata-test-place",
        Limits {
            pids: Some(50),
            ..Limits::default()
        },
    );
    let name = cfg.cgroup_name.clone().unwrap();
    let child = strata_sandbox::SandboxCommand::new(with_probe(cfg), spec(&["sleep", "300"]))
        .init_exe(PROBE)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn sandbox");
    let monitor = child.id();
    // The monitor makes the cgroup after it starts: wait for it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let cg = loop {
        match Cgroup::find(&name).expect("find") {
            Some(cg) => break cg,
            None if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            None => panic!("the Sandbox's cgroup {name} never appeared"),
        }
    };
    let procs = |dir: &std::path::Path| -> Vec<u32> {
        std::fs::read_to_string(dir.join("init/cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    };
    // PID 1 and the command (sleep), in every hierarchy.
    let mut members = Vec::new();
    for dir in cg.paths() {
        loop {
            members = procs(&dir);
            if members.len() >= 2 || std::time::Instant::now() > deadline {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(members.len(), 2, "{}: {members:?}", dir.display());
        assert!(
            !members.contains(&monitor),
            "monitor {monitor} in {dir:?}: {members:?}"
        );
    }
    let ppid = |pid: u32| -> u32 {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("PPid:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let pid1 = *members
        .iter()
        .find(|&&p| ppid(p) == monitor)
        .unwrap_or_else(|| panic!("no child of the monitor {monitor} among {members:?}"));
    let command = *members.iter().find(|&&p| p != pid1).unwrap();
    assert_eq!(ppid(command), pid1, "the command is PID 1's child");
    // PID 1 forks the command and the child then execs sleep: until the
    // exec its name is still the sandbox binary's (found racing in a full
    // run), so wait for the name rather than read it once.
    let comm = loop {
        let comm = std::fs::read_to_string(format!("/proc/{command}/comm")).unwrap();
        if comm.trim() == "sleep" || std::time::Instant::now() > deadline {
            break comm;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    assert_eq!(comm.trim(), "sleep");
    let own = std::fs::read_to_string(format!("/proc/{monitor}/cgroup")).unwrap();
    assert!(
        !own.contains(&name),
        "the monitor is in the Sandbox's cgroup: {own}"
    );
    // The command ends by itself (not a stop): the monitor cleans up.
    // SAFETY: kill(2) of a process this test just found; no memory involved.
    unsafe { libc::kill(command as i32, libc::SIGKILL) };
    let (o, _, err) = child.wait_with_output().expect("sandbox run");
    assert_eq!(
        o,
        Outcome::Signaled(libc::SIGKILL),
        "stderr: {}",
        String::from_utf8_lossy(&err)
    );
    assert!(walk_for(&name).is_empty(), "cgroup left behind");
}

fn walk_for(name: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![std::path::PathBuf::from("/sys/fs/cgroup")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                if e.file_name().to_string_lossy() == name {
                    found.push(e.path());
                }
                stack.push(e.path());
            }
        }
    }
    found
}

#[test]
fn cgroup_files_carry_the_limits() {
    require_root();
    let name = format!("strata-test-files-{}", std::process::id());
    let limits = Limits {
        memory_bytes: Some(96 << 20),
        pids: Some(33),
        cpu_millis: Some(250),
    };
    let cg = Cgroup::create(&name, &limits).expect("create cgroup");
    let read = |file: &str| -> String {
        for p in cg.paths() {
            if let Ok(s) = std::fs::read_to_string(p.join(file)) {
                return s.trim().to_string();
            }
        }
        panic!("{file} not found under {:?}", cg.paths());
    };
    match strata_sandbox::cgroup::detect().expect("detect") {
        strata_sandbox::Hierarchy::V1 { .. } => {
            assert_eq!(read("memory.limit_in_bytes"), (96u64 << 20).to_string());
            assert_eq!(read("cpu.cfs_quota_us"), "25000");
            assert_eq!(read("cpu.cfs_period_us"), "100000");
        }
        strata_sandbox::Hierarchy::V2 { .. } => {
            assert_eq!(read("memory.max"), (96u64 << 20).to_string());
            assert_eq!(read("cpu.max"), "25000 100000");
        }
    }
    assert_eq!(read("pids.max"), "33");
    // A later process finds it by name (B9 cleanup of a killed monitor's cgroup).
    let found = Cgroup::find(&name).expect("find").expect("exists");
    assert_eq!(found.paths().len(), cg.paths().len());
    found
        .destroy(std::time::Duration::from_secs(1))
        .expect("destroy");
    assert!(walk_for(&name).is_empty());
    assert_eq!(Cgroup::find(&name).expect("find"), None);
}

#[test]
fn rlimits_apply_to_the_command() {
    let mut s = probe(&["cat", "/proc/self/limits"]);
    s.rlimits = vec![
        Rlimit {
            resource: Resource::Nofile,
            soft: Some(64),
            hard: Some(64),
        },
        Rlimit {
            resource: Resource::Core,
            soft: Some(0),
            hard: Some(0),
        },
    ];
    let (o, out, _) = run(s);
    assert_eq!(o, Outcome::Exited(0));
    let line = |k: &str| {
        out.lines()
            .find(|l| l.starts_with(k))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    assert_eq!(line("Max open files"), "Max open files 64 64 files");
    assert_eq!(line("Max core file size"), "Max core file size 0 0 bytes");
}

#[test]
fn no_core_dumps_by_default() {
    let (o, out, _) = run(probe(&["cat", "/proc/self/limits"]));
    assert_eq!(o, Outcome::Exited(0));
    let line = out
        .lines()
        .find(|l| l.starts_with("Max core file size"))
        .unwrap_or_default();
    assert_eq!(
        line.split_whitespace().collect::<Vec<_>>().join(" "),
        "Max core file size 0 0 bytes"
    );
}

#[test]
fn tmp_size_is_enforced() {
    let cfg = SandboxConfig {
        tmp_size_bytes: Some(1 << 20),
        ..SandboxConfig::default()
    };
    let (o, _, err) = run_in(
        cfg.clone(),
        spec(&["dd", "if=/dev/zero", "of=/tmp/big", "bs=1M", "count=2"]),
    );
    assert_ne!(o, Outcome::Exited(0));
    assert!(err.contains("No space left on device"), "{err}");
    let (o, _, err) = run_in(
        cfg,
        spec(&["dd", "if=/dev/zero", "of=/tmp/small", "bs=1k", "count=512"]),
    );
    assert_eq!(o, Outcome::Exited(0), "{err}");
}

/// PID 1 failing before it reads the monitor's message (here: a rootfs
/// whose bind target leads out of it through a symlink, refused while
/// the view is built; with a rootfs the message is read after that)
/// is reported as PID 1's own failure, not as the monitor's message
/// going nowhere, and the cgroup is gone afterwards.
#[test]
fn pid1_failing_early_reports_its_own_failure() {
    require_root();
    let rootfs = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("/", rootfs.path().join("escape")).unwrap();
    let mut cfg = with_limits(
        "strata-test-early",
        Limits {
            pids: Some(50),
            ..Limits::default()
        },
    );
    let name = cfg.cgroup_name.clone().unwrap();
    cfg.root = strata_sandbox::RootFs::Dir {
        path: rootfs.path().into(),
        readonly: true,
    };
    cfg.binds.push(strata_sandbox::BindMount {
        source: "/usr".into(),
        target: "/escape/usr-copy".into(),
        readonly: true,
    });
    let child = strata_sandbox::SandboxCommand::new(cfg, spec(&["true"]))
        .init_exe(PROBE)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    match child.wait() {
        Err(strata_sandbox::RunError::Sandbox(f)) => {
            assert_eq!(f.stage, "mount", "{f:?}");
            assert!(f.message.contains("/escape must be"), "{f:?}");
        }
        other => panic!("expected PID 1's mount failure, got {other:?}"),
    }
    assert!(walk_for(&name).is_empty(), "cgroup left behind");
}
