//! Real kernel mounts of a Workspace: POSIX operations, then commit, then
//! assertions by reading the Store back (never by exit status alone).

mod common;

use common::*;
use std::ffi::OsStr;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use strata_store::{ChangeKind, EntryKind};
use strata_workspace::{CommitOutcome, MountOptions, Workspace, WorkspaceOptions, WsError};

fn write_ops_then_commit(passthrough: bool) {
    let fx = fixture();
    let ws = fx.create();
    let h = fx.mount(&ws, passthrough);

    // Lower reads.
    assert_eq!(std::fs::read(fx.p("hello.txt")).unwrap(), b"hello world\n");
    assert_eq!(std::fs::read(fx.p("dir/sub/deep.txt")).unwrap(), b"deep\n");
    let big = std::fs::read(fx.p("big.bin")).unwrap();
    assert_eq!(big.len(), 3_000_000);
    assert!(big.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8));
    assert_eq!(
        std::fs::read_link(fx.p("link")).unwrap(),
        OsStr::new("hello.txt")
    );
    assert_eq!(std::fs::read(fx.p("empty")).unwrap(), b"");
    assert_eq!(
        std::fs::metadata(fx.p("hard1")).unwrap().ino(),
        std::fs::metadata(fx.p("hard2")).unwrap().ino(),
        "base hard links are one inode"
    );

    // Writes of every kind.
    std::fs::write(fx.p("new.txt"), b"brand new").unwrap();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(fx.p("hello.txt"))
        .unwrap();
    f.write_all(b"appended\n").unwrap();
    drop(f);
    std::fs::remove_file(fx.p("empty")).unwrap();
    std::fs::rename(fx.p("dir/a.txt"), fx.p("a-moved.txt")).unwrap();
    std::fs::rename(fx.p("dir/sub"), fx.p("sub-moved")).unwrap(); // a lower directory
    assert_eq!(
        std::fs::read(fx.p("sub-moved/deep.txt")).unwrap(),
        b"deep\n"
    );
    std::fs::hard_link(fx.p("new.txt"), fx.p("new-link")).unwrap();
    assert_eq!(std::fs::metadata(fx.p("new.txt")).unwrap().nlink(), 2);
    std::os::unix::fs::symlink("target/of/link", fx.p("sym")).unwrap();
    std::fs::set_permissions(fx.p("big.bin"), std::fs::Permissions::from_mode(0o640)).unwrap();
    std::os::unix::fs::chown(fx.p("a-moved.txt"), Some(1234), Some(5678)).unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(fx.p("big.bin"))
        .unwrap();
    f.set_len(1000).unwrap();
    drop(f);
    assert_eq!(setxattr(&fx.p("new.txt"), "user.color", b"blue"), 0);
    assert_eq!(
        getxattr(&fx.p("new.txt"), "user.color").as_deref(),
        Some(&b"blue"[..])
    );
    let fifo = cpath(&fx.p("fifo"));
    // SAFETY: valid path string.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    assert!(std::fs::metadata(fx.p("fifo"))
        .unwrap()
        .file_type()
        .is_fifo());
    let odd = std::path::PathBuf::from(OsStr::from_bytes(b"bad-\xff-name"));
    std::fs::write(fx.mnt.join(&odd), b"non utf8").unwrap();
    std::fs::remove_dir_all(fx.p("todelete")).unwrap();
    std::fs::create_dir(fx.p("newdir")).unwrap();
    std::fs::write(fx.p("newdir/inner"), b"inner").unwrap();

    let before = fx.head();
    let c = match ws.commit("ops").unwrap() {
        CommitOutcome::Committed(c) => c,
        o => panic!("expected a commit, got {o:?}"),
    };
    assert_eq!(fx.head(), c);
    assert_eq!(fx.store.read_commit(c).unwrap().parents, vec![before]);

    // Read everything back from the Store.
    assert_eq!(fx.bytes(b"new.txt"), b"brand new");
    assert_eq!(fx.bytes(b"hello.txt"), b"hello world\nappended\n");
    assert!(fx.entry(b"empty").is_none());
    assert!(fx.entry(b"dir/a.txt").is_none());
    assert_eq!(fx.bytes(b"a-moved.txt"), b"file a\n");
    let am = fx.entry(b"a-moved.txt").unwrap();
    assert_eq!((am.uid, am.gid), (1234, 5678));
    assert!(fx.entry(b"dir/sub").is_none());
    assert_eq!(fx.bytes(b"sub-moved/deep.txt"), b"deep\n");
    let (n1, n2) = (
        fx.entry(b"new.txt").unwrap(),
        fx.entry(b"new-link").unwrap(),
    );
    assert_ne!(n1.link_group, 0);
    assert_eq!(n1.link_group, n2.link_group);
    assert_eq!(n1.xattrs, vec![(b"user.color".to_vec(), b"blue".to_vec())]);
    assert_eq!(
        fx.entry(b"sym").unwrap().kind,
        EntryKind::Symlink(b"target/of/link".to_vec())
    );
    let big = fx.entry(b"big.bin").unwrap();
    assert_eq!(big.mode, 0o640);
    assert_eq!(big.size(), 1000);
    assert_eq!(
        fx.bytes(b"big.bin"),
        (0..1000u32).map(|i| (i % 251) as u8).collect::<Vec<_>>()
    );
    let fe = fx.entry(b"fifo").unwrap();
    assert_eq!((fe.kind.clone(), fe.mode), (EntryKind::Fifo, 0o600));
    assert_eq!(fx.bytes(b"bad-\xff-name"), b"non utf8");
    assert!(fx.entry(b"todelete").is_none());
    assert_eq!(fx.bytes(b"newdir/inner"), b"inner");

    // The mount continues on the new base: no changes left, and more work
    // commits on top.
    assert!(
        ws.status().unwrap().is_empty(),
        "{:?}",
        ws.status().unwrap()
    );
    assert_eq!(ws.commit("again").unwrap(), CommitOutcome::UpToDate);
    std::fs::write(fx.p("new.txt"), b"second version").unwrap();
    let c2 = match ws.commit("second").unwrap() {
        CommitOutcome::Committed(c2) => c2,
        o => panic!("expected a commit, got {o:?}"),
    };
    assert_eq!(fx.store.read_commit(c2).unwrap().parents, vec![c]);
    assert_eq!(fx.bytes(b"new.txt"), b"second version");
    assert_eq!(fx.bytes(b"new-link"), b"second version");
    h.unmount().unwrap();
}

