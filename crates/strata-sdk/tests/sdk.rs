//! SDK behaviour beyond the flow: spawn with separate streams and a stdin
//! writer, typed errors (ExecFailed/ENOENT, Conflict with the actual head,
//! NotFound, InvalidInput, Busy for a taken name, Unauthorized), list by
//! label and prefix, the Store hidden from commands, a Sandbox started in
//! one process, reopened, exec'd in and closed from another, and restart
//! after the Sandbox was killed (what comes back, what is reported).
//!
//! Its own `main` (harness = false): the binary is re-executed as the
//! Sandbox init, the daemon, the exec helper, and as the second process of
//! the reopen test (`reopen ID`).

mod common;

use strata_sdk::{Error, Sandbox, SandboxFilter, SandboxSpec, Store};

fn main() {
    strata_sdk::maybe_run_internal();
    let args: Vec<String> = std::env::args().collect();
    let rt = tokio::runtime::Runtime::new().expect("tokio");
    if args.get(1).map(String::as_str) == Some("reopen") {
        // The second process: reopen by ID, exec, close.
        let id = args[2].clone();
        rt.block_on(async move {
            let sb = Sandbox::open(&id).await.expect("reopen");
            assert_eq!(sb.state().await, strata_sdk::SandboxState::Running);
            let ws = sb.workspaces().await.expect("workspaces");
            assert_eq!(ws.len(), 1);
            let o = ws[0]
                .exec(["sh", "-c", "cat mark; id -u"])
                .output()
                .await
                .expect("exec");
            print!("{}", o.stdout_str());
            // `mark` was never committed: close refuses to drop it, names
            // the Workspace, and the work is still there afterwards.
            let e = sb
                .close_check()
                .await
                .expect_err("close with uncommitted work");
            assert!(
                matches!(&e, strata_sdk::Error::Busy { what, .. } if what.contains(ws[0].id())),
                "{e:?}"
            );
            assert_eq!(ws[0].status().await.expect("status").len(), 1);
            sb.close_discard().await.expect("close");
        });
        return;
    }
    strata_testkit::cases::require_root();
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut cases = common::Cases::new(&rt, tmp.path(), "sdk-test-run");
    cases.run(
        "spawn_streams_stdin_and_errors",
        spawn_streams_stdin_and_errors,
    );
    cases.run(
        "an_unread_stream_holds_bounded_memory",
        an_unread_stream_holds_bounded_memory,
    );
    cases.run(
        "conflict_carries_the_actual_head",
        conflict_carries_the_actual_head,
    );
    cases.run("names_labels_and_unknown_ids", names_labels_and_unknown_ids);
    cases.run(
        "reopen_exec_close_from_another_process",
        reopen_exec_close_from_another_process,
    );
    cases.run(
        "two_sandboxes_see_only_their_own_mounts",
        two_sandboxes_see_only_their_own_mounts,
    );
    cases.run(
        "a_dead_daemon_is_an_error_with_the_log_tail",
        a_dead_daemon_is_an_error_with_the_log_tail,
    );
    cases.run(
        "restart_recovers_what_it_can_and_keeps_the_rest",
        restart_recovers_what_it_can_and_keeps_the_rest,
    );
    cases.finish();
}

/// Every Sandbox of this run carries this label, so that the ones a failed
/// test leaves behind are closed at the end.
fn spec(store: &Store) -> SandboxSpec {
    SandboxSpec::new(store.dir()).label("sdk-test-run", std::process::id().to_string())
}

async fn store_with_project(dir: &std::path::Path, name: &str) -> Store {
    let src = dir.join(format!("src-{name}"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), b"base\n").unwrap();
    let store = Store::create(dir.join(format!("store-{name}")))
        .await
        .unwrap();
    store.create_project_from("p", &src).await.unwrap();
    store
}

