//! Memory, pids and CPU limits for a whole Sandbox, through cgroups v1 or
//! v2 behind one interface.
//!
//! These machines (docs/design.md §5) have v1 hierarchies for memory, pids and cpu
//! under /sys/fs/cgroup/{memory,pids,cpu} and a v2 mount without
//! controllers; elsewhere a pure v2 system has /sys/fs/cgroup/cgroup.controllers.
//! Detection follows that: `cgroup.controllers` at the root means v2
//! (cgroups(7)), otherwise the v1 hierarchies are found in
//! /proc/self/mountinfo.
//!
//! A Sandbox cgroup is created *below the caller's own cgroup* (read from
//! /proc/self/cgroup), so whatever limits the caller already lives under
//! still bound the Sandbox (limits are hierarchical), and nothing outside
//! our subtree is touched.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Limits for one Sandbox. `None` leaves a limit unset (inherited).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Memory in bytes (v1 memory.limit_in_bytes, v2 memory.max).
    pub memory_bytes: Option<u64>,
    /// Most tasks (processes and threads) at once (pids.max). Stops fork bombs.
    pub pids: Option<u64>,
    /// CPU in thousandths of one CPU: 1000 = one full CPU, 500 = half
    /// (v1 cpu.cfs_quota_us / cpu.cfs_period_us, v2 cpu.max).
    pub cpu_millis: Option<u64>,
}

impl Limits {
    pub fn is_empty(&self) -> bool {
        self.memory_bytes.is_none() && self.pids.is_none() && self.cpu_millis.is_none()
    }

    /// The limits every Sandbox gets unless its creator opts out
    /// (`--no-limits`): memory = half of this host's RAM, pids =
    /// [`DEFAULT_PIDS`], no CPU limit. Without them one fork bomb or
    /// memory hog in a command takes the host (docs/security.md).
    pub fn host_defaults() -> Result<Limits, CgroupError> {
        let path = Path::new("/proc/meminfo");
        let text = read(path)?;
        let total_kb = parse_mem_total_kb(&text).ok_or_else(|| CgroupError::Read {
            path: path.into(),
            source: io::Error::other("no MemTotal line"),
        })?;
        // Whole MiB: the kernel rounds a limit down to whole pages, and a
        // recorded value that reads back unchanged is easier to check.
        let half = total_kb.saturating_mul(1024) / 2;
        Ok(Limits {
            memory_bytes: Some(half - half % (1 << 20)),
            pids: Some(DEFAULT_PIDS),
            cpu_millis: None,
        })
    }

    /// `self` with its unset memory and pids limits taken from
    /// [`Limits::host_defaults`] (an explicit limit always wins).
    pub fn or_host_defaults(self) -> Result<Limits, CgroupError> {
        let d = Limits::host_defaults()?;
        Ok(Limits {
            memory_bytes: self.memory_bytes.or(d.memory_bytes),
            pids: self.pids.or(d.pids),
            cpu_millis: self.cpu_millis.or(d.cpu_millis),
        })
    }
}

/// Default pids limit of a Sandbox (processes and threads of the whole
/// Sandbox: init, daemon and commands).
pub const DEFAULT_PIDS: u64 = 4096;

/// Name of the child cgroup the daemon's commands run in, below the
/// Sandbox's cgroup (see [`commands_pids`]).
pub const COMMANDS_CGROUP: &str = "commands";
/// Name of the child cgroup of the monitor, PID 1 and the daemon (cgroup
/// v2 allows processes only in leaves once controllers are enabled for
/// children, so the Sandbox's own processes get a leaf too; v1 uses the
/// same layout so that both behave alike).
pub const INIT_CGROUP: &str = "init";

/// The pids limit of the commands' child cgroup for a Sandbox limited to
/// `total`: a quarter of it (at most 256, at least 1) stays reserved for
/// the init and the daemon (its threads count as tasks), so that a fork
/// bomb holding every pid the commands may have cannot stop the daemon
/// from answering or from starting the next exec.
pub fn commands_pids(total: u64) -> u64 {
    let reserve = (total / 4).clamp(1, 256);
    total.saturating_sub(reserve).max(1)
}

