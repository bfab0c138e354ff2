//! The native Sandbox view and process handling, in real namespaces.

mod common;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use strata_sandbox::{Outcome, RunError, SandboxCommand, SandboxConfig, SpawnError};

#[test]
fn exit_codes_come_back_exactly() {
    for code in [0, 1, 42] {
        let (o, _, err) = run(probe(&["exit", &code.to_string()]));
        assert_eq!(o, Outcome::Exited(code), "stderr: {err}");
    }
}

#[test]
fn death_by_signal_comes_back_exactly() {
    for sig in [libc::SIGKILL, libc::SIGTERM, libc::SIGSEGV] {
        let (o, _, err) = run(probe(&["kill-self", &sig.to_string()]));
        assert_eq!(o, Outcome::Signaled(sig), "stderr: {err}");
    }
}

#[test]
fn stdout_and_stderr_are_separate() {
    let (o, out, err) = run(probe(&["streams"]));
    assert_eq!(o, Outcome::Exited(0));
    assert_eq!(out, "out-0\nout-1\nout-2\nout-3\nout-4\n");
    assert_eq!(err, "err-0\nerr-1\nerr-2\nerr-3\nerr-4\n");
}

#[test]
fn stdin_reaches_the_command_and_eof_ends_it() {
    require_root();
    let mut child = SandboxCommand::new(default_config(), probe(&["stdin"]))
        .init_exe(PROBE)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    {
        use std::io::Write;
        let mut stdin = child.child_mut().stdin.take().expect("stdin");
        stdin.write_all(b"hello\nworld\n").expect("write");
    } // dropped: EOF
    let (o, out, _) = child.wait_with_output().expect("run");
    assert_eq!(o, Outcome::Exited(0));
    assert_eq!(out, b"hello\nworld\n");
}

#[test]
fn orphans_are_reaped_by_the_init() {
    let (o, out, err) = run(probe(&["orphan-zombies"]));
    assert_eq!(o, Outcome::Exited(0), "stderr: {err}");
    assert_eq!(out.trim(), "reaped");
}

#[test]
fn pid_namespace_shows_only_the_sandbox() {
    // The Sandbox's PID namespace, and of it only the command's own uid's
    // processes (hidepid=invisible): not PID 1, the init (root).
    let (o, out, _) = run(probe(&["ls", "/proc"]));
    assert_eq!(o, Outcome::Exited(0));
    let pids: Vec<u32> = out.lines().filter_map(|l| l.parse().ok()).collect();
    assert!(!pids.is_empty(), "the command does not see itself: {out}");
    assert!(
        !pids.contains(&1),
        "PID 1 (the init, root) is visible: {pids:?}"
    );
    assert!(pids.len() <= 2, "too many processes visible: {pids:?}");
    // Root in the Sandbox (the daemon's role) sees PID 1.
    let (o, out) = run_probe_as_root(&["ls", "/proc"]);
    assert_eq!(o, Outcome::Exited(0));
    let out = String::from_utf8_lossy(&out);
    assert!(
        out.lines().any(|l| l == "1"),
        "root does not see PID 1: {out}"
    );
}

/// Runs the probe with `args` as root in the Sandbox (the daemon's role,
/// `SandboxCommand::privileged`) and returns its outcome and stdout.
fn run_probe_as_root(args: &[&str]) -> (Outcome, Vec<u8>) {
    let s = probe(args);
    let child = SandboxCommand::privileged(default_config(), s.argv, s.env, s.cwd)
        .init_exe(PROBE)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let (o, out, _) = child.wait_with_output().expect("run");
    (o, out)
}

#[test]
fn dev_is_minimal_and_has_no_fuse() {
    let (o, out, _) = run(probe(&["ls", "/dev"]));
    assert_eq!(o, Outcome::Exited(0));
    let names: Vec<&str> = out.lines().collect();
    assert!(!names.contains(&"fuse"), "/dev/fuse visible: {names:?}");
    let expected = [
        "fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout", "tty",
        "urandom", "zero",
    ];
    assert_eq!(names, expected);
    // The devices work for the command.
    let (o, out, _) = run(spec(&[
        "sh",
        "-c",
        "echo x > /dev/null && head -c 4 /dev/zero | wc -c",
    ]));
    assert_eq!(o, Outcome::Exited(0));
    assert_eq!(out.trim(), "4");
}

