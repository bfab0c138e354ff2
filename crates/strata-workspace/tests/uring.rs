//! The io_uring transport (src/uring): requests really go through the
//! rings, their answers are the Workspace's, and unmounting ends every
//! ring thread. Needs root, /dev/fuse and FUSE io_uring enabled
//! (/sys/module/fuse/parameters/enable_uring = Y, which scripts/test turns on);
//! without it the test fails with the reason (scripts/test leaves it out by
//! name, saying so, when STRATA_TEST_URING=0 says the kernel has none).

mod common;

use common::fixture;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use strata_workspace::{MountOptions, Transport};

/// The tests here count this process's ring threads: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn ring_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|c| c.starts_with("strata-ring"))
        .count()
}

#[test]
fn requests_go_through_the_rings_and_unmount_ends_their_threads() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let probe = strata_workspace::uring::probe();
    assert!(
        probe.usable(),
        "FUSE io_uring is not usable here: {probe}; the io_uring transport cannot be tested"
    );
    let f = fixture();
    let ws = f.create();
    let opts = MountOptions {
        transport: Transport::IoUring,
        ..Default::default()
    };
    let before = ring_threads();
    let h = ws.mount(&f.mnt, &opts).expect("mount over io_uring");
    assert_eq!(h.transport(), "io_uring");
    assert_eq!(
        ring_threads(),
        before + probe.queues,
        "one thread per queue"
    );
    let served = h.ring_requests().expect("a ring counter");

    // Lower-layer reads, including one larger than a ring entry's 1 MiB
    // payload buffer (several READs).
    assert_eq!(std::fs::read(f.p("hello.txt")).unwrap(), b"hello world\n");
    let big = std::fs::read(f.p("big.bin")).unwrap();
    assert_eq!(big.len(), 3_000_000);
    assert!(big.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8));
    assert_eq!(
        std::fs::read_link(f.p("link")).unwrap().to_str(),
        Some("hello.txt")
    );
    let after_reads = served.get();
    assert!(after_reads > 0, "no request went through the rings");

    // Writes (2.5 MiB in one write(2): split by the kernel at max_write),
    // names, attributes, xattrs, listings.
    let data: Vec<u8> = (0..2_621_440u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(f.p("new.bin"), &data).unwrap();
    let mut fh = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(f.p("new.bin"))
        .unwrap();
    fh.seek(SeekFrom::Start(1000)).unwrap();
    fh.write_all(b"XYZ").unwrap();
    fh.seek(SeekFrom::Start(998)).unwrap();
    let mut five = [0u8; 5];
    fh.read_exact(&mut five).unwrap();
    assert_eq!(&five[2..], b"XYZ");
    drop(fh);
    std::fs::create_dir(f.p("d")).unwrap();
    std::fs::rename(f.p("new.bin"), f.p("d/moved.bin")).unwrap();
    std::os::unix::fs::symlink("moved.bin", f.p("d/l")).unwrap();
    std::fs::hard_link(f.p("d/moved.bin"), f.p("d/h")).unwrap();
    assert_eq!(std::fs::metadata(f.p("d/h")).unwrap().nlink(), 2);
    std::fs::set_permissions(
        f.p("d/moved.bin"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    assert_eq!(
        std::fs::metadata(f.p("d/moved.bin")).unwrap().mode() & 0o777,
        0o600
    );
    assert_eq!(common::setxattr(&f.p("d/h"), "user.k", b"v"), 0);
    assert_eq!(
        common::getxattr(&f.p("d/h"), "user.k").as_deref(),
        Some(&b"v"[..])
    );
    std::fs::remove_file(f.p("d/h")).unwrap();
    std::fs::remove_dir_all(f.p("todelete")).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(f.p("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["l", "moved.bin"]);
    assert!(
        served.get() > after_reads + 10,
        "the writes and name changes did not go through the rings ({} then {})",
        after_reads,
        served.get()
    );

    // A new file is opened with passthrough (the ring registers its
    // backing): 1,000 writes of 4 KiB reach the kernel's backing file, not
    // the daemon (served, each would be one WRITE through the ring).
    let before_pt = served.get();
    let mut nf = std::fs::File::create(f.p("pt.bin")).unwrap();
    for i in 0..1000u32 {
        nf.write_all(&[(i % 256) as u8; 4096]).unwrap();
    }
    drop(nf);
    let pt_requests = served.get() - before_pt;
    assert!(
        pt_requests < 100,
        "{pt_requests} requests for 1,000 passthrough writes: passthrough is not on over the ring"
    );
    assert_eq!(std::fs::metadata(f.p("pt.bin")).unwrap().len(), 4_096_000);

    h.unmount().expect("unmount");
    assert_eq!(ring_threads(), before, "a ring thread outlived the unmount");
    ws.commit("over io_uring").expect("commit");
    let mut want = data.clone();
    want[1000..1003].copy_from_slice(b"XYZ");
    assert!(f.bytes(b"d/moved.bin") == want, "committed bytes differ");
    assert!(f.entry(b"todelete").is_none());
    assert!(f.entry(b"d/h").is_none());
    let pt = f.bytes(b"pt.bin");
    assert!(pt
        .chunks(4096)
        .enumerate()
        .all(|(i, c)| c.iter().all(|b| *b == (i % 256) as u8)));
}

/// The default transport is `auto` (docs/benchmarks.md, "io_uring as the
/// default"): io_uring where the kernel offers it, and a caller whose
/// mount(2) is refused for want of CAP_SYS_ADMIN (not root) goes on over
/// /dev/fuse through fusermount3, as fuser mounts for such callers, rather
/// than failing. The second half drops CAP_SYS_ADMIN from this thread's
/// effective set only (capset(2) is per thread; the permitted set keeps it
/// so it can be raised again, and fusermount3, exec'd by uid 0, gets its
/// capabilities from its own exec).
#[test]
fn auto_is_the_default_and_a_refused_mount_goes_on_over_dev_fuse() {
    use rustix::thread::{capabilities, set_capabilities, CapabilitySet};
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    assert_eq!(Transport::default(), Transport::IoUringIfAvailable);
    let probe = strata_workspace::uring::probe();
    assert!(
        probe.usable(),
        "FUSE io_uring is not usable here: {probe}; the io_uring transport cannot be tested"
    );
    let opts = MountOptions {
        transport: Transport::IoUringIfAvailable,
        ..Default::default()
    };

    let f = fixture();
    let ws = f.create();
    let h = ws.mount(&f.mnt, &opts).expect("mount with auto");
    assert_eq!(h.transport(), "io_uring");
    std::fs::write(f.p("ring.txt"), b"over the ring\n").unwrap();
    h.unmount().expect("unmount");

    let caps = capabilities(None).expect("capget");
    assert!(
        caps.effective.contains(CapabilitySet::SYS_ADMIN),
        "the test needs root with CAP_SYS_ADMIN: {caps:?}"
    );
    let mut less = caps;
    less.effective.remove(CapabilitySet::SYS_ADMIN);
    set_capabilities(None, less).expect("capset without CAP_SYS_ADMIN");
    let fell_back = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let h = ws
            .mount(&f.mnt, &opts)
            .expect("auto without CAP_SYS_ADMIN mounts over /dev/fuse");
        let transport = h.transport();
        std::fs::write(f.p("fuse.txt"), b"over /dev/fuse\n").unwrap();
        let back = std::fs::read(f.p("ring.txt")).unwrap();
        h.unmount().expect("unmount through fusermount3");
        (transport, back)
    }));
    set_capabilities(None, caps).expect("capset restoring CAP_SYS_ADMIN");
    let (transport, back) = fell_back.unwrap_or_else(|p| std::panic::resume_unwind(p));
    assert_eq!(transport, "/dev/fuse");
    assert_eq!(back, b"over the ring\n");

    ws.commit("both transports").expect("commit");
    assert_eq!(f.bytes(b"ring.txt"), b"over the ring\n");
    assert_eq!(f.bytes(b"fuse.txt"), b"over /dev/fuse\n");
}