async fn spawn_streams_stdin_and_errors(dir: &std::path::Path) {
    let store = store_with_project(dir, "a").await;
    let sb = Sandbox::create(spec(&store)).await.unwrap();
    let ws = sb.mount("p/main", None).await.unwrap();

    // spawn: stdin writer, separate ordered streams, drop of stdin = EOF.
    let mut h = ws
        .exec([
            "sh",
            "-c",
            "while read l; do echo out:$l; echo err:$l >&2; done; echo bye",
        ])
        .stdin_pipe()
        .spawn()
        .await
        .unwrap();
    assert!(h.id().starts_with('x'));
    let mut stdin = h.stdin.take().unwrap();
    stdin.write(&b"one\ntwo\n"[..]).await.unwrap();
    stdin.write(&b"three\n"[..]).await.unwrap();
    drop(stdin); // EOF
    let mut out = h.stdout.take().unwrap();
    let mut err = h.stderr.take().unwrap();
    let (o, e) = tokio::join!(out.read_to_end(), err.read_to_end());
    let st = h.wait().await.unwrap();
    assert!(st.success(), "{st:?}");
    assert_eq!(o, b"out:one\nout:two\nout:three\nbye\n");
    assert_eq!(e, b"err:one\nerr:two\nerr:three\n");

    // Exit codes and env/cwd/user.
    for code in [0, 1, 42] {
        let o = ws
            .exec(["sh", "-c", &format!("exit {code}")])
            .output()
            .await
            .unwrap();
        assert_eq!(o.status.code, Some(code));
    }
    let o = ws.exec(["mkdir", "-m", "777", "d"]).output().await.unwrap();
    assert!(o.status.success(), "{}", o.stderr_str());
    let o = ws
        .exec(["sh", "-c", "echo $FOO; pwd; id -u; id -g; touch by-2000"])
        .env("FOO", "bar")
        .cwd(format!("{}/d", ws.path()))
        .user(2000, 2001)
        .output()
        .await
        .unwrap();
    assert_eq!(
        o.stdout_str(),
        format!("bar\n{}/d\n2000\n2001\n", ws.path()),
        "{}",
        o.stderr_str()
    );

    // Typed errors.
    let e = ws.exec(["/no/such/program"]).output().await.unwrap_err();
    assert!(
        matches!(&e, Error::ExecFailed { errno: Some(2), .. }),
        "missing program: {e:?}"
    );
    let e = ws.exec(["true"]).cwd("/etc").output().await.unwrap_err();
    assert!(matches!(&e, Error::InvalidInput { .. }), "{e:?}");
    let e = ws
        .exec(["true"])
        .env("A=B", "x")
        .output()
        .await
        .unwrap_err();
    assert!(matches!(&e, Error::InvalidInput { .. }), "{e:?}");
    let e = ws.exec(["true"]).user(0, 0).output().await.unwrap_err();
    assert!(matches!(&e, Error::InvalidInput { .. }), "{e:?}");
    let e = sb.mount("p/nope", Some("/tmp/other")).await.unwrap_err();
    assert!(matches!(&e, Error::NotFound { .. }), "{e:?}");

    // PTY mode.
    let o = ws
        .exec(["sh", "-c", "test -t 0 && echo tty-ok"])
        .tty()
        .output()
        .await
        .unwrap();
    assert!(o.stdout_str().contains("tty-ok"), "{:?}", o.stdout_str());

    // Timeout.
    let o = ws
        .exec(["sleep", "1000"])
        .timeout(std::time::Duration::from_millis(100))
        .output()
        .await
        .unwrap();
    assert!(
        o.status.timed_out && o.status.signal == Some(libc::SIGTERM),
        "{:?}",
        o.status
    );

    // The Store is not reachable for commands: its host path is masked and
    // the daemon's copy sits under a 0700 root directory.
    let store_path = store.dir().display().to_string();
    let state_dir = sb.info().daemon.state_dir.display().to_string();
    let o = ws
        .exec([
            "sh".to_string(),
            "-c".into(),
            format!("ls {store_path}/*.db; ls {state_dir}; cat {state_dir}/store/*.db"),
        ])
        .output()
        .await
        .unwrap();
    assert!(
        !o.status.success(),
        "command reached the Store: {}",
        o.stdout_str()
    );
    assert!(
        o.stdout.is_empty(),
        "command listed something: {}",
        o.stdout_str()
    );

    // The privilege split holds for SDK execs.
    let o = ws
        .exec(["cat", "/proc/self/status"])
        .output()
        .await
        .unwrap();
    let s = o.stdout_str();
    for want in [
        "CapEff:\t0000000000000000",
        "CapBnd:\t0000000000000000",
        "NoNewPrivs:\t1",
        "Seccomp:\t2",
    ] {
        assert!(s.lines().any(|l| l == want), "{want:?} missing: {s}");
    }
    let o = ws.exec(["unshare", "-U", "true"]).output().await.unwrap();
    assert!(!o.status.success(), "unshare -U succeeded");
    for argv in [
        vec!["umount", ws.path()],
        vec!["umount", "-l", ws.path()],
        vec!["fusermount3", "-u", ws.path()],
        vec!["unshare", "-Urm", "true"],
    ] {
        match ws.exec(argv.clone()).output().await {
            Ok(o) => assert!(!o.status.success(), "{argv:?} succeeded"),
            // A tool missing from the host root is not a success either.
            Err(Error::ExecFailed { errno: Some(2), .. }) => {}
            Err(e) => panic!("{argv:?}: {e}"),
        }
    }
    // The Workspace is still mounted and usable after those attempts.
    let o = ws
        .exec(["sh", "-c", "echo still > still"])
        .output()
        .await
        .unwrap();
    assert!(o.status.success(), "{}", o.stderr_str());

    // Unauthorized with a wrong token.
    let bad = strata_sdk::DaemonClient::new(
        sb.info().daemon.socket.clone(),
        "0".repeat(64),
        "bad".into(),
        None,
    );
    let e = bad
        .call::<serde_json::Value>(hyper::Method::GET, "/v1/health", None::<&()>)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Unauthorized { .. }), "{e:?}");

    ws.unmount(true).await.unwrap();
    sb.close().await.unwrap();
}

