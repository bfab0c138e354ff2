//! Bad input gets a clear one-line error, the right exit code (1 failure,
//! 2 usage), and loses nothing: the Store is read back after each refusal.

mod common;

use common::{entry_names, s, write, Env};
use std::os::unix::fs::FileTypeExt;

fn contains(stderr: &str, needle: &str) {
    assert!(
        stderr.contains(needle),
        "expected {needle:?} in the error, got: {stderr}"
    );
}

#[test]
fn a_missing_store_says_how_to_make_one() {
    let env = Env::bare();
    for args in [
        &["stats"][..],
        &["project", "list"],
        &["fsck"],
        &["log", "p/main"],
    ] {
        let e = env.fails(args, 1);
        contains(&e, "no Store at");
        contains(&e, "strata init");
    }
    assert!(!env.store.exists(), "reading commands never create a Store");
}

#[test]
fn a_file_where_the_store_should_be_is_refused() {
    let env = Env::bare();
    std::fs::write(&env.store, b"not a store").unwrap();
    contains(&env.fails(&["stats"], 1), "is not a strata Store");
    contains(&env.fails(&["init"], 1), "is not a strata Store");
    assert_eq!(std::fs::read(&env.store).unwrap(), b"not a store");
}

#[test]
fn a_directory_of_other_things_is_not_a_store() {
    let env = Env::bare();
    write(&env.store, "notes.txt", b"mine");
    contains(&env.fails(&["init"], 1), "not a strata Store");
    contains(&env.fails(&["stats"], 1), "not a strata Store");
    assert_eq!(std::fs::read(env.store.join("notes.txt")).unwrap(), b"mine");
}

#[test]
fn a_store_from_a_newer_strata_is_refused() {
    let env = Env::new();
    let db = rusqlite::Connection::open(env.store.join("strata.db")).unwrap();
    db.execute("UPDATE meta SET value = '999' WHERE key = 'version'", [])
        .unwrap();
    drop(db);
    let e = env.fails(&["stats"], 1);
    contains(&e, "newer");
    contains(&e, "Upgrade strata");
}

#[test]
fn invalid_names_are_usage_errors() {
    let env = Env::new();
    env.json(&["project", "create", "ok"]);
    for (args, what) in [
        (&["project", "create", "Upper"][..], "invalid project name"),
        (&["project", "create", "a..b"], "'..'"),
        (&["project", "create", "-dash"], ""),
        (&["project", "create", "has/slash"], "invalid project name"),
        (&["branch", "create", "ok/Bad"], "invalid branch name"),
        (&["branch", "create", "no-slash"], "PROJECT/BRANCH"),
        (&["branch", "delete", "ok/x y"], "invalid branch name"),
        (&["snapshot", "ok/..", "."], "invalid branch name"),
        (&["log", "zz"], "at least 8 hex digits"),
        (&["log", "abc"], "at least 8 hex digits"),
        (&["branch", "list", "UP"], "invalid project name"),
    ] {
        let e = env.fails(args, 2);
        contains(&e, what);
    }
    // Too long: 64 characters.
    let long = "a".repeat(64);
    contains(
        &env.fails(&["project", "create", &long], 2),
        "longer than 63",
    );
    // Nothing was created by any of them.
    let projects = env.json(&["project", "list"]);
    assert_eq!(projects.as_array().unwrap().len(), 1);
    assert_eq!(env.json(&["branch", "list"]).as_array().unwrap().len(), 1);
}

