//! Privilege on the way out of the Store and privacy of the Store itself.
//!
//! Export as root restores owners; a setuid/setgid bit or an xattr outside
//! `user.` (a `security.capability` with a valid layout, a `trusted.` one)
//! is only written with `ExportOptions::preserve_privileges`, and the
//! Store keeps them either way. A new Store is 0700 with 0600 files, and
//! fsck warns about an old one that others can read.

mod common;
use common::*;
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use strata_store::*;

/// These tests create files owned by uid 1500 and set `trusted.` and
/// `security.` xattrs: only root can. Fail loudly elsewhere.
fn require_root() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test exports as root (owners, setuid bits, security.capability); run it as root"
    );
}

/// `security.capability`, VFS_CAP_REVISION_2 with the effective flag and
/// CAP_NET_RAW (13) permitted: the layout the kernel accepts
/// (capability.h, struct vfs_cap_data), so setting it as root succeeds.
fn file_cap() -> Vec<u8> {
    let mut v = Vec::new();
    for w in [0x0200_0001u32, 1 << 13, 0, 0, 0] {
        v.extend_from_slice(&w.to_le_bytes());
    }
    v
}

fn xattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 256];
    match rustix::fs::lgetxattr(p, name, &mut buf) {
        Ok(n) => Some(buf[..n].to_vec()),
        Err(rustix::io::Errno::NODATA) => None,
        Err(e) => panic!("getxattr {name} on {}: {e}", p.display()),
    }
}

/// A commit with what a rootless user who writes strata.db could forge
/// (a setuid-root shell with a file capability) and what a Sandbox command
/// can commit (a 06755 file owned by its uid), plus a setgid directory.
fn privileged_commit(store: &Store) -> ObjectId {
    store.create_project("p", "init").unwrap();
    let body = store.write_file_bytes(b"#!/bin/sh\n", None).unwrap();
    let inner = store.write_tree(vec![]).unwrap();
    let entry = |name: &str, kind: EntryKind, mode, uid, xattrs| TreeEntry {
        name: name.as_bytes().to_vec(),
        kind,
        mode,
        uid,
        gid: uid,
        mtime_ns: 1_700_000_000_000_000_000,
        xattrs,
        link_group: 0,
    };
    let x = |k: &str, v: &[u8]| (k.as_bytes().to_vec(), v.to_vec());
    let t = store
        .write_tree(vec![
            entry(
                "root-shell",
                EntryKind::File(body.clone()),
                0o4755,
                0,
                vec![
                    x("security.capability", &file_cap()),
                    x("user.note", b"kept"),
                ],
            ),
            entry(
                "sandbox-shell",
                EntryKind::File(body.clone()),
                0o6755,
                1500,
                vec![],
            ),
            entry(
                "trusted",
                EntryKind::File(body.clone()),
                0o644,
                1500,
                vec![x("trusted.strata", b"t")],
            ),
            entry("shared", EntryKind::Dir(inner), 0o2775, 1500, vec![]),
            entry("plain", EntryKind::File(body), 0o755, 1500, vec![]),
        ])
        .unwrap();
    let b = BranchRef::parse("p/main").unwrap();
    let head = store.branch_head(&b).unwrap();
    store
        .commit_tree(&b, head, t, "privileged", BTreeMap::new())
        .unwrap()
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

#[test]
fn export_drops_setuid_setgid_and_privileged_xattrs_unless_asked() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let commit = privileged_commit(&store);

    let out = tmp.path().join("safe");
    let r = store.export(commit, &out, false, &NoProgress).unwrap();
    assert_eq!(r.dropped_privileges, 4, "{r:?}");
    assert_eq!(r.restored_privileges, 0, "{r:?}");
    assert_eq!(mode(&out.join("root-shell")), 0o755);
    assert_eq!(mode(&out.join("sandbox-shell")), 0o755);
    assert_eq!(mode(&out.join("shared")), 0o775);
    assert_eq!(mode(&out.join("plain")), 0o755);
    assert_eq!(xattr(&out.join("root-shell"), "security.capability"), None);
    assert_eq!(xattr(&out.join("trusted"), "trusted.strata"), None);
    assert_eq!(
        xattr(&out.join("root-shell"), "user.note").as_deref(),
        Some(&b"kept"[..])
    );
    // Owners are still restored as root: no privilege without the bits.
    let md = std::fs::metadata(out.join("sandbox-shell")).unwrap();
    assert_eq!((md.uid(), md.gid()), (1500, 1500));
    assert_eq!(std::fs::metadata(out.join("root-shell")).unwrap().uid(), 0);

    // The Store kept every bit and xattr.
    let e = store.read_path(commit, b"root-shell").unwrap().unwrap();
    assert_eq!(e.mode, 0o4755);
    assert!(e.xattrs.iter().any(|(k, _)| k == b"security.capability"));

    let exact = tmp.path().join("exact");
    let opts = ExportOptions {
        force: false,
        preserve_privileges: true,
    };
    let r = store
        .export_with(commit, &exact, &opts, &NoProgress)
        .unwrap();
    assert_eq!(r.restored_privileges, 4, "{r:?}");
    assert_eq!(r.dropped_privileges, 0, "{r:?}");
    assert_eq!(mode(&exact.join("root-shell")), 0o4755);
    assert_eq!(mode(&exact.join("sandbox-shell")), 0o6755);
    assert_eq!(mode(&exact.join("shared")), 0o2775);
    assert_eq!(
        xattr(&exact.join("root-shell"), "security.capability"),
        Some(file_cap())
    );
    assert_eq!(
        xattr(&exact.join("trusted"), "trusted.strata").as_deref(),
        Some(&b"t"[..])
    );
}

