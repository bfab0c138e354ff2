//! `strata serve` relaying Sandboxes, Workspaces and execs, end to end:
//! the real binary, real Sandboxes (root, namespaces, /dev/fuse), real
//! FUSE Workspaces; results read back through the server's Store routes
//! and the `strata` CLI on the Store itself. Also the exec streams (NDJSON,
//! WebSocket) and TLS with a pinned certificate fingerprint.

mod common;

mod serve_common;

use base64::Engine;
use common::Env;
use serde_json::{json, Value};
use serve_common::*;

#[test]
fn a_sandbox_through_the_server_mounts_runs_commits_and_closes() {
    require_root();
    let env = Env::new();
    let st = SbState::new(&env);
    let s = start(&env, &st);
    let (t, _) = token(&env, &[]);
    let head = create_project(&s, &t, "p");
    ok(
        &commit(
            &s,
            &t,
            "p/branches/main",
            &head,
            json!([{"op": "put", "path": "hello.txt", "content": "hi\n"}]),
        ),
        201,
        "seed commit",
    );

    let sb = create_sandbox(
        &s,
        &t,
        json!({"project": "p", "name": "relay-flow", "labels": {"suite": "relay"}, "pids": 512}),
    );
    let listed = ok(&s.get("/v1/sandboxes?label=suite=relay", &t), 200, "list");
    let ids: Vec<&str> = listed["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [sb.as_str()]);
    assert_eq!(listed["sandboxes"][0]["project"], "p");
    assert_eq!(listed["sandboxes"][0]["pids"], 512);
    let none = ok(&s.get("/v1/sandboxes?label=suite=other", &t), 200, "list");
    assert_eq!(none["sandboxes"], json!([]));

    let ws = mount(&s, &t, &sb, "p/main");
    // The daemon's token stays in the server: no answer carries it, and it
    // is no server token.
    let dtoken = std::fs::read_to_string(st.dir.path().join(&sb).join("token")).unwrap();
    let dtoken = dtoken.trim();
    assert_eq!(dtoken.len(), 64, "{dtoken:?}");
    for p in [
        format!("/v1/sandboxes/{sb}"),
        "/v1/sandboxes".into(),
        format!("/v1/sandboxes/{sb}/workspaces"),
        format!("/v1/sandboxes/{sb}/health"),
        format!("/v1/sandboxes/{sb}/logs?lines=1000"),
        format!("/v1/sandboxes/{sb}/logs?tail=1000"),
    ] {
        let r = s.get(&p, &t);
        assert_eq!(r.status, 200, "{p}: {}", r.text());
        assert!(!r.text().contains(dtoken), "{p} shows the daemon's token");
    }
    assert_eq!(s.get("/v1/projects", dtoken).status, 401);
    // Output: the file of the branch, a new file, the uid.
    let e1 = exec(
        &s,
        &t,
        &sb,
        json!({"argv": ["sh", "-c", "cat hello.txt; echo made > new.txt; id -u; echo oops >&2"]}),
    );
    let (out, err, last) = ndjson_output(&s, &t, &sb, &e1);
    assert_eq!(String::from_utf8_lossy(&out), "hi\n1500\n");
    assert_eq!(String::from_utf8_lossy(&err), "oops\n");
    assert_eq!(last["exit"]["code"], 0, "{last}");

    // Stdin with EOF: what was written arrives, then the command sees EOF.
    let e2 = exec(
        &s,
        &t,
        &sb,
        json!({"argv": ["sh", "-c", "cat > in.txt; wc -c < in.txt"], "stdin": true}),
    );
    let r = s.post(
        &format!("/v1/sandboxes/{sb}/execs/{e2}/stdin"),
        &t,
        b"abc",
        "application/octet-stream",
    );
    assert_eq!(ok(&r, 200, "stdin")["written"], 3);
    ok(
        &s.post(
            &format!("/v1/sandboxes/{sb}/execs/{e2}/stdin/close"),
            &t,
            b"",
            "application/json",
        ),
        200,
        "close stdin",
    );
    // The daemon's own frames, relayed as they are (no format).
    let r = s.get(&format!("/v1/sandboxes/{sb}/execs/{e2}/output"), &t);
    assert_eq!(r.status, 200, "{}", r.text());
    let frames: Vec<Value> = r
        .text()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let stdout: Vec<u8> = frames
        .iter()
        .filter(|f| f["type"] == "stdout")
        .flat_map(|f| {
            base64::engine::general_purpose::STANDARD
                .decode(f["data"].as_str().unwrap())
                .unwrap()
        })
        .collect();
    assert_eq!(String::from_utf8_lossy(&stdout).trim(), "3");
    assert_eq!(frames.last().unwrap()["type"], "exit");

    // Cancel: the command is killed, and says so.
    let e3 = exec(&s, &t, &sb, json!({"argv": ["sleep", "1000"]}));
    let c = ok(
        &post_json(
            &s,
            &t,
            &format!("/v1/sandboxes/{sb}/execs/{e3}/cancel"),
            json!({"grace_ms": 100}),
        ),
        200,
        "cancel",
    );
    let w = if c["state"] == "exited" {
        c
    } else {
        wait(&s, &t, &sb, &e3)
    };
    assert_eq!(w["state"], "exited", "{w}");
    assert_eq!(w["exit"]["cancelled"], true, "{w}");

    // Status and commit through the relay, then read back.
    let status = ok(
        &s.get(&format!("/v1/sandboxes/{sb}/workspaces/{ws}/status"), &t),
        200,
        "status",
    );
    let paths: Vec<&str> = status["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["in.txt", "new.txt"]);
    let c = ok(
        &post_json(
            &s,
            &t,
            &format!("/v1/sandboxes/{sb}/workspaces/{ws}/commit"),
            json!({"message": "through the relay"}),
        ),
        200,
        "commit",
    );
    assert_eq!(c["outcome"], "committed");
    let r = s.get("/v1/projects/p/cat?ref=main&path=new.txt", &t);
    assert_eq!(r.body, b"made\n");
    let r = s.get("/v1/projects/p/cat?ref=main&path=in.txt", &t);
    assert_eq!(r.body, b"abc");
    assert_eq!(env.ok(&["cat", "p/main", "new.txt"]), b"made\n");
    assert_eq!(head_of(&s, &t, "p"), c["commit"].as_str().unwrap());

    let got = ok(&s.get(&format!("/v1/sandboxes/{sb}"), &t), 200, "get");
    assert_eq!(got["workspaces"][0]["id"], ws.as_str(), "{got}");
    assert_eq!(got["workspaces"][0]["branch"], "p/main");
    let r = s.get(&format!("/v1/sandboxes/{sb}/logs?lines=50"), &t);
    assert_eq!(r.status, 200);
    assert!(!r.body.is_empty(), "the daemon's log is not empty");
    // The daemon's own shutdown is not relayed: closing is DELETE.
    let r = s.post(
        &format!("/v1/sandboxes/{sb}/shutdown"),
        &t,
        b"",
        "application/json",
    );
    assert_eq!(r.status, 404);
    assert_eq!(
        ok(&s.get(&format!("/v1/sandboxes/{sb}"), &t), 200, "get")["state"],
        "running"
    );

    let r = s.req("DELETE", &format!("/v1/sandboxes/{sb}"), Some(&t), None);
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(s.get(&format!("/v1/sandboxes/{sb}"), &t).status, 404);
    let listed = ok(&s.get("/v1/sandboxes", &t), 200, "list");
    assert_eq!(listed["sandboxes"], json!([]));
    // Closing left the Store alone.
    assert_eq!(env.ok(&["cat", "p/main", "new.txt"]), b"made\n");
}

#[test]
fn a_scoped_token_sees_only_its_projects_sandboxes_workspaces_and_execs() {
    require_root();
    let env = Env::new();
    let st = SbState::new(&env);
    let s = start(&env, &st);
    let (all, _) = token(&env, &[]);
    let (ta, _) = token(&env, &["a"]);
    let (tb, _) = token(&env, &["b"]);
    create_project(&s, &all, "a");
    create_project(&s, &all, "b");

    // A cannot create a Sandbox for B, nor one for no project.
    let r = post_json(&s, &ta, "/v1/sandboxes", json!({"project": "b"}));
    assert_eq!(r.status, 404, "{}", r.text());
    let r = post_json(&s, &ta, "/v1/sandboxes", json!({}));
    assert_eq!(r.status, 400, "{}", r.text());
    // Nor set the project label itself.
    let r = post_json(
        &s,
        &ta,
        "/v1/sandboxes",
        json!({"project": "a", "labels": {"strata.project": "b"}}),
    );
    assert_eq!(r.status, 400, "{}", r.text());

    let sa = create_sandbox(&s, &ta, json!({"project": "a"}));
    let sbb = create_sandbox(&s, &tb, json!({"project": "b"}));
    let wb = mount(&s, &tb, &sbb, "b/main");
    let eb = run_sh(&s, &tb, &sbb, "echo secret > s.txt");

    // B's Sandbox, Workspace and exec read as not found for A, with the
    // message of an ID that does not exist.
    let missing = "sb-000000000000000000000000";
    let r404 = |path: &str| {
        let r = s.get(path, &ta);
        assert_eq!(r.status, 404, "{path}: {}", r.text());
        r.json()["error"]["message"].as_str().unwrap().to_string()
    };
    assert_eq!(
        r404(&format!("/v1/sandboxes/{sbb}")).replace(&sbb, "ID"),
        r404(&format!("/v1/sandboxes/{missing}")).replace(missing, "ID")
    );
    r404(&format!("/v1/sandboxes/{sbb}/workspaces"));
    r404(&format!("/v1/sandboxes/{sbb}/workspaces/{wb}/status"));
    r404(&format!("/v1/sandboxes/{sbb}/execs/{eb}"));
    r404(&format!(
        "/v1/sandboxes/{sbb}/execs/{eb}/output?format=ndjson"
    ));
    r404(&format!("/v1/sandboxes/{sbb}/logs"));
    let r = s.req("DELETE", &format!("/v1/sandboxes/{sbb}"), Some(&ta), None);
    assert_eq!(r.status, 404);
    let r = post_json(
        &s,
        &ta,
        &format!("/v1/sandboxes/{sbb}/workspaces/{wb}/commit"),
        json!({"message": "steal"}),
    );
    assert_eq!(r.status, 404);
    let listed = ok(&s.get("/v1/sandboxes", &ta), 200, "list");
    let ids: Vec<&str> = listed["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [sa.as_str()]);
    // B's Sandbox still runs, its work uncommitted and untouched.
    let v = ok(
        &s.get(&format!("/v1/sandboxes/{sbb}/workspaces/{wb}/status"), &tb),
        200,
        "status",
    );
    assert_eq!(v["changes"][0]["path"], "s.txt");
    assert_eq!(
        head_of(&s, &all, "b"),
        env.json(&["log", "b/main", "-n", "1"])[0]["commit"]
            .as_str()
            .unwrap()
    );
    assert_eq!(env.json(&["log", "b/main"]).as_array().unwrap().len(), 1);

    // A cannot mount B's branch in its own Sandbox...
    let r = post_json(
        &s,
        &ta,
        &format!("/v1/sandboxes/{sa}/workspaces"),
        json!({"ref": "b/main"}),
    );
    assert_eq!(r.status, 404, "{}", r.text());
    let v = ok(
        &s.get(&format!("/v1/sandboxes/{sa}/workspaces"), &ta),
        200,
        "workspaces",
    );
    assert_eq!(v, json!([]));
    // ...and a Sandbox created for A mounts only A, whoever asks.
    let r = post_json(
        &s,
        &all,
        &format!("/v1/sandboxes/{sa}/workspaces"),
        json!({"ref": "b/main"}),
    );
    assert_eq!(r.status, 404, "{}", r.text());
    mount(&s, &ta, &sa, "a/main");
}

#[test]
fn a_killed_server_finds_its_sandboxes_again_and_calls_by_id_go_on() {
    require_root();
    let env = Env::new();
    let st = SbState::new(&env);
    let mut s = start(&env, &st);
    let (t, _) = token(&env, &[]);
    create_project(&s, &t, "p");
    let sb = create_sandbox(&s, &t, json!({"project": "p"}));
    let ws = mount(&s, &t, &sb, "p/main");
    let e = run_sh(&s, &t, &sb, "echo before > f.txt");

    // SIGKILL: no cleanup at all.
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    let s = start(&env, &st);

    let got = ok(
        &s.get(&format!("/v1/sandboxes/{sb}"), &t),
        200,
        "get after restart",
    );
    assert_eq!(got["state"], "running");
    assert_eq!(got["workspaces"][0]["id"], ws.as_str(), "{got}");
    let ids: Vec<String> = ok(&s.get("/v1/sandboxes", &t), 200, "list")["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, std::slice::from_ref(&sb));
    // The exec from before is still known, and new calls work by ID.
    let w = ok(
        &s.get(&format!("/v1/sandboxes/{sb}/execs/{e}"), &t),
        200,
        "exec",
    );
    assert_eq!(w["exit"]["code"], 0);
    let e2 = exec(
        &s,
        &t,
        &sb,
        json!({"argv": ["sh", "-c", "cat f.txt; echo after >> f.txt"], "workspace": ws}),
    );
    let (out, _, last) = ndjson_output(&s, &t, &sb, &e2);
    assert_eq!(out, b"before\n");
    assert_eq!(last["exit"]["code"], 0);
    let c = ok(
        &post_json(
            &s,
            &t,
            &format!("/v1/sandboxes/{sb}/workspaces/{ws}/commit"),
            json!({"message": "after a restart"}),
        ),
        200,
        "commit",
    );
    assert_eq!(c["outcome"], "committed");
    assert_eq!(env.ok(&["cat", "p/main", "f.txt"]), b"before\nafter\n");
}

#[test]
fn exec_streams_over_a_websocket_stdin_in_tagged_output_out_and_resize() {
    require_root();
    let env = Env::new();
    let st = SbState::new(&env);
    let s = start(&env, &st);
    let (t, _) = token(&env, &[]);
    create_project(&s, &t, "p");
    let sb = create_sandbox(&s, &t, json!({"project": "p"}));
    mount(&s, &t, &sb, "p/main");
    let sock = s.addr.strip_prefix("unix:").unwrap().to_string();
    let rt = tokio::runtime::Runtime::new().unwrap();

    // Pipes: stdin echoed to stdout, a line on stderr, exit 3.
    let e = exec(
        &s,
        &t,
        &sb,
        json!({"argv": ["sh", "-c", "cat; echo err >&2; exit 3"], "stdin": true}),
    );
    let (out, err, end) = rt.block_on(ws_session(
        &sock,
        &t,
        &format!("/v1/sandboxes/{sb}/execs/{e}/ws"),
        vec![
            WsIn::Bin(b"ping\n".to_vec()),
            WsIn::Text(json!({"type": "close_stdin"})),
        ],
    ));
    assert_eq!(out, b"ping\n");
    assert_eq!(err, b"err\n");
    assert_eq!(end["exit"]["code"], 3, "{end}");

    // A terminal: resize, then the command reads the new size.
    let e = exec(
        &s,
        &t,
        &sb,
        json!({"argv": ["sh", "-c", "read x; stty size"], "stdin": true, "tty": true, "tty_size": [24, 80]}),
    );
    let (out, _, end) = rt.block_on(ws_session(
        &sock,
        &t,
        &format!("/v1/sandboxes/{sb}/execs/{e}/ws"),
        vec![
            WsIn::Text(json!({"type": "resize", "rows": 30, "cols": 100})),
            WsIn::Bin(b"go\n".to_vec()),
        ],
    ));
    assert!(
        String::from_utf8_lossy(&out).contains("30 100"),
        "{:?}",
        String::from_utf8_lossy(&out)
    );
    assert_eq!(end["exit"]["code"], 0, "{end}");

    // A client that goes away from a command that never ends frees the
    // exec's one output attachment: the next reader is not refused (409).
    let e = exec(&s, &t, &sb, json!({"argv": ["cat"], "stdin": true}));
    rt.block_on(async {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let stream = tokio::net::UnixStream::connect(&sock).await.unwrap();
        let mut req = format!("ws://strata/v1/sandboxes/{sb}/execs/{e}/ws")
            .into_client_request()
            .unwrap();
        req.headers_mut()
            .insert("Authorization", format!("Bearer {t}").parse().unwrap());
        let (mut ws, _) = tokio_tungstenite::client_async(req, stream).await.unwrap();
        ws.close(None).await.unwrap();
    });
    let again = |s: &Server| {
        s.get(
            &format!("/v1/sandboxes/{sb}/execs/{e}/output?follow=false"),
            &t,
        )
        .status
    };
    let t0 = std::time::Instant::now();
    while again(&s) == 409 && t0.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(
        again(&s),
        200,
        "the output is still attached to a gone client"
    );
    ok(
        &s.post(
            &format!("/v1/sandboxes/{sb}/execs/{e}/stdin/close"),
            &t,
            b"",
            "application/json",
        ),
        200,
        "close stdin",
    );

    // Not a WebSocket request: 400 with the error shape.
    let r = s.get(&format!("/v1/sandboxes/{sb}/execs/{e}/ws"), &t);
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "invalid_input");
    // Without a token: 401 before any upgrade.
    let r = s.req(
        "GET",
        &format!("/v1/sandboxes/{sb}/execs/{e}/ws"),
        None,
        None,
    );
    assert_eq!(r.status, 401);
}

#[test]
fn tls_with_a_generated_certificate_is_reached_by_its_pin_and_refuses_another() {
    let env = Env::new();
    let (t, _) = token(&env, &[]);
    // Without TLS, a non-loopback address is refused with what to do.
    let out = env
        .cmd(&["serve", "--listen", "tcp:0.0.0.0:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--tls-generate"), "{err}");

    let s = Server::start(&env, &["--listen", "tcp:127.0.0.1:0", "--tls-generate"]);
    assert_eq!(s.ready["tls"], true, "{}", s.ready);
    let fp_text = s.ready["fingerprint"].as_str().unwrap().to_string();
    assert!(
        fp_text.starts_with("sha256:") && fp_text.len() == 71,
        "{fp_text}"
    );
    let fp = strata_server_fingerprint(&fp_text);
    let addr = s.addr.strip_prefix("tcp:").unwrap().to_string();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let r = rt.block_on(tls_get(&addr, fp, "/v1/projects", &t)).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["projects"], json!([]));
    // The wrong pin: the handshake fails, nothing is sent.
    let mut wrong = fp;
    wrong[0] ^= 1;
    let e = rt
        .block_on(tls_get(&addr, wrong, "/v1/projects", &t))
        .expect_err("a wrong fingerprint must be refused");
    assert!(e.to_string().contains("fingerprint"), "{e}");
    // Plain HTTP to the TLS port gets no HTTP answer.
    let raw = exchange(
        std::net::TcpStream::connect(&addr).unwrap(),
        b"GET /v1/healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert!(
        !raw.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&raw)
    );
    drop(s);
    // The certificate is kept (0600) and reused: the pin survives a restart.
    let key = env.store.join("server-tls-key.pem");
    let mode = std::fs::metadata(&key).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
    let s2 = Server::start(&env, &["--listen", "tcp:127.0.0.1:0", "--tls-generate"]);
    assert_eq!(s2.ready["fingerprint"], fp_text.as_str());
    drop(s2);

    // A given certificate and key (here the generated pair, copied): the
    // same fingerprint, and a pinning client gets through.
    let (cert, key) = (env.path("c.pem"), env.path("k.pem"));
    std::fs::copy(env.store.join("server-tls-cert.pem"), &cert).unwrap();
    std::fs::copy(key_of(&env), &key).unwrap();
    let s3 = Server::start(
        &env,
        &[
            "--listen",
            "tcp:127.0.0.1:0",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    assert_eq!(s3.ready["fingerprint"], fp_text.as_str());
    let addr = s3.addr.strip_prefix("tcp:").unwrap().to_string();
    let r = rt.block_on(tls_get(&addr, fp, "/v1/projects", &t)).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    drop(s3);
    // A key file that is no key: refused at start with what to give.
    std::fs::write(&key, b"not a key\n").unwrap();
    let out = env
        .cmd(&[
            "serve",
            "--listen",
            "tcp:127.0.0.1:0",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("PRIVATE KEY") && err.contains("--tls-key"),
        "{err}"
    );
}

#[test]
fn bad_input_on_the_sandbox_routes_is_4xx_never_5xx_and_the_server_lives() {
    require_root();
    let env = Env::new();
    let st = SbState::new(&env);
    let sock = env.path("s.sock");
    let s = Server::start_with(
        &env,
        &[
            "--listen",
            &format!("unix:{}", sock.display()),
            "--max-body-mib",
            "1",
        ],
        &st.vars(),
    );
    let (all, _) = token(&env, &[]);
    let (ta, _) = token(&env, &["a"]);
    create_project(&s, &all, "a");
    let sb = create_sandbox(&s, &all, json!({"project": "a"}));
    mount(&s, &all, &sb, "a/main");

    let code = |r: &Resp| r.json()["error"]["code"].as_str().unwrap_or("").to_string();
    // 401: no token, a wrong token, on the new routes and the relay.
    for path in [
        "/v1/sandboxes".to_string(),
        format!("/v1/sandboxes/{sb}/workspaces"),
    ] {
        let r = s.req("GET", &path, None, None);
        assert_eq!(r.status, 401);
        let r = s.req("GET", &path, Some("strata_0000000000000000_00"), None);
        assert_eq!(r.status, 401);
    }
    // 415, 400, 422, 413 on create.
    let r = s.post("/v1/sandboxes", &all, b"{}", "text/plain");
    assert_eq!((r.status, code(&r)), (415, "unsupported_media_type".into()));
    let r = s.post("/v1/sandboxes", &all, b"{not json", "application/json");
    assert_eq!(r.status, 400);
    let r = post_json(
        &s,
        &all,
        "/v1/sandboxes",
        json!({"project": "a", "rootfs": "/"}),
    );
    assert_eq!(r.status, 422, "{}", r.text());
    let r = post_json(
        &s,
        &all,
        "/v1/sandboxes",
        json!({"project": "a", "expose": ["/etc"]}),
    );
    assert_eq!(r.status, 422, "host paths are not offered: {}", r.text());
    let big = vec![b' '; 2 << 20];
    let r = s.post("/v1/sandboxes", &all, &big, "application/json");
    assert_eq!(r.status, 413);
    // Limits the Sandbox could not start with: 400 naming the limit, not
    // a backend failure.
    for (body, word) in [
        (json!({"project": "a", "cpus": -1}), "cpus"),
        (json!({"project": "a", "cpus": 0.0001}), "cpus"),
        (json!({"project": "a", "memory": 1}), "memory"),
        (json!({"project": "a", "pids": 1}), "pids"),
    ] {
        let r = post_json(&s, &all, "/v1/sandboxes", body.clone());
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert!(r.text().contains(word), "{}", r.text());
    }
    let r = post_json(
        &s,
        &all,
        "/v1/sandboxes",
        json!({"project": "a", "network": "bridge"}),
    );
    assert_eq!(r.status, 422, "{}", r.text());
    let r = post_json(&s, &all, "/v1/sandboxes", json!({"project": "nope"}));
    assert_eq!(r.status, 404, "{}", r.text());
    // Queries.
    assert_eq!(s.get("/v1/sandboxes?label=novalue", &all).status, 400);
    assert_eq!(s.get("/v1/sandboxes?color=red", &all).status, 400);
    assert_eq!(
        s.get(&format!("/v1/sandboxes/{sb}/logs?lines=x"), &all)
            .status,
        400
    );
    assert_eq!(
        s.get(
            &format!("/v1/sandboxes/{sb}/execs/x1/output?format=xml"),
            &all
        )
        .status,
        400
    );
    // Unknown IDs and routes.
    for p in [
        "/v1/sandboxes/sb-nothex".to_string(),
        "/v1/sandboxes/..%2F..%2Fetc/workspaces".into(),
        format!("/v1/sandboxes/{sb}/execs/x0000000000000000"),
        format!("/v1/sandboxes/{sb}/nosuchroute"),
    ] {
        let r = s.get(&p, &all);
        assert_eq!(r.status, 404, "{p}: {}", r.text());
    }
    // Mutated bodies on create (scoped token, so a valid mutation cannot
    // make a Sandbox of another project) and on the relayed routes.
    let seeds: Vec<(String, Value)> = vec![
        (
            "/v1/sandboxes".into(),
            json!({"project": "zz", "name": "n", "labels": {"k": "v"}, "memory": 1}),
        ),
        (
            format!("/v1/sandboxes/{sb}/workspaces"),
            json!({"ref": "a/main", "at": "/w2"}),
        ),
        (
            format!("/v1/sandboxes/{sb}/execs"),
            json!({"argv": ["true"], "env": {"A": "b"}, "timeout_ms": 1000}),
        ),
    ];
    let mut n = 0;
    for (path, seed) in &seeds {
        let text = seed.to_string().into_bytes();
        for i in 0..text.len() {
            for b in [b'"', b'{', b'}', 0xff, b'0', b'\\'] {
                let mut m = text.clone();
                m[i] = b;
                let tok = if path == "/v1/sandboxes" { &ta } else { &all };
                let r = s.post(path, tok, &m, "application/json");
                assert!(
                    r.status < 500,
                    "{path} {:?}: {} {}",
                    String::from_utf8_lossy(&m),
                    r.status,
                    r.text()
                );
                n += 1;
            }
        }
    }
    assert!(n > 300, "{n} mutated bodies");
    assert_eq!(s.req("GET", "/v1/healthz", None, None).status, 200);
    // Nothing the scoped token sent made a Sandbox.
    let listed = ok(&s.get("/v1/sandboxes", &all), 200, "list");
    assert_eq!(listed["sandboxes"].as_array().unwrap().len(), 1, "{listed}");
}

#[test]
fn sigterm_ends_open_exec_streams_and_the_sandboxes_keep_running() {
    require_root();
    let env = Env::new();
    let st = SbState::new(&env);
    let mut s = start(&env, &st);
    let (t, _) = token(&env, &[]);
    create_project(&s, &t, "p");
    let sb = create_sandbox(&s, &t, json!({"project": "p"}));
    mount(&s, &t, &sb, "p/main");
    let e = exec(
        &s,
        &t,
        &sb,
        json!({"argv": ["sh", "-c", "echo started; exec sleep 1000"]}),
    );
    // A follower of the output of a command that does not end.
    let sock = s.addr.strip_prefix("unix:").unwrap().to_string();
    let req = format!(
        "GET /v1/sandboxes/{sb}/execs/{e}/output?format=ndjson HTTP/1.1\r\nHost: s\r\nConnection: close\r\nAuthorization: Bearer {t}\r\n\r\n"
    );
    let reader = std::thread::spawn(move || {
        exchange(
            std::os::unix::net::UnixStream::connect(sock).unwrap(),
            req.as_bytes(),
        )
    });
    std::thread::sleep(std::time::Duration::from_millis(500));
    let t0 = std::time::Instant::now();
    // SIGTERM, as systemd stops it.
    let pid = rustix::process::Pid::from_raw(s.child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let status = loop {
        if let Some(st) = s.child.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(20),
            "the server did not finish its shutdown with a stream open"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    let raw = reader.join().unwrap();
    let r = parse(&raw);
    assert_eq!(r.status, 200);
    let first: Value = serde_json::from_str(r.text().lines().next().unwrap()).unwrap();
    assert_eq!(first["stream"], "stdout", "{}", r.text());
    // The Sandbox and its command outlive the server.
    let s = start(&env, &st);
    assert_eq!(
        ok(&s.get(&format!("/v1/sandboxes/{sb}"), &t), 200, "get")["state"],
        "running"
    );
    let x = ok(
        &s.get(&format!("/v1/sandboxes/{sb}/execs/{e}"), &t),
        200,
        "exec",
    );
    assert_eq!(x["state"], "running", "{x}");
}

/// The generated TLS key in the Store directory.
fn key_of(env: &Env) -> std::path::PathBuf {
    env.store.join("server-tls-key.pem")
}
