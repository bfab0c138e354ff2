//! The hand-built program ([`super::bpf`]) gives every call the answer the
//! tables give it, checked exhaustively over the syscall numbers rather
//! than argued by reading BPF.
//!
//! Three answers are compared for each (architecture, number, arguments):
//!
//! 1. the tables read directly ([`oracle`], a few lines of plain Rust);
//! 2. the program [`Policy::compile`] builds, run in a classic-BPF
//!    interpreter ([`run`]);
//! 3. the four programs seccompiler 0.5 builds from the same tables (how
//!    the policy was compiled before), combined as the kernel combines
//!    several filters (`seccomp_run_filters`: the most severe action wins;
//!    between equal actions, the filter installed last).
//!
//! The inputs: every number below 1024 (this kernel's highest is about
//! 460), the edges of the number space (the x32 bit, "negative" numbers),
//! four architecture values, and for the calls with argument checks a
//! corpus of argument vectors built around the checks' own bits and
//! values (each bit alone in each argument, each value with its high half
//! set, neighbours, pairs) plus pseudo-random ones. That the kernel
//! accepts the program and applies it is tests/seccomp.rs's part.

use std::collections::BTreeMap;

use libc::{sock_filter, ENOSYS, EPERM};
use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch,
};

use super::bpf::{AUDIT_ARCH_X86_64, X32_SYSCALL_BIT};
use super::{Policy, Rule, When};

/// A program as the kernel takes it.
type BpfProgram = Vec<sock_filter>;

/// seccompiler's output in libc's layout (the same fields).
fn from_seccompiler(filter: SeccompFilter) -> BpfProgram {
    let prog: seccompiler::BpfProgram = filter.try_into().unwrap();
    prog.iter()
        .map(|i| sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect()
}

const AUDIT_ARCH_I386: u32 = 3 | 0x4000_0000;

/// What a filter answers, as the kernel reads a return value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Allow,
    Errno(u32),
    KillProcess,
}

fn verdict(ret: u32) -> Verdict {
    match ret & libc::SECCOMP_RET_ACTION_FULL {
        libc::SECCOMP_RET_ALLOW => Verdict::Allow,
        libc::SECCOMP_RET_ERRNO => Verdict::Errno(ret & libc::SECCOMP_RET_DATA),
        libc::SECCOMP_RET_KILL_PROCESS => Verdict::KillProcess,
        other => panic!("a filter returned an action the policy never uses: {other:#x}"),
    }
}

