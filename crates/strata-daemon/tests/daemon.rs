//! The daemon end to end: a real daemon process (root) on a temp Unix
//! socket, a real Store, real Workspace mounts (allow_other), commands run
//! through the strata-sandbox exec helper as uid 1500.

mod common;
use common::*;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::time::{Duration, Instant};

#[test]
fn marker_socket_mode_and_token() {
    let d = Daemon::start();
    let pid = d.child.id();
    assert_eq!(
        d.marker,
        format!(
            "STRATA-DAEMON-READY socket={} pid={pid}",
            d.socket.display()
        )
    );
    let meta = std::fs::metadata(&d.socket).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.mode() & 0o777, 0o600, "socket must be 0600");

    // Right token: 200.
    let r = d.req("GET", "/v1/health", None);
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["status"], "ok");
    // Missing, wrong, wrong-length, wrong-scheme tokens: a bare 401.
    let wrong = "0".repeat(64);
    for tok in [None, Some(wrong.as_str()), Some("abc"), Some("")] {
        let r = raw_request(&d.socket, "GET", "/v1/health", tok, None, "");
        assert_eq!(r.status, 401, "token {tok:?}");
        assert!(r.body.is_empty(), "401 must carry nothing: {}", r.text());
    }
    // Even an unknown route or a real operation is 401 first.
    let r = raw_request(
        &d.socket,
        "POST",
        "/v1/execs",
        Some(&wrong),
        Some(b"{}"),
        "application/json",
    );
    assert_eq!(r.status, 401);
    // Log tail works and holds the marker.
    let r = d.req("GET", "/v1/logs?tail=50", None);
    assert_eq!(r.status, 200);
    assert!(r.text().contains("STRATA-DAEMON-READY"), "{}", r.text());
}

