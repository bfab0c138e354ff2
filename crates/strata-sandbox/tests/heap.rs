//! The daemon's heap stays small for its forks (src/heap.rs): with the
//! mmap threshold fixed, a large zero-filled buffer (fuser's 16 MiB
//! request buffer per FUSE session thread) is not made resident, even in a
//! thread arena that held such a buffer before and after a 32 MiB buffer
//! was freed (which raises glibc's dynamic threshold to 32 MiB). Its own
//! test binary: the process's resident memory is the measurement, so no
//! other test may run beside it.

const MIB: u64 = 1 << 20;

/// Anonymous resident memory of this process, from /proc/self/status.
fn rss_anon() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let line = s
        .lines()
        .find(|l| l.starts_with("RssAnon:"))
        .expect("RssAnon in /proc/self/status");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("RssAnon in kB");
    kb * 1024
}

#[test]
fn a_zeroed_16_mib_buffer_is_not_resident_after_a_32_mib_one_was_freed() {
    strata_sandbox::fix_mmap_threshold();
    let big = vec![1u8; 32 << 20];
    std::hint::black_box(&big);
    drop(big);
    // Threads come and go as FUSE mounts do; a new thread reuses a freed
    // arena, where without the fix the buffer would be memset.
    for round in 0..4 {
        let grew = std::thread::spawn(|| {
            let before = rss_anon();
            let buf = vec![0u8; 16 << 20];
            std::hint::black_box(&buf);
            rss_anon().saturating_sub(before)
        })
        .join()
        .expect("the thread ran");
        assert!(
            grew < 4 * MIB,
            "round {round}: a zeroed 16 MiB buffer made {} KiB resident",
            grew / 1024
        );
    }
}
