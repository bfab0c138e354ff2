//! `strata run` as a real nonroot user (uid 1500), the way it is meant to
//! be used: no root, no setuid helper, FUSE inside a user namespace.
//!
//! Setup (needs root, as CI has): create the user if missing, give it
//! /dev/fuse the way an administrator would (`chmod 0666`, restored after),
//! and a Store it owns. Every assertion about data reads the committed tree
//! back from the Store (BRIEF section 4: a version elsewhere reported
//! success while discarding every write), never the exit status alone.
//!
//! The tests share /dev/fuse's mode and uid 1500's process list, so they
//! run one at a time (a lock). A test that cannot run fails with the reason.

mod common;

use assert_cmd::Command;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use strata_store::{EntryKind, ObjectId, Store, StoreOptions};

const UID: u32 = 1500;
const USER: &str = "strata-test";
/// strata's own failures in `strata run` (never the command's status).
const RUN_FAILED: i32 = 125;

static SERIAL: Mutex<()> = Mutex::new(());

struct Fixture {
    tmp: tempfile::TempDir,
    store: PathBuf,
    _fuse: FuseMode,
    _serial: MutexGuard<'static, ()>,
}

/// Sets /dev/fuse's mode, restores the original on drop (also on panic).
struct FuseMode(u32);

impl FuseMode {
    fn set(mode: u32) -> FuseMode {
        let old = std::fs::metadata("/dev/fuse")
            .unwrap_or_else(|e| panic!("cannot run: no /dev/fuse ({e})"))
            .mode()
            & 0o7777;
        std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(mode))
            .unwrap_or_else(|e| panic!("cannot run: chmod /dev/fuse: {e}"));
        FuseMode(old)
    }
}

impl Drop for FuseMode {
    fn drop(&mut self) {
        let _ = std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(self.0));
    }
}

fn ensure_user() {
    // Is uid 1500 known?
    let known = std::process::Command::new("getent")
        .args(["passwd", &UID.to_string()])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !known {
        let st = std::process::Command::new("useradd")
            .args([
                "-u",
                &UID.to_string(),
                "-M",
                "-N",
                "-s",
                "/usr/sbin/nologin",
                USER,
            ])
            .status()
            .unwrap_or_else(|e| panic!("cannot run: useradd: {e}"));
        assert!(
            st.success(),
            "cannot run: useradd -u {UID} {USER} failed: {st}"
        );
    }
}

fn chown_tree(p: &Path) {
    std::os::unix::fs::lchown(p, Some(UID), Some(UID)).unwrap();
    if p.is_dir() && !p.is_symlink() {
        for e in std::fs::read_dir(p).unwrap() {
            chown_tree(&e.unwrap().path());
        }
    }
}

