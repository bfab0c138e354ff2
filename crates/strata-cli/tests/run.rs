//! `strata run` as a real nonroot user (uid 1500), the way it is meant to
//! be used: no root, no setuid helper, FUSE inside a user namespace.
//! This file: what lands in the Store (and what does not). Process
//! lifetimes and failures are in `run_process.rs`; the fixture in
//! `rootless/mod.rs`.

mod common;
mod rootless;

use assert_cmd::Command;
use rootless::*;
use std::path::PathBuf;
use std::time::Duration;
use strata_store::{Store, StoreOptions};

#[test]
fn writes_and_ops_on_existing_entries_land_in_the_store_with_commit() {
    let f = Fixture::new(0o666, base_tree);
    let before = host_mounts();
    let sync = f.path("sync");
    // docs/design.md §4: owners are 0 outbound / the user inbound, or unlink,
    // rename and link of files that existed before the mount fail with
    // EOVERFLOW and write-opens with EACCES. Each op below is on such a file.
    let script = format!(
        r#"set -e
cd "$STRATA_ROOT"
[ "$(pwd)" = "$STRATA_ROOT" ]
grep -q " $STRATA_ROOT fuse" /proc/self/mounts
cat keep.txt >/dev/null
# Every owner is reported as 0, which this namespace maps to the user: not
# nobody (65534), which an unmapped owner would render as.
[ "$(stat -c %u:%g keep.txt)" = 0:0 ]
[ "$(stat -c %u:%g .)" = 0:0 ]
echo new > new.txt
mkdir newdir
echo deep > newdir/f.txt
echo more >> keep.txt
rm del.txt
rmdir dir_rm
mv mv_src.txt mv_dst.txt
ln link_src.txt link_dst.txt
truncate -s 3 trunc.txt
chmod 0600 chmod.txt
echo changed > sub/inner.txt
touch {sync}/ready
while [ ! -e {sync}/go ]; do sleep 0.02; done
"#,
        sync = s(&sync)
    );
    let mut child = f
        .user(&[
            "run", "p/main", "--commit", "-m", "ops", "--", "sh", "-c", &script,
        ])
        .spawn_output_later();
    wait_for("the command to be ready", Duration::from_secs(60), || {
        sync.join("ready").exists() || child.try_wait_done()
    });
    // During: the host's mount table does not show the Workspace.
    let during = host_mounts();
    assert!(
        !during.contains(s(f.tmp.path())),
        "mount visible on the host:\n{during}"
    );
    assert!(
        !during.contains("/strata-run-"),
        "mount visible on the host:\n{during}"
    );
    std::fs::write(sync.join("go"), b"").unwrap();
    let out = child.finish();
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert!(stderr(&out).contains("committed"), "{}", stderr(&out));
    let after = host_mounts();
    assert!(
        !after.contains("/strata-run-"),
        "mount left on the host:\n{after}"
    );
    // Only our own entries can be compared: other engineers' tests and
    // benchmarks mount and unmount on this machine concurrently. None of
    // the host's entries (before, during or after) may name our paths.
    for (when, table) in [("before", &before), ("during", &during), ("after", &after)] {
        for l in table.lines() {
            assert!(
                !l.contains(s(f.tmp.path())) && !l.contains("/strata-run-"),
                "{when}: host mount table shows ours: {l}"
            );
        }
    }

    let (store, head, _copy) = f.read_back();
    assert_eq!(store.read_commit(head).unwrap().message, "ops");
    assert_eq!(file_bytes(&store, head, "new.txt").unwrap(), b"new\n");
    assert_eq!(file_bytes(&store, head, "newdir/f.txt").unwrap(), b"deep\n");
    assert_eq!(
        file_bytes(&store, head, "keep.txt").unwrap(),
        b"keep\nmore\n"
    );
    assert!(
        store.read_path(head, b"del.txt").unwrap().is_none(),
        "unlink lost"
    );
    assert!(
        store.read_path(head, b"dir_rm").unwrap().is_none(),
        "rmdir lost"
    );
    assert!(
        store.read_path(head, b"mv_src.txt").unwrap().is_none(),
        "rename lost"
    );
    assert_eq!(file_bytes(&store, head, "mv_dst.txt").unwrap(), b"moved\n");
    assert_eq!(
        file_bytes(&store, head, "link_src.txt").unwrap(),
        b"linked\n"
    );
    assert_eq!(
        file_bytes(&store, head, "link_dst.txt").unwrap(),
        b"linked\n"
    );
    let a = store.read_path(head, b"link_src.txt").unwrap().unwrap();
    let b = store.read_path(head, b"link_dst.txt").unwrap().unwrap();
    assert!(
        a.link_group != 0 && a.link_group == b.link_group,
        "link is not a hard link"
    );
    assert_eq!(file_bytes(&store, head, "trunc.txt").unwrap(), b"012");
    let m = store.read_path(head, b"chmod.txt").unwrap().unwrap();
    assert_eq!(m.mode & 0o7777, 0o600, "chmod lost");
    assert_eq!(
        file_bytes(&store, head, "sub/inner.txt").unwrap(),
        b"changed\n"
    );
    // Created files belong to the invoking user in the Store, not to 0.
    for p in ["new.txt", "newdir", "newdir/f.txt"] {
        let e = store.read_path(head, p.as_bytes()).unwrap().unwrap();
        assert_eq!((e.uid, e.gid), (UID, UID), "{p} owner");
    }
}

