//! Acting as the Sandbox's daemon would: the exec helper, forbidden syscalls, mount propagation, cancelling a group.

use std::io::{Read, Write};
use std::process::ExitCode;

use crate::Args;
/// Raw syscalls a command must not be able to make; "name=errno".
pub(crate) fn forbidden_syscalls(_: &Args) -> ExitCode {
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

/// Act as the daemon would: run ARGV... through the exec helper
/// (this binary re-executed as `__strata-exec`) as uid:gid 1500.
pub(crate) fn helper_run(a: &Args) -> ExitCode {
    let spec = strata_sandbox::ExecSpec {
        argv: a.0[1..].iter().map(Into::into).collect(),
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

/// As the daemon: start a command through the exec helper, then
/// mount a tmpfs on /srv with a marker file; the command lists /srv
/// after a pause and must see the marker (mount propagation into the
/// commands' mount namespace).
pub(crate) fn propagation(_: &Args) -> ExitCode {
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

/// As the daemon: run `sh` (which starts a background sleep and a
/// foreground sleep) through the helper in its own process group,
/// cancel the whole group with SIGTERM, and count what is left.
pub(crate) fn cancel_group(_: &Args) -> ExitCode {
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
                std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c.starts_with(b"sleep\0"))
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

/// As the daemon: mount a tmpfs named NAME on /srv, say so, and keep
/// it until stdin closes.
pub(crate) fn mount_and_wait(a: &Args) -> ExitCode {
    let r = rustix::mount::mount(
        a.arg(1),
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