/// The strata binary as uid 1500 can execute it. The build directory may
/// sit under a directory others cannot enter (e.g. a checkout in /root):
/// then a hard link (or copy) under /tmp/strata-rtest-bin/PID is used, and
/// those of dead test processes are removed.
fn user_bin() -> &'static Path {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let ok = std::process::Command::new("setpriv")
            .args([
                &format!("--reuid={UID}"),
                &format!("--regid={UID}"),
                "--clear-groups",
            ])
            .args(["--", "/bin/sh", "-c", r#"test -x "$0""#, common::BIN])
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return PathBuf::from(common::BIN);
        }
        let root = Path::new("/tmp/strata-rtest-bin");
        if let Ok(rd) = std::fs::read_dir(root) {
            for e in rd.flatten() {
                let alive = e
                    .file_name()
                    .to_str()
                    .is_some_and(|p| Path::new("/proc").join(p).exists());
                if !alive {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let dir = root.join(std::process::id().to_string());
        std::fs::create_dir_all(&dir).unwrap();
        for d in [root, dir.as_path()] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let bin = dir.join("strata");
        if std::fs::hard_link(common::BIN, &bin).is_err() {
            std::fs::copy(common::BIN, &bin).unwrap();
        }
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        bin
    })
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

impl Fixture {
    /// A Store owned by uid 1500 with project `p` imported from a tree
    /// that `populate` writes; /dev/fuse set to `fuse_mode`.
    fn new(fuse_mode: u32, populate: impl FnOnce(&Path)) -> Fixture {
        let serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        assert!(
            // SAFETY: geteuid has no preconditions.
            unsafe { libc::geteuid() } == 0,
            "cannot run: these tests need root to create uid {UID} and grant it /dev/fuse (CI runs them as root)"
        );
        assert!(
            Path::new("/usr/bin/setpriv").exists() || which("setpriv"),
            "cannot run: setpriv (util-linux) is missing"
        );
        ensure_user();
        let fuse = FuseMode::set(fuse_mode);
        let tmp = tempfile::Builder::new()
            .prefix("strata-rtest-")
            .tempdir()
            .unwrap();
        let src = tmp.path().join("src");
        std::fs::create_dir(&src).unwrap();
        populate(&src);
        std::fs::create_dir(tmp.path().join("sync")).unwrap();
        chown_tree(tmp.path());
        let f = Fixture {
            store: tmp.path().join("store"),
            tmp,
            _fuse: fuse,
            _serial: serial,
        };
        f.user_ok(&["init"]);
        f.user_ok(&["project", "create", "p", "--from", s(&src), "-m", "base"]);
        f
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// `strata --store STORE ARGS` as uid 1500 with no supplementary groups.
    fn user(&self, args: &[&str]) -> Command {
        let mut c = Command::new("setpriv");
        c.args([
            &format!("--reuid={UID}"),
            &format!("--regid={UID}"),
            "--clear-groups",
            "--",
            s(user_bin()),
            "--store",
            s(&self.store),
        ])
        .args(args)
        .env_remove("STRATA_STORE")
        .env_remove("XDG_DATA_HOME")
        .env("STRATA_RTEST_TAG", tag())
        .env("HOME", self.tmp.path())
        .current_dir(self.tmp.path())
        .timeout(Duration::from_secs(120));
        c
    }

    fn user_ok(&self, args: &[&str]) -> Vec<u8> {
        let out = self.user(args).output().unwrap();
        assert!(
            out.status.success(),
            "strata {args:?} as uid {UID}: {:?}\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// `strata run p/main [FLAGS] -- sh -c SCRIPT` as the user.
    fn run_sh(&self, flags: &[&str], script: &str) -> std::process::Output {
        let mut args = vec!["run", "p/main"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--", "sh", "-c", script]);
        self.user(&args).output().unwrap()
    }

    /// Open a copy of the Store (as root, without leaving root-owned files
    /// in the user's Store) and return it with the head of p/main.
    fn read_back(&self) -> (Store, ObjectId, tempfile::TempDir) {
        let copy = tempfile::tempdir().unwrap();
        let dst = copy.path().join("store");
        std::fs::create_dir(&dst).unwrap();
        for e in std::fs::read_dir(&self.store).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
        }
        let store = Store::open(&dst, &StoreOptions::default()).unwrap();
        let head = store.resolve("p/main").unwrap().commit;
        (store, head, copy)
    }
}

fn kill9(pid: u32) {
    // SAFETY: kill has no memory arguments; the pid is one we just saw.
    let r = unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    assert_eq!(r, 0, "kill -9 {pid}: {}", std::io::Error::last_os_error());
}

fn which(p: &str) -> bool {
    std::env::var_os("PATH")
        .map(|ps| std::env::split_paths(&ps).any(|d| d.join(p).exists()))
        .unwrap_or(false)
}

fn file_bytes(store: &Store, head: ObjectId, path: &str) -> Option<Vec<u8>> {
    let e = store.read_path(head, path.as_bytes()).unwrap()?;
    match &e.kind {
        EntryKind::File(c) => Some(store.read_file_range(c, 0, c.size as usize).unwrap()),
        k => panic!("{path} is a {}", k.type_name()),
    }
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn host_mounts() -> String {
    std::fs::read_to_string("/proc/self/mounts").unwrap()
}

/// Marks the processes of this test binary's runs (strata, helper, init,
/// command all inherit it), so that other uid 1500 processes on the machine
/// (a sandbox test's commands run as 1500 too) never count.
fn tag() -> &'static str {
    static TAG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TAG.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        format!("{}-{nanos}", std::process::id())
    })
}

/// Processes of uid 1500 started by this test binary's runs, right now.
fn user_pids() -> Vec<u32> {
    let needle = format!("STRATA_RTEST_TAG={}\0", tag());
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Ok(st) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            let uid = st
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u32>().ok());
            let ours = std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.windows(needle.len()).any(|w| w == needle.as_bytes()));
            if uid == Some(UID) && ours {
                out.push(pid);
            }
        }
    }
    out
}