#[test]
fn exec_privileges_write_commit_and_read_back() {
    let d = Daemon::start();
    let (ws, path) = d.mount("a");
    // The mount is FUSE with allow_other.
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let line = mounts
        .lines()
        .find(|l| l.split(' ').nth(1) == Some(path.as_str()))
        .unwrap_or_else(|| panic!("{path} not mounted: {mounts}"));
    assert!(line.contains("fuse"), "{line}");
    assert!(line.contains("allow_other"), "{line}");

    let o = d.run(&["sh", "-c", "id -u; id -g; cat /proc/self/status; pwd"]);
    assert_eq!(o.code(), Some(0), "stderr: {}", o.err());
    let out = o.out();
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("1500"));
    assert_eq!(lines.next(), Some("1500"));
    for want in [
        "CapEff:\t0000000000000000",
        "CapBnd:\t0000000000000000",
        "CapAmb:\t0000000000000000",
        "NoNewPrivs:\t1",
        "Seccomp:\t2",
    ] {
        assert!(
            out.lines().any(|l| l == want),
            "{want:?} missing in:\n{out}"
        );
    }
    assert!(
        out.lines().any(|l| l == path),
        "cwd is not the mount: {out}"
    );

    // Write through an exec; the file belongs to 1500:1500.
    let o = d.run(&[
        "sh",
        "-c",
        "printf 'made by exec\\n' > new.txt && mkdir -p sub && echo x > sub/y",
    ]);
    assert_eq!(o.code(), Some(0), "{}", o.err());
    let meta = std::fs::metadata(format!("{path}/new.txt")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (1500, 1500));

    // Status lists the changes.
    let r = d.req("GET", &format!("/v1/workspaces/{ws}/status"), None);
    assert_eq!(r.status, 200, "{}", r.text());
    let st = r.json();
    let paths: Vec<&str> = st["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert!(paths.contains(&"new.txt"), "{st}");

    // Commit and read the bytes back from the Store (not trusting the API).
    let r = d.req(
        "POST",
        &format!("/v1/workspaces/{ws}/commit"),
        Some(&serde_json::json!({"message": "from exec"})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let c = r.json();
    assert_eq!(c["outcome"], "committed");
    let store = d.store();
    let head = store
        .branch_head(&strata_store::BranchRef::parse("p/main").unwrap())
        .unwrap();
    assert_eq!(head.to_hex(), c["commit"].as_str().unwrap());
    let e = store
        .read_path(head, b"new.txt")
        .unwrap()
        .expect("new.txt in the commit");
    assert_eq!((e.uid, e.gid), (1500, 1500));
    let strata_store::EntryKind::File(fc) = &e.kind else {
        panic!("not a file")
    };
    assert_eq!(
        store.read_file_range(fc, 0, 100).unwrap(),
        b"made by exec\n"
    );
    // A second commit with nothing changed is up to date.
    let r = d.req(
        "POST",
        &format!("/v1/workspaces/{ws}/commit"),
        Some(&serde_json::json!({"message": "again"})),
    );
    assert_eq!(r.json()["outcome"], "up_to_date");

    // Unmount (discard): gone from the mount table, 404 afterwards.
    let r = d.req(
        "POST",
        &format!("/v1/workspaces/{ws}/unmount"),
        Some(&serde_json::json!({"discard": true})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(!mounts
        .lines()
        .any(|l| l.split(' ').nth(1) == Some(path.as_str())));
    let r = d.req("GET", &format!("/v1/workspaces/{ws}/status"), None);
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["code"], "not_found");
}

#[test]
fn exit_codes_streams_and_stdin() {
    let d = Daemon::start();
    d.mount("b");
    for code in [0, 1, 42] {
        let o = d.run(&["sh", "-c", &format!("exit {code}")]);
        assert_eq!(o.code(), Some(code));
        assert!(o.exit.as_ref().unwrap().signal.is_none());
    }
    // Separate, ordered streams.
    let o = d.run(&[
        "sh",
        "-c",
        "for i in 1 2 3 4 5; do echo out-$i; echo err-$i >&2; done",
    ]);
    assert_eq!(o.out(), "out-1\nout-2\nout-3\nout-4\nout-5\n");
    assert_eq!(o.err(), "err-1\nerr-2\nerr-3\nerr-4\nerr-5\n");

    // stdin given at create, then EOF.
    let id = d.exec(serde_json::json!({"argv": ["cat"], "stdin_data": "aGVsbG8gc3RkaW4K"}));
    let o = d.output(&id);
    assert_eq!(o.out(), "hello stdin\n");
    assert_eq!(o.code(), Some(0));

    // stdin written in pieces over the API, then closed: cat ends on EOF.
    let id = d.exec(serde_json::json!({"argv": ["sh", "-c", "cat; echo done"], "stdin": true}));
    let r = d.req_bytes("POST", &format!("/v1/execs/{id}/stdin"), b"one\n");
    assert_eq!(r.status, 200, "{}", r.text());
    let r = d.req_bytes("POST", &format!("/v1/execs/{id}/stdin"), b"two\n");
    assert_eq!(r.json()["written"], 4);
    let r = d.req("POST", &format!("/v1/execs/{id}/stdin/close"), None);
    assert_eq!(r.status, 200);
    let o = d.output(&id);
    assert_eq!(o.out(), "one\ntwo\ndone\n");
    // Status and wait after the end.
    let r = d.req("GET", &format!("/v1/execs/{id}/wait"), None);
    assert_eq!(r.json()["state"], "exited");
    assert_eq!(r.json()["exit"]["code"], 0);
    // Binary output is lossless.
    let o = d.run(&["sh", "-c", "printf '\\000\\377\\200x'"]);
    assert_eq!(o.stdout, b"\x00\xff\x80x");
}

#[test]
fn cancel_reports_the_signal_within_a_second() {
    let d = Daemon::start();
    let (_, path) = d.mount("c");
    let id = d.exec(serde_json::json!({"argv": ["sleep", "1000"]}));
    std::thread::sleep(Duration::from_millis(100));
    let r = d.req("GET", &format!("/v1/execs/{id}"), None);
    assert_eq!(r.json()["state"], "running");
    let t = Instant::now();
    let r = d.req("POST", &format!("/v1/execs/{id}/cancel"), None);
    let took = t.elapsed();
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert!(took < Duration::from_secs(1), "cancel took {took:?}");
    assert_eq!(v["state"], "exited", "{v}");
    assert_eq!(v["exit"]["signal"], libc::SIGTERM, "{v}");
    assert_eq!(v["exit"]["signal_name"], "SIGTERM");
    assert_eq!(v["exit"]["cancelled"], true);
    let o = d.output(&id);
    assert_eq!(o.exit.unwrap().signal, Some(libc::SIGTERM));

    // A command that ignores SIGTERM is killed after the grace period, and
    // its whole process group with it.
    // The shell marks in its Workspace that its trap is set, and only
    // then is it cancelled: a SIGTERM that came first would end it at once.
    let id = d.exec(serde_json::json!({"argv": ["sh", "-c", "trap '' TERM; sleep 1000 & : > .trapped; sleep 1000"]}));
    wait_for_file(&std::path::Path::new(&path).join(".trapped"));
    let r = d.req(
        "POST",
        &format!("/v1/execs/{id}/cancel"),
        Some(&serde_json::json!({"grace_ms": 200})),
    );
    let v = r.json();
    assert_eq!(v["exit"]["signal"], libc::SIGKILL, "{v}");
    let pid = v["pid"].as_i64().unwrap() as i32;
    std::thread::sleep(Duration::from_millis(100));
    // No live (non-zombie) member of the group is left. Outside a Sandbox
    // the host's init reaps the orphaned members; inside, the Sandbox's
    // PID 1 does.
    let live = live_group_members(pid);
    assert!(
        live.is_empty(),
        "process group {pid} survived the cancel: {live:?}"
    );

    // Timeout.
    let id = d.exec(serde_json::json!({"argv": ["sleep", "1000"], "timeout_ms": 200}));
    let r = d.req("GET", &format!("/v1/execs/{id}/wait?timeout_ms=5000"), None);
    let v = r.json();
    assert_eq!(v["exit"]["timed_out"], true, "{v}");
    assert_eq!(v["exit"]["signal"], libc::SIGTERM, "{v}");
}

#[test]
fn bad_input_is_refused() {
    let d = Daemon::start();
    // No workspace yet: nothing to run in (404: it depends on what is
    // mounted, not on the request).
    let r = d.req(
        "POST",
        "/v1/execs",
        Some(&serde_json::json!({"argv": ["true"]})),
    );
    assert_eq!(r.status, 404, "{}", r.text());
    let (ws, path) = d.mount("e");
    let bad = |body: serde_json::Value, what: &str| {
        let r = d.req("POST", "/v1/execs", Some(&body));
        assert_eq!(r.status, 400, "{what}: {}", r.text());
        let v = r.json();
        assert_eq!(v["error"]["code"], "invalid_input", "{what}: {v}");
        v["error"]["message"].as_str().unwrap().to_string()
    };
    bad(serde_json::json!({"argv": []}), "empty argv");
    bad(
        serde_json::json!({"argv": ["echo", "a\u{0}b"]}),
        "NUL in argv",
    );
    bad(
        serde_json::json!({"argv": ["echo", "x".repeat(1 << 20)]}),
        "argv over 1 MiB",
    );
    bad(
        serde_json::json!({"argv": ["true"], "env": {"A=B": "c"}}),
        "env name with =",
    );
    let r = d.req(
        "POST",
        "/v1/execs",
        Some(&serde_json::json!({"argv": ["true"], "cwd": "/tmp"})),
    );
    assert_eq!(r.status, 404, "cwd outside: {}", r.text());
    assert!(
        r.text().contains("no mounted workspace contains cwd /tmp"),
        "{}",
        r.text()
    );
    bad(
        serde_json::json!({"argv": ["true"], "cwd": format!("{path}/../..")}),
        "cwd with ..",
    );
    let r = d.req(
        "POST",
        "/v1/execs",
        Some(&serde_json::json!({"argv": ["true"], "cwd": "/tmp", "workspace": ws})),
    );
    assert_eq!(
        r.status,
        409,
        "cwd outside the named workspace: {}",
        r.text()
    );
    assert_eq!(r.json()["error"]["code"], "invalid_input");
    bad(
        serde_json::json!({"argv": ["true"], "user": "0:0"}),
        "root user",
    );
    bad(
        serde_json::json!({"argv": ["true"], "user": "nobody"}),
        "bad user",
    );
    for u in ["+5:5", "05:5", "5:", "1234567890:5"] {
        bad(serde_json::json!({"argv": ["true"], "user": u}), u);
    }
    bad(
        serde_json::json!({"argv": ["true"], "timeout_ms": 0}),
        "timeout 0",
    );
    bad(
        serde_json::json!({"argv": ["true"], "tty": true, "tty_size": [0, 80]}),
        "tty rows 0",
    );
    // Unknown IDs: 404 with a JSON error.
    for (m, p) in [
        ("GET", "/v1/execs/xnope".to_string()),
        ("POST", "/v1/execs/xnope/cancel".to_string()),
        ("GET", "/v1/execs/xnope/output".to_string()),
        ("GET", "/v1/workspaces/nope/status".to_string()),
        ("POST", "/v1/workspaces/nope/commit".to_string()),
    ] {
        let body = serde_json::json!({"message": "m"});
        let r = d.req(m, &p, Some(&body));
        assert_eq!(r.status, 404, "{m} {p}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], "not_found");
    }
    let r = d.req(
        "POST",
        "/v1/execs",
        Some(&serde_json::json!({"argv": ["true"], "workspace": "nope"})),
    );
    assert_eq!(r.status, 404);
    // A missing program is an error with ENOENT, not a made-up 127.
    let o = d.run(&["/no/such/program"]);
    assert!(o.exit.is_none(), "got an exit status: {:?}", o.exit);
    let f = o.error.expect("error frame");
    assert_eq!(f.errno, Some(libc::ENOENT), "{f:?}");
    assert_eq!(f.errno_name.as_deref(), Some("ENOENT"));
    let o = d.run(&["no-such-program-in-path"]);
    assert_eq!(o.error.expect("error frame").errno, Some(libc::ENOENT));
    // Mounting a non-branch or at a file.
    let r = d.req(
        "POST",
        "/v1/workspaces",
        Some(&serde_json::json!({"ref": "p/nope", "at": d.tmp.path().join("m2")})),
    );
    assert_eq!(r.status, 404, "{}", r.text());
    let r = d.req(
        "POST",
        "/v1/workspaces",
        Some(&serde_json::json!({"ref": "p/main", "at": path})),
    );
    assert_eq!(r.status, 409, "{}", r.text());
    let _ = ws;
}

#[test]
fn disconnect_mid_exec_keeps_running_and_resumes() {
    let d = Daemon::start();
    d.mount("f");
    let id =
        d.exec(serde_json::json!({"argv": ["sh", "-c", "echo first; sleep 0.5; echo second"]}));
    // Attach, read a bit, disconnect.
    {
        use std::io::{Read, Write};
        let mut s = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
        write!(
            s,
            "GET /v1/execs/{id}/output HTTP/1.1\r\nHost: d\r\nAuthorization: Bearer {}\r\n\r\n",
            d.token
        )
        .unwrap();
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0);
    }
    // The exec kept running and finished normally.
    let r = d.req("GET", &format!("/v1/execs/{id}/wait?timeout_ms=5000"), None);
    assert_eq!(r.json()["exit"]["code"], 0, "{}", r.text());
    // A new stream resumes with what was not handed out and ends with exit.
    let o = d.output(&id);
    assert!(o.out().ends_with("second\n"), "{:?}", o.out());
    assert_eq!(o.code(), Some(0));
    // No zombie among the daemon's children.
    let children = std::fs::read_to_string(format!(
        "/proc/{}/task/{}/children",
        d.child.id(),
        d.child.id()
    ))
    .unwrap_or_default();
    for pid in children.split_whitespace() {
        let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(!st.contains(") Z "), "zombie child {pid}: {st}");
    }
}

#[test]
fn chatty_output_is_complete_under_backpressure() {
    let d = Daemon::start();
    d.mount("g");
    // 20 MiB, more than the 4 MiB buffer: nothing lost, nothing unbounded.
    let id = d.exec(serde_json::json!({"argv": ["sh", "-c", "head -c 20971520 /dev/zero"]}));
    std::thread::sleep(Duration::from_millis(300));
    let o = d.output(&id);
    assert_eq!(o.stdout.len(), 20 << 20);
    assert_eq!(o.code(), Some(0));
}

/// Wait until an exec has made `marker` (in its Workspace), the way a
/// test knows the command reached a point without guessing a sleep.
fn wait_for_file(marker: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !marker.exists() {
        assert!(
            Instant::now() < deadline,
            "the exec never made {} within 60 s",
            marker.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// pids of running (not zombie) processes in process group `pgid`.
fn live_group_members(pgid: i32) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // fields after "comm)": state ppid pgrp ...
        let rest = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() > 2 && f[2] == pgid.to_string() && f[0] != "Z" {
            out.push(format!(
                "{} {}",
                e.file_name().to_string_lossy(),
                stat.trim()
            ));
        }
    }
    out
}

#[test]
fn optional_loopback_tcp_needs_the_token_too() {
    use std::io::{Read, Write};
    let d = Daemon::start_with(Some(0));
    let addr = d
        .marker
        .split(' ')
        .find_map(|w| w.strip_prefix("tcp="))
        .unwrap_or_else(|| panic!("no tcp= in the marker: {}", d.marker))
        .to_string();
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    let get = |auth: &str| {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            s,
            "GET /v1/health HTTP/1.1\r\nHost: d\r\nConnection: close\r\n{auth}\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    assert!(get("").starts_with("HTTP/1.1 401"));
    let ok = get(&format!("Authorization: Bearer {}\r\n", d.token));
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
}

#[test]
fn pty_mode_gives_a_controlling_terminal() {
    let d = Daemon::start();
    let (_, path) = d.mount("t");
    // The command marks, in its Workspace (its cwd), that it has read the
    // first size; the test resizes only then. A fixed sleep here failed on
    // a loaded CI machine: the command started after the resize and
    // printed "40 120" twice.
    let id = d.exec(serde_json::json!({
        "argv": ["sh", "-c", "test -t 0 && test -t 1 && echo isatty; tty; stty size; : > .sized; read x; stty size; echo got:$x; id -u"],
        "tty": true,
        "tty_size": [30, 100],
        "stdin": true,
    }));
    wait_for_file(&std::path::Path::new(&path).join(".sized"));
    let r = d.req(
        "POST",
        &format!("/v1/execs/{id}/resize"),
        Some(&serde_json::json!({"rows": 40, "cols": 120})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let r = d.req_bytes("POST", &format!("/v1/execs/{id}/stdin"), b"abc\n");
    assert_eq!(r.status, 200, "{}", r.text());
    let o = d.output(&id);
    let out = o.out();
    assert_eq!(o.code(), Some(0), "{out}");
    assert!(out.contains("isatty"), "{out}");
    assert!(out.contains("/dev/pts/"), "{out}");
    assert!(out.contains("got:abc"), "{out}");
    assert!(out.contains("30 100"), "initial size: {out}");
    assert!(out.contains("40 120"), "resized: {out}");
    assert!(out.contains("1500"), "{out}");
    // Cancel works on a PTY exec too (its own session and group).
    let id = d.exec(serde_json::json!({"argv": ["sleep", "1000"], "tty": true}));
    std::thread::sleep(Duration::from_millis(100));
    let v = d
        .req("POST", &format!("/v1/execs/{id}/cancel"), None)
        .json();
    assert!(v["exit"]["signal"].as_i64().is_some(), "{v}");
}

/// A daemon that recovers its Workspaces (a Sandbox's), killed with
/// SIGKILL and started again on the same scratch: the mounted Workspace
/// comes back under its ID at its path with its uncommitted changes and
/// commits them; one unmounted on request does not come back; a damaged
/// record is reported in health and the daemon starts anyway. After a
/// graceful stop, a start brings the Workspace back too.
#[test]
fn restart_mounts_the_recorded_workspaces_again() {
    let mut d = Daemon::start_recovering();
    let (a, pa) = d.mount("a");
    let (b, _) = d.mount("b");
    let r = d.req("POST", &format!("/v1/workspaces/{b}/unmount"), None);
    assert_eq!(r.status, 200, "{}", r.text());
    // Changes through the mount: a new file, a modified base file, a delete.
    std::fs::write(format!("{pa}/new.txt"), b"new\n").unwrap();
    std::fs::write(format!("{pa}/hello.txt"), b"changed\n").unwrap();
    std::fs::remove_file(format!("{pa}/dir/a.txt")).unwrap();
    let status = |d: &Daemon| {
        let r = d.req("GET", &format!("/v1/workspaces/{a}/status"), None);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["changes"].clone()
    };
    let before = status(&d);
    assert_eq!(before.as_array().unwrap().len(), 3, "{before}");
    std::fs::write(d.scratch().join(".mounts/zz-broken.json"), b"{not json").unwrap();

    d.child.kill().unwrap(); // SIGKILL
    let _ = d.child.wait();
    // The dead daemon's mount stays behind (ENOTCONN) in this namespace; in
    // a Sandbox it goes with the namespace. Detach it as that would.
    let st = std::process::Command::new("umount")
        .args(["-l", &pa])
        .status()
        .unwrap();
    assert!(st.success(), "umount -l {pa}");

    d.restart();
    let list = d.req("GET", "/v1/workspaces", None).json();
    let got: Vec<(&str, &str)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["id"].as_str().unwrap(), w["path"].as_str().unwrap()))
        .collect();
    assert_eq!(got, vec![(a.as_str(), pa.as_str())], "only a comes back");
    assert_eq!(status(&d), before);
    assert_eq!(std::fs::read(format!("{pa}/new.txt")).unwrap(), b"new\n");
    assert!(!std::path::Path::new(&format!("{pa}/dir/a.txt")).exists());
    let health = d.req("GET", "/v1/health", None).json();
    let un = health["unrecovered"].as_array().unwrap();
    assert_eq!(un.len(), 1, "{health}");
    assert_eq!(un[0]["id"], "zz-broken");
    assert!(
        un[0]["error"]
            .as_str()
            .unwrap()
            .contains("unreadable mount record"),
        "{health}"
    );
    let log = std::fs::read_to_string(&d.log).unwrap();
    assert!(log.contains("not recovered"), "{log}");

    let r = d.req(
        "POST",
        &format!("/v1/workspaces/{a}/commit"),
        Some(&serde_json::json!({"message": "after the crash"})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["outcome"], "committed");
    let store = d.store();
    let head = store
        .branch_head(&strata_store::BranchRef::parse("p/main").unwrap())
        .unwrap();
    let read = |path: &[u8]| {
        store.read_path(head, path).unwrap().map(|e| {
            let strata_store::EntryKind::File(fc) = &e.kind else {
                panic!("not a file")
            };
            store.read_file_range(fc, 0, 100).unwrap()
        })
    };
    assert_eq!(read(b"new.txt").as_deref(), Some(&b"new\n"[..]));
    assert_eq!(read(b"hello.txt").as_deref(), Some(&b"changed\n"[..]));
    assert_eq!(read(b"dir/a.txt"), None);
    drop(store);

    // A graceful stop unmounts but keeps the record: a start serves it again.
    std::fs::remove_file(d.scratch().join(".mounts/zz-broken.json")).unwrap();
    let r = d.req("POST", "/v1/shutdown", None);
    assert_eq!(r.status, 202, "{}", r.text());
    d.restart();
    let list = d.req("GET", "/v1/workspaces", None).json();
    assert_eq!(list[0]["id"], a.as_str(), "{list}");
    let health = d.req("GET", "/v1/health", None).json();
    assert_eq!(health["unrecovered"], serde_json::json!([]), "{health}");
    assert_eq!(std::fs::read(format!("{pa}/new.txt")).unwrap(), b"new\n");
}
