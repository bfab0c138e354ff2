//! "Does the privilege split hold here?" — the checks `strata probe` needs
//! from this crate, run for real: a command is started in a Sandbox exactly
//! as a user's command would be and inspects itself.
//!
//! [`run_selfcheck`] spawns `EXE __strata-selfcheck` as the command (EXE is
//! the init binary, which answers through [`crate::maybe_run_internal`]),
//! collects a [`SelfCheck`] as JSON from its stdout, and
//! [`SelfCheck::problems`] lists what is wrong, each with what it means.
//! [`host_allows_unprivileged_userns`] tells whether the *host* leaves user
//! namespaces open (then the seccomp filter is what closes them).

use std::ffi::OsString;
use std::io;
use std::path::Path;
use std::process::Stdio;

use serde::{Deserialize, Serialize};

use crate::exec::{ExecSpec, Identity, Session};
use crate::ns::{Outcome, RunError, SandboxCommand, SandboxConfig, SpawnError};

/// `argv[1]` of the self-check command.
pub const SELFCHECK_ARG: &str = "__strata-selfcheck";

/// What a command found out about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelfCheck {
    /// The privilege lines of /proc/self/status (Uid, Gid, Groups, Cap*,
    /// NoNewPrivs, Seccomp), values with whitespace collapsed.
    pub status: Vec<(String, String)>,
    /// Calls that must fail, with the errno they got (0 = it succeeded).
    pub denied: Vec<(String, i32)>,
    pub dev_fuse_visible: bool,
    pub root_read_only: bool,
    /// `prctl(PR_GET_SECUREBITS)`.
    pub secure_bits: i32,
}

