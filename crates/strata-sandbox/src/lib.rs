//! strata-sandbox: the native (Docker-less) Sandbox primitives of strata.
//!
//! * [`seccomp`]: the command's seccomp policy, as reviewed data.
//! * [`exec`]: the privilege drop and `execve` of one command;
//!   [`confine`]: the same layers for a process that keeps its uid.
//! * [`ns`]: run a command in fresh namespaces under a reaping PID 1
//!   ([`SandboxCommand`]), via the re-exec'd init ([`maybe_run_internal`]).
//! * [`mounts`], [`hostview`], [`net`]: the command's view (read-only
//!   minimal host view or rootfs, private /tmp, fresh /proc, minimal /dev,
//!   loopback-only network); also `strata run --isolate`'s.
//! * [`cgroup`], [`rlimit`]: limits.
//! * [`selfcheck`]: does the privilege split hold here (for `strata probe`)?
//! * [`backend`]: the Backend trait (contract B1–B10) and what every
//!   backend shares (request checks, the state directory, the startup
//!   marker); [`native`]: the native backend ([`NativeBackend`]) that
//!   implements it on this crate's namespaces.
//!
//! Any binary that uses [`SandboxCommand`] or [`exec_helper_command`] must
//! call [`maybe_run_internal`] first thing in `main`.
//!
//! ```no_run
//! use std::process::Stdio;
//! use strata_sandbox::{ExecSpec, Identity, Outcome, SandboxCommand, SandboxConfig, Session};
//!
//! fn main() {
//!     // Re-executed as the Sandbox init / exec helper? Then this never returns.
//!     strata_sandbox::maybe_run_internal();
//!
//!     let spec = ExecSpec {
//!         argv: vec!["/bin/echo".into(), "hello".into()],
//!         env: vec![("PATH".into(), "/usr/bin:/bin".into())],
//!         cwd: "/tmp".into(),
//!         identity: Identity::default(), // 1500:1500
//!         rlimits: vec![],
//!         session: Session::Inherit,
//!     };
//!     let child = SandboxCommand::new(SandboxConfig::default(), spec)
//!         .stdout(Stdio::piped())
//!         .spawn()
//!         .expect("refused before starting: bad input or config");
//!     match child.wait_with_output() {
//!         Ok((Outcome::Exited(code), stdout, _stderr)) => println!("{code}: {stdout:?}"),
//!         Ok((Outcome::Signaled(sig), _, _)) => println!("killed by {sig}"),
//!         Err(e) => eprintln!("the Sandbox failed: {e}"),
//!     }
//! }
//! ```

#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(not(target_os = "linux"))]
compile_error!("strata-sandbox is Linux-only");

pub mod backend;
pub mod cgroup;
mod cgroup_warm;
mod commands_ns;
pub mod confine;
pub mod daemon_view;
mod dev;
pub mod exec;
pub mod heap;
pub mod hostview;
mod init;
pub mod internal;
mod mountpoints;
pub mod mounts;
pub mod native;
mod native_state;
pub mod net;
pub mod ns;
pub mod prestart;
pub mod rlimit;
mod rmtree;
pub mod seccomp;
pub mod selfcheck;
mod spawn;
pub mod spec;

pub use backend::{
    launch, Backend, BackendError, BackendKind, CreateRequest, DaemonInstall, DaemonPaths,
    Endpoint, Expose, ExposeSyntaxError, Filter, SandboxId, SandboxInfo, Started, State,
    DAEMON_MARKER,
};
pub use cgroup::{Cgroup, CgroupError, Hierarchy, Limits};
pub use daemon_view::{daemon_view_entrypoint, DAEMON_VIEW_ARG};
pub use exec::{
    drop_privileges_and_exec, exec_privileged, ExecError, ExecSpec, Failure, Identity,
    PreparedExec, Session, SpecError, DEFAULT_GID, DEFAULT_UID,
};
pub use heap::{fix_mmap_threshold, release_free_heap};
pub use internal::{
    exec_helper_command, maybe_run_internal, parse_report, HelperCommand, HelperReport, EXEC_ARG,
    INIT_ARG,
};
pub use mounts::{BindMount, MountError, RootFs};
pub use native::NativeBackend;
pub use net::{NetError, Network};
pub use ns::{
    read_report, ConfigError, Outcome, Report, RunAs, RunError, SandboxChild, SandboxCommand,
    SandboxConfig, SpawnError,
};
pub use prestart::{start_prestarted_helper, HandError, Prestarted, PrestartedHelper};
pub use rlimit::{Resource, Rlimit, RlimitError};
pub use seccomp::{Allowed, CompiledPolicy, Policy, Rule, ALLOW, POLICY};
pub use selfcheck::{host_allows_unprivileged_userns, run_selfcheck, SelfCheck, SelfCheckError};
pub use spawn::SpawnedChild;
