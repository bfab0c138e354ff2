//! `strata serve` end to end: the real binary on a temporary Unix socket
//! (and loopback TCP), spoken to over plain HTTP/1.1, with results read
//! back from the Store by the `strata` CLI on the Store directory itself.

mod common;

mod serve_common;

use std::path::{Path, PathBuf};

use base64::Engine;
use common::{entry_names, Env};
use serde_json::json;
use serve_common::*;

#[test]
fn a_change_set_is_one_commit_read_back_through_the_api_and_the_store() {
    let env = Env::new();
    let (t, id) = token(&env, &[]);
    let s = Server::unix(&env);
    // The socket is 0600.
    let sock = PathBuf::from(s.addr.strip_prefix("unix:").unwrap());
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&sock).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);

    let h0 = create_project(&s, &t, "web");
    let bin: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
    let r = commit(
        &s,
        &t,
        "web/branches/main",
        &h0,
        json!([
            {"op": "put", "path": "src/index.html", "content": "<h1>hi</h1>\n"},
            {"op": "put", "path": "bin/tool", "content_base64":
                base64::engine::general_purpose::STANDARD.encode(&bin), "mode": 0o755},
            {"op": "symlink", "path": "latest", "target": "src/index.html"},
            {"op": "mkdir", "path": "empty"}
        ]),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let c1 = r.json()["commit"].as_str().unwrap().to_string();
    assert_eq!(r.json()["parent"], h0.as_str());

    // Read back from the Store directly, not through the server.
    assert_eq!(head(&env, "web/main"), c1);
    assert_eq!(
        env.ok(&["cat", "web/main", "src/index.html"]),
        b"<h1>hi</h1>\n"
    );
    assert_eq!(env.ok(&["cat", "web/main", "bin/tool"]), bin);
    let ls = env.json(&["ls", "web/main"]);
    assert_eq!(entry_names(&ls), ["bin", "empty", "latest", "src"]);
    let log = env.json(&["log", "web/main", "-n", "1"]);
    assert_eq!(log[0]["message"], "via api");
    assert_eq!(log[0]["metadata"]["strata.serve.token"], id.as_str());

    // And through the API: cat (whole and a range), stat, ls, log, diff.
    let r = s.get("/v1/projects/web/cat?ref=main&path=bin/tool", &t);
    assert_eq!(r.status, 200);
    assert_eq!(r.body, bin);
    let r = s.get_range(
        "/v1/projects/web/cat?ref=main&path=bin/tool",
        &t,
        "bytes=1000-1999",
    );
    assert_eq!(r.status, 206, "{}", r.text());
    assert_eq!(r.body, &bin[1000..2000]);
    assert_eq!(r.header("content-range"), Some("bytes 1000-1999/300000"));
    let r = s.get_range(
        "/v1/projects/web/cat?ref=main&path=bin/tool",
        &t,
        "bytes=300000-",
    );
    assert_eq!(r.status, 416, "{}", r.text());
    let r = s.get(
        &format!("/v1/projects/web/stat?ref={}&path=bin/tool", &c1[..12]),
        &t,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["mode"], 0o755);
    assert_eq!(r.json()["size"], 300_000);
    assert_eq!(r.json()["type"], "file");
    let r = s.get("/v1/projects/web/stat?ref=main&path=latest", &t);
    assert_eq!(r.json()["target"], "src/index.html");
    let r = s.get("/v1/projects/web/ls?ref=main&path=src", &t);
    assert_eq!(r.json()["entries"][0]["name"], "index.html");
    let r = s.get("/v1/projects/web/log?ref=main", &t);
    assert_eq!(r.json()["commits"].as_array().unwrap().len(), 2);
    let r = s.get(&format!("/v1/projects/web/diff?from={h0}&to=main"), &t);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("\"src/index.html\""), "{}", r.text());

    // A stale expected head: 409 with the actual head, nothing written.
    let before = log_len(&env, "web/main");
    let r = commit(
        &s,
        &t,
        "web/branches/main",
        &h0,
        json!([{"op": "put", "path": "x", "content": "lost"}]),
    );
    assert_eq!(r.status, 409, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "conflict");
    assert_eq!(r.json()["error"]["actual_head"], c1.as_str());
    assert_eq!(log_len(&env, "web/main"), before);
    assert_eq!(head(&env, "web/main"), c1);
    env.fails(&["cat", "web/main", "x"], 1);

    // Delete, chmod and replace in one commit; a bad change in a set
    // writes nothing.
    let r = commit(
        &s,
        &t,
        "web/branches/main",
        &c1,
        json!([
            {"op": "delete", "path": "latest"},
            {"op": "chmod", "path": "bin/tool", "mode": 0o700},
            {"op": "delete", "path": "nope"}
        ]),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(head(&env, "web/main"), c1);
    let r = commit(
        &s,
        &t,
        "web/branches/main",
        &c1,
        json!([
            {"op": "delete", "path": "latest"},
            {"op": "chmod", "path": "bin/tool", "mode": 0o700},
            {"op": "put", "path": "src/index.html", "content": "v2"}
        ]),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(env.ok(&["cat", "web/main", "src/index.html"]), b"v2");
    env.fails(&["cat", "web/main", "latest"], 1);
    let st = env.json(&["ls", "web/main", "bin/tool"]);
    let st = if st.is_array() { st[0].clone() } else { st };
    assert_eq!(st["mode"], "0700", "{st}");

    // Branches: create from REF, list, delete.
    let r = s.req(
        "POST",
        "/v1/projects/web/branches",
        Some(&t),
        Some(&json!({"name": "agent-1", "from": "main"})),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(env.ok(&["cat", "web/agent-1", "src/index.html"]), b"v2");
    let r = s.get("/v1/projects/web/branches", &t);
    assert_eq!(r.json()["branches"].as_array().unwrap().len(), 2);
    let r = s.req(
        "DELETE",
        "/v1/projects/web/branches/agent-1",
        Some(&t),
        None,
    );
    assert_eq!(r.status, 204, "{}", r.text());
    env.fails(&["log", "web/agent-1"], 1);
}

#[test]
fn a_scoped_token_sees_and_touches_only_its_projects() {
    let env = Env::new();
    let (admin, _) = token(&env, &[]);
    let (scoped, _) = token(&env, &["a"]);
    let s = Server::unix(&env);
    let ha = create_project(&s, &admin, "a");
    let hb = create_project(&s, &admin, "b");
    let r = commit(
        &s,
        &admin,
        "b/branches/main",
        &hb,
        json!([{"op": "put", "path": "secret", "content": "b's"}]),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let b1 = r.json()["commit"].as_str().unwrap().to_string();

    let r = s.get("/v1/projects", &scoped);
    assert_eq!(r.json()["projects"], json!(["a"]));
    for path in [
        "/v1/projects/b/branches".to_string(),
        "/v1/projects/b/log?ref=main".to_string(),
        "/v1/projects/b/cat?ref=main&path=secret".to_string(),
        "/v1/projects/b/ls?ref=main".to_string(),
        format!("/v1/projects/a/cat?ref={b1}&path=secret"),
        format!("/v1/projects/a/log?ref={}", &b1[..10]),
    ] {
        let r = s.get(&path, &scoped);
        assert_eq!(r.status, 404, "{path}: {}", r.text());
        assert!(!r.text().contains("b's"));
    }
    // Out of scope reads exactly like a project that does not exist.
    let r1 = s.get("/v1/projects/b/branches", &scoped);
    let r2 = s.get("/v1/projects/zz/branches", &admin);
    assert_eq!(r1.text(), r2.text().replace("zz", "b"));
    // It cannot write there, branch there, or fork b's history into a.
    let r = commit(
        &s,
        &scoped,
        "b/branches/main",
        &b1,
        json!([{"op": "put", "path": "secret", "content": "mine"}]),
    );
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(env.ok(&["cat", "b/main", "secret"]), b"b's");
    assert_eq!(head(&env, "b/main"), b1);
    let r = s.req(
        "POST",
        "/v1/projects/a/branches",
        Some(&scoped),
        Some(&json!({"name": "steal", "from": b1})),
    );
    assert_eq!(r.status, 404, "{}", r.text());
    env.fails(&["log", "a/steal"], 1);
    let r = s.req(
        "DELETE",
        "/v1/projects/b/branches/main",
        Some(&scoped),
        None,
    );
    assert_eq!(r.status, 404);
    assert_eq!(head(&env, "b/main"), b1);
    let r = s.req(
        "POST",
        "/v1/projects",
        Some(&scoped),
        Some(&json!({"name": "c"})),
    );
    assert_eq!(r.status, 403, "{}", r.text());
    // Its own project works, commit ids of its history included.
    let r = commit(
        &s,
        &scoped,
        "a/branches/main",
        &ha,
        json!([{"op": "put", "path": "f", "content": "a's"}]),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let r = s.get(&format!("/v1/projects/a/log?ref={}", &ha[..8]), &scoped);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(env.ok(&["cat", "a/main", "f"]), b"a's");
}

#[test]
fn bad_requests_get_4xx_with_an_error_body_and_never_a_5xx() {
    let env = Env::new();
    let (t, id) = token(&env, &[]);
    let s = Server::start(
        &env,
        &[
            "--listen",
            &format!("unix:{}", env.path("s.sock").display()),
            "--max-body-mib",
            "1",
        ],
    );
    let h0 = create_project(&s, &t, "p");

    // Authentication.
    let r = s.req("GET", "/v1/healthz", None, None);
    assert_eq!((r.status, r.json()["status"].clone()), (200, json!("ok")));
    for bad in [
        None,
        Some("nope"),
        Some(&t[..t.len() - 1]),
        Some("strata_00_00"),
    ] {
        let r = s.req("GET", "/v1/projects", bad, None);
        assert_eq!(r.status, 401, "{bad:?}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], "unauthorized");
    }
    let r = s.req("GET", "/v1/openapi.json", None, None);
    assert_eq!(r.status, 401);
    env.ok(&["token", "revoke", &id]);
    let r = s.get("/v1/projects", &t);
    assert_eq!(r.status, 401, "a revoked token still works: {}", r.text());
    let (t, _) = token(&env, &[]);

    // 413, 422, 415, 400.
    let big = json!({"expected_head": h0, "changes": [{"op": "put", "path": "big", "content": "x".repeat(2 << 20)}]});
    let r = s.req(
        "POST",
        "/v1/projects/p/branches/main/commits",
        Some(&t),
        Some(&big),
    );
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(log_len(&env, "p/main"), 1);
    let r = s.req(
        "POST",
        "/v1/projects",
        Some(&t),
        Some(&json!({"name": "q", "colour": "red"})),
    );
    assert_eq!(r.status, 422, "{}", r.text());
    assert!(r.text().contains("colour"), "{}", r.text());
    let r = s.post("/v1/projects", &t, br#"{"name":"q"}"#, "text/plain");
    assert_eq!(r.status, 415, "{}", r.text());
    let r = s.post("/v1/projects", &t, b"{\"name\":", "application/json");
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "invalid_json");
    env.fails(&["log", "q/main"], 1);

    // A mutated-body corpus on every route: never a 5xx.
    let c = commit(
        &s,
        &t,
        "p/branches/main",
        &h0,
        json!([{"op": "put", "path": "a/b", "content": "x"}]),
    );
    let c1 = c.json()["commit"].as_str().unwrap().to_string();
    let routes: Vec<(&str, String)> = vec![
        ("GET", "/v1/projects".into()),
        ("POST", "/v1/projects".into()),
        ("GET", "/v1/projects/p/branches".into()),
        ("POST", "/v1/projects/p/branches".into()),
        ("DELETE", "/v1/projects/p/branches/zz".into()),
        ("POST", "/v1/projects/p/branches/main/commits".into()),
        ("GET", "/v1/projects/p/log?ref=main".into()),
        ("GET", "/v1/projects/p/diff?from=main&to=main".into()),
        ("GET", "/v1/projects/p/ls?ref=main".into()),
        ("GET", "/v1/projects/p/stat?ref=main&path=a".into()),
        ("GET", "/v1/projects/p/cat?ref=main&path=a/b".into()),
        ("GET", "/v1/projects/p/tar?ref=main".into()),
        (
            "POST",
            format!("/v1/projects/p/branches/main/tar?expected_head={c1}"),
        ),
    ];
    let bodies: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"null".to_vec(),
        b"[]".to_vec(),
        b"\"x\"".to_vec(),
        b"{}".to_vec(),
        b"{\"name\": 5}".to_vec(),
        b"{\"name\": \"../x\"}".to_vec(),
        b"{\"name\": \"\\u0000\"}".to_vec(),
        b"{\"name\": \"ok\", \"from\": \"../../etc\"}".to_vec(),
        vec![0xff, 0xfe, 0x00],
        format!("{{\"expected_head\": \"{c1}\", \"changes\": []}}").into_bytes(),
        br#"{"expected_head": "zz", "changes": [{"op": "put", "path": "a"}]}"#.to_vec(),
        format!("{{\"expected_head\": \"{c1}\", \"changes\": [{{\"op\": \"put\", \"path\": \"/etc/x\", \"content\": \"\"}}]}}").into_bytes(),
        format!("{{\"expected_head\": \"{c1}\", \"changes\": [{{\"op\": \"put\", \"path\": \"a/b/c\", \"content\": \"\"}}]}}").into_bytes(),
        format!("{{\"expected_head\": \"{c1}\", \"changes\": [{{\"op\": \"put\", \"path\": \"a\", \"content\": \"\"}}]}}").into_bytes(),
        format!("{{\"expected_head\": \"{c1}\", \"changes\": [{{\"op\": \"chmod\", \"path\": \"a\", \"mode\": 99999}}]}}").into_bytes(),
        format!("{{\"expected_head\": \"{c1}\", \"changes\": [{{\"op\": \"put\", \"path\": \"q\", \"content_base64\": \"!!\"}}]}}").into_bytes(),
        format!("{{\"expected_head\": \"{c1}\", \"changes\": [{{\"op\": \"symlink\", \"path\": \"a/./b\", \"target\": \"\"}}]}}").into_bytes(),
        format!("{{\"expected_head\": \"{c1}\", \"changes\": [{{\"op\": \"frob\", \"path\": \"a\"}}]}}").into_bytes(),
        format!("{{\"expected_head\": \"{c1}\", \"changes\": [{{\"op\": \"delete\", \"path\": \"{}\"}}]}}", "d/".repeat(3000) + "x").into_bytes(),
        format!("{{\"expected_head\": \"{c1}\", \"changes\": [{{\"op\": \"mkdir\", \"path\": \"{}\"}}]}}", "n".repeat(300)).into_bytes(),
        "[".repeat(10_000).into_bytes(),
    ];
    let queries = [
        "",
        "?ref=",
        "?ref=..%2F..",
        "?ref=main&path=%00",
        "?ref=main&path=a//b",
        "?ref=main&limit=-1",
        "?ref=ffffffff",
        "?x=1",
        "?ref=main&path=../a",
    ];
    let mut seen = std::collections::BTreeSet::new();
    for (method, path) in &routes {
        for body in &bodies {
            let ctype = if path.contains("/tar?") {
                "application/x-tar"
            } else {
                "application/json"
            };
            let r = s.raw(method, path, Some(&t), Some(body), ctype, &[]);
            assert!(
                r.status < 500,
                "{method} {path} {:?}: {} {}",
                String::from_utf8_lossy(body),
                r.status,
                r.text()
            );
            if r.status >= 400 && r.status != 405 {
                assert!(
                    r.json()["error"]["message"].is_string(),
                    "{method} {path}: {}",
                    r.text()
                );
            }
            seen.insert(r.status);
        }
        let base = path.split('?').next().unwrap();
        for q in queries {
            let r = s.raw(method, &format!("{base}{q}"), Some(&t), None, "", &[]);
            assert!(
                r.status < 500,
                "{method} {base}{q}: {} {}",
                r.status,
                r.text()
            );
        }
    }
    assert!(seen.contains(&400) && seen.contains(&422), "{seen:?}");
    // The server still answers, and the branch is where it was.
    let r = s.get("/v1/projects/p/branches", &t);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(head(&env, "p/main"), c1);
    let out = env.json(&["fsck"]);
    assert!(
        out.to_string().contains("\"ok\":true")
            || out["ok"] == true
            || out["problems"].as_array().is_some_and(|p| p.is_empty()),
        "{out}"
    );
}

#[test]
fn tokens_survive_a_killed_server_and_tcp_is_loopback_only() {
    let env = Env::new();
    let (t, _) = token(&env, &["w"]);
    let list = env.json(&["token", "list"]);
    assert!(
        !list.to_string().contains(&t[t.len() - 64..]),
        "token list shows the secret: {list}"
    );
    assert_eq!(list["tokens"][0]["projects"], json!(["w"]));
    let stored = std::fs::read_to_string(env.store.join("server-tokens.json")).unwrap();
    assert!(
        !stored.contains(&t[t.len() - 64..]),
        "the secret is stored in clear"
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(env.store.join("server-tokens.json"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);

    let err = env.fails(&["token", "create", "--project", "Bad/Name"], 2);
    assert!(err.contains("invalid project name"), "{err}");
    assert_eq!(
        env.json(&["token", "list"])["tokens"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    let mut s = Server::unix(&env);
    create_project(&s, &t, "w");
    // SIGKILL: no cleanup; the stale socket is replaced by the next start.
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    let s = Server::unix(&env);
    let r = s.get("/v1/projects/w/branches", &t);
    assert_eq!(r.status, 200, "{}", r.text());
    // A second server on the same live socket is refused.
    let out = env
        .cmd(&[
            "serve",
            "--listen",
            &format!("unix:{}", env.path("s.sock").display()),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already served"));

    let tcp = Server::start(&env, &["--listen", "tcp:127.0.0.1:0"]);
    assert!(tcp.addr.starts_with("tcp:127.0.0.1:"), "{}", tcp.addr);
    let r = tcp.req("GET", "/v1/projects", Some(&t), None);
    assert_eq!(r.json()["projects"], json!(["w"]));
    let r = tcp.req("GET", "/v1/projects", None, None);
    assert_eq!(r.status, 401);
    let err = env.fails(&["serve", "--listen", "tcp:0.0.0.0:7878"], 1);
    assert!(err.contains("--tls-generate"), "{err}");

    // Graceful shutdown on SIGTERM: exits 0 and removes its socket.
    let mut g = Server::start(
        &env,
        &[
            "--listen",
            &format!("unix:{}", env.path("g.sock").display()),
        ],
    );
    let pid = rustix::process::Pid::from_raw(g.child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let st = g.child.wait().unwrap();
    assert!(st.success(), "{st:?}");
    assert!(!Path::new(&env.path("g.sock")).exists());
}

#[test]
fn the_served_openapi_document_is_the_checked_in_one() {
    let env = Env::new();
    let (t, _) = token(&env, &[]);
    let s = Server::unix(&env);
    let r = s.get("/v1/openapi.json", &t);
    assert_eq!(r.status, 200);
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/api/server-openapi.json");
    let checked_in = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        r.text() == checked_in,
        "the served OpenAPI document differs from {}: regenerate it with \
         `STRATA_WRITE_OPENAPI=1 cargo test -p strata-server --test openapi`",
        file.display()
    );
    assert_eq!(r.json()["openapi"].as_str().unwrap().get(..3), Some("3.1"));
}

#[test]
fn a_commit_exports_as_tar_and_a_tar_imports_as_one_commit() {
    let env = Env::new();
    let (t, _) = token(&env, &[]);
    let s = Server::unix(&env);
    let h0 = create_project(&s, &t, "t");
    let bin: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let r = commit(
        &s,
        &t,
        "t/branches/main",
        &h0,
        json!([
            {"op": "put", "path": "d/e/big", "content_base64":
                base64::engine::general_purpose::STANDARD.encode(&bin), "mode": 0o640},
            {"op": "put", "path": "run.sh", "content": "#!/bin/sh\n", "mode": 0o755},
            {"op": "symlink", "path": "link", "target": "d/e/big"}
        ]),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let c1 = r.json()["commit"].as_str().unwrap().to_string();

    // Export, unpack with the system's tar, compare bytes and modes.
    let r = s.get("/v1/projects/t/tar?ref=main", &t);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/x-tar"));
    let archive = env.path("out.tar");
    std::fs::write(&archive, &r.body).unwrap();
    let out = env.path("out");
    std::fs::create_dir(&out).unwrap();
    let st = std::process::Command::new("tar")
        .arg("-xf")
        .arg(&archive)
        .arg("-C")
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(std::fs::read(out.join("d/e/big")).unwrap(), bin);
    let mode = |p: &str| {
        std::os::unix::fs::PermissionsExt::mode(
            &std::fs::symlink_metadata(out.join(p))
                .unwrap()
                .permissions(),
        ) & 0o7777
    };
    assert_eq!(mode("d/e/big"), 0o640);
    assert_eq!(mode("run.sh"), 0o755);
    assert_eq!(
        std::fs::read_link(out.join("link")).unwrap(),
        Path::new("d/e/big")
    );

    // Import a tar made by the system's tar: the branch's tree becomes
    // exactly its contents, in one commit.
    let src = env.path("src");
    std::fs::create_dir_all(src.join("x/y")).unwrap();
    std::fs::write(src.join("x/y/new.txt"), b"imported\n").unwrap();
    std::fs::write(src.join("top"), &bin[..1000]).unwrap();
    std::os::unix::fs::symlink("x/y/new.txt", src.join("ln")).unwrap();
    let tarball = std::process::Command::new("tar")
        .arg("-cf")
        .arg("-")
        .arg("-C")
        .arg(&src)
        .arg(".")
        .output()
        .unwrap();
    assert!(tarball.status.success());
    let path = format!("/v1/projects/t/branches/main/tar?expected_head={c1}&message=imp");
    let r = s.post(&path, &t, &tarball.stdout, "application/x-tar");
    assert_eq!(r.status, 201, "{}", r.text());
    let c2 = r.json()["commit"].as_str().unwrap().to_string();
    assert_eq!(head(&env, "t/main"), c2);
    assert_eq!(env.ok(&["cat", "t/main", "x/y/new.txt"]), b"imported\n");
    assert_eq!(env.ok(&["cat", "t/main", "top"]), &bin[..1000]);
    env.fails(&["cat", "t/main", "run.sh"], 1);
    let ls = env.json(&["ls", "t/main"]);
    assert_eq!(entry_names(&ls), ["ln", "top", "x"]);

    // Entries that climb out ("../f", "/abs"): 400, nothing written.
    std::fs::write(src.join("f"), b"evil").unwrap();
    for transform in ["s,^f,../f,", "s,^f,/abs/f,"] {
        let evil = std::process::Command::new("tar")
            .args(["-cf", "-", "-P", "--transform", transform, "-C"])
            .arg(&src)
            .arg("f")
            .output()
            .unwrap();
        assert!(evil.status.success());
        let p = format!("/v1/projects/t/branches/main/tar?expected_head={c2}");
        let r = s.post(&p, &t, &evil.stdout, "application/x-tar");
        assert_eq!(r.status, 400, "{transform}: {}", r.text());
        assert_eq!(head(&env, "t/main"), c2);
    }

    // A stale head: 409, nothing written; not a tar: 415; garbage: 400.
    let stale = format!("/v1/projects/t/branches/main/tar?expected_head={c1}");
    let r = s.post(&stale, &t, &tarball.stdout, "application/x-tar");
    assert_eq!(r.status, 409, "{}", r.text());
    assert_eq!(r.json()["error"]["actual_head"], c2.as_str());
    let fresh = format!("/v1/projects/t/branches/main/tar?expected_head={c2}");
    let r = s.post(&fresh, &t, &tarball.stdout, "application/json");
    assert_eq!(r.status, 415, "{}", r.text());
    let mut evil = tarball.stdout.clone();
    evil[..100].copy_from_slice(&[b'A'; 100]);
    let r = s.post(&fresh, &t, &evil[..700], "application/x-tar");
    assert!(r.status == 400, "{} {}", r.status, r.text());
    assert_eq!(head(&env, "t/main"), c2);
}

#[test]
fn concurrent_clients_on_one_branch_lose_no_commit() {
    // 8 clients commit 5 change sets each to the same branch, retrying on
    // 409 with the head they are told: every acknowledged commit must be
    // in the history with its bytes, none lost, none doubled.
    let env = Env::new();
    let (t, _) = token(&env, &[]);
    let s = Server::unix(&env);
    create_project(&s, &t, "c");
    let conflicts = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|sc| {
        for c in 0..8 {
            let (s, t, conflicts) = (&s, &t, &conflicts);
            sc.spawn(move || {
                let r = s.get("/v1/projects/c/branches", t);
                let mut head = r.json()["branches"][0]["head"].as_str().unwrap().to_string();
                for i in 0..5 {
                    loop {
                        let change =
                            json!([{"op": "put", "path": format!("c{c}/f{i}"), "content": format!("{c}-{i}")}]);
                        let r = commit(s, t, "c/branches/main", &head, change);
                        match r.status {
                            201 => {
                                head = r.json()["commit"].as_str().unwrap().to_string();
                                break;
                            }
                            409 => {
                                conflicts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                head = r.json()["error"]["actual_head"].as_str().unwrap().to_string();
                            }
                            other => panic!("client {c}: HTTP {other}: {}", r.text()),
                        }
                    }
                }
            });
        }
    });
    for c in 0..8 {
        for i in 0..5 {
            let got = env.ok(&["cat", "c/main", &format!("c{c}/f{i}")]);
            assert_eq!(got, format!("{c}-{i}").as_bytes());
        }
    }
    assert_eq!(log_len(&env, "c/main"), 41);
    eprintln!(
        "40 commits from 8 clients, {} CAS conflicts retried",
        conflicts.load(std::sync::atomic::Ordering::Relaxed)
    );
}
