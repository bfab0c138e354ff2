//! `strata --remote URL …` for the commands that carry a directory or
//! reach a Workspace (docs/server.md, "The CLI through a server"):
//! snapshot, `project create --from` and export as tar archives through
//! the server's import and export routes; `ws mount|list|status|commit|
//! unmount`, `exec` and `exec logs|wait|cancel` on the server's Sandboxes.
//! Each is run locally and through a real `strata serve` and gives the
//! same output, `--json` shapes and exit codes; what was written is read
//! back from the Store itself.

mod common;

mod serve_common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::Env;
use serde_json::Value;
use serve_common::*;

fn json(b: &[u8]) -> Value {
    serde_json::from_slice(b)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(b)))
}

/// A source tree: text, binary, a mode, a symlink, a hard link, depth.
fn source(root: &Path) {
    std::fs::create_dir_all(root.join("lib/deep")).unwrap();
    std::fs::write(root.join("README"), "hello\n").unwrap();
    std::fs::write(root.join("lib/a.txt"), "a\n").unwrap();
    std::fs::write(root.join("lib/deep/b.bin"), [0u8, 159, 146, 150, 255]).unwrap();
    std::fs::write(root.join("run.sh"), "#!/bin/sh\necho run\n").unwrap();
    std::fs::set_permissions(root.join("run.sh"), PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::hard_link(root.join("lib/a.txt"), root.join("lib/a-link.txt")).unwrap();
    std::os::unix::fs::symlink("lib/a.txt", root.join("latest")).unwrap();
}

/// Every path under `root` with its kind, mode bits and content (or link
/// target), sorted: what an export wrote.
fn tree(root: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let what = if m.is_symlink() {
                format!("link {}", std::fs::read_link(&p).unwrap().display())
            } else if m.is_dir() {
                stack.push(p.clone());
                format!("dir {:o}", m.permissions().mode() & 0o7777)
            } else {
                format!(
                    "file {:o} {:?}",
                    m.permissions().mode() & 0o7777,
                    std::fs::read(&p).unwrap()
                )
            };
            out.push((rel, what));
        }
    }
    out.sort();
    out
}

/// The fields of a snapshot report both modes give the same values (the
/// commit and the Store's new-object figures are the Store's own).
const SNAPSHOT_SAME: [&str; 6] = [
    "unchanged",
    "files",
    "dirs",
    "symlinks",
    "bytes",
    "warnings",
];

fn keys(v: &Value) -> Vec<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

