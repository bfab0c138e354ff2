//! Server group: the per-call overhead of `strata serve` against the
//! in-process library, side by side in one run. A cheap call (the branch
//! list of a project with 10 branches) through the server's router on a
//! Unix socket (one kept-alive HTTP/1.1 connection, bearer token checked
//! per request) vs the same `list_branches` in-process. Medians of 2,000
//! calls (200 with --quick) after 100 warm-up calls each.
//!
//! The relay (needs root, like the sandbox group): one Sandbox created
//! through the server, its Workspace mounted through the relay; exec of
//! `true` through the server (create, then the NDJSON output to the exit
//! line; a connection per request, as the SDK's client made before it
//! kept its connections, so this row still includes the connect) vs the
//! in-process SDK on the same Sandbox, medians of 200 (50 with --quick);
//! and reading a 32 MiB file of the Workspace through the relay (`cat` in
//! the Sandbox, its output relayed as the daemon's frames) vs the SDK's
//! `output()` of the same command, medians of 5 (3). The flow, the raw
//! file route and the concurrent execs through the server are in
//! `server_load.rs`, on the same server and Sandbox.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use crate::report::{median, ms, time, Row};
use crate::Ctx;
use std::path::PathBuf;
use strata_store::{BranchRef, Store, StoreOptions};

/// One request on a kept-alive connection; returns the status and body.
fn call(r: &mut BufReader<UnixStream>, req: &[u8]) -> anyhow::Result<(u16, Vec<u8>)> {
    r.get_mut().write_all(req)?;
    let mut line = String::new();
    r.read_line(&mut line)?;
    let status: u16 = line
        .split(' ')
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("bad status line {line:?}"))?
        .parse()?;
    let mut len = 0usize;
    loop {
        line.clear();
        r.read_line(&mut line)?;
        if line == "\r\n" || line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse()?;
            }
        }
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    Ok((status, body))
}

pub fn run(ctx: &Ctx) -> anyhow::Result<Vec<Row>> {
    let mut rows = branch_list(ctx)?;
    rows.extend(crate::server_conn::rows(ctx)?);
    if [
        "exec through the server",
        "32 MiB read through the relay",
        "15-call flow through the server",
        "32 MiB file route through the relay",
        "concurrent execs through the server",
    ]
    .iter()
    .any(|w| ctx.wants(w))
    {
        rows.extend(relay(ctx)?);
    }
    Ok(rows)
}

fn branch_list(ctx: &Ctx) -> anyhow::Result<Vec<Row>> {
    if !ctx.wants("branch list") {
        return Ok(Vec::new());
    }
    let dir = ctx.scratch.join("server-store");
    let store = Store::create(&dir, &StoreOptions::default())?;
    let head = store.create_project("b", "empty")?;
    for i in 0..9 {
        store.create_branch(&BranchRef::new("b", &format!("agent-{i}"))?, head)?;
    }
    let served = Served::start(&store, ctx.scratch.join("server.sock"))?;
    let (sock, token) = (&served.sock, &served.token);

    let req = format!(
        "GET /v1/projects/b/branches HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .into_bytes();
    let mut conn = BufReader::new(UnixStream::connect(sock)?);
    let n = if ctx.quick { 200 } else { 2000 };
    for _ in 0..100 {
        let (s, _) = call(&mut conn, &req)?;
        anyhow::ensure!(s == 200, "branch list through the server: HTTP {s}");
        store.list_branches(Some("b"))?;
    }
    let mut via_server = Vec::with_capacity(n);
    let mut in_process = Vec::with_capacity(n);
    for _ in 0..n {
        let (r, d) = time(|| call(&mut conn, &req));
        let (s, body) = r?;
        anyhow::ensure!(s == 200 && body.len() > 100, "HTTP {s}");
        via_server.push(d.as_secs_f64() * 1e3);
        let (r, d) = time(|| store.list_branches(Some("b")));
        anyhow::ensure!(r?.len() == 10);
        in_process.push(d.as_secs_f64() * 1e3);
    }
    drop(conn);
    served.stop()?;
    let (s, p) = (median(via_server), median(in_process));
    Ok(vec![Row::new(
        "server",
        &format!("branch list (10 branches): strata serve on a Unix socket vs in-process (median of {n})"),
        "ms",
        s,
    )
    .compare("in-process list_branches", p)
    .goal("< +0.3 ms", s - p < 0.3)])
}

/// One request on a new connection (`Connection: close`), read to the end:
/// the status and the body (chunked bodies are left framed; the callers
/// only look for a marker in them).
fn once(sock: &std::path::Path, req: &str, body: &[u8]) -> anyhow::Result<(u16, Vec<u8>)> {
    let mut c = UnixStream::connect(sock)?;
    c.write_all(req.as_bytes())?;
    c.write_all(body)?;
    let mut raw = Vec::new();
    c.read_to_end(&mut raw)?;
    let head_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("no HTTP head in {} bytes", raw.len()))?;
    let status: u16 = std::str::from_utf8(&raw[9..12])?.parse()?;
    Ok((status, raw[head_end + 4..].to_vec()))
}