#[test]
fn unknown_flags_and_missing_arguments_exit_2() {
    let env = Env::new();
    let out = env.cmd(&["snapshot", "p/main"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = env.cmd(&["stats", "--no-such-flag"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Malformed values of the Sandbox and exec flags are usage errors found by
/// clap before anything runs: exit 2, a message naming the flag, and no
/// Sandbox record written (the state directory is read back empty).
#[test]
fn malformed_sandbox_and_exec_flags_exit_2_naming_the_flag() {
    let env = Env::new();
    // A Sandbox state root must not be under /tmp (the SDK refuses it).
    let state = tempfile::Builder::new()
        .prefix("strata-cli-bad-flags-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let run = |args: &[&str]| {
        let out = env
            .cmd(args)
            .env("STRATA_SANDBOX_STATE", state.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "strata {args:?}: {err}");
        err
    };
    for (args, flag) in [
        (&["sandbox", "create", "--label", "novalue"][..], "--label"),
        (&["sandbox", "create", "--label", "=v"], "--label"),
        (&["sandbox", "create", "--memory", "lots"], "--memory"),
        (&["sandbox", "create", "--memory", "0"], "--memory"),
        (&["sandbox", "create", "--cpu", "0"], "--cpu"),
        (&["sandbox", "create", "--cpu=-1"], "--cpu"),
        (&["sandbox", "create", "--network", "bridge"], "--network"),
        (&["sandbox", "create", "--backend", "vm"], "--backend"),
        (&["sandbox", "create", "--backend", "docker"], "--image"),
        (&["sandbox", "create", "--image", "busybox"], "--image"),
        (&["sandbox", "list", "--label", "x"], "--label"),
        (&["exec", "ws-x", "--user", "root", "--", "true"], "--user"),
        (&["exec", "ws-x", "--user", "1:g", "--", "true"], "--user"),
        (
            &["exec", "ws-x", "--env", "NOEQUALS", "--", "true"],
            "--env",
        ),
    ] {
        contains(&run(args), flag);
    }
    let left: Vec<_> = std::fs::read_dir(state.path()).unwrap().collect();
    assert!(left.is_empty(), "a refused create wrote state: {left:?}");
}

#[test]
fn refs_that_match_nothing_fail() {
    let env = Env::new();
    env.json(&["project", "create", "p"]);
    contains(
        &env.fails(&["log", "p/nope"], 1),
        "branch not found: p/nope",
    );
    contains(&env.fails(&["log", "q/main"], 1), "not found");
    contains(
        &env.fails(&["log", "deadbeef00"], 1),
        "not found: deadbeef00",
    );
    contains(
        &env.fails(&["branch", "create", "p/x", "--from", "0123456789"], 1),
        "not found",
    );
    contains(&env.fails(&["branch", "create", "q/x"], 1), "not found");
    contains(
        &env.fails(&["ls", "p/main", "missing/path"], 1),
        "no such path",
    );
    contains(&env.fails(&["branch", "delete", "p/ghost"], 1), "not found");
    contains(&env.fails(&["project", "create", "p"], 1), "already exists");
    env.json(&["branch", "create", "p/x"]);
    contains(
        &env.fails(&["branch", "create", "p/x"], 1),
        "already exists",
    );
}

#[test]
fn an_ambiguous_commit_prefix_lists_the_candidates() {
    let env = Env::new();
    env.json(&["project", "create", "p"]);
    // Two commit ids sharing 8 hex digits would take ~2^16 commits to find
    // by chance; plant two rows instead (resolution only reads ids).
    let db = rusqlite::Connection::open(env.store.join("strata.db")).unwrap();
    for last in [1u8, 2] {
        let mut id = [0xab_u8; 32];
        id[31] = last;
        db.execute(
            "INSERT INTO objects (id, kind, enc, raw_len, base, depth, data)
             VALUES (?1, 4, 0, 0, NULL, 0, x'')",
            [&id[..]],
        )
        .unwrap();
    }
    drop(db);
    let e = env.fails(&["log", "abababab"], 1);
    contains(&e, "ambiguous");
    contains(&e, "more hex digits");
}

#[test]
fn export_into_a_non_empty_directory_needs_force() {
    let env = Env::new();
    let src = env.path("src");
    write(&src, "a.txt", b"from the store\n");
    env.json(&["project", "create", "p", "--from", s(&src)]);
    let out = env.path("out");
    write(&out, "mine.txt", b"precious\n");
    contains(&env.fails(&["export", "p/main", s(&out)], 1), "--force");
    assert!(
        !out.join("a.txt").exists(),
        "nothing written without --force"
    );
    assert_eq!(std::fs::read(out.join("mine.txt")).unwrap(), b"precious\n");
    env.json(&["export", "p/main", s(&out), "--force"]);
    assert_eq!(
        std::fs::read(out.join("a.txt")).unwrap(),
        b"from the store\n"
    );
}

#[test]
fn a_snapshot_of_a_tree_containing_the_store_is_refused() {
    let env = Env::new();
    env.json(&["project", "create", "p"]);
    let head = env.json(&["branch", "list", "p"])[0]["head"].clone();
    // The Store lives inside the temp dir: snapshotting the temp dir would recurse.
    write(env.tmp.path(), "work/file.txt", b"x");
    let e = env.fails(&["snapshot", "p/main", s(env.tmp.path())], 1);
    contains(&e, "contains the Store");
    let e = env.fails(&["project", "create", "q", "--from", s(env.tmp.path())], 1);
    contains(&e, "contains the Store");
    assert_eq!(env.json(&["branch", "list", "p"])[0]["head"], head);
    assert_eq!(env.json(&["project", "list"]).as_array().unwrap().len(), 1);
    assert_eq!(env.json(&["fsck"])["ok"], true);
}

#[test]
fn a_snapshot_source_that_is_missing_or_a_file_is_an_error() {
    let env = Env::new();
    env.json(&["project", "create", "p"]);
    contains(
        &env.fails(&["snapshot", "p/main", s(&env.path("nope"))], 1),
        "nope",
    );
    write(env.tmp.path(), "file", b"x");
    contains(
        &env.fails(&["snapshot", "p/main", s(&env.path("file"))], 1),
        "not a directory",
    );
}

#[test]
fn symlinks_out_of_the_tree_are_stored_not_followed() {
    let env = Env::new();
    let secret = env.path("outside/secret.txt");
    write(env.tmp.path(), "outside/secret.txt", b"do not import me\n");
    let src = env.path("src");
    write(&src, "in.txt", b"inside\n");
    std::os::unix::fs::symlink("../outside/secret.txt", src.join("rel")).unwrap();
    std::os::unix::fs::symlink(&secret, src.join("abs")).unwrap();
    std::os::unix::fs::symlink(env.path("outside"), src.join("dir")).unwrap();
    std::os::unix::fs::symlink("/nonexistent/dangling", src.join("dangling")).unwrap();
    let r = env.json(&["project", "create", "p", "--from", s(&src)]);
    assert_eq!(r["files"], 1, "only in.txt is a file: {r}");
    assert_eq!(r["symlinks"], 4, "{r}");

    let ls = env.json(&["ls", "p/main"]);
    let get = |n: &str| {
        ls.as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == n)
            .unwrap_or_else(|| panic!("{n} missing from {ls}"))
            .clone()
    };
    assert_eq!(get("rel")["type"], "symlink");
    assert_eq!(get("rel")["target"], "../outside/secret.txt");
    assert_eq!(get("abs")["target"], s(&secret));
    assert_eq!(get("dir")["type"], "symlink");
    assert_eq!(get("dangling")["target"], "/nonexistent/dangling");
    // Nothing behind the links was imported.
    contains(
        &env.fails(&["ls", "p/main", "dir/secret.txt"], 1),
        "no such path",
    );
    contains(&env.fails(&["cat", "p/main", "rel"], 1), "symlink");
    let st = env.json(&["stats"]);
    assert_eq!(st["logical_bytes"], 7, "only in.txt's 7 bytes: {st}");

    let out = env.path("out");
    env.json(&["export", "p/main", s(&out)]);
    for (name, target) in [
        ("rel", std::path::PathBuf::from("../outside/secret.txt")),
        ("abs", secret.clone()),
        ("dangling", "/nonexistent/dangling".into()),
    ] {
        let md = std::fs::symlink_metadata(out.join(name)).unwrap();
        assert!(md.file_type().is_symlink(), "{name} exported as a symlink");
        assert_eq!(std::fs::read_link(out.join(name)).unwrap(), target);
    }
}

#[test]
fn sockets_are_skipped_with_a_warning_and_fifos_recorded() {
    let env = Env::new();
    let src = env.path("src");
    write(&src, "keep.txt", b"kept\n");
    let _listener = std::os::unix::net::UnixListener::bind(src.join("sock")).unwrap();
    let st = std::process::Command::new("mkfifo")
        .arg(src.join("pipe"))
        .status()
        .unwrap();
    assert!(st.success());
    env.json(&["project", "create", "p"]);
    let out = env
        .cmd(&["--json", "snapshot", "p/main", s(&src)])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning") && stderr.contains("sock"),
        "{stderr}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["warnings"].as_array().unwrap().len(), 1, "{v}");
    let ls = env.json(&["ls", "p/main"]);
    assert_eq!(entry_names(&ls), vec!["keep.txt", "pipe"]);
    assert_eq!(ls[1]["type"], "fifo");
    let dest = env.path("out");
    env.json(&["export", "p/main", s(&dest)]);
    let md = std::fs::symlink_metadata(dest.join("pipe")).unwrap();
    assert!(md.file_type().is_fifo());
}

#[test]
fn cat_of_a_directory_explains_itself() {
    let env = Env::new();
    let src = env.path("src");
    write(&src, "d/f", b"x");
    env.json(&["project", "create", "p", "--from", s(&src)]);
    contains(&env.fails(&["cat", "p/main", "d"], 1), "is a directory");
}

#[test]
fn fsck_of_a_damaged_store_reports_and_exits_1() {
    let env = Env::new();
    let src = env.path("src");
    write(&src, "a.txt", &common::random_bytes(3, 50_000));
    env.json(&["project", "create", "p", "--from", s(&src)]);
    let db = rusqlite::Connection::open(env.store.join("strata.db")).unwrap();
    // Flip one byte in the middle of the largest object.
    let (rowid, mut data): (i64, Vec<u8>) = db
        .query_row(
            "SELECT rowid, data FROM objects ORDER BY length(data) DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let mid = data.len() / 2;
    data[mid] ^= 0x40;
    db.execute(
        "UPDATE objects SET data = ?1 WHERE rowid = ?2",
        (data, rowid),
    )
    .unwrap();
    drop(db);
    let out = env.cmd(&["--json", "fsck"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert!(!v["problems"].as_array().unwrap().is_empty());
    // Text mode says so too.
    let out = env.cmd(&["fsck"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("problem"));
}
