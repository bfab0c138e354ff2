//! The daemon's heap, kept small because the daemon forks: an exec helper
//! started for its exec (concurrent execs, `--tty`) is spawned with
//! fork(2) (it needs a `pre_exec` step, see internal.rs); the helper kept
//! waiting ahead of the next exec is started with posix_spawn instead
//! (spawn.rs), which copies nothing. fork copies the page-table entry of every resident page
//! and write-protects the parent's private pages (copy-on-write), so the
//! child's start, its execve's teardown of the copy and the parent's next
//! write to each page all cost in proportion to the parent's resident
//! memory. A Sandbox's daemon that had committed or copied up a 32 MiB file
//! held ~190 MB and each exec then spent ~30 ms in copy_page_range and
//! unmap_page_range (perf, docs/benchmarks.md, "Commit cost").

/// Serve every allocation of 128 KiB or more with its own mmap(2), for the
/// rest of the process's life. glibc's default threshold is dynamic
/// (mallopt(3), M_MMAP_THRESHOLD): freeing an mmap'ed chunk raises it, up
/// to 32 MiB, so after the first commit freed its 32 MiB read buffer each
/// FUSE session thread's 16 MiB request buffer (fuser's, zero-filled) came
/// from a heap arena, was memset, and stayed resident: 16 MiB per thread.
/// From mmap the buffer is zero pages that become resident only as far as
/// requests fill them, and is unmapped when the mount ends. Setting the
/// threshold turns the dynamic adjustment off.
///
/// That also fixed the trim threshold at its 128 KiB default: every free
/// that left more than 128 KiB free at the top of an arena gave it back
/// to the kernel (madvise), so a commit of a fresh file faulted its
/// memory in again part after part (its 2 MiB parts of chunk copies, freed
/// by the insert thread as it goes): page faults and madvise were a
/// quarter of the daemon's insert thread's samples and a tenth of its
/// hashing threads' (perf, docs/benchmarks.md, "The commit step through a
/// Sandbox's daemon"). So free memory stays in the arenas up to
/// `TRIM_THRESHOLD`; [`release_free_heap`] still gives all of it back
/// before each fork.
pub fn fix_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt(3) changes a tunable of glibc's allocator; it takes
    // no pointer and is safe to call at any time (the allocator's lock is
    // held while it applies the change).
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}

/// Free memory an arena keeps at its top (above, `fix_mmap_threshold`):
/// more than a commit's parts in flight and its SQLite page cache.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TRIM_THRESHOLD: libc::c_int = 64 << 20;

/// Give the allocator's free heap pages back to the kernel before a fork
/// (module docs): glibc keeps freed memory in each thread's arena.
/// malloc_trim(3) releases it with madvise(2).
pub fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim(3) only returns free memory of glibc's own
    // allocator to the kernel (MADV_DONTNEED on free pages, sbrk on the
    // main arena's top); it takes each arena's lock, so it is safe while
    // other threads allocate, and touches no memory the program owns.
    unsafe {
        libc::malloc_trim(0);
    }
}
