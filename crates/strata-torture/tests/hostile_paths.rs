//! Hostile paths and names (docs/reliability.md): tree entry names that are
//! not one path component, symlinks in the way of an export, NUL bytes,
//! names over 255 bytes and overlong paths in every Store and Workspace
//! API argument that names a path, and an import next to symlinks that
//! point out of the tree. Each is refused with an error or stored
//! verbatim; nothing is ever written outside the target directory and no
//! symlink is ever followed.

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use strata_store::{
    BranchRef, EntryKind, Kind, NoProgress, ObjectId, Store, StoreOptions, TreeEntry, TreeNode,
};
use strata_torture::tempdir;

fn store(dir: &Path) -> Store {
    Store::create(&dir.join("store"), &StoreOptions::default()).expect("create the Store")
}

fn entry(name: &[u8], kind: EntryKind) -> TreeEntry {
    let mode = match kind {
        EntryKind::Dir(_) => 0o755,
        EntryKind::Symlink(_) => 0o777,
        _ => 0o644,
    };
    TreeEntry {
        name: name.to_vec(),
        kind,
        mode,
        uid: 0,
        gid: 0,
        mtime_ns: 0,
        xattrs: vec![],
        link_group: 0,
    }
}

fn file(store: &Store, name: &[u8], bytes: &[u8]) -> TreeEntry {
    entry(
        name,
        EntryKind::File(store.write_file_bytes(bytes, None).expect("write file")),
    )
}

fn commit(store: &Store, tree: ObjectId) -> ObjectId {
    let b = BranchRef::parse("p/main").unwrap();
    let head = match store.branch_head(&b) {
        Ok(h) => h,
        Err(_) => store.create_project("p", "init").expect("create project"),
    };
    store
        .commit_tree(&b, head, tree, "hostile", BTreeMap::new())
        .expect("commit")
}

/// Insert a tree node directly as stored bytes, bypassing `write_tree`'s
/// checks: what a Store written by another (older, buggy or hostile) build
/// can hold. The row is well-formed (raw encoding, right length, right
/// hash), so only the names are hostile.
fn raw_tree(store_dir: &Path, entries: Vec<TreeEntry>) -> ObjectId {
    let bytes = postcard::to_stdvec(&TreeNode::Leaf(entries)).expect("encode");
    let id = ObjectId::hash(Kind::Tree, &bytes);
    let db = rusqlite::Connection::open(store_dir.join("strata.db")).expect("open the db");
    db.execute(
        "INSERT OR IGNORE INTO objects (id, kind, enc, raw_len, base, depth, data)
         VALUES (?1, ?2, 0, ?3, NULL, 0, ?4)",
        rusqlite::params![&id.0[..], Kind::Tree as u8, bytes.len() as i64, bytes],
    )
    .expect("insert a raw tree");
    id
}

/// Everything under `root`, as relative paths (lstat, never following).
fn listing(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                todo.push(p.clone());
            }
            out.push(p.strip_prefix(root).unwrap().to_path_buf());
        }
    }
    out.sort();
    out
}