#[test]
fn write_ops_commit_passthrough() {
    write_ops_then_commit(true);
}

#[test]
fn write_ops_commit_no_passthrough() {
    write_ops_then_commit(false);
}

#[test]
fn status_kinds() {
    let fx = fixture();
    let ws = fx.create();
    let h = fx.mount(&ws, true);
    assert!(ws.status().unwrap().is_empty());
    std::fs::write(fx.p("added.txt"), b"a").unwrap();
    std::fs::write(fx.p("hello.txt"), b"changed").unwrap();
    std::fs::remove_file(fx.p("dir/a.txt")).unwrap();
    std::fs::remove_file(fx.p("link")).unwrap();
    std::fs::create_dir(fx.p("link")).unwrap(); // symlink -> directory
    std::fs::set_permissions(fx.p("hard1"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let st: Vec<(String, ChangeKind)> = ws
        .status()
        .unwrap()
        .into_iter()
        .map(|c| (String::from_utf8(c.path).unwrap(), c.kind))
        .collect();
    let want = vec![
        ("added.txt".to_string(), ChangeKind::Added),
        ("dir/a.txt".to_string(), ChangeKind::Deleted),
        ("hard1".to_string(), ChangeKind::Modified),
        ("hard2".to_string(), ChangeKind::Modified),
        ("hello.txt".to_string(), ChangeKind::Modified),
        ("link".to_string(), ChangeKind::TypeChanged),
        ("links/deep/hard3".to_string(), ChangeKind::Modified),
    ];
    // hard2 and links/deep/hard3 are the same inode as hard1, never looked
    // up: status finds them anyway.
    assert_eq!(st, want);
    // Status agrees with the Store's diff of what commit publishes.
    let base = fx.head();
    ws.commit("kinds").unwrap();
    let diff: Vec<_> = fx
        .store
        .diff(base, fx.head())
        .unwrap()
        .into_iter()
        .map(|c| (String::from_utf8(c.path).unwrap(), c.kind))
        .collect();
    for s in &want {
        assert!(diff.contains(s), "{s:?} missing from diff {diff:?}");
    }
    h.unmount().unwrap();
}

#[test]
fn base_hard_links_change_together() {
    let fx = fixture();
    let ws = fx.create();
    let h = fx.mount(&ws, true);
    // Only hard1 is ever looked up; hard2 and links/deep/hard3 are not.
    std::fs::write(fx.p("hard1"), b"all three\n").unwrap();
    ws.commit("hard links").unwrap();
    h.unmount().unwrap();
    let groups: Vec<u64> = [&b"hard1"[..], b"hard2", b"links/deep/hard3"]
        .iter()
        .map(|p| {
            assert_eq!(
                fx.bytes(p),
                b"all three\n",
                "{}",
                String::from_utf8_lossy(p)
            );
            fx.entry(p).unwrap().link_group
        })
        .collect();
    assert_ne!(groups[0], 0);
    assert!(groups.iter().all(|g| *g == groups[0]), "{groups:?}");
}

#[test]
fn no_change_commit_is_up_to_date() {
    let fx = fixture();
    let ws = fx.create();
    let h = fx.mount(&ws, true);
    let head = fx.head();
    assert_eq!(ws.commit("nothing").unwrap(), CommitOutcome::UpToDate);
    // Opening for write without writing copies up but changes nothing.
    drop(
        std::fs::OpenOptions::new()
            .write(true)
            .open(fx.p("hello.txt"))
            .unwrap(),
    );
    // Create and delete leaves nothing either.
    std::fs::write(fx.p("tmp"), b"x").unwrap();
    std::fs::remove_file(fx.p("tmp")).unwrap();
    assert!(
        ws.status().unwrap().is_empty(),
        "{:?}",
        ws.status().unwrap()
    );
    assert_eq!(ws.commit("nothing").unwrap(), CommitOutcome::UpToDate);
    assert_eq!(
        fx.head(),
        head,
        "an up-to-date commit must not move the branch"
    );
    h.unmount().unwrap();
}

#[test]
fn conflict_when_branch_moved() {
    let fx = fixture();
    let ws = fx.create();
    let h = fx.mount(&ws, true);
    std::fs::write(fx.p("mine.txt"), b"mine").unwrap();
    // Someone else publishes on the branch.
    let base = fx.head();
    let tree = fx.store.read_commit(base).unwrap().tree;
    let theirs = fx
        .store
        .commit_tree(&fx.branch, base, tree, "theirs", Default::default())
        .unwrap();
    match ws.commit("mine") {
        Err(WsError::Conflict {
            actual, base: b, ..
        }) => {
            assert_eq!(actual, theirs);
            assert_eq!(b, base);
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(fx.head(), theirs, "a conflict changes nothing");
    assert_eq!(ws.base(), base);
    assert_eq!(std::fs::read(fx.p("mine.txt")).unwrap(), b"mine");
    assert_eq!(ws.status().unwrap().len(), 1);
    h.unmount().unwrap();
}

#[test]
fn open_handle_survives_commit() {
    let fx = fixture();
    let ws = fx.create();
    let h = fx.mount(&ws, true);
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(fx.p("log"))
        .unwrap();
    f.write_all(b"one\n").unwrap();
    ws.commit("first").unwrap();
    f.write_all(b"two\n").unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "one\ntwo\n");
    assert_eq!(fx.bytes(b"log"), b"one\n");
    ws.commit("second").unwrap();
    assert_eq!(fx.bytes(b"log"), b"one\ntwo\n");
    drop(f);
    h.unmount().unwrap();
}

fn mmap_shared_write(passthrough: bool) {
    let fx = fixture();
    let ws = fx.create();
    let h = fx.mount(&ws, passthrough);
    std::fs::write(fx.p("mapped"), vec![b'.'; 8192]).unwrap();
    // Cached by the kernel for the (long) attribute lifetime.
    let before = std::fs::metadata(fx.p("mapped"))
        .unwrap()
        .modified()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(fx.p("mapped"))
        .unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: mapping 8192 bytes of a file of that size, shared, and only
    // touched within bounds before munmap.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            8192,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(
            p,
            libc::MAP_FAILED,
            "mmap: {}",
            std::io::Error::last_os_error()
        );
        let s = std::slice::from_raw_parts_mut(p as *mut u8, 8192);
        s[..6].copy_from_slice(b"mapped");
        s[8000..8003].copy_from_slice(b"end");
        assert_eq!(libc::msync(p, 8192, libc::MS_SYNC), 0);
        // Commit while still mapped.
        ws.commit("mmap").unwrap();
        libc::munmap(p, 8192);
    }
    let b = fx.bytes(b"mapped");
    assert_eq!(&b[..6], b"mapped");
    assert_eq!(&b[8000..8003], b"end");
    drop(f);
    // Writes through the mapping reach the file without a request; the
    // kernel's cached mtime must still move once the file is released
    // (RELEASE is asynchronous, hence the bounded wait).
    // Ask for the mtime alone: a full stat also wants the atime, which the
    // mapping itself invalidated (fuse_file_accessed()), and would refresh
    // every attribute by that detour.
    let mtime = || {
        let s = rustix::fs::statx(
            rustix::fs::CWD,
            fx.p("mapped"),
            rustix::fs::AtFlags::empty(),
            rustix::fs::StatxFlags::MTIME,
        )
        .unwrap();
        std::time::UNIX_EPOCH
            + std::time::Duration::new(s.stx_mtime.tv_sec as u64, s.stx_mtime.tv_nsec)
    };
    let t0 = std::time::Instant::now();
    loop {
        let now = mtime();
        if now > before {
            break;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(5),
            "mtime after writes through a shared mapping is still {now:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    h.unmount().unwrap();
}

#[test]
fn mmap_shared_write_captured_passthrough() {
    mmap_shared_write(true);
}

#[test]
fn mmap_shared_write_captured_no_passthrough() {
    mmap_shared_write(false);
}

#[test]
fn name_too_long() {
    let fx = fixture();
    let ws = fx.create();
    let h = fx.mount(&ws, true);
    let ok = "n".repeat(255);
    std::fs::write(fx.mnt.join(&ok), b"x").unwrap();
    let long = "n".repeat(256);
    let e = std::fs::write(fx.mnt.join(&long), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENAMETOOLONG));
    let e = std::fs::create_dir(fx.mnt.join(&long)).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENAMETOOLONG));
    let e = std::fs::metadata(fx.mnt.join(&long)).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENAMETOOLONG));
    ws.commit("long names").unwrap();
    assert_eq!(fx.bytes(ok.as_bytes()), b"x");
    h.unmount().unwrap();
}

