//! `strata exec` beyond the basics, through the real binary (root with
//! /dev/fuse; CI runs as root): detached execs with `exec logs|wait|cancel`
//! (and the `exec-*` spellings), `--tty`, Ctrl-C, `--rootfs` (a rootfs that
//! lacks the program is an error, never a guessed 127), `--cpu`, and the
//! default limits with `--no-limits`.

mod common;

use common::sb::{text, Rm, Sb};
use std::process::Stdio;
use std::time::{Duration, Instant};

fn exec_id(sb: &Sb, ws: &str, script: &str) -> String {
    let v = sb.json(&["exec", "--detach", ws, "--", "sh", "-c", script]);
    v["exec"].as_str().expect("exec id").to_string()
}

#[test]
fn detached_exec_logs_wait_and_cancel() {
    let sb = Sb::with_project(&[("a.txt", b"a\n")]);
    let id = sb.create(&[]);
    let _rm = Rm(&sb, id.clone());
    let ws = sb.mount(&id, "p/main");

    // --detach returns at once; the output waits in the daemon.
    let t = Instant::now();
    let ex = exec_id(
        &sb,
        &ws,
        "echo one; echo err >&2; sleep 0.5; echo two > /workspace/two.txt; echo two; exit 7",
    );
    assert!(t.elapsed() < Duration::from_secs(5));
    let out = sb.run(&["exec", "logs", "--follow", &ex], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "one\ntwo\n");
    assert_eq!(text(&out.stderr), "err\n");
    // wait: the command's code, as text and as JSON.
    let out = sb.run(&["exec", "wait", &ex], None);
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("exited with code 7"),
        "{}",
        text(&out.stdout)
    );
    let out = sb.run(&["--json", "exec-wait", &ex], None);
    assert_eq!(out.status.code(), Some(7));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["exec"].as_str(), v["code"].as_i64()),
        (Some(ex.as_str()), Some(7)),
        "{v}"
    );
    // What it wrote is in the Workspace.
    let st = sb.json(&["ws", "status", &ws]);
    assert_eq!(st["changes"][0]["path"], "two.txt", "{st}");

    // logs without --follow: what is buffered now, then return.
    let ex = exec_id(&sb, &ws, "echo early; sleep 1000");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = String::new();
    while !got.contains("early") && Instant::now() < deadline {
        let out = sb.run(&["exec-logs", &ex], None);
        assert!(out.status.success(), "{}", text(&out.stderr));
        got.push_str(&text(&out.stdout));
    }
    assert_eq!(got, "early\n");

    // cancel ends `sleep 1000` within a second and reports the signal.
    let t = Instant::now();
    let c = sb.json(&["exec", "cancel", &ex]);
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "cancel took {:?}",
        t.elapsed()
    );
    assert_eq!(c["signal_name"], "SIGTERM", "{c}");
    assert_eq!(c["cancelled"], true, "{c}");
    let out = sb.run(&["exec-cancel", &ex], None);
    assert!(
        out.status.success(),
        "cancelling an ended exec: {}",
        text(&out.stderr)
    );
    let out = sb.run(&["exec", "wait", &ex], None);
    assert_eq!(out.status.code(), Some(128 + 15));

    // --timeout takes a unit; the command is cancelled (SIGTERM: 143).
    let t = Instant::now();
    let out = sb.run(
        &[
            "exec",
            "--timeout",
            "300ms",
            &ws,
            "--no-stdin",
            "--",
            "sleep",
            "10",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(143), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("timed out"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );

    // Unknown exec IDs are strata's failure (125), never a status.
    let out = sb.run(&["exec", "wait", "x0000000000000000"], None);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(
        text(&out.stderr).contains("not found"),
        "{}",
        text(&out.stderr)
    );
    sb.ok(&["ws", "unmount", "--discard", &ws]);
}

#[test]
fn tty_gives_the_command_a_terminal() {
    let sb = Sb::with_project(&[("a.txt", b"a\n")]);
    let id = sb.create(&[]);
    let _rm = Rm(&sb, id.clone());
    let ws = sb.mount(&id, "p/main");
    // stdin is a pipe here (no raw mode on our side); the command still
    // gets a PTY, reads what we send and sees EOF (^D) when we close.
    let out = sb.run(
        &[
            "exec",
            "--tty",
            &ws,
            "--",
            "sh",
            "-c",
            "test -t 0 && test -t 1 && echo tty; read l; echo got $l",
        ],
        Some(b"line\n"),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let o = text(&out.stdout);
    assert!(o.contains("tty\r\n"), "{o:?}");
    assert!(o.contains("got line"), "{o:?}");
    // Without --tty there is no terminal.
    let out = sb.sh(&ws, "test -t 1 && echo tty || echo notty");
    assert_eq!(text(&out.stdout), "notty\n");
}

#[test]
fn ctrl_c_cancels_the_exec_and_exits_130() {
    let sb = Sb::with_project(&[("a.txt", b"a\n")]);
    let id = sb.create(&[]);
    let _rm = Rm(&sb, id.clone());
    let ws = sb.mount(&id, "p/main");
    let mut child = sb.cmd(&[
        "exec",
        &ws,
        "--",
        "sh",
        "-c",
        "echo started; exec sleep 1000",
    ]);
    let mut child = child
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the command runs (its output arrived), then Ctrl-C.
    let mut stdout = child.stdout.take().unwrap();
    let mut buf = [0u8; 8];
    use std::io::Read;
    let n = stdout.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"started\n");
    let t = Instant::now();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("cancelled"),
        "{}",
        text(&out.stderr)
    );
    // The sleep is gone from the Sandbox (only this ps runs there).
    let ps = text(&sb.sh(&ws, "ls /proc | grep -c '^[0-9]'").stdout);
    let left = text(
        &sb.sh(&ws, "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '")
            .stdout,
    );
    assert!(
        !left.contains("sleep 1000"),
        "still running: {left} ({ps} pids)"
    );
}

