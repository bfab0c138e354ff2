//! `strata probe`: what this host offers strata, one KEY=VALUE line per
//! fact (`strata_sdk::probe`, plus strata-rootless's line); a failing line
//! says why and what to do. As root with /dev/fuse it also runs the real
//! thing once (`--no-self-check` skips it): a Sandbox on a temporary Store
//! mounts a Workspace with allow_other and one command checks the
//! privilege split on itself (`strata_sdk::probe::self_check`).

use crate::ctx::Ctx;
use anyhow::Result;
use clap::Args;
use serde_json::json;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// Skip the live check (a throwaway Sandbox and Workspace).
    #[arg(long)]
    pub no_self_check: bool,
}

/// `strata probe`: one KEY=VALUE line per fact; a failing one says why and
/// what to do.
pub fn probe(ctx: &Ctx, a: ProbeArgs) -> Result<ExitCode> {
    let mut lines = strata_sdk::probe::facts(ctx.store_path.as_deref());
    let kv = strata_rootless::probe().key_value();
    match kv.split_once('=') {
        Some((k, val)) => lines.push((k.to_string(), val.to_string())),
        None => lines.push(("rootless".to_string(), kv)),
    }
    // The microVM route (docs/microvm.md); a probe boot under KVM only
    // with the self-check.
    match crate::vm::default_config("probe", None) {
        Ok(cfg) => lines.extend(strata_microvm::probe::facts(&cfg, !a.no_self_check)),
        Err(e) => lines.push(("microvm".into(), format!("not checked: {e:#}"))),
    }
    if !a.no_self_check {
        lines.extend(match crate::ctx::runtime() {
            Ok(rt) => rt.block_on(strata_sdk::probe::self_check()),
            Err(e) => strata_sdk::probe::not_checked(&format!("no async runtime: {e}")),
        });
    }
    if ctx.json {
        let m: serde_json::Map<String, serde_json::Value> =
            lines.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        crate::output::print_json(&serde_json::Value::Object(m))?;
    } else {
        let s: String = lines.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        print!("{s}");
    }
    Ok(ExitCode::SUCCESS)
}
