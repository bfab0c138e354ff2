//! The file routes of a live Workspace over raw HTTP (a real daemon as
//! root, a real FUSE mount, commands as uid 1500): ranges (206, 416),
//! the write limit (413, nothing left behind), refused paths (400 before
//! anything opens), a symlink planted by a command as the last component
//! of a write and a delete, and the JSON error shape of every refusal
//! (415, 422, bad query) that axum used to answer in plain text.
//! The attacks in a real Sandbox and the round trip through the SDK are
//! in strata-sdk's `tests/files.rs`.

mod common;
use common::*;
use std::os::unix::fs::MetadataExt;

fn error_code(r: &Resp) -> String {
    assert_eq!(
        r.header("content-type"),
        Some("application/json"),
        "status {}: {}",
        r.status,
        r.text()
    );
    r.json()["error"]["code"].as_str().unwrap().to_string()
}

#[test]
fn ranges_limits_and_refused_paths() {
    let d = Daemon::start_configured(|c| c.max_write_bytes = Some(1 << 20));
    let (ws, path) = d.mount("f");
    let url = |route: &str, q: &str| format!("/v1/workspaces/{ws}/{route}?{q}");

    // Write 100 bytes, read them back whole and in ranges.
    let data: Vec<u8> = (0..100u8).collect();
    let r = d.req_bytes("PUT", &url("files", "path=sub/dir/r.bin&mode=0640"), &data);
    assert_eq!(r.status, 200, "{}", r.text());
    let e = r.json();
    assert_eq!(
        (e["kind"].as_str(), e["size"].as_u64(), e["mode"].as_u64()),
        (Some("file"), Some(100), Some(0o640))
    );
    let meta = std::fs::symlink_metadata(format!("{path}/sub/dir/r.bin")).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o777),
        (1500, 1500, 0o640)
    );
    let meta = std::fs::symlink_metadata(format!("{path}/sub")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (1500, 1500), "a made parent");
    let get = |range: Option<&str>| {
        let h = range.map(|r| format!("Range: {r}"));
        let extra: Vec<&str> = h.iter().map(String::as_str).collect();
        raw_request_with(
            &d.socket,
            "GET",
            &url("files", "path=/sub/dir/r.bin"),
            Some(&d.token),
            None,
            "",
            &extra,
        )
    };
    let r = get(None);
    assert_eq!((r.status, r.body.as_slice()), (200, data.as_slice()));
    assert_eq!(r.header("accept-ranges"), Some("bytes"));
    let r = get(Some("bytes=10-19"));
    assert_eq!(r.status, 206);
    assert_eq!(r.body, &data[10..20]);
    assert_eq!(r.header("content-range"), Some("bytes 10-19/100"));
    let r = get(Some("bytes=-5"));
    assert_eq!((r.status, r.body.as_slice()), (206, &data[95..]));
    let r = get(Some("bytes=90-500"));
    assert_eq!((r.status, r.body.as_slice()), (206, &data[90..]));
    // Several ranges are not served: the whole file.
    let r = get(Some("bytes=0-1,5-6"));
    assert_eq!((r.status, r.body.len()), (200, 100));
    let r = get(Some("bytes=100-"));
    assert_eq!(r.status, 416, "{}", r.text());
    assert_eq!(r.header("content-range"), Some("bytes */100"));
    assert_eq!(error_code(&r), "range_not_satisfiable");

    // Over the limit: 413 from the declared length, nothing written, no
    // temporary file left.
    let big = vec![7u8; (1 << 20) + 1];
    let r = d.req_bytes("PUT", &url("files", "path=big.bin"), &big);
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(error_code(&r), "payload_too_large");
    let r = d.req_bytes("PUT", &url("files", "path=sub/dir/r.bin"), &big);
    assert_eq!(r.status, 413);
    assert_eq!(
        std::fs::read(format!("{path}/sub/dir/r.bin")).unwrap(),
        data,
        "the old file was touched"
    );
    assert!(!std::path::Path::new(&format!("{path}/big.bin")).exists());
    let left: Vec<_> = std::fs::read_dir(&path)
        .unwrap()
        .chain(std::fs::read_dir(format!("{path}/sub/dir")).unwrap())
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".strata-put-"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");

    // Refused paths: 400 with the path in the message, before anything.
    for q in [
        "path=",
        "path=a%00b",
        "path=../x",
        "path=a/../../x",
        "path=..",
    ] {
        for (m, route) in [
            ("GET", "files"),
            ("GET", "stat"),
            ("DELETE", "files"),
            ("GET", "ls"),
        ] {
            let r = d.req(m, &url(route, q), None);
            assert_eq!(r.status, 400, "{m} {route}?{q}: {}", r.text());
            assert_eq!(error_code(&r), "invalid_input");
        }
        let r = d.req_bytes("PUT", &url("files", q), b"x");
        assert_eq!(r.status, 400, "PUT {q}: {}", r.text());
    }
    let r = d.req("GET", &url("files", "path=../etc/passwd"), None);
    assert!(r.text().contains("'..'"), "{}", r.text());
    for mode in ["9", "1000", "4755", "-1", "rw"] {
        let r = d.req_bytes("PUT", &url("files", &format!("path=m&mode={mode}")), b"x");
        assert_eq!(r.status, 400, "mode {mode}: {}", r.text());
    }
    // Missing: 404; unknown Workspace: 404; wrong kind: 409 with errno.
    let r = d.req("GET", &url("files", "path=nope"), None);
    assert_eq!((r.status, error_code(&r).as_str()), (404, "not_found"));
    assert!(r.text().contains("nope"), "{}", r.text());
    let r = d.req("GET", "/v1/workspaces/nope/files?path=a", None);
    assert_eq!(r.status, 404);
    let r = d.req("GET", &url("files", "path=sub"), None);
    assert_eq!((r.status, error_code(&r).as_str()), (409, "path_conflict"));
    assert_eq!(r.json()["error"]["errno"], libc::EISDIR);
    let r = d.req("DELETE", &url("files", "path=sub"), None);
    assert_eq!(r.json()["error"]["errno"], libc::ENOTEMPTY, "{}", r.text());
    let r = d.req("DELETE", &url("files", "path=sub&recursive=maybe"), None);
    assert_eq!((r.status, error_code(&r).as_str()), (400, "invalid_input"));

    // A symlink a command planted as the last component: a write
    // replaces it, a delete removes it; the target is untouched.
    let target = d.tmp.path().join("target.txt");
    std::fs::write(&target, b"keep\n").unwrap();
    let o = d.run(&[
        "sh",
        "-c",
        &format!(
            "ln -s {} l1 && ln -s {} l2",
            target.display(),
            target.display()
        ),
    ]);
    assert_eq!(o.code(), Some(0), "{}", o.err());
    let r = d.req_bytes("PUT", &url("files", "path=l1"), b"new\n");
    assert_eq!(r.status, 200, "{}", r.text());
    let r = d.req("DELETE", &url("files", "path=l2"), None);
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(std::fs::read(&target).unwrap(), b"keep\n");
    assert!(!std::fs::symlink_metadata(format!("{path}/l1"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(std::fs::symlink_metadata(format!("{path}/l2")).is_err());

    // ls and stat answer JSON of the documented shape.
    let r = d.req("GET", &url("ls", "path=/"), None);
    assert_eq!(r.status, 200, "{}", r.text());
    let names: Vec<String> = r.json()["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["dir", "hello.txt", "l1", "sub"]);
    let r = d.req("GET", &url("stat", "path=hello.txt"), None);
    assert_eq!(r.json()["size"], 6);
}

#[test]
fn every_refusal_is_a_json_error() {
    let d = Daemon::start();
    let (ws, _) = d.mount("j");
    let post = |p: &str, body: &[u8], ctype: &str| {
        raw_request(&d.socket, "POST", p, Some(&d.token), Some(body), ctype)
    };
    let rename = format!("/v1/workspaces/{ws}/rename");
    let r = post(&rename, br#"{"from":"a","to":"b"}"#, "text/plain");
    assert_eq!(
        (r.status, error_code(&r).as_str()),
        (415, "unsupported_media_type")
    );
    let r = post(
        &rename,
        br#"{"from":"a","to":"b","force":true}"#,
        "application/json",
    );
    assert_eq!((r.status, error_code(&r).as_str()), (422, "invalid_input"));
    assert!(r.text().contains("force"), "{}", r.text());
    let r = post(&rename, b"{\"from\":", "application/json");
    assert_eq!((r.status, error_code(&r).as_str()), (400, "invalid_input"));
    let r = post("/v1/execs", br#"{"argv":"sh"}"#, "application/json");
    assert_eq!((r.status, error_code(&r).as_str()), (422, "invalid_input"));
    let r = d.req("GET", "/v1/logs?tail=-1", None);
    assert_eq!((r.status, error_code(&r).as_str()), (400, "invalid_input"));
    let r = d.req("GET", "/v1/execs/x1/wait?timeout_ms=soon", None);
    assert_eq!((r.status, error_code(&r).as_str()), (400, "invalid_input"));
    // The rename and mkdir routes themselves.
    let r = d.req(
        "POST",
        &format!("/v1/workspaces/{ws}/mkdir"),
        Some(&serde_json::json!({"path": "a/b"})),
    );
    assert_eq!((r.status, error_code(&r).as_str()), (404, "not_found"));
    let r = d.req(
        "POST",
        &format!("/v1/workspaces/{ws}/mkdir"),
        Some(&serde_json::json!({"path": "a/b", "parents": true})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["kind"], "dir");
    let r = d.req(
        "POST",
        &rename,
        Some(&serde_json::json!({"from": "a", "to": "a/b/c"})),
    );
    assert_eq!(
        (r.status, error_code(&r).as_str()),
        (409, "path_conflict"),
        "{}",
        r.text()
    );
    let r = d.req(
        "POST",
        &rename,
        Some(&serde_json::json!({"from": "a", "to": "z"})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["name"], "z");
}