/// `MemTotal` of /proc/meminfo, in KiB.
fn parse_mem_total_kb(meminfo: &str) -> Option<u64> {
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// CFS period used for CPU limits: 100 ms, the kernel default.
const CPU_PERIOD_US: u64 = 100_000;

/// Which cgroup version is in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hierarchy {
    /// Unified hierarchy mounted at `root`.
    V2 { root: PathBuf },
    /// One mount per controller (controller name, mount point).
    V1 { mounts: Vec<(String, PathBuf)> },
}

/// A cgroup operation failed.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("cgroup: reading {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("cgroup: no cgroup v2 root and no v1 hierarchy for controller {controller} in /proc/self/mountinfo")]
    NoController { controller: &'static str },
    #[error("cgroup: this process has no entry for {controller} in /proc/self/cgroup")]
    NoSelfEntry { controller: String },
    #[error("cgroup: invalid name {name:?} (use 1-64 characters of [A-Za-z0-9_.-], not . or ..)")]
    BadName { name: String },
    #[error("cgroup: creating {path}: {source}")]
    Create { path: PathBuf, source: io::Error },
    #[error("cgroup: writing {value:?} to {path}: {source}")]
    Write {
        path: PathBuf,
        value: String,
        source: io::Error,
    },
    #[error("cgroup: cannot enable controllers below {path}: it holds processes (cgroup v2 \"no internal processes\" rule); run strata in a delegated cgroup of its own, e.g. `systemd-run --scope -p Delegate=yes strata ...`")]
    NotDelegated { path: PathBuf },
    #[error("cgroup: removing {path}: {source}")]
    Remove { path: PathBuf, source: io::Error },
}

fn read(path: &Path) -> Result<String, CgroupError> {
    fs::read_to_string(path).map_err(|source| CgroupError::Read {
        path: path.into(),
        source,
    })
}

fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    fs::write(path, value).map_err(|source| CgroupError::Write {
        path: path.into(),
        value: value.into(),
        source,
    })
}

/// Find the cgroup hierarchy of this machine.
pub fn detect() -> Result<Hierarchy, CgroupError> {
    let root = PathBuf::from("/sys/fs/cgroup");
    if root.join("cgroup.controllers").exists() {
        return Ok(Hierarchy::V2 { root });
    }
    let mountinfo = read(Path::new("/proc/self/mountinfo"))?;
    Ok(Hierarchy::V1 {
        mounts: parse_v1_mounts(&mountinfo),
    })
}

/// v1 mounts from mountinfo(5): "... mountpoint ... - cgroup cgroup rw,memory".
fn parse_v1_mounts(mountinfo: &str) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for m in crate::mounts::parse_mountinfo(mountinfo) {
        if m.fstype != "cgroup" {
            continue;
        }
        for opt in m.super_options.split(',') {
            if matches!(
                opt,
                "memory" | "pids" | "cpu" | "cpuacct" | "cpuset" | "freezer"
            ) {
                out.push((opt.to_string(), m.mount_point.clone()));
            }
        }
    }
    out
}

/// This process's cgroup path per v1 controller, or for v2 (key "").
fn self_paths() -> Result<Vec<(String, String)>, CgroupError> {
    let text = read(Path::new("/proc/self/cgroup"))?;
    let mut out = Vec::new();
    // Format (cgroups(7)): hierarchy-ID:controller-list:cgroup-path
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrls, path) = (parts.next(), parts.next(), parts.next());
        let (Some(ctrls), Some(path)) = (ctrls, path) else {
            continue;
        };
        if ctrls.is_empty() {
            out.push((String::new(), path.to_string()));
        }
        for c in ctrls.split(',').filter(|c| !c.is_empty()) {
            out.push((c.to_string(), path.to_string()));
        }
    }
    Ok(out)
}

pub(crate) fn check_name(name: &str) -> Result<(), CgroupError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(CgroupError::BadName { name: name.into() })
    }
}

