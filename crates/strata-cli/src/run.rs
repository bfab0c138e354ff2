//! `strata run`: one command on a Workspace with no root (FUSE inside an
//! unprivileged user namespace; the mechanism is `strata_rootless`).

use crate::ctx::Ctx;
use anyhow::Result;
use clap::Args;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use strata_rootless::CommitOutcome;
use strata_rootless::{CommandStatus, Disposition, RunSpec};

/// Exit code of `strata run` when strata itself fails (not the command):
/// the docker/podman/env convention, so it is never mistaken for the
/// command's own status; the reason is printed on stderr.
pub const RUN_FAILED: u8 = 125;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// PROJECT/BRANCH: the Workspace's branch.
    #[arg(value_name = "REF")]
    pub reference: String,
    /// Commit the command's changes to the branch when it exits
    /// [default: discard them].
    #[arg(long)]
    pub commit: bool,
    /// The commit message (with --commit).
    #[arg(short, long, requires = "commit")]
    pub message: Option<String>,
    /// Where the Workspace appears in the command's view (created if
    /// missing) [default: a fresh empty directory]. Also in $STRATA_ROOT.
    #[arg(long, value_name = "PATH")]
    pub at: Option<PathBuf>,
    /// Confine the command like a Sandbox command: it sees only the host's
    /// system directories and /etc (minus what is not world-readable), a
    /// private /tmp and the Workspace, not the Store; no network but lo;
    /// no capability, no_new_privs, the Sandbox's seccomp filter. Without
    /// it `strata run` is no sandbox: the command has your rights on your
    /// files, sees the host and has the network (docs/security.md).
    #[arg(long)]
    pub isolate: bool,
    /// Set K=V in the command's environment (repeatable).
    #[arg(long = "env", value_name = "K=V", value_parser = parse_env)]
    pub env: Vec<(OsString, OsString)>,
    /// The command and its arguments (no shell); it starts in the Workspace.
    #[arg(last = true, required = true, value_name = "ARGV")]
    pub argv: Vec<OsString>,
}

fn parse_env(s: &str) -> Result<(OsString, OsString), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.into(), v.into())),
        _ => Err(format!("expected K=V, got {s:?}")),
    }
}

/// Run it; the command's status becomes ours (a signal as 128+N). Errors
/// of strata itself are printed here and exit with [`RUN_FAILED`].
pub fn run(ctx: &Ctx, a: RunArgs) -> Result<ExitCode> {
    let store = match ctx.open() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("strata: error: {e:#}");
            return Ok(ExitCode::from(RUN_FAILED));
        }
    };
    let spec = RunSpec {
        reference: a.reference.clone(),
        argv: a.argv.clone(),
        env: a.env,
        at: a.at,
        commit: a.commit.then(|| {
            a.message.clone().unwrap_or_else(|| {
                let argv: Vec<String> = a
                    .argv
                    .iter()
                    .map(|s| s.to_string_lossy().into_owned())
                    .collect();
                format!("strata run: {}", argv.join(" "))
            })
        }),
        scratch_parent: None,
        isolate: a.isolate,
    };
    let out = match strata_rootless::run(&store, &spec) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("strata: error: {e}");
            return Ok(ExitCode::from(RUN_FAILED));
        }
    };
    let how = match out.status {
        CommandStatus::Exited(c) => format!("exited with status {c}"),
        CommandStatus::Signaled(s) => format!("was killed by signal {s}"),
    };
    let n = out.changes.len();
    let what = match &out.disposition {
        Disposition::Committed {
            outcome: CommitOutcome::Committed(id),
            branch,
        } => format!("committed {n} change(s) to {branch} as {}", id.short()),
        Disposition::Committed {
            outcome: CommitOutcome::UpToDate,
            branch,
        } => format!("no changes; {branch} is unchanged"),
        Disposition::Discarded if n == 0 => "no changes; nothing to discard".to_string(),
        Disposition::Discarded => {
            format!("discarded {n} change(s) (pass --commit to keep them)")
        }
    };
    // The command owns stdout; strata's report goes to stderr unless JSON
    // was asked for.
    if ctx.json {
        let (committed, commit) = match &out.disposition {
            Disposition::Committed {
                outcome: CommitOutcome::Committed(id),
                ..
            } => (true, Some(id.to_hex())),
            _ => (false, None),
        };
        let v = serde_json::json!({
            "status": match out.status {
                CommandStatus::Exited(c) => serde_json::json!({"exited": c}),
                CommandStatus::Signaled(s) => serde_json::json!({"signaled": s}),
            },
            "exit_code": out.status.code(),
            "changes": n,
            "committed": committed,
            "commit": commit,
        });
        crate::output::print_json(&v)?;
    } else {
        eprintln!("strata: the command {how}; {what}");
    }
    Ok(ExitCode::from(out.status.code()))
}
