//! The exec helper a Sandbox's daemon starts ahead of the next exec
//! (strata-sandbox `prestart`, strata-daemon `prestart`): one root
//! `__strata-exec` process, a child of the daemon, waits in the commands'
//! cgroup and mount namespace for the next command, and becomes it.
//! Checked here, from the host and from inside as the command's uid: the
//! next exec is run by exactly that process (its pid), with the full drop
//! (uid and gid 1500, no capabilities in any set, no_new_privs, seccomp in
//! filter mode) and in the commands' cgroup; a command running while a
//! helper waits cannot see it in /proc, signal it (the signal is refused)
//! or reach its descriptors, and the helper lives on to serve the next
//! exec; a waiting helper that dies (SIGKILL from the host) costs no exec:
//! the next one runs all the same, and a new helper waits after it.
//!
//! Its own `main` (harness = false): the binary is re-executed as the
//! Sandbox init, the daemon and the exec helper.

mod common;

use std::time::{Duration, Instant};

use strata_sdk::{Sandbox, Store, Workspace};

fn main() {
    strata_sdk::maybe_run_internal();
    strata_testkit::cases::require_root();
    let rt = tokio::runtime::Runtime::new().expect("tokio");
    let tmp = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let mut cases = common::Cases::new(&rt, tmp.path(), "prestart-test-run");
    cases.run(
        "the_waiting_helper_runs_the_next_command_with_the_full_drop",
        the_waiting_helper_runs_the_next_command_with_the_full_drop,
    );
    cases.run(
        "a_command_cannot_reach_the_waiting_helper",
        a_command_cannot_reach_the_waiting_helper,
    );
    cases.run(
        "a_killed_waiting_helper_costs_no_exec",
        a_killed_waiting_helper_costs_no_exec,
    );
    cases.finish();
}

async fn sandbox(dir: &std::path::Path, name: &str) -> (Store, Sandbox, Workspace) {
    common::sandbox(
        dir,
        name,
        "prestart-test-run",
        &[("hello.txt", b"hello\n".as_slice())],
    )
    .await
}

/// Field `name` of /proc/PID/status, if the process is there.
fn status_field(pid: u32, name: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|r| r.strip_prefix(':'))
            .map(|v| v.trim().to_string())
    })
}

/// argv of process `pid`, NUL-separated items.
fn argv(pid: u32) -> Vec<Vec<u8>> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .map(<[u8]>::to_vec)
        .collect()
}

/// The daemon's pid on the host: the process whose argv[1] is
/// `__strata-daemon` and whose socket is this Sandbox's.
fn daemon_of(sb: &Sandbox) -> u32 {
    let config = sb.info().daemon.config.to_string_lossy().into_owned();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let a = argv(p);
        if a.get(1).map(Vec::as_slice) == Some(b"__strata-daemon".as_slice())
            && a.iter().any(|x| String::from_utf8_lossy(x) == config)
        {
            return p;
        }
    }
    panic!("no daemon process with config {config}");
}

/// The helper waiting below `daemon`, other than `not` (host pid, pid in
/// the Sandbox's pid namespace): a child of the daemon whose argv[1] is
/// `__strata-exec`, asleep. Waits up to 10 s for exactly one.
async fn waiting_helper(daemon: u32, not: &[u32]) -> (u32, u32) {
    let t0 = Instant::now();
    loop {
        let mut found = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if not.contains(&p)
                || status_field(p, "PPid").as_deref() != Some(&daemon.to_string())
                || argv(p).get(1).map(Vec::as_slice) != Some(b"__strata-exec".as_slice())
            {
                continue;
            }
            let ns: Option<u32> = status_field(p, "NSpid")
                .and_then(|v| v.split_whitespace().last().and_then(|n| n.parse().ok()));
            if let Some(ns) = ns {
                found.push((p, ns));
            }
        }
        if found.len() == 1 {
            return found[0];
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "not one waiting helper below daemon {daemon} (found {found:?})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What a command reports about itself: ids, capability sets,
/// no_new_privs, seccomp mode, its cgroups.
const SELF_REPORT: &str = "id -u; id -g; \
    grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status; \
    cat /proc/self/cgroup";

fn assert_dropped(out: &str) {
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("1500"), "uid: {out}");
    assert_eq!(lines.next(), Some("1500"), "gid: {out}");
    for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(cap) && l.ends_with("0000000000000000")),
            "{cap} is not empty: {out}"
        );
    }
    assert!(
        out.lines()
            .any(|l| l.starts_with("NoNewPrivs:") && l.ends_with('1')),
        "no_new_privs is not set: {out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("Seccomp:") && l.ends_with('2')),
        "no seccomp filter: {out}"
    );
    assert!(
        out.lines().any(|l| l.ends_with("/commands")),
        "not in the commands' cgroup: {out}"
    );
}

