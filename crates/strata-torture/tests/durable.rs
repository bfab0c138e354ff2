//! Power-loss model (docs/reliability.md): what a
//! `--durable` Store promises is that a commit acknowledged to its caller
//! is on stable storage. SQLite in WAL mode with `synchronous=FULL` makes
//! that true by fsync'ing the WAL at every transaction commit, before the
//! commit returns (sqlite.org/pragma.html#pragma_synchronous, "WAL mode
//! ... FULL: the WAL file is synchronized before each transaction is
//! committed"); with `NORMAL` (the default Store) the WAL is synced only at
//! checkpoints, so a power loss can drop the last commits but never tear
//! one (each is one WAL transaction) and never corrupts the database.
//!
//! This test checks the settings by their effect, not by reading them back:
//! a child process commits N times under strace(1), printing an ack line
//! after each commit returns; in the trace, a durable Store must show an
//! fsync/fdatasync of `strata.db-wal` between every two acks (the sync
//! happens before the ack), and the default Store none per commit. It also
//! checks that the journal mode is WAL and that "durable" is a property of
//! the Store (recorded at create), kept when a process opens it without
//! asking.

use std::collections::BTreeMap;
use std::process::Command;
use strata_store::{BranchRef, EntryKind, Store, StoreOptions, TreeEntry};
use strata_torture::tempdir;

const CHILD_ENV: &str = "STRATA_TORTURE_DURABLE_CHILD";
const COMMITS: usize = 12;

/// The child: open the Store with default options (whatever it was
/// created with), commit COMMITS times, print "ACKED i" after each.
#[test]
fn durable_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let s = Store::open(std::path::Path::new(&dir), &StoreOptions::default()).unwrap();
    for i in 0..COMMITS {
        let c = s
            .write_file_bytes(format!("commit {i}").as_bytes(), None)
            .unwrap();
        commit_file(&s, c);
        // One write(2) per ack, after commit_tree returned.
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        out.write_all(format!("\nACKED {i}\n").as_bytes()).unwrap();
        out.flush().unwrap();
    }
}

/// Run the child under strace; return, per ack, how many syncs of the WAL
/// happened since the previous ack.
fn syncs_per_ack(dir: &std::path::Path) -> Vec<usize> {
    let log = dir.with_extension("strace");
    let exe = std::env::current_exe().unwrap();
    let st = Command::new("strace")
        .args(["-f", "-y", "-qq", "-e", "trace=fsync,fdatasync,write", "-o"])
        .arg(&log)
        .arg(&exe)
        .args([
            "--exact",
            "durable_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run strace(1): install it (apt-get install strace; .ci/run does)");
    assert!(st.success(), "the child under strace failed: {st}");
    let trace = std::fs::read_to_string(&log).unwrap();
    let mut out = Vec::new();
    let mut since = 0;
    for l in trace.lines() {
        let sync = l.contains("fsync(") || l.contains("fdatasync(");
        if sync && l.contains("strata.db-wal>") {
            since += 1;
        } else if l.contains("write(") && l.contains("ACKED ") {
            out.push(since);
            since = 0;
        }
    }
    assert_eq!(
        out.len(),
        COMMITS,
        "acks missing from the trace:\n{trace:.2000}"
    );
    out
}

fn store(durable: bool) -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempdir();
    let dir = tmp.path().join("store");
    let s = Store::create(
        &dir,
        &StoreOptions {
            durable,
            ..StoreOptions::default()
        },
    )
    .unwrap();
    s.create_project("p", "init").unwrap();
    drop(s);
    // Journal mode is persistent in the database file: WAL.
    let c = rusqlite::Connection::open(dir.join("strata.db")).unwrap();
    let mode: String = c
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode.to_lowercase(), "wal");
    let recorded: String = c
        .query_row("SELECT value FROM meta WHERE key = 'durable'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(recorded, if durable { "1" } else { "0" });
    (tmp, dir)
}

