//! The tables' own checks: reasons, no duplicates, names match numbers.

use super::*;

/// Calls the filter must never let through, whatever the tables say:
/// each is either absent from [`ALLOW`] (ENOSYS) or refused
/// unconditionally by [`POLICY`].
const FORBIDDEN: &[&str] = &[
    "pidfd_getfd",
    "process_madvise",
    "name_to_handle_at",
    "open_by_handle_at",
    "kcmp",
    "modify_ldt",
    "uselib",
    "move_pages",
    "migrate_pages",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "setns",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "userfaultfd",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "quotactl_fd",
    "syslog",
    "iopl",
    "ioperm",
    "clone3",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "settimeofday",
    "clock_settime",
    "sethostname",
];

#[test]
fn policy_compiles_and_every_line_has_a_reason() {
    let compiled = Policy::default().compile().expect("compile");
    for rule in POLICY {
        assert!(!rule.why.is_empty(), "{} has no reason", rule.name);
        assert!(rule.errno == EPERM || rule.errno == ENOSYS, "{}", rule.name);
    }
    for a in ALLOW {
        assert!(!a.why.is_empty(), "{} has no reason", a.name);
    }
    // The kernel refuses a program longer than BPF_MAXINSNS (4096) with
    // EINVAL at install time: a growing allow list must fail here first.
    // (`compile` refuses such a program; this shows the margin.)
    eprintln!("the policy: {} BPF instructions", compiled.instructions());
    assert!(compiled.instructions() <= 4096);
}

/// What the tables cannot say is refused at compile time, with the line.
#[test]
fn a_table_the_program_cannot_express_is_refused() {
    static TWICE: &[Rule] = &[
        deny("mount", libc::SYS_mount, EPERM, "once"),
        deny("mount", libc::SYS_mount, EPERM, "twice"),
    ];
    let err = Policy {
        allow: ALLOW,
        rules: TWICE,
    }
    .compile()
    .unwrap_err();
    assert!(
        matches!(err, CompileError::Duplicate { syscall: "mount" }),
        "{err}"
    );
    static WIDE: &[Rule] = &[deny_when(
        "ioctl",
        libc::SYS_ioctl,
        When::OneOf {
            arg: 1,
            values: &[1 << 40],
        },
        EPERM,
        "a value over 32 bits",
    )];
    let err = Policy {
        allow: ALLOW,
        rules: WIDE,
    }
    .compile()
    .unwrap_err();
    assert!(
        matches!(
            err,
            CompileError::Condition {
                syscall: "ioctl",
                ..
            }
        ),
        "{err}"
    );
    static TWO_BITS: &[Rule] = &[deny_when(
        "unshare",
        libc::SYS_unshare,
        When::AnyBitSet { arg: 0, bits: &[3] },
        EPERM,
        "two bits in one entry",
    )];
    let err = Policy {
        allow: ALLOW,
        rules: TWO_BITS,
    }
    .compile()
    .unwrap_err();
    assert!(
        matches!(
            err,
            CompileError::Condition {
                syscall: "unshare",
                ..
            }
        ),
        "{err}"
    );
    static NEGATIVE: &[Allowed] = &[Allowed {
        name: "bad",
        nr: -1,
        why: "a negative number",
    }];
    let err = Policy {
        allow: NEGATIVE,
        rules: POLICY,
    }
    .compile()
    .unwrap_err();
    assert!(
        matches!(err, CompileError::Number { syscall: "bad", .. }),
        "{err}"
    );
}

#[test]
fn each_syscall_appears_once_per_table() {
    let mut seen = std::collections::BTreeSet::new();
    for rule in POLICY {
        assert!(seen.insert(rule.nr), "{} listed twice in POLICY", rule.name);
    }
    let mut seen = std::collections::BTreeSet::new();
    for a in ALLOW {
        assert!(seen.insert(a.nr), "{} listed twice in ALLOW", a.name);
        let names = ALLOW.iter().filter(|b| b.name == a.name).count();
        assert_eq!(names, 1, "{} named twice in ALLOW", a.name);
    }
}

/// An unconditional refusal is not also on the allow list (it would
/// read as allowed), and an argument check applies to an allowed call
/// (otherwise the check is dead: the call is refused whatever it says).
#[test]
fn denies_and_argument_checks_agree_with_the_allow_list() {
    let allowed = |nr| ALLOW.iter().any(|a| a.nr == nr);
    for rule in POLICY {
        match rule.when {
            When::Always => assert!(
                !allowed(rule.nr),
                "{} is refused by POLICY and listed in ALLOW",
                rule.name
            ),
            _ => assert!(
                allowed(rule.nr),
                "{} has an argument check but is not in ALLOW",
                rule.name
            ),
        }
    }
}

#[test]
fn every_forbidden_call_is_refused() {
    for name in FORBIDDEN {
        assert!(
            !ALLOW.iter().any(|a| a.name == *name),
            "{name} must not be on the allow list"
        );
        if let Some(rule) = POLICY.iter().find(|r| r.name == *name) {
            assert_eq!(rule.when, When::Always, "{name} is refused only sometimes");
        }
    }
}

/// The names in the tables are the names of the numbers beside them
/// (a copy-paste slip would allow one call under another's name):
/// every line reads `allow("x", SYS_x, ...)` or `deny("x", libc::SYS_x, ...)`.
#[test]
fn names_match_numbers() {
    let lines = include_str!("allow.rs")
        .lines()
        .chain(include_str!("../seccomp.rs").lines())
        .map(str::trim_start)
        .filter(|l| {
            ["allow(\"", "deny(\"", "deny_when(\""]
                .iter()
                .any(|p| l.starts_with(p))
        });
    let mut n = 0;
    for line in lines {
        let name = line.split('"').nth(1).unwrap();
        assert!(
            line.contains(&format!(" SYS_{name},")) || line.contains(&format!("::SYS_{name},")),
            "the line for {name} does not use SYS_{name}: {line}"
        );
        n += 1;
    }
    assert_eq!(n, ALLOW.len() + POLICY.len());
}
