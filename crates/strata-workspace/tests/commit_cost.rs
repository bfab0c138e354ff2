//! Commit cost follows the edit: the Workspace records the byte ranges
//! written through it (also across a crash of its server), and commit
//! re-chunks only those. Asserted by the Store's count of source bytes
//! read, and by reading the committed file back: byte-identical to what
//! the mount showed, and the same file id as chunking all of it again.

mod common;

use common::*;
use std::os::unix::fs::FileExt;
use strata_store::{BranchRef, Cdc, EntryKind, FileContent, NoProgress, Store, StoreOptions};
use strata_workspace::{CommitOutcome, Workspace, WorkspaceOptions};

const MIB: usize = 1 << 20;
const CHILD_ENV: &str = "STRATA_WS_COMMIT_COST_CHILD";

/// Deterministic pseudo-random bytes (xorshift64*), incompressible.
fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.max(1);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A Store whose `p/main` holds one file, `big`, of `len` random bytes.
fn big_fixture(len: usize) -> (Fixture, Vec<u8>) {
    require_fuse();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let bytes = random_bytes(42, len);
    std::fs::write(src.join("big"), &bytes).unwrap();
    let store = Store::create(&tmp.path().join("store"), &StoreOptions::default()).unwrap();
    store
        .create_project_from("p", &src, "base", &NoProgress)
        .unwrap();
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let fx = Fixture {
        scratch: tmp.path().join("scratch"),
        store,
        branch: BranchRef::parse("p/main").unwrap(),
        mnt,
        tmp,
    };
    (fx, bytes)
}

fn content(fx: &Fixture, path: &[u8]) -> FileContent {
    match fx.entry(path).expect("committed").kind {
        EntryKind::File(c) => c,
        k => panic!("a {}", k.type_name()),
    }
}

/// Commit, and return the bytes of files the commit read.
fn commit_counting(fx: &Fixture, ws: &Workspace) -> u64 {
    let before = fx.store.source_bytes_read();
    let t = std::time::Instant::now();
    assert!(matches!(
        ws.commit("edit").unwrap(),
        CommitOutcome::Committed(_)
    ));
    let read = fx.store.source_bytes_read() - before;
    // Reported, not asserted (no timed assertions).
    eprintln!("commit: {read} bytes read, {:?}", t.elapsed());
    read
}

/// The committed `big` is `want`, and has the id a full chunking gives.
fn assert_committed(fx: &Fixture, want: &[u8], what: &str) {
    let got = fx.bytes(b"big");
    assert!(
        got == want,
        "{what}: the committed file differs from what the mount showed"
    );
    let full = fx.store.write_file_bytes(want, None).unwrap();
    assert_eq!(
        content(fx, b"big"),
        full,
        "{what}: not the id of a full re-chunk"
    );
}

#[test]
fn a_10_byte_overwrite_of_32_mib_commits_reading_a_few_chunks() {
    let (fx, mut want) = big_fixture(32 * MIB);
    let ws = fx.create();
    let h = fx.mount(&ws, true);
    // The first write copies the file up; later ones write the copy.
    for (round, off) in [17 * MIB + 123, 3 * MIB + 7].into_iter().enumerate() {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(fx.p("big"))
            .unwrap();
        f.write_all_at(b"0123456789", off as u64).unwrap();
        drop(f);
        want[off..off + 10].copy_from_slice(b"0123456789");
        let shown = std::fs::read(fx.p("big")).unwrap();
        assert!(shown == want, "the mount does not show the write");
        let read = commit_counting(&fx, &ws);
        assert!(
            read <= 3 * Cdc::MAX as u64,
            "round {round}: the commit read {read} bytes of a 32 MiB file for a 10-byte write"
        );
        assert_committed(&fx, &want, "a 10-byte overwrite");
    }
    h.unmount().unwrap();
}

