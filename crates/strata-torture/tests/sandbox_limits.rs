//! Sandboxes with their default limits and the daemon's channels, under
//! attack from their own commands (docs/security.md, "Limits and the
//! daemon's channels"): a fork bomb in a Sandbox created without limit
//! flags stops at the default limit while the daemon answers and starts
//! execs; `no_limits` gives none; init and daemon are never the OOM
//! killer's choice and commands always are; a report path planted by a
//! command (FIFO, symlink to /dev/zero) changes nothing; no argv carries a
//! secret or the Sandbox's config; a symlink planted in a mount path does
//! not move the mount.
//!
//! Its own `main` (harness = false), like `sandbox.rs`: the binary is
//! re-executed as the Sandbox init, the daemon and the exec helper.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use strata_sdk::{Error, Limits, Sandbox, SandboxFilter, SandboxSpec, Store};
use strata_torture::{descendants_of, proc_status_kb};

const RUN_LABEL: &str = "torture-limits-run";

fn main() {
    strata_sdk::maybe_run_internal();
    strata_testkit::cases::require_root();
    let rt = tokio::runtime::Runtime::new().expect("tokio");
    let tmp = strata_torture::tempdir();
    let mut cases = strata_testkit::cases::Cases::from_args(&rt, tmp.path());
    // Each case in a directory of its own, named after it.
    macro_rules! case {
        ($f:ident) => {
            cases.run_in_own_dir(stringify!($f), async |d| $f(d).await)
        };
    }
    case!(default_limits_stop_a_fork_bomb_while_the_daemon_serves);
    case!(no_limits_means_none_and_oom_scores_hold);
    case!(planted_report_paths_change_nothing);
    case!(no_argv_carries_a_secret_or_the_config);
    case!(a_symlink_in_a_mount_path_does_not_move_the_mount);
    // Close what failed cases left running.
    cases.finish(async {
        let mut f = SandboxFilter::default();
        f.labels
            .insert(RUN_LABEL.into(), std::process::id().to_string());
        for info in Sandbox::list(f).await.unwrap_or_default() {
            if let Ok(sb) = Sandbox::open(info.id.as_str()).await {
                eprintln!("closing leftover Sandbox {}", sb.id());
                let _ = sb.close_discard().await;
            }
        }
    });
}

fn spec(store: &Store) -> SandboxSpec {
    SandboxSpec::new(store.dir()).label(RUN_LABEL, std::process::id().to_string())
}

async fn store_with_project(dir: &Path) -> Store {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), b"base\n").unwrap();
    let store = Store::create(dir.join("store")).await.unwrap();
    store.create_project_from("p", &src).await.unwrap();
    store
}

fn monitor_pid(sb: &Sandbox) -> u32 {
    sb.info()
        .handle
        .as_deref()
        .and_then(|h| h.parse().ok())
        .unwrap_or_else(|| panic!("no monitor pid in {:?}", sb.info().handle))
}

fn cmdline(pid: u32) -> Vec<Vec<u8>> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

/// The daemon: the monitor's descendant whose argv[1] is `__strata-daemon`.
fn daemon_pid(sb: &Sandbox) -> u32 {
    let monitor = monitor_pid(sb);
    descendants_of(monitor)
        .into_iter()
        .find(|p| {
            cmdline(*p).get(1).map(Vec::as_slice) == Some(strata_daemon::DAEMON_ARG.as_bytes())
        })
        .unwrap_or_else(|| panic!("no daemon process under monitor {monitor}"))
}

/// What the init and daemon must have: -1000, or, where this host's root
/// lacks CAP_SYS_RESOURCE (needed to lower it, proc(5)), the value it
/// inherits from us, the lowest it may set (the documented fallback).
fn daemon_oom_score_adj() -> i32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap();
    if eff & (1 << 24) != 0 {
        -1000
    } else {
        let own = oom_score_adj(std::process::id());
        eprintln!("no CAP_SYS_RESOURCE here: the daemon keeps oom_score_adj {own}");
        own
    }
}

