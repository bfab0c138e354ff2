//! Crash loop (docs/reliability.md): a snapshot or a Workspace commit of a
//! random tree runs in a child process (this test binary re-executed) and
//! is killed with SIGKILL at a random moment. After each kill:
//!
//! * the Store opens, fsck finds nothing, every branch points to a commit
//!   whose every object is present and readable (`check_store`);
//! * the commit is all or nothing: the branch is either where it was, or at
//!   a new commit (parent = the old head) whose tree is exactly the tree
//!   that was being committed, byte for byte;
//! * an acknowledged commit (the child printed it before the kill) is the
//!   head;
//! * a Workspace whose commit was killed still holds its changes, and the
//!   next commit publishes all of them (checked at the end).
//!
//! SIGKILL cannot be caught (signal(7)), so the child gets no chance to
//! clean up: what survives is what SQLite's WAL and the Workspace journal
//! had made durable in the page cache, which is what a process crash
//! leaves (power loss is docs/reliability.md's subject).

use rand::{Rng, SeedableRng};
use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};
use strata_store::{BranchRef, NoProgress, ObjectId, Store, StoreOptions};
use strata_torture::{
    check_store, child, kill9, manifest_commit, manifest_dir, random_tree, tempdir, Manifest,
    TreeShape,
};
use strata_workspace::{CommitOutcome, MountOptions, Workspace, WorkspaceOptions};

const CHILD_ENV: &str = "STRATA_TORTURE_CRASH_CHILD";

/// The child: run one snapshot or Workspace commit, print "done ID" when it
/// returned. Fields are tab-separated: `snapshot STORE BRANCH SRC` or
/// `commit STORE SCRATCH WSID`.
#[test]
fn crash_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    // libtest has printed "test crash_child ... " without a newline: end
    // that line so that "done ID" starts one.
    println!();
    let f: Vec<&str> = spec.split('\t').collect();
    let store = Store::open(std::path::Path::new(f[1]), &StoreOptions::default())
        .expect("child: open the Store");
    match f[0] {
        "snapshot" => {
            let b = BranchRef::parse(f[2]).unwrap();
            let r = store
                .snapshot(&b, std::path::Path::new(f[3]), "crash loop", &NoProgress)
                .expect("child: snapshot");
            println!(
                "done {}",
                r.commit.expect("snapshot of a changed tree: a commit")
            );
        }
        "commit" => {
            let ws = open_ws(&store, f[3], std::path::Path::new(f[2]));
            match ws.commit("crash loop").expect("child: commit") {
                CommitOutcome::Committed(id) => println!("done {id}"),
                CommitOutcome::UpToDate => println!("uptodate"),
            }
        }
        other => panic!("unknown child job {other}"),
    }
}

