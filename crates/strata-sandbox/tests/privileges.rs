//! The privilege split, end to end in real namespaces (BRIEF §3).

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
}