#[test]
fn without_commit_nothing_lands_and_it_says_so() {
    let f = Fixture::new(0o666, base_tree);
    let scratch_before = user_scratch_dirs();
    let (_, head0, _c) = f.read_back();
    let out = f.run_sh(
        &[],
        r#"set -e; cd "$STRATA_ROOT"; echo x > new.txt; rm del.txt"#,
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert!(
        stderr(&out).contains("discarded 2 change"),
        "{}",
        stderr(&out)
    );
    let (store, head, _c2) = f.read_back();
    assert_eq!(head, head0, "the branch moved without --commit");
    assert!(store.read_path(head, b"new.txt").unwrap().is_none());
    assert!(store.read_path(head, b"del.txt").unwrap().is_some());
    // Its scratch directory is gone too.
    let after = user_scratch_dirs();
    let new: Vec<_> = after.difference(&scratch_before).collect();
    assert!(new.is_empty(), "scratch left behind: {new:?}");
}

#[test]
fn env_strata_root_and_at() {
    let f = Fixture::new(0o666, base_tree);
    let at = f.path("mnt/here");
    let out = f.run_sh(
        &["--commit", "--at", s(&at), "--env", "FOO=bar=baz"],
        r#"set -e; printf '%s|%s|%s' "$FOO" "$STRATA_ROOT" "$(pwd)" > "$STRATA_ROOT/env.txt""#,
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let (store, head, _c) = f.read_back();
    let want = format!("bar=baz|{0}|{0}", s(&at));
    assert_eq!(
        file_bytes(&store, head, "env.txt").unwrap(),
        want.as_bytes()
    );
    // The host only ever saw the empty directory (which run created and removed).
    assert!(
        !at.exists(),
        "--at directory created by run was left behind"
    );

    // An existing --at directory is only covered in the command's view:
    // the command does not see its contents, the host keeps them.
    let at = f.path("sync/existing");
    std::fs::create_dir(&at).unwrap();
    std::fs::write(at.join("host.txt"), b"host").unwrap();
    chown_tree(&at);
    let out = f.run_sh(
        &["--at", s(&at)],
        r#"set -e; [ ! -e "$STRATA_ROOT/host.txt" ]; [ -e "$STRATA_ROOT/keep.txt" ]"#,
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(std::fs::read(at.join("host.txt")).unwrap(), b"host");
}

#[test]
fn stdin_reaches_the_command_and_json_reports_the_run() {
    let f = Fixture::new(0o666, base_tree);
    let out = f
        .user(&[
            "--json",
            "run",
            "p/main",
            "--commit",
            "--",
            "sh",
            "-c",
            r#"cat > "$STRATA_ROOT/in.txt"; exit 7"#,
        ])
        .write_stdin("from stdin\n")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7), "stderr: {}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["exit_code"], 7);
    assert_eq!(v["status"]["exited"], 7);
    assert_eq!(v["committed"], true);
    let (store, head, _c) = f.read_back();
    assert_eq!(v["commit"].as_str().unwrap(), head.to_hex());
    assert_eq!(file_bytes(&store, head, "in.txt").unwrap(), b"from stdin\n");
}

#[test]
fn a_lost_commit_race_is_an_error_and_keeps_the_work() {
    // Two runs on one branch: the second to commit finds the branch moved.
    // That is strata's failure (125), not the command's status, and the
    // uncommitted Workspace is kept (and not swept by later runs).
    let f = Fixture::new(0o666, base_tree);
    let sync = f.path("sync");
    let script = format!(
        r#"set -e; echo slow > "$STRATA_ROOT/slow.txt"; touch {0}/ready; while [ ! -e {0}/go ]; do sleep 0.02; done"#,
        s(&sync)
    );
    let mut slow = f
        .user(&["run", "p/main", "--commit", "--", "sh", "-c", &script])
        .spawn_output_later();
    wait_for(
        "the slow command to be ready",
        Duration::from_secs(60),
        || sync.join("ready").exists() || slow.try_wait_done(),
    );
    let out = f.run_sh(
        &["--commit", "-m", "fast"],
        r#"echo fast > "$STRATA_ROOT/fast.txt""#,
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    std::fs::write(sync.join("go"), b"").unwrap();
    let out = slow.finish();
    assert_eq!(
        out.status.code(),
        Some(RUN_FAILED),
        "stderr: {}",
        stderr(&out)
    );
    let e = stderr(&out);
    assert!(e.contains("commit failed") && e.contains("moved"), "{e}");
    let kept = e
        .split("is kept under ")
        .nth(1)
        .map(|r| PathBuf::from(r.trim()))
        .expect("the kept path");
    assert!(kept.exists(), "{kept:?}");
    // A later run does not sweep it.
    let out = f.user(&["run", "p/main", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert!(kept.exists(), "kept Workspace swept: {kept:?}");
    let (store, head, _c) = f.read_back();
    assert_eq!(file_bytes(&store, head, "fast.txt").unwrap(), b"fast\n");
    assert!(store.read_path(head, b"slow.txt").unwrap().is_none());
    let _ = std::fs::remove_dir_all(kept.parent().unwrap());
}

#[test]
fn works_when_invoked_as_root_too() {
    let f = Fixture::new(0o600, base_tree);
    // Root's own copy of the Store: root-owned files must not end up in
    // the user's Store.
    let (_s, _h, copy) = f.read_back();
    drop(_s);
    let store = copy.path().join("store");
    let out = Command::new(common::BIN)
        .args([
            "--store",
            s(&store),
            "run",
            "p/main",
            "--commit",
            "--",
            "sh",
            "-c",
        ])
        .arg(r#"set -e; cd "$STRATA_ROOT"; echo root > r.txt; rm del.txt; mv mv_src.txt m.txt"#)
        .env_remove("STRATA_STORE")
        .current_dir("/")
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let st = Store::open(&store, &StoreOptions::default()).unwrap();
    let head = st.resolve("p/main").unwrap().commit;
    assert_eq!(file_bytes(&st, head, "r.txt").unwrap(), b"root\n");
    assert!(st.read_path(head, b"del.txt").unwrap().is_none());
    assert_eq!(file_bytes(&st, head, "m.txt").unwrap(), b"moved\n");
    let e = st.read_path(head, b"r.txt").unwrap().unwrap();
    assert_eq!(e.uid, 0);
}

#[test]
fn exit_status_is_the_commands_and_a_signal_is_128_plus_n() {
    let f = Fixture::new(0o666, base_tree);
    let out = f.run_sh(&[], "exit 42");
    assert_eq!(out.status.code(), Some(42), "stderr: {}", stderr(&out));
    let out = f.run_sh(&[], "kill -TERM $$");
    assert_eq!(
        out.status.code(),
        Some(128 + 15),
        "stderr: {}",
        stderr(&out)
    );
    let out = f.run_sh(&[], "kill -KILL $$");
    assert_eq!(out.status.code(), Some(128 + 9), "stderr: {}", stderr(&out));
    // A status is never confused with strata's own failure.
    let out = f.run_sh(&[], "exit 0");
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
}
