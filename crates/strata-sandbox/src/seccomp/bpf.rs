//! The policy as one classic-BPF program, written here rather than by a
//! filter compiler, because its shape decides what every exec pays.
//!
//! `seccomp(2)` runs a classic BPF program over `struct seccomp_data`
//! (`nr` at offset 0, `arch` at 4, `instruction_pointer` at 8, `args[6]`
//! at 16, each 8 bytes, little-endian here). The program built here:
//!
//! 1. loads `arch` and kills the process unless it is AUDIT_ARCH_X86_64
//!    (an i386 `int 0x80` call, whose numbers differ from the tables');
//! 2. loads `nr` and answers ENOSYS for every number with the x32 bit
//!    (0x4000_0000) set, and so for every "negative" number as well
//!    (the comparisons are unsigned);
//! 3. finds `nr` by **binary search** over the number line cut into
//!    intervals of one answer each: a run of allowed calls, a run of
//!    calls refused with one errno, a gap (ENOSYS), or one call whose
//!    arguments are checked. Each node is one unsigned `jge` on an
//!    interval's first number; a leaf returns its answer or runs its
//!    argument check and returns.
//!
//! Why not seccompiler's output (what the policy was compiled with
//! before, docs/benchmarks.md "A binary-search seccomp program"): its
//! program is a linear chain, one comparison per listed call, and the
//! kernel's cost to attach a filter grows with the chain, because since
//! Linux 5.11 it emulates the program for every syscall number to fill the
//! filter's cache of always-allowed calls (`seccomp_cache_prepare`). The
//! chain also needed one program per errno plus an x32 guard, four
//! attachments per exec; this is one.
//!
//! Correctness is argued by a test, not by inspection: `equivalence.rs`
//! runs this program in a BPF interpreter for every syscall number (and
//! the edges of the number space), every architecture value that matters
//! and a corpus of argument vectors, and compares each answer with the
//! tables read directly and with the programs seccompiler builds from the
//! same tables.

use libc::sock_filter;

use super::{CompileError, Policy, When};

/// AUDIT_ARCH_X86_64 (`<linux/audit.h>`): EM_X86_64 | __AUDIT_ARCH_64BIT |
/// __AUDIT_ARCH_LE.
pub(super) const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
/// `__X32_SYSCALL_BIT` (`<asm/unistd.h>`): x32 calls carry the x86_64
/// arch value and this bit in the number.
pub(super) const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Offsets into `struct seccomp_data` (`<linux/seccomp.h>`).
const NR: u32 = 0;
const ARCH: u32 = 4;
const ARGS: u32 = 16;

/// What one interval of syscall numbers gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Allow,
    Errno(i32),
    /// One call whose arguments decide: `When` true means `errno`.
    Check {
        when: When,
        errno: i32,
    },
}

/// A run `[start, next interval's start)` of numbers with one answer.
#[derive(Debug, Clone, Copy)]
struct Interval {
    start: u32,
    answer: Answer,
}

const LD_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JA: u16 = (libc::BPF_JMP | libc::BPF_JA) as u16;
const JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JGE: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const JSET: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const RET: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

fn ret_errno(errno: i32) -> sock_filter {
    // SECCOMP_RET_DATA is the low 16 bits; every errno is far below that.
    stmt(RET, libc::SECCOMP_RET_ERRNO | (errno as u32 & 0xffff))
}

fn ret_allow() -> sock_filter {
    stmt(RET, libc::SECCOMP_RET_ALLOW)
}

/// The whole program for `policy`.
pub(super) fn program(policy: &Policy) -> Result<Vec<sock_filter>, CompileError> {
    let intervals = intervals(policy)?;
    let mut prog = vec![
        stmt(LD_ABS, ARCH),
        jump(JEQ, AUDIT_ARCH_X86_64, 1, 0),
        stmt(RET, libc::SECCOMP_RET_KILL_PROCESS),
        stmt(LD_ABS, NR),
        jump(JGE, X32_SYSCALL_BIT, 0, 1),
        ret_errno(libc::ENOSYS),
    ];
    prog.extend(search(&intervals));
    // The kernel refuses a program longer than BPF_MAXINSNS (4096) with
    // EINVAL at attach time; say so here, where the tables are known.
    if prog.len() > 4096 {
        return Err(CompileError::TooLong { len: prog.len() });
    }
    Ok(prog)
}

/// Cut `0..X32_SYSCALL_BIT` into intervals of one answer each.
fn intervals(policy: &Policy) -> Result<Vec<Interval>, CompileError> {
    use std::collections::BTreeMap;
    let mut by_nr: BTreeMap<u32, Answer> = BTreeMap::new();
    let number = |name: &'static str, nr: libc::c_long| {
        u32::try_from(nr)
            .ok()
            .filter(|&n| n < X32_SYSCALL_BIT)
            .ok_or(CompileError::Number { syscall: name, nr })
    };
    for a in policy.allow {
        by_nr.insert(number(a.name, a.nr)?, Answer::Allow);
    }
    // A line of POLICY overrides the allow list for its call: refused
    // outright, or allowed unless its check says otherwise (the tables'
    // tests keep the two consistent; this keeps the program so whatever
    // they say).
    for r in policy.rules {
        let nr = number(r.name, r.nr)?;
        let answer = match r.when {
            When::Always => Answer::Errno(r.errno),
            when => {
                check_fits(r.name, when)?;
                Answer::Check {
                    when,
                    errno: r.errno,
                }
            }
        };
        if by_nr.insert(nr, answer).is_some_and(|a| a != Answer::Allow) {
            return Err(CompileError::Duplicate { syscall: r.name });
        }
    }
    let mut out: Vec<Interval> = Vec::new();
    let mut push = |start: u32, answer: Answer| match out.last() {
        // Merge runs; a checked call always stands alone.
        Some(last) if last.answer == answer && !matches!(answer, Answer::Check { .. }) => {}
        _ => out.push(Interval { start, answer }),
    };
    let mut next = 0u32;
    for (&nr, &answer) in &by_nr {
        if nr > next {
            push(next, Answer::Errno(libc::ENOSYS));
        }
        push(nr, answer);
        next = nr + 1;
    }
    push(next, Answer::Errno(libc::ENOSYS));
    Ok(out)
}

