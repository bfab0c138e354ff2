//! What to run and as whom: [`ExecSpec`], validated into a
//! [`PreparedExec`] before anything is forked. All refusals of bad input
//! (docs/cli.md, exit code 2) happen here.

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::rlimit::{Rlimit, RlimitError};

/// Default uid of commands (docs/design.md §3: uid 1500 by default, configurable).
pub const DEFAULT_UID: u32 = 1500;
/// Default gid of commands.
pub const DEFAULT_GID: u32 = 1500;
/// Most bytes argv and env may take together (over 1 MiB in
/// total is refused); the kernel's own limit is near a quarter of the stack
/// rlimit, but a clear error here beats E2BIG later.
pub const MAX_ARGV_ENV_BYTES: usize = 1 << 20;
/// PATH used when `argv[0]` has no '/' and the command's env has no PATH.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The uid:gid a command runs as. Never 0: root inside the Sandbox is the
/// daemon's identity, not a command's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawIdentity", into = "RawIdentity")]
pub struct Identity {
    uid: u32,
    gid: u32,
}

#[derive(Serialize, Deserialize)]
struct RawIdentity {
    uid: u32,
    gid: u32,
}

impl TryFrom<RawIdentity> for Identity {
    type Error = SpecError;
    fn try_from(r: RawIdentity) -> Result<Self, SpecError> {
        Identity::new(r.uid, r.gid)
    }
}

impl From<Identity> for RawIdentity {
    fn from(i: Identity) -> Self {
        RawIdentity {
            uid: i.uid,
            gid: i.gid,
        }
    }
}

impl Default for Identity {
    fn default() -> Self {
        Identity {
            uid: DEFAULT_UID,
            gid: DEFAULT_GID,
        }
    }
}

impl Identity {
    /// uid or gid 0 is refused.
    pub fn new(uid: u32, gid: u32) -> Result<Self, SpecError> {
        if uid == 0 || gid == 0 {
            return Err(SpecError::RootIdentity { uid, gid });
        }
        Ok(Identity { uid, gid })
    }
    pub fn uid(&self) -> u32 {
        self.uid
    }
    pub fn gid(&self) -> u32 {
        self.gid
    }
}

/// Process group and session of a command (see credentials(7)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Session {
    /// Stay in the parent's process group and session.
    #[default]
    Inherit,
    /// Own process group (`setpgid(0, 0)`), so that a cancel can signal the
    /// command and everything it started with one `kill(-pgid, sig)`.
    NewProcessGroup,
    /// Own session and process group (`setsid`), no controlling terminal.
    NewSession,
    /// Own session with stdin (a pty slave) as controlling terminal
    /// (`setsid` + `ioctl(0, TIOCSCTTY, 0)`): PTY mode for interactive
    /// programs. This is why PTY mode needs the single-threaded helper: a
    /// multi-threaded daemon cannot do it in `pre_exec`.
    NewSessionWithTty,
}

/// What to run. Plain data: validated by [`ExecSpec::prepare`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecSpec {
    /// argv; `argv[0]` is the program (a path, or a name searched in PATH).
    /// No shell is involved.
    pub argv: Vec<OsString>,
    /// The complete environment of the command (nothing is inherited).
    pub env: Vec<(OsString, OsString)>,
    /// Working directory, absolute, as seen inside the Sandbox.
    pub cwd: PathBuf,
    pub identity: Identity,
    /// Limits set before the drop. Without an explicit `Core` entry the
    /// command gets RLIMIT_CORE 0 (no core files in the Workspace).
    pub rlimits: Vec<Rlimit>,
    pub session: Session,
}