#[test]
fn sparse_file_over_4gib() {
    let fx = fixture();
    let ws = fx.create();
    let h = fx.mount(&ws, true);
    let off: u64 = (4 << 30) + 12345;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(fx.p("sparse"))
        .unwrap();
    f.seek(SeekFrom::Start(off)).unwrap();
    f.write_all(b"far away").unwrap();
    f.seek(SeekFrom::Start(off - 4)).unwrap();
    let mut buf = [0u8; 12];
    f.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"\0\0\0\0far away");
    drop(f);
    let m = std::fs::metadata(fx.p("sparse")).unwrap();
    assert_eq!(m.len(), off + 8);
    assert!(
        m.blocks() < 1024,
        "the file must stay sparse, blocks={}",
        m.blocks()
    );
    ws.commit("sparse").unwrap();
    let e = fx.entry(b"sparse").unwrap();
    assert_eq!(e.size(), off + 8);
    let EntryKind::File(c) = e.kind else { panic!() };
    assert_eq!(
        fx.store.read_file_range(&c, off - 4, 12).unwrap(),
        b"\0\0\0\0far away"
    );
    h.unmount().unwrap();
}

#[test]
fn rename_noreplace_and_exchange() {
    let fx = fixture();
    let ws = fx.create();
    let h = fx.mount(&ws, true);
    assert_eq!(
        renameat2(&fx.p("hello.txt"), &fx.p("hard1"), libc::RENAME_NOREPLACE),
        -1
    );
    assert_eq!(errno(), libc::EEXIST);
    assert_eq!(
        renameat2(&fx.p("hello.txt"), &fx.p("dir"), libc::RENAME_EXCHANGE),
        0
    );
    assert_eq!(std::fs::read(fx.p("dir")).unwrap(), b"hello world\n");
    assert_eq!(std::fs::read(fx.p("hello.txt/a.txt")).unwrap(), b"file a\n");
    assert_eq!(
        renameat2(&fx.p("hello.txt"), &fx.p("fresh"), libc::RENAME_NOREPLACE),
        0
    );
    ws.commit("exchange").unwrap();
    assert_eq!(fx.bytes(b"dir"), b"hello world\n");
    assert_eq!(fx.bytes(b"fresh/a.txt"), b"file a\n");
    assert!(fx.entry(b"hello.txt").is_none());
    h.unmount().unwrap();
}

