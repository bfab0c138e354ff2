//! A tree 2,000 levels deep (as deep as Linux paths allow) made through the
//! mount one mkdir at a time, as a program would; status and commit run on
//! a thread with a 256 KiB stack. Then a fresh Workspace on that commit
//! changes the bottom file through the mount, which journals the whole
//! chain of directories above it for the first time. These walks used to
//! recurse once per level (an overflow aborts the whole process: the
//! daemon's, or an SDK user's).

mod common;
use common::*;
use strata_workspace::{ChangeKind, CommitOutcome, Workspace};

const DEPTH: usize = 2_000;
const SMALL_STACK: usize = 256 * 1024;

/// "deep/a/a/.../a" (`DEPTH` levels), then `name`.
fn deep_rel(name: &str) -> String {
    format!("deep/{}{name}", "a/".repeat(DEPTH - 1))
}

fn on_small_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .stack_size(SMALL_STACK)
            .spawn_scoped(s, f)
            .expect("spawn a thread")
            .join()
            .expect("the walk failed (see above)")
    })
}

fn commit(ws: &Workspace, message: &str) -> strata_store::ObjectId {
    match on_small_stack(|| ws.commit(message)).expect("commit") {
        CommitOutcome::Committed(c) => c,
        CommitOutcome::UpToDate => panic!("nothing to commit"),
    }
}

#[test]
fn a_2000_level_tree_made_through_the_mount_commits_on_a_small_stack() {
    let f = fixture();
    let leaf = f.p(&deep_rel("leaf"));
    assert!(
        leaf.as_os_str().len() < 4096,
        "{} is too long a temporary directory for a {DEPTH}-level tree within PATH_MAX; point TMPDIR at a shorter one",
        f.tmp.path().display()
    );
    let ws = f.create();
    let h = f.mount(&ws, true);
    let mut p = f.p("deep");
    std::fs::create_dir(&p).unwrap();
    for _ in 1..DEPTH {
        p.push("a");
        std::fs::create_dir(&p).unwrap();
    }
    std::fs::write(&leaf, b"made at the bottom").unwrap();
    let st = on_small_stack(|| ws.status()).expect("status");
    assert_eq!(st.len(), DEPTH + 1, "every level and the leaf are new");
    assert!(st.iter().all(|c| c.kind == ChangeKind::Added));
    let c1 = commit(&ws, "deep");
    assert_eq!(f.head(), c1);
    assert_eq!(f.bytes(deep_rel("leaf").as_bytes()), b"made at the bottom");
    assert!(on_small_stack(|| ws.status()).unwrap().is_empty());
    h.unmount().unwrap();
    ws.discard().unwrap();

    // A new Workspace resolves the deep base lazily; changing the bottom
    // file journals every directory above it.
    let ws = f.create();
    let h = f.mount(&ws, true);
    std::fs::write(&leaf, b"changed at the bottom").unwrap();
    let st = on_small_stack(|| ws.status()).expect("status");
    let got: Vec<_> = st.iter().map(|c| (c.path.clone(), c.kind)).collect();
    assert_eq!(
        got,
        vec![(deep_rel("leaf").into_bytes(), ChangeKind::Modified)]
    );
    let c2 = commit(&ws, "deeper");
    assert_eq!(
        f.store.diff(c1, c2).unwrap().len(),
        1,
        "only the leaf changed"
    );
    assert_eq!(
        f.bytes(deep_rel("leaf").as_bytes()),
        b"changed at the bottom"
    );
    h.unmount().unwrap();
    ws.discard().unwrap();
}