/// After a first exec, a helper waits (a root child of the daemon, in the
/// commands' cgroup); the next exec's pid is that helper's, and the
/// command it became has the full drop. The one after is another process.
async fn the_waiting_helper_runs_the_next_command_with_the_full_drop(dir: &std::path::Path) {
    let (_store, sb, ws) = sandbox(dir, "drop").await;
    let daemon = daemon_of(&sb);
    common::sh(&ws, "true").await;
    let (host, inner) = waiting_helper(daemon, &[]).await;
    assert_eq!(
        status_field(host, "Uid")
            .as_deref()
            .and_then(|u| u.split_whitespace().next()),
        Some("0"),
        "the waiting helper is not root (it has not dropped anything yet)"
    );
    // Found as soon as it is spawned: it joins the commands' cgroup first
    // thing, before it waits (and so before any command of it runs).
    let t0 = Instant::now();
    loop {
        let cgroups = std::fs::read_to_string(format!("/proc/{host}/cgroup")).unwrap();
        if cgroups.lines().any(|l| l.ends_with("/commands")) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the waiting helper is not in the commands' cgroup: {cgroups}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let h = ws.exec(["sh", "-c", SELF_REPORT]).spawn().await.unwrap();
    assert_eq!(h.pid(), inner, "the exec was not run by the waiting helper");
    let o = collect(h).await;
    assert_dropped(&o);
    let (_, next) = waiting_helper(daemon, &[host]).await;
    assert_ne!(next, inner);
    let h = ws.exec(["sh", "-c", SELF_REPORT]).spawn().await.unwrap();
    assert_eq!(
        h.pid(),
        next,
        "the second exec was not run by the next helper"
    );
    assert_dropped(&collect(h).await);
    ws.unmount(true).await.unwrap();
    sb.close().await.unwrap();
}

/// Stdout of a spawned exec that must succeed.
async fn collect(mut h: strata_sdk::ExecHandle) -> String {
    let out = h.stdout.take().expect("stdout").read_to_end().await;
    let st = h.wait().await.unwrap();
    let out = String::from_utf8_lossy(&out).into_owned();
    assert!(st.success(), "{st:?}: {out}");
    out
}

/// A command that runs while the next helper waits is told that helper's
/// pid (on stdin; /proc hides it) and tries what a hostile command would:
/// look at it in /proc, open its descriptors, signal it and its process
/// group. Every attempt is refused, the helper is alive afterwards and
/// runs the next exec.
async fn a_command_cannot_reach_the_waiting_helper(dir: &std::path::Path) {
    let (_store, sb, ws) = sandbox(dir, "hostile").await;
    let daemon = daemon_of(&sb);
    common::sh(&ws, "true").await;
    let (first, _) = waiting_helper(daemon, &[]).await;
    let script = "read pid; \
        if [ -e /proc/$pid ]; then echo proc-visible; else echo proc-hidden; fi; \
        if ls /proc/$pid/fd >/dev/null 2>&1; then echo fds-open; else echo fds-refused; fi; \
        if kill -0 $pid 2>/dev/null; then echo kill0-ok; else echo kill0-refused; fi; \
        if kill -s KILL $pid 2>/dev/null; then echo kill-ok; else echo kill-refused; fi; \
        if kill -s KILL -- -$pid 2>/dev/null; then echo killpg-ok; else echo killpg-refused; fi";
    let mut h = ws
        .exec(["sh", "-c", script])
        .stdin_pipe()
        .spawn()
        .await
        .unwrap();
    // The hostile command itself was the waiting helper; the one started
    // after it is the target.
    let (target, target_inner) = waiting_helper(daemon, &[first]).await;
    let mut stdin = h.stdin.take().expect("stdin");
    stdin
        .write(format!("{target_inner}\n").into_bytes())
        .await
        .unwrap();
    stdin.close().await.unwrap();
    let out = collect(h).await;
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "proc-hidden",
            "fds-refused",
            "kill0-refused",
            "kill-refused",
            "killpg-refused"
        ],
        "the command reached the waiting helper {target_inner}"
    );
    // Alive (it may still be starting, so running rather than asleep)
    // and still the helper; the next exec shows it was not disturbed.
    assert!(
        status_field(target, "State").is_some_and(|s| !s.starts_with('Z'))
            && argv(target).get(1).map(Vec::as_slice) == Some(b"__strata-exec".as_slice()),
        "the waiting helper {target} is gone: {:?}",
        status_field(target, "State")
    );
    let h = ws.exec(["sh", "-c", SELF_REPORT]).spawn().await.unwrap();
    assert_eq!(
        h.pid(),
        target_inner,
        "the helper did not serve the next exec"
    );
    assert_dropped(&collect(h).await);
    ws.unmount(true).await.unwrap();
    sb.close().await.unwrap();
}

/// The waiting helper killed from the host (as a kill of every process in
/// the commands' cgroup would): the next exec still runs, by a helper of
/// its own, and a new helper waits after it.
async fn a_killed_waiting_helper_costs_no_exec(dir: &std::path::Path) {
    let (_store, sb, ws) = sandbox(dir, "killed").await;
    let daemon = daemon_of(&sb);
    common::sh(&ws, "true").await;
    let (host, inner) = waiting_helper(daemon, &[]).await;
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(host as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    // Gone (a zombie until the daemon reaps it) before the next exec.
    let t0 = Instant::now();
    while status_field(host, "State").is_some_and(|s| !s.starts_with('Z')) {
        assert!(t0.elapsed() < Duration::from_secs(10), "{host} did not die");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let h = ws.exec(["sh", "-c", SELF_REPORT]).spawn().await.unwrap();
    assert_ne!(h.pid(), inner);
    assert_dropped(&collect(h).await);
    let (_, next) = waiting_helper(daemon, &[host]).await;
    let h = ws.exec(["sh", "-c", SELF_REPORT]).spawn().await.unwrap();
    assert_eq!(h.pid(), next, "no helper waited after the fallback");
    assert_dropped(&collect(h).await);
    ws.unmount(true).await.unwrap();
    sb.close().await.unwrap();
}