/// This process's resident set, in KiB (`VmRSS` in proc(5)'s
/// /proc/PID/status).
fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS in /proc/self/status")
}

/// A caller that spawns a command writing 256 MiB and does not read its
/// stdout: the SDK buffers a bounded amount (its RSS stays within 32 MiB of
/// where it was) and the command waits in `write` (still running); then
/// reading drains it all, through `AsyncRead` for stdout and `Stream` for
/// stderr, and the byte count is exact.
async fn an_unread_stream_holds_bounded_memory(dir: &std::path::Path) {
    use tokio::io::AsyncReadExt;
    const TOTAL: u64 = 256 << 20;
    let store = store_with_project(dir, "bounded").await;
    let sb = Sandbox::create(spec(&store)).await.unwrap();
    let ws = sb.mount("p/main", None).await.unwrap();
    let rss0 = rss_kib();
    let mut h = ws
        .exec([
            "sh",
            "-c",
            &format!("head -c {TOTAL} /dev/zero; echo done >&2"),
        ])
        .spawn()
        .await
        .unwrap();
    let (mut out, mut err) = (h.stdout.take().unwrap(), h.stderr.take().unwrap());
    // Nobody reads. Watch the RSS until it has not grown for 2 s (the
    // buffers are full and the command waits), or 120 s pass; an
    // unbounded buffer keeps growing until the command has written all.
    let (mut peak, mut still) = (rss0, 0);
    for _ in 0..480 {
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        let now = rss_kib();
        if now > peak {
            (peak, still) = (now, 0);
        } else {
            still += 1;
            if still == 8 {
                break;
            }
        }
    }
    println!(
        "  unread: RSS {rss0} KiB -> peak {peak} KiB (+{} KiB)",
        peak - rss0
    );
    assert!(
        peak < rss0 + 32 * 1024,
        "RSS grew from {rss0} KiB to {peak} KiB while nobody read the stream"
    );
    assert!(
        h.try_status().await.unwrap().is_none(),
        "the command finished writing {TOTAL} bytes that nobody read: no back-pressure"
    );
    let reader = async {
        let (mut n, mut buf) = (0u64, vec![0u8; 1 << 16]);
        loop {
            let k = out.read(&mut buf).await.unwrap();
            if k == 0 {
                break n;
            }
            assert!(buf[..k].iter().all(|&b| b == 0), "a byte that is not 0");
            n += k as u64;
        }
    };
    let errs = async {
        let mut v = Vec::new();
        while let Some(b) = std::future::poll_fn(|cx| {
            futures_core::Stream::poll_next(std::pin::Pin::new(&mut err), cx)
        })
        .await
        {
            v.extend_from_slice(&b);
        }
        v
    };
    let (n, e) = tokio::join!(reader, errs);
    assert_eq!(n, TOTAL);
    assert_eq!(e, b"done\n");
    assert!(h.wait().await.unwrap().success());
    ws.unmount(true).await.unwrap();
    sb.close_discard().await.unwrap();
}

