//! `strata sandbox ...`, `strata ws ...` on Sandbox Workspaces, `strata
//! exec` and `strata probe` through the real binary (root with /dev/fuse
//! and namespaces; CI runs as root). Detached execs, --tty, Ctrl-C and
//! rootfs are in `sandbox_exec.rs`; the fixture in `common/sb.rs`.

mod common;

use common::sb::{text, Rm, Sb};
use common::write;

#[test]
fn sandbox_create_list_mount_exec_commit_rm() {
    let sb = Sb::new();
    let src = sb.env.path("src");
    write(&src, "hello.txt", b"hello\n");
    sb.ok(&["project", "create", "p", "--from", src.to_str().unwrap()]);

    let created = sb.json(&[
        "sandbox",
        "create",
        "--name",
        "cli-test-a",
        "--label",
        "suite=cli-sandbox",
        "--pids",
        "256",
        "--memory",
        "512M",
    ]);
    let id = created["sandbox"].as_str().expect("sandbox id").to_string();
    let _rm = Rm(&sb, id.clone());

    // List by label and by prefix; a non-matching label lists nothing.
    let list = sb.json(&["sandbox", "list", "--label", "suite=cli-sandbox"]);
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![id.as_str()], "{list}");
    let list = sb.json(&["sandbox", "list", "--prefix", "cli-test"]);
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    let list = sb.json(&["sandbox", "list", "--label", "suite=other"]);
    assert_eq!(list.as_array().unwrap().len(), 0, "{list}");
    let listed = text(&sb.ok(&["sandbox", "list"]));
    assert!(listed.contains(&id), "{listed}");

    let inspect = sb.json(&["sandbox", "inspect", &id]);
    assert_eq!(inspect["running"], true, "{inspect}");
    assert_eq!(inspect["name"], "cli-test-a", "{inspect}");

    // Mount a branch.
    sb.ok(&["branch", "create", "p/agent"]);
    let m = sb.json(&["ws", "mount", &id, "p/agent"]);
    let ws = m["workspace"].as_str().expect("workspace id").to_string();
    assert_eq!(m["path"], "/workspace", "{m}");

    // Separate streams, exit code, uid.
    let out = sb.run(
        &[
            "exec",
            &ws,
            "--no-stdin",
            "--",
            "sh",
            "-c",
            "id -u; echo out; echo err >&2; exit 42",
        ],
        None,
    );
    assert_eq!(
        out.status.code(),
        Some(42),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1500\nout\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err\n");

    // A signal comes back as 128+N.
    let out = sb.run(&["exec", &ws, "--", "sh", "-c", "kill -9 $$"], None);
    assert_eq!(out.status.code(), Some(137));

    // --env, --cwd and the file the command writes.
    sb.ok(&["exec", &ws, "--", "mkdir", "d"]);
    let out = sb.ok(&[
        "exec",
        &ws,
        "--env",
        "GREETING=hi there",
        "--cwd",
        "/workspace/d",
        "--",
        "sh",
        "-c",
        "echo \"$GREETING\" > f.txt; pwd",
    ]);
    assert_eq!(String::from_utf8_lossy(&out), "/workspace/d\n");

    // stdin reaches the command, and its EOF ends it.
    let data: Vec<u8> = (0..200_000u32).flat_map(|i| i.to_le_bytes()).collect();
    let out = sb.run(&["exec", &ws, "--", "cat"], Some(&data));
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stdout.len(), data.len());
    assert!(out.stdout == data, "cat echoed different bytes");
    // --no-stdin: EOF at once.
    let out = sb.run(&["exec", &ws, "--no-stdin", "--", "wc", "-c"], None);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0");

    // A command that cannot start is strata's failure (125), not 127.
    let out = sb.run(&["exec", &ws, "--", "/no/such/binary"], None);
    assert_eq!(out.status.code(), Some(125), "{out:?}");

    // Status, commit, read back from the Store.
    let st = sb.json(&["ws", "status", &ws]);
    assert_eq!(st["sandbox"], id.as_str(), "{st}");
    assert!(
        st["changes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["path"] == "d/f.txt" && c["kind"] == "added"),
        "{st}"
    );
    // Unmount and rm refuse to drop uncommitted work...
    let out = sb.run(&["ws", "unmount", &ws], None);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        text(&out.stderr).contains("uncommitted"),
        "{}",
        text(&out.stderr)
    );
    let out = sb.run(&["sandbox", "rm", &id], None);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains(&ws), "{}", text(&out.stderr));
    // ...and the work is still there to commit.
    let c = sb.json(&["ws", "commit", &ws, "-m", "from the sandbox"]);
    assert_eq!(c["committed"], true, "{c}");
    assert_eq!(c["branch"], "p/agent", "{c}");
    let head = String::from_utf8(sb.ok(&["--json", "log", "p/agent", "-n", "1"])).unwrap();
    assert!(head.contains(c["commit"].as_str().unwrap()), "{head}");
    let cat = sb.ok(&["cat", "p/agent", "d/f.txt"]);
    assert_eq!(cat, b"hi there\n");
    assert_eq!(sb.ok(&["cat", "p/agent", "hello.txt"]), b"hello\n");
    // Owned by the command's uid in the committed tree.
    let ls = sb.json(&["ls", "p/agent", "d"]);
    assert_eq!(ls[0]["name"], "f.txt", "{ls}");
    assert_eq!(ls[0]["uid"], 1500, "{ls}");
    assert_eq!(ls[0]["gid"], 1500, "{ls}");
    let c = sb.json(&["ws", "commit", &ws, "-m", "nothing new"]);
    assert_eq!(c["committed"], false, "{c}");

    let logs = sb.ok(&["sandbox", "logs", &id, "--tail", "20"]);
    assert!(!logs.is_empty(), "empty daemon log");

    let wl = sb.json(&["ws", "list"]);
    assert!(
        wl.as_array()
            .unwrap()
            .iter()
            .any(|w| w["workspace"] == ws.as_str() && w["sandbox"] == id.as_str()),
        "{wl}"
    );
    let u = sb.json(&["ws", "unmount", &ws]);
    assert_eq!(u["unmounted"], true, "{u}");
    let rm = sb.json(&["sandbox", "rm", &id]);
    assert_eq!(rm["removed"], id.as_str());
    let list = sb.json(&["sandbox", "list"]);
    assert_eq!(list.as_array().unwrap().len(), 0, "{list}");
    let out = sb.run(&["sandbox", "inspect", &id], None);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        text(&out.stderr).contains("not found"),
        "{}",
        text(&out.stderr)
    );
    // A Workspace of a closed Sandbox: a clear error, and 125 for exec.
    let out = sb.run(&["ws", "status", &ws], None);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        text(&out.stderr).contains("no Workspace"),
        "{}",
        text(&out.stderr)
    );
    let out = sb.run(&["exec", &ws, "--", "true"], None);
    assert_eq!(out.status.code(), Some(125), "{out:?}");

    let fsck = sb.json(&["fsck"]);
    assert_eq!(fsck["ok"], true, "{fsck}");
}

