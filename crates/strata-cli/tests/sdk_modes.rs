//! The SDK's contract, run in both of its modes by the same code: a
//! `strata_sdk::Client` on the Store in this process (`Client::local`),
//! and one through a real `strata serve` started here on the same fresh
//! Store (`Client::connect`, its Unix socket). Real Sandboxes (native
//! backend, as root) and real FUSE: the flow (fork, create a Sandbox,
//! mount, exec a write and a read, status, commit, exec with stdin,
//! cancel, unmount, close, the commit read back from the Store itself),
//! exec streams with a stdin pipe closed for EOF, typed errors, and
//! restart refused on a running Sandbox.
//!
//! Here rather than in strata-sdk's tests because the served mode needs
//! the `strata` binary (the server; in-process Sandboxes also run it as
//! their daemon, `SandboxSpec::daemon_exe`).

mod common;

mod serve_common;

use std::future::Future;

use common::{Env, BIN};
use serve_common::*;
use strata_sdk::{Client, CommitOutcome, Error, SandboxFilter, SandboxSpec};

#[derive(Debug, Clone, Copy)]
enum Mode {
    Local,
    Served,
}

struct Setup {
    env: Env,
    /// In-process Sandboxes' state root (not under /tmp, which the SDK
    /// refuses): this run's own, so other runs' Sandboxes stay out of its
    /// lists.
    _state: tempfile::TempDir,
    client: Client,
    _server: Option<Server>,
}

/// A fresh Store with project `p` (README, lib/a.txt), and a client in
/// `mode`.
fn setup(mode: Mode) -> Setup {
    assert!(
        rustix::process::geteuid().is_root(),
        "these tests create native Sandboxes: run them as root (CI does)"
    );
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(src.join("lib")).unwrap();
    std::fs::write(src.join("README"), "demo project\n").unwrap();
    std::fs::write(src.join("lib/a.txt"), "a\n").unwrap();
    env.ok(&["project", "create", "p", "--from", src.to_str().unwrap()]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let state = tempfile::Builder::new()
        .prefix("strata-sdk-modes-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let (client, server) = match mode {
        Mode::Local => (
            rt.block_on(Client::local(&env.store))
                .unwrap()
                .with_sandbox_state(state.path()),
            None,
        ),
        Mode::Served => {
            let (t, _) = token(&env, &[]);
            let sock = env.path("s.sock");
            let s = Server::start_with(
                &env,
                &["--listen", &format!("unix:{}", sock.display())],
                &[("STRATA_SANDBOX_STATE", state.path())],
            );
            let url = format!("unix://{}", s.addr.strip_prefix("unix:").unwrap());
            (Client::connect(&url, &t).unwrap(), Some(s))
        }
    };
    Setup {
        env,
        _state: state,
        client,
        _server: server,
    }
}

fn spec(s: &Setup, mode: Mode) -> SandboxSpec {
    let mut spec =
        SandboxSpec::new(&s.env.store).label("sdk-modes", std::process::id().to_string());
    if let Mode::Local = mode {
        spec.daemon_exe = Some(BIN.into());
    }
    spec
}

/// Run `scenario` in both modes; close every Sandbox it left behind.
fn both<F, Fut>(scenario: F)
where
    F: Fn(Mode, Setup) -> Fut,
    Fut: Future<Output = ()>,
{
    for mode in [Mode::Local, Mode::Served] {
        let s = setup(mode);
        let client = s.client.clone();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let t = std::time::Instant::now();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt.block_on(scenario(mode, s))
        }));
        rt.block_on(async {
            let mut f = SandboxFilter::default();
            f.labels
                .insert("sdk-modes".into(), std::process::id().to_string());
            for info in client.sandboxes(f).await.unwrap_or_default() {
                if let Ok(sb) = client.sandbox(info.id.as_str()).await {
                    let _ = sb.close_discard().await;
                }
            }
        });
        match r {
            Ok(()) => println!("{mode:?}: ok in {:?}", t.elapsed()),
            Err(p) => {
                eprintln!("{mode:?}: FAILED");
                std::panic::resume_unwind(p)
            }
        }
    }
}

