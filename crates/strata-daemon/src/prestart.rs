//! One exec helper kept waiting ahead of the next exec (strata-sandbox
//! `prestart`: already in the commands' cgroup and mount namespace, its
//! seccomp filter compiled), so that an exec's path holds no fork of the
//! daemon, no start of the helper binary and no cgroup migration.
//!
//! The slot holds at most one helper. An exec takes it (or finds it empty
//! and starts a helper for itself, as before: concurrent execs, a helper
//! that died, an exec with a terminal) and, once its command is handed
//! over, a new one is started on a blocking thread, beside the command.
//! It is started with posix_spawn (strata-sandbox `spawn`), so the daemon
//! is not forked for it, and waited for through its pidfd. At start the first helper is
//! what builds the commands' mount namespace, so it replaces the former
//! warm-up run. When the daemon stops, [`Slot::close`] drops the waiting
//! helper's socket: it reads end of file and exits 0 having run nothing.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

/// A helper waiting for its command: the process (a child of the daemon,
/// which becomes the command at its execve) and its request socket.
pub(crate) type Ready = strata_sandbox::PrestartedHelper;

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

    /// The waiting helper, if there is a live one. The caller starts the
    /// next ([`Slot::refill`]) once it has handed its command over, so that
    /// the new helper's start does not run beside the hand-off.
    pub(crate) fn take(self: &Arc<Self>) -> Option<Ready> {
        let r = self.ready.lock().take()?;
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
                // Stopping: dropping its socket makes it exit.
                Ok(Some(r)) => crate::child::reap_later(r.child),
                Ok(None) => slot.off.store(true, Ordering::SeqCst),
                Err(e) => tracing::warn!("starting an exec helper ahead of the next exec: {e}"),
            }
            slot.filling.store(false, Ordering::SeqCst);
        });
    }

    fn start(&self) -> Result<Option<Ready>, String> {
        // posix_spawn (strata-sandbox `spawn`): no fork of this process, so
        // neither its size nor a release of its free heap matters here.
        strata_sandbox::start_prestarted_helper(&self.exe).map_err(|e| e.to_string())
    }

    /// No more helpers; the waiting one (if any) is let go.
    pub(crate) fn close(&self) {
        self.off.store(true, Ordering::SeqCst);
        if let Some(r) = self.ready.lock().take() {
            // Its socket closes here: it exits, and is reaped.
            crate::child::reap_later(r.child);
        }
    }
}
