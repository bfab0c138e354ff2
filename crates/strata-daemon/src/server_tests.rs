//! Unit tests of the router: its layers (catch-panic, token) around
//! routes that exist in these tests only.

use super::*;
use tower::ServiceExt;

const TOKEN: &str = "test-token";

fn state(dir: &Path) -> Arc<AppState> {
    let store = Store::create(&dir.join("store"), &Default::default()).expect("store");
    let config = DaemonConfig::new(
        dir.join("sock"),
        dir.join("token"),
        dir.join("log"),
        dir.join("store"),
        dir.join("scratch"),
    );
    let (shutdown, _) = tokio::sync::watch::channel(false);
    Arc::new(AppState {
        config,
        token: TOKEN.into(),
        store,
        helper_exe: PathBuf::from("/bin/false"),
        workspaces: Mutex::new(HashMap::new()),
        unrecovered: Mutex::new(Vec::new()),
        execs: Mutex::new(HashMap::new()),
        prestart: crate::prestart::Slot::new(PathBuf::from("/bin/false")),
        shutdown,
    })
}

fn request(path: &str) -> Request {
    Request::builder()
        .uri(path)
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .body(Body::empty())
        .expect("request")
}

async fn body(r: Response) -> String {
    let b = axum::body::to_bytes(r.into_body(), 1 << 20)
        .await
        .expect("body");
    String::from_utf8_lossy(&b).into_owned()
}

/// A handler that panics while it holds the Workspace table's lock:
/// with std's Mutex that poisoned the table, and health (which locks
/// it) panicked on every later request. The route exists in this test
/// only; the layers around it are the daemon's own.
#[tokio::test]
async fn a_panicking_handler_answers_500_and_the_daemon_keeps_serving() {
    let dir = tempfile::tempdir().expect("tempdir");
    let st = state(dir.path());
    let routes = routes().route(
        "/v1/test/panic",
        get(|State(st): St| async move {
            let held = st.workspaces.lock();
            if held.is_empty() {
                panic!("a bug in a handler");
            }
            StatusCode::OK
        }),
    );
    let app = harden(routes, st.clone());
    let r = app
        .clone()
        .oneshot(request("/v1/test/panic"))
        .await
        .expect("an answer, not a dropped connection");
    assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let text = body(r).await;
    assert!(text.contains("a bug in a handler"), "{text}");
    // The same lock, and the daemon, after the panic.
    for _ in 0..2 {
        let r = app.clone().oneshot(request("/v1/health")).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let text = body(r).await;
        assert!(text.contains("\"status\":\"ok\""), "{text}");
        let r = app
            .clone()
            .oneshot(request("/v1/workspaces"))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(body(r).await, "[]");
    }
    // Still behind the token.
    let r = app
        .clone()
        .oneshot(
            Request::builder()
                .uri("/v1/health")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}
