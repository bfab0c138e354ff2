//! `SandboxConfig::mountpoints`: empty directories such as /workspace in
//! the read-only root, without writing to the host (request 1 of
//! docs/sandbox-requests.md).

mod common;
use common::*;
use std::path::{Path, PathBuf};
use strata_sandbox::{BindMount, Outcome, RootFs, SandboxConfig};

/// A name that does not exist on the host, per test.
fn fresh(tag: &str) -> PathBuf {
    let p = PathBuf::from(format!("/strata-mp-test-{tag}-{}", std::process::id()));
    assert!(!p.exists(), "{} exists on the host already", p.display());
    p
}

fn sh(script: &str) -> strata_sandbox::ExecSpec {
    spec(&["/bin/sh", "-c", script])
}

#[test]
fn host_root_gets_mountpoints_on_a_layer_not_on_the_host() {
    require_root();
    let top = fresh("top");
    let nested = PathBuf::from("/usr/share").join(top.file_name().unwrap());
    let deep = top.join("a/b");
    let cfg = SandboxConfig {
        mountpoints: vec![top.clone(), deep.clone(), nested.clone()],
        ..SandboxConfig::default()
    };
    let script = format!(
        "stat -c '%F %u %g %a' {t} {d} {n} && ls /usr/bin/env /etc/hostname >/dev/null && \
         test -L /bin -o -d /bin && touch {t}/x 2>/dev/null && echo WROTE; echo done",
        t = top.display(),
        d = deep.display(),
        n = nested.display()
    );
    let (o, out, err) = run_in(cfg, sh(&script));
    assert_eq!(o, Outcome::Exited(0), "stdout: {out} stderr: {err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        &lines[..3],
        &["directory 0 0 755"; 3],
        "stdout: {out} stderr: {err}"
    );
    assert!(!out.contains("WROTE"), "a command wrote to a mount point");
    assert_eq!(lines.last(), Some(&"done"), "host entries missing? {err}");
    assert!(!top.exists(), "{} was created on the host", top.display());
    assert!(
        !nested.exists(),
        "{} was created on the host",
        nested.display()
    );
}

#[test]
fn existing_directories_are_left_alone_and_binds_can_target_mountpoints() {
    require_root();
    let ws = fresh("ws");
    let data = tempfile::tempdir().expect("tempdir");
    std::fs::write(data.path().join("hello"), "hi").unwrap();
    let cfg = SandboxConfig {
        mountpoints: vec![ws.clone(), "/usr".into(), "/etc".into()],
        binds: vec![BindMount {
            source: data.path().into(),
            target: ws.clone(),
            readonly: true,
        }],
        ..SandboxConfig::default()
    };
    let script = format!("cat {}/hello && ls /usr/bin/env", ws.display());
    let (o, out, err) = run_in(cfg, sh(&script));
    assert_eq!(o, Outcome::Exited(0), "stderr: {err}");
    assert!(out.starts_with("hi"), "stdout: {out}");
    assert!(!ws.exists());
}

#[test]
fn bad_mountpoints_are_refused_before_start() {
    require_root();
    for bad in ["/", "relative", "/a/../b"] {
        let cfg = SandboxConfig {
            mountpoints: vec![bad.into()],
            ..SandboxConfig::default()
        };
        let e = strata_sandbox::SandboxCommand::new(cfg, spec(&["/bin/true"]))
            .init_exe(PROBE)
            .spawn()
            .expect_err("bad mount point accepted");
        assert!(e.to_string().contains("mount point"), "{bad}: {e}");
    }
}

#[test]
fn a_file_in_the_way_is_an_error() {
    require_root();
    let cfg = SandboxConfig {
        mountpoints: vec!["/etc/hostname".into()],
        ..SandboxConfig::default()
    };
    let child = strata_sandbox::SandboxCommand::new(cfg, spec(&["/bin/true"]))
        .init_exe(PROBE)
        .spawn()
        .expect("spawn");
    let e = child
        .wait()
        .expect_err("a file was hidden by a mount point");
    assert!(e.to_string().contains("/etc/hostname"), "{e}");
}

#[test]
fn rootfs_dirs_get_mountpoints_too() {
    require_root();
    let ro = tempfile::tempdir().expect("tempdir");
    let rw = tempfile::tempdir().expect("tempdir");
    for (dir, readonly) in [(ro.path(), true), (rw.path(), false)] {
        std::fs::copy(PROBE, dir.join("probe")).expect("copy probe");
        copy_libs(dir);
        let cfg = SandboxConfig {
            root: RootFs::Dir {
                path: dir.into(),
                readonly,
            },
            mountpoints: vec!["/workspace".into()],
            ..SandboxConfig::default()
        };
        let (o, out, err) = run_in(cfg, spec(&["/probe", "ls", "/"]));
        assert_eq!(o, Outcome::Exited(0), "stderr: {err}");
        assert!(out.lines().any(|l| l == "workspace"), "{out}");
        assert!(out.lines().any(|l| l == "probe"), "{out}");
        // Read-only rootfs: a layer, the directory itself is untouched.
        // Writable rootfs: created in place, like /tmp and /proc.
        assert_eq!(dir.join("workspace").is_dir(), !readonly);
    }
}

/// The shared libraries of the probe at their host paths (see rootfs.rs).
fn copy_libs(dir: &Path) {
    let out = std::process::Command::new("ldd")
        .arg(PROBE)
        .output()
        .expect("run ldd");
    let text = String::from_utf8_lossy(&out.stdout);
    for l in text.lines() {
        let path = match l.split_once("=>") {
            Some((_, r)) => r.split_whitespace().next(),
            None => l.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            let dst = dir.join(&p[1..]);
            std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
            std::fs::copy(p, &dst).unwrap_or_else(|e| panic!("copy {p}: {e}"));
        }
    }
}
