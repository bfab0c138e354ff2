//! A generated tree with every kind of entry the Store preserves is
//! snapshotted and exported back, and the copy is compared entry by entry:
//! content, type, mode (incl. setuid/setgid/sticky), owner, mtime to the
//! nanosecond, symlink targets, hard links, xattrs, non-UTF-8 names
//! (with `preserve_privileges`, so that setuid/setgid come back too).

mod common;
use common::*;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use strata_store::*;

fn set_mtime(p: &Path, ns: i64) {
    let ts = rustix::fs::Timespec {
        tv_sec: ns / 1_000_000_000,
        tv_nsec: (ns % 1_000_000_000) as _,
    };
    rustix::fs::utimensat(
        rustix::fs::CWD,
        p,
        &rustix::fs::Timestamps {
            last_access: ts,
            last_modification: ts,
        },
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .unwrap();
}

/// Build the fixture tree. Returns true if ownership changes were applied
/// (they need root; CI runs as root).
fn make_fixture(root: &Path) {
    std::fs::create_dir_all(root.join("dir/sub/deeper")).unwrap();
    std::fs::create_dir(root.join("empty-dir")).unwrap();
    std::fs::write(root.join("plain.txt"), b"hello strata\n").unwrap();
    std::fs::write(root.join("empty"), b"").unwrap();
    std::fs::write(root.join("dir/big.bin"), seeded_bytes(9, 3 << 20)).unwrap();
    std::fs::write(root.join("dir/sub/deeper/x"), b"deep").unwrap();
    // Sparse: a hole then 10 bytes.
    let f = std::fs::File::create(root.join("sparse")).unwrap();
    f.set_len(50 << 20).unwrap();
    drop(f);
    std::fs::write(root.join("exec.sh"), b"#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(root.join("exec.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(root.join("setuid"), b"s").unwrap();
    std::fs::write(root.join("setgid"), b"g").unwrap();
    std::fs::create_dir(root.join("sticky")).unwrap();
    std::fs::symlink_metadata(root).unwrap();
    std::os::unix::fs::symlink("plain.txt", root.join("link-in")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", root.join("link-out")).unwrap();
    std::os::unix::fs::symlink("../../nowhere", root.join("dir/dangling")).unwrap();
    std::fs::write(root.join("hard-a"), b"linked content").unwrap();
    std::fs::hard_link(root.join("hard-a"), root.join("dir/hard-b")).unwrap();
    std::fs::write(
        root.join(OsStr::from_bytes(b"not-utf8-\xff\xfe")),
        b"bytes name",
    )
    .unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        root.join("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o640),
        0,
    )
    .unwrap();
    rustix::fs::lsetxattr(
        root.join("plain.txt"),
        "user.origin",
        b"generated",
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    rustix::fs::lsetxattr(
        root.join("dir"),
        "user.k",
        b"v\0binary",
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    // Owners: distinct uid/gid (needs root, which CI has).
    rustix::fs::chownat(
        rustix::fs::CWD,
        root.join("plain.txt"),
        Some(rustix::process::Uid::from_raw(1234)),
        Some(rustix::process::Gid::from_raw(5678)),
        rustix::fs::AtFlags::empty(),
    )
    .expect("chown needs root: run the tests as root (CI does)");
    // Modes after chown (chown clears setuid).
    std::fs::set_permissions(root.join("setuid"), std::fs::Permissions::from_mode(0o4755)).unwrap();
    std::fs::set_permissions(root.join("setgid"), std::fs::Permissions::from_mode(0o2750)).unwrap();
    std::fs::set_permissions(root.join("sticky"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    // Nanosecond mtimes, set last and deepest first.
    let mut n = 0i64;
    for p in walk(root).into_iter().rev() {
        n += 1;
        set_mtime(&p, 1_600_000_000_000_000_000 + n * 1_000_000_007 + 123);
    }
}

fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let mut names: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        for p in names {
            if std::fs::symlink_metadata(&p).unwrap().is_dir() {
                stack.push(p.clone());
            }
            out.push(p);
        }
    }
    out.sort();
    out
}

#[derive(Debug, PartialEq)]
struct Seen {
    kind: String,
    mode: u32,
    uid: u32,
    gid: u32,
    mtime_ns: i64,
    content: Option<Vec<u8>>,
    link: Option<Vec<u8>>,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// For hard links: the sorted set of relative paths sharing this inode.
    ino_peers: usize,
}

fn describe(root: &Path) -> BTreeMap<Vec<u8>, Seen> {
    let mut out = BTreeMap::new();
    for p in walk(root) {
        let md = std::fs::symlink_metadata(&p).unwrap();
        let ft = md.file_type();
        let rel = p
            .strip_prefix(root)
            .unwrap()
            .as_os_str()
            .as_bytes()
            .to_vec();
        let kind = if ft.is_dir() {
            "dir"
        } else if ft.is_symlink() {
            "symlink"
        } else if ft.is_file() {
            "file"
        } else {
            "other"
        };
        let mut xattrs = Vec::new();
        if !ft.is_symlink() {
            let mut buf = vec![0u8; 4096];
            let n = rustix::fs::llistxattr(&p, &mut buf).unwrap();
            for name in buf[..n]
                .split(|&b| b == 0)
                .filter(|n| n.starts_with(b"user."))
            {
                let mut v = vec![0u8; 4096];
                let l = rustix::fs::lgetxattr(&p, OsStr::from_bytes(name), &mut v).unwrap();
                xattrs.push((name.to_vec(), v[..l].to_vec()));
            }
            xattrs.sort();
        }
        out.insert(
            rel,
            Seen {
                kind: kind.into(),
                mode: md.mode(),
                uid: md.uid(),
                gid: md.gid(),
                mtime_ns: md.mtime() * 1_000_000_000 + md.mtime_nsec(),
                content: ft.is_file().then(|| std::fs::read(&p).unwrap()),
                link: ft.is_symlink().then(|| {
                    std::fs::read_link(&p)
                        .unwrap()
                        .as_os_str()
                        .as_bytes()
                        .to_vec()
                }),
                xattrs,
                ino_peers: md.nlink() as usize * ft.is_file() as usize,
            },
        );
    }
    out
}

#[test]
fn snapshot_then_export_is_identical() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    make_fixture(&src);
    // A socket is skipped with a warning, not stored.
    let _sock = std::os::unix::net::UnixListener::bind(src.join("sock")).unwrap();
    set_mtime(&src, 1_650_000_000_000_000_001);
    let store = new_store(tmp.path());
    let report = store
        .create_project_from("fixture", &src, "import", &NoProgress)
        .unwrap();
    assert_eq!(report.warnings.len(), 1, "{:?}", report.warnings);
    assert!(report.warnings[0].contains("socket"));
    std::fs::remove_file(src.join("sock")).unwrap();
    set_mtime(&src, 1_650_000_000_000_000_001);

    // Read without exporting.
    let head = store.resolve("fixture/main").unwrap().commit;
    let e = store.read_path(head, b"dir/sub/deeper/x").unwrap().unwrap();
    let EntryKind::File(c) = &e.kind else {
        panic!("not a file")
    };
    assert_eq!(store.read_file_range(c, 0, 100).unwrap(), b"deep");
    let l = store.read_path(head, b"link-out").unwrap().unwrap();
    assert_eq!(l.kind, EntryKind::Symlink(b"/etc/passwd".to_vec()));

    // Exactly: setuid and setgid bits come back only when asked for
    // (tests/privileges.rs covers the default, which drops them).
    let out = tmp.path().join("out");
    let opts = ExportOptions {
        force: false,
        preserve_privileges: true,
    };
    let r = store.export_with(head, &out, &opts, &NoProgress).unwrap();
    assert_eq!(r.restored_privileges, 2, "the setuid and setgid files");
    let a = describe(&src);
    let b = describe(&out);
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (k, va) in &a {
        assert_eq!(
            Some(va),
            b.get(k),
            "entry {:?} differs",
            String::from_utf8_lossy(k)
        );
    }
    // Hard links stay linked.
    let ia = std::fs::metadata(out.join("hard-a")).unwrap().ino();
    let ib = std::fs::metadata(out.join("dir/hard-b")).unwrap().ino();
    assert_eq!(ia, ib);
    // The sparse file stays sparse.
    let sparse = std::fs::metadata(out.join("sparse")).unwrap();
    assert_eq!(sparse.len(), 50 << 20);
    assert!(sparse.blocks() * 512 < 1 << 20, "sparse file was filled in");

    // A second snapshot of the unchanged tree writes no new file content and
    // diffs empty; an edit diffs as exactly that path.
    let b_ref = BranchRef::parse("fixture/main").unwrap();
    let r2 = store.snapshot(&b_ref, &src, "again", &NoProgress).unwrap();
    assert!(r2.unchanged, "an unchanged tree must not make a commit");
    assert_eq!(r2.commit, Some(head));
    assert_eq!(store.branch_head(&b_ref).unwrap(), head);
    assert_eq!(r2.new_objects, 0);
    std::fs::write(src.join("dir/sub/deeper/x"), b"changed").unwrap();
    std::fs::remove_file(src.join("empty")).unwrap();
    std::fs::write(src.join("new"), b"n").unwrap();
    let r3 = store.snapshot(&b_ref, &src, "edit", &NoProgress).unwrap();
    let d = store.diff(r2.commit.unwrap(), r3.commit.unwrap()).unwrap();
    let mut got: Vec<(String, ChangeKind)> = d
        .iter()
        .map(|c| (String::from_utf8_lossy(&c.path).into_owned(), c.kind))
        .collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        got,
        vec![
            ("dir/sub/deeper/x".to_string(), ChangeKind::Modified),
            ("empty".to_string(), ChangeKind::Deleted),
            ("new".to_string(), ChangeKind::Added),
        ]
    );
    let log = store.log(r3.commit.unwrap(), 10).unwrap();
    assert_eq!(
        log.iter()
            .map(|(_, c)| c.message.as_str())
            .collect::<Vec<_>>(),
        vec!["edit", "import"]
    );
    assert!(store.fsck(&NoProgress).unwrap().ok);

    // Export refuses a non-empty directory unless forced.
    assert!(matches!(
        store.export(head, &out, false, &NoProgress),
        Err(StoreError::NotEmpty { .. })
    ));
    store
        .export(r3.commit.unwrap(), &out, true, &NoProgress)
        .unwrap();
    assert_eq!(
        std::fs::read(out.join("dir/sub/deeper/x")).unwrap(),
        b"changed"
    );
}

#[test]
fn snapshot_refuses_a_tree_containing_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::create(&tmp.path().join("inner/store"), &StoreOptions::default()).unwrap();
    store.create_project("p", "init").unwrap();
    let b = BranchRef::parse("p/main").unwrap();
    let err = store
        .snapshot(&b, tmp.path(), "x", &NoProgress)
        .unwrap_err();
    assert!(
        matches!(err, StoreError::SourceContainsStore { .. }),
        "{err}"
    );
}

#[test]
fn unreadable_file_names_the_path_and_commits_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("ok"), b"fine").unwrap();
    let store = new_store(tmp.path());
    store.create_project("p", "init").unwrap();
    let b = BranchRef::parse("p/main").unwrap();
    let head = store.branch_head(&b).unwrap();
    if rustix::process::geteuid().is_root() {
        // Root bypasses permission bits (CAP_DAC_OVERRIDE), so as root the
        // path-naming error is checked through a source that does not exist;
        // the CLI tests cover an unreadable file as a nonroot user.
        let err = store
            .snapshot(&b, &src.join("missing"), "x", &NoProgress)
            .unwrap_err();
        assert!(err.to_string().contains("missing"), "{err}");
    } else {
        std::fs::write(src.join("secret"), b"x").unwrap();
        std::fs::set_permissions(src.join("secret"), std::fs::Permissions::from_mode(0o0)).unwrap();
        let err = store.snapshot(&b, &src, "x", &NoProgress).unwrap_err();
        assert!(err.to_string().contains("secret"), "{err}");
    }
    assert_eq!(store.branch_head(&b).unwrap(), head);
}