/// The argument checks compare 32-bit halves; say so if a table asks for
/// more than the program can express.
fn check_fits(name: &'static str, when: When) -> Result<(), CompileError> {
    let bad = |why: &'static str| CompileError::Condition { syscall: name, why };
    match when {
        When::Always => Ok(()),
        When::AnyBitSet { arg, bits } => {
            if arg > 5 {
                return Err(bad("argument index above 5"));
            }
            if bits.is_empty() || bits.iter().any(|b| b.count_ones() != 1) {
                return Err(bad("AnyBitSet needs single bits"));
            }
            Ok(())
        }
        When::OneOf { arg, values } | When::NotOneOf { arg, values } => {
            if arg > 5 {
                return Err(bad("argument index above 5"));
            }
            if values.is_empty() || values.iter().any(|&v| v > u64::from(u32::MAX)) {
                return Err(bad("values are compared as 32 bits and must fit in them"));
            }
            // Each `jeq` reaches the match `ret` with an 8-bit offset.
            if values.len() > 200 {
                return Err(bad("more than 200 values in one check"));
            }
            Ok(())
        }
    }
}

/// The binary search over `intervals` as a self-contained block: every
/// jump lands inside it and every path ends in a `ret`, so blocks can be
/// laid side by side.
fn search(intervals: &[Interval]) -> Vec<sock_filter> {
    match intervals {
        [] => unreachable!("the number line is never empty"),
        [one] => leaf(one.answer),
        _ => {
            let mid = intervals.len() / 2;
            let left = search(&intervals[..mid]);
            let right = search(&intervals[mid..]);
            let boundary = intervals[mid].start;
            let mut block = Vec::with_capacity(left.len() + right.len() + 2);
            match u8::try_from(left.len()) {
                // nr >= boundary: skip the left block.
                Ok(skip) => block.push(jump(JGE, boundary, skip, 0)),
                // Too far for a conditional jump's 8-bit offset: go
                // through an unconditional one (32-bit offset).
                Err(_) => {
                    let skip = u32::try_from(left.len()).expect("under BPF_MAXINSNS");
                    block.push(jump(JGE, boundary, 0, 1));
                    block.push(stmt(JA, skip));
                }
            }
            block.extend(left);
            block.extend(right);
            block
        }
    }
}

/// The code for one interval's answer (the accumulator holds `nr`).
fn leaf(answer: Answer) -> Vec<sock_filter> {
    let arg_lo = |arg: u8| ARGS + 8 * u32::from(arg);
    match answer {
        Answer::Allow => vec![ret_allow()],
        Answer::Errno(e) => vec![ret_errno(e)],
        Answer::Check { when, errno } => match when {
            When::Always => vec![ret_errno(errno)],
            // Any listed bit set, in either 32-bit half: refused.
            When::AnyBitSet { arg, bits } => {
                let mask = bits.iter().fold(0u64, |m, b| m | b);
                let halves = [
                    (arg_lo(arg), mask as u32),
                    (arg_lo(arg) + 4, (mask >> 32) as u32),
                ];
                let halves: Vec<_> = halves.into_iter().filter(|&(_, m)| m != 0).collect();
                let mut code = Vec::new();
                for (i, &(offset, m)) in halves.iter().enumerate() {
                    // Distance to the refusal: past the remaining halves'
                    // two instructions each and the `ret allow`.
                    let to_deny = 2 * (halves.len() - 1 - i) + 1;
                    code.push(stmt(LD_ABS, offset));
                    code.push(jump(JSET, m, to_deny as u8, 0));
                }
                code.push(ret_allow());
                code.push(ret_errno(errno));
                code
            }
            // The low 32 bits equal one of the values: refused (the
            // kernel's ioctl takes `unsigned int cmd`, so the high half
            // must not matter; see `TERMINAL_INJECTION_IOCTLS`).
            When::OneOf { arg, values } => compare_low(arg_lo(arg), values, errno, true),
            // The low 32 bits equal none of the values: refused.
            When::NotOneOf { arg, values } => compare_low(arg_lo(arg), values, errno, false),
        },
    }
}

/// `ld args[i] low; jeq v1; jeq v2; ...` then two `ret`s: a match goes to
/// the second (`refuse_on_match`: the refusal) or the first otherwise.
fn compare_low(offset: u32, values: &[u64], errno: i32, refuse_on_match: bool) -> Vec<sock_filter> {
    let (on_no_match, on_match) = if refuse_on_match {
        (ret_allow(), ret_errno(errno))
    } else {
        (ret_errno(errno), ret_allow())
    };
    let mut code = vec![stmt(LD_ABS, offset)];
    for (i, &v) in values.iter().enumerate() {
        // From jeq i, the match `ret` is (values.len() - 1 - i) + 1
        // instructions further on.
        let to_match = (values.len() - i) as u8;
        code.push(jump(JEQ, v as u32, to_match, 0));
    }
    code.push(on_no_match);
    code.push(on_match);
    code
}
