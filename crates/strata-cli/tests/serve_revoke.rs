//! A token revoked while one of its WebSocket exec streams is open
//! (docs/server.md, "Tokens"): the stream ends with close code 1008
//! (policy violation) within about a second, as the token's next plain
//! request is refused; the exec itself is not the stream's and runs on,
//! and another token's requests are unaffected.

mod common;

mod serve_common;

use common::Env;
use serde_json::json;
use serve_common::*;

#[test]
fn a_revoked_token_ends_its_open_websocket_with_1008() {
    require_root();
    let env = Env::new();
    env.ok(&["project", "create", "p"]);
    let (t, id) = token(&env, &[]);
    let (other, _) = token(&env, &[]);
    let st = SbState::new(&env);
    let s = start(&env, &st);
    let sb = create_sandbox(&s, &t, json!({"project": "p"}));
    mount(&s, &t, &sb, "p/main");
    let eid = exec(
        &s,
        &t,
        &sb,
        json!({"argv": ["sh", "-c", "echo started; exec sleep 1000"]}),
    );
    let sock = s.addr.strip_prefix("unix:").unwrap().to_string();
    let path = format!("/v1/sandboxes/{sb}/execs/{eid}/ws");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (seen, close, after) = rt.block_on(async {
        use futures_util::StreamExt;
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        use tokio_tungstenite::tungstenite::Message;
        let stream = tokio::net::UnixStream::connect(&sock).await.unwrap();
        let mut req = format!("ws://strata{path}").into_client_request().unwrap();
        req.headers_mut()
            .insert("Authorization", format!("Bearer {t}").parse().unwrap());
        let (mut ws, resp) = tokio_tungstenite::client_async(req, stream)
            .await
            .expect("websocket upgrade");
        assert_eq!(resp.status(), 101);
        // The stream is live: the command's first output arrives.
        let mut seen = Vec::new();
        while !seen.ends_with(b"started\n") {
            match ws.next().await.expect("a frame").unwrap() {
                Message::Binary(b) => seen.extend_from_slice(&b[1..]),
                other => panic!("before the revocation: {other:?}"),
            }
        }
        env.ok(&["token", "revoke", &id]);
        let t0 = std::time::Instant::now();
        let close = tokio::time::timeout(std::time::Duration::from_secs(10), async {
            while let Some(m) = ws.next().await {
                if let Message::Close(c) = m.unwrap() {
                    return c;
                }
            }
            None
        })
        .await
        .expect("the stream ends within 10 s of the revocation");
        (seen, close, t0.elapsed())
    });
    assert_eq!(seen, b"started\n");
    let close = close.expect("a close frame, not a dropped connection");
    assert_eq!(u16::from(close.code), 1008, "{close:?}");
    assert!(close.reason.contains("revoked"), "{close:?}");
    println!("closed {after:?} after the revocation");
    // The token's next request is refused; the exec runs on, and another
    // token sees and ends it.
    assert_eq!(s.get(&format!("/v1/sandboxes/{sb}"), &t).status, 401);
    let st_now = ok(
        &s.get(&format!("/v1/sandboxes/{sb}/execs/{eid}"), &other),
        200,
        "exec state",
    );
    assert_eq!(st_now["state"], "running", "{st_now}");
    let c = post_json(
        &s,
        &other,
        &format!("/v1/sandboxes/{sb}/execs/{eid}/cancel"),
        json!({}),
    );
    assert!(c.status < 300, "cancel: {}", c.text());
}