/// A minimal root filesystem: dash and the shared libraries it and the
/// strata binary need (the daemon runs inside the rootfs too; a static
/// build would need none), nothing else.
fn tiny_rootfs(dir: &std::path::Path) {
    let sh = std::fs::canonicalize("/bin/sh").unwrap();
    let mut files = vec![sh.clone()];
    for exe in [sh.as_path(), std::path::Path::new(common::BIN)] {
        let ldd = std::process::Command::new("ldd").arg(exe).output().unwrap();
        for l in text(&ldd.stdout).lines() {
            if let Some(p) = l.split_whitespace().find(|w| w.starts_with('/')) {
                files.push(p.into());
            }
        }
    }
    for f in files {
        let dst = dir.join(f.strip_prefix("/").unwrap());
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(&f, &dst).unwrap();
    }
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    if !bin.join("sh").exists() {
        std::os::unix::fs::symlink(&sh, bin.join("sh")).unwrap();
    }
    for d in ["usr/lib", "lib64"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
}

#[test]
fn rootfs_and_cpu_limit() {
    let sb = Sb::with_project(&[("a.txt", b"a\n")]);
    let root = tempfile::Builder::new()
        .prefix("strata-cli-rootfs-")
        .tempdir_in("/var/tmp")
        .unwrap();
    tiny_rootfs(root.path());
    let id = sb.create(&["--rootfs", root.path().to_str().unwrap(), "--cpu", "0.5"]);
    let _rm = Rm(&sb, id.clone());
    let inspect = sb.json(&["sandbox", "inspect", &id]);
    assert_eq!(inspect["config"]["limits"]["cpu_millis"], 500, "{inspect}");
    let ws = sb.mount(&id, "p/main");
    // The shell of the rootfs runs; the host's programs are not there.
    let out = sb.run(
        &[
            "exec",
            &ws,
            "--no-stdin",
            "--",
            "/bin/sh",
            "-c",
            "echo hi > /workspace/hi.txt; test -e /usr/bin/ls || echo no-ls",
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "no-ls\n");
    // A program the rootfs lacks is strata's error (ENOENT), not exit 127.
    let out = sb.run(&["exec", &ws, "--no-stdin", "--", "ls", "/"], None);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(
        text(&out.stderr).contains("ENOENT"),
        "{}",
        text(&out.stderr)
    );
    let c = sb.json(&["ws", "commit", &ws, "-m", "from a rootfs"]);
    assert_eq!(c["committed"], true, "{c}");
    assert_eq!(sb.ok(&["cat", "p/main", "hi.txt"]), b"hi\n");
}

/// Half of this host's RAM in whole MiB, as the default memory limit.
fn half_of_ram() -> u64 {
    let kb: u64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    let half = kb * 1024 / 2;
    half - half % (1 << 20)
}

#[test]
fn default_limits_are_recorded_and_no_limits_opts_out() {
    let sb = Sb::with_project(&[("a.txt", b"a\n")]);
    // No flag: the defaults, as applied.
    let id = sb.create(&[]);
    let _rm = Rm(&sb, id.clone());
    let limits = &sb.json(&["sandbox", "inspect", &id])["config"]["limits"];
    assert_eq!(limits["memory_bytes"], half_of_ram(), "{limits}");
    assert_eq!(limits["pids"], 4096, "{limits}");
    assert!(limits["cpu_millis"].is_null(), "{limits}");
    // One flag overrides its limit only.
    let id2 = sb.create(&["--pids", "300"]);
    let _rm2 = Rm(&sb, id2.clone());
    let limits = &sb.json(&["sandbox", "inspect", &id2])["config"]["limits"];
    assert_eq!(limits["pids"], 300, "{limits}");
    assert_eq!(limits["memory_bytes"], half_of_ram(), "{limits}");
    // --no-limits: none.
    let id3 = sb.create(&["--no-limits"]);
    let _rm3 = Rm(&sb, id3.clone());
    let config = &sb.json(&["sandbox", "inspect", &id3])["config"];
    assert_eq!(config["no_limits"], true, "{config}");
    for k in ["memory_bytes", "pids", "cpu_millis"] {
        assert!(config["limits"][k].is_null(), "{config}");
    }
    // ... and it says so against a limit flag, as a usage error.
    let out = sb.run(
        &["sandbox", "create", "--no-limits", "--memory", "1G"],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--no-limits"),
        "{}",
        text(&out.stderr)
    );
}
