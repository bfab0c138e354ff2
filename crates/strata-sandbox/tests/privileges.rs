//! The privilege split, end to end in real namespaces (docs/design.md §3).

mod common;
use common::*;
use strata_sandbox::Outcome;

#[test]
fn command_has_no_privileges_and_a_filter() {
    let (o, out, err) = run(probe(&["status"]));
    assert_eq!(o, Outcome::Exited(0), "stderr: {err}");
    let field = |k: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(k))
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|| panic!("{k} missing in {out}"))
    };
    assert_eq!(field("Uid:"), "1500 1500 1500 1500");
    assert_eq!(field("Gid:"), "1500 1500 1500 1500");
    assert_eq!(field("Groups:"), "");
    assert_eq!(field("CapInh:"), "0000000000000000");
    assert_eq!(field("CapPrm:"), "0000000000000000");
    assert_eq!(field("CapEff:"), "0000000000000000");
    assert_eq!(field("CapBnd:"), "0000000000000000");
    assert_eq!(field("CapAmb:"), "0000000000000000");
    assert_eq!(field("NoNewPrivs:"), "1");
    assert_eq!(field("Seccomp:"), "2");
    assert_eq!(
        field("SecureBits:"),
        format!("{:#x}", strata_sandbox::exec::SECURE_BITS_VALUE)
    );
}

#[test]
fn user_namespaces_are_refused_to_the_command() {
    for argv in [
        &["unshare", "-U", "true"][..],
        &["unshare", "-Urm", "true"][..],
    ] {
        let (o, _out, err) = run(spec(argv));
        assert_ne!(o, Outcome::Exited(0), "{argv:?} succeeded; stderr: {err}");
        assert!(
            err.contains("Operation not permitted"),
            "{argv:?}: stderr: {err}"
        );
    }
}

#[test]
fn control_unshare_works_outside_the_sandbox() {
    // The host really allows user namespaces (docs/design.md §5): the refusal above
    // is the filter's doing, not the host's.
    require_root();
    let st = std::process::Command::new("setpriv")
        .args([
            "--reuid=1500",
            "--regid=1500",
            "--clear-groups",
            "unshare",
            "-U",
            "true",
        ])
        .status()
        .expect("run setpriv");
    assert!(
        st.success(),
        "unprivileged unshare -U fails on this host even without the filter"
    );
}

#[test]
fn umount_is_refused() {
    for argv in [
        &["umount", "/tmp"][..],
        &["umount", "-l", "/tmp"][..],
        &["umount", "/proc"][..],
    ] {
        let (o, _out, err) = run(spec(argv));
        assert_ne!(o, Outcome::Exited(0), "{argv:?} succeeded; stderr: {err}");
    }
}

#[test]
fn mount_is_refused() {
    let (o, _out, err) = run(spec(&["mount", "-t", "tmpfs", "none", "/tmp"]));
    assert_ne!(o, Outcome::Exited(0), "mount succeeded; stderr: {err}");
}

#[test]
fn threads_work_through_the_clone3_fallback() {
    let (o, out, err) = run(probe(&["thread"]));
    assert_eq!(o, Outcome::Exited(0), "stderr: {err}");
    assert_eq!(out.trim(), "thread=7");
}

#[test]
fn privileged_mode_keeps_root_and_capabilities() {
    require_root();
    let (o, out, err) = {
        let s = probe(&["status"]);
        let child =
            strata_sandbox::SandboxCommand::privileged(default_config(), s.argv, s.env, s.cwd)
                .init_exe(PROBE)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn");
        let (o, a, b) = child.wait_with_output().expect("run");
        (
            o,
            String::from_utf8_lossy(&a).into_owned(),
            String::from_utf8_lossy(&b).into_owned(),
        )
    };
    assert_eq!(o, Outcome::Exited(0), "stderr: {err}");
    assert!(out.contains("Uid:\t0\t0\t0\t0"), "{out}");
    assert!(out.contains("Seccomp:\t0"), "{out}");
    assert!(!out.contains("CapEff:\t0000000000000000"), "{out}");
}

#[test]
fn forbidden_raw_syscalls_fail_with_eperm_for_the_command() {
    let (o, out, err) = run(probe(&["forbidden-syscalls"]));
    assert_eq!(o, Outcome::Exited(0), "stderr: {err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 7, "{out}");
    for l in lines {
        assert!(
            l.ends_with(&format!("={}", libc::EPERM)),
            "{l} (all: {out})"
        );
    }
}

#[test]
fn selfcheck_reports_the_split_holds() {
    require_root();
    let id = strata_sandbox::Identity::default();
    let check = strata_sandbox::run_selfcheck(
        std::path::Path::new(PROBE),
        strata_sandbox::SandboxConfig::default(),
        id,
    )
    .expect("selfcheck");
    assert_eq!(check.problems(id), Vec::<String>::new(), "{check:?}");
    assert_eq!(check.denied.len(), 5);
    // And it notices when something is off: a different identity.
    let other = strata_sandbox::Identity::new(1600, 1600).unwrap();
    assert!(!check.problems(other).is_empty());
    // The host leaves user namespaces open (docs/design.md §5): the filter matters.
    assert!(strata_sandbox::host_allows_unprivileged_userns().expect("userns probe"));
}