fn post(
    sock: &std::path::Path,
    token: &str,
    path: &str,
    json: &serde_json::Value,
) -> anyhow::Result<serde_json::Value> {
    let body = json.to_string();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let (s, b) = once(sock, &req, body.as_bytes())?;
    anyhow::ensure!(
        (200..300).contains(&s),
        "POST {path}: HTTP {s}: {}",
        String::from_utf8_lossy(&b)
    );
    Ok(serde_json::from_slice(&b)?)
}

fn get(sock: &std::path::Path, token: &str, path: &str) -> anyhow::Result<Vec<u8>> {
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    let (s, b) = once(sock, &req, b"")?;
    anyhow::ensure!(s == 200, "GET {path}: HTTP {s}");
    Ok(b)
}

/// Exec through the server and the 32 MiB read through the relay, each
/// beside the in-process SDK on the same Sandbox.
fn relay(ctx: &Ctx) -> anyhow::Result<Vec<Row>> {
    anyhow::ensure!(
        rustix::process::geteuid().is_root(),
        "the relay workloads create a Sandbox and need root"
    );
    let dir = ctx.scratch.join("relay");
    std::fs::create_dir_all(&dir)?;
    let store = Store::create(&dir.join("store"), &StoreOptions::default())?;
    store.create_project("p", "empty")?;
    let served = Served::start(&store, dir.join("server.sock"))?;
    let (rt, sock, token) = (&served.rt, served.sock.clone(), served.token.clone());
    let sb = post(
        &sock,
        &token,
        "/v1/sandboxes",
        &serde_json::json!({"project": "p", "labels": {"strata-bench": std::process::id().to_string()}}),
    )?;
    let id = sb["id"].as_str().unwrap_or_default().to_string();
    let result = relay_rows(ctx, rt, &sock, &token, &id).and_then(|(mut rows, ws)| {
        rows.extend(crate::server_load::rows(
            ctx, rt, &store, &sock, &token, &id, &ws,
        )?);
        Ok(rows)
    });
    let _ = rt.block_on(async {
        let sb = strata_sdk::Sandbox::open(&id).await?;
        sb.close_discard().await
    });
    served.stop()?;
    result
}

