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
//! * [`Policy::compile`] – turns them into one BPF program ([`bpf`]): the
//!   architecture check, then a binary search over the syscall number
//!   whose leaves are the tables' answers (allow, an errno, or a call's
//!   argument check), ENOSYS for every number not listed.
//! * [`CompiledPolicy::install`] – installs it with `seccomp(2)`. It does
//!   not allocate, so it can run in a child forked from a multi-threaded
//!   process (the tests do that).
//!
//! Each call has exactly one answer in the program, so nothing depends on
//! how the kernel combines several filters. (Until docs/benchmarks.md "A
//! binary-search seccomp program", the tables were compiled with
//! seccompiler into four programs, the allow list, one per errno and an
//! x32 guard; the equivalence test still builds those and checks that
//! both give every call the same answer.)
//!
//! Architecture: x86_64 only. The program checks the architecture first; a
//! syscall made through another ABI (e.g. `int 0x80` i386 compat) fails
//! that check and the process is killed (SECCOMP_RET_KILL_PROCESS); an x32
//! call (x86_64 arch, number with bit 30 set) gets ENOSYS. 32-bit binaries therefore do not run in a
//! Sandbox; that is deliberate (their syscall numbers differ and would
//! bypass tables keyed by the 64-bit numbers).

use std::io;

#[cfg(not(target_arch = "x86_64"))]
compile_error!("strata-sandbox's seccomp allow list is written for x86_64 only (syscall names and numbers differ elsewhere)");

mod allow;
mod bpf;
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

/// Building the BPF program failed: the tables ask for something the
/// program cannot express. Fix the table line named.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("seccomp: the line for {syscall} has number {nr}, outside 0..0x40000000 (x86_64 numbers only)")]
    Number {
        syscall: &'static str,
        nr: libc::c_long,
    },
    #[error("seccomp: {syscall} has two lines in POLICY; give each call one line")]
    Duplicate { syscall: &'static str },
    #[error("seccomp: bad condition in the rule for {syscall}: {why}")]
    Condition {
        syscall: &'static str,
        why: &'static str,
    },
    #[error("seccomp: the program has {len} instructions, more than BPF_MAXINSNS (4096)")]
    TooLong { len: usize },
}

/// Installing a compiled policy failed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("seccomp: installing the filter with seccomp(SECCOMP_SET_MODE_FILTER): {source} (no_new_privs must be set first unless the caller has CAP_SYS_ADMIN)")]
    Install { source: io::Error },
}

/// The BPF program, ready to install.
#[derive(Debug, Clone)]
pub struct CompiledPolicy {
    program: Vec<libc::sock_filter>,
}

impl Policy {
    /// Compile to one BPF program (x86_64; see [`bpf`] for its shape).
    pub fn compile(&self) -> Result<CompiledPolicy, CompileError> {
        Ok(CompiledPolicy {
            program: bpf::program(self)?,
        })
    }
}

impl CompiledPolicy {
    /// Number of BPF instructions (for tests and reports).
    pub fn instructions(&self) -> usize {
        self.program.len()
    }

    /// The program itself (for the equivalence tests and reports).
    pub fn program(&self) -> &[libc::sock_filter] {
        &self.program
    }

    /// Install the program on the calling thread.
    ///
    /// Needs `PR_SET_NO_NEW_PRIVS` already set (or CAP_SYS_ADMIN), see
    /// `seccomp(2)`. Does not allocate and makes only the one `seccomp(2)`
    /// call, so it is async-signal-safe and may run between `fork` and
    /// `execve`. Filters are inherited across `fork`/`clone` and kept
    /// across `execve`.
    pub fn install(&self) -> Result<(), InstallError> {
        let fprog = libc::sock_fprog {
            // `compile` refuses programs over 4096 instructions.
            len: self.program.len() as u16,
            filter: self.program.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: `fprog` points at `self.program`, which outlives the
        // call; the kernel copies the program (copy_from_user) and keeps
        // no pointer into our memory.
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
                source: io::Error::last_os_error(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod equivalence;
#[cfg(test)]
mod tests;