#[test]
fn edits_at_the_edges_and_of_the_size_commit_exactly() {
    let (fx, mut want) = big_fixture(6 * MIB + 1234);
    let ws = fx.create();
    let h = fx.mount(&ws, true);
    let chunks = fx.store.chunk_list(&content(&fx, b"big")).unwrap();
    let boundary = chunks[chunks.len() / 2].0 as usize;
    let pwrite = |want: &mut Vec<u8>, off: usize, data: &[u8]| {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(fx.p("big"))
            .unwrap();
        f.write_all_at(data, off as u64).unwrap();
        if want.len() < off + data.len() {
            want.resize(off + data.len(), 0);
        }
        want[off..off + data.len()].copy_from_slice(data);
    };
    let truncate = |want: &mut Vec<u8>, len: usize| {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(fx.p("big"))
            .unwrap();
        f.set_len(len as u64).unwrap();
        want.resize(len, 0);
    };
    // Each edit returns how many bytes it changed (zeros included).
    type Edit<'a> = Box<dyn Fn(&mut Vec<u8>) -> usize + 'a>;
    let edits: Vec<(&str, Edit)> = vec![
        (
            "the very start",
            Box::new(|w| {
                pwrite(w, 0, b"0123456789");
                10
            }),
        ),
        (
            "the very end",
            Box::new(|w| {
                let l = w.len();
                pwrite(w, l - 10, b"0123456789");
                10
            }),
        ),
        (
            "across a chunk boundary",
            Box::new(|w| {
                pwrite(w, boundary - 5, b"0123456789");
                10
            }),
        ),
        (
            "truncate then extend",
            Box::new(|w| {
                let l = w.len();
                truncate(w, l / 2);
                truncate(w, l);
                l - l / 2
            }),
        ),
        (
            "a sparse write past the end",
            Box::new(|w| {
                let l = w.len();
                pwrite(w, l + 2 * MIB, b"0123456789");
                2 * MIB + 10
            }),
        ),
        (
            "shrink by one byte",
            Box::new(|w| {
                let l = w.len();
                truncate(w, l - 1);
                0
            }),
        ),
    ];
    for (what, edit) in edits {
        let changed = edit(&mut want) as u64;
        let shown = std::fs::read(fx.p("big")).unwrap();
        assert!(shown == want, "{what}: the mount does not show the edit");
        let read = commit_counting(&fx, &ws);
        // The chunks around the change, and the last chunk's worth of
        // bytes (its size class's largest, at most `Cdc::MAX`) when the
        // size changed.
        assert!(
            read <= changed + 4 * Cdc::MAX as u64,
            "{what}: the commit read {read} bytes of {} for {changed} changed",
            want.len()
        );
        assert_committed(&fx, &want, what);
    }
    h.unmount().unwrap();
}

/// In the child (re-executed test binary): open the Workspace, mount it,
/// say "ready" and serve until killed.
#[test]
fn commit_cost_child_server() {
    serve_child_if_asked(CHILD_ENV);
}

#[test]
fn written_ranges_survive_a_crash_of_the_server() {
    let (fx, mut want) = big_fixture(32 * MIB);
    let ws = fx.create();
    let id = ws.id().to_string();
    drop(ws); // release the lock for the child server
    let mut child = spawn_child_server(
        &fx,
        &id,
        "commit_cost_child_server",
        CHILD_ENV,
        std::time::Duration::from_secs(60),
    );
    let off = 20 * MIB + 5;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(fx.p("big"))
        .unwrap();
    f.write_all_at(b"0123456789", off as u64).unwrap();
    drop(f);
    want[off..off + 10].copy_from_slice(b"0123456789");

    // SAFETY: plain kill(2) of our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGKILL) }, 0);
    child.wait().unwrap();
    // The dead server leaves a mount that answers ENOTCONN; detach it.
    let mp = cpath(&fx.mnt);
    // SAFETY: valid path string.
    unsafe { libc::umount2(mp.as_ptr(), libc::MNT_DETACH) };

    let ws = Workspace::open(&fx.store, &id, &fx.scratch, &WorkspaceOptions::default()).unwrap();
    let read = commit_counting(&fx, &ws);
    assert!(
        read <= 3 * Cdc::MAX as u64,
        "after the crash the commit read {read} bytes of a 32 MiB file for a 10-byte write"
    );
    assert_committed(&fx, &want, "a 10-byte overwrite across a crash");
}