#[test]
fn snapshot_import_and_export_through_the_server() {
    let env = Env::new();
    let (t, _) = token(&env, &[]);
    let s = Server::unix(&env);
    let url = url_of(&s);
    let remote = |args: &[&str]| {
        let mut c = env.cmd(&[]);
        c.env("STRATA_TOKEN", &t)
            .args(["--remote", &url])
            .args(args);
        run(c)
    };
    let local = |args: &[&str]| run(env.cmd(args));
    let src = env.path("src");
    source(&src);
    let src_s = src.to_str().unwrap();

    // project create --from: the same report, the same tree in the Store.
    let l = local(&["--json", "project", "create", "loc", "--from", src_s]);
    let r = remote(&["--json", "project", "create", "rem", "--from", src_s]);
    assert_eq!((l.0, r.0), (Some(0), Some(0)), "{}\n{}", l.2, r.2);
    let (lj, rj) = (json(&l.1), json(&r.1));
    assert_eq!(keys(&lj), keys(&rj), "the same JSON shape: {lj}\n{rj}");
    for k in SNAPSHOT_SAME {
        assert_eq!(lj[k], rj[k], "{k}: {lj}\n{rj}");
    }
    assert_eq!(
        (lj["files"].as_u64(), rj["project"].as_str()),
        (Some(5), Some("rem"))
    );
    assert_eq!(rj["branch"], "rem/main");
    assert_eq!(rj["commit"], head(&env, "rem/main").as_str(), "the head");
    // Names, types, modes, sizes and link targets (owners, mtimes and
    // hard-link groups are not carried by the tar import: docs/server.md).
    let names = |r: &str, p: &str| -> Vec<Value> {
        let mut l = env.json(&["ls", r, p]);
        for e in l.as_array_mut().unwrap() {
            let o = e.as_object_mut().unwrap();
            for k in ["uid", "gid", "mtime_ns"] {
                assert!(o.remove(k).is_some(), "{k} in {o:?}");
            }
            // Hard links arrive as files of the same content.
            o.remove("link_group");
        }
        l.as_array().unwrap().clone()
    };
    for p in ["", "lib", "lib/deep"] {
        assert_eq!(names("loc/main", p), names("rem/main", p), "ls {p:?}");
    }
    assert_eq!(
        env.ok(&["cat", "rem/main", "lib/deep/b.bin"]),
        [0u8, 159, 146, 150, 255]
    );
    assert_eq!(env.ok(&["cat", "rem/main", "lib/a-link.txt"]), b"a\n");

    // snapshot: the changed tree is the branch's next commit.
    std::fs::write(src.join("README"), "hello again\n").unwrap();
    std::fs::remove_file(src.join("lib/deep/b.bin")).unwrap();
    std::fs::write(src.join("new file.txt"), "spaces\n").unwrap();
    let before = head(&env, "rem/main");
    let l = local(&["--json", "snapshot", "loc/main", src_s, "-m", "second"]);
    let r = remote(&["--json", "snapshot", "rem/main", src_s, "-m", "second"]);
    assert_eq!((l.0, r.0), (Some(0), Some(0)), "{}\n{}", l.2, r.2);
    let (lj, rj) = (json(&l.1), json(&r.1));
    assert_eq!(keys(&lj), keys(&rj));
    for k in SNAPSHOT_SAME {
        assert_eq!(lj[k], rj[k], "{k}: {lj}\n{rj}");
    }
    let log = env.json(&["log", "rem/main", "-n", "1"]);
    assert_eq!(log[0]["commit"], rj["commit"]);
    assert_eq!(log[0]["message"], "second");
    assert_eq!(log[0]["parents"][0], before.as_str());
    assert_eq!(env.ok(&["cat", "rem/main", "README"]), b"hello again\n");
    assert_eq!(env.ok(&["cat", "rem/main", "new file.txt"]), b"spaces\n");
    let gone = env
        .cmd(&["cat", "rem/main", "lib/deep/b.bin"])
        .output()
        .unwrap();
    assert_eq!(gone.status.code(), Some(1), "removed from the tree");
    // The text form names the branch and its new head, as locally.
    let r = remote(&["snapshot", "rem/main", src_s]);
    assert_eq!(r.0, Some(0), "{}", r.2);
    let text = String::from_utf8_lossy(&r.1).into_owned();
    assert!(
        text.starts_with(&format!("rem/main is now at {}\n", head(&env, "rem/main"))),
        "{text}"
    );

    // export of the same commit: the same files, modes, links and report.
    let (lo, ro) = (env.path("out-local"), env.path("out-remote"));
    let l = local(&["--json", "export", "loc/main", lo.to_str().unwrap()]);
    let r = remote(&["--json", "export", "loc/main", ro.to_str().unwrap()]);
    assert_eq!((l.0, r.0), (Some(0), Some(0)), "{}\n{}", l.2, r.2);
    let (lj, rj) = (json(&l.1), json(&r.1));
    assert_eq!(keys(&lj), keys(&rj));
    for k in [
        "files",
        "dirs",
        "bytes",
        "dropped_privileges",
        "restored_privileges",
    ] {
        assert_eq!(lj[k], rj[k], "{k}: {lj}\n{rj}");
    }
    assert_eq!(lj["commit"], rj["commit"]);
    assert_eq!(tree(&lo), tree(&ro), "the same files");
    use std::os::unix::fs::MetadataExt;
    let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
    assert_eq!(
        ino(&ro.join("lib/a.txt")),
        ino(&ro.join("lib/a-link.txt")),
        "a hard link stays one"
    );
    // The text form, as locally.
    let (lo, ro) = (env.path("text-local"), env.path("text-remote"));
    let l = local(&["export", "loc/main", lo.to_str().unwrap()]);
    let r = remote(&["export", "loc/main", ro.to_str().unwrap()]);
    let tx =
        |o: &Output, d: &Path| String::from_utf8_lossy(&o.1).replace(d.to_str().unwrap(), "DIR");
    assert_eq!(tx(&l, &lo), tx(&r, &ro));
    // What the remote snapshots wrote, exported back.
    let back = env.path("back");
    let r = remote(&["--json", "export", "rem/main", back.to_str().unwrap()]);
    assert_eq!(r.0, Some(0), "{}", r.2);
    assert_eq!(
        std::fs::read(back.join("README")).unwrap(),
        b"hello again\n"
    );
    assert_eq!(
        std::fs::read_link(back.join("latest")).unwrap(),
        Path::new("lib/a.txt")
    );
}