/// uid 1500's scratch directories of `strata run` under the temp dir.
fn user_scratch_dirs() -> std::collections::BTreeSet<PathBuf> {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name().to_string_lossy().starts_with("strata-run-")
                && e.metadata().map(|m| m.uid() == UID).unwrap_or(false)
        })
        .map(|e| e.path())
        .collect()
}

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn base_tree(src: &Path) {
    let w = |p: &str, b: &[u8]| {
        let p = src.join(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b).unwrap();
    };
    w("keep.txt", b"keep\n");
    w("del.txt", b"delete me\n");
    w("mv_src.txt", b"moved\n");
    w("link_src.txt", b"linked\n");
    w("trunc.txt", b"0123456789");
    w("chmod.txt", b"mode\n");
    w("sub/inner.txt", b"inner\n");
    std::fs::create_dir(src.join("dir_rm")).unwrap();
    std::fs::set_permissions(
        src.join("chmod.txt"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
}

#[test]
fn writes_and_ops_on_existing_entries_land_in_the_store_with_commit() {
    let f = Fixture::new(0o666, base_tree);
    let before = host_mounts();
    let sync = f.path("sync");
    // BRIEF section 4: owners are 0 outbound / the user inbound, or unlink,
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

#[test]
fn a_missing_binary_is_an_error_not_127() {
    let f = Fixture::new(0o666, base_tree);
    for prog in ["/nonexistent/prog", "no-such-program-strata-test"] {
        // A PATH the user may search (root's may hold dirs uid 1500 cannot
        // enter, which makes execvp report EACCES instead of ENOENT).
        let out = f
            .user(&["run", "p/main", "--", prog])
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(RUN_FAILED),
            "{prog}: {}",
            stderr(&out)
        );
        assert!(stderr(&out).contains("cannot start"), "{}", stderr(&out));
        assert!(stderr(&out).contains("No such file"), "{}", stderr(&out));
    }
    assert!(user_pids().is_empty(), "processes left: {:?}", user_pids());
    // A REF that is not there is strata's failure too.
    let out = f.user(&["run", "p/nosuch", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(RUN_FAILED), "{}", stderr(&out));
    assert!(stderr(&out).contains("strata: error:"), "{}", stderr(&out));
}

#[test]
fn a_cwd_inside_the_mountpoint_is_refused_before_anything_runs() {
    let f = Fixture::new(0o666, base_tree);
    let at = f.path("mnt");
    std::fs::create_dir_all(at.join("sub")).unwrap();
    chown_tree(&at);
    let marker = f.path("sync/ran");
    for cwd in [at.clone(), at.join("sub")] {
        let out = f
            .user(&["run", "p/main", "--at", s(&at), "--", "touch", s(&marker)])
            .current_dir(&cwd)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(RUN_FAILED), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("inside the mountpoint"),
            "{}",
            stderr(&out)
        );
        assert!(!marker.exists(), "the command ran");
    }
}

#[test]
fn killing_the_parent_leaves_no_mount_and_no_process() {
    let f = Fixture::new(0o666, base_tree);
    let scratch_before = user_scratch_dirs();
    let sync = f.path("sync");
    // The command also leaves a daemon behind: it must die too.
    let script = format!(
        r#"cd "$STRATA_ROOT"; (sleep 1000 &) ; echo x > new.txt; touch {0}/ready; exec sleep 1000"#,
        s(&sync)
    );
    let mut child = f
        .user(&["run", "p/main", "--commit", "--", "sh", "-c", &script])
        .spawn_output_later();
    wait_for("the command to be ready", Duration::from_secs(60), || {
        sync.join("ready").exists() || child.try_wait_done()
    });
    assert!(
        user_pids().len() >= 4,
        "expected strata, helper, init, sleeps: {:?}",
        user_pids()
    );
    child.kill9();
    wait_for(
        "every uid 1500 process to go",
        Duration::from_secs(10),
        || user_pids().is_empty(),
    );
    assert!(!host_mounts().contains("/strata-run-"));
    // Nothing was committed.
    let (store, head, _c) = f.read_back();
    assert!(store.read_path(head, b"new.txt").unwrap().is_none());
    // SIGKILL gave the parent no chance to remove its scratch directory;
    // the next run removes it (its run lock is free).
    let killed: Vec<_> = user_scratch_dirs()
        .difference(&scratch_before)
        .cloned()
        .collect();
    assert_eq!(
        killed.len(),
        1,
        "expected the killed run's scratch: {killed:?}"
    );
    let pins = |f: &Fixture| -> i64 {
        let (_s, _h, copy) = f.read_back();
        let db = rusqlite::Connection::open(copy.path().join("store/strata.db")).unwrap();
        db.query_row(
            "SELECT count(*) FROM pins WHERE holder LIKE 'workspace:%'",
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    assert_eq!(
        pins(&f),
        1,
        "the killed run's Workspace should still pin its base"
    );
    let out = f.user(&["run", "p/main", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert!(
        !killed[0].exists(),
        "the killed run's scratch was not swept"
    );
    // ...and its Workspace's pin on the base commit is released.
    assert_eq!(
        pins(&f),
        0,
        "the killed run's Workspace pin was not released"
    );
}

#[test]
fn killing_the_command_ends_the_run_with_128_plus_9() {
    let f = Fixture::new(0o666, base_tree);
    let sync = f.path("sync");
    let script = format!(r#"echo $$ > {0}/pid; exec sleep 1000"#, s(&sync));
    let mut child = f
        .user(&["run", "p/main", "--", "sh", "-c", &script])
        .spawn_output_later();
    wait_for("the command's pid", Duration::from_secs(60), || {
        std::fs::read_to_string(sync.join("pid")).is_ok_and(|s| s.ends_with('\n'))
            || child.try_wait_done()
    });
    // The pid is the one in the command's PID namespace: find the host pid
    // of that sleep through uid 1500's processes instead.
    let sleeper = user_pids()
        .into_iter()
        .find(|p| {
            std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.starts_with("sleep\0"))
        })
        .expect("the sleep process");
    kill9(sleeper);
    let out = child.finish();
    assert_eq!(out.status.code(), Some(137), "stderr: {}", stderr(&out));
    wait_for(
        "every uid 1500 process to go",
        Duration::from_secs(10),
        || user_pids().is_empty(),
    );
}

/// Host pids of uid 1500's processes whose cmdline contains `needle`.
fn user_pids_with(needle: &str) -> Vec<u32> {
    user_pids()
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.windows(needle.len()).any(|w| w == needle.as_bytes()))
        })
        .collect()
}

/// The helper (the parent of the namespace init) and the init (pid 1 of
/// the command's PID namespace) both run as `strata __rootless-helper`.
fn helper_and_init() -> (u32, u32) {
    let hs = user_pids_with("__rootless-helper");
    assert_eq!(hs.len(), 2, "expected helper and init: {hs:?}");
    let ppid = |p: u32| -> u32 {
        let st = std::fs::read_to_string(format!("/proc/{p}/status")).unwrap();
        st.lines()
            .find_map(|l| l.strip_prefix("PPid:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    if ppid(hs[1]) == hs[0] {
        (hs[0], hs[1])
    } else {
        assert_eq!(ppid(hs[0]), hs[1]);
        (hs[1], hs[0])
    }
}

#[test]
fn a_dead_helper_or_init_is_an_error_never_an_exit_status() {
    // BRIEF section 4: a helper failure must surface as an error, never as
    // a plausible exit status (SIGKILL would otherwise read as 137).
    let f = Fixture::new(0o666, base_tree);
    let sync = f.path("sync");
    for (victim, want) in [(0, "rootless helper exited"), (1, "namespace init ended")] {
        let _ = std::fs::remove_file(sync.join("ready"));
        let script = format!(r#"touch {0}/ready; exec sleep 1000"#, s(&sync));
        let mut child = f
            .user(&["run", "p/main", "--commit", "--", "sh", "-c", &script])
            .spawn_output_later();
        wait_for("the command to be ready", Duration::from_secs(60), || {
            sync.join("ready").exists() || child.try_wait_done()
        });
        let (helper, init) = helper_and_init();
        kill9(if victim == 0 { helper } else { init });
        let out = child.finish();
        assert_eq!(out.status.code(), Some(RUN_FAILED), "{}", stderr(&out));
        assert!(stderr(&out).contains(want), "{}", stderr(&out));
        wait_for(
            "every uid 1500 process to go",
            Duration::from_secs(10),
            || user_pids().is_empty(),
        );
    }
    assert!(!host_mounts().contains("/strata-run-"));
}

#[test]
fn ctrl_c_goes_to_the_command_and_its_status_comes_back() {
    // The terminal sends SIGINT to the whole foreground process group:
    // strata and its helper ignore it (as system(3) does), the command
    // dies of it, and the run reports 128+2 with the mount torn down.
    let f = Fixture::new(0o666, base_tree);
    let sync = f.path("sync");
    let script = format!(r#"touch {0}/ready; exec sleep 1000"#, s(&sync));
    let mut child = f
        .user(&["run", "p/main", "--", "sh", "-c", &script])
        .spawn_output_later_in(Some(0));
    wait_for("the command to be ready", Duration::from_secs(60), || {
        sync.join("ready").exists() || child.try_wait_done()
    });
    let pgid = child.child.as_ref().unwrap().id() as libc::pid_t;
    // SAFETY: kill has no memory arguments; -pgid names the job's group.
    assert_eq!(unsafe { libc::kill(-pgid, libc::SIGINT) }, 0);
    let out = child.finish();
    assert_eq!(out.status.code(), Some(128 + 2), "stderr: {}", stderr(&out));
    wait_for(
        "every uid 1500 process to go",
        Duration::from_secs(10),
        || user_pids().is_empty(),
    );
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
fn dev_fuse_mode_0600_gets_a_verdict_with_the_fix() {
    // BRIEF section 4: /dev/fuse is mode 0600 on these machines.
    let f = Fixture::new(0o600, base_tree);
    let out = f.run_sh(&["--commit"], "echo x > \"$STRATA_ROOT/new.txt\"");
    assert_eq!(out.status.code(), Some(RUN_FAILED), "{}", stderr(&out));
    let e = stderr(&out);
    assert!(e.contains("/dev/fuse is mode 0600"), "{e}");
    assert!(e.contains("chmod 0666 /dev/fuse"), "{e}");
    let (store, head, _c) = f.read_back();
    assert!(store.read_path(head, b"new.txt").unwrap().is_none());
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

/// A spawned `assert_cmd` command whose output is collected at the end.
struct Running {
    child: Option<std::process::Child>,
    done: Option<std::process::Output>,
}

trait SpawnLater {
    fn spawn_output_later(&mut self) -> Running {
        self.spawn_output_later_in(None)
    }
    /// With `Some(0)`: in a new process group (as a shell does for a job).
    fn spawn_output_later_in(&mut self, pgroup: Option<i32>) -> Running;
}

impl SpawnLater for Command {
    fn spawn_output_later_in(&mut self, pgroup: Option<i32>) -> Running {
        let mut std_cmd = std::process::Command::new(self.get_program());
        std_cmd.args(self.get_args());
        for (k, v) in self.get_envs() {
            match v {
                Some(v) => std_cmd.env(k, v),
                None => std_cmd.env_remove(k),
            };
        }
        if let Some(d) = self.get_current_dir() {
            std_cmd.current_dir(d);
        }
        if let Some(g) = pgroup {
            std::os::unix::process::CommandExt::process_group(&mut std_cmd, g);
        }
        std_cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        Running {
            child: Some(std_cmd.spawn().unwrap()),
            done: None,
        }
    }
}

impl Running {
    fn try_wait_done(&mut self) -> bool {
        if self.done.is_some() {
            return true;
        }
        let exited = self
            .child
            .as_mut()
            .map(|c| c.try_wait().unwrap().is_some())
            .unwrap_or(true);
        if exited {
            let out = self.child.take().unwrap().wait_with_output().unwrap();
            panic!(
                "strata run ended early: {:?}\nstdout: {}\nstderr: {}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        false
    }

    fn kill9(&mut self) {
        let c = self.child.as_mut().unwrap();
        // setpriv execs strata, so this pid is the serving parent itself.
        kill9(c.id());
        let _ = c.wait();
        self.child = None;
    }

    fn finish(&mut self) -> std::process::Output {
        let c = self.child.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let pid = c.id();
        std::thread::spawn(move || {
            let _ = tx.send(c.wait_with_output().unwrap());
        });
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(o) => o,
            Err(_) => {
                let _ = std::process::Command::new("kill")
                    .args(["-9", &pid.to_string()])
                    .status();
                panic!("strata run did not finish within 120 s");
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
