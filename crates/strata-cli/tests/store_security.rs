//! The Store's defences as the `strata` binary shows them: a damaged row
//! is an error naming the object (exit 1), never an abort; export drops
//! setuid/setgid bits unless `--preserve-privileges`; a new Store is
//! private and fsck warns about one that is not.

mod common;

use common::{s, write, Env};
use std::os::unix::fs::{MetadataExt, PermissionsExt};

/// The id of the only chunk of a one-chunk file `f` at p/main.
fn only_chunk(env: &Env) -> String {
    let c = rusqlite::Connection::open(env.store.join("strata.db")).unwrap();
    let ids: Vec<Vec<u8>> = c
        .prepare("SELECT id FROM objects WHERE kind = 1")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(ids.len(), 1, "one chunk in the Store");
    ids[0].iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn a_self_referencing_delta_is_an_error_in_cat_and_fsck() {
    let env = Env::new();
    let src = env.path("src");
    write(&src, "f", b"a file of one chunk\n");
    env.ok(&["project", "create", "p", "--from", s(&src)]);
    let chunk = only_chunk(&env);
    let db = rusqlite::Connection::open(env.store.join("strata.db")).unwrap();
    db.execute(
        "UPDATE objects SET enc = 2, base = id, depth = 1 WHERE kind = 1",
        [],
    )
    .unwrap();
    drop(db);

    let err = env.fails(&["cat", "p/main", "f"], 1);
    assert!(err.contains(&chunk), "cat names the object: {err}");
    assert!(err.contains("base is itself"), "{err}");

    let out = env.cmd(&["fsck"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "fsck: {out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&chunk), "fsck names the object: {stdout}");
}

#[test]
fn export_drops_setuid_unless_preserve_privileges() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test makes a setuid file owned by uid 1500 and exports as root; run it as root"
    );
    let env = Env::new();
    let src = env.path("src");
    write(&src, "x", b"pretend shell\n");
    let f = src.join("x");
    std::os::unix::fs::chown(&f, Some(1500), Some(1500)).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o6755)).unwrap();
    env.ok(&["project", "create", "p", "--from", s(&src)]);

    let out = env.path("out");
    let run = env
        .cmd(&["--json", "export", "p/main", s(&out)])
        .output()
        .unwrap();
    assert!(run.status.success(), "{run:?}");
    let v: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(v["dropped_privileges"], 1, "{v}");
    assert_eq!(v["restored_privileges"], 0, "{v}");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("--preserve-privileges"), "{stderr}");
    let md = std::fs::metadata(out.join("x")).unwrap();
    assert_eq!(md.mode() & 0o7777, 0o755, "no setuid/setgid on the host");
    assert_eq!(md.uid(), 1500, "owners are restored as root");

    let exact = env.path("exact");
    let v = env.json(&["export", "--preserve-privileges", "p/main", s(&exact)]);
    assert_eq!(v["restored_privileges"], 1, "{v}");
    let md = std::fs::metadata(exact.join("x")).unwrap();
    assert_eq!(md.mode() & 0o7777, 0o6755);
}

#[test]
fn init_makes_a_private_store_and_fsck_warns_about_an_open_one() {
    let env = Env::new();
    env.ok(&["project", "create", "p"]);
    let mode = |f: &str| std::fs::metadata(env.store.join(f)).unwrap().mode() & 0o7777;
    assert_eq!(mode(""), 0o700);
    // SQLite removes -wal and -shm when the last connection closes; the
    // Store's own test (strata-store tests/privileges.rs) checks them
    // while the Store is open.
    for f in ["strata.db", "lock"] {
        assert_eq!(mode(f), 0o600, "{f}");
    }
    let quiet = env.cmd(&["fsck"]).output().unwrap();
    assert!(quiet.status.success());
    assert!(
        !String::from_utf8_lossy(&quiet.stderr).contains("warning"),
        "{quiet:?}"
    );

    std::fs::set_permissions(&env.store, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(
        env.store.join("strata.db"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let out = env.cmd(&["fsck"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "a warning is not a failure: {out:?}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("chmod 700 {}", env.store.display())),
        "{stderr}"
    );
    assert!(stderr.contains("chmod 600"), "{stderr}");
}
