//! Disk full (docs/reliability.md), beyond what strata-store (import into a
//! full tmpfs) and strata-workspace (commit into a full Store disk)
//! already test:
//!
//! * a Workspace whose scratch directory fills up while programs write:
//!   the writer gets ENOSPC; every operation that was acknowledged before
//!   is kept (journal and upper files), survives a reopen and commits;
//!   the first read of a base file not cached yet gets ENOSPC too (the
//!   content cache shares the disk); after freeing space the same writes
//!   and that read succeed;
//! * a Store on a loop-mounted ext4 (delayed allocation: ENOSPC can come
//!   late, at write-back, unlike tmpfs) that fills during snapshots and
//!   commits: a clear error, the branch where it was, fsck clean, and the
//!   same snapshot succeeds after space is freed.
//!
//! Both need root (mount(8)); CI runs as root.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use strata_store::{BranchRef, NoProgress, Store, StoreOptions};
use strata_torture::{check_store, manifest_commit, manifest_dir, random_bytes, tempdir};
use strata_workspace::{CommitOutcome, MountOptions, Workspace, WorkspaceOptions};

/// A mounted small filesystem, unmounted (lazily) on drop.
struct SmallFs {
    dir: PathBuf,
    loop_image: Option<PathBuf>,
}

impl SmallFs {
    fn tmpfs(dir: &Path, size: &str) -> SmallFs {
        std::fs::create_dir_all(dir).unwrap();
        let _no_fork = strata_torture::no_fork();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("run mount(8)");
        assert!(
            st.success(),
            "mounting a tmpfs at {} failed (root?)",
            dir.display()
        );
        SmallFs {
            dir: dir.to_path_buf(),
            loop_image: None,
        }
    }

    /// ext4 in an image file, loop-mounted (mkfs.ext4(8), mount(8) -o loop).
    fn ext4(dir: &Path, image: &Path, mib: u64) -> SmallFs {
        std::fs::create_dir_all(dir).unwrap();
        let f = std::fs::File::create(image).unwrap();
        f.set_len(mib << 20).unwrap();
        let _no_fork = strata_torture::no_fork();
        let st = Command::new("mkfs.ext4")
            .args(["-q", "-F", "-m", "0"])
            .arg(image)
            .status()
            .expect("run mkfs.ext4 (e2fsprogs)");
        assert!(st.success(), "mkfs.ext4 failed");
        let st = Command::new("mount")
            .args(["-o", "loop"])
            .arg(image)
            .arg(dir)
            .status()
            .expect("run mount(8)");
        assert!(
            st.success(),
            "loop-mounting ext4 at {} failed (root? loop devices?)",
            dir.display()
        );
        SmallFs {
            dir: dir.to_path_buf(),
            loop_image: Some(image.to_path_buf()),
        }
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _no_fork = strata_torture::no_fork();
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        if let Some(i) = &self.loop_image {
            let _ = std::fs::remove_file(i);
        }
    }
}

fn is_enospc(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOSPC) || e.raw_os_error() == Some(libc::EDQUOT)
}

