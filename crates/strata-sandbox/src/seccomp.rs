//! The seccomp policy applied to every command, as reviewed data.
//!
//! The policy is an **allow list**: a command may make the system calls
//! in [`ALLOW`] (one line each, with the workload that needs it) and no
//! other; anything else fails with ENOSYS (SECCOMP_RET_ERRNO(ENOSYS)), the
//! answer of a kernel that lacks the call, which programs already handle
//! by falling back or reporting "not supported". So a system call a newer
//! kernel adds stays closed until someone reviews it and lists it here.
//!
//! On top of that, [`POLICY`] refuses some calls with their own errno
//! (EPERM for the mount table, namespaces, keyrings, ptrace...; ENOSYS for
//! `clone3` and io_uring so that libraries fall back) and checks the
//! arguments of a few allowed ones (`clone`, `unshare`, `ioctl`,
//! `personality`). Most of these already fail for a process with no
//! capabilities; they are refused here anyway so that the *filter* is the
//! argument, not the capability drop alone (the two are independent
//! layers). The one that matters most is user namespaces: this kernel
//! lets unprivileged users create them (docs/design.md §5) and the sysctl
//! cannot be changed, and inside a user namespace a command would regain
//! CAP_SYS_ADMIN over a copy of its mount namespace, i.e. it could copy the
//! Workspace mount into a namespace of its own or unmount things in it.
//!
//! Layout (see `seccomp(2)`):
//!
//! * [`ALLOW`] and [`POLICY`] – review those tables.
//! * [`Policy::compile`] – turns them into BPF with `seccompiler` 0.5:
//!   the allow-list program (every call in either table passes, the rest
//!   gets ENOSYS), one program per errno of [`POLICY`] (a seccompiler
//!   filter has one match action), plus a hand-written guard against the
//!   x32 ABI.
//! * [`CompiledPolicy::install`] – installs the programs with `seccomp(2)`.
//!   It does not allocate, so it can run in a child forked from a
//!   multi-threaded process (the tests do that).
//!
//! When several filters are installed, the kernel runs all of them and takes
//! the most severe action (ERRNO beats ALLOW); between two ERRNO results
//! the errno of the filter installed last wins (`seccomp_run_filters`), so
//! the programs are built such that at most one of them returns ERRNO for
//! any call: the allow-list program lets every call of [`POLICY`] through
//! and leaves the refusal to that call's program, and the deny programs
//! allow everything they do not name. Each call therefore has one answer
//! whatever the order of installation.
//!
//! Architecture: x86_64 only. The filters check the architecture first; a
//! syscall made through another ABI (e.g. `int 0x80` i386 compat) fails
//! seccompiler's architecture check and the process is killed
//! (SECCOMP_RET_KILL_PROCESS). 32-bit binaries therefore do not run in a
//! Sandbox; that is deliberate (their syscall numbers differ and would
//! bypass tables keyed by the 64-bit numbers).

use std::collections::BTreeMap;
use std::io;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

#[cfg(not(target_arch = "x86_64"))]
compile_error!("strata-sandbox's seccomp allow list is written for x86_64 only (syscall names and numbers differ elsewhere)");

mod allow;
pub use allow::ALLOW;

/// One line of the allow list ([`ALLOW`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowed {
    /// Syscall name, for reports and error messages.
    pub name: &'static str,
    /// Syscall number on x86_64.
    pub nr: libc::c_long,
    /// Why a command may make it (reviewed here).
    pub why: &'static str,
}

/// Every namespace flag `unshare(2)` accepts. Any of them is refused:
/// CLONE_NEWUSER because it hands back capabilities inside the namespace,
/// the others because a command has no business building its own view
/// (and without CLONE_NEWUSER they need CAP_SYS_ADMIN anyway).
pub const NAMESPACE_FLAGS: &[u64] = &[
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWTIME as u64,
];

/// Namespace flags as `clone(2)` sees them. CLONE_NEWTIME (0x80) is left out:
/// in `clone(2)` the low byte of `flags` is the exit signal (CSIGNAL), so
/// 0x80 there is a signal number, not CLONE_NEWTIME (which `clone(2)` cannot
/// request; only `clone3(2)`, denied wholesale, and `unshare(2)` can).
pub const CLONE_NAMESPACE_FLAGS: &[u64] = &[
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
];