#[test]
fn bad_directories_are_refused_before_anything_is_sent() {
    let env = Env::new();
    env.ok(&["project", "create", "p"]);
    // A server that is not there: any request would fail with "cannot
    // reach"; the refusal must come first, and say what is wrong.
    let gone = format!("unix://{}", env.path("no-server.sock").display());
    let file = env.path("a-file");
    std::fs::write(&file, "x").unwrap();
    let full = env.path("full");
    std::fs::create_dir_all(&full).unwrap();
    std::fs::write(full.join("keep"), "mine").unwrap();
    let (f, d) = (file.to_str().unwrap(), full.to_str().unwrap());
    let missing = env.path("missing");
    let m = missing.to_str().unwrap();
    for (args, needle) in [
        (vec!["snapshot", "p/main", f], "not a directory"),
        (vec!["snapshot", "p/main", m], "missing"),
        (
            vec!["project", "create", "q", "--from", f],
            "not a directory",
        ),
        (vec!["export", "p/main", d], "is not empty"),
        (vec!["export", "p/main", f], "not a directory"),
    ] {
        let local = run(env.cmd(&args));
        let mut c = env.cmd(&["--remote", &gone]);
        c.env("STRATA_TOKEN", "t").args(&args);
        let remote = run(c);
        assert_eq!(remote.0, local.0, "{args:?}: {}\n{}", local.2, remote.2);
        assert_eq!(remote.0, Some(1), "{args:?}: {}", remote.2);
        assert!(remote.2.starts_with("strata: error: "), "{}", remote.2);
        assert!(remote.2.contains(needle), "{args:?}: {}", remote.2);
        assert!(
            !remote.2.contains("cannot reach"),
            "nothing sent: {}",
            remote.2
        );
    }
    assert_eq!(std::fs::read(full.join("keep")).unwrap(), b"mine");
    assert_eq!(std::fs::read_dir(&full).unwrap().count(), 1);
    assert_eq!(std::fs::read(&file).unwrap(), b"x");
}

