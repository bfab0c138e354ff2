//! Per-process resource limits (`setrlimit(2)`) applied to a command.
//!
//! cgroups (see [`crate::cgroup`]) bound the whole Sandbox; rlimits bound
//! one process and its children individually (open files, core size, file
//! size, CPU seconds). They are set before the uid switch, because raising a
//! hard limit needs CAP_SYS_RESOURCE (`getrlimit(2)`), and are inherited
//! across `fork` and kept across `execve`.

use serde::{Deserialize, Serialize};

/// Which limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resource {
    /// RLIMIT_NOFILE: open file descriptors.
    Nofile,
    /// RLIMIT_NPROC: processes of the real uid (host-wide per uid!).
    Nproc,
    /// RLIMIT_CORE: core file size; 0 disables core dumps.
    Core,
    /// RLIMIT_FSIZE: largest file the process may write.
    Fsize,
    /// RLIMIT_CPU: CPU seconds (SIGXCPU at soft, SIGKILL at hard).
    Cpu,
    /// RLIMIT_AS: address space.
    As,
    /// RLIMIT_STACK: stack size.
    Stack,
}

impl Resource {
    fn to_rustix(self) -> rustix::process::Resource {
        use rustix::process::Resource as R;
        match self {
            Resource::Nofile => R::Nofile,
            Resource::Nproc => R::Nproc,
            Resource::Core => R::Core,
            Resource::Fsize => R::Fsize,
            Resource::Cpu => R::Cpu,
            Resource::As => R::As,
            Resource::Stack => R::Stack,
        }
    }
}

/// One limit: `None` means RLIM_INFINITY.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rlimit {
    pub resource: Resource,
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

/// Setting a limit failed.
#[derive(Debug, thiserror::Error)]
pub enum RlimitError {
    #[error("rlimit {resource:?}: soft limit {soft:?} is above hard limit {hard:?}")]
    SoftAboveHard {
        resource: Resource,
        soft: Option<u64>,
        hard: Option<u64>,
    },
    #[error("setrlimit({resource:?}, soft={soft:?}, hard={hard:?}): {source}")]
    Set {
        resource: Resource,
        soft: Option<u64>,
        hard: Option<u64>,
        source: std::io::Error,
    },
}

impl Rlimit {
    /// Check the limit without applying it (bad input is refused early).
    pub fn validate(&self) -> Result<(), RlimitError> {
        let above = match (self.soft, self.hard) {
            (None, Some(_)) => true,
            (Some(s), Some(h)) => s > h,
            _ => false,
        };
        if above {
            return Err(RlimitError::SoftAboveHard {
                resource: self.resource,
                soft: self.soft,
                hard: self.hard,
            });
        }
        Ok(())
    }

    /// Apply to the calling process.
    pub fn apply(&self) -> Result<(), RlimitError> {
        self.validate()?;
        rustix::process::setrlimit(
            self.resource.to_rustix(),
            rustix::process::Rlimit {
                current: self.soft,
                maximum: self.hard,
            },
        )
        .map_err(|e| RlimitError::Set {
            resource: self.resource,
            soft: self.soft,
            hard: self.hard,
            source: e.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soft_above_hard_is_refused() {
        let r = Rlimit {
            resource: Resource::Nofile,
            soft: Some(10),
            hard: Some(5),
        };
        assert!(matches!(
            r.validate(),
            Err(RlimitError::SoftAboveHard { .. })
        ));
        let r = Rlimit {
            resource: Resource::Nofile,
            soft: None,
            hard: Some(5),
        };
        assert!(r.validate().is_err());
        let r = Rlimit {
            resource: Resource::Nofile,
            soft: Some(5),
            hard: None,
        };
        assert!(r.validate().is_ok());
    }
}