/// Export `commit` into `<tmp>/box/target` and return the export's result;
/// panics if anything appeared in `<tmp>/box` or `<tmp>/outside` other than
/// the target, or anywhere outside the target at all.
fn export_confined(
    store: &Store,
    commit: ObjectId,
    tmp: &Path,
    force: bool,
) -> strata_store::Result<()> {
    let boxdir = tmp.join("box");
    let outside = tmp.join("outside");
    std::fs::create_dir_all(boxdir.join("target")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let before_box: Vec<_> = listing(&boxdir)
        .into_iter()
        .filter(|p| !p.starts_with("target"))
        .collect();
    let before_out = listing(&outside);
    let r = store
        .export(commit, &boxdir.join("target"), force, &NoProgress)
        .map(|_| ());
    let after_box: Vec<_> = listing(&boxdir)
        .into_iter()
        .filter(|p| !p.starts_with("target"))
        .collect();
    assert_eq!(before_box, after_box, "export wrote next to its target");
    assert_eq!(
        before_out,
        listing(&outside),
        "export wrote outside its target (through a symlink or a hostile name)"
    );
    assert!(
        !Path::new("/tmp/strata-torture-escaped").exists(),
        "export wrote to an absolute path"
    );
    r
}

/// The names a directory entry can never have: empty, `.`, `..`, with a
/// '/', with a NUL. `write_tree` refuses each with an error; a stored tree
/// that holds one anyway (written around `write_tree`) is refused by
/// export, which never joins such a name onto its target.
#[test]
fn names_that_are_not_one_component_are_refused() {
    let bad: Vec<&[u8]> = vec![
        b"",
        b".",
        b"..",
        b"a/b",
        b"/tmp/strata-torture-escaped",
        b"../outside/x",
        b"x\0y",
    ];
    for name in bad {
        let tmp = tempdir();
        let s = store(tmp.path());
        let shown = String::from_utf8_lossy(name).into_owned();
        let e = s.write_tree(vec![file(&s, name, b"payload")]);
        assert!(
            e.is_err(),
            "write_tree accepted the entry name {shown:?}: a tree may only hold single path components"
        );
        let msg = e.unwrap_err().to_string();
        assert!(!msg.is_empty(), "an empty error for {shown:?}");

        let t = raw_tree(s.dir(), vec![file(&s, name, b"payload")]);
        let c = commit(&s, t);
        let r = export_confined(&s, c, tmp.path(), false);
        assert!(
            r.is_err(),
            "export of a stored tree holding the name {shown:?} succeeded"
        );
    }
}

/// A symlink already in the target (from an earlier export of a commit
/// whose tree had `a -> outside`), then `export --force` of a commit where
/// `a` is a directory with entries: the entries land in the target, never
/// in the directory the symlink points to.
#[test]
fn export_force_over_a_symlink_never_follows_it() {
    let tmp = tempdir();
    let s = store(tmp.path());
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let link = entry(
        b"a",
        EntryKind::Symlink(outside.as_os_str().as_bytes().to_vec()),
    );
    let c1 = commit(&s, s.write_tree(vec![link.clone()]).unwrap());
    export_confined(&s, c1, tmp.path(), false).expect("export the symlink");
    let target = tmp.path().join("box/target");
    assert!(std::fs::symlink_metadata(target.join("a"))
        .unwrap()
        .file_type()
        .is_symlink());

    let inner = s
        .write_tree(vec![file(&s, b"x", b"must stay inside")])
        .unwrap();
    let c2 = commit(
        &s,
        s.write_tree(vec![entry(b"a", EntryKind::Dir(inner))])
            .unwrap(),
    );
    let r = export_confined(&s, c2, tmp.path(), true);
    // Either the symlink is replaced by the directory, or the export fails;
    // export_confined already asserted that nothing reached `outside`.
    if r.is_ok() {
        let md = std::fs::symlink_metadata(target.join("a")).unwrap();
        assert!(md.is_dir(), "a is not the exported directory");
        assert_eq!(
            std::fs::read(target.join("a/x")).unwrap(),
            b"must stay inside"
        );
    }
}

/// One stored tree holding a symlink `a` and then a directory `a` with an
/// entry (duplicate names, which `write_tree` refuses but stored bytes can
/// hold): export never writes through the symlink.
#[test]
fn export_of_a_symlink_then_a_directory_of_the_same_name() {
    let tmp = tempdir();
    let s = store(tmp.path());
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let inner = s.write_tree(vec![file(&s, b"x", b"escaped")]).unwrap();
    let link = entry(
        b"a",
        EntryKind::Symlink(outside.as_os_str().as_bytes().to_vec()),
    );
    let dup = s.write_tree(vec![link.clone(), entry(b"a", EntryKind::Dir(inner))]);
    assert!(dup.is_err(), "write_tree accepted two entries named a");
    // Every order of the two, as stored bytes.
    for entries in [
        vec![link.clone(), entry(b"a", EntryKind::Dir(inner))],
        vec![entry(b"a", EntryKind::Dir(inner)), link.clone()],
    ] {
        let t = raw_tree(s.dir(), entries);
        let c = commit(&s, t);
        let _ = std::fs::remove_dir_all(tmp.path().join("box"));
        // The result may be an error (duplicate names): what matters is
        // that nothing escaped, which export_confined asserts.
        let _ = export_confined(&s, c, tmp.path(), false);
    }
}

/// Names over NAME_MAX (255 bytes) are stored (the Store has no limit of
/// its own) but exporting them fails with a clear error; lookups of
/// overlong names and paths answer "not found", never panic.
#[test]
fn long_names_and_overlong_paths() {
    let tmp = tempdir();
    let s = store(tmp.path());
    let long = vec![b'n'; 256];
    let t = s
        .write_tree(vec![file(&s, &long, b"x"), file(&s, b"ok", b"fine")])
        .unwrap();
    let c = commit(&s, t);
    let e = export_confined(&s, c, tmp.path(), false).expect_err("a 256-byte name exported");
    let msg = e.to_string();
    assert!(
        msg.contains("name") || msg.contains("long"),
        "unclear error for a 256-byte name: {msg}"
    );
    let huge_path: Vec<u8> = std::iter::repeat_n(&b"d/"[..], 50_000)
        .flatten()
        .copied()
        .collect();
    for p in [
        &huge_path[..],
        &b"../../etc/passwd"[..],
        &b"/etc/passwd"[..],
        &b"ok\0"[..],
        &long[..],
    ] {
        match s.read_path(c, p) {
            Ok(None) | Err(_) => {}
            Ok(Some(e)) if p == &long[..] => assert_eq!(e.name, long),
            Ok(Some(e)) => panic!(
                "read_path({:?}) found {:?}",
                String::from_utf8_lossy(&p[..p.len().min(40)]),
                String::from_utf8_lossy(&e.name)
            ),
        }
    }
    assert!(s.lookup(t, &vec![b'z'; 1 << 20]).unwrap().is_none());
}

/// Every Store and Workspace call that takes a filesystem path refuses a
/// NUL byte and an overlong path with an error (never a panic, never a
/// truncated path that names something else).
#[test]
fn nul_and_overlong_path_arguments_are_errors() {
    let tmp = tempdir();
    let s = store(tmp.path());
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), b"f").unwrap();
    s.create_project_from("p", &src, "base", &NoProgress)
        .unwrap();
    let head = s.resolve("p/main").unwrap().commit;
    let b = BranchRef::parse("p/main").unwrap();

    let nul = tmp.path().join("a\0b");
    let overlong = tmp.path().join(
        std::iter::repeat_n("x".repeat(200), 30)
            .collect::<Vec<_>>()
            .join("/"),
    );
    for bad in [&nul, &overlong] {
        let shown = format!("{:.60}", bad.display());
        assert!(
            Store::create(bad, &StoreOptions::default()).is_err(),
            "create {shown}"
        );
        assert!(
            Store::open(bad, &StoreOptions::default()).is_err(),
            "open {shown}"
        );
        assert!(
            s.snapshot(&b, bad, "m", &NoProgress).is_err(),
            "snapshot {shown}"
        );
        assert!(
            s.export(head, bad, false, &NoProgress).is_err(),
            "export {shown}"
        );
        assert!(
            s.write_file_from_path(bad, None).is_err(),
            "write_file_from_path {shown}"
        );
        let ws = strata_workspace::Workspace::create(
            &s,
            "p/main",
            bad,
            &strata_workspace::WorkspaceOptions::default(),
        );
        assert!(ws.is_err(), "Workspace::create with scratch {shown}");
    }
    // A real Workspace, mountpoints that are not usable paths.
    let ws = strata_workspace::Workspace::create(
        &s,
        "p/main",
        &tmp.path().join("scratch"),
        &strata_workspace::WorkspaceOptions::default(),
    )
    .unwrap();
    for bad in [&nul, &overlong, &tmp.path().join("../..")] {
        let r = ws.mount(bad, &strata_workspace::MountOptions::default());
        assert!(r.is_err(), "mount at {:.60}", bad.display());
    }
    // Workspace IDs are names, not paths.
    for id in ["../x", "/etc", "a/b", "..", "x\0"] {
        let r = strata_workspace::Workspace::open(
            &s,
            id,
            &tmp.path().join("scratch"),
            &strata_workspace::WorkspaceOptions::default(),
        );
        assert!(r.is_err(), "Workspace::open accepted the id {id:?}");
    }
    // Nothing above changed the Store.
    assert_eq!(s.resolve("p/main").unwrap().commit, head);
    strata_torture::check_store(s.dir());
}

