//! `strata mcp`: the Model Context Protocol server of strata-mcp
//! (docs/mcp.md) over the local Store, on stdio or on `--http ADDR` with
//! the Store's bearer tokens (`strata token`, as `strata serve`).

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use serde_json::json;
use strata_mcp::{Authenticator, Backend, Caller, HttpOptions, SandboxDefaults, Scope};
use strata_server::TokenStore;

use crate::ctx::Ctx;

#[derive(Debug, Args)]
pub struct McpArgs {
    /// Serve streamable HTTP at http://ADDR/mcp (a loopback address, e.g.
    /// 127.0.0.1:8766) instead of stdio; every request needs
    /// `Authorization: Bearer TOKEN` with a token from `strata token create`.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
}

/// The Store's token store (`strata token`), as strata-mcp's authenticator.
struct StoreTokens(TokenStore);

impl Authenticator for StoreTokens {
    fn verify(&self, bearer: &str) -> Result<Option<Caller>, String> {
        let caller = self.0.verify(bearer).map_err(|e| e.to_string())?;
        Ok(caller.map(|c| Caller {
            token_id: Some(c.token_id),
            scope: match c.scope {
                strata_server::Scope::All => Scope::All,
                strata_server::Scope::Projects(p) => Scope::Projects(p),
            },
        }))
    }
}

pub fn mcp(ctx: &Ctx, a: McpArgs) -> Result<ExitCode> {
    if ctx.remote.is_some() && a.http.is_some() {
        anyhow::bail!(
            "`strata mcp --http` checks the Store's own tokens on this host; with --remote, serve MCP on stdio (the server's token then decides what the tools see), or run `strata mcp --http` on the server's host"
        );
    }
    // Opening the Store checks it is one before a client connects (the
    // server checks its own).
    let store_dir = match ctx.remote {
        None => Some(ctx.open()?.dir().to_path_buf()),
        Some(_) => None,
    };
    let rt = crate::ctx::runtime()?;
    rt.block_on(async move {
        let client = ctx.client().await?;
        let defaults = SandboxDefaults {
            daemon_exe: None,
            state_dir: crate::ctx::state_dir(),
        };
        let backend = Backend::new(client, defaults);
        match a.http {
            None => strata_mcp::serve_stdio(backend).await?,
            Some(addr) => {
                let store_dir = store_dir.expect("--http is refused with --remote above");
                let tokens = TokenStore::new(&store_dir);
                if tokens.list()?.is_empty() {
                    crate::output::warn("no tokens yet: every request gets 401 until `strata token create` makes one");
                }
                let json = ctx.json;
                strata_mcp::serve_http(
                    backend,
                    HttpOptions { addr },
                    Arc::new(StoreTokens(tokens)),
                    move |bound| {
                        use std::io::Write;
                        let url = format!("http://{bound}/mcp");
                        let line = if json {
                            json!({ "listening": url }).to_string()
                        } else {
                            format!("listening on {url}")
                        };
                        let mut out = std::io::stdout().lock();
                        let _ = writeln!(out, "{line}").and_then(|()| out.flush());
                    },
                )
                .await?
            }
        }
        Ok::<_, anyhow::Error>(())
    })
    .context("strata mcp")?;
    Ok(ExitCode::SUCCESS)
}