/// `personality(2)` values a command may set: Docker's default profile set
/// (PER_LINUX, PER_LINUX32, UNAME26 alone and with PER_LINUX32) plus the
/// 0xffffffff query. Anything else (e.g. READ_IMPLIES_EXEC,
/// ADDR_NO_RANDOMIZE) weakens the command's own hardening.
pub const PERSONALITY_ALLOWED: &[u64] = &[0x0, 0x8, 0x20000, 0x20008, 0xffff_ffff];

/// ioctl requests that inject input into a terminal. The request is
/// compared as 32 bits (Dword): the kernel's ioctl takes `unsigned int cmd`,
/// so a 64-bit compare could be bypassed by setting the upper half (the
/// bubblewrap CVE-2017-5226 lesson).
// libc's ioctl request type is c_ulong on glibc but c_int on musl.
#[allow(clippy::unnecessary_cast)]
pub const TERMINAL_INJECTION_IOCTLS: &[u64] = &[libc::TIOCSTI as u64, libc::TIOCLINUX as u64];

/// When a rule applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Always, whatever the arguments.
    Always,
    /// When argument `arg` (64-bit) has any of these bits set.
    AnyBitSet { arg: u8, bits: &'static [u64] },
    /// When argument `arg` (32-bit) is none of these values.
    NotOneOf { arg: u8, values: &'static [u64] },
    /// When argument `arg` (32-bit) is one of these values.
    OneOf { arg: u8, values: &'static [u64] },
}

/// One line of the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// Syscall name, for reports and error messages.
    pub name: &'static str,
    /// Syscall number on this architecture.
    pub nr: libc::c_long,
    /// Condition on the arguments.
    pub when: When,
    /// errno returned instead of running the call.
    pub errno: i32,
    /// Why the call is denied (shown by `strata probe`, reviewed here).
    pub why: &'static str,
}

const fn deny(name: &'static str, nr: libc::c_long, errno: i32, why: &'static str) -> Rule {
    Rule {
        name,
        nr,
        when: When::Always,
        errno,
        why,
    }
}

const fn deny_when(
    name: &'static str,
    nr: libc::c_long,
    when: When,
    errno: i32,
    why: &'static str,
) -> Rule {
    Rule {
        name,
        nr,
        when,
        errno,
        why,
    }
}

use libc::{ENOSYS, EPERM};

/// The policy. One rule per line; the last field says why.
#[rustfmt::skip]
pub static POLICY: &[Rule] = &[
    // --- namespaces: the heart of the privilege split (docs/design.md §3) ---
    deny_when("unshare", libc::SYS_unshare, When::AnyBitSet { arg: 0, bits: NAMESPACE_FLAGS }, EPERM, "a user namespace gives back CAP_SYS_ADMIN over a copy of the mounts; other namespaces let a command rebuild its view"),
    deny_when("clone", libc::SYS_clone, When::AnyBitSet { arg: 0, bits: CLONE_NAMESPACE_FLAGS }, EPERM, "same as unshare, through clone(2) flags (plain fork/threads stay allowed)"),
    deny("clone3", libc::SYS_clone3, ENOSYS, "its flags live in a struct seccomp cannot read; ENOSYS makes glibc fall back to clone(2), which is checked"),
    deny("setns", libc::SYS_setns, EPERM, "joining another namespace (e.g. via a leaked /proc/PID/ns fd) escapes the Sandbox view"),
    // --- mount table: the command must not unmount, remount or copy the Workspace ---
    deny("mount", libc::SYS_mount, EPERM, "changing the mount table (remount rw, bind over, move) is the daemon's job"),
    deny("umount2", libc::SYS_umount2, EPERM, "unmounting the Workspace or the read-only root from under the daemon"),
    deny("pivot_root", libc::SYS_pivot_root, EPERM, "replacing the root of the mount namespace"),
    deny("chroot", libc::SYS_chroot, EPERM, "classic chroot escapes need it; no command needs it"),
    deny("fsopen", libc::SYS_fsopen, EPERM, "new mount API: creating a filesystem context"),
    deny("fsconfig", libc::SYS_fsconfig, EPERM, "new mount API: configuring/reconfiguring a superblock (e.g. remount rw)"),
    deny("fsmount", libc::SYS_fsmount, EPERM, "new mount API: turning a context into a mount"),
    deny("fspick", libc::SYS_fspick, EPERM, "new mount API: picking an existing superblock for reconfiguration"),
    deny("move_mount", libc::SYS_move_mount, EPERM, "new mount API: attaching or moving a mount"),
    deny("open_tree", libc::SYS_open_tree, EPERM, "new mount API: OPEN_TREE_CLONE copies a mount tree (copying the Workspace)"),
    deny("mount_setattr", libc::SYS_mount_setattr, EPERM, "new mount API: changing mount flags (ro -> rw, idmap)"),
    // --- kernel attack surface and global state ---
    deny("keyctl", libc::SYS_keyctl, EPERM, "kernel keyrings are not namespaced; secrets of other users/sessions"),
    deny("add_key", libc::SYS_add_key, EPERM, "kernel keyrings are not namespaced"),
    deny("request_key", libc::SYS_request_key, EPERM, "kernel keyrings are not namespaced; can upcall to host helpers"),
    deny("bpf", libc::SYS_bpf, EPERM, "eBPF verifier is a large attack surface; commands do not load programs"),
    deny("perf_event_open", libc::SYS_perf_event_open, EPERM, "kernel profiling leaks addresses and has a long CVE history"),
    deny("ptrace", libc::SYS_ptrace, EPERM, "would let one command inspect or steer another command of the same uid"),
    deny("process_vm_readv", libc::SYS_process_vm_readv, EPERM, "reads another process's memory (ptrace-equivalent)"),
    deny("process_vm_writev", libc::SYS_process_vm_writev, EPERM, "writes another process's memory (ptrace-equivalent)"),
    deny("kexec_load", libc::SYS_kexec_load, EPERM, "replaces the running kernel"),
    deny("kexec_file_load", libc::SYS_kexec_file_load, EPERM, "replaces the running kernel"),
    deny("init_module", libc::SYS_init_module, EPERM, "loads code into the kernel"),
    deny("finit_module", libc::SYS_finit_module, EPERM, "loads code into the kernel"),
    deny("delete_module", libc::SYS_delete_module, EPERM, "unloads kernel code (e.g. fuse)"),
    deny("open_by_handle_at", libc::SYS_open_by_handle_at, EPERM, "opens files by handle, bypassing the mount view (the 'shocker' container escape)"),
    deny("userfaultfd", libc::SYS_userfaultfd, EPERM, "used to win kernel races in exploits; commands do not need it"),
    deny("reboot", libc::SYS_reboot, EPERM, "reboots the host (or, in a PID namespace, kills the Sandbox's init)"),
    deny("swapon", libc::SYS_swapon, EPERM, "host-global memory configuration"),
    deny("swapoff", libc::SYS_swapoff, EPERM, "host-global memory configuration"),
    deny("acct", libc::SYS_acct, EPERM, "host-global process accounting"),
    deny("quotactl", libc::SYS_quotactl, EPERM, "filesystem quota administration"),
    deny("quotactl_fd", libc::SYS_quotactl_fd, EPERM, "filesystem quota administration"),
    deny_when("ioctl", libc::SYS_ioctl, When::OneOf { arg: 1, values: TERMINAL_INJECTION_IOCTLS }, EPERM, "TIOCSTI/TIOCLINUX push keystrokes into a terminal's input: with an inherited terminal a command could type into the user's shell outside the Sandbox"),
    deny("syslog", libc::SYS_syslog, EPERM, "the kernel log is host-global and leaks kernel addresses"),
    deny_when("personality", libc::SYS_personality, When::NotOneOf { arg: 0, values: PERSONALITY_ALLOWED }, EPERM, "odd personalities (READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE) weaken hardening"),
    deny("io_uring_setup", libc::SYS_io_uring_setup, ENOSYS, "io_uring operations are not seen by seccomp; ENOSYS makes programs fall back to plain syscalls"),
    deny("io_uring_enter", libc::SYS_io_uring_enter, ENOSYS, "see io_uring_setup"),
    deny("io_uring_register", libc::SYS_io_uring_register, ENOSYS, "see io_uring_setup"),
    deny("iopl", libc::SYS_iopl, EPERM, "raw I/O port access"),
    deny("ioperm", libc::SYS_ioperm, EPERM, "raw I/O port access"),
];

/// The policy as data. [`Policy::default`] is [`ALLOW`] and [`POLICY`].
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// The calls a command may make at all; the rest get ENOSYS.
    pub allow: &'static [Allowed],
    /// Refusals with their errno, and argument checks on allowed calls.
    pub rules: &'static [Rule],
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            allow: ALLOW,
            rules: POLICY,
        }
    }
}