#[test]
fn host_root_is_read_only_and_tmp_is_private() {
    // Root in the Sandbox (no permission check stops it), so only the
    // read-only mounts can refuse: EROFS (30), in a system directory and
    // in the view's own root.
    for p in [
        "/usr/strata-sandbox-rofs-check",
        "/strata-sandbox-rofs-check",
    ] {
        let (o, out) = run_probe_as_root(&["try-create", p]);
        assert_eq!(o, Outcome::Exited(0));
        assert_eq!(
            String::from_utf8_lossy(&out).trim(),
            format!("errno={}", libc::EROFS),
            "{p}"
        );
    }
    // /var/tmp (world-writable on the host) is not in the view at all.
    let (o, out, _) = run(probe(&["try-create", "/var/tmp/strata-sandbox-rofs-check"]));
    assert_eq!(o, Outcome::Exited(0));
    assert_eq!(out.trim(), format!("errno={}", libc::ENOENT));
    let marker = format!("/tmp/strata-sandbox-private-{}", std::process::id());
    let (o, out, _) = run(probe(&["try-create", &marker]));
    assert_eq!(o, Outcome::Exited(0));
    assert_eq!(out.trim(), "ok");
    let (o, _, _) = run(spec(&[
        "sh",
        "-c",
        &format!("echo hi > {marker} && test -f {marker}"),
    ]));
    assert_eq!(o, Outcome::Exited(0));
    assert!(
        !std::path::Path::new(&marker).exists(),
        "the Sandbox's /tmp leaked to the host"
    );
}

#[test]
fn network_has_only_loopback_and_it_is_up() {
    let (o, out, _) = run(probe(&["ls", "/sys/class/net"]));
    assert_eq!(o, Outcome::Exited(0));
    assert_eq!(out.trim(), "lo");
    let (o, out, _) = run(probe(&["loopback"]));
    assert_eq!(o, Outcome::Exited(0));
    assert_eq!(out.trim(), "connected");
}

#[test]
fn env_and_cwd_are_exactly_as_given() {
    let mut s = probe(&["env"]);
    s.env = vec![("ONLY".into(), "this=value".into())];
    let (o, out, _) = run(s);
    assert_eq!(o, Outcome::Exited(0));
    assert_eq!(out, "ONLY=this=value\n");
    let mut s = probe(&["cwd"]);
    s.cwd = "/tmp".into();
    let (o, out, _) = run(s);
    assert_eq!(o, Outcome::Exited(0));
    assert_eq!(out.trim(), "/tmp");
}

#[test]
fn missing_program_is_an_error_not_exit_127() {
    require_root();
    let child = SandboxCommand::new(SandboxConfig::default(), spec(&["/no/such/program"]))
        .init_exe(PROBE)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    match child.wait() {
        Err(RunError::Sandbox(f)) => {
            assert_eq!(f.errno, Some(libc::ENOENT), "{f:?}");
            assert_eq!(f.stage, "exec");
        }
        other => panic!("expected an exec failure, got {other:?}"),
    }
    // Same through PATH search.
    let child = SandboxCommand::new(SandboxConfig::default(), spec(&["no-such-program-strata"]))
        .init_exe(PROBE)
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    assert!(matches!(child.wait(), Err(RunError::Sandbox(f)) if f.errno == Some(libc::ENOENT)));
}

#[test]
fn bad_cwd_is_an_error() {
    require_root();
    let mut s = probe(&["cwd"]);
    s.cwd = "/no/such/dir".into();
    let child = SandboxCommand::new(SandboxConfig::default(), s)
        .init_exe(PROBE)
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    assert!(matches!(child.wait(), Err(RunError::Sandbox(f)) if f.errno == Some(libc::ENOENT)));
}

#[test]
fn bad_input_is_refused_before_spawning() {
    let cases = [
        {
            let mut s = probe(&["x\0y"]);
            s.argv[1] = std::ffi::OsString::from("x\0y");
            s
        },
        {
            let mut s = probe(&["env"]);
            s.env = vec![("A=B".into(), "c".into())];
            s
        },
        {
            let mut s = probe(&["cwd"]);
            s.cwd = "relative".into();
            s
        },
    ];
    for s in cases {
        let r = SandboxCommand::new(SandboxConfig::default(), s)
            .init_exe(PROBE)
            .spawn();
        assert!(matches!(r, Err(SpawnError::Spec(_))), "{r:?}");
    }
}

#[test]
fn sigterm_and_sigint_are_forwarded_to_the_command() {
    require_root();
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let child = SandboxCommand::new(SandboxConfig::default(), spec(&["sleep", "1000"]))
            .init_exe(PROBE)
            .spawn()
            .expect("spawn");
        std::thread::sleep(Duration::from_millis(300));
        let start = Instant::now();
        child.signal(sig).expect("signal");
        let o = child.wait().expect("wait");
        assert_eq!(o, Outcome::Signaled(sig));
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "took {:?}",
            start.elapsed()
        );
    }
}

#[test]
fn init_exe_without_the_hook_is_reported() {
    require_root();
    // /bin/true ignores "__strata-init" and exits 0 without a report: that
    // must not pass for the command's success.
    let child = SandboxCommand::new(default_config(), probe(&["exit", "0"]))
        .init_exe("/bin/true")
        .spawn()
        .expect("spawn");
    assert!(matches!(child.wait(), Err(RunError::NoReport { .. })));
}