/// A spec that chooses the FUSE transport works locally and is refused
/// through a server (whose host decides), with the field named and no
/// Sandbox created.
#[test]
fn a_chosen_fuse_transport_is_refused_through_a_server() {
    both(|mode, s| async move {
        let c = &s.client;
        let r = c
            .create_sandbox(spec(&s, mode).fuse_transport(strata_sdk::Transport::DevFuse))
            .await;
        let mut f = SandboxFilter::default();
        f.labels
            .insert("sdk-modes".into(), std::process::id().to_string());
        match mode {
            Mode::Local => {
                let sb = r.expect("a local Sandbox with dev-fuse");
                let ws = sb.mount("p/main", None).await.unwrap();
                assert_eq!(ws.transport(), Some("/dev/fuse"));
                ws.unmount(false).await.unwrap();
                sb.close().await.unwrap();
            }
            Mode::Served => {
                let Err(e) = r else {
                    panic!("a chosen transport was accepted through the server")
                };
                let e = e.to_string();
                assert!(e.contains("fuse_transport"), "{e}");
                assert!(e.contains("leave it unset"), "{e}");
                assert!(c.sandboxes(f).await.unwrap().is_empty());
            }
        }
    });
}

#[test]
fn the_flow_in_both_modes() {
    both(|mode, s| async move {
        let c = &s.client;
        let first = c.head("p/main").await.unwrap();
        let at = c.fork("p/main", "p/agent").await.unwrap();
        assert_eq!(at, first);
        // Forking from what is not there is NotFound either way, from a
        // branch name that reads as hex too; from a commit id it works.
        for missing in ["p/nope", "p/deadbeef00"] {
            let e = c.fork(missing, "p/x").await.unwrap_err();
            assert!(
                matches!(e, Error::NotFound { .. }),
                "fork from {missing}: {e:?}"
            );
        }
        assert_eq!(c.fork(&first, "p/by-id").await.unwrap(), first);
        assert!(c.head("p/x").await.is_err(), "no branch from a failed fork");
        let sb = c.create_sandbox(spec(&s, mode)).await.unwrap();
        assert!(sb.id().starts_with("sb-"));
        assert_eq!(sb.state().await, strata_sdk::SandboxState::Running);
        let ws = sb.mount("p/agent", None).await.unwrap();
        assert_eq!(ws.branch(), "p/agent");
        // What serves it, the same in both modes: the default transport,
        // auto, takes io_uring where the kernel offers it.
        let want = match strata_workspace::uring::probe().usable() {
            true if std::env::var("STRATA_FUSE_TRANSPORT").as_deref() != Ok("dev-fuse") => {
                "io_uring"
            }
            _ => "/dev/fuse",
        };
        assert_eq!(ws.transport(), Some(want), "{mode:?}");
        let listed = sb.workspaces().await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].transport(), Some(want), "{mode:?}");
        let o = ws
            .exec(["sh", "-c", "echo 'written in a sandbox' > out.txt; id -u"])
            .output()
            .await
            .unwrap();
        assert!(o.status.success(), "{:?} {}", o.status, o.stderr_str());
        assert_eq!(o.stdout, b"1500\n");
        let o = ws
            .exec(["cat", "out.txt", "README"])
            .output()
            .await
            .unwrap();
        assert_eq!(o.stdout, b"written in a sandbox\ndemo project\n");
        let changes = ws.status().await.unwrap();
        assert!(
            changes
                .iter()
                .any(|c| c.path == b"out.txt" && c.kind == "added"),
            "{changes:?}"
        );
        let CommitOutcome::Committed(commit) = ws.commit("flow: out.txt").await.unwrap() else {
            panic!("nothing committed")
        };
        let o = ws
            .exec(["sh", "-c", "tr a-z A-Z; echo err >&2"])
            .stdin_bytes("via stdin\n")
            .output()
            .await
            .unwrap();
        assert_eq!(
            (o.stdout.as_slice(), o.stderr.as_slice()),
            (&b"VIA STDIN\n"[..], &b"err\n"[..])
        );
        let mut h = ws.exec(["sleep", "1000"]).spawn().await.unwrap();
        let st = h.cancel().await.unwrap();
        assert!(st.cancelled, "{st:?}");
        assert_eq!(st.signal_name.as_deref(), Some("SIGTERM"));
        // Found again by ID, as another process would.
        let again = c.sandbox(sb.id()).await.unwrap();
        assert_eq!(again.workspaces().await.unwrap()[0].id(), ws.id());
        let listed = c
            .sandboxes(SandboxFilter {
                labels: [("sdk-modes".to_string(), std::process::id().to_string())].into(),
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(listed.iter().any(|i| i.id.as_str() == sb.id()));
        assert!(
            sb.logs(50).await.unwrap().contains("daemon"),
            "the daemon's log"
        );
        ws.unmount(false).await.unwrap();
        sb.close().await.unwrap();
        // Read back from the Store itself, not through the client.
        assert_eq!(
            s.env.ok(&["cat", "p/agent", "out.txt"]),
            b"written in a sandbox\n"
        );
        assert_eq!(
            s.env.json(&["log", "p/agent", "-n", "1"])[0]["commit"],
            commit.as_str()
        );
        assert_eq!(
            c.read_file("p/agent", b"out.txt").await.unwrap(),
            b"written in a sandbox\n"
        );
        let e = c.sandbox(again.id()).await.expect_err("closed");
        assert!(matches!(e, Error::NotFound { .. }), "{e:?}");
    });
}

