//! Sandboxes under hostile requests, hostile commands, load and faults
//! (docs/security.md): the daemon endpoint refuses what it must with the right
//! status and no side effect (including fuzzed bodies); a command (uid
//! 1500) cannot read a token, connect to a daemon socket, read the Store,
//! signal or ptrace the daemon or init; 10 Sandboxes at once, 50
//! concurrent execs, a big stdout through a slow reader with the daemon's
//! memory bounded; a fork bomb and a memory hog hit their limits; a killed
//! daemon is reported with its log tail, restarts, and its Workspace comes
//! back with its uncommitted work, which then commits.
//!
//! Its own `main` (harness = false): the binary is re-executed as the
//! Sandbox init, the daemon and the exec helper, and runs inside Sandboxes
//! as the probe (`probe ...`). `-- --ignored` runs the full form.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use strata_sdk::{Error, Limits, Sandbox, SandboxFilter, SandboxSpec, Store};
use strata_torture::{descendants_of, kill9, loadavg, proc_status_kb};

mod probe;

const RUN_LABEL: &str = "torture-run";

fn main() {
    strata_sdk::maybe_run_internal();
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("probe") {
        probe::main(&args[2..]);
        return;
    }
    strata_testkit::cases::require_root();
    let rt = tokio::runtime::Runtime::new().expect("tokio");
    let tmp = strata_torture::tempdir();
    let mut cases = strata_testkit::cases::Cases::from_args(&rt, tmp.path());
    let full = cases.full();
    // Each case in a directory of its own, named after it.
    macro_rules! case {
        ($f:ident) => {
            cases.run_in_own_dir(stringify!($f), async |d| $f(d, full).await)
        };
    }
    case!(endpoint_refuses_bad_requests_without_side_effects);
    case!(commands_cannot_reach_tokens_sockets_store_or_daemon);
    case!(ten_sandboxes_and_fifty_concurrent_execs);
    case!(big_stdout_slow_reader_bounded_daemon_memory);
    case!(fork_bomb_and_memory_hog_hit_their_limits);
    case!(killed_daemon_restarts_with_its_workspace_and_commits);
    case!(a_deep_tree_from_a_command_does_not_kill_the_daemon);
    // Close what failed cases left running.
    cases.finish(async {
        let mut f = SandboxFilter::default();
        f.labels
            .insert(RUN_LABEL.into(), std::process::id().to_string());
        for info in Sandbox::list(f).await.unwrap_or_default() {
            if let Ok(sb) = Sandbox::open(info.id.as_str()).await {
                eprintln!("closing leftover Sandbox {}", sb.id());
                let _ = sb.close().await;
            }
        }
    });
}

/// A request that must be refused: what, token, body, content type, the
/// status it must get.
type BadRequest<'a> = (&'a str, Option<String>, Vec<u8>, &'a str, u16);

fn spec(store: &Store) -> SandboxSpec {
    SandboxSpec::new(store.dir()).label(RUN_LABEL, std::process::id().to_string())
}

async fn store_with_project(dir: &Path) -> Store {
    store_with_project_and(dir, &[]).await
}

/// [`store_with_project`] whose base also holds `extra` files.
async fn store_with_project_and(dir: &Path, extra: &[(&str, &[u8])]) -> Store {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), b"base\n").unwrap();
    for (name, bytes) in extra {
        std::fs::write(src.join(name), bytes).unwrap();
    }
    // Writable by the commands' uid (1500), like the Workspace root.
    std::fs::set_permissions(
        src.join("f"),
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o666),
    )
    .unwrap();
    let store = Store::create(dir.join("store")).await.unwrap();
    store.create_project_from("p", &src).await.unwrap();
    store
}

/// The daemon's host pid: the descendant of the Sandbox's monitor running
/// `__strata-daemon`.
fn daemon_pid(sb: &Sandbox) -> u32 {
    let monitor: u32 = sb
        .info()
        .handle
        .as_deref()
        .and_then(|h| {
            h.split(|c: char| !c.is_ascii_digit())
                .find(|p| !p.is_empty())
        })
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no monitor pid in {:?}", sb.info().handle));
    // The daemon is the process whose argv[1] is its subcommand (the
    // init's argv holds only its own role and a descriptor number).
    descendants_of(monitor)
        .into_iter()
        .find(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .map(|c| c.split(|b| *b == 0).nth(1) == Some(strata_daemon::DAEMON_ARG.as_bytes()))
                .unwrap_or(false)
        })
        .unwrap_or_else(|| panic!("no daemon process under monitor {monitor}"))
}

