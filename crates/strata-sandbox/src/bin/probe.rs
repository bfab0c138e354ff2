//! `strata-sandbox-probe`: a small binary for the integration tests.
//!
//! It is both the re-exec'd Sandbox init (it calls `maybe_run_internal`
//! first) and the command run inside the Sandbox, answering one question
//! per subcommand on stdout. Exit codes: 0 = done, 2 = bad usage.

use std::io::{Read, Write};
use std::process::ExitCode;

fn main() -> ExitCode {
    strata_sandbox::maybe_run_internal();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    match arg(0) {
        // Identity and privilege lines of /proc/self/status.
        "status" => {
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
        "exit" => ExitCode::from(arg(1).parse::<u8>().unwrap_or(2)),
        "kill-self" => {
            let sig: i32 = arg(1).parse().unwrap_or(libc::SIGKILL);
            // The Rust runtime handles SIGSEGV/SIGBUS itself (stack
            // overflow detection): reset to the default action first.
            // SAFETY: SIG_DFL disposition, then raise(3); no handler runs.
            unsafe {
                libc::signal(sig, libc::SIG_DFL);
                libc::raise(sig);
            }
            ExitCode::from(2)
        }
        // Alternate lines on stdout and stderr.
        "streams" => {
            for i in 0..5 {
                println!("out-{i}");
                let _ = std::io::stdout().flush();
                eprintln!("err-{i}");
            }
            ExitCode::SUCCESS
        }
        // Leave an orphan behind (re-parented to PID 1), wait for it to end,
        // then look for zombies in the whole PID namespace.
        "orphan-zombies" => {
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
        // Try to create a file; print "ok" or "errno=N".
        "try-create" => {
            match std::fs::OpenOptions::new()
                .create_new(true)
                .write(true)
                .open(arg(1))
            {
                Ok(_) => {
                    let _ = std::fs::remove_file(arg(1));
                    println!("ok");
                }
                Err(e) => println!("errno={}", e.raw_os_error().unwrap_or(-1)),
            }
            ExitCode::SUCCESS
        }
        "ls" => {
            let mut names: Vec<String> = std::fs::read_dir(arg(1))
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            for n in names {
                println!("{n}");
            }
            ExitCode::SUCCESS
        }
        "cat" => {
            let mut v = Vec::new();
            let _ = std::fs::File::open(arg(1)).and_then(|mut f| f.read_to_end(&mut v));
            let _ = std::io::stdout().write_all(&v);
            ExitCode::SUCCESS
        }
        // Connect to a listener on 127.0.0.1 in the same process: proves lo is up.
        "loopback" => {
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
        // Fork until refused; children wait in pause(). Capped so that a
        // missing limit cannot take the machine down.
        "forkbomb" => {
            let cap: u32 = arg(1).parse().unwrap_or(1000);
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
        // Start and join a thread: glibc tries clone3 (ENOSYS here) then clone.
        "thread" => {
            let r = std::thread::spawn(|| 7).join();
            println!("thread={}", r.unwrap_or(0));
            ExitCode::SUCCESS
        }
        "env" => {
            for (k, v) in std::env::vars_os() {
                println!("{}={}", k.to_string_lossy(), v.to_string_lossy());
            }
            ExitCode::SUCCESS
        }
        "cwd" => {
            let d = std::env::current_dir().map(|p| p.display().to_string());
            println!("{}", d.unwrap_or_else(|e| format!("error: {e}")));
            ExitCode::SUCCESS
        }
        "stdin" => {
            let mut v = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut v);
            let _ = std::io::stdout().write_all(&v);
            ExitCode::SUCCESS
        }
        "sleep" => {
            let ms: u64 = arg(1).parse().unwrap_or(1000);
            std::thread::sleep(std::time::Duration::from_millis(ms));
            ExitCode::SUCCESS
        }
        // Allocate and touch N MiB.
        "alloc" => {
            let mib: usize = arg(1).parse().unwrap_or(1);
            let mut blocks = Vec::new();
            for _ in 0..mib {
                blocks.push(vec![1u8; 1 << 20]);
            }
            println!("allocated={}", blocks.len());
            ExitCode::SUCCESS
        }
        // Raw syscalls a command must not be able to make; "name=errno".
        "forbidden-syscalls" => {
            let errno = |r: libc::c_long| {
                if r < 0 {
                    std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
                } else {
                    0
                }
            };
            // SAFETY: raw syscalls with constant arguments and static C
            // strings; if one unexpectedly succeeded it would only affect
            // this process's own namespaces.
            let results = unsafe {
                [
                    (
                        "unshare_user",
                        errno(libc::syscall(libc::SYS_unshare, libc::CLONE_NEWUSER)),
                    ),
                    (
                        "unshare_mnt",
                        errno(libc::syscall(libc::SYS_unshare, libc::CLONE_NEWNS)),
                    ),
                    (
                        "umount2_tmp",
                        errno(libc::syscall(libc::SYS_umount2, c"/tmp".as_ptr(), 0)),
                    ),
                    (
                        "umount2_tmp_lazy",
                        errno(libc::syscall(
                            libc::SYS_umount2,
                            c"/tmp".as_ptr(),
                            libc::MNT_DETACH,
                        )),
                    ),
                    (
                        "mount_tmpfs",
                        errno(libc::syscall(
                            libc::SYS_mount,
                            c"none".as_ptr(),
                            c"/tmp".as_ptr(),
                            c"tmpfs".as_ptr(),
                            0,
                            0,
                        )),
                    ),
                    (
                        "open_tree_clone",
                        errno(libc::syscall(
                            libc::SYS_open_tree,
                            libc::AT_FDCWD,
                            c"/tmp".as_ptr(),
                            1, // OPEN_TREE_CLONE
                        )),
                    ),
                    (
                        "ptrace_pid1",
                        errno(libc::syscall(
                            libc::SYS_ptrace,
                            libc::PTRACE_ATTACH,
                            1,
                            0,
                            0,
                        )),
                    ),
                ]
            };
            for (name, e) in results {
                println!("{name}={e}");
            }
            ExitCode::SUCCESS
        }
        // Act as the daemon would: run ARGV... through the exec helper
        // (this binary re-executed as `__strata-exec`) as uid:gid 1500.
        "helper-run" => {
            let spec = strata_sandbox::ExecSpec {
                argv: args[1..].iter().map(Into::into).collect(),
                env: vec![("PATH".into(), "/usr/bin:/bin".into())],
                cwd: "/".into(),
                identity: strata_sandbox::Identity::default(),
                rlimits: vec![],
                session: Default::default(),
            };
            let exe = match std::env::current_exe() {
                Ok(e) => e,
                Err(e) => {
                    println!("current_exe: {e}");
                    return ExitCode::from(2);
                }
            };
            let run = strata_sandbox::exec_helper_command(&exe, &spec)
                .map_err(|e| e.to_string())
                .and_then(|h| h.spawn().map_err(|e| e.to_string()))
                .and_then(|(mut child, report)| {
                    let failure = report.read_blocking().map_err(|e| e.to_string())?;
                    Ok((child.wait().map_err(|e| e.to_string())?, failure))
                });
            if let Ok((_, Some(f))) = &run {
                println!(
                    "helper-failure: {}",
                    serde_json::to_string(f).unwrap_or_default()
                );
                return ExitCode::from(3);
            }
            let status = run.map(|(s, _)| s);
            match status {
                Ok(s) => ExitCode::from(s.code().unwrap_or(4) as u8),
                Err(e) => {
                    println!("spawn: {e}");
                    ExitCode::from(2)
                }
            }
        }
        // As the daemon: start a command through the exec helper, then
        // mount a tmpfs on /srv with a marker file; the command lists /srv
        // after a pause and must see the marker (mount propagation into the
        // command's own mount namespace).
        "propagation" => {
            // The command says "started" (it is then in its own mount
            // namespace: the helper creates it before execve), waits for
            // the marker for up to 5 s and lists /srv.
            let script = "echo started; i=0; \
                while [ ! -e /srv/marker ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done; \
                ls /srv";
            let spec = strata_sandbox::ExecSpec {
                argv: ["/bin/sh", "-c", script].iter().map(Into::into).collect(),
                env: vec![],
                cwd: "/".into(),
                identity: strata_sandbox::Identity::default(),
                rlimits: vec![],
                session: Default::default(),
            };
            let exe = std::env::current_exe().unwrap_or_default();
            let child = strata_sandbox::exec_helper_command(&exe, &spec)
                .map_err(|e| e.to_string())
                .and_then(|mut h| {
                    h.command.stdout(std::process::Stdio::piped());
                    h.spawn().map(|(c, _)| c).map_err(|e| e.to_string())
                });
            let mut child = match child {
                Ok(c) => c,
                Err(e) => {
                    println!("spawn: {e}");
                    return ExitCode::from(2);
                }
            };
            let Some(stdout) = child.stdout.take() else {
                return ExitCode::from(2);
            };
            let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
            let first = lines.next();
            if !matches!(&first, Some(Ok(l)) if l == "started") {
                println!("command did not start: {first:?}");
                return ExitCode::from(2);
            }
            let mounted = rustix::mount::mount(
                "tmpfs",
                "/srv",
                "tmpfs",
                rustix::mount::MountFlags::empty(),
                c"mode=0755",
            );
            if let Err(e) = mounted {
                println!("mount: {e}");
            }
            let _ = std::fs::write("/srv/marker", b"x");
            for l in lines.map_while(Result::ok) {
                println!("{l}");
            }
            let st = child.wait();
            println!("child: {st:?}");
            ExitCode::SUCCESS
        }
        // pid, process group and session ids.
        "ids" => {
            // SAFETY: getpid/getpgrp/getsid(0) have no preconditions.
            let (pid, pgid, sid) = unsafe { (libc::getpid(), libc::getpgrp(), libc::getsid(0)) };
            println!("pid={pid} pgid={pgid} sid={sid}");
            ExitCode::SUCCESS
        }
        // Is stdin a terminal, and is it our controlling terminal?
        "tty" => {
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
        // As the daemon: run `sh` (which starts a background sleep and a
        // foreground sleep) through the helper in its own process group,
        // cancel the whole group with SIGTERM, and count what is left.
        "cancel-group" => {
            let spec = strata_sandbox::ExecSpec {
                argv: ["/bin/sh", "-c", "sleep 1000 & sleep 1000"]
                    .iter()
                    .map(Into::into)
                    .collect(),
                env: vec![],
                cwd: "/".into(),
                identity: strata_sandbox::Identity::default(),
                rlimits: vec![],
                session: strata_sandbox::Session::NewProcessGroup,
            };
            let exe = std::env::current_exe().unwrap_or_default();
            let child = strata_sandbox::exec_helper_command(&exe, &spec)
                .map_err(|e| e.to_string())
                .and_then(|h| h.spawn().map(|(c, _)| c).map_err(|e| e.to_string()));
            let mut child = match child {
                Ok(c) => c,
                Err(e) => {
                    println!("spawn: {e}");
                    return ExitCode::from(2);
                }
            };
            let pgid = child.id() as i32;
            let count_sleeps = || {
                std::fs::read_dir("/proc")
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter(|e| {
                        std::fs::read(e.path().join("cmdline"))
                            .is_ok_and(|c| c.starts_with(b"sleep\0"))
                    })
                    .count()
            };
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while count_sleeps() < 2 && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let before = count_sleeps();
            // SAFETY: kill(2) of a process group with a plain signal.
            unsafe { libc::kill(-pgid, libc::SIGTERM) };
            let st = child.wait();
            let sig = st
                .ok()
                .and_then(|s| std::os::unix::process::ExitStatusExt::signal(&s));
            std::thread::sleep(std::time::Duration::from_millis(200));
            println!("before={before} signal={sig:?} leftover={}", count_sleeps());
            ExitCode::SUCCESS
        }
        // As the daemon: mount a tmpfs named NAME on /srv, say so, and keep
        // it until stdin closes.
        "mount-and-wait" => {
            let r = rustix::mount::mount(
                arg(1),
                "/srv",
                "tmpfs",
                rustix::mount::MountFlags::empty(),
                c"mode=0755",
            );
            match r {
                Ok(()) => println!("mounted"),
                Err(e) => println!("mount: {e}"),
            }
            let _ = std::io::stdout().flush();
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
            ExitCode::SUCCESS
        }
        other => {
            eprintln!("strata-sandbox-probe: unknown subcommand {other:?}");
            ExitCode::from(2)
        }
    }
}