#[test]
fn a_durable_store_syncs_the_wal_before_every_acknowledged_commit() {
    let (_tmp, dir) = store(true);
    // The child opens with default options: durability is the Store's.
    let per_ack = syncs_per_ack(&dir);
    eprintln!("durable: WAL syncs per acknowledged commit {per_ack:?}");
    assert!(
        per_ack.iter().all(|n| *n >= 1),
        "a durable commit was acknowledged before its WAL was synced: syncs per ack {per_ack:?}"
    );
    strata_torture::check_store(&dir);
}

#[test]
fn a_default_store_does_not_sync_per_commit() {
    let (_tmp, dir) = store(false);
    let per_ack = syncs_per_ack(&dir);
    let total: usize = per_ack.iter().sum();
    eprintln!("default: WAL syncs per acknowledged commit {per_ack:?}");
    // synchronous=NORMAL: syncs only at checkpoints (every 4096 pages),
    // which these small commits do not reach.
    assert!(
        total < COMMITS,
        "the default Store synced {total} times for {COMMITS} commits: is it durable by mistake? {per_ack:?}"
    );
    strata_torture::check_store(&dir);
}

const PACKED_CHILD_ENV: &str = "STRATA_TORTURE_PACKED_CHILD";

/// The child of `packed_bytes_are_synced_before_the_rows_that_name_them`:
/// store 5 MiB of random bytes (so their chunks go to a pack) and commit.
#[test]
fn packed_child() {
    let Ok(dir) = std::env::var(PACKED_CHILD_ENV) else {
        return;
    };
    let s = Store::open(std::path::Path::new(&dir), &StoreOptions::default()).unwrap();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let bytes: Vec<u8> = (0..5 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    commit_file(&s, s.write_file_bytes(&bytes, None).unwrap());
}

/// Commit a tree of one file `f` with content `c` on p/main.
fn commit_file(s: &Store, c: strata_store::FileContent) {
    let t = s
        .write_tree(vec![TreeEntry {
            name: b"f".to_vec(),
            kind: EntryKind::File(c),
            mode: 0o644,
            uid: 0,
            gid: 0,
            mtime_ns: 0,
            xattrs: vec![],
            link_group: 0,
        }])
        .unwrap();
    let b = BranchRef::parse("p/main").unwrap();
    let head = s.branch_head(&b).unwrap();
    s.commit_tree(&b, head, t, "m", BTreeMap::new()).unwrap();
}

/// Pack files (docs/design.md, "Pack files"; docs/reliability.md): every
/// byte appended to a pack is fdatasync'ed before SQLite writes the WAL
/// frames of the transaction that indexes it, in the default (not durable)
/// Store too, so no row that survives a power loss names lost bytes.
/// SQLite writes a transaction's frames to the WAL at its commit (its page
/// cache, 64 MiB, holds the few thousand index rows until then).
#[test]
fn packed_bytes_are_synced_before_the_rows_that_name_them() {
    let (_tmp, dir) = store(false);
    let log = dir.with_extension("packed.strace");
    let st = Command::new("strace")
        .args([
            "-f",
            "-y",
            "-qq",
            "-e",
            "trace=fdatasync,pwrite64,write",
            "-o",
        ])
        .arg(&log)
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "packed_child", "--nocapture", "--test-threads=1"])
        .env(PACKED_CHILD_ENV, &dir)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run strace(1): install it (apt-get install strace; .ci/run does)");
    assert!(st.success(), "the child under strace failed: {st}");
    let trace = std::fs::read_to_string(&log).unwrap();
    let (mut appends, mut syncs, mut unsynced) = (0, 0, false);
    for l in trace.lines() {
        if l.contains(".pack>") && l.contains("pwrite64(") {
            appends += 1;
            unsynced = true;
        } else if l.contains(".pack>") && l.contains("fdatasync(") {
            syncs += 1;
            unsynced = false;
        } else if l.contains("strata.db-wal>") && (l.contains("pwrite64(") || l.contains("write("))
        {
            assert!(
                !unsynced,
                "the WAL was written while pack bytes were not yet synced: {l}\n{trace:.4000}"
            );
        }
    }
    assert!(
        appends >= 1 && syncs >= 1,
        "expected the 5 MiB file's chunks in a pack ({appends} pack writes, {syncs} pack syncs)"
    );
    strata_torture::check_store(&dir);
}