/// Building the BPF programs failed.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("seccomp: this architecture ({arch}) is not supported by seccompiler")]
    Arch { arch: &'static str },
    #[error("seccomp: bad condition in the rule for {syscall}: {source}")]
    Condition {
        syscall: &'static str,
        source: seccompiler::BackendError,
    },
    #[error("seccomp: building the filter for errno {errno}: {source}")]
    Filter {
        errno: i32,
        source: seccompiler::BackendError,
    },
}

/// Installing a compiled policy failed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("seccomp: installing filter {index} ({what}) with seccomp(SECCOMP_SET_MODE_FILTER): {source} (no_new_privs must be set first unless the caller has CAP_SYS_ADMIN)")]
    Install {
        index: usize,
        what: &'static str,
        source: io::Error,
    },
    #[error("seccomp: filter {index} has {len} instructions, more than BPF_MAXINSNS")]
    TooLong { index: usize, len: usize },
}

/// BPF programs ready to install.
#[derive(Debug, Clone)]
pub struct CompiledPolicy {
    programs: Vec<(&'static str, BpfProgram)>,
}

impl Policy {
    /// Compile to BPF for the running architecture.
    pub fn compile(&self) -> Result<CompiledPolicy, CompileError> {
        let arch: TargetArch =
            std::env::consts::ARCH
                .try_into()
                .map_err(|_| CompileError::Arch {
                    arch: std::env::consts::ARCH,
                })?;
        // One program per errno: seccompiler gives every matching rule of a
        // filter the same action.
        let mut by_errno: BTreeMap<i32, BTreeMap<i64, Vec<SeccompRule>>> = BTreeMap::new();
        for rule in self.rules {
            let table = by_errno.entry(rule.errno).or_default();
            // Each syscall has one line in the table (a unit test checks),
            // so inserting never overwrites another rule's conditions.
            // An empty rule list means "unconditional" to seccompiler.
            let rules = seccompiler_rules(rule)?.unwrap_or_default();
            table.insert(rule.nr, rules);
        }
        let mut programs = Vec::new();
        // The allow list: its calls and every call POLICY names pass (the
        // refusal of the latter is their own program's, see the module
        // docs); anything else is ENOSYS.
        let passed: BTreeMap<i64, Vec<SeccompRule>> = self
            .allow
            .iter()
            .map(|a| a.nr)
            .chain(self.rules.iter().map(|r| r.nr))
            .map(|nr| (nr, Vec::new()))
            .collect();
        let filter = SeccompFilter::new(
            passed,
            SeccompAction::Errno(ENOSYS as u32),
            SeccompAction::Allow,
            arch,
        )
        .map_err(|source| CompileError::Filter {
            errno: ENOSYS,
            source,
        })?;
        let prog: BpfProgram = filter.try_into().map_err(|source| CompileError::Filter {
            errno: ENOSYS,
            source,
        })?;
        programs.push(("allow list, ENOSYS for the rest", prog));
        for (errno, table) in by_errno {
            let filter = SeccompFilter::new(
                table,
                SeccompAction::Allow,
                SeccompAction::Errno(errno as u32),
                arch,
            )
            .map_err(|source| CompileError::Filter { errno, source })?;
            let prog: BpfProgram = filter
                .try_into()
                .map_err(|source| CompileError::Filter { errno, source })?;
            let what = if errno == EPERM {
                "deny list, EPERM"
            } else {
                "deny list, ENOSYS"
            };
            programs.push((what, prog));
        }
        programs.push(("x32 ABI guard", x32_guard()));
        Ok(CompiledPolicy { programs })
    }
}

/// The seccompiler rules for one policy line; `None` means unconditional.
fn seccompiler_rules(rule: &Rule) -> Result<Option<Vec<SeccompRule>>, CompileError> {
    let bad = |source| CompileError::Condition {
        syscall: rule.name,
        source,
    };
    match rule.when {
        When::Always => Ok(None),
        // Rules of one syscall are OR-ed: one rule per bit, each "arg & bit == bit".
        When::AnyBitSet { arg, bits } => bits
            .iter()
            .map(|&bit| {
                let c = SeccompCondition::new(
                    arg,
                    SeccompCmpArgLen::Qword,
                    SeccompCmpOp::MaskedEq(bit),
                    bit,
                )
                .map_err(bad)?;
                SeccompRule::new(vec![c]).map_err(bad)
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        // One rule per value, OR-ed: "arg == v1 || arg == v2 ...".
        When::OneOf { arg, values } => values
            .iter()
            .map(|&v| {
                let c = SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, v)
                    .map_err(bad)?;
                SeccompRule::new(vec![c]).map_err(bad)
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        // Conditions of one rule are AND-ed: "arg != v1 && arg != v2 ...".
        When::NotOneOf { arg, values } => {
            let conds = values
                .iter()
                .map(|&v| {
                    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, v)
                        .map_err(bad)
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Some(vec![SeccompRule::new(conds).map_err(bad)?]))
        }
    }
}

/// Refuse every syscall made through the x32 ABI.
///
/// x32 syscalls carry AUDIT_ARCH_X86_64 (so they pass seccompiler's
/// architecture check) but have bit 30 (__X32_SYSCALL_BIT) set in the
/// number. The allow list already answers them with ENOSYS (no such
/// number is on it), but the deny programs would not match them, so this
/// guard keeps the refusal explicit and independent of the allow list.
/// This kernel has CONFIG_X86_X32_ABI off, but the filter must not depend
/// on that. Hand-written because seccompiler cannot express a range of
/// numbers.
fn x32_guard() -> BpfProgram {
    use seccompiler::sock_filter;
    const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    // struct seccomp_data { int nr; __u32 arch; ... }: nr at 0, arch at 4.
    let stmt = |code: u16, k: u32| sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let jump = |code: u16, k: u32, jt: u8, jf: u8| sock_filter { code, jt, jf, k };
    let ld_abs = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    let jeq = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    let jge = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
    let ret = (libc::BPF_RET | libc::BPF_K) as u16;
    vec![
        stmt(ld_abs, 4),                    // A = arch
        jump(jeq, AUDIT_ARCH_X86_64, 1, 0), // not x86_64: seccompiler's filter decides
        stmt(ret, libc::SECCOMP_RET_ALLOW),
        stmt(ld_abs, 0),                  // A = nr
        jump(jge, X32_SYSCALL_BIT, 0, 1), // nr >= 0x40000000: x32
        stmt(ret, libc::SECCOMP_RET_ERRNO | ENOSYS as u32),
        stmt(ret, libc::SECCOMP_RET_ALLOW),
    ]
}

impl CompiledPolicy {
    /// Number of BPF programs (for tests and reports).
    pub fn programs(&self) -> usize {
        self.programs.len()
    }

    /// Install every program on the calling thread.
    ///
    /// Needs `PR_SET_NO_NEW_PRIVS` already set (or CAP_SYS_ADMIN), see
    /// `seccomp(2)`. Does not allocate and makes only `seccomp(2)` calls, so
    /// it is async-signal-safe and may run between `fork` and `execve`.
    /// Filters are inherited across `fork`/`clone` and kept across `execve`.
    pub fn install(&self) -> Result<(), InstallError> {
        for (index, (what, prog)) in self.programs.iter().enumerate() {
            let len = u16::try_from(prog.len()).map_err(|_| InstallError::TooLong {
                index,
                len: prog.len(),
            })?;
            let fprog = libc::sock_fprog {
                len,
                filter: prog.as_ptr() as *mut libc::sock_filter,
            };
            // SAFETY: `fprog` points at `prog`, which outlives the call; the
            // kernel copies the program (copy_from_user) and keeps no
            // pointer into our memory. seccompiler's sock_filter has the
            // same layout as the kernel's (both repr(C) {u16,u8,u8,u32}).
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_seccomp,
                    libc::SECCOMP_SET_MODE_FILTER,
                    0 as libc::c_ulong,
                    &fprog as *const libc::sock_fprog,
                )
            };
            if rc != 0 {
                return Err(InstallError::Install {
                    index,
                    what,
                    source: io::Error::last_os_error(),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
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
        // allow list + EPERM + ENOSYS + x32 guard
        assert_eq!(compiled.programs(), 4);
        for rule in POLICY {
            assert!(!rule.why.is_empty(), "{} has no reason", rule.name);
            assert!(rule.errno == EPERM || rule.errno == ENOSYS, "{}", rule.name);
        }
        for a in ALLOW {
            assert!(!a.why.is_empty(), "{} has no reason", a.name);
        }
        // The kernel refuses a program longer than BPF_MAXINSNS (4096) with
        // EINVAL at install time: a growing allow list must fail here first.
        for (what, prog) in &compiled.programs {
            eprintln!("{what}: {} BPF instructions", prog.len());
            assert!(prog.len() <= 4096, "{what}: {} instructions", prog.len());
        }
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
        let lines = include_str!("seccomp/allow.rs")
            .lines()
            .chain(include_str!("seccomp.rs").lines())
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
}