#[test]
fn probe_prints_key_value_lines_and_json() {
    let sb = Sb::new();
    let text = String::from_utf8(sb.ok(&["probe"])).unwrap();
    let keys: Vec<&str> = text
        .lines()
        .map(|l| {
            let (k, _) = l
                .split_once('=')
                .unwrap_or_else(|| panic!("not KEY=VALUE: {l}"));
            k
        })
        .collect();
    for k in [
        "kernel",
        "dev_fuse",
        "fuse_filesystem",
        "euid",
        "capeff",
        "user_namespaces",
        "cgroup",
        "rcu_expedited",
        "dev_kvm",
        "rootless",
        "fuse_passthrough",
        "store_fs",
        "tmp_fs",
        "allow_other_mount",
        "privilege_split",
        "fuse_io_uring",
        "fuse_transport",
        "fuse_io_uring_live",
    ] {
        assert!(keys.contains(&k), "no {k} in:\n{text}");
    }
    // Where FUSE io_uring is usable (CI turns it on), the live check
    // registered the rings and served requests through them.
    if text.contains("\nfuse_io_uring=usable") {
        assert!(text.contains("\nfuse_io_uring_live=registered: "), "{text}");
    }
    assert!(text.contains("euid=0\n"), "{text}");
    // The live check ran (root, /dev/fuse) and the split holds.
    assert!(text.contains("\nallow_other_mount=yes"), "{text}");
    assert!(
        text.contains("\nprivilege_split=holds: uid 1500:1500, CapEff=0000000000000000"),
        "{text}"
    );
    // This kernel (6.18) and a root server: passthrough is on.
    assert!(text.contains("\nfuse_passthrough=on"), "{text}");
    let skipped = String::from_utf8(sb.ok(&["probe", "--no-self-check"])).unwrap();
    assert!(!skipped.contains("privilege_split"), "{skipped}");
    assert!(!skipped.contains("fuse_io_uring_live"), "{skipped}");
    let j = sb.json(&["probe"]);
    assert_eq!(j["euid"], "0", "{j}");
    assert_eq!(j["dev_fuse"], "present", "{j}");
}

