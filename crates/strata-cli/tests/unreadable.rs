//! An unreadable file in a snapshot source: the error names the path and
//! nothing is half-committed. Root reads everything, so as root the test
//! runs strata as uid 65534 (setpriv); otherwise as the invoking user.

mod common;

use common::{s, write, Env};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Command;

#[test]
fn an_unreadable_file_names_the_path_and_commits_nothing() {
    let env = Env::bare();
    let src = env.path("src");
    write(&src, "ok.txt", b"readable\n");
    write(&src, "sub/locked.txt", b"secret\n");
    let locked = src.join("sub/locked.txt");
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();

    let as_root = std::fs::metadata(&locked).unwrap().uid() == 0;
    let strata = |args: &[&str]| -> std::process::Output {
        let mut c = if as_root {
            let mut c = Command::new("setpriv");
            c.args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                common::BIN,
            ]);
            c
        } else {
            Command::new(common::BIN)
        };
        c.env_remove("STRATA_STORE")
            .arg("--store")
            .arg(&env.store)
            .args(args)
            .output()
            .expect("run strata")
    };
    if as_root {
        // Hand the whole temp dir to uid 65534 so that it can keep a Store there.
        let st = Command::new("chown")
            .args(["-R", "65534:65534"])
            .arg(env.tmp.path())
            .status();
        // As root the check needs a second user (setpriv, chown); a
        // machine that cannot provide one fails here with the reason.
        assert!(
            st.is_ok_and(|s| s.success()) && strata(&["--version"]).status.code() == Some(0),
            "cannot run strata as uid 65534 here (needs `chown` and util-linux's `setpriv`, and a temp dir uid 65534 can traverse)"
        );
    }
    assert!(strata(&["init"]).status.success());
    let created = strata(&["--json", "project", "create", "p"]);
    assert!(created.status.success());
    let head: serde_json::Value = serde_json::from_slice(&created.stdout).unwrap();

    let out = strata(&["snapshot", "p/main", s(&src)]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(s(&locked)), "the error names the path: {err}");
    assert!(err.contains("Permission denied"), "{err}");

    let branches = strata(&["--json", "branch", "list", "p"]);
    let branches: serde_json::Value = serde_json::from_slice(&branches.stdout).unwrap();
    assert_eq!(
        branches[0]["head"], head["commit"],
        "the branch did not move"
    );
    let fsck = strata(&["--json", "fsck"]);
    assert!(fsck.status.success());
    let fsck: serde_json::Value = serde_json::from_slice(&fsck.stdout).unwrap();
    assert_eq!(fsck["ok"], true);
    let ls = strata(&["--json", "ls", "p/main"]);
    let ls: serde_json::Value = serde_json::from_slice(&ls.stdout).unwrap();
    assert_eq!(ls, serde_json::json!([]), "still the empty first commit");
}
