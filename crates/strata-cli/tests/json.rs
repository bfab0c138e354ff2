//! Every command's `--json` output parses and has the documented shape, and
//! what the commands report is what the Store holds when read back.

mod common;

use common::{is_id, s, write, Env};
use serde_json::Value;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn every_command_prints_the_documented_json() {
    let env = Env::bare();
    let init = env.json(&["init"]);
    assert_eq!(init["created"], true);
    assert!(init["store"].as_str().unwrap().ends_with("store"));
    assert_eq!(
        env.json(&["init"])["created"],
        false,
        "init twice reports the Store"
    );

    // project create, empty and from a directory
    let p = env.json(&["project", "create", "empty", "-m", "nothing yet"]);
    assert!(is_id(&p["commit"]), "{p}");
    assert_eq!(p["branch"], "empty/main");

    let src = env.path("src");
    write(&src, "README.md", b"hello\n");
    write(&src, "sub/a.txt", b"a\n");
    write(&src, "sub/deep/b.txt", b"b\n");
    let exe = src.join("run.sh");
    std::fs::write(&exe, b"#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let imported = env.json(&[
        "project",
        "create",
        "web",
        "--from",
        s(&src),
        "-m",
        "import",
    ]);
    assert!(is_id(&imported["commit"]), "{imported}");
    assert_eq!(imported["files"], 4);
    let c1 = imported["commit"].as_str().unwrap().to_string();

    let projects = env.json(&["project", "list"]);
    assert_eq!(names(&projects), vec!["empty", "web"]);
    assert_eq!(projects[1]["branches"], serde_json::json!(["main"]));

    // branches
    let b = env.json(&["branch", "create", "web/agent"]);
    assert_eq!(b["branch"], "web/agent");
    assert_eq!(b["commit"], c1.as_str());
    let from_id = env.json(&["branch", "create", "web/pinned", "--from", &c1[..8]]);
    assert_eq!(
        from_id["commit"],
        c1.as_str(),
        "a REF may be an 8-digit prefix"
    );
    let all = env.json(&["branch", "list"]);
    assert_eq!(all.as_array().unwrap().len(), 4);
    let web = env.json(&["branch", "list", "web"]);
    let listed: Vec<&str> = web
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["branch"].as_str().unwrap())
        .collect();
    assert_eq!(listed, vec!["web/agent", "web/main", "web/pinned"]);
    assert!(web.as_array().unwrap().iter().all(|b| is_id(&b["head"])));

    // snapshot an edit onto the branch
    write(&src, "README.md", b"hello, edited\n");
    write(&src, "new.txt", b"new\n");
    std::fs::remove_file(src.join("sub/a.txt")).unwrap();
    let snap = env.json(&["snapshot", "web/agent", s(&src), "-m", "edit"]);
    assert!(is_id(&snap["commit"]), "{snap}");
    let c2 = snap["commit"].as_str().unwrap().to_string();
    assert_ne!(c1, c2);
    assert_eq!(snap["warnings"], serde_json::json!([]));

    // log
    let log = env.json(&["log", "web/agent"]);
    let log = log.as_array().unwrap();
    assert_eq!(log.len(), 2);
    assert_eq!(log[0]["commit"], c2.as_str());
    assert_eq!(log[0]["message"], "edit");
    assert_eq!(log[0]["parents"], serde_json::json!([c1]));
    assert_eq!(log[1]["commit"], c1.as_str());
    assert_eq!(
        env.json(&["log", "web/agent", "-n", "1"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(env.json(&["log", &c2[..12]])[0]["commit"], c2.as_str());

    // diff
    let diff = env.json(&["diff", "web/main", "web/agent"]);
    assert_eq!(diff["from"], c1.as_str());
    assert_eq!(diff["to"], c2.as_str());
    let mut changes: Vec<(String, String)> = diff["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap().to_string(),
                c["change"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    changes.sort();
    let want = [
        ("README.md", "modified"),
        ("new.txt", "added"),
        ("sub/a.txt", "deleted"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(changes, want);

    // ls: root, a subdirectory, one file
    let root = env.json(&["ls", "web/agent"]);
    assert_eq!(names(&root), vec!["README.md", "new.txt", "run.sh", "sub"]);
    let run = &root[2];
    assert_eq!(run["type"], "file");
    assert_eq!(run["mode"], "0755");
    assert_eq!(run["size"], 10);
    assert_eq!(root[3]["type"], "dir");
    assert_eq!(names(&env.json(&["ls", "web/agent", "sub"])), vec!["deep"]);
    let one = env.json(&["ls", "web/main", "sub/a.txt"]);
    assert_eq!(names(&one), vec!["a.txt"]);
    assert_eq!(one[0]["size"], 2);

    // cat: raw bytes, and JSON
    assert_eq!(
        env.ok(&["cat", "web/agent", "README.md"]),
        b"hello, edited\n"
    );
    assert_eq!(env.ok(&["cat", "web/main", "README.md"]), b"hello\n");
    let cat = env.json(&["cat", "web/agent", "sub/deep/b.txt"]);
    assert_eq!(cat["content"], "b\n");
    assert_eq!(cat["encoding"], "utf8");
    assert_eq!(cat["size"], 2);

    // export, then compare with the source
    let out = env.path("out");
    let ex = env.json(&["export", "web/agent", s(&out)]);
    assert_eq!(ex["commit"], c2.as_str());
    assert_eq!(ex["files"], 4);
    for rel in ["README.md", "new.txt", "run.sh", "sub/deep/b.txt"] {
        assert_eq!(
            std::fs::read(out.join(rel)).unwrap(),
            std::fs::read(src.join(rel)).unwrap(),
            "{rel}"
        );
    }
    assert!(!out.join("sub/a.txt").exists());
    let mode = std::fs::metadata(out.join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755);

    // stats, fsck, gc
    let st = env.json(&["stats"]);
    for k in ["objects", "stored_bytes", "logical_bytes", "db_bytes"] {
        assert!(st[k].as_u64().is_some_and(|n| n > 0), "stats.{k}: {st}");
    }
    let fsck = env.json(&["fsck"]);
    assert_eq!(fsck["ok"], true);
    assert_eq!(fsck["problems"], serde_json::json!([]));

    let del = env.json(&["branch", "delete", "web/agent"]);
    assert_eq!(del["deleted"], "web/agent");
    assert_eq!(del["head"], c2.as_str());
    let gc = env.json(&["gc"]);
    assert!(gc.is_object(), "{gc}");
    // web/agent's commit was reachable only from the deleted branch.
    assert!(gc["deleted_objects"].as_u64().unwrap() > 0, "{gc}");
    assert_eq!(env.json(&["fsck"])["ok"], true);
    // web/main survived gc intact.
    assert_eq!(env.ok(&["cat", "web/main", "sub/a.txt"]), b"a\n");
}

#[test]
fn non_utf8_names_round_trip_and_are_shown_exactly() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    let name = std::ffi::OsStr::from_bytes(b"caf\xe9.txt");
    std::fs::write(src.join(name), b"latin-1\n").unwrap();
    env.json(&["project", "create", "p", "--from", s(&src)]);
    let ls = env.json(&["ls", "p/main"]);
    assert_eq!(ls[0]["name_hex"], "636166e92e747874");
    // cat takes the raw name as an argument.
    let out = env.cmd(&["cat", "p/main"]).arg(name).output().unwrap();
    assert!(out.status.success());
    assert_eq!(out.stdout, b"latin-1\n");
    let dest = env.path("out");
    env.ok(&["export", "p/main", s(&dest)]);
    assert_eq!(std::fs::read(dest.join(name)).unwrap(), b"latin-1\n");
}

#[test]
fn binary_content_is_hex_in_json_and_raw_on_stdout() {
    let env = Env::new();
    let src = env.path("src");
    let bytes = common::random_bytes(7, 100_000);
    write(&src, "blob.bin", &bytes);
    env.json(&["project", "create", "p", "--from", s(&src)]);
    assert_eq!(env.ok(&["cat", "p/main", "blob.bin"]), bytes);
    let cat = env.json(&["cat", "p/main", "blob.bin"]);
    assert_eq!(cat["encoding"], "hex");
    assert_eq!(cat["content"].as_str().unwrap().len(), 200_000);
}

#[test]
fn store_comes_from_the_environment_when_not_given() {
    let env = Env::bare();
    let out = assert_cmd::Command::new(common::BIN)
        .env("STRATA_STORE", &env.store)
        .args(["--json", "init"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["store"], s(&env.store));

    // Default: $XDG_DATA_HOME/strata.
    let xdg = env.path("xdg");
    let out = assert_cmd::Command::new(common::BIN)
        .env_remove("STRATA_STORE")
        .env("XDG_DATA_HOME", &xdg)
        .args(["--json", "init"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(xdg.join("strata").is_dir());
}

#[test]
fn nothing_is_drawn_on_stderr_when_it_is_not_a_terminal() {
    let env = Env::new();
    let src = env.path("src");
    for i in 0..200 {
        write(&src, &format!("d/{i}.txt"), format!("{i}\n").as_bytes());
    }
    let out_dir = env.path("out");
    for args in [
        vec!["project", "create", "p", "--from", s(&src)],
        vec!["snapshot", "p/main", s(&src)],
        vec!["export", "p/main", s(&out_dir)],
        vec!["fsck"],
        vec!["gc"],
    ] {
        let out = env.cmd(&args).output().unwrap();
        assert!(out.status.success(), "{args:?}");
        assert!(
            out.stderr.is_empty(),
            "{args:?} wrote to a non-terminal stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
