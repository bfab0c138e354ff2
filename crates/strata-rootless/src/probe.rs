//! Can this user run `strata run` here, and if not, why and what to do.
//!
//! Checked before anything is created or spawned, so that `strata run`
//! fails at once with a verdict instead of half-way with an errno.

use std::path::Path;

/// How a rootless Workspace is grafted onto a command's view. A closed
/// discriminant: a second mechanism (seccomp user notification, for hosts
/// with no usable /dev/fuse) is meant to be added as another arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mechanism {
    /// FUSE mounted inside an unprivileged user + mount namespace, served
    /// by the invoking process on an fd passed over SCM_RIGHTS.
    FuseInUserNamespace,
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mechanism::FuseInUserNamespace => f.write_str("fuse-in-user-namespace"),
        }
    }
}

/// One reason rootless mode cannot work, with its fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// No /dev/fuse at all.
    NoDevFuse,
    /// /dev/fuse exists but this user cannot open it read-write.
    DevFuseDenied { mode: u32, uid: u32, gid: u32 },
    /// A sysctl turns unprivileged user namespaces off.
    UserNamespacesOff {
        sysctl: &'static str,
        value: String,
        fix: &'static str,
    },
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::NoDevFuse => write!(
                f,
                "there is no /dev/fuse; an administrator can load FUSE with `modprobe fuse`"
            ),
            // docs/design.md §4: /dev/fuse is mode 0600 on these machines, and
            // the probe must say so and say what to do.
            Problem::DevFuseDenied { mode, uid, gid } => write!(
                f,
                "/dev/fuse is mode {mode:04o} owned by {uid}:{gid}, so you cannot open it; \
                 an administrator can run `chmod 0666 /dev/fuse` (FUSE itself confines \
                 each mount to its owner), or `chgrp fuse /dev/fuse && chmod 0660 /dev/fuse` \
                 and add you to group fuse (make it permanent with a udev rule: \
                 KERNEL==\"fuse\", MODE=\"0666\")"
            ),
            Problem::UserNamespacesOff { sysctl, value, fix } => write!(
                f,
                "unprivileged user namespaces are off ({sysctl} = {value}); an administrator can run `{fix}`"
            ),
        }
    }
}

/// The verdict: a mechanism that will work, or the problems in the way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    pub mechanism: Option<Mechanism>,
    pub problems: Vec<Problem>,
}

impl Probe {
    pub fn ok(&self) -> bool {
        self.mechanism.is_some()
    }

    /// One KEY=VALUE line for `strata probe`: `rootless=<mechanism>` or
    /// `rootless=unavailable: <causes and fixes>`.
    pub fn key_value(&self) -> String {
        match self.mechanism {
            Some(m) => format!("rootless={m}"),
            None => format!("rootless=unavailable: {self}"),
        }
    }
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.mechanism {
            Some(m) => write!(f, "rootless mode available ({m})"),
            None => {
                for (i, p) in self.problems.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{p}")?;
                }
                Ok(())
            }
        }
    }
}

/// What the probe looks at, gathered separately so the verdict is testable.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    /// None: /dev/fuse missing. Some((mode, uid, gid, can_open_rw)).
    pub dev_fuse: Option<(u32, u32, u32, bool)>,
    pub euid: u32,
    /// (sysctl path, contents) of the user-namespace switches that exist.
    pub sysctls: Vec<(&'static str, String)>,
}

const USERNS_SYSCTLS: &[(&str, &str, &str)] = &[
    (
        "/proc/sys/user/max_user_namespaces",
        "0",
        "sysctl -w user.max_user_namespaces=15000",
    ),
    (
        "/proc/sys/kernel/unprivileged_userns_clone",
        "0",
        "sysctl -w kernel.unprivileged_userns_clone=1",
    ),
    (
        "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
        "1",
        "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0",
    ),
];

