//! The SDK's remote client keeps its connections to `strata serve` open
//! (strata-sdk `pool.rs`), and that stays as correct as a connection per
//! request: many calls go over few connections (counted where the server
//! accepts them, through a counting proxy in front of its socket); a
//! response still streaming keeps its connection to itself, so another
//! call does not wait for it; a server stopped or killed between two calls
//! is replaced by the next call's fresh connection, for a POST too (which
//! must never be sent twice, so the client must see the old connection
//! closed before writing to it); a client used from a second runtime does
//! not hand its requests to the first runtime's idle connections.
//!
//! The server runs in this process (as the benchmark's does) on its own
//! runtime; no root needed.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::Method;
use strata_sdk::wire::{Change, ProjectList};
use strata_sdk::{Client, Remote};
use strata_store::{Store, StoreOptions};

/// A server on `sock` for the Store in `dir`, on a runtime of its own.
struct Served {
    rt: tokio::runtime::Runtime,
    stop: tokio::sync::oneshot::Sender<()>,
    handle: tokio::task::JoinHandle<Result<(), strata_server::ServeError>>,
}

fn serve(store: &Store, sock: &Path) -> Served {
    let tokens = strata_server::TokenStore::new(store.dir());
    let state = Arc::new(strata_server::ServerState::new(
        store.clone(),
        tokens,
        strata_server::DEFAULT_MAX_BODY,
    ));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let bound = rt
        .block_on(strata_server::Listen::Unix(sock.to_path_buf()).bind())
        .expect("bind the server's socket");
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let handle = rt.spawn(strata_server::run(bound, state, async move {
        let _ = rx.await;
    }));
    Served { rt, stop, handle }
}

impl Served {
    /// Graceful shutdown, as `strata serve` on SIGTERM.
    fn stop(self) {
        let _ = self.stop.send(());
        self.rt
            .block_on(self.handle)
            .unwrap()
            .expect("the server stops");
    }

    /// As a killed server: every task dropped, its sockets closed without
    /// a graceful HTTP shutdown, and all of that done before this returns,
    /// as a killed process's sockets are closed by the time it is gone.
    /// (A server that dies just as a request goes out is the race no
    /// client can settle: a POST then fails rather than risk running
    /// twice; pool.rs.)
    fn kill(self) {
        self.rt.shutdown_timeout(Duration::from_secs(10));
    }
}

/// Accepts on `listen`, counts, and pipes each connection to `to`.
async fn counting_proxy(listen: PathBuf, to: PathBuf, accepted: Arc<AtomicUsize>) {
    let l = tokio::net::UnixListener::bind(&listen).unwrap();
    loop {
        let Ok((mut a, _)) = l.accept().await else {
            return;
        };
        accepted.fetch_add(1, Ordering::SeqCst);
        let to = to.clone();
        tokio::spawn(async move {
            if let Ok(mut b) = tokio::net::UnixStream::connect(&to).await {
                let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
            }
        });
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    store: Store,
    sock: PathBuf,
    token: String,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("store"), &StoreOptions::default()).unwrap();
    let (token, _) = strata_server::TokenStore::new(store.dir())
        .create(&[])
        .unwrap();
    let sock = dir.path().join("serve.sock");
    Setup {
        _dir: dir,
        store,
        sock,
        token,
    }
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Fails instead of hanging.
async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within 20 s"))
}

/// Calls of every kind (GET, POST, DELETE; fork's two requests) through
/// one client.
async fn calls(c: &Client, p: &str) -> usize {
    let h = within("create", c.create_project(p, "first"))
        .await
        .unwrap();
    let mut n = 1;
    for i in 0..10 {
        let b = format!("{p}/b{i}");
        within("fork", c.fork(&format!("{p}/main"), &b))
            .await
            .unwrap();
        let l = within("branches", c.branches(Some(p))).await.unwrap();
        assert_eq!(l.len(), 2, "main and {b}");
        let log = within("log", c.log(&b, Some(1))).await.unwrap();
        assert_eq!(log[0].id, h);
        within("delete", c.delete_branch(&b)).await.unwrap();
        n += 6;
    }
    n
}