fn relay_rows(
    ctx: &Ctx,
    rt: &tokio::runtime::Runtime,
    sock: &std::path::Path,
    token: &str,
    id: &str,
) -> anyhow::Result<(Vec<Row>, String)> {
    let ws = post(
        sock,
        token,
        &format!("/v1/sandboxes/{id}/workspaces"),
        &serde_json::json!({"ref": "p/main"}),
    )?;
    let ws_id = ws["id"].as_str().unwrap_or_default().to_string();
    let sdk_ws = rt.block_on(async {
        let sb = strata_sdk::Sandbox::open(id).await?;
        let wss = sb.workspaces().await?;
        wss.into_iter()
            .find(|w| w.id() == ws_id)
            .ok_or_else(|| anyhow::anyhow!("the SDK does not see Workspace {ws_id}"))
    })?;
    let exec_via_server = |argv: serde_json::Value, want: &[u8]| -> anyhow::Result<usize> {
        let x = post(
            sock,
            token,
            &format!("/v1/sandboxes/{id}/execs"),
            &serde_json::json!({"argv": argv}),
        )?;
        let x = x["id"].as_str().unwrap_or_default();
        let out = get(sock, token, &format!("/v1/sandboxes/{id}/execs/{x}/output"))?;
        anyhow::ensure!(
            out.windows(want.len()).any(|w| w == want),
            "no {:?} in the output",
            String::from_utf8_lossy(want)
        );
        Ok(out.len())
    };
    let mut rows = Vec::new();
    let exit0: &[u8] = br#""type":"exit","seq""#;
    if ctx.wants("exec through the server") {
        let n = if ctx.quick { 50 } else { 200 };
        for _ in 0..10 {
            exec_via_server(serde_json::json!(["true"]), exit0)?;
            rt.block_on(sdk_ws.exec(["true"]).output())?;
        }
        let (mut srv, mut sdk) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for _ in 0..n {
            let (r, d) = time(|| exec_via_server(serde_json::json!(["true"]), exit0));
            r?;
            srv.push(ms(d));
            let (r, d) = time(|| rt.block_on(sdk_ws.exec(["true"]).output()));
            anyhow::ensure!(r?.status.success(), "true failed in-process");
            sdk.push(ms(d));
        }
        let (a, b) = (median(srv), median(sdk));
        rows.push(
            Row::new(
                "server",
                &format!("exec `true` through the server (median of {n})"),
                "ms",
                a,
            )
            .compare("in-process SDK, same Sandbox", b)
            .goal("< 5 ms", a < 5.0),
        );
    }
    if ctx.wants("32 MiB read through the relay") {
        let o = rt.block_on(
            sdk_ws
                .exec(["sh", "-c", "head -c 33554432 /dev/urandom > big"])
                .output(),
        )?;
        anyhow::ensure!(
            o.status.success(),
            "making the 32 MiB file: {}",
            o.stderr_str()
        );
        let runs = if ctx.quick { 3 } else { 5 };
        let (mut srv, mut sdk) = (Vec::new(), Vec::new());
        for r in 0..=runs {
            let (n, d) = time(|| exec_via_server(serde_json::json!(["cat", "big"]), exit0));
            anyhow::ensure!(n? > 32 << 20, "the relayed output is shorter than the file");
            let (o, d2) = time(|| rt.block_on(sdk_ws.exec(["cat", "big"]).output()));
            anyhow::ensure!(o?.stdout.len() == 32 << 20, "the SDK read a short file");
            if r > 0 {
                srv.push(32.0 * 1.048576 / d.as_secs_f64() / 1000.0);
                sdk.push(32.0 * 1.048576 / d2.as_secs_f64() / 1000.0);
            }
        }
        let (a, b) = (median(srv), median(sdk));
        rows.push(
            Row::new(
                "server",
                &format!("32 MiB read through the relay (`cat`, daemon frames; median of {runs})"),
                "GB/s",
                a,
            )
            .compare("in-process SDK output()", b)
            .goal(">= 1 GB/s", a >= 1.0),
        );
    }
    Ok((rows, ws_id))
}

/// `strata serve` started in this process on a Unix socket, with a token
/// of its own, for one group of workloads (the server and python groups).
pub(crate) struct Served {
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) sock: PathBuf,
    pub(crate) token: String,
    stop: tokio::sync::oneshot::Sender<()>,
    handle: tokio::task::JoinHandle<Result<(), strata_server::ServeError>>,
}

impl Served {
    /// Serve `store` on `sock`; its tokens live in the Store's directory.
    pub(crate) fn start(store: &Store, sock: PathBuf) -> anyhow::Result<Served> {
        let tokens = strata_server::TokenStore::new(store.dir());
        let (token, _) = tokens.create(&[])?;
        let state = Arc::new(strata_server::ServerState::new(
            store.clone(),
            tokens,
            strata_server::DEFAULT_MAX_BODY,
        ));
        let rt = tokio::runtime::Runtime::new()?;
        let bound = rt.block_on(strata_server::Listen::Unix(sock.clone()).bind())?;
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let handle = rt.spawn(strata_server::run(bound, state, async move {
            let _ = stop_rx.await;
        }));
        Ok(Served {
            rt,
            sock,
            token,
            stop,
            handle,
        })
    }

    /// Shut the server down and wait for it.
    pub(crate) fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        self.rt.block_on(self.handle)??;
        Ok(())
    }
}
