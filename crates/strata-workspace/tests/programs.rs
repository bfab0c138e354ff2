//! End to end: ordinary programs (git, tar, python3, sqlite3) run in a
//! mounted Workspace; the commit, exported from the Store, equals what they
//! wrote byte for byte and mode for mode. The tools are required: CI has
//! them on this machine type, and a missing one fails the test with its name.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use strata_store::NoProgress;
use strata_workspace::CommitOutcome;

fn run(dir: &Path, argv: &[&str]) {
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {argv:?} (is it installed?): {e}"));
    assert!(
        out.status.success(),
        "{argv:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// path -> (type+mode, bytes or link target) for every entry under `root`
/// (the .git directory's index and objects included).
fn snapshot(root: &Path) -> BTreeMap<String, (u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let content = if m.is_file() {
                std::fs::read(&p).unwrap()
            } else if m.file_type().is_symlink() {
                std::fs::read_link(&p)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else {
                Vec::new()
            };
            if m.is_dir() {
                stack.push(p.clone());
            }
            out.insert(rel, (m.mode(), content));
        }
    }
    out
}

#[test]
fn git_tar_python_sqlite_then_export() {
    let fx = fixture();
    let ws = fx.create();
    let h = fx.mount(&ws, true);
    let m = fx.mnt.clone();

    // A tarball with modes, a symlink and nested dirs, made outside.
    let tsrc = fx.tmp.path().join("tsrc");
    std::fs::create_dir_all(tsrc.join("pkg/bin")).unwrap();
    std::fs::write(tsrc.join("pkg/bin/tool"), b"#!/bin/sh\necho tool\n").unwrap();
    std::fs::set_permissions(
        tsrc.join("pkg/bin/tool"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(tsrc.join("pkg/readme"), b"readme\n").unwrap();
    std::os::unix::fs::symlink("bin/tool", tsrc.join("pkg/tool-link")).unwrap();
    let tarball = fx.tmp.path().join("t.tar");
    run(
        fx.tmp.path(),
        &[
            "tar",
            "cf",
            tarball.to_str().unwrap(),
            "-C",
            tsrc.to_str().unwrap(),
            "pkg",
        ],
    );
    run(&m, &["tar", "xf", tarball.to_str().unwrap()]);

    // git
    run(&m, &["git", "init", "-q", "repo"]);
    let repo = m.join("repo");
    std::fs::write(repo.join("main.rs"), b"fn main() {}\n").unwrap();
    std::fs::create_dir(repo.join("src")).unwrap();
    std::fs::write(repo.join("src/lib.rs"), b"pub fn f() {}\n").unwrap();
    run(&repo, &["git", "add", "-A"]);
    run(&repo, &["git", "commit", "-q", "-m", "first"]);
    std::fs::write(repo.join("main.rs"), b"fn main() { println!(); }\n").unwrap();
    run(&repo, &["git", "commit", "-q", "-am", "second"]);
    run(&repo, &["git", "status", "--porcelain"]);
    run(&repo, &["git", "gc", "-q"]);

    // python: write files, rename over, chmod
    run(
        &m,
        &[
            "python3",
            "-c",
            "import os\n\
             os.makedirs('py/out', exist_ok=True)\n\
             for i in range(50):\n\
             \x20   open(f'py/out/{i}.txt','w').write(str(i)*i)\n\
             open('py/tmp','w').write('final')\n\
             os.replace('py/tmp','py/final')\n\
             os.chmod('py/final', 0o600)\n",
        ],
    );

    // sqlite3: a database with a journal, several transactions
    run(
        &m,
        &[
            "sqlite3",
            "db.sqlite",
            "create table t(x); insert into t values (1),(2),(3);",
        ],
    );
    run(&m, &["sqlite3", "db.sqlite", "pragma journal_mode=wal; insert into t select x*10 from t; pragma wal_checkpoint(truncate);"]);
    run(&m, &["sqlite3", "db.sqlite", "select sum(x) from t;"]);

    let commit = match ws.commit("programs").unwrap() {
        CommitOutcome::Committed(c) => c,
        o => panic!("expected a commit, got {o:?}"),
    };
    let live = snapshot(&m);
    h.unmount().unwrap();

    let out = fx.tmp.path().join("export");
    fx.store.export(commit, &out, false, &NoProgress).unwrap();
    let exported = snapshot(&out);
    let missing: Vec<_> = live.keys().filter(|k| !exported.contains_key(*k)).collect();
    let extra: Vec<_> = exported.keys().filter(|k| !live.contains_key(*k)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing {missing:?} extra {extra:?}"
    );
    for (k, v) in &live {
        let e = &exported[k];
        assert_eq!(v.0, e.0, "mode of {k}: live {:o} exported {:o}", v.0, e.0);
        assert!(v.1 == e.1, "content of {k} differs");
    }
    // And the repository is intact in the export.
    run(&out.join("repo"), &["git", "fsck", "--strict"]);
    let log = Command::new("git")
        .args(["log", "--format=%s"])
        .current_dir(out.join("repo"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&log.stdout), "second\nfirst\n");
    let sum = Command::new("sqlite3")
        .args(["db.sqlite", "select sum(x) from t;"])
        .current_dir(&out)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&sum.stdout).trim(), "66");
}
