//! Crash recovery: a server process is killed with SIGKILL while a
//! Workspace is mounted; reopening the same ID shows the same uncommitted
//! state, and status and commit work.

mod common;

use common::*;
use std::process::Command;
use strata_store::ChangeKind;
use strata_workspace::{CommitOutcome, MountOptions, Workspace, WorkspaceOptions};

const CHILD_ENV: &str = "STRATA_WS_CRASH_CHILD";

/// In the child (re-executed test binary): open the Workspace, mount it,
/// say "ready" and serve until killed.
#[test]
fn crash_child_server() {
    serve_child_if_asked(CHILD_ENV);
}

#[test]
fn kill_9_then_reopen() {
    let fx = fixture();
    let ws = fx.create();
    let id = ws.id().to_string();
    drop(ws); // release the lock for the child server
    let mut child = spawn_child_server(
        &fx,
        &id,
        "crash_child_server",
        CHILD_ENV,
        std::time::Duration::from_secs(30),
    );

    // Uncommitted work of every kind.
    std::fs::write(fx.p("new.txt"), b"survives").unwrap();
    std::fs::write(fx.p("hello.txt"), b"rewritten").unwrap();
    std::fs::remove_file(fx.p("dir/a.txt")).unwrap();
    std::fs::rename(fx.p("dir/sub"), fx.p("moved-sub")).unwrap();
    std::fs::create_dir(fx.p("nd")).unwrap();
    std::fs::write(fx.p("nd/f"), b"in new dir").unwrap();
    std::os::unix::fs::chown(fx.p("hard1"), Some(42), Some(43)).unwrap();
    assert_eq!(setxattr(&fx.p("big.bin"), "user.k", b"v"), 0);

    // SAFETY: plain kill(2) of our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGKILL) }, 0);
    child.wait().unwrap();
    // The dead server leaves a mount that answers ENOTCONN; detach it.
    let mp = cpath(&fx.mnt);
    // SAFETY: valid path string.
    unsafe { libc::umount2(mp.as_ptr(), libc::MNT_DETACH) };

    let ws = Workspace::open(&fx.store, &id, &fx.scratch, &WorkspaceOptions::default()).unwrap();
    let st: Vec<(String, ChangeKind)> = ws
        .status()
        .unwrap()
        .into_iter()
        .map(|c| (String::from_utf8(c.path).unwrap(), c.kind))
        .collect();
    for want in [
        ("new.txt", ChangeKind::Added),
        ("hello.txt", ChangeKind::Modified),
        ("dir/a.txt", ChangeKind::Deleted),
        ("dir/sub", ChangeKind::Deleted),
        ("moved-sub", ChangeKind::Added),
        ("nd/f", ChangeKind::Added),
        ("hard1", ChangeKind::Modified),
        ("big.bin", ChangeKind::Modified),
    ] {
        assert!(
            st.contains(&(want.0.to_string(), want.1)),
            "{want:?} missing from {st:?}"
        );
    }
    // It mounts again and shows the same files.
    let h = ws.mount(&fx.mnt, &MountOptions::default()).unwrap();
    assert_eq!(std::fs::read(fx.p("new.txt")).unwrap(), b"survives");
    assert_eq!(
        std::fs::read(fx.p("moved-sub/deep.txt")).unwrap(),
        b"deep\n"
    );
    assert!(!fx.p("dir/a.txt").exists());
    assert!(matches!(
        ws.commit("after crash").unwrap(),
        CommitOutcome::Committed(_)
    ));
    h.unmount().unwrap();
    assert_eq!(fx.bytes(b"new.txt"), b"survives");
    assert_eq!(fx.bytes(b"hello.txt"), b"rewritten");
    assert_eq!(fx.bytes(b"nd/f"), b"in new dir");
    assert_eq!(fx.bytes(b"moved-sub/deep.txt"), b"deep\n");
    assert!(fx.entry(b"dir/a.txt").is_none());
    assert!(fx.entry(b"dir/sub").is_none());
    let h1 = fx.entry(b"hard1").unwrap();
    assert_eq!((h1.uid, h1.gid), (42, 43));
    assert_eq!(
        fx.entry(b"big.bin").unwrap().xattrs,
        vec![(b"user.k".to_vec(), b"v".to_vec())]
    );
}

