//! Server group, continued: what a kept connection saves. The SDK's
//! remote client sends a request on a connection an earlier one left
//! open (strata-sdk `pool.rs`); a client made for every call opens a
//! connection for it, as every request did before. The branch list of a
//! project (10 branches) through one `Client` against a new `Client` per
//! call, alternating call by call, on the server's Unix socket and over
//! TLS on loopback TCP (a generated certificate, pinned); medians of 200
//! (50 with --quick) after 10 warm-up calls. A new client over TLS also
//! builds its TLS configuration (no I/O; its own row says what that
//! costs), so that row is an upper bound of a handshake per call.

use std::sync::Arc;

use crate::report::{median, ms, time, Row};
use crate::Ctx;
use strata_sdk::Client;
use strata_store::{BranchRef, Store, StoreOptions};

pub fn rows(ctx: &Ctx) -> anyhow::Result<Vec<Row>> {
    if !ctx.wants("kept connection") {
        return Ok(Vec::new());
    }
    let dir = ctx.scratch.join("server-conn-store");
    let store = Store::create(&dir, &StoreOptions::default())?;
    let head = store.create_project("b", "empty")?;
    for i in 0..9 {
        store.create_branch(&BranchRef::new("b", &format!("agent-{i}"))?, head)?;
    }
    let tokens = strata_server::TokenStore::new(store.dir());
    let (token, _) = tokens.create(&[])?;
    let state = Arc::new(strata_server::ServerState::new(
        store.clone(),
        tokens,
        strata_server::DEFAULT_MAX_BODY,
    ));
    let srv = tokio::runtime::Runtime::new()?;
    let sock = dir.join("serve.sock");
    let unix = srv.block_on(strata_server::Listen::Unix(sock.clone()).bind())?;
    std::fs::create_dir_all(dir.join("tls"))?;
    let tls = strata_server::TlsSetup::Generate {
        dir: dir.join("tls"),
        names: vec!["localhost".into()],
    }
    .load()?;
    let tcp = strata_server::Listen::Tcp("127.0.0.1:0".parse()?);
    let tls_bound = srv.block_on(tcp.bind_tls(&tls))?;
    let port = match &tls_bound {
        strata_server::Bound::Tls { addr, .. } => addr.port(),
        _ => anyhow::bail!("a TLS listener was asked for"),
    };
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    for bound in [unix, tls_bound] {
        let mut rx = stop_rx.clone();
        srv.spawn(strata_server::run(bound, state.clone(), async move {
            let _ = rx.wait_for(|v| *v).await;
        }));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let n = if ctx.quick { 50 } else { 200 };
    let unix_url = format!("unix://{}", sock.display());
    let tls_url = format!("https://localhost:{port}");
    let pin = Some(tls.fingerprint.as_str());
    let mut rows = Vec::new();
    for (label, url, pin) in [("Unix socket", &unix_url, None), ("TLS", &tls_url, pin)] {
        let kept = Client::connect_with(url, &token, pin)?;
        let (mut k, mut f, mut made) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..n + 10 {
            let (r, d) = time(|| rt.block_on(kept.branches(Some("b"))));
            anyhow::ensure!(r?.len() == 10, "branch list over a kept connection");
            let (c, d_made) = time(|| Client::connect_with(url, &token, pin));
            let c = c?;
            let (r, d2) = time(|| rt.block_on(c.branches(Some("b"))));
            anyhow::ensure!(r?.len() == 10, "branch list over a new connection");
            if i >= 10 {
                k.push(ms(d));
                f.push(ms(d2 + d_made));
                made.push(ms(d_made));
            }
        }
        let (a, b) = (median(k), median(f));
        rows.push(
            Row::new(
                "server",
                &format!(
                    "kept connection: branch list through one SDK Client, {label} (median of {n})"
                ),
                "ms",
                a,
            )
            .compare("a new Client (connection) per call", b)
            .note(&format!("saves {:.3} ms a call", b - a)),
        );
        if pin.is_some() {
            rows.push(
                Row::new(
                    "server",
                    &format!("kept connection: making the new TLS Client alone (median of {n})"),
                    "ms",
                    median(made),
                )
                .note("(included in the row above)"),
            );
        }
    }
    let _ = stop.send(true);
    srv.shutdown_timeout(std::time::Duration::from_secs(5));
    Ok(rows)
}
