//! `strata`: the command-line face of the Store. A thin layer: it parses
//! arguments, calls `strata_store`, renders the result as text or JSON, and
//! maps errors to exit codes (0 success, 1 failure, 2 usage).
#![forbid(unsafe_code)]

mod cli;
mod commands;
mod demo;
mod demo_sandbox;
mod exec;
mod mount;
mod output;
mod probe;
mod progress;
mod read;
mod run;
mod sandbox;
mod serve;

use clap::Parser;
use std::process::ExitCode;
use strata_store::StoreError;

/// Exit code for errors in the command line itself (clap uses it too).
const USAGE: u8 = 2;

fn main() -> ExitCode {
    // First, before anything can start a thread: `strata run` re-executes
    // this binary as its single-threaded rootless helper.
    strata_rootless::maybe_run_internal();
    // `strata mount` and Sandboxes re-execute it as the daemon, the Sandbox
    // init and the exec helper (one program, several roles).
    strata_sdk::maybe_run_internal();
    // Usage errors (unknown flags, missing arguments) exit 2 inside clap.
    let cli = cli::Cli::parse();
    match commands::run(cli) {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strata: error: {}", render(&e));
            ExitCode::from(exit_code(&e))
        }
    }
}

/// An argument that can never be right, whatever the Store holds, is a
/// usage error (2); everything else that fails is 1.
fn exit_code(e: &anyhow::Error) -> u8 {
    match e.downcast_ref::<StoreError>() {
        Some(StoreError::InvalidName { .. }) => USAGE,
        _ => 1,
    }
}

/// The error and its causes as one line, without repeating a cause that the
/// message before it already quotes (StoreError texts include their source).
fn render(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let s = cause.to_string();
        if out.contains(&s) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&s);
    }
    out
}

/// `strata cat FILE | head` closes stdout early; that is not an error.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_does_not_repeat_quoted_causes() {
        let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied");
        let e: anyhow::Error = anyhow::Error::new(io).context("could not read x: denied");
        assert_eq!(render(&e), "could not read x: denied");
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(render(&e), "outer: inner");
    }

    #[test]
    fn invalid_names_are_usage_errors() {
        let e = strata_store::validate_name("project", "Bad").unwrap_err();
        assert_eq!(exit_code(&e.into()), USAGE);
        let e = anyhow::anyhow!("anything else");
        assert_eq!(exit_code(&e), 1);
    }
}
