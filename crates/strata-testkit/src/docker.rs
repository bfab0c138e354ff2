//! Setup of the docker backend's tests: a running Engine (started with
//! `scripts/dockerd.sh start` when none answers), the static binaries the
//! containers run (from this test's own build directory), and a minimal
//! image built here from Debian's busybox-static, imported through the
//! Engine API (no registry).
//!
//! Nothing here skips: a machine without docker.io, busybox-static or the
//! static binaries FAILS every test with the reason and what to do
//! (`scripts/test` sets all of it up).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use strata_docker::{Engine, DEFAULT_SOCKET};

/// Directory of the statically linked binaries (`strata-daemon` and
/// `strata-sandbox-fake-daemon`) when they are not in this test's own
/// build directory.
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

/// The build directory this test binary was built into
/// (`target/<host tuple>/<profile>`; the test is `deps/NAME-HASH` below it).
fn own_build_dir() -> PathBuf {
    let me = std::env::current_exe().expect("current_exe");
    me.parent()
        .and_then(Path::parent)
        .expect("a test binary lives in <build dir>/deps/")
        .to_path_buf()
}

/// `name` from `$STRATA_STATIC_DIR`, else from this test's own build
/// directory: the workspace links every binary statically
/// (.cargo/config.toml), and `cargo test --workspace` builds
/// `strata-daemon` and `strata-sandbox-fake-daemon` with the tests. Fails
/// with the command that builds them.
pub fn static_bin(name: &str) -> PathBuf {
    let (dir, from_env) = match std::env::var_os(STATIC_DIR_ENV) {
        Some(d) if !d.is_empty() => (PathBuf::from(d), true),
        _ => (own_build_dir(), false),
    };
    let p = dir.join(name);
    if let Err(e) = strata_docker::check_static(&p) {
        let profile = if dir.ends_with("release") {
            " --release"
        } else {
            ""
        };
        panic!(
            "the docker tests upload statically linked binaries into containers (images have no glibc): {e}\n\
             {}build them with:\n  cargo build{profile} -p strata-daemon -p strata-sandbox --bins\n\
             (static by the workspace's .cargo/config.toml; a RUSTFLAGS environment variable \
             replaces that setting: unset it). scripts/test does this before the tests.",
            if from_env {
                format!("{STATIC_DIR_ENV} names {}; unset it or ", dir.display())
            } else {
                String::new()
            }
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