/// A Sandbox's cgroup: one directory (v2) or one per controller (v1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cgroup {
    /// (controller or "" for v2, directory of this cgroup, directory of the parent).
    dirs: Vec<(String, PathBuf, PathBuf)>,
    v2: bool,
}

impl Cgroup {
    /// Create `name` below this process's cgroup and apply `limits`.
    /// Only the controllers a limit needs are used.
    pub fn create(name: &str, limits: &Limits) -> Result<Cgroup, CgroupError> {
        Self::create_in(&detect()?, &self_paths()?, name, limits)
    }

    /// [`Cgroup::create`] with the hierarchy and this process's cgroup
    /// paths given (unit tests run it against a plain directory tree).
    fn create_in(
        hierarchy: &Hierarchy,
        selfs: &[(String, String)],
        name: &str,
        limits: &Limits,
    ) -> Result<Cgroup, CgroupError> {
        check_name(name)?;
        let mut wanted: Vec<&'static str> = Vec::new();
        if limits.memory_bytes.is_some() {
            wanted.push("memory");
        }
        if limits.pids.is_some() {
            wanted.push("pids");
        }
        if limits.cpu_millis.is_some() {
            wanted.push("cpu");
        }
        let cg = Self::layout(hierarchy, selfs, name, &wanted, true)?;
        for (_, dir, _) in &cg.dirs {
            fs::create_dir(dir).map_err(|source| CgroupError::Create {
                path: dir.clone(),
                source,
            })?;
        }
        if let Err(e) = cg.apply(limits) {
            let _ = cg.clone().destroy(Duration::ZERO);
            return Err(e);
        }
        Ok(cg)
    }

    /// An existing Sandbox cgroup `name` below this process's cgroup, e.g.
    /// one left behind by a monitor that was killed with SIGKILL, so that
    /// a backend can remove it (B9). `None` if no directory exists.
    pub fn find(name: &str) -> Result<Option<Cgroup>, CgroupError> {
        Self::find_in(&detect()?, &self_paths()?, name)
    }

    fn find_in(
        hierarchy: &Hierarchy,
        selfs: &[(String, String)],
        name: &str,
    ) -> Result<Option<Cgroup>, CgroupError> {
        check_name(name)?;
        let all = ["memory", "pids", "cpu"];
        let mut cg = match hierarchy {
            Hierarchy::V2 { .. } => Self::layout(hierarchy, selfs, name, &[], false)?,
            Hierarchy::V1 { mounts } => {
                let present: Vec<&'static str> = all
                    .into_iter()
                    .filter(|c| mounts.iter().any(|(m, _)| m == c))
                    .collect();
                Self::layout(hierarchy, selfs, name, &present, false)?
            }
        };
        cg.dirs.retain(|(_, d, _)| d.is_dir());
        Ok((!cg.dirs.is_empty()).then_some(cg))
    }

