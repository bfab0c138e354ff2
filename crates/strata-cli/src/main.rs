//! `strata`: the command-line face of the Store. A thin layer: it parses
//! arguments, calls `strata_store`, renders the result as text or JSON, and
//! maps errors to exit codes (0 success, 1 failure, 2 usage).
#![forbid(unsafe_code)]

mod args;
mod cli;
mod commands;
mod ctx;
mod demo;
mod demo_sandbox;
mod demo_steps;
mod exec;
mod mcp;
mod mount;
mod output;
mod probe;
mod progress;
mod read;
mod remote_tar;
mod run;
mod sandbox;
mod serve;
mod vm;

use clap::Parser;
use std::process::ExitCode;
use strata_store::StoreError;

/// Exit code for errors in the command line itself (clap uses it too).
const USAGE: u8 = 2;

fn main() -> ExitCode {
    // First, before anything can start a thread: `strata run` re-executes
    // this binary as its single-threaded rootless helper.
    strata_rootless::maybe_run_internal();
    // In a project's microVM this binary is /init (docs/microvm.md).
    vm::maybe_run_guest_init();
    // `strata mount` and Sandboxes re-execute it as the daemon, the Sandbox
    // init and the exec helper (one program, several roles).
    strata_sdk::maybe_run_internal();
    // Usage errors (unknown flags, missing arguments) exit 2 inside clap.
    let cli = cli::Cli::parse();
    match commands::run(cli) {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<args::Usage>().is_some() => {
            // clap's format and exit status 2, as for errors it finds.
            use clap::CommandFactory;
            let u = e.downcast_ref::<args::Usage>().expect("checked above");
            cli::Cli::command().error(u.kind, &u.msg).exit()
        }
        Err(e) => {
            eprintln!("strata: error: {}", render(&e));
            ExitCode::from(exit_code(&e))
        }
    }
}

/// The Store's error where the SDK client wraps one (the commands that go
/// through `strata_sdk::Client`): its message is written to be shown as
/// it is, the same whether the Store is local or behind a server.
fn store_error(e: &anyhow::Error) -> Option<&StoreError> {
    e.chain().find_map(|c| c.downcast_ref::<StoreError>())
}

fn render(e: &anyhow::Error) -> String {
    match (e.downcast_ref::<strata_sdk::Error>(), store_error(e)) {
        (Some(_), Some(s)) => output::render(&anyhow::Error::msg(s.to_string())),
        _ => output::render(e),
    }
}

/// An argument that can never be right, whatever the Store holds, is a
/// usage error (2); everything else that fails is 1.
fn exit_code(e: &anyhow::Error) -> u8 {
    match store_error(e) {
        Some(StoreError::InvalidName { .. }) => USAGE,
        _ => 1,
    }
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
    fn invalid_names_are_usage_errors() {
        let e = strata_store::validate_name("project", "Bad").unwrap_err();
        assert_eq!(exit_code(&e.into()), USAGE);
        let e = anyhow::anyhow!("anything else");
        assert_eq!(exit_code(&e), 1);
    }
}
