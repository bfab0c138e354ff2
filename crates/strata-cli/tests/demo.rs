//! `strata demo` runs its self-checking tour and exits 0.

mod common;

#[test]
fn demo_passes_every_check() {
    let out = assert_cmd::Command::new(common::BIN)
        .args(["--json", "demo"])
        .timeout(std::time::Duration::from_secs(300))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "demo failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], true);
    let steps = v["steps"].as_array().unwrap();
    assert!(steps.len() >= 10, "{v}");
    assert!(steps.iter().all(|s| s["ok"] == true), "{v}");
    // CI runs as root with /dev/fuse: the Sandbox half must have run, not
    // been skipped.
    assert!(
        steps.iter().all(|s| s["skipped"] != true),
        "a demo step was skipped: {v}"
    );
    for want in [
        "run both agents' commands at once, as uid 1500",
        "isolation: what a command can and cannot do",
        "commit both Workspaces",
        "read the committed work back from the Store",
    ] {
        assert!(
            steps.iter().any(|s| s["step"] == want),
            "no step {want:?}: {v}"
        );
    }

    // The human form says the same.
    let out = assert_cmd::Command::new(common::BIN)
        .arg("demo")
        .timeout(std::time::Duration::from_secs(300))
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("checks passed"), "{text}");
    assert!(!text.contains("FAIL"), "{text}");
}