/// One HTTP/1.1 request on a fresh connection (`Connection: close`):
/// the status, or 0 when the daemon closed the connection without one.
fn http(
    socket: &Path,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &[u8],
) -> (u16, String) {
    http_with(socket, method, path, token, body, "application/json")
}

fn http_with(
    socket: &Path,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &[u8],
    content_type: &str,
) -> (u16, String) {
    let mut s = UnixStream::connect(socket).expect("connect to the daemon socket");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: daemon\r\nConnection: close\r\n\
         Content-Type: {content_type}\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(t) = token {
        head.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    head.push_str("\r\n");
    // The daemon may answer (413, 401) and close before reading the whole
    // body: a failed write is expected then, the answer is what counts.
    let _ = s.write_all(head.as_bytes()).and_then(|_| s.write_all(body));
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, text)
}

fn token_of(sb: &Sandbox) -> String {
    std::fs::read_to_string(&sb.info().token_file)
        .unwrap()
        .trim()
        .to_string()
}

/// What the daemon holds, for "no side effect": its Workspaces and execs.
fn daemon_state(sb: &Sandbox) -> (String, String) {
    let (sock, tok) = (&sb.info().daemon.socket, token_of(sb));
    let (s1, w) = http(sock, "GET", "/v1/workspaces", Some(&tok), b"");
    let (s2, e) = http(sock, "GET", "/v1/execs", Some(&tok), b"");
    assert_eq!((s1, s2), (200, 200), "{w}\n{e}");
    let body = |t: &str| t.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (body(&w), body(&e))
}

