//! `strata serve` and `strata token`: the authenticated server of one
//! Store (strata-server) and its bearer tokens (docs/server.md).

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use serde_json::json;
use strata_server::{Listen, ServerState, TlsSetup, TokenStore};

use crate::ctx::Ctx;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// unix:PATH or tcp:HOST:PORT (a non-loopback HOST needs TLS)
    /// [default: unix:STORE/serve.sock]
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// TLS certificate chain (PEM), with --tls-key.
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_key",
        conflicts_with = "tls_generate"
    )]
    pub tls_cert: Option<std::path::PathBuf>,
    /// TLS private key (PEM), with --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// TLS with a self-signed certificate, generated once and kept in the
    /// Store directory; the ready line prints its fingerprint for clients
    /// to pin.
    #[arg(long)]
    pub tls_generate: bool,
    /// Largest request body in MiB; larger ones get 413.
    #[arg(long, value_name = "MIB", default_value_t = 64)]
    pub max_body_mib: usize,
}

#[derive(Debug, Subcommand)]
pub enum TokenCmd {
    /// Make a bearer token for `strata serve`; prints it once.
    #[command(
        after_help = "Examples:\n  strata token create\n  strata --json token create --project web --project docs"
    )]
    Create {
        /// Limit the token to this project (repeat for several); without
        /// any, the token sees every project.
        #[arg(long = "project", value_name = "P")]
        projects: Vec<String>,
    },
    /// List tokens: ids, scopes, creation times (never the secrets).
    #[command(after_help = "Example:\n  strata --json token list")]
    List,
    /// Revoke a token by id; a running server refuses it from the next request.
    #[command(after_help = "Example:\n  strata token revoke 3f9a0c1d2e4b5a69")]
    Revoke {
        /// The id from `strata token list`.
        id: String,
    },
}

pub fn token(ctx: &Ctx, cmd: TokenCmd) -> Result<ExitCode> {
    // Opening the Store checks it is one (tokens live in its directory).
    let store = ctx.open()?;
    let tokens = TokenStore::new(store.dir());
    match cmd {
        TokenCmd::Create { projects } => {
            // A bad name is a usage error (exit 2), like everywhere else.
            for p in &projects {
                strata_store::validate_name("project", p)?;
            }
            let (token, info) = tokens.create(&projects)?;
            ctx.emit(
                json!({"token": token, "id": info.id, "projects": info.projects}),
                || token.clone(),
            )?;
        }
        TokenCmd::List => {
            let list = tokens.list()?;
            ctx.emit(json!({"tokens": list}), || {
                list.iter()
                    .map(|t| {
                        let scope = t
                            .projects
                            .as_ref()
                            .map(|p| p.join(","))
                            .unwrap_or_else(|| "*".into());
                        format!(
                            "{}\t{}\t{}",
                            t.id,
                            scope,
                            crate::output::fmt_time(t.created as i64 * 1_000_000_000)
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            })?;
        }
        TokenCmd::Revoke { id } => {
            tokens.revoke(&id)?;
            ctx.emit(json!({"revoked": id}), || format!("revoked {id}"))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn serve(ctx: &Ctx, a: ServeArgs) -> Result<ExitCode> {
    let store = ctx.open()?;
    let listen = match &a.listen {
        Some(s) => Listen::parse(s)?,
        None => Listen::default_for(store.dir()),
    };
    let tokens = TokenStore::new(store.dir());
    if tokens.list()?.is_empty() {
        crate::output::warn("no tokens yet: every request but /v1/healthz gets 401 until `strata token create` makes one");
    }
    let tls = match (&a.tls_cert, &a.tls_key, a.tls_generate) {
        (Some(cert), Some(key), _) => Some(TlsSetup::Files {
            cert: cert.clone(),
            key: key.clone(),
        }),
        (_, _, true) => {
            let mut names = vec!["localhost".to_string()];
            if let Listen::Tcp(addr) = &listen {
                names.push(addr.ip().to_string());
            }
            Some(TlsSetup::Generate {
                dir: store.dir().to_path_buf(),
                names,
            })
        }
        _ => None,
    };
    listen.check(tls.is_some())?;
    let tls = tls.map(|t| t.load()).transpose()?;
    let mut state = ServerState::new(store, tokens, a.max_body_mib.max(1) << 20);
    // Sandboxes live under the same state root as `strata sandbox`'s.
    state.sandbox_root = crate::ctx::state_dir();
    let state = Arc::new(state);
    let rt = tokio::runtime::Runtime::new().context("start the tokio runtime")?;
    rt.block_on(async move {
        // Handlers first: a SIGTERM right after the ready line must reach
        // them, not the default action (which would kill without cleanup).
        let shutdown = shutdown_signal()?;
        let bound = match &tls {
            Some(t) => listen.bind_tls(t).await?,
            None => listen.bind().await?,
        };
        let shown = bound.display();
        // One line, also with --json (print_json pretty-prints), so a
        // script can read exactly one line and go.
        let fp = tls.as_ref().map(|t| t.fingerprint.clone());
        let line = match (ctx.json, &fp) {
            (true, None) => json!({ "listening": shown }).to_string(),
            (true, Some(f)) => {
                json!({ "listening": shown, "tls": true, "fingerprint": f }).to_string()
            }
            (false, None) => format!("listening on {shown}"),
            (false, Some(f)) => format!("listening on {shown} (TLS, certificate {f})"),
        };
        {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            writeln!(out, "{line}").and_then(|()| out.flush())?;
        }
        strata_server::run(bound, state, shutdown).await?;
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// SIGTERM or SIGINT: stop accepting, finish the requests in flight. The
/// handlers are installed now; the returned future waits for either.
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("install a SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("install a SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}
