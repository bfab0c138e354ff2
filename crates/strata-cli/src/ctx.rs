//! What every command needs: where the Store is, how to print, and the
//! async runtime and Sandbox state root of the commands that use the SDK.
//! Every command module imports this; it imports none of them.

use crate::output::{print_json, print_text};
use anyhow::{anyhow, Result};
use std::path::{Path, PathBuf};
use strata_sdk::Sandbox;
use strata_store::{Store, StoreOptions};

/// Environment variable naming the Sandbox state root.
pub const STATE_ENV: &str = "STRATA_SANDBOX_STATE";

/// Environment variable holding the server token of `--remote`.
pub const TOKEN_ENV: &str = "STRATA_TOKEN";

/// Where `--remote` sends commands.
pub struct RemoteOpts {
    pub url: String,
    pub token_file: Option<PathBuf>,
    pub fingerprint: Option<String>,
}

/// What every command needs: where the Store is (or the server) and how
/// to print.
pub struct Ctx {
    pub json: bool,
    pub store_path: Option<PathBuf>,
    pub allow_any_fs: bool,
    pub remote: Option<RemoteOpts>,
}

impl Ctx {
    pub fn store_path(&self) -> Result<&Path> {
        self.store_path.as_deref().ok_or_else(|| {
            anyhow!(
                "cannot find a default Store location: neither XDG_DATA_HOME nor HOME is set. \
                 Pass --store PATH or set STRATA_STORE"
            )
        })
    }

    pub fn options(&self) -> StoreOptions {
        StoreOptions {
            allow_any_fs: self.allow_any_fs,
            ..StoreOptions::default()
        }
    }

    pub fn open(&self) -> Result<Store> {
        Ok(Store::open(self.store_path()?, &self.options())?)
    }

    /// The SDK client the remotable commands go through: the server of
    /// `--remote`, else the local Store (one code path for both).
    pub async fn client(&self) -> Result<strata_sdk::Client> {
        let Some(r) = &self.remote else {
            let opts = self.options();
            return Ok(strata_sdk::Client::local_with(self.store_path()?, opts).await?);
        };
        let token = match &r.token_file {
            Some(f) => std::fs::read_to_string(f)
                .map_err(|e| anyhow!("could not read the token file {}: {e}", f.display()))?,
            None => std::env::var(TOKEN_ENV).map_err(|_| {
                anyhow!(
                    "--remote needs the server's token: set {TOKEN_ENV} or pass --token-file FILE \
                     (create one with `strata token create` on the server's host)"
                )
            })?,
        };
        Ok(strata_sdk::Client::connect_with(
            &r.url,
            token.trim(),
            r.fingerprint.as_deref(),
        )?)
    }

    /// Print `v` as JSON, or `text` for humans.
    pub fn emit(&self, v: serde_json::Value, text: impl FnOnce() -> String) -> Result<()> {
        if self.json {
            print_json(&v)
        } else {
            print_text(&text())
        }
    }
}

/// `$XDG_DATA_HOME/strata`, else `~/.local/share/strata`.
pub fn default_store_path() -> Option<PathBuf> {
    let xdg = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute());
    let base = xdg.or_else(|| {
        std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(|h| PathBuf::from(h).join(".local/share"))
    })?;
    Some(base.join("strata"))
}

/// The runtime of the commands that call the async SDK.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        // Default 2 MiB stacks: removing a closed Sandbox's scratch (which
        // a command can nest ~2,000 levels deep) keeps its own work list
        // (strata-sandbox's rmtree.rs), it does not recurse.
        .worker_threads(2)
        .enable_all()
        .build()?)
}

/// The Sandbox state root `STRATA_SANDBOX_STATE` names, if any.
pub fn state_dir() -> Option<PathBuf> {
    std::env::var_os(STATE_ENV)
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
}

/// Open Sandbox `id`: in a project's VM when the host's record says so
/// (docs/microvm.md), else under [`state_dir`].
pub async fn open(id: &str) -> Result<Sandbox> {
    if let Some(sb) = strata_sdk::microvm::open(id, None).await? {
        return Ok(sb);
    }
    Ok(Sandbox::open_in(id, state_dir()).await?)
}

/// Run `f` on the command's SDK client (the server of `--remote`, else
/// the local Store) on a fresh runtime.
pub fn sdk<'a, T, F, Fut>(ctx: &'a Ctx, f: F) -> Result<T>
where
    F: FnOnce(strata_sdk::Client) -> Fut,
    Fut: std::future::Future<Output = strata_sdk::Result<T>> + 'a,
{
    crate::ctx::runtime()?.block_on(async {
        let c = ctx.client().await?;
        Ok(f(c).await?)
    })
}