#[test]
fn exec_streams_stdin_eof_and_typed_errors_in_both_modes() {
    both(|mode, s| async move {
        let c = &s.client;
        let sb = c.create_sandbox(spec(&s, mode)).await.unwrap();
        let ws = sb.mount("p/main", None).await.unwrap();
        let mut h = ws
            .exec([
                "sh",
                "-c",
                "while read l; do echo out:$l; echo err:$l >&2; done; echo done",
            ])
            .stdin_pipe()
            .spawn()
            .await
            .unwrap();
        let mut stdin = h.stdin.take().unwrap();
        stdin.write(&b"one\ntwo\n"[..]).await.unwrap();
        drop(stdin); // EOF: the loop ends.
        let mut out = h.stdout.take().unwrap();
        let mut err = h.stderr.take().unwrap();
        let (o, e) = tokio::join!(
            async {
                let mut v = Vec::new();
                tokio::io::AsyncReadExt::read_to_end(&mut out, &mut v)
                    .await
                    .unwrap();
                v
            },
            async {
                let mut v = Vec::new();
                tokio::io::AsyncReadExt::read_to_end(&mut err, &mut v)
                    .await
                    .unwrap();
                v
            }
        );
        assert_eq!(o, b"out:one\nout:two\ndone\n");
        assert_eq!(e, b"err:one\nerr:two\n");
        assert_eq!(h.wait().await.unwrap().code, Some(0));
        // A program that is not there is ExecFailed, not an exit status.
        let e = ws.exec(["/no/such/program"]).output().await.unwrap_err();
        assert!(
            matches!(&e, Error::ExecFailed { errno_name, .. } if errno_name.as_deref() == Some("ENOENT")),
            "{e:?}"
        );
        // A stale commit is a Conflict carrying the actual head.
        let ws2 = sb.mount("p/main", Some("/tmp/w2")).await.unwrap();
        ws.exec(["sh", "-c", "echo 1 > a"]).output().await.unwrap();
        ws2.exec(["sh", "-c", "echo 2 > b"]).output().await.unwrap();
        let won = ws.commit("first").await.unwrap();
        let e = ws2.commit("second").await.unwrap_err();
        assert!(
            matches!(&e, Error::Conflict { actual_head, .. } if actual_head == won.commit()),
            "{e:?}"
        );
        // Unknown IDs are NotFound; a running Sandbox is not restarted.
        let e = c.sandbox("sb-000000000000000000000000").await.unwrap_err();
        assert!(matches!(e, Error::NotFound { .. }), "{e:?}");
        let e = sb.exec_by_id("x000000000000000").await.unwrap_err();
        assert!(matches!(e, Error::NotFound { .. }), "{e:?}");
        let mut sb = sb;
        let e = sb.restart().await.unwrap_err();
        assert!(matches!(e, Error::Busy { .. }), "{e:?}");
        // Uncommitted work makes close refuse, typed; discard closes.
        let sb_id = sb.id().to_string();
        let e = c.sandbox(&sb_id).await.unwrap().close().await.unwrap_err();
        assert!(matches!(e, Error::Busy { .. }), "{e:?}");
        c.sandbox(&sb_id)
            .await
            .unwrap()
            .close_discard()
            .await
            .unwrap();
    });
}

