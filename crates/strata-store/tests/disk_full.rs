//! A Store on a filesystem that fills up mid-import: the import fails with a
//! clear error, the branch stays at its old head, fsck stays clean, and the
//! same import succeeds once space is freed. Needs root to mount a small
//! tmpfs (CI runs as root); fails loudly otherwise.

mod common;
use common::*;
use std::path::Path;
use std::process::Command;
use strata_store::*;

struct Unmount<'a>(&'a Path);
impl Drop for Unmount<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.0).status();
    }
}

#[test]
fn import_into_a_full_disk_fails_cleanly_and_recovers() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test mounts a 24 MiB tmpfs and needs root (CI runs as root)"
    );
    let tmp = tempfile::tempdir().unwrap();
    let small = tmp.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=24m", "tmpfs"])
        .arg(&small)
        .status()
        .unwrap();
    assert!(st.success(), "mount tmpfs failed");
    let _guard = Unmount(&small);

    let store = Store::create(&small.join("store"), &StoreOptions::default()).unwrap();
    store.create_project("p", "init").unwrap();
    let b = BranchRef::parse("p/main").unwrap();
    let head = store.branch_head(&b).unwrap();

    // 40 MiB of incompressible data cannot fit in 24 MiB.
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    for i in 0..10 {
        std::fs::write(src.join(format!("f{i}")), seeded_bytes(i + 1, 4 << 20)).unwrap();
    }
    let err = store
        .snapshot(&b, &src, "too big", &NoProgress)
        .unwrap_err();
    assert!(
        matches!(err, StoreError::DiskFull { .. }),
        "expected DiskFull, got {err:?}"
    );
    assert!(err.to_string().contains("full"), "{err}");
    assert_eq!(store.branch_head(&b).unwrap(), head);
    let r = store.fsck(&NoProgress).unwrap();
    assert!(r.ok, "{:?}", r.problems);

    // Free space: shrink the source, collect what the failed import left.
    for i in 2..10 {
        std::fs::remove_file(src.join(format!("f{i}"))).unwrap();
    }
    store.gc(&NoProgress).unwrap();
    let rep = store.snapshot(&b, &src, "fits", &NoProgress).unwrap();
    let c = rep.commit.unwrap();
    let e = store.read_path(c, b"f1").unwrap().unwrap();
    let EntryKind::File(content) = e.kind else {
        panic!("not a file")
    };
    assert_eq!(
        store.read_file_range(&content, 0, 4 << 20).unwrap(),
        seeded_bytes(2, 4 << 20)
    );
    assert!(store.fsck(&NoProgress).unwrap().ok);
}
