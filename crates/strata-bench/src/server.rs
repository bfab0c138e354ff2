//! Server group: the per-call overhead of `strata serve` against the
//! in-process library, side by side in one run. A cheap call (the branch
//! list of a project with 10 branches) through the server's router on a
//! Unix socket (one kept-alive HTTP/1.1 connection, bearer token checked
//! per request) vs the same `list_branches` in-process. Medians of 2,000
//! calls (200 with --quick) after 100 warm-up calls each.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use crate::report::{median, time, Row};
use crate::Ctx;
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
    if !ctx.wants("branch list") {
        return Ok(Vec::new());
    }
    let dir = ctx.scratch.join("server-store");
    let store = Store::create(&dir, &StoreOptions::default())?;
    let head = store.create_project("b", "empty")?;
    for i in 0..9 {
        store.create_branch(&BranchRef::new("b", &format!("agent-{i}"))?, head)?;
    }
    let tokens = strata_server::TokenStore::new(&dir);
    let (token, _) = tokens.create(&[])?;
    let sock = ctx.scratch.join("server.sock");
    let state = Arc::new(strata_server::ServerState::new(
        store.clone(),
        tokens,
        strata_server::DEFAULT_MAX_BODY,
    ));
    let rt = tokio::runtime::Runtime::new()?;
    let bound = rt.block_on(strata_server::Listen::Unix(sock.clone()).bind())?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = rt.spawn(strata_server::run(bound, state, async move {
        let _ = stop_rx.await;
    }));

    let req = format!(
        "GET /v1/projects/b/branches HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .into_bytes();
    let mut conn = BufReader::new(UnixStream::connect(&sock)?);
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
    let _ = stop_tx.send(());
    rt.block_on(server)??;
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