#[test]
fn unlinked_open_file_keeps_working() {
    let fx = fixture();
    let ws = fx.create();
    let h = fx.mount(&ws, false);
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(fx.p("hello.txt"))
        .unwrap();
    std::fs::remove_file(fx.p("hello.txt")).unwrap();
    f.write_all(b"HELLO").unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "HELLO world\n");
    ws.commit("unlinked").unwrap();
    assert!(fx.entry(b"hello.txt").is_none());
    drop(f);
    h.unmount().unwrap();
}

#[test]
fn bad_mounts_are_refused() {
    let fx = fixture();
    let ws = fx.create();
    // Non-empty mountpoint.
    std::fs::write(fx.mnt.join("occupied"), b"x").unwrap();
    let e = ws.mount(&fx.mnt, &MountOptions::default()).unwrap_err();
    assert!(matches!(e, WsError::Mountpoint { .. }), "{e}");
    std::fs::remove_file(fx.mnt.join("occupied")).unwrap();
    // Missing mountpoint.
    let e = ws
        .mount(&fx.tmp.path().join("nope"), &MountOptions::default())
        .unwrap_err();
    assert!(matches!(e, WsError::Mountpoint { .. }), "{e}");
    // Inside the Store.
    let inside = fx.store.dir().join("mnt-inside");
    std::fs::create_dir(&inside).unwrap();
    let e = ws.mount(&inside, &MountOptions::default()).unwrap_err();
    assert!(e.to_string().contains("inside the Store"), "{e}");
    // Twice.
    let h = fx.mount(&ws, true);
    let other = fx.tmp.path().join("mnt2");
    std::fs::create_dir(&other).unwrap();
    let e = ws.mount(&other, &MountOptions::default()).unwrap_err();
    assert!(matches!(e, WsError::Mounted { .. }), "{e}");
    // A second open of the same ID (another server) is refused too.
    let e = Workspace::open(
        &fx.store,
        ws.id(),
        &fx.scratch,
        &WorkspaceOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(e, WsError::Locked { .. }), "{e}");
    // A REF that does not exist.
    assert!(Workspace::create(
        &fx.store,
        "p/nope",
        &fx.scratch,
        &WorkspaceOptions::default()
    )
    .is_err());
    h.unmount().unwrap();
}