/// Open a Workspace, waiting out the lock of a server that was just
/// killed or unmounted (the kernel releases a dead process's flock when
/// its last fd closes, which can trail the exit a little).
fn open_ws(store: &Store, id: &str, scratch: &std::path::Path) -> Workspace {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match Workspace::open(store, id, scratch, &WorkspaceOptions::default()) {
            Ok(ws) => return ws,
            Err(strata_workspace::WsError::Locked { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("open Workspace {id}: {e}"),
        }
    }
}

/// Run the child job `spec`, kill it after `delay` (if it is still
/// running), and return what it acknowledged and whether it was killed.
fn run_and_kill(spec: &str, delay: Option<Duration>) -> (Option<ObjectId>, bool) {
    let forking = strata_torture::no_fork();
    let mut c = child("crash_child", CHILD_ENV, spec)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the child");
    drop(forking);
    let start = Instant::now();
    let mut killed = false;
    if let Some(delay) = delay {
        while start.elapsed() < delay {
            if c.try_wait().expect("try_wait").is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        if c.try_wait().expect("try_wait").is_none() {
            kill9(c.id());
            killed = true;
        }
    }
    let st = c.wait().expect("wait for the child");
    let mut out = String::new();
    c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let mut err = String::new();
    c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    if !killed {
        assert!(st.success(), "the child failed on its own: {out}\n{err}");
    }
    let acked = out.lines().find_map(|l| {
        l.strip_prefix("done ")
            .map(|h| ObjectId::from_hex(h.trim()).expect("commit id"))
    });
    (acked, killed)
}

/// After a kill: invariants, then all-or-nothing for `branch` whose head
/// was `before` and whose commit was to hold `want`. Returns the new head.
fn check_after(
    store_dir: &std::path::Path,
    branch: &str,
    before: ObjectId,
    want: &Manifest,
    acked: Option<ObjectId>,
) -> ObjectId {
    let heads = check_store(store_dir);
    let head = heads[branch];
    if let Some(a) = acked {
        assert_eq!(head, a, "an acknowledged commit is not the head");
    }
    if head != before {
        let store = Store::open(store_dir, &StoreOptions::default()).unwrap();
        let c = store.read_commit(head).unwrap();
        assert_eq!(
            c.parents,
            vec![before],
            "the new head is not on the old one"
        );
        let got = manifest_commit(&store, head).unwrap();
        assert!(
            &got == want,
            "a commit became visible with a tree other than the one committed: {} paths vs {} wanted",
            got.len(),
            want.len()
        );
    }
    head
}

fn shape() -> TreeShape {
    TreeShape {
        files: 60,
        max_file: 48 << 10,
        big_files: 2,
        big_file: 3 << 20,
    }
}

/// Kill moments: uniform over 0..1.3x an uninterrupted run, so most land
/// inside the operation and some after it (the acknowledged case).
fn delay(rng: &mut impl Rng, full: Duration) -> Duration {
    let max = full.mul_f64(1.3).max(Duration::from_millis(20));
    Duration::from_micros(rng.random_range(0..max.as_micros() as u64))
}

fn snapshot_loop(iterations: usize, seed: u64) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let tmp = tempdir();
    let store_dir = tmp.path().join("store");
    let store = Store::create(&store_dir, &StoreOptions::default()).unwrap();
    store.create_project("p", "init").unwrap();
    drop(store);
    let mut full = None;
    let mut killed_mid = 0;
    for i in 0..=iterations {
        let src = tmp.path().join(format!("src{i}"));
        random_tree(&src, &mut rng, shape());
        let want = manifest_dir(&src);
        let before = check_store(&store_dir)["p/main"];
        let spec = format!(
            "snapshot\t{}\tp/main\t{}",
            store_dir.display(),
            src.display()
        );
        // Iteration 0 runs to the end: it measures how long a run takes.
        let d = full.map(|f| delay(&mut rng, f));
        let t = Instant::now();
        let (acked, killed) = run_and_kill(&spec, d);
        if full.is_none() {
            full = Some(t.elapsed());
        }
        let head = check_after(&store_dir, "p/main", before, &want, acked);
        if killed && head == before {
            killed_mid += 1;
        }
        eprintln!(
            "snapshot {i}: delay {d:?}, killed {killed}, published {}",
            head != before
        );
        std::fs::remove_dir_all(&src).unwrap();
    }
    eprintln!(
        "snapshot crash loop (seed {seed}): {killed_mid} of {iterations} killed before publishing"
    );
}

fn commit_loop(iterations: usize, seed: u64) {
    strata_torture::require_fuse();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let tmp = tempdir();
    let store_dir = tmp.path().join("store");
    let scratch = tmp.path().join("scratch");
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let src = tmp.path().join("src");
    random_tree(&src, &mut rng, shape());
    let store = Store::create(&store_dir, &StoreOptions::default()).unwrap();
    store
        .create_project_from("p", &src, "base", &NoProgress)
        .unwrap();
    let ws = Workspace::create(&store, "p/main", &scratch, &WorkspaceOptions::default()).unwrap();
    let id = ws.id().to_string();
    drop(ws);
    let mut full = None;
    let mut want = Manifest::new();
    for i in 0..=iterations {
        // Change the Workspace through its mount, as a program would.
        let ws = open_ws(&store, &id, &scratch);
        let no_fork = strata_torture::no_fork();
        let h = ws.mount(&mnt, &MountOptions::default()).expect("mount");
        mutate(&mnt, &mut rng, i);
        want = manifest_dir(&mnt);
        h.unmount().expect("unmount");
        drop(no_fork);
        drop(ws);
        let before = check_store(&store_dir)["p/main"];
        let spec = format!(
            "commit\t{}\t{}\t{id}",
            store_dir.display(),
            scratch.display()
        );
        let d = full.map(|f| delay(&mut rng, f));
        let t = Instant::now();
        let (acked, killed) = run_and_kill(&spec, d);
        if full.is_none() {
            full = Some(t.elapsed());
        }
        let head = check_after(&store_dir, "p/main", before, &want, acked);
        eprintln!(
            "commit {i}: delay {d:?}, killed {killed}, published {}",
            head != before
        );
    }
    // Whatever the last kill interrupted, the Workspace still holds it and
    // the next commit publishes exactly the view it had.
    let ws = open_ws(&store, &id, &scratch);
    let before = ws.base();
    match ws
        .commit("after the crash loop")
        .expect("commit after the loop")
    {
        CommitOutcome::Committed(c) => assert_eq!(store.read_commit(c).unwrap().parents, [before]),
        CommitOutcome::UpToDate => {}
    }
    let head = check_store(&store_dir)["p/main"];
    assert!(
        manifest_commit(&store, head).unwrap() == want,
        "the Workspace lost changes across the kills"
    );
    assert!(ws.status().unwrap().is_empty());
    ws.discard().unwrap();
}

/// Random work in a mounted Workspace: new files (one big), rewrites,
/// deletions, a new directory, a rename.
fn mutate(mnt: &std::path::Path, rng: &mut impl Rng, i: usize) {
    let sub = mnt.join(format!("new{i}"));
    random_tree(
        &sub,
        rng,
        TreeShape {
            files: 20,
            max_file: 32 << 10,
            big_files: 1,
            big_file: 2 << 20,
        },
    );
    let files: Vec<_> = manifest_dir(mnt)
        .into_iter()
        .filter(|(_, n)| matches!(n, strata_torture::Node::File { .. }))
        .map(|(p, _)| mnt.join(strata_torture::path_from(&p)))
        .collect();
    for p in files.iter().take(6) {
        match rng.random_range(0..3) {
            0 => std::fs::remove_file(p).unwrap(),
            1 => std::fs::write(p, strata_torture::random_bytes(rng, 10_000)).unwrap(),
            _ => {
                let to = p.with_file_name(format!("renamed{i}-{}", rng.random::<u32>()));
                std::fs::rename(p, to).unwrap();
            }
        }
    }
}

#[test]
fn crash_loop_snapshot_quick() {
    snapshot_loop(6, strata_torture::seed("crash_loop_snapshot_quick"));
}

#[test]
fn crash_loop_commit_quick() {
    commit_loop(5, strata_torture::seed("crash_loop_commit_quick"));
}

#[test]
#[ignore = "full form: cargo test --release -p strata-torture -- --ignored"]
fn crash_loop_snapshot_full() {
    snapshot_loop(25, strata_torture::seed("crash_loop_snapshot_full"));
}

#[test]
#[ignore = "full form: cargo test --release -p strata-torture -- --ignored"]
fn crash_loop_commit_full() {
    commit_loop(25, strata_torture::seed("crash_loop_commit_full"));
}
