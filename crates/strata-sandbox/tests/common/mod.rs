//! Shared helpers for the integration tests.
//!
//! How the tests re-exec: the crate's `strata-sandbox-probe` binary (built
//! by cargo for integration tests, path in `CARGO_BIN_EXE_…`) is used both
//! as the Sandbox init (`SandboxCommand::init_exe`, it calls
//! `maybe_run_internal()` first) and as the command inside the Sandbox,
//! where it answers one question per subcommand. The default view
//! (`RootFs::HostReadOnly`) shows only the host's system directories, so
//! [`with_probe`] binds the probe read-only at its host path ([`run_in`]
//! does it for every config it runs).
//!
//! These tests need root (namespaces, mounts, cgroups). Without it they
//! FAIL with the reason; they never skip.

#![allow(dead_code)]

use std::ffi::OsString;
use std::process::Stdio;

use strata_sandbox::{
    BindMount, ExecSpec, Identity, Outcome, RootFs, SandboxCommand, SandboxConfig,
};

pub const PROBE: &str = env!("CARGO_BIN_EXE_strata-sandbox-probe");

pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "these tests create namespaces, mounts and cgroups and must run as root (euid is {euid}); \
         run them as root (CI does)"
    );
}

pub fn spec(argv: &[&str]) -> ExecSpec {
    ExecSpec {
        argv: argv.iter().map(OsString::from).collect(),
        env: vec![(
            "PATH".into(),
            "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin".into(),
        )],
        cwd: "/".into(),
        identity: Identity::default(),
        rlimits: vec![],
        session: Default::default(),
    }
}

pub fn probe(args: &[&str]) -> ExecSpec {
    let mut v = vec![PROBE];
    v.extend_from_slice(args);
    spec(&v)
}

/// `config` with the probe bound read-only at its host path (the host
/// view does not show the build directory), unless the root is a rootfs.
pub fn with_probe(mut config: SandboxConfig) -> SandboxConfig {
    if config.root == RootFs::HostReadOnly {
        config.binds.push(BindMount {
            source: PROBE.into(),
            target: PROBE.into(),
            readonly: true,
        });
    }
    config
}

/// [`with_probe`] on the default config.
pub fn default_config() -> SandboxConfig {
    with_probe(SandboxConfig::default())
}

/// Run in a fresh Sandbox and collect (outcome, stdout, stderr).
pub fn run_in(config: SandboxConfig, spec: ExecSpec) -> (Outcome, String, String) {
    require_root();
    let child = SandboxCommand::new(with_probe(config), spec)
        .init_exe(PROBE)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sandbox");
    let (o, out, err) = child.wait_with_output().expect("sandbox run");
    (
        o,
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    )
}

pub fn run(spec: ExecSpec) -> (Outcome, String, String) {
    run_in(SandboxConfig::default(), spec)
}