/// Running the self-check failed.
#[derive(Debug, thiserror::Error)]
pub enum SelfCheckError {
    #[error("selfcheck: {0}")]
    Spawn(#[from] SpawnError),
    #[error("selfcheck: {0}")]
    Run(#[from] RunError),
    #[error("selfcheck: the command ended with {outcome:?}; stderr: {stderr}")]
    Outcome { outcome: Outcome, stderr: String },
    #[error("selfcheck: unreadable output {output:?}: {source}")]
    Parse {
        output: String,
        source: serde_json::Error,
    },
}

/// Run the check in a new Sandbox with `config`, as `identity`.
/// `init_exe` runs as the command too: with the host view it is bound
/// read-only at its host path; a rootfs must hold it at the same path.
pub fn run_selfcheck(
    init_exe: &Path,
    mut config: SandboxConfig,
    identity: Identity,
) -> Result<SelfCheck, SelfCheckError> {
    if config.root == crate::mounts::RootFs::HostReadOnly {
        config.binds.push(crate::mounts::BindMount {
            source: init_exe.into(),
            target: init_exe.into(),
            readonly: true,
        });
    }
    let spec = ExecSpec {
        argv: vec![
            init_exe.as_os_str().to_owned(),
            OsString::from(SELFCHECK_ARG),
        ],
        env: vec![],
        cwd: "/".into(),
        identity,
        rlimits: vec![],
        session: Session::Inherit,
    };
    let child = SandboxCommand::new(config, spec)
        .init_exe(init_exe)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let (outcome, out, err) = child.wait_with_output()?;
    if outcome != Outcome::Exited(0) {
        return Err(SelfCheckError::Outcome {
            outcome,
            stderr: String::from_utf8_lossy(&err).into_owned(),
        });
    }
    serde_json::from_slice(&out).map_err(|source| SelfCheckError::Parse {
        output: String::from_utf8_lossy(&out).into_owned(),
        source,
    })
}

impl SelfCheck {
    fn field(&self, key: &str) -> Option<&str> {
        self.status
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Everything that is not as the privilege split requires; empty means
    /// it holds. Each entry says what is wrong and why it matters.
    pub fn problems(&self, identity: Identity) -> Vec<String> {
        let mut out = Vec::new();
        let zero = "0000000000000000";
        let ids = |id: u32| format!("{id} {id} {id} {id}");
        let want = [
            (
                "Uid",
                ids(identity.uid()),
                "the command must run as the configured uid",
            ),
            (
                "Gid",
                ids(identity.gid()),
                "the command must run as the configured gid",
            ),
            (
                "Groups",
                String::new(),
                "no supplementary groups (root's would grant access)",
            ),
            ("CapEff", zero.into(), "effective capabilities left"),
            ("CapPrm", zero.into(), "permitted capabilities left"),
            ("CapInh", zero.into(), "inheritable capabilities left"),
            (
                "CapBnd",
                zero.into(),
                "bounding set not empty: an execve could regain capabilities",
            ),
            ("CapAmb", zero.into(), "ambient capabilities left"),
            (
                "NoNewPrivs",
                "1".into(),
                "no_new_privs unset: setuid binaries could elevate",
            ),
            (
                "Seccomp",
                "2".into(),
                "no seccomp filter: user namespaces and mounts are not refused",
            ),
        ];
        for (key, value, why) in want {
            match self.field(key) {
                Some(v) if v == value => {}
                got => out.push(format!("{key} is {got:?}, expected {value:?}: {why}")),
            }
        }
        for (name, errno) in &self.denied {
            if *errno != libc::EPERM {
                out.push(format!(
                    "{name} gave errno {errno} instead of EPERM: the seccomp policy is not in force"
                ));
            }
        }
        if self.secure_bits != crate::exec::SECURE_BITS_VALUE as i32 {
            out.push(format!(
                "securebits are {:#x}, expected {:#x}: the capability rules are not locked",
                self.secure_bits,
                crate::exec::SECURE_BITS_VALUE
            ));
        }
        if self.dev_fuse_visible {
            out.push("/dev/fuse is visible to the command: it could mount FUSE filesystems".into());
        }
        if !self.root_read_only {
            out.push("the command's / is writable: the host or rootfs could be modified".into());
        }
        out
    }
}

/// The command side: gather a [`SelfCheck`] and print it as JSON.
pub(crate) fn selfcheck_main() -> i32 {
    let status_text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let keys = [
        "Uid",
        "Gid",
        "Groups",
        "CapInh",
        "CapPrm",
        "CapEff",
        "CapBnd",
        "CapAmb",
        "NoNewPrivs",
        "Seccomp",
    ];
    let status = status_text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| keys.contains(k))
        .map(|(k, v)| {
            (
                k.to_string(),
                v.split_whitespace().collect::<Vec<_>>().join(" "),
            )
        })
        .collect();
    let errno = |r: libc::c_long| {
        if r < 0 {
            io::Error::last_os_error().raw_os_error().unwrap_or(-1)
        } else {
            0
        }
    };
    // SAFETY: raw syscalls with constant arguments and static C strings.
    // Had one succeeded it would only have changed this process's own
    // namespaces or its view of /tmp, and the process exits right after.
    let denied = unsafe {
        vec![
            (
                "unshare(CLONE_NEWUSER)".to_string(),
                errno(libc::syscall(libc::SYS_unshare, libc::CLONE_NEWUSER)),
            ),
            (
                "unshare(CLONE_NEWNS)".to_string(),
                errno(libc::syscall(libc::SYS_unshare, libc::CLONE_NEWNS)),
            ),
            (
                "umount2(/tmp)".to_string(),
                errno(libc::syscall(libc::SYS_umount2, c"/tmp".as_ptr(), 0)),
            ),
            (
                "umount2(/tmp, MNT_DETACH)".to_string(),
                errno(libc::syscall(
                    libc::SYS_umount2,
                    c"/tmp".as_ptr(),
                    libc::MNT_DETACH,
                )),
            ),
            (
                "open_tree(/tmp, OPEN_TREE_CLONE)".to_string(),
                errno(libc::syscall(
                    libc::SYS_open_tree,
                    libc::AT_FDCWD,
                    c"/tmp".as_ptr(),
                    1,
                )),
            ),
        ]
    };
    let root_read_only = rustix::fs::statvfs("/")
        .map(|s| s.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY))
        .unwrap_or(false);
    let check = SelfCheck {
        status,
        denied,
        dev_fuse_visible: Path::new("/dev/fuse").exists(),
        root_read_only,
        // SAFETY: PR_GET_SECUREBITS takes no pointer arguments.
        secure_bits: unsafe { libc::prctl(libc::PR_GET_SECUREBITS, 0, 0, 0, 0) },
    };
    match serde_json::to_string(&check) {
        Ok(json) => {
            println!("{json}");
            0
        }
        Err(e) => {
            eprintln!("selfcheck: {e}");
            1
        }
    }
}

/// Can an unprivileged process create a user namespace on this host?
/// (docs/design.md §5: yes here, and the sysctl cannot be changed; the seccomp filter
/// is what refuses it to commands.) Tested for real in a forked child that
/// becomes uid/gid 65534 (nobody) with raw syscalls only, so it is safe to
/// call from a multi-threaded process. Needs root to switch to nobody.
pub fn host_allows_unprivileged_userns() -> io::Result<bool> {
    // SAFETY: the child only makes raw syscalls (async-signal-safe) and
    // ends with _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: raw syscalls; exit codes: 0 allowed, 1 refused, 2 setup failed.
        unsafe {
            if libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) != 0
                || libc::syscall(libc::SYS_setresgid, 65534, 65534, 65534) != 0
                || libc::syscall(libc::SYS_setresuid, 65534, 65534, 65534) != 0
            {
                libc::_exit(2);
            }
            let r = libc::syscall(libc::SYS_unshare, libc::CLONE_NEWUSER);
            libc::_exit(if r == 0 { 0 } else { 1 });
        }
    }
    let mut status = 0;
    // SAFETY: waitpid writes through a valid pointer.
    if unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
        return Err(io::Error::last_os_error());
    }
    match (libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
        (true, 0) => Ok(true),
        (true, 1) => Ok(false),
        _ => Err(io::Error::other(
            "could not switch to uid 65534 to test user namespaces (needs root)",
        )),
    }
}
