//! strata under load, faults and hostile input (docs/reliability.md, docs/security.md).
//!
//! The tests live in `tests/`; this library holds what they share: random
//! trees, a manifest of a tree (on disk or in a commit) to compare them, the
//! Store invariants checked after every fault, a child process re-executed
//! from the test binary, and memory figures read from `/proc`.
//!
//! Every test has a quick form (run by `cargo test --workspace`, bounded so
//! that CI's 2 cores finish it in minutes) and a full form marked
//! `#[ignore]`: `cargo test --release -p strata-torture -- --ignored`.
#![forbid(unsafe_code)]

use rand::Rng;
use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use strata_store::{EntryKind, NoProgress, ObjectId, Store, StoreOptions};

/// What a path holds, as far as the tests compare trees: the kind, the
/// content (BLAKE3 of the bytes, or the symlink target) and the mode bits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    File { hash: [u8; 32], mode: u32 },
    Dir { mode: u32 },
    Symlink(Vec<u8>),
}

/// Path (relative, '/'-separated, raw bytes) -> node.
pub type Manifest = BTreeMap<Vec<u8>, Node>;

/// The manifest of a directory on disk (never follows symlinks). Walked
/// with a work list: the deep-tree tests use it on trees thousands of
/// levels deep.
pub fn manifest_dir(root: &Path) -> Manifest {
    let mut m = Manifest::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("list {}: {e}", dir.display()))
            .map(|e| e.expect("dir entry").path())
            .collect();
        for p in names {
            let md = std::fs::symlink_metadata(&p).expect("lstat");
            let rel = p
                .strip_prefix(root)
                .expect("under root")
                .as_os_str()
                .as_bytes()
                .to_vec();
            let ft = md.file_type();
            if ft.is_symlink() {
                let t = std::fs::read_link(&p).expect("readlink");
                m.insert(rel, Node::Symlink(t.as_os_str().as_bytes().to_vec()));
            } else if ft.is_dir() {
                m.insert(
                    rel,
                    Node::Dir {
                        mode: md.mode() & 0o7777,
                    },
                );
                todo.push(p);
            } else {
                let bytes = std::fs::read(&p).expect("read");
                m.insert(
                    rel,
                    Node::File {
                        hash: *blake3::hash(&bytes).as_bytes(),
                        mode: md.mode() & 0o7777,
                    },
                );
            }
        }
    }
    m
}

/// The manifest of a commit, reading every byte of every file: a commit
/// whose objects are not all present and sound fails here with the error.
/// Walked with a work list, like `manifest_dir`.
pub fn manifest_commit(store: &Store, commit: ObjectId) -> strata_store::Result<Manifest> {
    let c = store.read_commit(commit)?;
    let mut m = Manifest::new();
    let mut todo = vec![(c.tree, Vec::new())];
    while let Some((tree, prefix)) = todo.pop() {
        for e in store.list_tree(tree)? {
            let mut path: Vec<u8> = prefix.clone();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(&e.name);
            match &e.kind {
                EntryKind::File(c) => {
                    let mut h = blake3::Hasher::new();
                    store.read_to(c, &mut h)?;
                    m.insert(
                        path,
                        Node::File {
                            hash: *h.finalize().as_bytes(),
                            mode: e.mode & 0o7777,
                        },
                    );
                }
                EntryKind::Dir(t) => {
                    m.insert(
                        path.clone(),
                        Node::Dir {
                            mode: e.mode & 0o7777,
                        },
                    );
                    todo.push((*t, path));
                }
                EntryKind::Symlink(t) => {
                    m.insert(path, Node::Symlink(t.clone()));
                }
                EntryKind::Fifo | EntryKind::Socket => {}
            }
        }
    }
    Ok(m)
}

/// Shape of a random tree.
#[derive(Clone, Copy, Debug)]
pub struct TreeShape {
    pub files: usize,
    /// Largest file; sizes are spread between 0 and this.
    pub max_file: usize,
    /// A few files this large, so that a snapshot or commit takes long
    /// enough to be killed in the middle.
    pub big_files: usize,
    pub big_file: usize,
}

