//! Host FUSE mounts do not leak into a Sandbox built on the host root.

mod common;
use common::*;
use std::time::{Duration, Instant};
use strata_sandbox::{Outcome, SandboxCommand, SandboxConfig};

struct NullFs;
impl fuser::Filesystem for NullFs {}

fn fuse_mounts_in(mountinfo: &str) -> Vec<&str> {
    mountinfo
        .lines()
        .filter(|l| {
            l.split_once(" - ")
                .and_then(|(_, r)| r.split_whitespace().next())
                .is_some_and(|t| t == "fuse" || t == "fuseblk" || t.starts_with("fuse."))
        })
        .collect()
}

#[test]
fn host_fuse_mounts_are_not_copied_into_the_sandbox() {
    require_root();
    assert!(
        std::path::Path::new("/dev/fuse").exists(),
        "this test needs /dev/fuse (CI machines have it)"
    );
    // Outside /tmp, which the Sandbox replaces anyway.
    let mp = tempfile::Builder::new()
        .prefix("strata-sandbox-hostfuse-")
        .tempdir_in("/var/tmp")
        .expect("mountpoint");
    let mut cfg = fuser::Config::default();
    cfg.mount_options = vec![fuser::MountOption::FSName("strata-sandbox-test".into())];
    let session = fuser::spawn_mount(NullFs, mp.path(), &cfg).expect("mount a FUSE filesystem");
    let host_mi = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    assert!(
        fuse_mounts_in(&host_mi)
            .iter()
            .any(|l| l.contains("strata-sandbox-test")),
        "the test mount is not visible on the host"
    );

    let (o, out, err) = run(probe(&["cat", "/proc/self/mountinfo"]));
    assert_eq!(o, Outcome::Exited(0), "stderr: {err}");
    assert_eq!(
        fuse_mounts_in(&out),
        Vec::<&str>::new(),
        "FUSE mounts visible in the Sandbox"
    );

    // While a Sandbox is running, the host can still end its FUSE session
    // at once: the Sandbox holds no reference to the superblock.
    let sandbox = SandboxCommand::new(SandboxConfig::default(), probe(&["sleep", "4000"]))
        .init_exe(PROBE)
        .spawn()
        .expect("spawn");
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    session.umount_and_join().expect("unmount");
    let took = start.elapsed();
    sandbox.signal(libc::SIGKILL).expect("kill monitor");
    let _ = sandbox.wait();
    assert!(
        took < Duration::from_secs(2),
        "host unmount waited for the Sandbox: {took:?}"
    );
}