/// Two Sandboxes at once (docs/design.md §3), through the CLI: each command sees its
/// own Workspace at /workspace and nothing of the other's, the host sees
/// neither mount, the Store is hidden from commands, and each Sandbox's
/// commit lands on its own branch with files owned by 1500:1500.
#[test]
fn two_sandboxes_each_see_only_their_own_workspace() {
    let sb = Sb::with_project(&[("base.txt", b"base\n")]);
    sb.ok(&["branch", "create", "p/a"]);
    sb.ok(&["branch", "create", "p/b"]);
    let (ida, idb) = (sb.create(&[]), sb.create(&[]));
    let (_ra, _rb) = (Rm(&sb, ida.clone()), Rm(&sb, idb.clone()));
    let (wa, wb) = (sb.mount(&ida, "p/a"), sb.mount(&idb, "p/b"));
    assert_ne!(wa, wb);

    for (ws, name) in [(&wa, "from-a"), (&wb, "from-b")] {
        let out = sb.sh(
            ws,
            &format!("echo {name} > /workspace/{name}.txt && ls /workspace"),
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let la = text(&sb.sh(&wa, "ls -A /workspace").stdout);
    let lb = text(&sb.sh(&wb, "ls -A /workspace").stdout);
    assert_eq!(la, "base.txt\nfrom-a.txt\n");
    assert_eq!(lb, "base.txt\nfrom-b.txt\n");
    // No other strata mount is visible inside a Sandbox; the host sees none.
    let ma = text(&sb.sh(&wa, "grep -c 'strata:' /proc/self/mounts").stdout);
    assert_eq!(ma.trim(), "1", "Sandbox A sees more than its own mount");
    let host = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(!host.contains(&format!("strata:{wa}")) && !host.contains(&format!("strata:{wb}")));
    // The Store is not reachable from a command.
    let store = sb.env.store.to_str().unwrap().to_string();
    let out = sb.sh(
        &wa,
        &format!("ls -A {store}; cat {store}/* 2>&1 | head -c 100"),
    );
    assert!(
        !text(&out.stdout).contains("SQLite"),
        "{}",
        text(&out.stdout)
    );
    // Privileges of the command.
    let st = text(
        &sb.sh(
            &wb,
            "grep -E '^(Uid|CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status",
        )
        .stdout,
    );
    for want in [
        "Uid:\t1500",
        "CapEff:\t0000000000000000",
        "CapBnd:\t0000000000000000",
        "NoNewPrivs:\t1",
        "Seccomp:\t2",
    ] {
        assert!(st.contains(want), "{want} not in {st}");
    }
    for probe in [
        "umount /workspace",
        "umount -l /workspace",
        "unshare -U true",
        "unshare -Urm true",
    ] {
        let out = sb.sh(&wa, probe);
        assert_ne!(out.status.code(), Some(0), "{probe} succeeded in a Sandbox");
    }

    for ws in [&wa, &wb] {
        let c = sb.json(&["ws", "commit", ws, "-m", "work"]);
        assert_eq!(c["committed"], true, "{c}");
    }
    assert_eq!(sb.ok(&["cat", "p/a", "from-a.txt"]), b"from-a\n");
    assert_eq!(sb.ok(&["cat", "p/b", "from-b.txt"]), b"from-b\n");
    let diff = sb.json(&["diff", "p/a", "p/b"]);
    assert_eq!(diff["changes"].as_array().unwrap().len(), 2, "{diff}");
    for (br, f) in [("p/a", "from-a.txt"), ("p/b", "from-b.txt")] {
        let e = sb.json(&["ls", br, f]);
        let e = if e.is_array() { e[0].clone() } else { e };
        assert_eq!(
            (e["uid"].as_u64(), e["gid"].as_u64()),
            (Some(1500), Some(1500)),
            "{e}"
        );
    }
    for id in [&ida, &idb] {
        sb.ok(&["sandbox", "rm", id]);
    }
    let fsck = sb.json(&["fsck"]);
    assert_eq!(fsck["ok"], true, "{fsck}");
    assert_eq!(sb.ok(&["cat", "p/a", "from-a.txt"]), b"from-a\n");
}

/// A commit that lost the race says which head won and how to go on, and
/// publishes nothing; the winner's commit is what the branch holds.
#[test]
fn a_lost_commit_race_prints_the_actual_head_and_what_to_do() {
    let sb = Sb::with_project(&[("f.txt", b"base\n")]);
    let id = sb.create(&[]);
    let _rm = Rm(&sb, id.clone());
    let w1 = sb.mount(&id, "p/main");
    let m2 = sb.json(&["ws", "mount", &id, "p/main", "--at", "/tmp/second"]);
    let w2 = m2["workspace"].as_str().unwrap().to_string();
    assert_eq!(m2["path"], "/tmp/second", "{m2}");
    assert!(sb.sh(&w1, "echo one > /workspace/g.txt").status.success());
    assert!(sb.sh(&w2, "echo two > /tmp/second/g.txt").status.success());
    let won = sb.json(&["ws", "commit", &w1, "-m", "first"]);
    let head = won["commit"].as_str().unwrap().to_string();
    let out = sb.run(&["ws", "commit", &w2, "-m", "second"], None);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = text(&out.stderr);
    assert!(err.contains(&head), "no actual head in: {err}");
    assert!(
        err.contains(&format!("strata ws unmount {w2} --discard"))
            && err.contains(&format!("strata ws mount {id} p/main")),
        "no way forward in: {err}"
    );
    assert_eq!(sb.ok(&["cat", "p/main", "g.txt"]), b"one\n");
    // The loser still holds its work until it is discarded.
    let st = sb.json(&["ws", "status", &w2]);
    assert_eq!(st["changes"][0]["path"], "g.txt", "{st}");
    sb.ok(&["ws", "unmount", &w2, "--discard"]);
    sb.ok(&["ws", "unmount", &w1]);
}

/// `strata sandbox restart` after the daemon was killed: the Workspace
/// comes back under its ID with its uncommitted file, which commits; a
/// running Sandbox is refused.
#[test]
fn sandbox_restart_brings_back_a_killed_daemons_workspace() {
    let sb = Sb::with_project(&[("f.txt", b"base\n")]);
    let id = sb.create(&[]);
    let _rm = Rm(&sb, id.clone());
    let ws = sb.mount(&id, "p/main");
    assert!(sb.sh(&ws, "echo kept > kept.txt").status.success());
    let out = sb.run(&["sandbox", "restart", &id], None);
    assert_eq!(out.status.code(), Some(1), "restart while running: {out:?}");
    assert!(
        text(&out.stderr).contains("restart"),
        "{}",
        text(&out.stderr)
    );

    sb.kill9_daemon(&id);
    let out = sb.run(&["ws", "status", &ws], None);
    assert!(!out.status.success(), "a dead daemon answered: {out:?}");

    let r = sb.json(&["sandbox", "restart", &id]);
    assert_eq!(r["sandbox"], id.as_str(), "{r}");
    assert_eq!(r["workspaces"][0]["workspace"], ws.as_str(), "{r}");
    assert_eq!(r["workspaces"][0]["path"], "/workspace", "{r}");
    assert_eq!(r["unrecovered"], serde_json::json!([]), "{r}");
    let st = sb.json(&["ws", "status", &ws]);
    assert!(
        st["changes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["path"] == "kept.txt" && c["kind"] == "added"),
        "{st}"
    );
    assert_eq!(
        sb.ok(&["exec", &ws, "--no-stdin", "--", "cat", "kept.txt"]),
        b"kept\n"
    );
    let c = sb.json(&["ws", "commit", &ws, "-m", "after restart"]);
    assert_eq!(c["committed"], true, "{c}");
    assert_eq!(sb.ok(&["cat", "p/main", "kept.txt"]), b"kept\n");
    assert_eq!(sb.ok(&["cat", "p/main", "f.txt"]), b"base\n");
    sb.ok(&["ws", "unmount", &ws]);
}
