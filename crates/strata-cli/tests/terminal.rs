//! The creator's terminal is out of a Sandbox's reach: `strata sandbox
//! create` run from an interactive terminal (a pty, through script(1))
//! leaves no process of the Sandbox in the creator's session, so a command
//! that opens `/dev/tty` gets ENXIO and writes nothing to that terminal
//! (docs/security.md, "the creator's terminal").

mod common;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::sb::{text, Rm, Sb};
use common::BIN;

/// (ppid, session id, tty_nr) from `/proc/PID/stat` text (proc(5)).
fn stat_fields(stat: &str) -> (u32, u32, u32) {
    let rest = stat.rsplit_once(')').expect("stat has a comm field").1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f[i].parse::<i64>().expect("numeric stat field") as u32;
    (n(1), n(3), n(4))
}

fn stat_of(pid: u32) -> (u32, u32, u32) {
    stat_fields(&std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read stat"))
}

fn children(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .map(|s| stat_fields(&s).0 == pid)
                .unwrap_or(false)
        })
        .collect()
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[test]
fn a_command_cannot_reach_the_creators_terminal() {
    let sb = Sb::with_project(&[("a.txt", b"a\n")]);
    let dir = sb.env.path("tty");
    std::fs::create_dir_all(&dir).unwrap();
    let (created, creator, done) = (
        dir.join("created.json"),
        dir.join("creator.stat"),
        dir.join("done"),
    );
    // Under script(1) the shell is a session leader with the pty as its
    // controlling terminal, and `strata sandbox create` runs in that
    // session, as from an admin's interactive shell. The shell then keeps
    // the terminal open until the test is done.
    let inner = format!(
        "cat /proc/$$/stat > {creator}; STRATA_SANDBOX_STATE={state} {bin} --store {store} --json sandbox create --label suite=cli-sandbox > {created} 2>&1; \
         i=0; while [ ! -e {done} ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done",
        creator = shell_quote(&creator.to_string_lossy()),
        state = shell_quote(&sb.state.path().to_string_lossy()),
        bin = shell_quote(BIN),
        store = shell_quote(&sb.env.store.to_string_lossy()),
        created = shell_quote(&created.to_string_lossy()),
        done = shell_quote(&done.to_string_lossy()),
    );
    let mut script = Command::new("script")
        .args(["-qfec", &inner, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script(1) (util-linux) must be installed");
    // The terminal's output (what script copies from the pty master), read
    // on a thread until script ends.
    let mut term_out = script.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = term_out.read_to_end(&mut v);
        v
    });

    let t0 = Instant::now();
    let id = loop {
        let v: Option<serde_json::Value> = std::fs::read(&created)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        if let Some(id) = v.as_ref().and_then(|v| v["sandbox"].as_str()) {
            break id.to_string();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "sandbox create under a pty did not finish: {:?}",
            std::fs::read_to_string(&created)
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let _rm = Rm(&sb, id.clone());
    let (_, creator_sid, creator_tty) =
        stat_fields(&std::fs::read_to_string(&creator).expect("creator's stat"));
    assert_ne!(
        creator_tty, 0,
        "the test's premise: the creator has a controlling terminal"
    );

    // The attack: a pipe-mode command writes to /dev/tty.
    let ws = sb.mount(&id, "p/main");
    let marker = format!("TTY-MARKER-{}", std::process::id());
    let out = sb.sh(&ws, &format!("echo {marker} >/dev/tty"));
    let err = text(&out.stderr);
    assert!(
        !out.status.success(),
        "writing to /dev/tty succeeded: {err}"
    );
    assert!(
        err.contains("No such device or address"),
        "expected ENXIO for /dev/tty, got: {err}"
    );

    // The Sandbox's processes: the monitor (recorded), PID 1 (its child)
    // and the daemon (PID 1's child): none in the creator's session, none
    // with a controlling terminal.
    let rec: serde_json::Value = serde_json::from_slice(
        &std::fs::read(sb.state.path().join(&id).join("sandbox.json")).expect("record"),
    )
    .unwrap();
    let monitor = rec["monitor"]["pid"].as_u64().expect("monitor pid") as u32;
    let pid1 = *children(monitor)
        .first()
        .unwrap_or_else(|| panic!("no PID 1 below monitor {monitor}"));
    let daemon = *children(pid1)
        .iter()
        .find(|&&p| {
            let c = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            c.split(|b| *b == 0).nth(1) == Some(&b"__strata-daemon"[..])
        })
        .unwrap_or_else(|| panic!("no daemon below PID 1 {pid1}"));
    for (what, pid) in [("monitor", monitor), ("PID 1", pid1), ("daemon", daemon)] {
        let (_, sid, tty) = stat_of(pid);
        assert_eq!(
            tty, 0,
            "the Sandbox's {what} ({pid}) has a controlling terminal"
        );
        assert_ne!(
            sid, creator_sid,
            "the Sandbox's {what} ({pid}) is in the creator's session"
        );
    }
    // Nor are their standard streams the creator's terminal.
    for (what, pid) in [("monitor", monitor), ("daemon", daemon)] {
        for fd in 0..3 {
            let target = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).unwrap();
            assert!(
                !target.starts_with("/dev/pts") && !target.starts_with(Path::new("/dev/tty")),
                "the {what}'s fd {fd} is a terminal: {}",
                target.display()
            );
        }
    }

    // The terminal never saw the marker.
    std::fs::write(&done, b"").unwrap();
    let t1 = Instant::now();
    while script.try_wait().unwrap().is_none() {
        if t1.elapsed() > Duration::from_secs(30) {
            let _ = script.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = script.wait();
    let seen = text(&reader.join().unwrap());
    assert!(
        !seen.contains(&marker),
        "the command wrote to the creator's terminal: {seen:?}"
    );
}