    /// Where the directories of cgroup `name` are (or go), for the
    /// controllers in `wanted`. With `enable`, v2 controllers are switched
    /// on in the parent's `cgroup.subtree_control`.
    fn layout(
        hierarchy: &Hierarchy,
        selfs: &[(String, String)],
        name: &str,
        wanted: &[&'static str],
        enable: bool,
    ) -> Result<Cgroup, CgroupError> {
        let cg =
            match hierarchy {
                Hierarchy::V2 { root } => {
                    let own = selfs.iter().find(|(c, _)| c.is_empty()).ok_or(
                        CgroupError::NoSelfEntry {
                            controller: "(v2)".into(),
                        },
                    )?;
                    let parent = root.join(own.1.trim_start_matches('/'));
                    // Controllers must be enabled in the parent's subtree_control
                    // before the child gets their files (cgroups(7), v2). This
                    // fails with EBUSY if the parent has processes and is not the
                    // root ("no internal processes" rule): then the caller must
                    // run in a delegated cgroup of its own.
                    if enable && !wanted.is_empty() {
                        let v: Vec<String> = wanted.iter().map(|c| format!("+{c}")).collect();
                        let path = parent.join("cgroup.subtree_control");
                        fs::write(&path, v.join(" ")).map_err(|source| {
                            if source.raw_os_error() == Some(libc::EBUSY) {
                                CgroupError::NotDelegated {
                                    path: parent.clone(),
                                }
                            } else {
                                CgroupError::Write {
                                    path,
                                    value: v.join(" "),
                                    source,
                                }
                            }
                        })?;
                    }
                    let dir = parent.join(name);
                    Cgroup {
                        dirs: vec![(String::new(), dir, parent)],
                        v2: true,
                    }
                }
                Hierarchy::V1 { mounts } => {
                    let mut dirs = Vec::new();
                    for c in wanted.iter().copied() {
                        let mount = mounts
                            .iter()
                            .find(|(m, _)| m == c)
                            .ok_or(CgroupError::NoController { controller: c })?;
                        let own =
                            selfs
                                .iter()
                                .find(|(s, _)| s == c)
                                .ok_or(CgroupError::NoSelfEntry {
                                    controller: c.to_string(),
                                })?;
                        let parent = mount.1.join(own.1.trim_start_matches('/'));
                        dirs.push((c.to_string(), parent.join(name), parent));
                    }
                    Cgroup { dirs, v2: false }
                }
            };
        Ok(cg)
    }

    fn dir(&self, controller: &str) -> Option<&Path> {
        self.dirs
            .iter()
            .find(|(c, _, _)| self.v2 || c == controller)
            .map(|(_, d, _)| d.as_path())
    }

    fn apply(&self, limits: &Limits) -> Result<(), CgroupError> {
        if let (Some(bytes), Some(dir)) = (limits.memory_bytes, self.dir("memory")) {
            if self.v2 {
                write(&dir.join("memory.max"), &bytes.to_string())?;
                // Swap would let the Sandbox exceed the limit on disk; 0 keeps
                // it honest. Absent when the kernel has no swap accounting.
                let swap = dir.join("memory.swap.max");
                if swap.exists() {
                    write(&swap, "0")?;
                }
            } else {
                write(&dir.join("memory.limit_in_bytes"), &bytes.to_string())?;
            }
        }
        if let (Some(n), Some(dir)) = (limits.pids, self.dir("pids")) {
            write(&dir.join("pids.max"), &n.to_string())?;
        }
        if let (Some(m), Some(dir)) = (limits.cpu_millis, self.dir("cpu")) {
            // quota per period: m/1000 CPUs. The kernel refuses quotas below 1 ms.
            let quota = (m.saturating_mul(CPU_PERIOD_US) / 1000).max(1000);
            if self.v2 {
                write(&dir.join("cpu.max"), &format!("{quota} {CPU_PERIOD_US}"))?;
            } else {
                write(&dir.join("cpu.cfs_period_us"), &CPU_PERIOD_US.to_string())?;
                write(&dir.join("cpu.cfs_quota_us"), &quota.to_string())?;
            }
        }
        Ok(())
    }

    /// Create the child cgroup `name` of this one, with `limits` (each must
    /// be within this cgroup's controllers). On v2 the controllers this
    /// cgroup has are first enabled for its children, which is only
    /// allowed while it holds no process: create children before joining.
    pub fn child(&self, name: &str, limits: &Limits) -> Result<Cgroup, CgroupError> {
        check_name(name)?;
        if self.v2 {
            if let Some((_, dir, _)) = self.dirs.first() {
                let available = read(&dir.join("cgroup.controllers"))?;
                let enable: Vec<String> = available
                    .split_whitespace()
                    .filter(|c| matches!(*c, "memory" | "pids" | "cpu"))
                    .map(|c| format!("+{c}"))
                    .collect();
                if !enable.is_empty() {
                    let path = dir.join("cgroup.subtree_control");
                    write(&path, &enable.join(" "))?;
                }
            }
        }
        let cg = Cgroup {
            dirs: self
                .dirs
                .iter()
                .map(|(c, dir, _)| (c.clone(), dir.join(name), dir.clone()))
                .collect(),
            v2: self.v2,
        };
        for (_, dir, _) in &cg.dirs {
            match fs::create_dir(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(source) => {
                    return Err(CgroupError::Create {
                        path: dir.clone(),
                        source,
                    })
                }
            }
        }
        cg.apply(limits)?;
        Ok(cg)
    }

    /// Open `cgroup.procs` of every directory of this cgroup for writing
    /// (close-on-exec). Writing "0" to such a file moves the writer into
    /// the cgroup (cgroups(7)); the permission check uses the opener's
    /// credentials (and, on v2, its cgroup namespace), so a process that
    /// inherits the descriptor can join a cgroup it cannot name, e.g. the
    /// exec helper inside the Sandbox, which has no cgroup filesystem.
    pub fn open_procs(&self) -> Result<Vec<std::os::fd::OwnedFd>, CgroupError> {
        let mut out = Vec::new();
        for (_, dir, _) in &self.dirs {
            let path = dir.join("cgroup.procs");
            let f = fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(|source| CgroupError::Read {
                    path: path.clone(),
                    source,
                })?;
            out.push(std::os::fd::OwnedFd::from(f));
        }
        Ok(out)
    }

    /// Move process `pid` (and, in v1 and v2 alike, all its threads) in.
    pub fn add_process(&self, pid: u32) -> Result<(), CgroupError> {
        for (_, dir, _) in &self.dirs {
            write(&dir.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// Move process `pid` back to the parent cgroup(s) (before destroy).
    pub fn move_to_parent(&self, pid: u32) -> Result<(), CgroupError> {
        for (_, _, parent) in &self.dirs {
            write(&parent.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// Directories of this cgroup.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|(_, d, _)| d.clone()).collect()
    }

    /// Processes currently in the cgroup.
    pub fn procs(&self) -> Result<Vec<u32>, CgroupError> {
        let mut out = Vec::new();
        for (_, dir, _) in &self.dirs {
            for l in read(&dir.join("cgroup.procs"))?.lines() {
                if let Ok(p) = l.trim().parse() {
                    out.push(p);
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// Remove the cgroup directories, their child cgroups first (one level:
    /// [`INIT_CGROUP`], [`COMMANDS_CGROUP`]; nothing inside a Sandbox can
    /// make deeper ones, it has no cgroup filesystem). `rmdir` fails with
    /// EBUSY while tasks remain (they may still be exiting), so retry until
    /// `wait` passes.
    pub fn destroy(self, wait: Duration) -> Result<(), CgroupError> {
        let start = Instant::now();
        let mut dirs: Vec<PathBuf> = Vec::new();
        for (_, dir, _) in &self.dirs {
            if let Ok(rd) = fs::read_dir(dir) {
                for e in rd.flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        dirs.push(e.path());
                    }
                }
            }
            dirs.push(dir.clone());
        }
        for dir in &dirs {
            loop {
                match fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) && start.elapsed() < wait => {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(source) => {
                        return Err(CgroupError::Remove {
                            path: dir.clone(),
                            source,
                        })
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_v1_mountinfo() {
        let mi =
            "35 25 0:30 / /sys/fs/cgroup/memory rw,relatime shared:13 - cgroup cgroup rw,memory\n\
                  36 25 0:31 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
                  37 25 0:32 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
        let m = parse_v1_mounts(mi);
        assert!(m.contains(&("memory".into(), "/sys/fs/cgroup/memory".into())));
        assert!(m.contains(&("cpu".into(), "/sys/fs/cgroup/cpu,cpuacct".into())));
        assert!(m.contains(&("cpuacct".into(), "/sys/fs/cgroup/cpu,cpuacct".into())));
        assert_eq!(m.len(), 3);
    }

    fn read(p: &Path) -> String {
        fs::read_to_string(p).unwrap().trim().to_string()
    }

    #[test]
    fn v2_files_on_a_plain_tree() {
        let root = tempfile::tempdir().unwrap();
        fs::create_dir_all(root.path().join("user/app")).unwrap();
        let h = Hierarchy::V2 {
            root: root.path().into(),
        };
        let selfs = vec![(String::new(), "/user/app".to_string())];
        let limits = Limits {
            memory_bytes: Some(1 << 30),
            pids: Some(64),
            cpu_millis: Some(1500),
        };
        let cg = Cgroup::create_in(&h, &selfs, "sb", &limits).unwrap();
        let parent = root.path().join("user/app");
        assert_eq!(
            read(&parent.join("cgroup.subtree_control")),
            "+memory +pids +cpu"
        );
        assert_eq!(
            read(&parent.join("sb/memory.max")),
            (1u64 << 30).to_string()
        );
        assert_eq!(read(&parent.join("sb/pids.max")), "64");
        assert_eq!(read(&parent.join("sb/cpu.max")), "150000 100000");
        assert_eq!(cg.paths(), vec![parent.join("sb")]);
    }

    #[test]
    fn v1_files_on_a_plain_tree() {
        let root = tempfile::tempdir().unwrap();
        let m = |c: &str| root.path().join(c);
        for c in ["memory", "pids", "cpu"] {
            fs::create_dir_all(m(c).join("x")).unwrap();
        }
        let h = Hierarchy::V1 {
            mounts: vec![
                ("memory".into(), m("memory")),
                ("pids".into(), m("pids")),
                ("cpu".into(), m("cpu")),
            ],
        };
        let selfs: Vec<(String, String)> = ["memory", "pids", "cpu"]
            .iter()
            .map(|c| (c.to_string(), "/x".to_string()))
            .collect();
        let limits = Limits {
            memory_bytes: Some(4096),
            pids: Some(7),
            cpu_millis: Some(1),
        };
        let cg = Cgroup::create_in(&h, &selfs, "sb", &limits).unwrap();
        assert_eq!(
            read(&m("memory").join("x/sb/memory.limit_in_bytes")),
            "4096"
        );
        assert_eq!(read(&m("pids").join("x/sb/pids.max")), "7");
        // 1/1000 CPU is below the kernel's 1 ms minimum quota: clamped.
        assert_eq!(read(&m("cpu").join("x/sb/cpu.cfs_quota_us")), "1000");
        assert_eq!(read(&m("cpu").join("x/sb/cpu.cfs_period_us")), "100000");
        assert_eq!(cg.paths().len(), 3);
        // Only the controllers a limit needs are used.
        let cg = Cgroup::create_in(
            &h,
            &selfs,
            "sb2",
            &Limits {
                pids: Some(3),
                ..Limits::default()
            },
        )
        .unwrap();
        assert_eq!(cg.paths(), vec![m("pids").join("x/sb2")]);
        // A missing controller is an error naming it.
        let h = Hierarchy::V1 { mounts: vec![] };
        let e = Cgroup::create_in(&h, &selfs, "sb3", &limits).unwrap_err();
        assert!(
            matches!(
                e,
                CgroupError::NoController {
                    controller: "memory"
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn find_locates_leftovers() {
        let root = tempfile::tempdir().unwrap();
        let m = |c: &str| root.path().join(c);
        for c in ["memory", "pids"] {
            fs::create_dir_all(m(c).join("x")).unwrap();
        }
        let h = Hierarchy::V1 {
            mounts: vec![("memory".into(), m("memory")), ("pids".into(), m("pids"))],
        };
        let selfs: Vec<(String, String)> = ["memory", "pids"]
            .iter()
            .map(|c| (c.to_string(), "/x".to_string()))
            .collect();
        assert_eq!(Cgroup::find_in(&h, &selfs, "gone").unwrap(), None);
        fs::create_dir(m("pids").join("x/left")).unwrap();
        let cg = Cgroup::find_in(&h, &selfs, "left").unwrap().expect("found");
        assert_eq!(cg.paths(), vec![m("pids").join("x/left")]);
        cg.destroy(Duration::ZERO).unwrap();
        assert!(!m("pids").join("x/left").exists());
    }

    #[test]
    fn children_and_their_removal() {
        // v1: a child in each controller directory, with its own limits;
        // destroy removes the children first.
        let root = tempfile::tempdir().unwrap();
        let m = |c: &str| root.path().join(c);
        for c in ["memory", "pids"] {
            fs::create_dir_all(m(c).join("x")).unwrap();
        }
        let h = Hierarchy::V1 {
            mounts: vec![("memory".into(), m("memory")), ("pids".into(), m("pids"))],
        };
        let selfs: Vec<(String, String)> = ["memory", "pids"]
            .iter()
            .map(|c| (c.to_string(), "/x".to_string()))
            .collect();
        let limits = Limits {
            memory_bytes: Some(1 << 30),
            pids: Some(4096),
            cpu_millis: None,
        };
        let cg = Cgroup::create_in(&h, &selfs, "sb", &limits).unwrap();
        let commands = cg
            .child(
                COMMANDS_CGROUP,
                &Limits {
                    pids: Some(commands_pids(4096)),
                    ..Limits::default()
                },
            )
            .unwrap();
        assert_eq!(read(&m("pids").join("x/sb/commands/pids.max")), "3840");
        assert_eq!(
            commands.paths(),
            vec![
                m("memory").join("x/sb/commands"),
                m("pids").join("x/sb/commands")
            ]
        );
        // (A plain tree cannot rmdir a directory with files; a cgroupfs can.)
        for d in commands.paths().iter().chain(cg.paths().iter()) {
            for e in fs::read_dir(d).unwrap().flatten() {
                if e.file_type().unwrap().is_file() {
                    fs::remove_file(e.path()).unwrap();
                }
            }
        }
        cg.destroy(Duration::ZERO).unwrap();
        assert!(!m("pids").join("x/sb").exists());
        assert!(!m("memory").join("x/sb").exists());

        // v2: the controllers the Sandbox's cgroup has are enabled for its
        // children before they are made.
        let root = tempfile::tempdir().unwrap();
        fs::create_dir_all(root.path().join("app")).unwrap();
        let h = Hierarchy::V2 {
            root: root.path().into(),
        };
        let selfs = vec![(String::new(), "/app".to_string())];
        let cg = Cgroup::create_in(&h, &selfs, "sb", &limits).unwrap();
        fs::write(
            root.path().join("app/sb/cgroup.controllers"),
            "cpu memory pids io\n",
        )
        .unwrap();
        cg.child(INIT_CGROUP, &Limits::default()).unwrap();
        assert_eq!(
            read(&root.path().join("app/sb/cgroup.subtree_control")),
            "+cpu +memory +pids"
        );
        assert!(root.path().join("app/sb/init").is_dir());
    }

    #[test]
    fn defaults_and_the_commands_reserve() {
        assert_eq!(
            parse_mem_total_kb("MemTotal:       24684084 kB\nMemFree: 1 kB\n"),
            Some(24684084)
        );
        let d = Limits::host_defaults().unwrap();
        assert_eq!(d.pids, Some(DEFAULT_PIDS));
        assert_eq!(d.cpu_millis, None);
        let mem = d.memory_bytes.unwrap();
        assert_eq!(mem % (1 << 20), 0);
        // An explicit limit wins; unset ones get the defaults.
        let l = Limits {
            pids: Some(10),
            ..Limits::default()
        }
        .or_host_defaults()
        .unwrap();
        assert_eq!((l.pids, l.memory_bytes), (Some(10), Some(mem)));
        assert_eq!(commands_pids(4096), 3840);
        assert_eq!(commands_pids(128), 96);
        assert_eq!(commands_pids(100_000), 100_000 - 256);
        assert_eq!(commands_pids(2), 1);
        assert_eq!(commands_pids(1), 1);
    }

    #[test]
    fn bad_names_are_refused() {
        for n in ["", ".", "..", "a/b", "x y", &"a".repeat(65)] {
            assert!(
                matches!(check_name(n), Err(CgroupError::BadName { .. })),
                "{n:?}"
            );
        }
        assert!(check_name("strata-1a2b.c_d").is_ok());
    }
}