#[test]
fn discard_removes_everything() {
    let fx = fixture();
    let ws = fx.create();
    let h = fx.mount(&ws, true);
    std::fs::write(fx.p("x"), b"x").unwrap();
    let dir = ws.dir().to_path_buf();
    assert!(matches!(ws.clone().discard(), Err(WsError::Mounted { .. })));
    h.unmount().unwrap();
    let head = fx.head();
    ws.discard().unwrap();
    assert!(!dir.exists());
    assert_eq!(fx.head(), head);
    assert!(fx.entry(b"x").is_none());
}

#[test]
fn o_trunc_o_append_o_excl() {
    let fx = fixture();
    let ws = fx.create();
    let h = fx.mount(&ws, true);
    let before = std::fs::metadata(fx.p("big.bin")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(10));
    // O_TRUNC of a base file: empty, then new bytes; mtime moves.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(fx.p("big.bin"))
        .unwrap();
    assert_eq!(std::fs::metadata(fx.p("big.bin")).unwrap().len(), 0);
    f.write_all(b"short").unwrap();
    drop(f);
    let after = std::fs::metadata(fx.p("big.bin")).unwrap();
    assert!(after.mtime_nsec() != before.mtime_nsec() || after.mtime() != before.mtime());
    // O_APPEND from two handles.
    let mut a = std::fs::OpenOptions::new()
        .append(true)
        .open(fx.p("hello.txt"))
        .unwrap();
    let mut b = std::fs::OpenOptions::new()
        .append(true)
        .open(fx.p("hello.txt"))
        .unwrap();
    a.write_all(b"A\n").unwrap();
    b.write_all(b"B\n").unwrap();
    drop((a, b));
    // O_EXCL on an existing name.
    let e = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(fx.p("hello.txt"))
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
    ws.commit("flags").unwrap();
    h.unmount().unwrap();
    assert_eq!(fx.bytes(b"big.bin"), b"short");
    assert_eq!(fx.bytes(b"hello.txt"), b"hello world\nA\nB\n");
}