/// A real setuid file snapshotted from disk: kept in the Store, not
/// recreated by a default export.
#[test]
fn a_snapshotted_setuid_file_is_exported_without_its_bits() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let f = src.join("x");
    std::fs::write(&f, b"\x7fELF pretend").unwrap();
    std::os::unix::fs::chown(&f, Some(1500), Some(1500)).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o6755)).unwrap();
    let store = new_store(tmp.path());
    let r = store
        .create_project_from("p", &src, "setuid", &NoProgress)
        .unwrap();
    let commit = r.commit.unwrap();
    assert_eq!(store.read_path(commit, b"x").unwrap().unwrap().mode, 0o6755);
    let out = tmp.path().join("out");
    let rep = store.export(commit, &out, false, &NoProgress).unwrap();
    assert_eq!(rep.dropped_privileges, 1);
    let md = std::fs::metadata(out.join("x")).unwrap();
    assert_eq!(md.mode() & 0o7777, 0o755);
    assert_eq!(md.uid(), 1500);
}

#[test]
fn a_new_store_is_private_whatever_the_umask() {
    let tmp = tempfile::tempdir().unwrap();
    let old = rustix::process::umask(rustix::fs::Mode::empty());
    let store = new_store(tmp.path());
    rustix::process::umask(old);
    // A write, so that the WAL and shared-memory files exist.
    store.create_project("p", "init").unwrap();
    let dir = store.dir().to_path_buf();
    assert_eq!(mode(&dir), 0o700, "the Store directory");
    for f in ["strata.db", "strata.db-wal", "strata.db-shm", "lock"] {
        assert_eq!(mode(&dir.join(f)), 0o600, "{f}");
    }
    // A large write makes the pack directory and a pack (docs/design.md,
    // "Pack files"): private too, under umask 0.
    let old = rustix::process::umask(rustix::fs::Mode::empty());
    let written = store.write_file_bytes(&seeded_bytes(9, 2 << 20), None);
    rustix::process::umask(old);
    written.unwrap();
    assert_eq!(mode(&dir.join("packs")), 0o700, "the pack directory");
    let packs: Vec<_> = std::fs::read_dir(dir.join("packs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(packs.len(), 1, "{packs:?}");
    assert_eq!(mode(&packs[0]), 0o600, "{}", packs[0].display());
    let report = store.fsck(&NoProgress).unwrap();
    assert!(report.ok && report.warnings.is_empty(), "{report:?}");
}

#[test]
fn an_old_readable_store_opens_and_fsck_warns() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = {
        let store = new_store(tmp.path());
        store.create_project("p", "init").unwrap();
        store.dir().to_path_buf()
    };
    let chmod = |p: &Path, m| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
    chmod(&dir, 0o755).unwrap();
    chmod(&dir.join("strata.db"), 0o644).unwrap();
    let store = Store::open(&dir, &StoreOptions::default()).unwrap();
    store.resolve("p/main").unwrap();
    let report = store.fsck(&NoProgress).unwrap();
    assert!(report.ok, "a warning is not a problem: {report:?}");
    let all = report.warnings.join("\n");
    assert!(
        all.contains(&format!("chmod 700 {}", dir.display())),
        "{all}"
    );
    assert!(
        all.contains(&format!("chmod 600 {}", dir.join("strata.db").display())),
        "{all}"
    );
    // Opening changed nothing: the owner decides.
    assert_eq!(mode(&dir), 0o755);
}