#[test]
fn two_sandboxes_run_side_by_side() {
    require_root();
    let a = SandboxCommand::new(default_config(), probe(&["sleep", "300"]))
        .init_exe(PROBE)
        .spawn()
        .expect("spawn a");
    let b = SandboxCommand::new(default_config(), probe(&["exit", "42"]))
        .init_exe(PROBE)
        .spawn()
        .expect("spawn b");
    assert_eq!(b.wait().expect("b"), Outcome::Exited(42));
    assert_eq!(a.wait().expect("a"), Outcome::Exited(0));
}

/// Host pids whose command line contains `needle`.
fn host_pids_with(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmd).contains(needle) {
            out.push(pid);
        }
    }
    out
}

#[test]
fn killing_the_monitor_takes_the_whole_sandbox_down() {
    require_root();
    let needle = format!("{}", 900_000 + std::process::id() % 90_000);
    let mut child = SandboxCommand::new(default_config(), probe(&["sleep", &needle]))
        .init_exe(PROBE)
        .spawn()
        .expect("spawn");
    // The command's argv holds the needle (the init's argv does not: its
    // settings are in a memfd); PID 1 is the monitor's child.
    let deadline = Instant::now() + Duration::from_secs(5);
    while host_pids_with(&needle).is_empty() {
        assert!(Instant::now() < deadline, "sandbox did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let monitor = child.id();
    let pid1: Vec<u32> =
        std::fs::read_to_string(format!("/proc/{monitor}/task/{monitor}/children"))
            .expect("children of the monitor")
            .split_whitespace()
            .map(|p| p.parse().expect("pid"))
            .collect();
    assert_eq!(pid1.len(), 1, "{pid1:?}");
    child.child_mut().kill().expect("SIGKILL the monitor");
    assert!(matches!(child.wait(), Err(RunError::NoReport { .. })));
    // PID 1 dies of PR_SET_PDEATHSIG, and with it the whole PID namespace.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let mut left = host_pids_with(&needle);
        left.extend(
            pid1.iter()
                .filter(|p| Path::new(&format!("/proc/{p}")).exists()),
        );
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "processes left behind: {left:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn masked_paths_are_hidden() {
    require_root();
    // A stand-in for the Store: a host directory commands could otherwise read.
    let store = tempfile::tempdir().expect("tempdir");
    std::fs::write(store.path().join("secret"), b"s3cret").expect("write");
    std::fs::set_permissions(
        store.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    std::fs::set_permissions(
        store.path().join("secret"),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .expect("chmod");
    // The host's /tmp (where the tempdir lives) is replaced in the Sandbox,
    // so bind the directory in at /srv and mask /srv: the mask must win.
    let cfg = SandboxConfig {
        binds: vec![strata_sandbox::BindMount {
            source: store.path().into(),
            target: "/srv".into(),
            readonly: true,
        }],
        masked_paths: vec![
            "/srv".into(),
            "/etc/hostname".into(),
            "/no/such/path".into(),
        ],
        ..SandboxConfig::default()
    };
    let (o, out, err) = run_in(cfg.clone(), probe(&["ls", "/srv"]));
    assert_eq!(o, Outcome::Exited(0), "stderr: {err}");
    assert_eq!(out, "", "masked directory is not empty");
    let (o, out, _) = run_in(cfg, probe(&["cat", "/etc/hostname"]));
    assert_eq!(o, Outcome::Exited(0));
    assert_eq!(out, "", "masked file is not empty");
    // Without the mask the bind shows the file (the test is meaningful).
    let cfg = SandboxConfig {
        binds: vec![strata_sandbox::BindMount {
            source: store.path().into(),
            target: "/srv".into(),
            readonly: true,
        }],
        ..SandboxConfig::default()
    };
    let (_, out, _) = run_in(cfg, probe(&["cat", "/srv/secret"]));
    assert_eq!(out, "s3cret");
}

#[test]
fn host_run_and_proc_internals_are_masked() {
    let (o, out, _) = run(probe(&["ls", "/run"]));
    assert_eq!(o, Outcome::Exited(0));
    assert_eq!(out, "", "host /run (its sockets) visible: {out}");
    let (o, out, _) = run(probe(&["cat", "/proc/keys"]));
    assert_eq!(o, Outcome::Exited(0));
    assert_eq!(out, "");
}

#[test]
fn a_symlink_out_of_the_root_is_refused_as_a_mask() {
    require_root();
    let root = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::symlink("/etc", root.path().join("escape")).expect("symlink");
    for d in ["tmp", "proc", "sys", "dev"] {
        std::fs::create_dir(root.path().join(d)).expect("mkdir");
    }
    let cfg = SandboxConfig {
        root: strata_sandbox::RootFs::Dir {
            path: root.path().into(),
            readonly: true,
        },
        masked_paths: vec!["/escape".into()],
        ..SandboxConfig::default()
    };
    let child = SandboxCommand::new(cfg, spec(&["/probe"]))
        .init_exe(PROBE)
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    match child.wait() {
        Err(RunError::Sandbox(f)) => assert_eq!(f.stage, "mount", "{f:?}"),
        other => panic!("expected a mount failure, got {other:?}"),
    }
}

#[test]
fn report_at_a_chosen_path_outlives_the_handle() {
    require_root();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("report.json");
    let child = SandboxCommand::new(default_config(), probe(&["exit", "7"]))
        .init_exe(PROBE)
        .report_path(&path)
        .process_group(0)
        .spawn()
        .expect("spawn");
    assert_eq!(child.wait().expect("wait"), Outcome::Exited(7));
    assert_eq!(
        strata_sandbox::read_report(&path).expect("read"),
        Some(strata_sandbox::Report::Finished(Outcome::Exited(7)))
    );
    // An existing report path is refused (no planting, no reuse).
    let r = SandboxCommand::new(default_config(), probe(&["exit", "0"]))
        .init_exe(PROBE)
        .report_path(&path)
        .spawn();
    assert!(matches!(r, Err(SpawnError::ReportDir { .. })), "{r:?}");
    assert_eq!(
        strata_sandbox::read_report(&dir.path().join("none")).expect("read"),
        None
    );
}

#[test]
fn bad_config_is_refused_before_spawning() {
    let bad = [
        SandboxConfig {
            hostname: Some("x".repeat(65)),
            ..SandboxConfig::default()
        },
        SandboxConfig {
            cgroup_name: Some("../escape".into()),
            ..SandboxConfig::default()
        },
        SandboxConfig {
            masked_paths: vec!["relative".into()],
            ..SandboxConfig::default()
        },
        SandboxConfig {
            root: strata_sandbox::RootFs::Dir {
                path: "/no/such/rootfs".into(),
                readonly: true,
            },
            ..SandboxConfig::default()
        },
        SandboxConfig {
            binds: vec![strata_sandbox::BindMount {
                source: "/no/such/source".into(),
                target: "/srv".into(),
                readonly: true,
            }],
            ..SandboxConfig::default()
        },
        SandboxConfig {
            binds: vec![strata_sandbox::BindMount {
                source: "/".into(),
                target: "/srv/../etc".into(),
                readonly: true,
            }],
            ..SandboxConfig::default()
        },
    ];
    for cfg in bad {
        let r = SandboxCommand::new(cfg.clone(), probe(&["exit", "0"]))
            .init_exe(PROBE)
            .spawn();
        assert!(matches!(r, Err(SpawnError::Config(_))), "{cfg:?} -> {r:?}");
    }
}

#[test]
fn hostname_is_the_sandboxes_own() {
    let cfg = SandboxConfig {
        hostname: Some("sb-test".into()),
        ..SandboxConfig::default()
    };
    let (o, out, _) = run_in(cfg, probe(&["cat", "/proc/sys/kernel/hostname"]));
    assert_eq!(o, Outcome::Exited(0));
    assert_eq!(out.trim(), "sb-test");
}

#[test]
fn host_network_on_request() {
    let cfg = SandboxConfig {
        network: strata_sandbox::Network::Host,
        ..SandboxConfig::default()
    };
    let (o, out, err) = run_in(cfg.clone(), probe(&["ls", "/sys/class/net"]));
    assert_eq!(o, Outcome::Exited(0), "stderr: {err}");
    let mut host: Vec<String> = std::fs::read_dir("/sys/class/net")
        .expect("host interfaces")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    host.sort();
    assert_eq!(out.lines().collect::<Vec<_>>(), host);
    // /sys stays read-only for the command.
    let (_, out, _) = run_in(cfg, probe(&["try-create", "/sys/x"]));
    assert_eq!(out.trim(), format!("errno={}", libc::EROFS));
}

#[test]
fn mountinfo_shows_only_the_sandbox_view() {
    let (o, out, _) = run(probe(&["cat", "/proc/self/mountinfo"]));
    assert_eq!(o, Outcome::Exited(0));
    let points: Vec<&str> = out.lines().filter_map(|l| l.split(' ').nth(4)).collect();
    for p in ["/", "/tmp", "/proc", "/sys", "/dev"] {
        assert_eq!(
            points.iter().filter(|x| **x == p).count(),
            1,
            "{p} in {points:?}"
        );
    }
    for p in &points {
        let hidden_host =
            p.starts_with("/sys/fs") || p.starts_with("/proc/sys") || *p == "/dev/mqueue";
        assert!(
            !hidden_host,
            "host mount {p} copied into the Sandbox: {points:?}"
        );
    }
}
