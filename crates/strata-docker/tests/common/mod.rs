//! Setup of the docker backend's tests: a running Engine (started with
//! `scripts/dockerd.sh start` when none answers), the static binaries the
//! containers run, and a minimal image built here from Debian's
//! busybox-static, imported through the Engine API (no registry).
//!
//! Nothing here skips: a machine without docker.io, busybox-static or the
//! static binaries FAILS every test with the reason and what to do.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use strata_docker::{Engine, DEFAULT_SOCKET};

/// Directory of the statically linked binaries (`strata-daemon` and
/// `strata-sandbox-fake-daemon`), as .ci/run builds them.
pub const STATIC_DIR_ENV: &str = "STRATA_STATIC_DIR";
pub const IMAGE_REPO: &str = "strata-test-busybox";
pub const IMAGE_TAG: &str = "contract";

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn require_root() {
    assert!(
        rustix::process::geteuid().is_root(),
        "the docker backend's tests start dockerd and containers and must run as root (CI does)"
    );
}

/// `name` in the static binaries' directory; fails with the build command.
pub fn static_bin(name: &str) -> PathBuf {
    let dir = std::env::var_os(STATIC_DIR_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/x86_64-unknown-linux-gnu/release"));
    let p = dir.join(name);
    if let Err(e) = strata_docker::check_static(&p) {
        panic!(
            "the docker tests need statically linked binaries (images have no glibc): {e}\n\
             build them with:\n  RUSTFLAGS=\"-C target-feature=+crt-static\" cargo build --release \
             --target x86_64-unknown-linux-gnu -p strata-daemon -p strata-sandbox --bins\n\
             (or set {STATIC_DIR_ENV} to the directory holding `strata-daemon` and \
             `strata-sandbox-fake-daemon`); .ci/run does this before `cargo test`"
        );
    }
    p.canonicalize().unwrap()
}

/// The Engine, started by scripts/dockerd.sh if none answers.
pub fn engine() -> Engine {
    static STARTED: OnceLock<Result<(), String>> = OnceLock::new();
    require_root();
    let started = STARTED.get_or_init(|| {
        if Engine::connect(DEFAULT_SOCKET).is_ok() {
            return Ok(());
        }
        let out = std::process::Command::new("bash")
            .arg(workspace_root().join("scripts/dockerd.sh"))
            .arg("start")
            .output()
            .map_err(|e| format!("run scripts/dockerd.sh: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "scripts/dockerd.sh start failed ({}):\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    });
    if let Err(e) = started {
        panic!("no Docker Engine for the docker backend's tests: {e}");
    }
    Engine::connect(DEFAULT_SOCKET)
        .unwrap_or_else(|e| panic!("the Docker Engine does not answer after start: {e}"))
}

/// A root filesystem tar: busybox (static) with the applets the tests and
/// the fake daemon use, /etc/passwd, and `extra` entries (path, contents;
/// a regular file 0644).
pub fn busybox_rootfs(extra: &[(&str, &[u8])]) -> Vec<u8> {
    let busybox = Path::new("/bin/busybox");
    let bytes = std::fs::read(busybox).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; install Debian's busybox-static (apt-get install busybox-static)",
            busybox.display()
        )
    });
    strata_docker::check_static(busybox)
        .unwrap_or_else(|e| panic!("{e}: install busybox-static, not busybox"));
    let mut b = tar::Builder::new(Vec::new());
    let dir = |b: &mut tar::Builder<Vec<u8>>, p: &str, mode: u32| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(mode);
        h.set_size(0);
        b.append_data(&mut h, p, std::io::empty()).unwrap();
    };
    for (d, m) in [
        ("bin", 0o755),
        ("etc", 0o755),
        ("tmp", 0o1777),
        ("proc", 0o755),
        ("dev", 0o755),
        ("sys", 0o755),
    ] {
        dir(&mut b, d, m);
    }
    let mut h = tar::Header::new_gnu();
    h.set_mode(0o755);
    h.set_size(bytes.len() as u64);
    b.append_data(&mut h, "bin/busybox", &bytes[..]).unwrap();
    for applet in [
        "sh", "ls", "cat", "id", "echo", "sleep", "mkdir", "touch", "rm", "grep", "umount",
        "mount", "unshare", "stat", "head", "true", "false", "ps", "kill", "wc", "env",
    ] {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        h.set_mode(0o777);
        b.append_link(&mut h, format!("bin/{applet}"), "busybox")
            .unwrap();
    }
    let passwd = b"root:x:0:0:root:/root:/bin/sh\nagent:x:1500:1500:agent:/tmp:/bin/sh\n";
    let mut h = tar::Header::new_gnu();
    h.set_mode(0o644);
    h.set_size(passwd.len() as u64);
    b.append_data(&mut h, "etc/passwd", &passwd[..]).unwrap();
    for (p, data) in extra {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, p.trim_start_matches('/'), *data)
            .unwrap();
    }
    b.into_inner().unwrap()
}

/// The tests' image (imported once per test process), as `repo:tag`.
pub fn image() -> String {
    static IMAGE: OnceLock<String> = OnceLock::new();
    IMAGE
        .get_or_init(|| {
            engine()
                .import_image(busybox_rootfs(&[]), IMAGE_REPO, IMAGE_TAG)
                .unwrap_or_else(|e| panic!("import the busybox test image: {e}"));
            format!("{IMAGE_REPO}:{IMAGE_TAG}")
        })
        .clone()
}