/// The monitor pid of Sandbox `id`, from its record under `state` (read
/// in this process, as root, whichever mode created it).
async fn monitor_pid(id: &str, state: &std::path::Path) -> i32 {
    let sb = strata_sdk::Sandbox::open_in(id, Some(state.to_path_buf()))
        .await
        .unwrap();
    sb.info()
        .handle
        .as_deref()
        .and_then(|h| {
            h.split(|c: char| !c.is_ascii_digit())
                .find(|p| !p.is_empty())
        })
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no monitor pid in {:?}", sb.info().handle))
}

#[test]
fn restart_after_a_killed_sandbox_in_both_modes() {
    both(|mode, s| async move {
        let c = &s.client;
        let sb = c.create_sandbox(spec(&s, mode)).await.unwrap();
        let ws = sb.mount("p/main", None).await.unwrap();
        ws.exec(["sh", "-c", "echo kept > uncommitted"])
            .output()
            .await
            .unwrap();
        // SIGKILL to the monitor: PID 1 and the daemon die with it.
        let pid = monitor_pid(sb.id(), s._state.path()).await;
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(pid).unwrap(),
            rustix::process::Signal::KILL,
        )
        .unwrap();
        let t = std::time::Instant::now();
        while sb.state().await != strata_sdk::SandboxState::Stopped || sb.health().await.is_ok() {
            assert!(
                t.elapsed() < std::time::Duration::from_secs(10),
                "still running"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        // Calls on it fail (typed), and restart brings it and its
        // Workspace back, uncommitted work included; the old handle works.
        assert!(ws.status().await.is_err());
        let mut sb = sb;
        let t = std::time::Instant::now();
        loop {
            match sb.restart().await {
                Ok(()) => break,
                // The backend may read it running a moment longer.
                Err(Error::Busy { .. }) if t.elapsed() < std::time::Duration::from_secs(10) => {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await
                }
                Err(e) => panic!("restart: {e:?}"),
            }
        }
        assert_eq!(sb.state().await, strata_sdk::SandboxState::Running);
        let wss = sb.workspaces().await.unwrap();
        assert_eq!(wss.len(), 1);
        assert_eq!(wss[0].id(), ws.id());
        let changes = ws.status().await.unwrap();
        assert_eq!(changes.len(), 1, "{changes:?}");
        let o = ws.exec(["cat", "uncommitted"]).output().await.unwrap();
        assert_eq!(o.stdout, b"kept\n");
        let done = ws.commit("after restart").await.unwrap();
        assert!(done.committed());
        sb.close().await.unwrap();
        assert_eq!(s.env.ok(&["cat", "p/main", "uncommitted"]), b"kept\n");
    });
}