/// Fill `root` (created if missing) with a random tree: nested directories,
/// files of random sizes and modes (random bytes, and some repeated blocks
/// so that deduplication has work), symlinks (dangling, relative,
/// absolute: stored verbatim, never followed).
pub fn random_tree(root: &Path, rng: &mut impl Rng, shape: TreeShape) {
    std::fs::create_dir_all(root).expect("create tree root");
    let mut dirs = vec![root.to_path_buf()];
    for i in 0..shape.files {
        let parent = dirs[rng.random_range(0..dirs.len())].clone();
        match rng.random_range(0..10) {
            0 => {
                let d = parent.join(format!("d{i}"));
                std::fs::create_dir(&d).expect("mkdir");
                dirs.push(d);
            }
            1 => {
                let target = match rng.random_range(0..3) {
                    0 => "/etc/passwd".to_string(),
                    1 => format!("../missing-{i}"),
                    _ => format!("f{}", i.saturating_sub(1)),
                };
                std::os::unix::fs::symlink(target, parent.join(format!("l{i}"))).expect("symlink");
            }
            _ => {
                let size = rng.random_range(0..=shape.max_file);
                let p = parent.join(format!("f{i}"));
                std::fs::write(&p, random_bytes(rng, size)).expect("write");
                let mode = [0o644, 0o600, 0o755, 0o640][rng.random_range(0..4)];
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
            }
        }
    }
    for i in 0..shape.big_files {
        let p = root.join(format!("big{i}.bin"));
        std::fs::write(&p, random_bytes(rng, shape.big_file)).expect("write big");
    }
}

/// `n` bytes: random runs and repeated 4 KiB blocks.
pub fn random_bytes(rng: &mut impl Rng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    let block: Vec<u8> = (0..4096).map(|_| rng.random()).collect();
    let mut off = 0;
    while off < n {
        let run = rng.random_range(1..=65536).min(n - off);
        if rng.random_bool(0.3) {
            for (i, b) in v[off..off + run].iter_mut().enumerate() {
                *b = block[i % block.len()];
            }
        } else {
            rng.fill_bytes(&mut v[off..off + run]);
        }
        off += run;
    }
    v
}

/// Every invariant a fault must leave intact, checked on a fresh open of
/// the Store at `dir` (the way the next process sees it): it opens, fsck
/// finds nothing, and every branch points to a commit whose every object is
/// present and decodes (every file read to the end). Returns the branches.
pub fn check_store(dir: &Path) -> BTreeMap<String, ObjectId> {
    let store = Store::open(dir, &StoreOptions::default())
        .unwrap_or_else(|e| panic!("the Store does not open after the fault: {e}"));
    let report = store
        .fsck(&NoProgress)
        .unwrap_or_else(|e| panic!("fsck failed to run: {e}"));
    assert!(
        report.problems.is_empty(),
        "fsck found problems: {:?}",
        report.problems
    );
    let mut heads = BTreeMap::new();
    for (b, head) in store.list_branches(None).expect("list branches") {
        manifest_commit(&store, head)
            .unwrap_or_else(|e| panic!("branch {b} points to an incomplete commit {head}: {e}"));
        heads.insert(b.to_string(), head);
    }
    heads
}

/// A child process: this test binary re-executed to run one test
/// (`--exact NAME`), with `env` telling that test what to do. The child
/// test returns at once when the variable is absent, so it passes as a
/// no-op in the normal run.
pub fn child(test: &str, var: &str, value: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("current_exe"));
    c.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(var, value)
        .stdin(Stdio::null());
    c
}

/// A field of `/proc/PID/status` in kB (e.g. "VmHWM", "VmRSS"; proc(5)).
pub fn proc_status_kb(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// The children of `pid` (from `/proc/PID/task/*/children`, proc(5)).
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
            out.extend(s.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
    }
    out
}

/// All descendants of `pid`, depth first.
pub fn descendants_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = children_of(pid);
    while let Some(p) = todo.pop() {
        out.push(p);
        todo.extend(children_of(p));
    }
    out
}

/// The 1-, 5- and 15-minute load averages (figures on a shared machine are
/// reported with them).
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Send SIGKILL to `pid` (kill(2); a dead pid is not an error here).
pub fn kill9(pid: u32) {
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
    }
}

/// A temporary directory the tests' uid-1500 commands can traverse.
pub fn tempdir() -> tempfile::TempDir {
    let t = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    t
}

/// `PathBuf` from raw bytes.
pub fn path_from(bytes: &[u8]) -> PathBuf {
    PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
}

/// The seed of a randomized test: `STRATA_TORTURE_SEED` if set (to replay
/// a failure), else random. Printed, so that a failure names it.
pub fn seed(test: &str) -> u64 {
    let s = std::env::var("STRATA_TORTURE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("{test}: seed {s} (replay with STRATA_TORTURE_SEED={s})");
    s
}

/// Fail loudly (never skip) where FUSE tests cannot run.
pub fn require_fuse() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test mounts FUSE Workspaces: run it as root (CI does)"
    );
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: load the fuse module (modprobe fuse)"
    );
}

/// Held while a test forks (spawns a child) and while a test has files
/// open in a FUSE mount it is about to unmount. Tests of one binary run in
/// parallel threads, and a child forked while the mount has an open file
/// holds a copy of that fd until its exec (O_CLOEXEC closes it only then,
/// fcntl(2)), so umount(2) fails with EBUSY in that window.
pub fn no_fork() -> std::sync::MutexGuard<'static, ()> {
    static FORK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    FORK.lock().unwrap_or_else(|p| p.into_inner())
}