/// The server died after the branch moved but before the journal recorded
/// the new base: reopening adopts the commit it made, with nothing pending.
#[test]
fn crash_between_publish_and_journal() {
    let fx = fixture();
    let ws = fx.create();
    let id = ws.id().to_string();
    let h = ws.mount(&fx.mnt, &MountOptions::default()).unwrap();
    std::fs::write(fx.p("new.txt"), b"published").unwrap();
    std::fs::write(fx.p("hello.txt"), b"changed").unwrap();
    std::fs::remove_file(fx.p("dir/a.txt")).unwrap();
    h.unmount().unwrap();
    drop(ws);
    let journal = fx.scratch.join(&id).join("journal.log");
    let saved = std::fs::read(&journal).unwrap();
    let ws = Workspace::open(&fx.store, &id, &fx.scratch, &WorkspaceOptions::default()).unwrap();
    let CommitOutcome::Committed(c) = ws.commit("published").unwrap() else {
        panic!()
    };
    drop(ws);
    std::fs::write(&journal, saved).unwrap(); // the journal never saw it
    let ws = Workspace::open(&fx.store, &id, &fx.scratch, &WorkspaceOptions::default()).unwrap();
    assert_eq!(ws.base(), c, "the published commit is adopted");
    assert!(
        ws.status().unwrap().is_empty(),
        "{:?}",
        ws.status().unwrap()
    );
    assert_eq!(ws.commit("again").unwrap(), CommitOutcome::UpToDate);
    assert_eq!(fx.head(), c);
}

/// The FUSE connection is aborted from outside (fusectl's `abort` file, what
/// an administrator does to a hung mount): the session ends without an
/// error, and the Workspace reopens with the work its server had answered,
/// which then commits. CI once saw a session end with ECONNABORTED after
/// fsx; this is the same end reached on purpose.
#[test]
fn aborted_connection_ends_the_session_and_keeps_the_work() {
    use std::os::unix::fs::MetadataExt;
    let fx = fixture();
    let ws = fx.create();
    let id = ws.id().to_string();
    let h = fx.mount(&ws, false);
    std::fs::write(fx.p("kept.txt"), b"answered before the abort").unwrap();
    // The connection's directory in fusectl is named by the minor device
    // number of the mount (Documentation/filesystems/fuse.rst, "Control
    // filesystem").
    let dev = std::fs::metadata(&fx.mnt).unwrap().dev();
    let minor = libc::minor(dev);
    let ctl = std::path::Path::new("/sys/fs/fuse/connections");
    if !ctl.join(minor.to_string()).exists() {
        let st = Command::new("mount")
            .args(["-t", "fusectl", "fusectl", "/sys/fs/fuse/connections"])
            .status()
            .expect("run mount(8) for fusectl");
        assert!(
            st.success() || ctl.join(minor.to_string()).exists(),
            "cannot mount fusectl at /sys/fs/fuse/connections (needed to abort a connection)"
        );
    }
    std::fs::write(ctl.join(minor.to_string()).join("abort"), b"1").expect("write fusectl abort");
    // The aborted mount answers ENOTCONN; unmounting it ends the session.
    h.unmount().expect("an aborted session ends cleanly");
    drop(ws);
    let ws = Workspace::open(&fx.store, &id, &fx.scratch, &WorkspaceOptions::default()).unwrap();
    assert!(matches!(
        ws.commit("after abort").unwrap(),
        CommitOutcome::Committed(_)
    ));
    assert_eq!(fx.bytes(b"kept.txt"), b"answered before the abort");
}
