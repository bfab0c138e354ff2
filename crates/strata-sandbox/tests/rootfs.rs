//! A Sandbox on a rootfs directory instead of the host root.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use strata_sandbox::{Outcome, RootFs, SandboxConfig};

/// A minimal rootfs: the probe binary at /probe and the shared libraries
/// `ldd` names, at their host paths (none for a static probe).
fn make_rootfs(dir: &Path) {
    let out = std::process::Command::new("ldd")
        .arg(PROBE)
        .output()
        .expect("run ldd");
    assert!(
        out.status.success(),
        "ldd failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut libs: Vec<PathBuf> = Vec::new();
    for l in text.lines() {
        let path = match l.split_once("=>") {
            Some((_, r)) => r.split_whitespace().next(),
            None => l.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            libs.push(p.into());
        }
    }
    // A static probe (the workspace's default, .cargo/config.toml) needs
    // no libraries; a dynamic one needs at least libc.
    assert!(
        !libs.is_empty() || text.contains("statically linked"),
        "no libraries found in ldd output: {text}"
    );
    for lib in libs {
        let dst = dir.join(lib.strip_prefix("/").unwrap());
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(&lib, &dst).unwrap_or_else(|e| panic!("copy {lib:?}: {e}"));
    }
    std::fs::copy(PROBE, dir.join("probe")).expect("copy probe");
}

#[test]
fn rootfs_dir_is_the_root_and_read_only() {
    require_root();
    let tmp = tempfile::tempdir().expect("tempdir");
    make_rootfs(tmp.path());
    let cfg = SandboxConfig {
        root: RootFs::Dir {
            path: tmp.path().into(),
            readonly: true,
        },
        ..SandboxConfig::default()
    };
    let (o, out, err) = run_in(cfg.clone(), spec(&["/probe", "ls", "/"]));
    assert_eq!(o, Outcome::Exited(0), "stderr: {err}");
    let names: Vec<&str> = out.lines().collect();
    for want in ["dev", "probe", "proc", "sys", "tmp"] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    assert!(!names.contains(&"usr"), "host root leaked: {names:?}");
    let (o, out, _) = run_in(cfg.clone(), spec(&["/probe", "try-create", "/newfile"]));
    assert_eq!(o, Outcome::Exited(0));
    assert_eq!(out.trim(), format!("errno={}", libc::EROFS));
    let (o, out, _) = run_in(cfg.clone(), spec(&["/probe", "status"]));
    assert_eq!(o, Outcome::Exited(0));
    assert!(out.contains("CapEff:\t0000000000000000"), "{out}");
    // A program the rootfs lacks is an ENOENT error, not exit 127.
    let r = strata_sandbox::SandboxCommand::new(cfg, spec(&["/bin/sh", "-c", "true"]))
        .init_exe(PROBE)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn")
        .wait();
    assert!(
        matches!(r, Err(strata_sandbox::RunError::Sandbox(ref f)) if f.errno == Some(libc::ENOENT)),
        "{r:?}"
    );
}