/// Bad input in an [`ExecSpec`]; refused before anything is forked.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("exec: argv is empty")]
    EmptyArgv,
    #[error("exec: argv[{index}] contains a NUL byte")]
    NulInArg { index: usize },
    #[error("exec: argv and env take {bytes} bytes, more than the limit of {max}")]
    TooLarge { bytes: usize, max: usize },
    #[error("exec: environment variable name {name:?} is empty or contains '=' or NUL")]
    EnvName { name: OsString },
    #[error("exec: value of environment variable {name:?} contains a NUL byte")]
    NulInEnv { name: OsString },
    #[error("exec: cwd {cwd:?} is not an absolute path or contains NUL")]
    Cwd { cwd: PathBuf },
    #[error("exec: identity {uid}:{gid} refused: commands never run as uid or gid 0")]
    RootIdentity { uid: u32, gid: u32 },
    #[error("exec: {0}")]
    Rlimit(#[from] RlimitError),
}

/// A validated [`ExecSpec`] turned into C strings, ready for `execve`.
#[derive(Debug, Clone)]
pub struct PreparedExec {
    pub(crate) argv: Vec<CString>,
    pub(crate) envp: Vec<CString>,
    /// Paths to try in order (`argv[0]`, or `argv[0]` joined to each PATH entry).
    pub(crate) candidates: Vec<CString>,
    pub(crate) program: OsString,
    pub(crate) cwd: CString,
    pub(crate) cwd_path: PathBuf,
    pub(crate) identity: Identity,
    pub(crate) rlimits: Vec<Rlimit>,
    pub(crate) session: Session,
    /// Descriptors [`crate::exec::exec_privileged`] keeps open across
    /// `execve` (every other one is closed): the commands' cgroup for the
    /// daemon, named to it in [`crate::internal::COMMANDS_CGROUP_ENV`].
    pub(crate) keep_fds: Vec<i32>,
}

impl PreparedExec {
    /// Add `NAME=VALUE` to the environment (both already validated: no
    /// '=' in the name, no NUL anywhere).
    pub(crate) fn push_env(&mut self, name: &str, value: &str) {
        if let Ok(c) = CString::new(format!("{name}={value}")) {
            self.envp.push(c);
        }
    }
}

impl ExecSpec {
    /// Validate and convert. All refusals of bad input happen here.
    pub fn prepare(&self) -> Result<PreparedExec, SpecError> {
        if self.argv.is_empty() {
            return Err(SpecError::EmptyArgv);
        }
        let mut bytes = 0usize;
        let mut argv = Vec::with_capacity(self.argv.len());
        for (index, a) in self.argv.iter().enumerate() {
            bytes += a.len() + 1;
            argv.push(CString::new(a.as_bytes()).map_err(|_| SpecError::NulInArg { index })?);
        }
        let mut envp = Vec::with_capacity(self.env.len());
        let mut path_var: Option<&OsStr> = None;
        for (name, value) in &self.env {
            let nb = name.as_bytes();
            if nb.is_empty() || nb.contains(&b'=') || nb.contains(&0) {
                return Err(SpecError::EnvName { name: name.clone() });
            }
            if value.as_bytes().contains(&0) {
                return Err(SpecError::NulInEnv { name: name.clone() });
            }
            if nb == b"PATH" {
                path_var = Some(value);
            }
            let mut kv = nb.to_vec();
            kv.push(b'=');
            kv.extend_from_slice(value.as_bytes());
            bytes += kv.len() + 1;
            // Cannot fail: NUL was ruled out above for both halves.
            envp.push(CString::new(kv).map_err(|_| SpecError::NulInEnv { name: name.clone() })?);
        }
        if bytes > MAX_ARGV_ENV_BYTES {
            return Err(SpecError::TooLarge {
                bytes,
                max: MAX_ARGV_ENV_BYTES,
            });
        }
        let cwd_bytes = self.cwd.as_os_str().as_bytes();
        if !self.cwd.is_absolute() || cwd_bytes.contains(&0) {
            return Err(SpecError::Cwd {
                cwd: self.cwd.clone(),
            });
        }
        let cwd = CString::new(cwd_bytes).map_err(|_| SpecError::Cwd {
            cwd: self.cwd.clone(),
        })?;
        for r in &self.rlimits {
            r.validate()?;
        }
        // No core dumps unless asked for: with a core_pattern of "core"
        // (as on these machines) a crash would write a core file into the
        // cwd, i.e. into the Workspace, and from there into a commit.
        let mut rlimits = self.rlimits.clone();
        if !rlimits
            .iter()
            .any(|r| r.resource == crate::rlimit::Resource::Core)
        {
            rlimits.push(Rlimit {
                resource: crate::rlimit::Resource::Core,
                soft: Some(0),
                hard: Some(0),
            });
        }
        let program = self.argv[0].clone();
        let candidates = search_candidates(&program, path_var);
        Ok(PreparedExec {
            argv,
            envp,
            candidates,
            program,
            cwd,
            cwd_path: self.cwd.clone(),
            identity: self.identity,
            rlimits,
            session: self.session,
            keep_fds: Vec::new(),
        })
    }
}

