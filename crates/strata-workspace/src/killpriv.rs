//! Clearing setuid/setgid in the server (FUSE_HANDLE_KILLPRIV_V2).
//!
//! Why: a FUSE superblock starts without SB_NOSEC (fuse_fill_super), so
//! file_remove_privs() cannot cache "this inode has no privileges" and asks
//! the server for `security.capability` (a GETXATTR round trip,
//! cap_inode_need_killpriv()) before *every* write to a FUSE file, also
//! through passthrough (backing_file_write_iter() calls it on the FUSE
//! file): 1,000 pwrites of 4 KiB were 1,000 GETXATTR requests. With
//! FUSE_HANDLE_KILLPRIV_V2 accepted at INIT the kernel sets SB_NOSEC
//! (process_init_reply()), so an inode without suid/sgid is marked S_NOSEC
//! after its first write and asks again only after its attributes are next
//! refreshed (fuse_change_attributes_common() clears S_NOSEC). In exchange
//! the kernel stops clearing the bits itself (fuse_setattr() drops
//! ATTR_KILL_SUID/ATTR_KILL_SGID) and tells the server when to:
//!
//! - WRITE carries FUSE_WRITE_KILL_SUIDGID when the writer lacks
//!   CAP_FSETID (fuse_send_write_pages());
//! - SETATTR carries FATTR_KILL_SUIDGID on every chown of a non-directory,
//!   and on a truncate when the caller lacks CAP_FSETID (fuse_do_setattr());
//! - OPEN with O_TRUNC carries FUSE_OPEN_KILL_SUIDGID when the caller lacks
//!   CAP_FSETID (fuse_send_open()).
//!
//! fuser 0.18.0 passes the WRITE flag to us but keeps `fuse_setattr_in.valid`
//! and `fuse_open_in.open_flags` to itself. The chown rule needs no flag (it
//! is unconditional). For truncate and O_TRUNC we decide "lacks CAP_FSETID"
//! from the caller's fsuid ([`may_keep_privs`]).
//!
//! What is cleared is what the kernel cleared for us before this flag
//! (fuse_setattr() without handle_killpriv): S_ISUID, and S_ISGID only
//! together with S_IXGRP (setgid without group execute is the
//! mandatory-locking mark, not a privilege). So the flag changes the number
//! of round trips, not the modes a program sees.
//!
//! Passthrough writes never reach the server, so for them:
//!
//! - a file with S_ISUID, or S_ISGID and S_IXGRP, is never opened with
//!   passthrough (`WsFs::new_backing`): its writes come here as WRITE with
//!   the flag;
//! - a file that gains the bits while a passthrough handle is open (chmod
//!   u+s between open and write; `cp -p` and `install` do fchmod on an open
//!   file) keeps that backing until its last close, because the kernel
//!   cannot switch an open inode out of passthrough. For it the kernel still
//!   asks for `security.capability` before every write (no S_NOSEC on a
//!   setuid inode: inode_has_no_xattr()), with the writer's credentials,
//!   and clears nothing itself. So a GETXATTR of `security.capability` on a
//!   file that has the bits and a writable handle open, from a caller
//!   without CAP_FSETID, clears them ([`WsFs::getxattr_kills`]). Exec also
//!   asks for `security.capability`, but never here: exec of a file open
//!   for writing fails with ETXTBSY (deny_write_access()) before it asks.

use crate::config::IdMapping;
use crate::fs::WsFs;
use crate::node::{now_ns, NodeKind};
use crate::serve::Ctx;
use crate::state::{Handle, State, R};
use fuser::INodeNo;

/// The xattr file_remove_privs() asks for before a write.
pub(crate) const SECURITY_CAPABILITY: &[u8] = b"security.capability";

/// Whether the mode has bits that a write by an unprivileged caller clears
/// (and that a passthrough write could not clear).
pub(crate) fn has_privs(perm: u32) -> bool {
    killed(perm) != perm
}

/// `perm` after a write, truncate or chown by a caller without CAP_FSETID:
/// no S_ISUID, and no S_ISGID if group execute is set (fuse_setattr()'s
/// rule for servers without KILLPRIV, kept so modes do not change).
pub(crate) fn killed(perm: u32) -> u32 {
    let mut p = perm & !libc::S_ISUID;
    if p & libc::S_IXGRP != 0 {
        p &= !libc::S_ISGID;
    }
    p
}

