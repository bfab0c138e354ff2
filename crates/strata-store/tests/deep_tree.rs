//! A tree as deep as Linux paths allow (2,000 one-byte levels) through
//! every walk of the Store: snapshot, re-snapshot, export, diff, fsck. The
//! calling thread and the rayon pool doing the work both get 256 KiB
//! stacks; the walks used to recurse once per level and overflowed stacks
//! eight times larger (an overflow aborts the whole process). Passing here
//! means no walk's stack grows with the depth of the tree.

use std::path::{Path, PathBuf};
use strata_store::{BranchRef, ChangeKind, EntryKind, NoProgress, Store, StoreOptions};

const DEPTH: usize = 2_000;
const SMALL_STACK: usize = 256 * 1024;

fn deep_path(root: &Path, levels: usize) -> PathBuf {
    let mut p = root.to_path_buf();
    for _ in 0..levels {
        p.push("a");
    }
    p
}

fn deep_name(levels: usize, name: &str) -> Vec<u8> {
    format!("{}{name}", "a/".repeat(levels)).into_bytes()
}

/// A temporary directory on tmpfs when there is one: on this machine the
/// root filesystem is ext4 mounted with `discard`, where removing a
/// 2,000-level tree takes seconds (each rmdir waits for a TRIM).
fn fast_tempdir() -> tempfile::TempDir {
    if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm")
    } else {
        tempfile::tempdir().expect("tempdir")
    }
}

/// Run `f` inside a two-thread rayon pool whose threads have small stacks,
/// called from a thread with a small stack.
fn on_small_stacks(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(SMALL_STACK)
        .spawn(move || {
            rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .stack_size(SMALL_STACK)
                .build()
                .expect("build a thread pool")
                .install(f)
        })
        .expect("spawn a thread")
        .join()
        .expect("the test failed (see above)");
}

#[test]
fn a_2000_level_tree_snapshots_exports_and_diffs_on_small_stacks() {
    let tmp = fast_tempdir();
    let root = tmp.path().to_path_buf();
    on_small_stacks(move || {
        let src = root.join("s");
        let bottom = deep_path(&src, DEPTH);
        assert!(
            bottom.as_os_str().len() + 16 < 4096,
            "{} is too long a temporary directory for a {DEPTH}-level tree within PATH_MAX; point TMPDIR at a shorter one",
            root.display()
        );
        let t = std::time::Instant::now();
        let lap = |what: &str| eprintln!("{what}: {:.2} s", t.elapsed().as_secs_f64());
        std::fs::create_dir_all(&bottom).unwrap();
        std::fs::write(bottom.join("leaf"), b"deep").unwrap();
        // A file beside every 100th level, so that levels hold more than
        // the next one.
        for l in (0..DEPTH).step_by(100) {
            std::fs::write(deep_path(&src, l).join(format!("f{l}")), l.to_string()).unwrap();
        }
        let files = 1 + DEPTH / 100;
        let store = Store::create(&root.join("store"), &StoreOptions::default()).unwrap();
        let empty = store.create_project("e", "empty").unwrap();
        let r = store
            .create_project_from("p", &src, "deep", &NoProgress)
            .expect("snapshot of a deep tree");
        assert_eq!((r.dirs, r.files), (DEPTH as u64, files as u64));
        let c1 = r.commit.unwrap();
        lap("made and snapshotted");
        let leaf = store
            .read_path(c1, &deep_name(DEPTH, "leaf"))
            .unwrap()
            .expect("the leaf is in the commit");
        let EntryKind::File(content) = leaf.kind else {
            panic!("the leaf is a {}", leaf.kind.type_name())
        };
        assert_eq!(store.read_file_range(&content, 0, 100).unwrap(), b"deep");

        // The same tree again: the same ids, so no new commit.
        let b = BranchRef::parse("p/main").unwrap();
        let again = store.snapshot(&b, &src, "again", &NoProgress).unwrap();
        assert!(again.unchanged, "an unchanged deep tree made a new commit");
        lap("snapshotted again");

        let out = root.join("o");
        let e = store
            .export(c1, &out, false, &NoProgress)
            .expect("export of a deep tree");
        assert_eq!((e.dirs, e.files), (DEPTH as u64, files as u64));
        assert_eq!(
            std::fs::read(deep_path(&out, DEPTH).join("leaf")).unwrap(),
            b"deep"
        );
        assert_eq!(
            std::fs::read(deep_path(&out, 1900).join("f1900")).unwrap(),
            b"1900"
        );

        lap("exported");
        let added = store.diff(empty, c1).expect("diff of a deep tree");
        assert_eq!(added.len(), DEPTH + files);
        assert!(added.iter().all(|c| c.kind == ChangeKind::Added));
        let deleted = store.diff(c1, empty).unwrap();
        assert_eq!(deleted.len(), DEPTH + files);

        lap("diffed");
        std::fs::write(bottom.join("leaf"), b"deeper").unwrap();
        std::fs::write(deep_path(&src, 1500).join("new"), b"new").unwrap();
        let c2 = store
            .snapshot(&b, &src, "edit", &NoProgress)
            .unwrap()
            .commit
            .unwrap();
        let mut d: Vec<_> = store
            .diff(c1, c2)
            .unwrap()
            .into_iter()
            .map(|c| (c.path, c.kind))
            .collect();
        d.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(
            d,
            vec![
                (deep_name(DEPTH, "leaf"), ChangeKind::Modified),
                (deep_name(1500, "new"), ChangeKind::Added),
            ]
        );
        lap("snapshotted and diffed a change");
        let f = store.fsck(&NoProgress).unwrap();
        assert!(f.ok, "fsck: {:?}", f.problems);
        lap("fsck");
    });
    let t = std::time::Instant::now();
    drop(tmp);
    eprintln!("removed: {:.2} s", t.elapsed().as_secs_f64());
}