/// Import (snapshot) never follows a symlink: links to a directory and to a
/// file outside the tree are stored as links with their targets verbatim,
/// and none of the outside bytes enter the Store.
#[test]
fn import_never_follows_symlinks() {
    let tmp = tempdir();
    let s = store(tmp.path());
    let outside = tmp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let secret = strata_torture::random_bytes(&mut rand::rng(), 300_000);
    std::fs::write(outside.join("secret"), &secret).unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("own"), b"own bytes").unwrap();
    std::os::unix::fs::symlink(&outside, src.join("to-dir")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret"), src.join("to-file")).unwrap();
    std::os::unix::fs::symlink("../outside/secret", src.join("relative")).unwrap();
    let c = s
        .create_project_from("p", &src, "import", &NoProgress)
        .unwrap()
        .commit
        .expect("a commit");
    for (name, target) in [
        ("to-dir", outside.clone()),
        ("to-file", outside.join("secret")),
        ("relative", PathBuf::from("../outside/secret")),
    ] {
        let e = s.read_path(c, name.as_bytes()).unwrap().unwrap();
        assert_eq!(
            e.kind,
            EntryKind::Symlink(target.as_os_str().as_bytes().to_vec()),
            "{name}"
        );
    }
    assert!(s.read_path(c, b"to-dir/secret").unwrap().is_none());
    let stats = s.stats().unwrap();
    assert!(
        stats.logical_bytes < secret.len() as u64,
        "the Store holds {} bytes of content: the outside file was read",
        stats.logical_bytes
    );
}