/// Look at this machine.
pub fn gather() -> Facts {
    use std::os::unix::fs::MetadataExt;
    let dev = Path::new("/dev/fuse");
    let dev_fuse = std::fs::metadata(dev).ok().map(|m| {
        // access(2) uses the real ids, like the open the helper will make.
        let rw = rustix::fs::access(
            dev,
            rustix::fs::Access::READ_OK | rustix::fs::Access::WRITE_OK,
        )
        .is_ok();
        (m.mode() & 0o7777, m.uid(), m.gid(), rw)
    });
    let sysctls = USERNS_SYSCTLS
        .iter()
        .filter_map(|(p, _, _)| {
            std::fs::read_to_string(p)
                .ok()
                .map(|v| (*p, v.trim().to_string()))
        })
        .collect();
    Facts {
        dev_fuse,
        euid: rustix::process::geteuid().as_raw(),
        sysctls,
    }
}

/// The verdict for a set of facts.
pub fn judge(facts: &Facts) -> Probe {
    let mut problems = Vec::new();
    match facts.dev_fuse {
        None => problems.push(Problem::NoDevFuse),
        Some((mode, uid, gid, false)) => problems.push(Problem::DevFuseDenied { mode, uid, gid }),
        Some(_) => {}
    }
    // Root in the initial namespace may create user namespaces whatever
    // these switches say.
    if facts.euid != 0 {
        for (path, value) in &facts.sysctls {
            if let Some((p, off, fix)) = USERNS_SYSCTLS.iter().find(|(p, _, _)| p == path) {
                if value == off {
                    let sysctl = p.trim_start_matches("/proc/sys/");
                    problems.push(Problem::UserNamespacesOff {
                        sysctl: leak_name(sysctl),
                        value: value.clone(),
                        fix,
                    });
                }
            }
        }
    }
    Probe {
        mechanism: problems
            .is_empty()
            .then_some(Mechanism::FuseInUserNamespace),
        problems,
    }
}

fn leak_name(s: &str) -> &'static str {
    USERNS_SYSCTLS
        .iter()
        .map(|(p, _, _)| p.trim_start_matches("/proc/sys/"))
        .find(|n| *n == s)
        .unwrap_or("user namespaces")
}

/// Probe this machine for the calling user.
pub fn probe() -> Probe {
    judge(&gather())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_0600_is_named_with_its_fix() {
        // docs/design.md §4: /dev/fuse is mode 0600 on these machines.
        let p = judge(&Facts {
            dev_fuse: Some((0o600, 0, 0, false)),
            euid: 1500,
            sysctls: vec![],
        });
        assert!(!p.ok());
        let s = p.to_string();
        assert!(s.contains("mode 0600"), "{s}");
        assert!(s.contains("chmod 0666 /dev/fuse"), "{s}");
        assert!(p
            .key_value()
            .starts_with("rootless=unavailable: /dev/fuse is mode 0600"));
    }

    #[test]
    fn usable_fuse_and_namespaces_give_the_mechanism() {
        let p = judge(&Facts {
            dev_fuse: Some((0o666, 0, 0, true)),
            euid: 1500,
            sysctls: vec![("/proc/sys/user/max_user_namespaces", "96365".into())],
        });
        assert_eq!(p.mechanism, Some(Mechanism::FuseInUserNamespace));
        assert_eq!(p.key_value(), "rootless=fuse-in-user-namespace");
    }

    #[test]
    fn userns_switches_are_named() {
        let p = judge(&Facts {
            dev_fuse: Some((0o666, 0, 0, true)),
            euid: 1500,
            sysctls: vec![
                ("/proc/sys/user/max_user_namespaces", "0".into()),
                ("/proc/sys/kernel/unprivileged_userns_clone", "0".into()),
            ],
        });
        assert!(!p.ok());
        let s = p.to_string();
        assert!(s.contains("user.max_user_namespaces"), "{s}");
        assert!(s.contains("kernel.unprivileged_userns_clone=1"), "{s}");
        // Root is not bound by them.
        let p = judge(&Facts {
            dev_fuse: Some((0o600, 0, 0, true)),
            euid: 0,
            sysctls: vec![("/proc/sys/user/max_user_namespaces", "0".into())],
        });
        assert!(p.ok());
    }

    #[test]
    fn missing_device() {
        let p = judge(&Facts::default());
        assert!(p.to_string().contains("modprobe fuse"));
    }
}