#[test]
fn many_calls_go_over_few_connections_on_either_runtime_kind() {
    let s = setup();
    let server = serve(&s.store, &s.sock);
    let accepted = Arc::new(AtomicUsize::new(0));
    let proxy = s.sock.with_file_name("proxy.sock");
    server.rt.spawn(counting_proxy(
        proxy.clone(),
        s.sock.clone(),
        accepted.clone(),
    ));
    while !proxy.exists() {
        std::thread::sleep(Duration::from_millis(5));
    }
    let url = format!("unix://{}", proxy.display());

    // A current-thread runtime: one connection serves every call.
    let c = Client::connect(&url, &s.token).unwrap();
    let n = current_thread().block_on(calls(&c, "one"));
    let seen = accepted.load(Ordering::SeqCst);
    assert!(
        seen <= 2,
        "{n} calls through one client opened {seen} connections"
    );

    // A multi-thread runtime: the response and the connection's readiness
    // race between threads, so a call may now and then open another one.
    let c = Client::connect(&url, &s.token).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let before = accepted.load(Ordering::SeqCst);
    let n = rt.block_on(calls(&c, "two"));
    let seen = accepted.load(Ordering::SeqCst) - before;
    assert!(
        seen <= n / 4,
        "{n} calls through one client opened {seen} connections"
    );

    // The same client from a second current-thread runtime while the
    // first one is idle (not running: its idle connection's task cannot
    // run): the call must not go to that connection and hang.
    let c = Client::connect(&url, &s.token).unwrap();
    let first = current_thread();
    first.block_on(async { within("projects", c.projects()).await.unwrap() });
    let second = current_thread();
    let l = second.block_on(async { within("projects on another runtime", c.projects()).await });
    assert_eq!(l.unwrap(), ["one", "two"]);
    drop(first);
    server.stop();
}

#[test]
fn a_response_still_streaming_keeps_its_connection_to_itself() {
    let s = setup();
    let server = serve(&s.store, &s.sock);
    let url = format!("unix://{}", s.sock.display());
    let rt = current_thread();
    let c = Client::connect(&url, &s.token).unwrap();
    let remote = Remote::new(&url, &s.token, None).unwrap();
    // 8 MiB: far more than the sockets' buffers hold, so the server
    // cannot finish sending it while it is not read.
    let big: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();
    rt.block_on(async {
        let h = c.create_project("p", "first").await.unwrap();
        c.commit_changes(
            "p/main",
            &h,
            "big",
            vec![Change::Put {
                path: "big".into(),
                content: None,
                content_base64: Some(base64_encode(&big)),
                mode: None,
            }],
        )
        .await
        .unwrap();
        let resp = remote
            .send(
                Method::GET,
                "/v1/projects/p/cat?ref=main&path=big",
                Bytes::new(),
                "application/json",
                &[],
            )
            .await
            .unwrap();
        assert!(resp.status().is_success());
        // Its body unread, its connection busy: other calls still answer.
        for _ in 0..3 {
            let l: ProjectList = within(
                "a call beside an unread stream",
                remote.call(Method::GET, "/v1/projects", None::<&()>),
            )
            .await
            .unwrap();
            assert_eq!(l.projects, ["p"]);
        }
        let body = within("the stream", resp.into_body().collect())
            .await
            .unwrap()
            .to_bytes();
        assert!(body == big, "the streamed file came back whole");
        // Both connections are ready again, and calls keep working.
        let l: ProjectList = remote
            .call(Method::GET, "/v1/projects", None::<&()>)
            .await
            .unwrap();
        assert_eq!(l.projects, ["p"]);
    });
    server.stop();
}

#[test]
fn a_server_stopped_or_killed_between_calls_is_replaced_by_a_fresh_connection() {
    let s = setup();
    let url = format!("unix://{}", s.sock.display());
    let rt = current_thread();
    let c = Client::connect(&url, &s.token).unwrap();
    let server = serve(&s.store, &s.sock);
    rt.block_on(async { c.create_project("a", "first").await.unwrap() });

    // Stopped (its idle connections closed), then started again on the
    // same socket: the next call, a POST, is made once, on a new
    // connection.
    server.stop();
    let server = serve(&s.store, &s.sock);
    rt.block_on(async {
        within("create after a restart", c.create_project("b", "first"))
            .await
            .unwrap();
        assert_eq!(c.projects().await.unwrap(), ["a", "b"]);
    });

    // Killed: its sockets closed by its end, not by a graceful shutdown.
    server.kill();
    let server = serve(&s.store, &s.sock);
    rt.block_on(async {
        within("create after a kill", c.create_project("c", "first"))
            .await
            .unwrap();
        within("fork after a kill", c.fork("c/main", "c/x"))
            .await
            .unwrap();
        assert_eq!(c.projects().await.unwrap(), ["a", "b", "c"]);
    });

    // Gone for good: the call fails as unreachable, and does not hang.
    server.kill();
    let _ = std::fs::remove_file(&s.sock);
    let e = rt
        .block_on(async { within("a call to no server", c.projects()).await })
        .unwrap_err();
    assert!(
        matches!(e, strata_sdk::Error::Unreachable { .. }),
        "expected Unreachable, got {e:?}"
    );
    // Each project was created exactly once.
    let commits: Vec<usize> = ["a", "b", "c"]
        .iter()
        .map(|p| {
            let head = s
                .store
                .branch_head(&strata_store::BranchRef::new(p, "main").unwrap())
                .unwrap();
            s.store.log(head, 10).unwrap().len()
        })
        .collect();
    assert_eq!(commits, [1, 1, 1]);
}

fn base64_encode(b: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(b)
}
