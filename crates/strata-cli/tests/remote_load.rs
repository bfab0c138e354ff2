//! 32 SDK clients at once through one real `strata serve`
//! (`strata_sdk::Client::connect`), each running a flow (fork, commit a
//! change set by compare-and-swap, log, ls, read the file back), for
//! several rounds: every commit is in the Store afterwards (read back
//! in-process, not through the server), and the server's open descriptors
//! (/proc/PID/fd) and resident memory (VmRSS) do not grow from round to
//! round beyond a small margin. The figures are printed.

mod common;

mod serve_common;

use common::Env;
use serve_common::*;
use strata_sdk::wire::Change;
use strata_sdk::Client;

const CLIENTS: usize = 32;
const ROUNDS: usize = 3;

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the server's /proc/PID/fd")
        .count()
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// One client's flow; returns (branch, commit).
async fn flow(url: String, token: String, round: usize, i: usize) -> (String, String) {
    let c = Client::connect(&url, &token).expect("connect");
    let branch = format!("load/r{round}-c{i}");
    let at = c.fork("load/main", &branch).await.expect("fork");
    let body = format!("client {i} of round {round}\n");
    let commit = c
        .commit_changes(
            &branch,
            &at,
            &format!("round {round} client {i}"),
            vec![Change::Put {
                path: format!("dir/f{i}.txt"),
                content: Some(body.clone()),
                content_base64: None,
                mode: None,
            }],
        )
        .await
        .expect("commit");
    // A second commit on the old head loses the race, typed.
    let lost = c
        .commit_changes(
            &branch,
            &at,
            "stale",
            vec![Change::Delete {
                path: "seed".into(),
            }],
        )
        .await
        .expect_err("a stale expected head");
    match lost {
        strata_sdk::Error::Conflict { actual_head, .. } => assert_eq!(actual_head, commit),
        other => panic!("expected Conflict, got {other:?}"),
    }
    let log = c.log(&branch, None).await.expect("log");
    assert_eq!(log[0].id, commit);
    assert_eq!(log[1].id, at);
    let ls = c
        .ls(&branch, b"dir")
        .await
        .expect("ls")
        .expect("dir exists");
    assert_eq!(ls.len(), 1);
    assert_eq!(
        c.read_file(&branch, format!("dir/f{i}.txt").as_bytes())
            .await
            .expect("read"),
        body.as_bytes()
    );
    (branch, commit)
}

#[test]
fn concurrent_sdk_clients_through_the_server_keep_every_commit_and_no_leak() {
    let env = Env::new();
    let (token, _) = token(&env, &[]);
    let s = Server::unix(&env);
    let pid = s.child.id();
    let url = format!("unix://{}", s.addr.strip_prefix("unix:").unwrap());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let made: Vec<(String, String)> = rt.block_on(async {
        let c = Client::connect(&url, &token).unwrap();
        let h = c.create_project("load", "seed").await.unwrap();
        c.commit_changes(
            "load/main",
            &h,
            "seed",
            vec![Change::Put {
                path: "seed".into(),
                content: Some("seed\n".into()),
                content_base64: None,
                mode: None,
            }],
        )
        .await
        .unwrap();
        // Round 0 warms the server up (its thread pools, SQLite's caches);
        // rounds 1..=ROUNDS are measured.
        let mut made = Vec::new();
        let mut figures = Vec::new();
        for round in 0..=ROUNDS {
            let tasks: Vec<_> = (0..CLIENTS)
                .map(|i| tokio::spawn(flow(url.clone(), token.clone(), round, i)))
                .collect();
            for t in tasks {
                made.push(t.await.expect("a client's flow"));
            }
            // Connections close as their tasks end; let the server see it.
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            let (f, r) = (fds(pid), rss_kib(pid));
            println!(
                "round {round}: {CLIENTS} clients done; server fds {f}, VmRSS {r} KiB, load {}",
                std::fs::read_to_string("/proc/loadavg")
                    .unwrap_or_default()
                    .trim()
            );
            figures.push((f, r));
        }
        let (f1, r1) = figures[1];
        for (round, &(f, r)) in figures.iter().enumerate().skip(2) {
            assert!(
                f <= f1 + 4,
                "round {round}: the server holds {f} descriptors, {f1} after round 1"
            );
            assert!(
                r <= r1 + (r1 / 4).max(16 * 1024),
                "round {round}: the server's VmRSS is {r} KiB, {r1} KiB after round 1"
            );
        }
        made
    });
    // Read back in-process, from the Store itself.
    assert_eq!(made.len(), CLIENTS * (ROUNDS + 1));
    rt.block_on(async {
        let local = Client::local(&env.store).await.unwrap();
        let branches = local.branches(Some("load")).await.unwrap();
        assert_eq!(branches.len(), made.len() + 1, "every branch plus main");
        for (branch, commit) in &made {
            assert_eq!(&local.head(branch).await.unwrap(), commit, "{branch}");
            let i = branch.rsplit("-c").next().unwrap();
            let body = local
                .read_file(commit, format!("dir/f{i}.txt").as_bytes())
                .await
                .unwrap();
            assert!(String::from_utf8(body)
                .unwrap()
                .starts_with(&format!("client {i} ")));
        }
    });
    assert!(s.child.id() == pid, "the server is still the same process");
}