fn oom_score_adj(pid: u32) -> i32 {
    std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj"))
        .unwrap_or_else(|e| panic!("oom_score_adj of {pid}: {e}"))
        .trim()
        .parse()
        .unwrap()
}

/// The host directory of `pid`'s cgroup for `controller` (v1), or its v2
/// directory.
fn cgroup_dir(pid: u32, controller: &str) -> PathBuf {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrls, path) = (parts.next(), parts.next().unwrap_or(""), parts.next());
        let hit = if v2 {
            ctrls.is_empty()
        } else {
            ctrls.split(',').any(|c| c == controller)
        };
        if let (true, Some(path)) = (hit, path) {
            let base = if v2 {
                PathBuf::from("/sys/fs/cgroup")
            } else {
                PathBuf::from("/sys/fs/cgroup").join(controller)
            };
            return base.join(path.trim_start_matches('/'));
        }
    }
    panic!("no {controller} cgroup for {pid} in {text}");
}

fn read_trim(p: &Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .to_string()
}

fn half_of_ram() -> u64 {
    let kb: u64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    let half = kb * 1024 / 2;
    half - half % (1 << 20)
}

/// Wait until `pid` is gone (reaped), or fail after `within`.
async fn wait_gone(pid: u32, within: Duration) {
    let deadline = Instant::now() + within;
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(Instant::now() < deadline, "process {pid} is still there");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn default_limits_stop_a_fork_bomb_while_the_daemon_serves(dir: &Path) {
    let store = store_with_project(dir).await;
    let sb = Sandbox::create(spec(&store)).await.unwrap();
    // Recorded as applied.
    let limits = sb.info().config.limits;
    assert_eq!(
        limits,
        Limits {
            memory_bytes: Some(half_of_ram()),
            pids: Some(4096),
            cpu_millis: None,
        }
    );
    let monitor = monitor_pid(&sb);
    let daemon = daemon_pid(&sb);
    // And in the kernel: the Sandbox's cgroup holds the limits, its
    // `init` child PID 1 (moved in by the monitor) and so the daemon,
    // its `commands` child a lower pids limit. The monitor stays out
    // (crates/strata-sandbox/src/init.rs, step 6b).
    let pid1 = match strata_torture::children_of(monitor).as_slice() {
        [one] => *one,
        other => panic!("the monitor {monitor} should have one child, PID 1: {other:?}"),
    };
    let init_pids = cgroup_dir(pid1, "pids");
    assert!(init_pids.ends_with("init"), "{}", init_pids.display());
    assert_eq!(cgroup_dir(daemon, "pids"), init_pids);
    assert!(
        !cgroup_dir(monitor, "pids").starts_with(init_pids.parent().unwrap()),
        "the monitor is in the Sandbox's cgroup: {}",
        cgroup_dir(monitor, "pids").display()
    );
    let top_pids = init_pids.parent().unwrap().to_path_buf();
    assert_eq!(read_trim(&top_pids.join("pids.max")), "4096");
    let commands = top_pids.join("commands");
    let commands_max: u64 = read_trim(&commands.join("pids.max")).parse().unwrap();
    assert_eq!(commands_max, strata_sandbox::cgroup::commands_pids(4096));
    assert!(commands_max < 4096);
    let top_mem = cgroup_dir(pid1, "memory").parent().unwrap().to_path_buf();
    let mem_file = if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        "memory.max"
    } else {
        "memory.limit_in_bytes"
    };
    assert_eq!(
        read_trim(&top_mem.join(mem_file)),
        half_of_ram().to_string()
    );

    // OOM scores: never the monitor, PID 1 or the daemon; a command first.
    let want = daemon_oom_score_adj();
    for p in [monitor, daemon]
        .into_iter()
        .chain(strata_torture::children_of(monitor))
    {
        assert_eq!(oom_score_adj(p), want, "pid {p}");
    }
    let ws = sb.mount("p/main", None).await.unwrap();
    let o = ws
        .exec(["sh", "-c", "cat /proc/self/oom_score_adj; echo -1000 > /proc/self/oom_score_adj || echo refused; cat /proc/self/cgroup"])
        .output()
        .await
        .unwrap();
    let out = o.stdout_str();
    assert!(out.starts_with("500\n"), "{out}");
    assert!(
        out.contains("refused"),
        "a command lowered its oom_score_adj: {out}"
    );
    assert!(
        out.lines()
            .any(|l| l.contains("pids") && l.ends_with("/commands")
                || l.starts_with("0::") && l.ends_with("/commands")),
        "the command is not in the commands' cgroup: {out}"
    );

    // The bomb: every process starts two more, then sleeps. It doubles
    // until fork fails (EAGAIN at the commands' limit), then holds its
    // pids without burning the (shared) CPU until it is cancelled below
    // (its process group killed). The sleep outlasts the checks by far:
    // with `sleep 9` a loaded machine (load average 150 from the bomb's
    // runnable tasks and other work) let the first sleepers end before
    // the exec during the bomb was checked.
    let t0 = Instant::now();
    let mut bomb = ws
        .exec(["sh", "-c", "b() { b & b & sleep 120; }; b"])
        .timeout(Duration::from_secs(120))
        .spawn()
        .await
        .unwrap();
    let current = || -> u64 { read_trim(&commands.join("pids.current")).parse().unwrap() };
    let mut peak = 0;
    let deadline = Instant::now() + Duration::from_secs(9);
    while peak + 16 < commands_max {
        assert!(
            Instant::now() < deadline,
            "the bomb never reached the commands' limit (peak {peak} of {commands_max}, load {})",
            strata_torture::loadavg()
        );
        peak = peak.max(current());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "bomb at {peak} of {commands_max} tasks after {:?} (load {})",
        t0.elapsed(),
        strata_torture::loadavg()
    );
    // While it holds every pid the commands may have: the daemon answers
    // and starts an exec (one process: it needs no fork of its own).
    let h = tokio::time::timeout(Duration::from_secs(20), sb.health())
        .await
        .expect("health hangs during the bomb")
        .expect("health fails during the bomb");
    assert_eq!(h.status, "ok");
    let during = tokio::time::timeout(
        Duration::from_secs(20),
        ws.exec(["echo", "during-bomb"]).output(),
    )
    .await
    .expect("an exec during the bomb hangs")
    .expect("an exec during the bomb fails");
    assert_eq!(during.stdout_str(), "during-bomb\n");
    // A bomb at the limit churns: a shell whose fork fails exits, and its
    // pids are taken again by the others, so one reading can land in a
    // dip (3,160 of 3,840 was seen). The bomb is over only if none of a
    // few readings over the next 200 ms is near the limit.
    let mut still = 0;
    for _ in 0..20 {
        still = still.max(current());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    peak = peak.max(still);
    assert!(
        still + 64 >= commands_max,
        "the bomb was over before the exec ({still} of {commands_max})"
    );
    // Migration (the exec helper joining) may pass the limit by the few
    // helpers in flight; forks never do.
    assert!(peak <= commands_max + 8, "{peak} > {commands_max}");
    let total: u64 = read_trim(&top_pids.join("pids.current")).parse().unwrap();
    assert!(total <= 4096, "{total}");
    assert!(
        bomb.cancel().await.unwrap().cancelled,
        "the bomb was not cancelled"
    );

    // Closed cleanly: no process, no cgroup left.
    let mut all = descendants_of(monitor);
    all.push(monitor);
    sb.close().await.unwrap();
    for p in all {
        wait_gone(p, Duration::from_secs(20)).await;
    }
    assert!(!top_pids.exists(), "{} left", top_pids.display());
    assert!(!top_mem.exists(), "{} left", top_mem.display());
}

async fn no_limits_means_none_and_oom_scores_hold(dir: &Path) {
    let store = store_with_project(dir).await;
    let mut sp = spec(&store);
    sp.no_limits = true;
    let sb = Sandbox::create(sp).await.unwrap();
    assert_eq!(sb.info().config.limits, Limits::default());
    let monitor = monitor_pid(&sb);
    let daemon = daemon_pid(&sb);
    for c in ["pids", "memory"] {
        let d = cgroup_dir(monitor, c);
        assert!(
            !d.to_string_lossy().contains(sb.id()),
            "a cgroup for a Sandbox without limits: {}",
            d.display()
        );
    }
    assert_eq!(oom_score_adj(monitor), daemon_oom_score_adj());
    assert_eq!(oom_score_adj(daemon), daemon_oom_score_adj());
    let ws = sb.mount("p/main", None).await.unwrap();
    let o = ws
        .exec(["cat", "/proc/self/oom_score_adj"])
        .output()
        .await
        .unwrap();
    assert_eq!(o.stdout_str(), "500\n");
    sb.close().await.unwrap();
}

async fn planted_report_paths_change_nothing(dir: &Path) {
    let store = store_with_project(dir).await;
    let sb = Sandbox::create(spec(&store)).await.unwrap();
    let ws = sb.mount("p/main", None).await.unwrap();
    let daemon = daemon_pid(&sb);
    // Where the report used to be (the run directory in the Sandbox's
    // /tmp, one directory per exec) and other guessable names: FIFOs
    // (a blocking open/read) and symlinks to /dev/zero (an endless read).
    let plant = "set -e; d=/tmp/.strata-execs; mkdir -p $d/x0000000000000000; \
        mkfifo $d/failure.json $d/x0000000000000000/failure.json /tmp/failure.json; \
        ln -s /dev/zero $d/report.json; ln -s /dev/zero $d/failure.tmp; \
        ln -s /dev/zero /tmp/report.json; ls -la $d";
    let o = ws.exec(["sh", "-c", plant]).output().await.unwrap();
    assert!(o.status.success(), "planting failed: {}", o.stderr_str());
    let rss_before = proc_status_kb(daemon, "VmRSS").unwrap();
    for _ in 0..5 {
        let t = Instant::now();
        let r = tokio::time::timeout(
            Duration::from_secs(20),
            ws.exec(["/no/such/program"]).output(),
        )
        .await
        .expect("a failing exec hangs (a planted FIFO blocked the daemon?)");
        match r {
            Err(Error::ExecFailed { errno, message, .. }) => {
                assert_eq!(errno, Some(libc::ENOENT), "{message}");
                assert!(message.contains("/no/such/program"), "{message}");
            }
            other => panic!("expected ExecFailed with ENOENT, got {other:?}"),
        }
        eprintln!("missing program reported in {:?}", t.elapsed());
    }
    // A command's own exit 127 is its status, not a helper failure.
    let o = ws.exec(["sh", "-c", "exit 127"]).output().await.unwrap();
    assert_eq!(o.status.code, Some(127));
    let rss_after = proc_status_kb(daemon, "VmRSS").unwrap();
    eprintln!("daemon VmRSS {rss_before} kB -> {rss_after} kB");
    assert!(
        rss_after < rss_before + 32 * 1024,
        "the daemon grew from {rss_before} to {rss_after} kB"
    );
    assert_eq!(sb.health().await.unwrap().status, "ok");
    sb.close().await.unwrap();
}

async fn no_argv_carries_a_secret_or_the_config(dir: &Path) {
    let store = store_with_project(dir).await;
    let sb = Sandbox::create(spec(&store)).await.unwrap();
    let ws = sb.mount("p/main", None).await.unwrap();
    let secret = format!("s3cret-{:016x}", rand::random::<u64>());
    let token = read_trim(&sb.info().token_file);
    let mut slow = ws
        .exec(["sleep", "5"])
        .env("STRATA_TEST_SECRET", secret.as_str())
        .spawn()
        .await
        .unwrap();
    let monitor = monitor_pid(&sb);
    // `spawn` returns once the exec is started, which may be before its
    // helper has replaced itself with `sleep` (the first exec of a Sandbox
    // also builds the commands' namespace first): wait until the command
    // is there, or both checks below would look at the helper instead.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !descendants_of(monitor)
        .into_iter()
        .any(|p| cmdline(p).first().map(Vec::as_slice) == Some(&b"sleep"[..]))
    {
        assert!(Instant::now() < deadline, "`sleep 5` never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // From the host, as root: every process of the Sandbox.
    let store_dir = store.dir().display().to_string();
    let mut seen = 0;
    for p in std::iter::once(monitor).chain(descendants_of(monitor)) {
        let argv = cmdline(p);
        let text = String::from_utf8_lossy(&argv.concat()).into_owned();
        seen += 1;
        for bad in [secret.as_str(), token.as_str(), "{", store_dir.as_str()] {
            assert!(
                !text.contains(bad),
                "pid {p}'s argv holds {bad:?}: {argv:?}"
            );
        }
    }
    assert!(seen >= 4, "monitor, PID 1, daemon, command: {seen}");
    // The init's argv is its role and a descriptor number, nothing else.
    let argv = cmdline(monitor);
    assert_eq!(argv.len(), 3, "{argv:?}");
    assert_eq!(argv[1], strata_sandbox::INIT_ARG.as_bytes());
    assert!(argv[2].iter().all(u8::is_ascii_digit), "{argv:?}");
    // From inside, as the commands' uid: whatever /proc shows.
    let o = ws
        .exec([
            "sh",
            "-c",
            "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done",
        ])
        .output()
        .await
        .unwrap();
    let out = o.stdout_str();
    assert!(out.contains("sleep 5"), "{out}");
    for bad in [secret.as_str(), token.as_str(), "{\""] {
        assert!(!out.contains(bad), "a command read {bad:?} in: {out}");
    }
    let _ = slow.cancel().await;
    sb.close().await.unwrap();
}

async fn a_symlink_in_a_mount_path_does_not_move_the_mount(dir: &Path) {
    let store = store_with_project(dir).await;
    let sb = Sandbox::create(spec(&store)).await.unwrap();
    let ws = sb.mount("p/main", None).await.unwrap();
    let daemon = daemon_pid(&sb);
    let o = ws
        .exec([
            "sh",
            "-c",
            "set -e; mkdir /tmp/target; ln -s /tmp/target /tmp/x; ln -s /etc /tmp/e",
        ])
        .output()
        .await
        .unwrap();
    assert!(o.status.success(), "{}", o.stderr_str());
    for (at, link) in [
        ("/tmp/x/ws", "/tmp/x"),
        ("/tmp/e/ws", "/tmp/e"),
        ("/tmp/x", "/tmp/x"),
    ] {
        let e = sb
            .mount("p/main", Some(at))
            .await
            .expect_err("a mount through a symlink was accepted");
        let msg = e.to_string();
        assert!(
            msg.contains(link) && msg.contains("symlink"),
            "{at}: the error does not name the symlink: {msg}"
        );
    }
    let mountinfo = std::fs::read_to_string(format!("/proc/{daemon}/mountinfo")).unwrap();
    for p in ["/tmp/target", "/tmp/target/ws", "/etc/ws"] {
        assert!(
            !mountinfo.lines().any(|l| l.split(' ').nth(4) == Some(p)),
            "something is mounted at {p}: {mountinfo}"
        );
    }
    let o = ws.exec(["ls", "-A", "/tmp/target"]).output().await.unwrap();
    assert_eq!(
        o.stdout_str(),
        "",
        "the daemon created something through the symlink"
    );
    // A path of real directories works, created as needed.
    let other = sb.mount("p/main", Some("/tmp/real/ws")).await.unwrap();
    let o = other.exec(["cat", "f"]).output().await.unwrap();
    assert_eq!(o.stdout_str(), "base\n");
    sb.close().await.unwrap();
}
