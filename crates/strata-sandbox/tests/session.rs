//! Process groups, sessions and PTY mode (`exec::Session`).

mod common;
use common::*;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::process::Stdio;
use strata_sandbox::{Outcome, Session};

fn ids(out: &str) -> (i64, i64, i64) {
    let get = |k: &str| -> i64 {
        out.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{k} missing in {out}"))
    };
    (get("pid="), get("pgid="), get("sid="))
}

#[test]
fn inherit_stays_in_the_init_group() {
    let (o, out, _) = run(probe(&["ids"]));
    assert_eq!(o, Outcome::Exited(0));
    let (pid, pgid, _) = ids(&out);
    assert_ne!(pid, pgid, "{out}");
}

#[test]
fn new_process_group_and_new_session() {
    let mut s = probe(&["ids"]);
    s.session = Session::NewProcessGroup;
    let (o, out, err) = run(s);
    assert_eq!(o, Outcome::Exited(0), "stderr: {err}");
    let (pid, pgid, sid) = ids(&out);
    assert_eq!(pid, pgid, "{out}");
    assert_ne!(pid, sid, "{out}");
    let mut s = probe(&["ids"]);
    s.session = Session::NewSession;
    let (o, out, err) = run(s);
    assert_eq!(o, Outcome::Exited(0), "stderr: {err}");
    let (pid, pgid, sid) = ids(&out);
    assert_eq!((pid, pid), (pgid, sid), "{out}");
}

#[test]
fn pty_mode_gives_a_controlling_terminal() {
    require_root();
    use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
    let master =
        openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).expect("openpt");
    grantpt(&master).expect("grantpt");
    unlockpt(&master).expect("unlockpt");
    let name = ptsname(&master, Vec::new()).expect("ptsname");
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open(name.to_str().expect("utf-8 pts name"))
        .expect("open slave");
    let mut s = probe(&["tty"]);
    s.session = Session::NewSessionWithTty;
    let mut cmd = strata_sandbox::exec_helper_command(std::path::Path::new(PROBE), &s)
        .expect("command")
        .command;
    cmd.stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave));
    let mut child = cmd.spawn().expect("spawn helper");
    drop(cmd); // drops our copies of the slave
    let mut master = std::fs::File::from(master);
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    // Reading the master ends with EIO once the slave is closed everywhere.
    while let Ok(n) = master.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    let st = child.wait().expect("wait");
    let out = String::from_utf8_lossy(&out);
    assert!(st.success(), "{st:?}: {out}");
    assert!(out.contains("isatty=1 ctty=1 dev_tty=1"), "{out}");
}

#[test]
fn pty_mode_without_a_terminal_is_an_error() {
    require_root();
    let mut s = probe(&["tty"]);
    s.session = Session::NewSessionWithTty;
    let child = strata_sandbox::SandboxCommand::new(strata_sandbox::SandboxConfig::default(), s)
        .init_exe(PROBE)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    match child.wait() {
        Err(strata_sandbox::RunError::Sandbox(f)) => {
            assert!(f.message.contains("TIOCSCTTY"), "{f:?}")
        }
        other => panic!("expected a session error, got {other:?}"),
    }
}
