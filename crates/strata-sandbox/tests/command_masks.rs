//! `SandboxConfig::command_masked_paths`: hidden from commands, kept for
//! the privileged daemon (with `dev_fuse`); for everyone without it.

mod common;
use common::*;
use std::process::Stdio;
use strata_sandbox::{BindMount, Outcome, SandboxCommand, SandboxConfig};

/// `dir` is bound at its host path (the host view does not show /var/tmp),
/// then masked for commands.
fn config(dev_fuse: bool, dir: &std::path::Path) -> SandboxConfig {
    SandboxConfig {
        dev_fuse,
        binds: vec![BindMount {
            source: dir.into(),
            target: dir.into(),
            readonly: true,
        }],
        command_masked_paths: vec![dir.into(), "/etc/hostname".into(), "/no/such/path".into()],
        ..SandboxConfig::default()
    }
}

fn as_daemon(cfg: SandboxConfig, args: &[&str]) -> (Outcome, String, String) {
    require_root();
    let s = probe(args);
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

fn secret_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    std::fs::write(d.path().join("secret"), "s").unwrap();
    // World-readable: only the mask can keep a command from listing it.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

#[test]
fn the_daemon_sees_them_and_its_commands_do_not() {
    assert!(
        std::path::Path::new("/dev/fuse").exists(),
        "this test needs /dev/fuse on the host (CI machines have it)"
    );
    let d = secret_dir();
    let dir = d.path().to_str().unwrap();
    let (o, out, err) = as_daemon(config(true, d.path()), &["ls", dir]);
    assert_eq!(o, Outcome::Exited(0), "stderr: {err}");
    assert_eq!(out.trim(), "secret", "the daemon lost the path");
    let (o, out, err) = as_daemon(config(true, d.path()), &["cat", "/etc/hostname"]);
    assert_eq!(o, Outcome::Exited(0), "stderr: {err}");
    assert!(!out.trim().is_empty(), "the daemon lost /etc/hostname");

    // Through the exec helper: masked (empty directory, empty file).
    let (o, out, err) = as_daemon(config(true, d.path()), &["helper-run", PROBE, "ls", dir]);
    assert_eq!(o, Outcome::Exited(0), "stdout: {out} stderr: {err}");
    assert_eq!(out.trim(), "", "a command sees the masked directory");
    let (o, out, err) = as_daemon(
        config(true, d.path()),
        &["helper-run", PROBE, "cat", "/etc/hostname"],
    );
    assert_eq!(o, Outcome::Exited(0), "stdout: {out} stderr: {err}");
    assert_eq!(out.trim(), "", "a command reads the masked file");

    // A command run directly by the init of such a Sandbox: masked too.
    let (o, out, _) = run_in(config(true, d.path()), probe(&["ls", dir]));
    assert_eq!(o, Outcome::Exited(0));
    assert_eq!(out.trim(), "");
}

#[test]
fn without_dev_fuse_they_are_masked_for_everyone() {
    let d = secret_dir();
    let dir = d.path().to_str().unwrap();
    let (o, out, err) = as_daemon(config(false, d.path()), &["ls", dir]);
    assert_eq!(o, Outcome::Exited(0), "stderr: {err}");
    assert_eq!(out.trim(), "");
}

#[test]
fn bad_paths_are_refused() {
    require_root();
    let cfg = SandboxConfig {
        command_masked_paths: vec!["relative".into()],
        ..SandboxConfig::default()
    };
    let e = SandboxCommand::new(cfg, spec(&["/bin/true"]))
        .init_exe(PROBE)
        .spawn()
        .expect_err("a relative mask was accepted");
    assert!(e.to_string().contains("masked path"), "{e}");
}