/// `struct seccomp_data` as the kernel lays it out (x86_64, little-endian).
fn data(arch: u32, nr: u32, args: [u64; 6]) -> [u8; 64] {
    let mut d = [0u8; 64];
    d[0..4].copy_from_slice(&nr.to_le_bytes());
    d[4..8].copy_from_slice(&arch.to_le_bytes());
    d[8..16].copy_from_slice(&0x7f00_dead_beefu64.to_le_bytes());
    for (i, a) in args.iter().enumerate() {
        d[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
    }
    d
}

/// The instructions any of the programs uses, checked as the kernel's
/// `seccomp_check_filter` and `bpf_check_classic` would: aligned loads
/// inside `seccomp_data`, forward jumps that stay inside, `ret` last.
fn validate(prog: &[sock_filter]) {
    assert!(
        !prog.is_empty() && prog.len() <= 4096,
        "length {}",
        prog.len()
    );
    let last = prog[prog.len() - 1];
    assert_eq!(
        u32::from(last.code),
        libc::BPF_RET | libc::BPF_K,
        "the last instruction is not a ret"
    );
    for (pc, ins) in prog.iter().enumerate() {
        let code = u32::from(ins.code);
        let lands = |off: usize| {
            assert!(pc + 1 + off < prog.len(), "jump at {pc} lands outside");
        };
        match code {
            c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => {
                assert!(
                    ins.k % 4 == 0 && ins.k < 64,
                    "load at {pc}: offset {}",
                    ins.k
                )
            }
            c if c == libc::BPF_ALU | libc::BPF_AND | libc::BPF_K => {}
            c if c == libc::BPF_JMP | libc::BPF_JA => lands(ins.k as usize),
            c if [libc::BPF_JEQ, libc::BPF_JGE, libc::BPF_JGT, libc::BPF_JSET]
                .iter()
                .any(|&j| c == libc::BPF_JMP | j | libc::BPF_K) =>
            {
                lands(usize::from(ins.jt));
                lands(usize::from(ins.jf));
            }
            c if c == libc::BPF_RET | libc::BPF_K => {}
            other => panic!("instruction {other:#x} at {pc} is not one the interpreter knows"),
        }
    }
}

/// Run a validated program over `d`; returns its return value.
fn run(prog: &[sock_filter], d: &[u8; 64]) -> u32 {
    run_counting(prog, d).0
}

/// As [`run`], with the number of instructions run.
fn run_counting(prog: &[sock_filter], d: &[u8; 64]) -> (u32, usize) {
    let mut a: u32 = 0;
    let mut pc = 0usize;
    let mut steps = 0;
    loop {
        steps += 1;
        let ins = prog[pc];
        let code = u32::from(ins.code);
        let cond = |taken: bool| usize::from(if taken { ins.jt } else { ins.jf });
        pc += 1 + match code {
            c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => {
                let k = ins.k as usize;
                a = u32::from_le_bytes(d[k..k + 4].try_into().unwrap());
                0
            }
            c if c == libc::BPF_ALU | libc::BPF_AND | libc::BPF_K => {
                a &= ins.k;
                0
            }
            c if c == libc::BPF_JMP | libc::BPF_JA => ins.k as usize,
            c if c == libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K => cond(a == ins.k),
            c if c == libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K => cond(a >= ins.k),
            c if c == libc::BPF_JMP | libc::BPF_JGT | libc::BPF_K => cond(a > ins.k),
            c if c == libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K => cond(a & ins.k != 0),
            c if c == libc::BPF_RET | libc::BPF_K => return (ins.k, steps),
            other => panic!("instruction {other:#x} at {pc}"),
        };
    }
}

/// Several filters together, as `seccomp_run_filters` combines them:
/// walking from the newest, a strictly more severe action (a smaller
/// value as s32) replaces the answer.
fn run_all(progs: &[BpfProgram], d: &[u8; 64]) -> u32 {
    let mut ret = libc::SECCOMP_RET_ALLOW;
    for prog in progs.iter().rev() {
        let cur = run(prog, d);
        let action = |r: u32| (r & libc::SECCOMP_RET_ACTION_FULL) as i32;
        if action(cur) < action(ret) {
            ret = cur;
        }
    }
    ret
}

/// The tables read directly: the answer a reviewer reads off them.
fn oracle(policy: &Policy, arch: u32, nr: u32, args: [u64; 6]) -> Verdict {
    if arch != AUDIT_ARCH_X86_64 {
        return Verdict::KillProcess;
    }
    if nr >= X32_SYSCALL_BIT {
        return Verdict::Errno(ENOSYS as u32);
    }
    if let Some(rule) = policy.rules.iter().find(|r| r.nr as u32 == nr) {
        let low = |arg: u8| args[usize::from(arg)] & 0xffff_ffff;
        let refused = match rule.when {
            When::Always => true,
            When::AnyBitSet { arg, bits } => bits.iter().any(|&b| args[usize::from(arg)] & b == b),
            When::OneOf { arg, values } => values.contains(&low(arg)),
            When::NotOneOf { arg, values } => !values.contains(&low(arg)),
        };
        return if refused {
            Verdict::Errno(rule.errno as u32)
        } else {
            Verdict::Allow
        };
    }
    if policy.allow.iter().any(|a| a.nr as u32 == nr) {
        Verdict::Allow
    } else {
        Verdict::Errno(ENOSYS as u32)
    }
}

/// The tables compiled as before, with seccompiler: the allow list
/// (ENOSYS for the rest; every call POLICY names passes it), one program
/// per errno of POLICY, and the x32 guard.
fn seccompiler_programs(policy: &Policy) -> Vec<BpfProgram> {
    let arch = TargetArch::x86_64;
    let mut by_errno: BTreeMap<i32, BTreeMap<i64, Vec<SeccompRule>>> = BTreeMap::new();
    for rule in policy.rules {
        by_errno
            .entry(rule.errno)
            .or_default()
            .insert(rule.nr, seccompiler_rules(rule));
    }
    let passed: BTreeMap<i64, Vec<SeccompRule>> = policy
        .allow
        .iter()
        .map(|a| a.nr)
        .chain(policy.rules.iter().map(|r| r.nr))
        .map(|nr| (nr, Vec::new()))
        .collect();
    let allow = SeccompFilter::new(
        passed,
        SeccompAction::Errno(ENOSYS as u32),
        SeccompAction::Allow,
        arch,
    )
    .unwrap();
    let mut progs: Vec<BpfProgram> = vec![from_seccompiler(allow)];
    for (errno, table) in by_errno {
        let f = SeccompFilter::new(
            table,
            SeccompAction::Allow,
            SeccompAction::Errno(errno as u32),
            arch,
        )
        .unwrap();
        progs.push(from_seccompiler(f));
    }
    progs.push(x32_guard());
    progs
}

fn seccompiler_rules(rule: &Rule) -> Vec<SeccompRule> {
    let one = |conds: Vec<SeccompCondition>| SeccompRule::new(conds).unwrap();
    match rule.when {
        When::Always => Vec::new(),
        When::AnyBitSet { arg, bits } => bits
            .iter()
            .map(|&bit| {
                one(vec![SeccompCondition::new(
                    arg,
                    SeccompCmpArgLen::Qword,
                    SeccompCmpOp::MaskedEq(bit),
                    bit,
                )
                .unwrap()])
            })
            .collect(),
        When::OneOf { arg, values } => values
            .iter()
            .map(|&v| {
                one(vec![SeccompCondition::new(
                    arg,
                    SeccompCmpArgLen::Dword,
                    SeccompCmpOp::Eq,
                    v,
                )
                .unwrap()])
            })
            .collect(),
        When::NotOneOf { arg, values } => vec![one(values
            .iter()
            .map(|&v| {
                SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, v).unwrap()
            })
            .collect())],
    }
}