#[test]
fn concurrent_writers_while_committing() {
    let fx = fixture();
    let ws = fx.create();
    let h = fx.mount(&ws, true);
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let dir = fx.p(&format!("w{w}"));
            std::thread::spawn(move || {
                std::fs::create_dir(&dir).unwrap();
                for i in 0..100 {
                    std::fs::write(dir.join(format!("f{i}")), format!("{w}:{i}")).unwrap();
                    if i % 3 == 0 {
                        std::fs::rename(dir.join(format!("f{i}")), dir.join(format!("r{i}")))
                            .unwrap();
                    }
                }
            })
        })
        .collect();
    // Commit repeatedly while they write: each commit is a consistent
    // snapshot of whatever exists at that moment.
    let mut commits = 0;
    while writers.iter().any(|w| !w.is_finished()) {
        if let CommitOutcome::Committed(_) = ws.commit("while writing").unwrap() {
            commits += 1;
        }
    }
    for w in writers {
        w.join().unwrap();
    }
    ws.commit("final").unwrap();
    assert!(ws.status().unwrap().is_empty());
    h.unmount().unwrap();
    eprintln!("{commits} commits while writing");
    for w in 0..3 {
        for i in 0..100 {
            let name = if i % 3 == 0 {
                format!("w{w}/r{i}")
            } else {
                format!("w{w}/f{i}")
            };
            assert_eq!(
                fx.bytes(name.as_bytes()),
                format!("{w}:{i}").as_bytes(),
                "{name}"
            );
        }
    }
}

#[test]
fn utimensat_ns_fallocate_fsync_statfs() {
    let fx = fixture();
    let ws = fx.create();
    let h = fx.mount(&ws, true);
    let t = std::time::UNIX_EPOCH + std::time::Duration::new(1_600_000_000, 123_456_789);
    // A base file (metadata only, no copy-up) and a new file.
    let lower = std::fs::File::open(fx.p("dir/a.txt")).unwrap();
    lower
        .set_times(std::fs::FileTimes::new().set_modified(t))
        .unwrap();
    drop(lower);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(fx.p("alloc"))
        .unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: plain fallocate(2) on an open descriptor.
    assert_eq!(unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, 1 << 20) }, 0);
    assert_eq!(f.metadata().unwrap().len(), 1 << 20);
    f.sync_all().unwrap();
    f.set_times(std::fs::FileTimes::new().set_modified(t))
        .unwrap();
    drop(f);
    let m = std::fs::metadata(fx.p("dir/a.txt")).unwrap();
    assert_eq!((m.mtime(), m.mtime_nsec()), (1_600_000_000, 123_456_789));
    let st = rustix::fs::statvfs(&fx.mnt).unwrap();
    assert_eq!(st.f_namemax, 255);
    assert!(st.f_blocks > 0);
    ws.commit("times").unwrap();
    h.unmount().unwrap();
    let want = 1_600_000_000_123_456_789i64;
    assert_eq!(fx.entry(b"dir/a.txt").unwrap().mtime_ns, want);
    assert_eq!(fx.bytes(b"dir/a.txt"), b"file a\n");
    let a = fx.entry(b"alloc").unwrap();
    assert_eq!((a.mtime_ns, a.size()), (want, 1 << 20));
}

#[test]
fn busy_unmount_detaches_and_finishes_later() {
    let fx = fixture();
    let ws = fx.create();
    let h = fx.mount(&ws, true);
    std::fs::write(fx.p("up.txt"), b"hello world\n").unwrap();
    let f = std::fs::File::open(fx.p("up.txt")).unwrap();
    assert!(
        h.unmount().is_err(),
        "unmount of a busy mount must report it"
    );
    assert!(ws.is_mounted(), "still serving its last user");
    let mut buf = [0u8; 64];
    let n = std::os::unix::fs::FileExt::read_at(&f, &mut buf, 0).unwrap();
    assert_eq!(&buf[..n], b"hello world\n");
    drop(f);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while ws.is_mounted() {
        assert!(
            std::time::Instant::now() < deadline,
            "the detached session never ended"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let h = fx.mount(&ws, true);
    assert_eq!(std::fs::read(fx.p("hello.txt")).unwrap(), b"hello world\n");
    h.unmount().unwrap();
}