#[test]
fn workspace_writes_into_a_full_scratch_disk_lose_nothing_acknowledged() {
    strata_torture::require_fuse();
    let tmp = tempdir();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("base.txt"), b"base").unwrap();
    let store = Store::create(&tmp.path().join("store"), &StoreOptions::default()).unwrap();
    store
        .create_project_from("p", &src, "base", &NoProgress)
        .unwrap();
    let fs = SmallFs::tmpfs(&tmp.path().join("small"), "8m");
    // Ballast the administrator deletes to free space (step 3).
    let ballast = fs.dir.join("ballast");
    std::fs::write(&ballast, vec![1u8; 2 << 20]).unwrap();
    let scratch = fs.dir.join("scratch");
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let ws = Workspace::create(&store, "p/main", &scratch, &WorkspaceOptions::default()).unwrap();
    let id = ws.id().to_string();
    // Passthrough off: writes go through the daemon, which must turn the
    // scratch filesystem's ENOSPC into the writer's ENOSPC.
    let opts = MountOptions {
        passthrough: false,
        ..MountOptions::default()
    };
    // No fork in this process while the mount has open files (no_fork).
    let no_fork = strata_torture::no_fork();
    let h = ws.mount(&mnt, &opts).unwrap();
    let mut rng = rand::rng();
    // 0. Small files while there is room: acknowledged.
    let mut acked = Vec::new();
    for i in 0..50 {
        let name = format!("early-{i:02}");
        let body = format!("early file {i}");
        std::fs::write(mnt.join(&name), &body).unwrap();
        acked.push((name, body));
    }
    // 1. A big write runs into ENOSPC.
    let mut big = std::fs::File::create(mnt.join("big.bin")).unwrap();
    let block = random_bytes(&mut rng, 1 << 20);
    let mut written = 0usize;
    let err = loop {
        match big.write_all(&block).and_then(|_| big.sync_all()) {
            Ok(()) => written += block.len(),
            Err(e) => break e,
        }
        assert!(
            written < 64 << 20,
            "wrote 64 MiB into an 8 MiB scratch disk"
        );
    };
    assert!(is_enospc(&err), "the writer got {err}, not ENOSPC");
    drop(big);
    // 2. Small files until even they fail: each acknowledged one counts.
    for i in 0..10_000 {
        let name = format!("small-{i:05}");
        let body = format!("small file {i}");
        match std::fs::write(mnt.join(&name), &body) {
            Ok(()) => acked.push((name, body)),
            Err(e) => {
                assert!(is_enospc(&e), "small write {i}: {e}");
                break;
            }
        }
    }
    // The mount still answers. Reading a base file not read before fills
    // the content cache, which lives on the same full disk: the reader gets
    // ENOSPC, as from a local filesystem (it used to get EIO).
    let read_while_full = std::fs::read(mnt.join("base.txt"));
    match &read_while_full {
        Err(e) => assert!(
            is_enospc(e),
            "the first read of a base file on a full scratch disk got {e}, not ENOSPC"
        ),
        Ok(b) => panic!(
            "a base file not cached yet was read from a full scratch disk ({} bytes): the test no longer fills the disk",
            b.len()
        ),
    }
    assert!(std::fs::metadata(mnt.join("early-00")).is_ok());
    // 3. Deleting from the full Workspace needs a journal record: it may
    // fail while the disk is full, with ENOSPC. Space freed outside the
    // Workspace makes it work, and the same writes succeed again.
    let unlink_while_full = std::fs::remove_file(mnt.join("big.bin"));
    eprintln!("unlink while the scratch disk is full: {unlink_while_full:?}");
    if let Err(e) = &unlink_while_full {
        assert!(
            is_enospc(e),
            "unlink on a full scratch disk got {e}, not ENOSPC"
        );
    }
    std::fs::remove_file(&ballast).unwrap();
    if unlink_while_full.is_err() {
        std::fs::remove_file(mnt.join("big.bin")).expect("unlink after space was freed");
    }
    // The same read, now that there is space: the right bytes.
    assert_eq!(std::fs::read(mnt.join("base.txt")).unwrap(), b"base");
    std::fs::write(mnt.join("after.txt"), b"space again").unwrap();
    let want = manifest_dir(&mnt);
    h.unmount().unwrap();
    drop(no_fork);
    drop(ws);
    // 4. A fresh open (journal replay) shows everything acknowledged, and
    // commits exactly the view the mount showed.
    let ws = Workspace::open(&store, &id, &scratch, &WorkspaceOptions::default()).unwrap();
    let CommitOutcome::Committed(c) = ws.commit("after ENOSPC").unwrap() else {
        panic!("nothing to commit")
    };
    let got = manifest_commit(&store, c).unwrap();
    assert!(got == want, "the commit differs from what the mount showed");
    for (name, _) in &acked {
        let e = store.read_path(c, name.as_bytes()).unwrap();
        assert!(e.is_some(), "{name} was acknowledged and is lost");
    }
    let e = store
        .read_path(c, acked.last().unwrap().0.as_bytes())
        .unwrap()
        .unwrap();
    let strata_store::EntryKind::File(fc) = e.kind else {
        panic!()
    };
    assert_eq!(
        store.read_file_range(&fc, 0, 100).unwrap(),
        acked.last().unwrap().1.as_bytes()
    );
    eprintln!(
        "scratch 8 MiB: big write failed after {} MiB with ENOSPC, {} small files acknowledged, all committed",
        written >> 20,
        acked.len()
    );
    ws.discard().unwrap();
    check_store(store.dir());
}

#[test]
fn store_on_a_full_ext4_disk_fails_cleanly_and_recovers() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test loop-mounts ext4: run it as root (CI does)"
    );
    let tmp = tempdir();
    let fs = SmallFs::ext4(&tmp.path().join("small"), &tmp.path().join("ext4.img"), 128);
    // Ballast the administrator deletes to free space.
    let ballast = fs.dir.join("ballast");
    std::fs::write(&ballast, vec![1u8; 96 << 20]).unwrap();
    let dir = fs.dir.join("store");
    let store = Store::create(&dir, &StoreOptions::default()).unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("first.txt"), b"committed before the disk filled").unwrap();
    store
        .create_project_from("p", &src, "first", &NoProgress)
        .unwrap();
    let b = BranchRef::parse("p/main").unwrap();
    let before = store.branch_head(&b).unwrap();
    let first = manifest_commit(&store, before).unwrap();
    // Incompressible content larger than the disk.
    let mut rng = rand::rng();
    for i in 0..5 {
        std::fs::write(src.join(format!("big{i}")), random_bytes(&mut rng, 8 << 20)).unwrap();
    }
    let e = store
        .snapshot(&b, &src, "too big", &NoProgress)
        .expect_err("a 40 MiB snapshot fit in ~28 MiB of free space");
    let msg = e.to_string();
    assert!(
        msg.contains("space") || msg.contains("full") || msg.contains("ENOSPC"),
        "unclear error for a full disk: {msg}"
    );
    assert_eq!(store.branch_head(&b).unwrap(), before, "the branch moved");
    drop(store);
    // Reopened as the next process would: intact, first commit readable.
    let heads = check_store(&dir);
    assert_eq!(heads["p/main"], before);
    let store = Store::open(&dir, &StoreOptions::default()).unwrap();
    assert!(manifest_commit(&store, before).unwrap() == first);
    // gc on a full disk: an error or a success, never damage.
    if let Err(e) = store.gc(&NoProgress) {
        eprintln!("gc on the full disk: {e}");
    }
    check_store(&dir);
    // Free space outside the Store; the same snapshot succeeds.
    std::fs::remove_file(&ballast).unwrap();
    let r = store
        .snapshot(&b, &src, "fits now", &NoProgress)
        .expect("snapshot after freeing space");
    let c = r.commit.unwrap();
    assert!(manifest_commit(&store, c).unwrap() == manifest_dir(&src));
    drop(store);
    check_store(&dir);
}
