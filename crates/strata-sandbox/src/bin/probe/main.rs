//! `strata-sandbox-probe`: a small binary for the integration tests.
//!
//! It is both the re-exec'd Sandbox init (it calls `maybe_run_internal`
//! first) and the command run inside the Sandbox, answering one question
//! per subcommand on stdout. Exit codes: 0 = done, 2 = bad usage.

mod daemon;
mod files;
mod identity;
mod limits;

use std::process::ExitCode;

/// The probe's arguments after the subcommand's name is matched.
pub(crate) struct Args(pub(crate) Vec<String>);

impl Args {
    /// Argument `i` (0 is the subcommand), "" when missing.
    pub(crate) fn arg(&self, i: usize) -> &str {
        self.0.get(i).map(String::as_str).unwrap_or("")
    }
}

/// One subcommand: what it answers on stdout, and its exit code.
type Probe = fn(&Args) -> ExitCode;

/// Every subcommand, by name: one function each, grouped by what it tries.
const PROBES: &[(&str, Probe)] = &[
    ("status", identity::status),
    ("exit", identity::exit),
    ("kill-self", identity::kill_self),
    ("streams", identity::streams),
    ("env", identity::env),
    ("cwd", identity::cwd),
    ("stdin", identity::stdin),
    ("sleep", identity::sleep),
    ("ids", identity::ids),
    ("tty", identity::tty),
    ("orphan-zombies", limits::orphan_zombies),
    ("forkbomb", limits::forkbomb),
    ("thread", limits::thread),
    ("alloc", limits::alloc),
    ("loopback", limits::loopback),
    ("try-create", files::try_create),
    ("ls", files::ls),
    ("cat", files::cat),
    ("forbidden-syscalls", daemon::forbidden_syscalls),
    ("helper-run", daemon::helper_run),
    ("propagation", daemon::propagation),
    ("cancel-group", daemon::cancel_group),
    ("mount-and-wait", daemon::mount_and_wait),
];

fn main() -> ExitCode {
    strata_sandbox::maybe_run_internal();
    let args = Args(std::env::args().skip(1).collect());
    match PROBES.iter().find(|(name, _)| *name == args.arg(0)) {
        Some((_, probe)) => probe(&args),
        None => {
            eprintln!("strata-sandbox-probe: unknown subcommand {:?}", args.arg(0));
            ExitCode::from(2)
        }
    }
}