/// Whether a request's caller may keep suid/sgid when it truncates (the
/// kernel's test is capable(CAP_FSETID), which fuser 0.18.0 does not let us
/// see for SETATTR and OPEN). We take fsuid 0 for "has CAP_FSETID": root
/// tools on the host have it, and the commands of a Sandbox run as a
/// nonroot uid with no capabilities. In rootless mode every caller is uid
/// 0 of a user namespace, which never holds CAP_FSETID in the initial
/// namespace (capable() asks there), so nobody keeps the bits. Misjudged:
/// a root process that dropped CAP_FSETID (keeps them, as if it had it) and
/// a nonroot process given CAP_FSETID (loses them); writes are exact.
pub(crate) fn may_keep_privs(ids: IdMapping, uid: u32) -> bool {
    ids == IdMapping::Identity && uid == 0
}

impl State {
    /// Clear suid, and sgid with group execute, of non-directory `ino`
    /// (journalled, ctime updated as notify_change() does). Returns whether
    /// the mode changed, i.e. whether the kernel's cached mode is stale.
    pub(crate) fn kill_suidgid(&mut self, ino: u64) -> R<bool> {
        let n = self.node_mut(ino)?;
        let perm = killed(n.perm);
        if n.kind == NodeKind::Dir || perm == n.perm {
            return Ok(false);
        }
        n.perm = perm;
        n.ctime = now_ns();
        self.changed(ino)?;
        Ok(true)
    }

    /// Whether some open handle of `ino` may write.
    fn has_writer(&self, ino: u64) -> bool {
        self.handles
            .values()
            .any(|h| matches!(h, Handle::File { ino: i, write: true } if *i == ino))
    }
}

impl WsFs {
    /// A GETXATTR of `name` on `ino`: if it is the kernel's question before
    /// a passthrough write to a file that gained suid/sgid while open (see
    /// the module comment), clear the bits now. Returns whether it did; the
    /// caller then invalidates the kernel's attributes after replying.
    pub(crate) fn getxattr_kills(&self, ctx: Ctx, ino: u64, name: &[u8]) -> bool {
        if name != SECURITY_CAPABILITY {
            return false;
        }
        let mut st = self.st();
        if !st.killpriv || may_keep_privs(st.ids, ctx.uid) {
            return false;
        }
        let Ok(n) = st.node(ino) else { return false };
        let passthrough_upper = n.backing.as_ref().is_some_and(|b| b.upper);
        if n.kind != NodeKind::File || !has_privs(n.perm) || !passthrough_upper {
            return false;
        }
        if !st.has_writer(ino) {
            return false;
        }
        st.tx(|s| s.kill_suidgid(ino)).unwrap_or(false)
    }

    /// Drop the kernel's cached attributes of `ino` (after its mode changed
    /// in a request whose reply carries no attributes: WRITE, OPEN,
    /// GETXATTR). The kernel would otherwise keep the old mode for the
    /// entry lifetime and could still honour a cleared suid bit at exec
    /// (fuse_permission() refreshes only invalid or expired attributes).
    /// Call after replying; a negative offset leaves the page cache alone
    /// (fuse_reverse_inval_inode()); ENOENT if the inode is already gone.
    pub(crate) fn inval_attr(&self, ino: INodeNo) {
        if let Some(n) = self.notifier.get() {
            let _ = n.inval_inode(ino, -1, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn killed_clears_suid_and_sgid_only_with_group_exec() {
        assert_eq!(killed(0o4755), 0o755);
        assert_eq!(killed(0o2755), 0o755);
        assert_eq!(killed(0o6755), 0o755);
        // setgid without group execute (mandatory locking mark) stays
        assert_eq!(killed(0o2745), 0o2745);
        assert_eq!(killed(0o6745), 0o2745);
        assert_eq!(killed(0o1777), 0o1777);
        assert!(has_privs(0o2654) && has_privs(0o4000));
        assert!(!has_privs(0o2644) && !has_privs(0o1777));
    }

    #[test]
    fn only_root_in_the_initial_namespace_keeps_privs() {
        assert!(may_keep_privs(IdMapping::Identity, 0));
        assert!(!may_keep_privs(IdMapping::Identity, 1500));
        let single = IdMapping::SingleUser {
            uid: 1000,
            gid: 1000,
        };
        assert!(!may_keep_privs(single, 0));
    }
}
