//! Limits and the PID 1 reaper, tried from inside: zombies, fork bombs, threads, memory, the loopback network.

use std::process::ExitCode;

use crate::Args;
/// Leave an orphan behind (re-parented to PID 1), wait for it to end,
/// then look for zombies in the whole PID namespace.
pub(crate) fn orphan_zombies(_: &Args) -> ExitCode {
    // The shell prints the background job's pid and exits at once,
    // so `sleep` is re-parented to PID 1. A zombie stays listed in
    // /proc until reaped, so the pid vanishing proves the reaping.
    let out = std::process::Command::new("/bin/sh")
        .args(["-c", "sleep 0.2 >/dev/null & echo $!"])
        .output();
    let pid: u32 = match out
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
    {
        Some(p) => p,
        None => {
            println!("could not start the orphan");
            return ExitCode::from(2);
        }
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let stat = format!("/proc/{pid}/stat");
    loop {
        match std::fs::read_to_string(&stat) {
            Err(_) => {
                println!("reaped");
                break;
            }
            Ok(s) if std::time::Instant::now() > deadline => {
                println!("not reaped: {s}");
                break;
            }
            Ok(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    }
    ExitCode::SUCCESS
}

/// Fork until refused; children wait in pause(). Capped so that a
/// missing limit cannot take the machine down.
pub(crate) fn forkbomb(a: &Args) -> ExitCode {
    let cap: u32 = a.arg(1).parse().unwrap_or(1000);
    let mut n = 0;
    let mut last_err = 0;
    while n < cap {
        // SAFETY: single-threaded process; the child only pauses.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: pause(2)/_exit(2) are async-signal-safe.
            unsafe {
                libc::pause();
                libc::_exit(0);
            }
        }
        if pid < 0 {
            last_err = std::io::Error::last_os_error().raw_os_error().unwrap_or(-1);
            break;
        }
        n += 1;
    }
    println!("forks={n} errno={last_err}");
    ExitCode::SUCCESS
}

/// Start and join a thread: glibc tries clone3 (ENOSYS here) then clone.
pub(crate) fn thread(_: &Args) -> ExitCode {
    let r = std::thread::spawn(|| 7).join();
    println!("thread={}", r.unwrap_or(0));
    ExitCode::SUCCESS
}

/// Allocate and touch N MiB.
pub(crate) fn alloc(a: &Args) -> ExitCode {
    let mib: usize = a.arg(1).parse().unwrap_or(1);
    let mut blocks = Vec::new();
    for _ in 0..mib {
        blocks.push(vec![1u8; 1 << 20]);
    }
    println!("allocated={}", blocks.len());
    ExitCode::SUCCESS
}

/// Connect to a listener on 127.0.0.1 in the same process: proves lo is up.
pub(crate) fn loopback(_: &Args) -> ExitCode {
    let l = match std::net::TcpListener::bind("127.0.0.1:0") {
        Ok(l) => l,
        Err(e) => {
            println!("bind: {e}");
            return ExitCode::SUCCESS;
        }
    };
    let addr = l.local_addr().map(|a| a.to_string()).unwrap_or_default();
    match std::net::TcpStream::connect(&addr) {
        Ok(_) => println!("connected"),
        Err(e) => println!("connect: {e}"),
    }
    ExitCode::SUCCESS
}
