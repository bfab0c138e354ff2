//! One exec helper kept waiting ahead of the next exec (strata-sandbox
//! `prestart`: already in the commands' cgroup and mount namespace, its
//! seccomp filter compiled), so that an exec's path holds no fork of the
//! daemon, no start of the helper binary and no cgroup migration.
//!
//! The slot holds at most one helper. An exec takes it (or finds it empty
//! and starts a helper for itself, as before: concurrent execs, a helper
//! that died, an exec with a terminal) and a new one is started at once
//! on a blocking thread, beside the command. At start the first helper is
//! what builds the commands' mount namespace, so it replaces the former
//! warm-up run. When the daemon stops, [`Slot::close`] drops the waiting
//! helper's socket: it reads end of file and exits 0 having run nothing.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

/// A helper waiting for its command: the process (a child of the daemon,
/// which becomes the command at its execve) and its request socket.
pub(crate) struct Ready {
    pub child: tokio::process::Child,
    pub helper: strata_sandbox::Prestarted,
}

pub(crate) struct Slot {
    exe: PathBuf,
    ready: Mutex<Option<Ready>>,
    /// A helper is being started (one at a time).
    filling: AtomicBool,
    /// Off for good: not a Sandbox's daemon (no commands' namespace), or
    /// the daemon is stopping.
    off: AtomicBool,
}

impl Slot {
    pub(crate) fn new(exe: PathBuf) -> Arc<Slot> {
        Arc::new(Slot {
            exe,
            ready: Mutex::new(None),
            filling: AtomicBool::new(false),
            off: AtomicBool::new(false),
        })
    }

    /// The waiting helper, if there is a live one; starts the next.
    pub(crate) fn take(self: &Arc<Self>) -> Option<Ready> {
        let taken = self.ready.lock().take();
        self.refill();
        let mut r = taken?;
        match r.child.try_wait() {
            Ok(None) => Some(r),
            // Gone (a kill of the commands' cgroup, say): the exec starts a
            // helper of its own; the dead one is reaped here.
            Ok(Some(status)) => {
                tracing::info!(%status, "the waiting exec helper had ended; starting one for this exec");
                None
            }
            Err(e) => {
                tracing::warn!(%e, "checking on the waiting exec helper");
                None
            }
        }
    }

    /// Start a helper into the slot unless one waits or is starting.
    pub(crate) fn refill(self: &Arc<Self>) {
        if self.off.load(Ordering::SeqCst) || self.ready.lock().is_some() {
            return;
        }
        if self.filling.swap(true, Ordering::SeqCst) {
            return;
        }
        let slot = self.clone();
        tokio::task::spawn_blocking(move || {
            let started = slot.start();
            let mut ready = slot.ready.lock();
            match started {
                Ok(Some(r)) if !slot.off.load(Ordering::SeqCst) => *ready = Some(r),
                // Stopping: dropping it closes its socket, it exits.
                Ok(Some(_)) => {}
                Ok(None) => slot.off.store(true, Ordering::SeqCst),
                Err(e) => tracing::warn!("starting an exec helper ahead of the next exec: {e}"),
            }
            slot.filling.store(false, Ordering::SeqCst);
        });
    }

    fn start(&self) -> Result<Option<Ready>, String> {
        let Some(strata_sandbox::PrestartCommand {
            mut command,
            helper,
        }) = strata_sandbox::prestarted_helper_command(&self.exe).map_err(|e| e.to_string())?
        else {
            return Ok(None);
        };
        // /dev/null until the request brings the command's stdio; a process
        // group of its own, so that the command's pgid is its pid from its
        // first instant (Exec::signal_group).
        command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .current_dir("/");
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut cmd = tokio::process::Command::from(command);
        cmd.kill_on_drop(false);
        // The spawn forks this process: smaller is cheaper.
        strata_sandbox::release_free_heap();
        let child = cmd
            .spawn()
            .map_err(|e| format!("{}: {e}", self.exe.display()))?;
        // Our copy of the helper's end of the socket goes with `cmd`.
        drop(cmd);
        Ok(Some(Ready { child, helper }))
    }

    /// No more helpers; the waiting one (if any) is let go.
    pub(crate) fn close(&self) {
        self.off.store(true, Ordering::SeqCst);
        drop(self.ready.lock().take());
    }
}