/// `strata ws …` and `strata exec …` on a Sandbox the server made: the
/// local command (same Sandbox state root) and the remote one agree.
#[test]
fn workspaces_and_execs_through_the_server() {
    require_root();
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("README"), "demo\n").unwrap();
    env.ok(&["project", "create", "p", "--from", src.to_str().unwrap()]);
    let (t, _) = token(&env, &[]);
    let st = SbState::new(&env);
    let s = start(&env, &st);
    let url = url_of(&s);
    let cmd = |remote: bool, args: &[&str], stdin: Option<&[u8]>| {
        let mut c = env.cmd(&[]);
        c.env("STRATA_SANDBOX_STATE", st.dir.path());
        if remote {
            c.env("STRATA_TOKEN", &t).args(["--remote", &url]);
        }
        c.args(args);
        match stdin {
            Some(b) => c.write_stdin(b.to_vec()),
            None => c.write_stdin(Vec::new()),
        };
        run(c)
    };
    let ok = |remote: bool, args: &[&str]| {
        let o = cmd(remote, args, None);
        assert_eq!(o.0, Some(0), "{args:?} (remote {remote}): {}", o.2);
        o.1
    };
    let sb = json(&ok(
        true,
        &["--json", "sandbox", "create", "--label", "t=ws"],
    ))["sandbox"]
        .as_str()
        .unwrap()
        .to_string();
    let m = json(&ok(true, &["--json", "ws", "mount", &sb, "p/main"]));
    let ws = m["workspace"].as_str().unwrap().to_string();
    assert_eq!(
        (m["sandbox"].as_str(), m["branch"].as_str()),
        (Some(sb.as_str()), Some("p/main"))
    );
    assert_eq!(m["base"], head(&env, "p/main").as_str());

    // ws list: the remote row is the local row of the same Workspace.
    let row = |remote: bool| -> Value {
        let l = json(&ok(remote, &["--json", "ws", "list"]));
        let rows: Vec<Value> = l
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["workspace"] == ws.as_str())
            .cloned()
            .collect();
        assert_eq!(rows.len(), 1, "{l}");
        rows[0].clone()
    };
    assert_eq!(row(true), row(false));
    assert_eq!(row(true)["sandbox"], sb.as_str());

    // exec: stdin to EOF, the command's exit code, the same bytes.
    let script = ["exec", &ws, "--", "sh", "-c", "cat; echo err >&2; exit 3"];
    for remote in [false, true] {
        let o = cmd(remote, &script, Some(b"through stdin\0\xff\n"));
        assert_eq!(o.0, Some(3), "remote {remote}: {}", o.2);
        assert_eq!(o.1, b"through stdin\0\xff\n", "remote {remote}");
        assert_eq!(o.2, "err\n", "remote {remote}");
    }
    // --json: the status on stderr, the same shape and values.
    let status = |remote: bool, argv: &[&str]| -> (Option<i32>, Value) {
        let mut a = vec!["--json", "exec", &ws, "--"];
        a.extend_from_slice(argv);
        let o = cmd(remote, &a, None);
        let mut v = json(o.2.trim().as_bytes());
        assert!(v["exec"].as_str().unwrap().len() > 4, "{v}");
        v["exec"] = Value::Null;
        (o.0, v)
    };
    for argv in [&["sh", "-c", "exit 7"][..], &["sh", "-c", "kill -TERM $$"]] {
        let (l, r) = (status(false, argv), status(true, argv));
        assert_eq!(l, r, "{argv:?}");
    }
    assert_eq!(status(true, &["sh", "-c", "kill -TERM $$"]).0, Some(143));
    // An unknown Workspace is strata's failure: 125 both ways.
    for remote in [false, true] {
        let o = cmd(remote, &["exec", "ws-nosuch", "--", "true"], None);
        assert_eq!(o.0, Some(125), "remote {remote}: {}", o.2);
        assert!(o.2.contains("ws-nosuch"), "{}", o.2);
    }

    // exec --detach, logs, wait (both see the exec), cancel.
    let d = json(&ok(
        true,
        &[
            "--json",
            "exec",
            "--detach",
            &ws,
            "--",
            "sh",
            "-c",
            "echo hi; exit 4",
        ],
    ));
    let id = d["exec"].as_str().unwrap().to_string();
    assert_eq!(ok(true, &["exec", "logs", "--follow", &id]), b"hi\n");
    let w = |remote: bool, id: &str| {
        let o = cmd(remote, &["--json", "exec", "wait", id], None);
        (o.0, json(&o.1))
    };
    let (l, r) = (w(false, &id), w(true, &id));
    assert_eq!(l, r);
    assert_eq!((r.0, r.1["code"].as_i64()), (Some(4), Some(4)));
    let d = json(&ok(
        true,
        &["--json", "exec", "--detach", &ws, "--", "sleep", "1000"],
    ));
    let id = d["exec"].as_str().unwrap().to_string();
    let c = json(&ok(true, &["--json", "exec", "cancel", &id]));
    assert_eq!(
        (c["cancelled"].as_bool(), c["exec"].as_str()),
        (Some(true), Some(id.as_str()))
    );
    let (l, r) = (w(false, &id), w(true, &id));
    assert_eq!(l, r, "the local command sees the same end");
    assert_eq!(r.1["signal_name"], "SIGTERM", "{}", r.1);

    // ws status (text and JSON), commit, read back from the Store.
    ok(
        true,
        &["exec", &ws, "--", "sh", "-c", "echo made > made.txt"],
    );
    for a in [&["ws", "status", &ws][..], &["--json", "ws", "status", &ws]] {
        let (l, r) = (ok(false, a), ok(true, a));
        assert_eq!(
            String::from_utf8_lossy(&l),
            String::from_utf8_lossy(&r),
            "{a:?}"
        );
        assert!(String::from_utf8_lossy(&r).contains("made.txt"));
    }
    let c = json(&ok(
        true,
        &["--json", "ws", "commit", &ws, "-m", "via remote"],
    ));
    assert_eq!(
        (c["committed"].as_bool(), c["branch"].as_str()),
        (Some(true), Some("p/main"))
    );
    assert_eq!(c["commit"], head(&env, "p/main").as_str());
    assert_eq!(env.ok(&["cat", "p/main", "made.txt"]), b"made\n");
    assert_eq!(
        env.json(&["log", "p/main", "-n", "1"])[0]["message"],
        "via remote"
    );
    let c = json(&ok(true, &["--json", "ws", "commit", &ws, "-m", "again"]));
    assert_eq!(c["committed"], false, "nothing left to commit: {c}");

    // unmount: gone from both lists; an unknown ID is an error both ways.
    let u = json(&ok(true, &["--json", "ws", "unmount", &ws]));
    assert_eq!(u["unmounted"], true);
    for remote in [false, true] {
        let l = json(&ok(remote, &["--json", "ws", "list"]));
        assert!(!l.to_string().contains(&ws), "{l}");
        let o = cmd(remote, &["ws", "status", &ws], None);
        assert_eq!(o.0, Some(1), "remote {remote}: {}", o.2);
        assert!(o.2.contains("strata ws list"), "{}", o.2);
    }
    ok(true, &["sandbox", "rm", &sb]);
}
