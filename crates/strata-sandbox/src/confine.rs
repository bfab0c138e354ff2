//! Confinement of a process that keeps its uid: what `strata run
//! --isolate` (crates/strata-rootless) applies to its command, which runs
//! as root of a user namespace mapping only the invoking user (there is no
//! other uid to switch to). The same layers as a Sandbox command's drop
//! ([`crate::exec::drop_privileges_and_exec`]) minus the identity change:
//! no capability (in that namespace), no_new_privs and the same seccomp
//! filter. Without it the command would hold CAP_SYS_ADMIN over its mount
//! namespace and could unmount the masks of its view.

use rustix::thread::{CapabilitySet, CapabilitySets};

use crate::exec::{drop_bounding_set, ExecError, SECURE_BITS};
use crate::seccomp::CompiledPolicy;

/// Drop every capability for good, set no_new_privs, install `filter`.
/// Call in the single-threaded process that then calls `execve`, with
/// CAP_SETPCAP in its user namespace (root of it). Order, as in the
/// Sandbox's drop: securebits (NOROOT: a uid-0 execve grants nothing,
/// locked) and the bounding set while CAP_SETPCAP is still held; then the
/// capability sets; no_new_privs before the filter (seccomp(2) requires
/// it without CAP_SYS_ADMIN); the filter last.
pub fn confine_keeping_uid(filter: &CompiledPolicy) -> Result<(), ExecError> {
    rustix::thread::set_capabilities_secure_bits(SECURE_BITS)
        .map_err(|e| ExecError::SecureBits { source: e.into() })?;
    rustix::thread::clear_ambient_capability_set()
        .map_err(|e| ExecError::ClearAmbient { source: e.into() })?;
    drop_bounding_set()?;
    let empty = CapabilitySets {
        effective: CapabilitySet::empty(),
        permitted: CapabilitySet::empty(),
        inheritable: CapabilitySet::empty(),
    };
    rustix::thread::set_capabilities(None, empty)
        .map_err(|e| ExecError::ClearCaps { source: e.into() })?;
    rustix::thread::set_no_new_privs(true)
        .map_err(|e| ExecError::NoNewPrivs { source: e.into() })?;
    filter.install()?;
    Ok(())
}
