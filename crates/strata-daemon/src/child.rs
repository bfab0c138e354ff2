//! The daemon's children that become commands: a helper spawned for its
//! exec, or the waiting helper (strata-sandbox `spawn`), watched through
//! its pidfd; and the reaping of a waiting helper let go.

/// The helper (soon the command) as a child of the daemon: spawned for
/// this exec (tokio's), or the helper that waited for it, started with
/// posix_spawn and watched through its pidfd (strata-sandbox `spawn`).
pub(crate) enum Child {
    Spawned(tokio::process::Child),
    Waiting(strata_sandbox::SpawnedChild),
}

impl Child {
    pub(crate) fn id(&self) -> Option<u32> {
        match self {
            Child::Spawned(c) => c.id(),
            Child::Waiting(c) => Some(c.id()),
        }
    }

    /// Wait for the exit and reap. Cancel-safe: a wait dropped early (the
    /// exec's timeout) can be started again.
    pub(crate) async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        match self {
            Child::Spawned(c) => c.wait().await,
            Child::Waiting(c) => {
                // The pidfd is readable once the child has exited
                // (pidfd_open(2)); waitpid then reaps it. tokio deprecated
                // its safe constructors for types whose descriptor may be
                // closed or replaced while registered; an OwnedFd that the
                // AsyncFd owns cannot be, and this crate has no unsafe.
                #[allow(deprecated)]
                let fd = tokio::io::unix::AsyncFd::with_interest(
                    c.pidfd().try_clone_to_owned()?,
                    tokio::io::Interest::READABLE,
                )?;
                loop {
                    if let Some(status) = c.try_wait()? {
                        return Ok(status);
                    }
                    fd.readable().await?.clear_ready();
                }
            }
        }
    }
}

/// Reap a child of ours that ends without an exec waiting for it (a
/// pre-started helper let go), so that it does not stay a zombie holding
/// a pid of the commands' cgroup. Outside a runtime (the daemon is ending)
/// it is left to the Sandbox's init.
pub(crate) fn reap_later(child: strata_sandbox::SpawnedChild) {
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(async move {
            let _ = Child::Waiting(child).wait().await;
        });
    }
}
