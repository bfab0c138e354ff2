//! `strata-daemon --config PATH` (or `strata-daemon __strata-daemon --config
//! PATH`): the daemon as a stand-alone program, for tests and for backends
//! that install it on its own. The `strata` binary runs the same code.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    // First, before any thread: this binary is also the exec helper.
    strata_sandbox::maybe_run_internal();
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if args.first().map(|a| a == strata_daemon::DAEMON_ARG) == Some(true) {
        args.remove(0);
    }
    match strata_daemon::main_from_args(&args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strata-daemon: {e}");
            std::process::ExitCode::from(1)
        }
    }
}
