//! Warming the kernel's cgroup move lock before a Sandbox starts.
//!
//! Every move of a process into a cgroup (a write to `cgroup.procs` or
//! v1's `tasks`, cgroups(7)) takes the kernel's `cgroup_threadgroup_rwsem`
//! for writing. That lock is a per-CPU read-write semaphore whose readers
//! (every fork and exit on the machine) are kept cheap by making a writer
//! that comes after a quiet spell wait for an RCU grace period first
//! (`rcu_sync_enter`); a writer that follows another within about one
//! grace period finds the slow path already on and does not wait. On
//! these hosts the first move after ~50 ms without one took 14-16 ms (up
//! to 22), and one that follows another within 10 ms 0.3 ms
//! (docs/benchmarks.md, "The cgroup move").
//!
//! A Sandbox's start makes such a move (the monitor moves PID 1 into the
//! Sandbox's cgroup, [`crate::init`] step 6b) a few milliseconds after the
//! backend starts writing its state files. [`warm_moves`], called at that
//! start, makes a move that changes nothing (this thread into the cgroup
//! it is already in) on a short-lived thread of the caller, so that the
//! grace period starts then, beside the state files and the monitor's own
//! start, instead of when the monitor gets there.
//!
//! Only on cgroup v1: there a single thread can be moved (`tasks`), so the
//! move is exactly a no-op for the process (the kernel drops tasks whose
//! set of cgroups would not change before any controller sees them,
//! `cgroup_migrate_prepare_dst`). On v2 only whole processes move outside
//! threaded subtrees, and the better way there is to start the monitor in
//! its cgroup with `clone3(CLONE_INTO_CGROUP)`, which takes the lock only
//! for reading; not done yet (these hosts are v1).

use std::fs;
use std::io;
use std::path::PathBuf;

use crate::cgroup::{detect, Hierarchy};

/// Start the grace period of the next cgroup move now, on a thread of its
/// own that ends when its no-op move returns (see the module). Best
/// effort: any failure (no v1 hierarchy, no permission, a read-only
/// cgroup filesystem) only means the later move waits as it would have.
pub fn warm_moves() {
    let _ = std::thread::Builder::new()
        .name("strata-cg-warm".into())
        .spawn(|| {
            let _ = move_self_in_place();
        });
}

/// Write this thread's id to the `tasks` file of the v1 cgroup it is
/// already in, in the first v1 hierarchy this process is in. Returns the
/// file written, or `None` where there is no v1 hierarchy.
pub(crate) fn move_self_in_place() -> io::Result<Option<PathBuf>> {
    let Ok(Hierarchy::V1 { mounts }) = detect() else {
        return Ok(None);
    };
    // This thread's own cgroups: v1 lets the threads of one process be in
    // different cgroups, so the process's file could name another one.
    let text = fs::read_to_string("/proc/thread-self/cgroup")?;
    // Format (cgroups(7)): hierarchy-ID:controller-list:cgroup-path.
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let Some((_, mount)) = mounts
            .iter()
            .find(|(c, _)| ctrls.split(',').any(|x| x == c))
        else {
            continue;
        };
        let tasks = mount.join(path.trim_start_matches('/')).join("tasks");
        let tid = rustix::thread::gettid().as_raw_nonzero().get();
        fs::write(&tasks, tid.to_string())?;
        return Ok(Some(tasks));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The no-op move really is one: on this (v1) host, run as root, the
    /// write succeeds and this thread's cgroups read the same afterwards.
    #[test]
    fn the_warming_move_leaves_the_thread_where_it_was() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            panic!("needs root (it writes a cgroup's tasks file); CI runs as root");
        }
        let before = fs::read_to_string("/proc/thread-self/cgroup").unwrap();
        let written = move_self_in_place().expect("the no-op move");
        let after = fs::read_to_string("/proc/thread-self/cgroup").unwrap();
        assert_eq!(before, after);
        if matches!(detect(), Ok(Hierarchy::V1 { .. })) {
            let tasks = written.expect("a v1 host: a tasks file was written");
            let tid = rustix::thread::gettid().as_raw_nonzero().get().to_string();
            let members = fs::read_to_string(&tasks).unwrap();
            assert!(members.lines().any(|l| l == tid), "{tasks:?}: {members}");
        } else {
            assert_eq!(written, None);
        }
    }
}