async fn conflict_carries_the_actual_head(dir: &std::path::Path) {
    let store = store_with_project(dir, "b").await;
    let sb = Sandbox::create(spec(&store)).await.unwrap();
    let w1 = sb.mount("p/main", Some("/tmp/w1")).await.unwrap();
    let w2 = sb.mount("p/main", Some("/tmp/w2")).await.unwrap();
    for w in [&w1, &w2] {
        let o = w
            .exec(["sh", "-c", "echo change > g"])
            .cwd(w.path())
            .output()
            .await
            .unwrap();
        assert!(o.status.success(), "{}", o.stderr_str());
    }
    let c1 = w1.commit("first").await.unwrap();
    let e = w2.commit("second").await.unwrap_err();
    match &e {
        Error::Conflict { actual_head, .. } => assert_eq!(actual_head, c1.commit()),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(store.head("p/main").await.unwrap(), c1.commit());
    // w2's work was not published: closing refuses to drop it unless told.
    assert!(matches!(sb.close_check().await, Err(Error::Busy { .. })));
    w2.unmount(true).await.unwrap();
    sb.close().await.unwrap();
    // Close never touches the Store: the commit is there.
    assert_eq!(store.read_file("p/main", "g").await.unwrap(), b"change\n");
}

async fn names_labels_and_unknown_ids(dir: &std::path::Path) {
    let store = store_with_project(dir, "c").await;
    let tag = format!("t{:x}", rand::random::<u32>());
    let name = format!("sdk-test-{tag}");
    let sb = Sandbox::create(spec(&store).name(&name).label("suite", &tag))
        .await
        .unwrap();
    let e = Sandbox::create(spec(&store).name(&name)).await.unwrap_err();
    assert!(matches!(e, Error::Busy { .. }), "name reuse: {e:?}");
    let mut f = SandboxFilter::default();
    f.labels.insert("suite".into(), tag.clone());
    let l = Sandbox::list(f).await.unwrap();
    assert_eq!(l.len(), 1);
    assert_eq!(l[0].id.as_str(), sb.id());
    let l = Sandbox::list(SandboxFilter {
        name_prefix: Some("sdk-test-t".into()),
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(l.iter().any(|r| r.id.as_str() == sb.id()));
    let e = Sandbox::open("sb-000000000000000000000000")
        .await
        .unwrap_err();
    assert!(matches!(e, Error::NotFound { .. }), "{e:?}");
    let e = Sandbox::open("nope").await.unwrap_err();
    assert!(matches!(e, Error::InvalidInput { .. }), "{e:?}");
    let logs = sb.logs(50).await.unwrap();
    assert!(logs.contains("STRATA-DAEMON-READY"), "{logs}");
    let id = sb.id().to_string();
    sb.close().await.unwrap();
    let e = Sandbox::open(&id).await.unwrap_err();
    assert!(matches!(e, Error::NotFound { .. }), "closed sandbox: {e:?}");
}

async fn reopen_exec_close_from_another_process(dir: &std::path::Path) {
    let store = store_with_project(dir, "d").await;
    let sb = Sandbox::create(spec(&store)).await.unwrap();
    let ws = sb.mount("p/main", None).await.unwrap();
    let o = ws
        .exec(["sh", "-c", "echo from-first > mark"])
        .output()
        .await
        .unwrap();
    assert!(o.status.success());
    let id = sb.id().to_string();
    drop(ws);
    drop(sb);
    let out = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args(["reopen", &id])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "second process: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "from-first\n1500\n");
    // Closed by the other process: gone from the list.
    let l = Sandbox::list(SandboxFilter::default()).await.unwrap();
    assert!(!l.iter().any(|r| r.id.as_str() == id));
}

async fn two_sandboxes_see_only_their_own_mounts(dir: &std::path::Path) {
    let store = store_with_project(dir, "e").await;
    store.fork("p/main", "p/b").await.unwrap();
    let a = Sandbox::create(spec(&store)).await.unwrap();
    let b = Sandbox::create(spec(&store)).await.unwrap();
    let wa = a.mount("p/main", None).await.unwrap();
    let wb = b.mount("p/b", None).await.unwrap();
    for (w, mine, other) in [(&wa, &wa, &wb), (&wb, &wb, &wa)] {
        let o = w
            .exec([
                "sh",
                "-c",
                "echo in-$(hostname) > who; cat /proc/self/mounts",
            ])
            .output()
            .await
            .unwrap();
        assert!(o.status.success(), "{}", o.stderr_str());
        let mounts = o.stdout_str();
        assert!(
            mounts.contains(&format!("strata:{}", mine.id())),
            "own mount missing: {mounts}"
        );
        assert!(
            !mounts.contains(&format!("strata:{}", other.id())),
            "other Sandbox's mount visible: {mounts}"
        );
    }
    // The host sees neither Workspace.
    let host = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(
        !host.contains(&format!("strata:{}", wa.id()))
            && !host.contains(&format!("strata:{}", wb.id())),
        "{host}"
    );
    // A background process a command leaves behind is reaped by the
    // Sandbox's init: no zombie in the Sandbox's PID namespace.
    let o = wa
        .exec(["sh", "-c", "sleep 0.2 & exit 0"])
        .output()
        .await
        .unwrap();
    assert!(o.status.success());
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let o = wa
        .exec(["sh", "-c", "cat /proc/[0-9]*/stat 2>/dev/null"])
        .output()
        .await
        .unwrap();
    let zombies: Vec<_> = o
        .stdout_str()
        .lines()
        .filter(|l| {
            l.rsplit_once(')')
                .map(|x| x.1.trim_start().starts_with('Z'))
                .unwrap_or(false)
        })
        .map(String::from)
        .collect();
    assert!(zombies.is_empty(), "zombies in the Sandbox: {zombies:?}");
    for (w, br) in [(&wa, "p/main"), (&wb, "p/b")] {
        w.commit("who").await.unwrap();
        let who = store.read_file(br, "who").await.unwrap();
        assert!(String::from_utf8_lossy(&who).starts_with("in-"), "{who:?}");
    }
    a.close().await.unwrap();
    b.close().await.unwrap();
}

/// SIGKILL to the Sandbox's monitor (its PID 1 and the daemon die with
/// it, nothing of the Sandbox cleans up), then wait until it reads stopped.
async fn kill_sandbox(sb: &Sandbox) {
    let monitor: i32 = sb
        .info()
        .handle
        .as_deref()
        .and_then(|h| {
            h.split(|c: char| !c.is_ascii_digit())
                .find(|p| !p.is_empty())
        })
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no monitor pid in {:?}", sb.info().handle));
    // SAFETY: kill(2) with a pid and a signal number; no memory involved.
    unsafe { libc::kill(monitor, libc::SIGKILL) };
    let t = std::time::Instant::now();
    loop {
        if sb.state().await == strata_sdk::SandboxState::Stopped {
            break;
        }
        assert!(
            t.elapsed() < std::time::Duration::from_secs(5),
            "still running"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // The Sandbox reads Stopped as soon as the monitor is dead, but the
    // daemon dies a moment later: the monitor's death sends PID 1 its
    // PR_SET_PDEATHSIG SIGKILL, and PID 1's exit then kills the rest of
    // the PID namespace (zap_pid_ns_processes()), all asynchronously. On a
    // loaded machine (CI, 2026-11-30) the daemon still answered a status
    // call in that window; wait until it no longer answers at all.
    while sb.health().await.is_ok() {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(5),
            "the daemon still answers 5 s after its monitor was killed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

async fn a_dead_daemon_is_an_error_with_the_log_tail(dir: &std::path::Path) {
    let store = store_with_project(dir, "f").await;
    let sb = Sandbox::create(spec(&store)).await.unwrap();
    let ws = sb.mount("p/main", None).await.unwrap();
    kill_sandbox(&sb).await;
    let t = std::time::Instant::now();
    let e = tokio::time::timeout(std::time::Duration::from_secs(5), ws.status())
        .await
        .expect("a dead daemon must not hang the caller")
        .unwrap_err();
    assert!(t.elapsed() < std::time::Duration::from_secs(2));
    match &e {
        Error::Backend { log_tail, .. } => {
            assert!(
                log_tail.contains("STRATA-DAEMON-READY"),
                "log tail: {log_tail}"
            )
        }
        other => panic!("expected Backend with the log tail, got {other:?}"),
    }
    sb.close().await.unwrap();
}

/// Restart brings back what was mounted, not what was unmounted; a
/// Workspace it cannot recover (here: another process holds its lock) is
/// reported, keeps its scratch, blocks close, and comes back at the next
/// restart. A running Sandbox is not restarted.
async fn restart_recovers_what_it_can_and_keeps_the_rest(dir: &std::path::Path) {
    use strata_sdk::SandboxState;
    let store = store_with_project(dir, "g").await;
    let mut sb = Sandbox::create(spec(&store)).await.unwrap();
    let a = sb.mount("p/main", None).await.unwrap();
    let b = sb.mount("p/main", Some("/tmp/b")).await.unwrap();
    let c = sb.mount("p/main", Some("/tmp/c")).await.unwrap();
    let c_id = c.id().to_string();
    c.unmount(false).await.unwrap();
    for (w, script) in [(&a, "echo a > a"), (&b, "echo b > b")] {
        let o = w
            .exec(["sh", "-c", script])
            .cwd(w.path())
            .output()
            .await
            .unwrap();
        assert!(o.status.success(), "{}", o.stderr_str());
    }
    let e = sb.restart().await.unwrap_err();
    assert!(
        matches!(e, Error::Busy { .. }),
        "restart while running: {e:?}"
    );

    kill_sandbox(&sb).await;
    // Hold b's lock, as a process serving it would.
    let scratch = sb.info().daemon.scratch_dir.clone();
    let lock = std::fs::File::options()
        .write(true)
        .open(scratch.join(b.id()).join("lock"))
        .unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
    sb.restart()
        .await
        .expect("restart despite one locked Workspace");
    assert_eq!(sb.state().await, SandboxState::Running);
    let ids: Vec<String> = sb
        .workspaces()
        .await
        .unwrap()
        .iter()
        .map(|w| w.id().to_string())
        .collect();
    assert_eq!(ids, vec![a.id().to_string()], "only a comes back now");
    let un = sb.health().await.unwrap().unrecovered;
    assert_eq!(un.len(), 1, "{un:?}");
    assert_eq!(un[0].id, b.id());
    assert_eq!(un[0].path.as_deref(), Some("/tmp/b"));
    assert!(
        un[0].error.contains("lock") || un[0].error.contains("serves"),
        "{}",
        un[0].error
    );
    assert!(
        scratch.join(b.id()).join("journal.log").exists(),
        "b's scratch kept"
    );
    assert!(
        scratch.join(&c_id).exists(),
        "c's scratch kept (unmounted, not discarded)"
    );
    let st: Vec<Vec<u8>> = a
        .status()
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.path)
        .collect();
    assert_eq!(st, vec![b"a".to_vec()]);
    // Close would delete b's scratch, which may hold work: refused.
    let e = sb.close_check().await.unwrap_err();
    assert!(
        matches!(&e, Error::Busy { what, .. } if what.contains(b.id())),
        "{e:?}"
    );

    // Released, b comes back at the next restart, files and all.
    drop(lock);
    kill_sandbox(&sb).await;
    sb.restart().await.expect("second restart");
    let mut ids: Vec<String> = sb
        .workspaces()
        .await
        .unwrap()
        .iter()
        .map(|w| w.id().to_string())
        .collect();
    ids.sort();
    let mut want = vec![a.id().to_string(), b.id().to_string()];
    want.sort();
    assert_eq!(ids, want);
    assert!(sb.health().await.unwrap().unrecovered.is_empty());
    let o = b.exec(["cat", "b"]).cwd("/tmp/b").output().await.unwrap();
    assert_eq!(o.stdout_str(), "b\n", "{}", o.stderr_str());
    b.commit("b after two restarts").await.unwrap();
    assert_eq!(store.read_file("p/main", "b").await.unwrap(), b"b\n");
    sb.close_discard().await.unwrap();
}