/// Make `depth` nested directories `a` under `root` and a file `leaf` at
/// the bottom, each relative to the directory above (mkdirat, openat), so
/// that any depth can be built, also past PATH_MAX.
fn make_deep(root: &Path, depth: usize) {
    use rustix::fs::{mkdirat, openat, Mode, OFlags, CWD};
    let dir = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    std::fs::create_dir_all(root).unwrap();
    let mut fd = openat(CWD, root, dir, Mode::empty()).unwrap();
    for _ in 0..depth {
        mkdirat(&fd, "a", Mode::from_raw_mode(0o755)).unwrap();
        fd = openat(&fd, "a", dir, Mode::empty()).unwrap();
    }
    let leaf = openat(
        &fd,
        "leaf",
        OFlags::WRONLY | OFlags::CREATE | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .unwrap();
    assert_eq!(rustix::io::write(&leaf, b"deep").unwrap(), 4);
}

/// A directory nested `depth` levels deep snapshots and exports (within
/// PATH_MAX: `within_path_max`), or fails with a clear error (deeper); it
/// must never overflow a stack, which aborts the whole process (the
/// SDK's, the daemon's). The walks keep their own stacks (no recursion).
fn deep_tree(depth: usize, within_path_max: bool) {
    // On tmpfs when there is one: the root filesystem here is ext4 mounted
    // with `discard`, where removing two 2,000-level trees takes ~14 s
    // (every rmdir waits for a TRIM).
    let tmp = if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm")
    } else {
        tempdir()
    };
    let s = store(tmp.path());
    let src = tmp.path().join("src");
    make_deep(&src, depth);
    if within_path_max {
        assert!(
            src.as_os_str().len() + 2 * depth + 8 < 4096,
            "{} is too long a temporary directory for {depth} levels within PATH_MAX; point TMPDIR at a shorter one",
            tmp.path().display()
        );
    }
    let c = match s.create_project_from("p", &src, "deep", &NoProgress) {
        Ok(r) => r.commit.unwrap(),
        Err(e) if !within_path_max => {
            let msg = e.to_string();
            eprintln!("depth {depth}: snapshot refused: {:.200}", msg);
            assert!(msg.contains("too long"), "unclear error: {msg:.300}");
            strata_torture::check_store(s.dir());
            return;
        }
        Err(e) => panic!("depth {depth}: snapshot failed: {e}"),
    };
    let out = tmp.path().join("out");
    match s.export(c, &out, false, &NoProgress) {
        Ok(_) => {
            let mut q = out.clone();
            for _ in 0..depth {
                q.push("a");
            }
            assert_eq!(std::fs::read(q.join("leaf")).unwrap(), b"deep");
        }
        Err(e) if !within_path_max => eprintln!("depth {depth}: export refused: {e:.200}"),
        Err(e) => panic!("depth {depth}: export failed: {e}"),
    }
    strata_torture::check_store(s.dir());
}

#[test]
fn a_100_level_tree_round_trips() {
    deep_tree(100, true);
}

/// As deep as Linux paths allow with one-byte names (~2,000 levels): this
/// used to abort the process (the walks recursed once per level).
#[test]
fn a_2000_level_tree_round_trips() {
    deep_tree(2000, true);
}

/// Deeper than any path can name: made with relative operations, refused
/// by the snapshot with a clear error (the Store walks by path), never an
/// abort.
#[test]
#[ignore = "full form (cargo test -p strata-torture -- --ignored)"]
fn a_6000_level_tree_fails_clearly() {
    deep_tree(6000, false);
}
