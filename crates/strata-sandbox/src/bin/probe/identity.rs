//! Who the command is and what it got: ids, capabilities, exit paths, streams, environment, terminal.

use std::io::{Read, Write};
use std::process::ExitCode;

use crate::Args;
/// Identity and privilege lines of /proc/self/status.
pub(crate) fn status(_: &Args) -> ExitCode {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    for l in s.lines() {
        let keys = [
            "Uid:",
            "Gid:",
            "Groups:",
            "CapInh:",
            "CapPrm:",
            "CapEff:",
            "CapBnd:",
            "CapAmb:",
            "NoNewPrivs:",
            "Seccomp:",
        ];
        if keys.iter().any(|k| l.starts_with(k)) {
            println!("{l}");
        }
    }
    // SAFETY: PR_GET_SECUREBITS takes no pointer arguments.
    let bits = unsafe { libc::prctl(libc::PR_GET_SECUREBITS, 0, 0, 0, 0) };
    println!("SecureBits:\t{bits:#x}");
    ExitCode::SUCCESS
}

pub(crate) fn exit(a: &Args) -> ExitCode {
    ExitCode::from(a.arg(1).parse::<u8>().unwrap_or(2))
}

pub(crate) fn kill_self(a: &Args) -> ExitCode {
    let sig: i32 = a.arg(1).parse().unwrap_or(libc::SIGKILL);
    // The Rust runtime handles SIGSEGV/SIGBUS itself (stack
    // overflow detection): reset to the default action first.
    // SAFETY: SIG_DFL disposition, then raise(3); no handler runs.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
    ExitCode::from(2)
}

/// Alternate lines on stdout and stderr.
pub(crate) fn streams(_: &Args) -> ExitCode {
    for i in 0..5 {
        println!("out-{i}");
        let _ = std::io::stdout().flush();
        eprintln!("err-{i}");
    }
    ExitCode::SUCCESS
}

pub(crate) fn env(_: &Args) -> ExitCode {
    for (k, v) in std::env::vars_os() {
        println!("{}={}", k.to_string_lossy(), v.to_string_lossy());
    }
    ExitCode::SUCCESS
}

pub(crate) fn cwd(_: &Args) -> ExitCode {
    let d = std::env::current_dir().map(|p| p.display().to_string());
    println!("{}", d.unwrap_or_else(|e| format!("error: {e}")));
    ExitCode::SUCCESS
}

pub(crate) fn stdin(_: &Args) -> ExitCode {
    let mut v = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut v);
    let _ = std::io::stdout().write_all(&v);
    ExitCode::SUCCESS
}

pub(crate) fn sleep(a: &Args) -> ExitCode {
    let ms: u64 = a.arg(1).parse().unwrap_or(1000);
    std::thread::sleep(std::time::Duration::from_millis(ms));
    ExitCode::SUCCESS
}

/// pid, process group and session ids.
pub(crate) fn ids(_: &Args) -> ExitCode {
    // SAFETY: getpid/getpgrp/getsid(0) have no preconditions.
    let (pid, pgid, sid) = unsafe { (libc::getpid(), libc::getpgrp(), libc::getsid(0)) };
    println!("pid={pid} pgid={pgid} sid={sid}");
    ExitCode::SUCCESS
}

/// Is stdin a terminal, and is it our controlling terminal?
pub(crate) fn tty(_: &Args) -> ExitCode {
    // SAFETY: isatty/tcgetsid/getsid take an fd or 0 only.
    let (isatty, ctty) = unsafe {
        let isatty = libc::isatty(0) == 1;
        let tsid = libc::tcgetsid(0);
        (isatty, tsid > 0 && tsid == libc::getsid(0))
    };
    let dev_tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .is_ok();
    println!(
        "isatty={} ctty={} dev_tty={}",
        isatty as u8, ctty as u8, dev_tty as u8
    );
    ExitCode::SUCCESS
}