async fn endpoint_refuses_bad_requests_without_side_effects(dir: &Path, full: bool) {
    let store = store_with_project(dir).await;
    let sb = Sandbox::create(spec(&store)).await.unwrap();
    let other = Sandbox::create(spec(&store)).await.unwrap();
    let ws = sb.mount("p/main", None).await.unwrap();
    let sock = sb.info().daemon.socket.clone();
    let tok = token_of(&sb);
    let before = daemon_state(&sb);
    let pwn = |extra: &str| {
        format!(
            r#"{{"argv":["sh","-c","echo pwned > {}/pwned"]{extra}}}"#,
            ws.path()
        )
        .into_bytes()
    };
    // (what, token, body, content type, wanted status)
    let cases: Vec<BadRequest> = vec![
        ("no token", None, pwn(""), "application/json", 401),
        (
            "wrong token",
            Some("0".repeat(64)),
            pwn(""),
            "application/json",
            401,
        ),
        (
            "empty token",
            Some(String::new()),
            pwn(""),
            "application/json",
            401,
        ),
        (
            "token prefix",
            Some(tok[..tok.len() - 1].to_string()),
            pwn(""),
            "application/json",
            401,
        ),
        (
            "another Sandbox's token",
            Some(token_of(&other)),
            pwn(""),
            "application/json",
            401,
        ),
        (
            "oversized body (9 MiB)",
            Some(tok.clone()),
            {
                let mut b = pwn(r#","env":{"PAD":""#);
                b.truncate(b.len() - 1);
                b.extend(std::iter::repeat_n(b'a', 9 << 20));
                b.extend_from_slice(b"\"}}");
                b
            },
            "application/json",
            413,
        ),
        (
            "malformed JSON",
            Some(tok.clone()),
            b"{\"argv\":[\"sh\",".to_vec(),
            "application/json",
            400,
        ),
        ("not JSON", Some(tok.clone()), pwn(""), "text/plain", 415),
        (
            "wrong types",
            Some(tok.clone()),
            br#"{"argv":"sh -c id"}"#.to_vec(),
            "application/json",
            422,
        ),
        (
            "unknown field",
            Some(tok.clone()),
            pwn(r#","usr":"0:0""#),
            "application/json",
            422,
        ),
    ];
    let mut wrong = Vec::new();
    for (what, token, body, ct, want) in &cases {
        let (status, text) = http_with(&sock, "POST", "/v1/execs", token.as_deref(), body, ct);
        if status != *want {
            wrong.push(format!("{what}: got {status}, want {want}: {:.200}", text));
        }
    }
    // Unknown fields in the other request bodies too.
    for (path, body) in [
        (
            "/v1/workspaces",
            r#"{"ref":"p/main","at":"/tmp/x","mode":"rw"}"#,
        ),
        (
            &*format!("/v1/workspaces/{}/commit", ws.id()),
            r#"{"message":"m","force":true}"#,
        ),
    ] {
        let (status, text) = http(&sock, "POST", path, Some(&tok), body.as_bytes());
        if status != 422 {
            wrong.push(format!(
                "unknown field on {path}: got {status}: {text:.200}"
            ));
        }
    }
    // Hostile mount points: relative, NUL, `..` into system directories,
    // the root, overlong, a file. Each a 4xx, no Workspace mounted.
    let long = format!("/tmp/{}", "x".repeat(5000));
    for at in [
        "relative/path",
        "/tmp/a\u{0}b",
        "/tmp/../etc",
        "/",
        "/proc/self",
        long.as_str(),
        "/etc/passwd",
    ] {
        let body = serde_json::json!({"ref": "p/main", "at": at}).to_string();
        let (status, text) = http(&sock, "POST", "/v1/workspaces", Some(&tok), body.as_bytes());
        if !(400..500).contains(&status) {
            wrong.push(format!("mount at {at:.60}: got {status}: {text:.200}"));
        }
    }
    assert!(wrong.is_empty(), "wrong answers:\n{}", wrong.join("\n"));
    // No side effect: same Workspaces and execs, no file written.
    assert_eq!(
        daemon_state(&sb),
        before,
        "a refused request changed the daemon"
    );
    let o = ws.exec(["ls", "-a"]).output().await.unwrap();
    assert!(!o.stdout_str().contains("pwned"), "{}", o.stdout_str());
    assert!(
        ws.status().await.unwrap().is_empty(),
        "the Workspace changed"
    );
    // Then fuzzed bodies (corpus/daemon, mutated) on every POST route:
    // never a 5xx, never a dropped connection (a panic in a handler shows
    // as one of those). A mutation can stay valid (2xx): that is allowed.
    let routes = [
        "/v1/workspaces".to_string(),
        "/v1/execs".into(),
        format!("/v1/workspaces/{}/commit", ws.id()),
        format!("/v1/workspaces/{}/unmount", ws.id()),
        "/v1/execs/x0/stdin".into(),
        "/v1/execs/x0/cancel".into(),
        "/v1/execs/x0/resize".into(),
    ];
    let corpus = probe::corpus();
    let n = if full { 2000 } else { 150 };
    let mut rng = rand::rng();
    for i in 0..n {
        let body = probe::mutate(&corpus[i % corpus.len()], &mut rng);
        let route = &routes[i % routes.len()];
        let (status, text) = http(&sock, "POST", route, Some(&tok), &body);
        if !(200..500).contains(&status) {
            wrong.push(format!(
                "fuzzed body {:?} on {route}: got {status}: {text:.200}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            ));
        }
    }
    assert!(sb.health().await.is_ok(), "the daemon died under fuzzing");
    sb.close().await.unwrap();
    other.close().await.unwrap();
    assert!(wrong.is_empty(), "wrong answers:\n{}", wrong.join("\n"));
}

async fn commands_cannot_reach_tokens_sockets_store_or_daemon(dir: &Path, _full: bool) {
    let store = store_with_project(dir).await;
    let sb = Sandbox::create(spec(&store)).await.unwrap();
    let other = Sandbox::create(spec(&store)).await.unwrap();
    let ws = sb.mount("p/main", None).await.unwrap();
    let exe = std::env::current_exe().unwrap().display().to_string();
    let mut secrets: Vec<PathBuf> = Vec::new();
    let mut sockets: Vec<PathBuf> = Vec::new();
    for s in [&sb, &other] {
        let i = s.info();
        secrets.extend([
            i.token_file.clone(),
            i.daemon.token_file.clone(),
            i.daemon.config.clone(),
            i.daemon.store.join("strata.db"),
        ]);
        sockets.push(i.daemon.socket.clone());
        if let Some(strata_sandbox_endpoint) = endpoint_path(s) {
            sockets.push(strata_sandbox_endpoint);
        }
    }
    secrets.push(store.dir().join("strata.db"));
    // The probe is this test binary (`probe all ...`), run as the
    // command (uid 1500) in the Workspace.
    let mut argv = vec![exe, "probe".into(), "all".into()];
    argv.extend(secrets.iter().map(|p| format!("read={}", p.display())));
    argv.extend(sockets.iter().map(|p| format!("connect={}", p.display())));
    // A positive control: the probe runs and reads the Workspace.
    argv.push(format!("expect-read={}/f", ws.path()));
    // Another exec of the same Sandbox (same uid) runs meanwhile: the
    // probe must not be able to ptrace it either.
    let mut other_exec = ws.exec(["sleep", "30"]).spawn().await.unwrap();
    let o = ws.exec(argv).output().await.unwrap();
    other_exec.cancel().await.unwrap();
    let report = o.stdout_str();
    eprintln!("{report}{}", o.stderr_str());
    assert!(o.status.success(), "the probe failed: {}", o.stderr_str());
    assert!(
        report.contains("CONTROL ok"),
        "the positive control failed: {report}"
    );
    let breaches: Vec<&str> = report.lines().filter(|l| l.starts_with("BREACH")).collect();
    assert!(breaches.is_empty(), "a command reached: {breaches:?}");
    // /proc lists no process of another uid (hidepid); PID 1 and 2 (the
    // init and the daemon, root) were attacked by number anyway.
    let tried = report.contains("\npid 1: ") && report.contains("\npid 2: ");
    assert!(tried && !report.contains("listed pid"), "{report}");
    assert!(
        report.contains("same-uid pid"),
        "the probe did not see the other exec: {report}"
    );
    assert!(sb.health().await.is_ok(), "the daemon stopped answering");
    sb.close().await.unwrap();
    other.close().await.unwrap();
}

fn endpoint_path(sb: &Sandbox) -> Option<PathBuf> {
    match &sb.info().endpoint {
        Some(strata_sandbox::backend::Endpoint::Unix { path }) => Some(path.clone()),
        _ => None,
    }
}

async fn ten_sandboxes_and_fifty_concurrent_execs(dir: &Path, full: bool) {
    let store = store_with_project(dir).await;
    let n_sb = 10;
    let mut tasks = Vec::new();
    for i in 0..n_sb {
        store.fork("p/main", &format!("p/s{i}")).await.unwrap();
        let sp = spec(&store);
        tasks.push(tokio::spawn(async move {
            let sb = Sandbox::create(sp).await.expect("create");
            let ws = sb.mount(&format!("p/s{i}"), None).await.expect("mount");
            let o = ws
                .exec(["sh", "-c", &format!("echo sandbox-{i} > who")])
                .output()
                .await
                .expect("exec");
            assert!(o.status.success(), "{}", o.stderr_str());
            ws.commit("who").await.expect("commit");
            sb
        }));
    }
    let mut sbs = Vec::new();
    for t in tasks {
        sbs.push(t.await.expect("a Sandbox task panicked"));
    }
    for i in 0..n_sb {
        let who = store.read_file(&format!("p/s{i}"), "who").await.unwrap();
        assert_eq!(who, format!("sandbox-{i}\n").as_bytes());
    }
    // 50 (full: 200) execs at once in one Sandbox, while 9 others run.
    let ws = sbs[0].workspaces().await.unwrap().remove(0);
    let n = if full { 200 } else { 50 };
    let t = Instant::now();
    let mut tasks = Vec::new();
    for k in 0..n {
        let b = ws.exec([
            "sh",
            "-c",
            &format!("echo out-{k}; sleep 0.3; echo err-{k} >&2; exit {}", k % 7),
        ]);
        tasks.push(tokio::spawn(b.output()));
    }
    for (k, t) in tasks.into_iter().enumerate() {
        let o = t.await.unwrap().unwrap_or_else(|e| panic!("exec {k}: {e}"));
        assert_eq!(o.stdout_str(), format!("out-{k}\n"));
        assert_eq!(o.stderr_str(), format!("err-{k}\n"));
        assert_eq!(o.status.code, Some(k as i32 % 7));
    }
    eprintln!(
        "{n_sb} Sandboxes; {n} concurrent execs in one: {:?}; load average {}",
        t.elapsed(),
        loadavg()
    );
    for sb in sbs {
        sb.close().await.unwrap();
    }
}

/// Bound on the daemon's resident memory growth while one command writes
/// far more than that to stdout through a slow reader (docs/reliability.md).
const DAEMON_GROWTH_BOUND_KB: u64 = 32 << 10;

async fn big_stdout_slow_reader_bounded_daemon_memory(dir: &Path, full: bool) {
    let store = store_with_project(dir).await;
    let sb = Sandbox::create(spec(&store)).await.unwrap();
    let ws = sb.mount("p/main", None).await.unwrap();
    let pid = daemon_pid(&sb);
    // `seq 1 N` prints numbers in order: the reader checks every line.
    let lines: u64 = if full { 120_000_000 } else { 8_000_000 };
    let rss0 = proc_status_kb(pid, "VmRSS").unwrap();
    let mut h = ws
        .exec(["seq", "1", &lines.to_string()])
        .spawn()
        .await
        .unwrap();
    let mut out = h.stdout.take().unwrap();
    let (mut next, mut partial, mut bytes, mut chunks) = (1u64, Vec::new(), 0u64, 0u64);
    let mut peak = rss0;
    let t = Instant::now();
    while let Some(chunk) = out.next().await {
        bytes += chunk.len() as u64;
        partial.extend_from_slice(&chunk);
        let cut = partial
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |i| i + 1);
        for l in partial[..cut]
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
        {
            let v: u64 = std::str::from_utf8(l).unwrap().parse().unwrap();
            assert_eq!(v, next, "output out of order or lost after {bytes} bytes");
            next += 1;
        }
        partial.drain(..cut);
        chunks += 1;
        // The slow reader: 1 ms per chunk, far slower than seq writes.
        tokio::time::sleep(Duration::from_millis(1)).await;
        if chunks % 64 == 0 {
            peak = peak.max(proc_status_kb(pid, "VmRSS").unwrap_or(0));
        }
    }
    let st = h.wait().await.unwrap();
    assert!(st.success(), "{st:?}");
    assert_eq!(next - 1, lines, "not every line arrived");
    let hwm = proc_status_kb(pid, "VmHWM").unwrap();
    eprintln!(
        "stdout {} MiB in {:?} through a slow reader: daemon VmRSS {} -> peak {} kB (VmHWM {} kB); load average {}",
        bytes >> 20,
        t.elapsed(),
        rss0,
        peak,
        hwm,
        loadavg()
    );
    assert!(
        peak - rss0 < DAEMON_GROWTH_BOUND_KB,
        "the daemon grew by {} kB while streaming {} MiB: output is not back-pressured",
        peak - rss0,
        bytes >> 20
    );
    sb.close().await.unwrap();
}

async fn fork_bomb_and_memory_hog_hit_their_limits(dir: &Path, _full: bool) {
    let store = store_with_project(dir).await;
    let mut sp = spec(&store);
    sp.limits = Limits {
        memory_bytes: Some(256 << 20),
        pids: Some(128),
        cpu_millis: None,
    };
    let sb = Sandbox::create(sp).await.unwrap();
    let bystander = Sandbox::create(spec(&store)).await.unwrap();
    let ws = sb.mount("p/main", None).await.unwrap();
    let bws = bystander.mount("p/main", None).await.unwrap();
    let daemon = daemon_pid(&sb);

    // Memory hog: tail(1) keeps an unterminated line in memory, and
    // /dev/zero never ends one. The cgroup's OOM killer ends it (SIGKILL).
    let o = ws
        .exec(["tail", "/dev/zero"])
        .timeout(Duration::from_secs(60))
        .output()
        .await
        .unwrap();
    assert_eq!(o.status.signal, Some(libc::SIGKILL), "hog: {:?}", o.status);
    assert!(!o.status.timed_out, "the hog was not stopped by the limit");
    assert_eq!(daemon_pid(&sb), daemon, "the daemon was replaced or killed");
    let o = ws.exec(["echo", "after-hog"]).output().await.unwrap();
    assert_eq!(o.stdout_str(), "after-hog\n");

    // Fork bomb (sh function piping into itself in the background): the
    // pids limit stops it; it ends at its timeout.
    let bomb = ws
        .exec(["sh", "-c", "b() { b | b & }; b; sleep 3"])
        .timeout(Duration::from_secs(4))
        .output();
    let bomb = tokio::spawn(bomb);
    tokio::time::sleep(Duration::from_secs(2)).await;
    // While it runs: the daemon answers, the other Sandbox works.
    assert!(sb.health().await.is_ok(), "the daemon stopped answering");
    let o = bws.exec(["echo", "bystander"]).output().await.unwrap();
    assert_eq!(o.stdout_str(), "bystander\n");
    let o = bomb.await.unwrap().unwrap();
    let err = o.stderr_str();
    assert!(
        err.contains("fork") || err.contains("Resource temporarily unavailable"),
        "the bomb did not hit the pids limit: {:?} {err:.300}",
        o.status
    );
    // After it: the Sandbox recovers (the bomb's leftovers are killed with
    // its process group at the timeout; init reaps them).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match ws.exec(["echo", "after-bomb"]).output().await {
            Ok(o) if o.stdout_str() == "after-bomb\n" => break,
            r => {
                assert!(
                    Instant::now() < deadline,
                    "no exec works after the bomb: {r:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    assert_eq!(daemon_pid(&sb), daemon);
    sb.close().await.unwrap();
    bystander.close().await.unwrap();
}

async fn killed_daemon_restarts_with_its_workspace_and_commits(dir: &Path, _full: bool) {
    // The base: `f` (writable by the commands' uid) to modify, `gone` to
    // delete.
    let store = store_with_project_and(dir, &[("gone", b"to be deleted\n")]).await;
    let mut sb = Sandbox::create(spec(&store)).await.unwrap();
    let ws = sb.mount("p/main", None).await.unwrap();
    let o = ws
        .exec([
            "sh",
            "-c",
            "set -e; echo uncommitted > new; echo changed > f; mkdir d; echo x > d/y; rm gone",
        ])
        .output()
        .await
        .unwrap();
    assert!(o.status.success(), "{}", o.stderr_str());
    let changes = |cs: Vec<strata_sdk::Change>| -> Vec<(String, String)> {
        cs.into_iter()
            .map(|c| (String::from_utf8_lossy(&c.path).into_owned(), c.kind))
            .collect()
    };
    let before = changes(ws.status().await.unwrap());
    for p in ["new", "f", "d", "d/y", "gone"] {
        assert!(before.iter().any(|(c, _)| c == p), "{p}: {before:?}");
    }
    let head = store.head("p/main").await.unwrap();
    let old_daemon = daemon_pid(&sb);
    kill9(old_daemon);

    // The death is reported, with the log tail, to the next call.
    let e = tokio::time::timeout(Duration::from_secs(10), ws.status())
        .await
        .expect("a dead daemon must not hang the caller")
        .unwrap_err();
    match &e {
        Error::Backend { log_tail, .. } => assert!(
            log_tail.contains(strata_daemon::MARKER),
            "log tail without the daemon's log: {log_tail}"
        ),
        other => panic!("expected Error::Backend with the log tail, got {other:?}"),
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while sb.state().await != strata_sdk::SandboxState::Stopped {
        assert!(Instant::now() < deadline, "the Sandbox still reads running");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        store.head("p/main").await.unwrap(),
        head,
        "a crash published"
    );

    // Restart: same Sandbox (ID, token, config), a new daemon that mounts
    // the Workspace again under its ID with the uncommitted changes.
    let id = sb.id().to_string();
    let t = Instant::now();
    sb.restart().await.expect("restart the killed daemon");
    eprintln!("restart to ready with one Workspace: {:?}", t.elapsed());
    assert_eq!(sb.id(), id);
    assert_eq!(sb.state().await, strata_sdk::SandboxState::Running);
    assert_ne!(daemon_pid(&sb), old_daemon, "the same daemon process?");
    let health = sb.health().await.unwrap();
    assert!(health.unrecovered.is_empty(), "{:?}", health.unrecovered);
    let wss = sb.workspaces().await.unwrap();
    assert_eq!(wss.len(), 1, "{wss:?}");
    assert_eq!(wss[0].id(), ws.id());
    assert_eq!(wss[0].path(), ws.path());
    assert_eq!(wss[0].branch(), "p/main");
    assert_eq!(wss[0].base(), head);
    // The handle from before the crash works again: same ID, same socket.
    assert_eq!(changes(ws.status().await.unwrap()), before);
    let o = wss[0]
        .exec([
            "sh",
            "-c",
            "cat new f d/y; test ! -e gone && echo gone-is-gone; echo more > later",
        ])
        .output()
        .await
        .unwrap();
    assert!(o.status.success(), "{}", o.stderr_str());
    assert_eq!(o.stdout_str(), "uncommitted\nchanged\nx\ngone-is-gone\n");
    let c = wss[0].commit("recovered after restart").await.unwrap();
    assert!(
        matches!(c, strata_sdk::CommitOutcome::Committed(_)),
        "{c:?}"
    );
    assert!(wss[0].status().await.unwrap().is_empty());

    // Read the Store back: the committed tree is exactly the base with the
    // changes made before the crash and the one after.
    let raw = strata_store::Store::open(&store.dir(), &Default::default()).unwrap();
    let commit = raw.resolve("p/main").unwrap().commit;
    assert_eq!(commit.to_hex(), c.commit());
    let m = strata_torture::manifest_commit(&raw, commit).unwrap();
    let paths: Vec<String> = m
        .keys()
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    assert_eq!(paths, ["d", "d/y", "f", "later", "new"], "{m:?}");
    for (path, want) in [
        ("new", &b"uncommitted\n"[..]),
        ("f", b"changed\n"),
        ("d/y", b"x\n"),
        ("later", b"more\n"),
    ] {
        match &m[path.as_bytes()] {
            strata_torture::Node::File { hash, .. } => {
                assert_eq!(hash, blake3::hash(want).as_bytes(), "{path}")
            }
            other => panic!("{path}: {other:?}"),
        }
    }
    assert!(matches!(m[&b"d"[..]], strata_torture::Node::Dir { .. }));
    assert_eq!(
        raw.read_commit(commit).unwrap().parents,
        vec![strata_store::ObjectId::from_hex(&head).unwrap()]
    );
    drop(raw);

    // Restarting a running Sandbox is refused (it would kill its commands).
    let e = sb.restart().await.unwrap_err();
    assert!(
        matches!(&e, Error::Busy { what, .. } if what.contains("restart")),
        "{e:?}"
    );
    sb.close().await.unwrap();
    strata_torture::check_store(&store.dir());
}

/// A command makes a directory tree `depth` levels deep and asks for a
/// commit: the commit succeeds or fails with an error, and the daemon
/// survives either way (a stack overflow would abort it).
async fn a_deep_tree_from_a_command_does_not_kill_the_daemon(dir: &Path, full: bool) {
    let store = store_with_project(dir).await;
    let sb = Sandbox::create(spec(&store)).await.unwrap();
    let ws = sb.mount("p/main", None).await.unwrap();
    let depth = if full { 1500 } else { 150 };
    let o = ws
        .exec([
            "sh",
            "-c",
            &format!("set -e; p=.; for i in $(seq {depth}); do p=$p/a; done; mkdir -p $p; echo deep > $p/leaf"),
        ])
        .output()
        .await
        .unwrap();
    assert!(o.status.success(), "{}", o.stderr_str());
    let r = ws.commit("deep").await;
    eprintln!(
        "commit of a {depth}-level tree: {:?}",
        r.as_ref().map(|c| c.commit().to_string())
    );
    assert!(
        sb.health().await.is_ok(),
        "the daemon died committing a {depth}-level tree"
    );
    if r.is_ok() {
        let path = format!("{}leaf", "a/".repeat(depth));
        assert_eq!(store.read_file("p/main", &path).await.unwrap(), b"deep\n");
    }
    sb.close().await.unwrap();
}