/// execvp(3) semantics without a shell: a name with '/' is used as is,
/// otherwise each PATH entry is tried (an empty entry means the cwd).
fn search_candidates(program: &OsStr, path_var: Option<&OsStr>) -> Vec<CString> {
    let pb = program.as_bytes();
    if pb.contains(&b'/') {
        return CString::new(pb).into_iter().collect();
    }
    let path = path_var
        .map(OsStr::as_bytes)
        .unwrap_or(DEFAULT_PATH.as_bytes());
    path.split(|&b| b == b':')
        .filter_map(|dir| {
            let dir = if dir.is_empty() { &b"."[..] } else { dir };
            let mut full = dir.to_vec();
            full.push(b'/');
            full.extend_from_slice(pb);
            CString::new(full).ok()
        })
        .collect()
}

/// Is `path` absolute and free of `..` components (a cwd inside the Sandbox)?
pub fn is_clean_absolute(path: &Path) -> bool {
    path.is_absolute()
        && path
            .components()
            .all(|c| !matches!(c, std::path::Component::ParentDir))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(argv: &[&str]) -> ExecSpec {
        ExecSpec {
            argv: argv.iter().map(OsString::from).collect(),
            env: vec![],
            cwd: "/".into(),
            identity: Identity::default(),
            rlimits: vec![],
            session: Session::Inherit,
        }
    }

    #[test]
    fn bad_input_is_refused() {
        assert!(matches!(spec(&[]).prepare(), Err(SpecError::EmptyArgv)));
        assert!(matches!(
            spec(&["a\0b"]).prepare(),
            Err(SpecError::NulInArg { index: 0 })
        ));
        let mut s = spec(&["true"]);
        s.env = vec![("A=B".into(), "c".into())];
        assert!(matches!(s.prepare(), Err(SpecError::EnvName { .. })));
        s.env = vec![("".into(), "c".into())];
        assert!(matches!(s.prepare(), Err(SpecError::EnvName { .. })));
        let mut s = spec(&["true"]);
        s.cwd = "relative".into();
        assert!(matches!(s.prepare(), Err(SpecError::Cwd { .. })));
        let big = "x".repeat(MAX_ARGV_ENV_BYTES);
        assert!(matches!(
            spec(&["true", &big]).prepare(),
            Err(SpecError::TooLarge { .. })
        ));
        assert!(matches!(
            Identity::new(0, 5),
            Err(SpecError::RootIdentity { .. })
        ));
        assert!(matches!(
            Identity::new(5, 0),
            Err(SpecError::RootIdentity { .. })
        ));
        assert!(serde_json::from_str::<Identity>(r#"{"uid":0,"gid":1}"#).is_err());
    }

    #[test]
    fn path_search_candidates() {
        let c = search_candidates(OsStr::new("ls"), Some(OsStr::new("/a::/b")));
        let c: Vec<_> = c.iter().map(|c| c.to_str().unwrap().to_string()).collect();
        assert_eq!(c, ["/a/ls", "./ls", "/b/ls"]);
        let c = search_candidates(OsStr::new("./x"), None);
        assert_eq!(c.len(), 1);
    }
}
