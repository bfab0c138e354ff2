//! Opens that race a passthrough reader's RELEASE, on a real kernel
//! mount: the kernel sends RELEASE after close(2) returns (open.rs).

mod common;

use common::*;
use std::io::Write;
use strata_workspace::{CommitOutcome, Workspace, WorkspaceOptions};

/// A write-open right after the last passthrough reader of a base file
/// closed. The reader's RELEASE reaches the daemon after close(2) returns,
/// and the open can overtake it (another FUSE thread, another CPU's ring);
/// the open must wait for it instead of failing with ETXTBSY (open.rs).
/// `write_ops_commit_passthrough` failed this way once in a full run under
/// load; here 300 base files each get a read, then at once a write.
#[test]
fn write_open_right_after_its_reader_closed() {
    let fx = fixture();
    const N: usize = 300;
    let name = |i: usize| format!("r{i:03}");
    // Commit the files from one Workspace; a second one then has them as
    // base files, which passthrough readers share (open.rs new_backing).
    let ws = fx.create();
    let h = fx.mount(&ws, true);
    for i in 0..N {
        std::fs::write(fx.p(&name(i)), format!("base {i}\n")).unwrap();
    }
    assert!(matches!(
        ws.commit("bases").unwrap(),
        CommitOutcome::Committed(_)
    ));
    h.unmount().unwrap();
    drop(ws);
    let ws = Workspace::create(
        &fx.store,
        "p/main",
        &fx.tmp.path().join("scratch2"),
        &WorkspaceOptions::default(),
    )
    .unwrap();
    let h = fx.mount(&ws, true);
    for i in 0..N {
        let p = fx.p(&name(i));
        assert_eq!(std::fs::read(&p).unwrap(), format!("base {i}\n").as_bytes());
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .unwrap_or_else(|e| {
                panic!(
                    "write-open of {} right after its reader closed: {e}",
                    name(i)
                )
            });
        f.write_all(b"more\n").unwrap();
    }
    let c = match ws.commit("appended").unwrap() {
        CommitOutcome::Committed(c) => c,
        other => panic!("expected a commit, got {other:?}"),
    };
    assert_eq!(fx.head(), c);
    for i in 0..N {
        assert_eq!(
            fx.bytes(name(i).as_bytes()),
            format!("base {i}\nmore\n").as_bytes(),
            "{} in the Store",
            name(i)
        );
    }
    // A reader that is really still open keeps the limit API.md states:
    // the writer gets ETXTBSY (after the wait), and once the reader has
    // closed, the same open succeeds.
    let reader = std::fs::File::open(fx.p("hello.txt")).unwrap();
    let busy = std::fs::OpenOptions::new()
        .write(true)
        .open(fx.p("hello.txt"))
        .map(|_| ())
        .unwrap_err();
    assert_eq!(busy.raw_os_error(), Some(libc::ETXTBSY), "{busy}");
    drop(reader);
    std::fs::OpenOptions::new()
        .append(true)
        .open(fx.p("hello.txt"))
        .unwrap()
        .write_all(b"!\n")
        .unwrap();
    assert_eq!(
        std::fs::read(fx.p("hello.txt")).unwrap(),
        b"hello world\n!\n"
    );
    h.unmount().unwrap();
}
