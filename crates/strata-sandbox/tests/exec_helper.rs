//! The exec helper (`__strata-exec`), the path the daemon uses for B7, and
//! /dev/fuse: in the daemon's view, never in a command's.

mod common;
use common::*;
use std::process::Stdio;
use strata_sandbox::{Outcome, SandboxCommand, SandboxConfig};

/// /srv, where the probe as "daemon" mounts (the host view has no /srv).
fn srv() -> Vec<std::path::PathBuf> {
    vec!["/srv".into()]
}

/// Run the probe as the Sandbox's privileged "daemon" with /dev/fuse.
fn as_daemon(args: &[&str]) -> (Outcome, String, String) {
    require_root();
    let s = probe(args);
    let cfg = SandboxConfig {
        dev_fuse: true,
        mountpoints: srv(),
        ..SandboxConfig::default()
    };
    let child = SandboxCommand::privileged(with_probe(cfg), s.argv, s.env, s.cwd)
        .init_exe(PROBE)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let (o, a, b) = child.wait_with_output().expect("run");
    (
        o,
        String::from_utf8_lossy(&a).into_owned(),
        String::from_utf8_lossy(&b).into_owned(),
    )
}

#[test]
fn daemon_sees_dev_fuse_and_commands_do_not() {
    assert!(
        std::path::Path::new("/dev/fuse").exists(),
        "this test needs /dev/fuse on the host (CI machines have it)"
    );
    let (o, out, err) = as_daemon(&["ls", "/dev"]);
    assert_eq!(o, Outcome::Exited(0), "stderr: {err}");
    assert!(
        out.lines().any(|l| l == "fuse"),
        "daemon view lacks /dev/fuse: {out}"
    );

    // A command started by the daemon through the exec helper.
    let (o, out, err) = as_daemon(&["helper-run", PROBE, "ls", "/dev"]);
    assert_eq!(o, Outcome::Exited(0), "stdout: {out} stderr: {err}");
    assert!(
        !out.lines().any(|l| l == "fuse"),
        "command sees /dev/fuse: {out}"
    );
    assert!(out.lines().any(|l| l == "null"), "{out}");

    // A command run directly by the init in a dev_fuse Sandbox.
    let cfg = SandboxConfig {
        dev_fuse: true,
        ..SandboxConfig::default()
    };
    let (o, out, _) = run_in(cfg, probe(&["ls", "/dev"]));
    assert_eq!(o, Outcome::Exited(0));
    assert!(
        !out.lines().any(|l| l == "fuse"),
        "command sees /dev/fuse: {out}"
    );
}

#[test]
fn helper_drops_privileges_inside_the_sandbox() {
    let (o, out, err) = as_daemon(&["helper-run", PROBE, "status"]);
    assert_eq!(o, Outcome::Exited(0), "stdout: {out} stderr: {err}");
    for want in [
        "Uid:\t1500\t1500\t1500\t1500",
        "CapEff:\t0000000000000000",
        "CapBnd:\t0000000000000000",
        "NoNewPrivs:\t1",
        "Seccomp:\t2",
    ] {
        assert!(out.contains(want), "{want:?} missing in {out}");
    }
    let (o, _, err) = as_daemon(&["helper-run", "unshare", "-U", "true"]);
    assert_ne!(
        o,
        Outcome::Exited(0),
        "unshare -U succeeded through the helper: {err}"
    );
}

#[test]
fn helper_reports_a_missing_program() {
    let (o, out, _) = as_daemon(&["helper-run", "/no/such/program"]);
    assert_eq!(o, Outcome::Exited(3), "{out}");
    assert!(out.contains("helper-failure:"), "{out}");
    assert!(
        out.contains(&format!("\"errno\":{}", libc::ENOENT)),
        "{out}"
    );
}

#[test]
fn helper_exit_code_passes_through() {
    let (o, out, _) = as_daemon(&["helper-run", PROBE, "exit", "42"]);
    assert_eq!(o, Outcome::Exited(42), "{out}");
}

#[test]
fn daemon_mounts_made_later_reach_a_running_command() {
    let (o, out, err) = as_daemon(&["propagation"]);
    assert_eq!(o, Outcome::Exited(0), "stderr: {err}");
    assert!(
        out.lines().any(|l| l == "marker"),
        "the command did not see the later mount: {out}"
    );
}

#[test]
fn bind_mounts_reach_the_command_rw_and_ro() {
    require_root();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .expect("chmod");
    let cfg = |readonly| SandboxConfig {
        binds: vec![strata_sandbox::BindMount {
            source: dir.path().into(),
            target: "/srv".into(),
            readonly,
        }],
        ..SandboxConfig::default()
    };
    let (o, out, err) = run_in(cfg(false), probe(&["try-create", "/srv/by-command"]));
    assert_eq!(o, Outcome::Exited(0), "stderr: {err}");
    assert_eq!(out.trim(), "ok");
    let (o, _, _) = run_in(cfg(false), spec(&["sh", "-c", "echo hi > /srv/kept"]));
    assert_eq!(o, Outcome::Exited(0));
    let meta = std::fs::metadata(dir.path().join("kept")).expect("file written by the command");
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), 1500);
    assert_eq!(std::os::unix::fs::MetadataExt::gid(&meta), 1500);
    let (o, out, _) = run_in(cfg(true), probe(&["try-create", "/srv/nope"]));
    assert_eq!(o, Outcome::Exited(0));
    assert_eq!(out.trim(), format!("errno={}", libc::EROFS));
}

#[test]
fn cancel_signals_the_whole_process_group() {
    let (o, out, err) = as_daemon(&["cancel-group"]);
    assert_eq!(o, Outcome::Exited(0), "stderr: {err}");
    assert_eq!(
        out.trim(),
        format!("before=2 signal=Some({}) leftover=0", libc::SIGTERM),
        "{out}"
    );
}

#[test]
fn sandbox_mounts_are_invisible_to_the_host_and_other_sandboxes() {
    require_root();
    use std::io::{BufRead, BufReader};
    let name = format!("strata-sb-marker-{}", std::process::id());
    let s = probe(&["mount-and-wait", &name]);
    let cfg = SandboxConfig {
        mountpoints: srv(),
        ..default_config()
    };
    let mut daemon = SandboxCommand::privileged(cfg, s.argv, s.env, s.cwd)
        .init_exe(PROBE)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let stdout = daemon.child_mut().stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("read");
    assert_eq!(line.trim(), "mounted");
    let host = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    assert!(!host.contains(&name), "the host sees the Sandbox's mount");
    let (o, other, _) = run(probe(&["cat", "/proc/self/mountinfo"]));
    assert_eq!(o, Outcome::Exited(0));
    assert!(!other.contains(&name), "another Sandbox sees the mount");
    drop(daemon.child_mut().stdin.take());
    assert_eq!(daemon.wait().expect("wait"), Outcome::Exited(0));
}
