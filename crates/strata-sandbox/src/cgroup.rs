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
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mut r = right.split_whitespace();
        if r.next() != Some("cgroup") {
            continue;
        }
        let Some(mountpoint) = left.split_whitespace().nth(4) else {
            continue;
        };
        let super_opts = r.nth(1).unwrap_or("");
        for opt in super_opts.split(',') {
            if matches!(
                opt,
                "memory" | "pids" | "cpu" | "cpuacct" | "cpuset" | "freezer"
            ) {
                out.push((opt.to_string(), PathBuf::from(mountpoint)));
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

    /// Remove the cgroup directories. `rmdir` fails with EBUSY while tasks
    /// remain (they may still be exiting), so retry until `wait` passes.
    pub fn destroy(self, wait: Duration) -> Result<(), CgroupError> {
        let start = Instant::now();
        for (_, dir, _) in &self.dirs {
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