/// The x32 guard as it was written beside seccompiler's programs.
fn x32_guard() -> BpfProgram {
    let s = |code: u32, k: u32| sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let j = |code: u32, k: u32, jt: u8, jf: u8| sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    vec![
        s(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 4),
        j(
            libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
            AUDIT_ARCH_X86_64,
            1,
            0,
        ),
        s(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
        s(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
        j(
            libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K,
            X32_SYSCALL_BIT,
            0,
            1,
        ),
        s(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | ENOSYS as u32,
        ),
        s(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
    ]
}

/// Argument vectors for a call with a check: built around the check.
fn argument_corpus(rules: &[Rule], nr: u32) -> Vec<[u64; 6]> {
    let mut out = vec![
        [0; 6],
        [u64::MAX; 6],
        [0x5555_5555_5555_5555; 6],
        [0xaaaa_aaaa_aaaa_aaaa; 6],
    ];
    for arg in 0..6 {
        for bit in 0..64 {
            let mut v = [0u64; 6];
            v[arg] = 1 << bit;
            out.push(v);
            let mut w = [u64::MAX; 6];
            w[arg] = !(1u64 << bit);
            out.push(w);
        }
    }
    for rule in rules.iter().filter(|r| r.nr as u32 == nr) {
        let (arg, list) = match rule.when {
            When::Always => continue,
            When::AnyBitSet { arg, bits } => (arg, bits),
            When::OneOf { arg, values } | When::NotOneOf { arg, values } => (arg, values),
        };
        let mut put = |x: u64| {
            let mut v = [0u64; 6];
            v[usize::from(arg)] = x;
            out.push(v);
        };
        for &a in list {
            for x in [
                a,
                a | 1 << 32,
                a | 0xffff_ffff_0000_0000,
                a.wrapping_add(1),
                a.wrapping_sub(1),
                !a,
            ] {
                put(x);
            }
            for &b in list {
                put(a | b);
            }
        }
        // xorshift64: reproducible pseudo-random values.
        let mut s = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(nr);
        for _ in 0..2000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            put(s);
            put(s & 0xffff_ffff);
        }
    }
    out
}

#[test]
fn the_program_gives_every_call_the_tables_answer() {
    let policy = Policy::default();
    let compiled = policy.compile().expect("compile");
    let program = compiled.program();
    validate(program);
    let old = seccompiler_programs(&policy);
    for p in &old {
        validate(p);
    }
    let checked: Vec<u32> = policy
        .rules
        .iter()
        .filter(|r| r.when != When::Always)
        .map(|r| r.nr as u32)
        .collect();
    assert_eq!(checked.len(), 4, "clone, unshare, ioctl, personality");
    let plain = [[0u64; 6], [u64::MAX; 6]];
    let mut numbers: Vec<u32> = (0..1024).collect();
    for base in [X32_SYSCALL_BIT, 0x8000_0000, 0xffff_fc00] {
        numbers.extend((0..16).map(|i| base + i));
    }
    numbers.extend([
        X32_SYSCALL_BIT - 1,
        X32_SYSCALL_BIT + 59,
        0x7fff_ffff,
        u32::MAX,
    ]);
    let mut seen = BTreeMap::<&str, usize>::new();
    let mut evaluations = 0usize;
    for arch in [AUDIT_ARCH_X86_64, AUDIT_ARCH_I386, 0, u32::MAX] {
        for &nr in &numbers {
            let corpus = if arch == AUDIT_ARCH_X86_64 && checked.contains(&nr) {
                argument_corpus(policy.rules, nr)
            } else {
                plain.to_vec()
            };
            for args in corpus {
                let d = data(arch, nr, args);
                let want = oracle(&policy, arch, nr, args);
                let new = verdict(run(program, &d));
                let before = verdict(run_all(&old, &d));
                assert_eq!(
                    new, want,
                    "arch {arch:#x} nr {nr} args {args:x?}: program vs tables"
                );
                assert_eq!(
                    before, want,
                    "arch {arch:#x} nr {nr} args {args:x?}: seccompiler vs tables"
                );
                *seen
                    .entry(match want {
                        Verdict::Allow => "allow",
                        Verdict::Errno(e) if e == EPERM as u32 => "EPERM",
                        Verdict::Errno(_) => "ENOSYS",
                        Verdict::KillProcess => "kill",
                    })
                    .or_default() += 1;
                evaluations += 1;
            }
        }
    }
    eprintln!(
        "{evaluations} inputs, {seen:?}; the program has {} instructions, seccompiler's {}",
        program.len(),
        old.iter().map(Vec::len).sum::<usize>()
    );
    // Every kind of answer was reached, so a program that answered one
    // thing for everything could not pass.
    assert_eq!(seen.len(), 4, "{seen:?}");
}

/// The search really is a search: the longest path through the program
/// for a call without an argument check is a handful of comparisons, not
/// one per listed call (the point of building it ourselves).
#[test]
fn a_call_is_found_in_a_few_comparisons() {
    let compiled = Policy::default().compile().expect("compile");
    let program = compiled.program();
    let longest = (0..1024u32)
        .map(|nr| run_counting(program, &data(AUDIT_ARCH_X86_64, nr, [0; 6])).1)
        .max()
        .unwrap();
    eprintln!("longest path: {longest} instructions");
    assert!(longest <= 40, "{longest} instructions on the longest path");
}
