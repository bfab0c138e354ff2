//! OPEN and CREATE of regular files, and the choice between passthrough
//! (the kernel reads and writes the backing file itself) and serving the
//! bytes in the daemon.

use crate::fs::{new_file_data, WsFs};
use crate::killpriv::{has_privs, may_keep_privs};
use crate::node::{Backing, BackingRef, Data, NodeKind};
use crate::ranges::TO_END;
use crate::serve::{Ctx, Later};
use crate::state::{Handle, State, R};
use fuser::{Errno, FopenFlags, OpenAccMode, OpenFlags};
use std::sync::Arc;

/// How a transport registers a file as a passthrough backing
/// (FUSE_DEV_IOC_BACKING_OPEN on its /dev/fuse fd).
pub(crate) type OpenBacking<'a> = &'a dyn Fn(&std::fs::File) -> std::io::Result<BackingRef>;

/// The answer to OPEN (and the open half of CREATE).
pub(crate) struct Opened {
    pub fh: u64,
    pub flags: FopenFlags,
    /// Passthrough: the kernel reads and writes this backing itself.
    pub backing: Option<Arc<BackingRef>>,
}

impl Opened {
    fn new(fh: u64, backing: Option<Arc<BackingRef>>) -> Opened {
        let flags = match backing {
            Some(_) => FILE_OPEN,
            None => FILE_OPEN | FopenFlags::FOPEN_KEEP_CACHE,
        };
        Opened { fh, flags, backing }
    }
}

/// Open flags for regular files. FOPEN_NOFLUSH: close(2) sends no FLUSH
/// (fuse_flush() returns at once when it is set and there is no writeback
/// cache); we keep no per-handle state that a flush would settle, and data
/// is written synchronously (WRITE) or by the kernel (passthrough), so the
/// round trip would buy nothing.
const FILE_OPEN: FopenFlags = FopenFlags::FOPEN_NOFLUSH;

/// How long a write-open that finds the inode's passthrough backing held
/// by readers waits for their RELEASE before it answers ETXTBSY (see
/// `op_open`). A reader that is really still open costs the writer this
/// long, once.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

impl WsFs {
    /// Reply to an open/create: with passthrough, all handles of one inode
    /// share one backing file (the kernel refuses a second, different one
    /// with EBUSY, and refuses to mix passthrough and cached opens).
    fn open_reply(
        &self,
        st: &mut State,
        ino: u64,
        write: bool,
    ) -> R<(u64, Option<Arc<BackingRef>>)> {
        let fh = st.new_fh(Handle::File { ino, write });
        st.node_mut(ino)?.opens += 1;
        if !st.passthrough {
            return Ok((fh, None));
        }
        let upper = matches!(st.node(ino)?.data, Data::Upper(_));
        let n = st.node(ino)?;
        match n.backing.as_ref().map(|b| (b.upper, b.id.clone())) {
            Some((b_upper, id)) if b_upper == upper => {
                if write {
                    // The kernel will not mix passthrough and served opens
                    // of one inode, so this writer shares the backing and
                    // its writes will not be seen: the next commit reads
                    // the whole file (ranges.rs).
                    st.note_written(ino, 0, TO_END)?;
                }
                Ok((fh, Some(id)))
            }
            Some(_) => {
                // Readers share the base content's cache file; a writer
                // needs its own copy, which the kernel cannot switch to
                // while those readers are open. Like a running executable:
                // ETXTBSY until they close.
                self.undo_open(st, ino, fh);
                Err(Errno::ETXTBSY)
            }
            None => Ok((fh, None)),
        }
    }

    fn undo_open(&self, st: &mut State, ino: u64, fh: u64) {
        st.handles.remove(&fh);
        if let Ok(n) = st.node_mut(ino) {
            n.opens = n.opens.saturating_sub(1);
        }
    }

    /// Register the inode's data file as its passthrough backing, if we
    /// should; `None` means answer without passthrough.
    fn new_backing(
        &self,
        st: &mut State,
        ino: u64,
        open_backing: OpenBacking,
    ) -> Option<Arc<BackingRef>> {
        if !st.passthrough {
            return None;
        }
        let n = st.node(ino).ok()?;
        if n.backing.is_some() || n.opens > 1 {
            return None;
        }
        // With FUSE_HANDLE_KILLPRIV_V2 the server clears suid/sgid on
        // write, and a passthrough write never reaches the server: such a
        // file is served here (see killpriv.rs). Rare files; the cost is
        // one round trip per write to them.
        if st.killpriv && has_privs(n.perm) {
            return None;
        }
        // A file with an origin (copied up, or committed since) is served
        // here, so that commit knows which bytes were written and re-chunks
        // only those (ranges.rs; ARCHITECTURE.md has the measurements that
        // chose this). Readers too: the kernel makes every open of an inode
        // share one backing, and RELEASE comes after close(2) returns, so a
        // writer opening right after a passthrough reader would join its
        // backing unseen. New files keep passthrough: they are chunked
        // whole anyway.
        if matches!(&n.data, Data::Upper(u) if u.origin.is_some()) {
            return None;
        }
        let upper = matches!(n.data, Data::Upper(_));
        let f = st.data_file(ino).ok()?;
        match open_backing(&f) {
            Ok(id) => {
                let id = Arc::new(id);
                st.node_mut(ino).ok()?.backing = Some(Backing {
                    id: id.clone(),
                    upper,
                });
                Some(id)
            }
            Err(e) => {
                tracing::warn!("passthrough backing for inode {ino} refused ({e}); serving reads and writes in the daemon");
                None
            }
        }
    }

    pub(crate) fn op_open(
        &self,
        ctx: Ctx,
        ino: u64,
        flags: i32,
        later: &mut Later,
        open_backing: OpenBacking,
    ) -> R<Opened> {
        let write = OpenFlags(flags).acc_mode() != OpenAccMode::O_RDONLY;
        // With FUSE_ATOMIC_O_TRUNC the kernel leaves O_TRUNC to us (and
        // sends no setattr), which spares copying up bytes about to go.
        let trunc = write && flags & libc::O_TRUNC != 0;
        let mut killed = false;
        // Set at the first ETXTBSY only: an open that gets none reads no clock.
        let mut deadline = None;
        let mut pause = std::time::Duration::from_micros(50);
        let (mut st, r) = loop {
            let mut st = self.st();
            let r = self.try_open(&mut st, ctx, ino, write, trunc, &mut killed);
            // The readers that hold the backing may have closed already:
            // their RELEASE comes after close(2) returns (fuse_release()
            // sends it in the background), so an open right after a close
            // can overtake it, on another thread or another CPU's ring.
            // Give it the time to arrive, without the lock, before
            // answering ETXTBSY.
            if !matches!(r, Err(Errno::ETXTBSY)) {
                break (st, r);
            }
            let now = std::time::Instant::now();
            if now >= *deadline.get_or_insert(now + RELEASE_WAIT) {
                break (st, r);
            }
            drop(st);
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(2));
        };
        if killed {
            // After an atomic O_TRUNC open the kernel invalidates only size
            // and times (fuse_finish_open()), not the mode.
            later.inval_attr = Some(ino);
        }
        let (fh, id) = r?;
        let id = match id {
            Some(id) => Some(id),
            None => self.new_backing(&mut st, ino, open_backing),
        };
        // The transport replies after the lock is released (see
        // serve.rs's op_getattr).
        Ok(Opened::new(fh, id))
    }

    /// One attempt at `op_open` under the lock.
    fn try_open(
        &self,
        st: &mut State,
        ctx: Ctx,
        ino: u64,
        write: bool,
        trunc: bool,
        killed: &mut bool,
    ) -> R<(u64, Option<Arc<BackingRef>>)> {
        let kind = st.node(ino)?.kind;
        if kind == NodeKind::Dir {
            return Err(Errno::EISDIR);
        }
        if kind != NodeKind::File {
            return Err(Errno::EINVAL);
        }
        if write && !matches!(st.node(ino)?.data, Data::Upper(_)) {
            // Copy-up before the reply: a passthrough write-open needs
            // its final backing file now.
            let busy = st.node(ino)?.backing.is_some();
            if busy {
                return Err(Errno::ETXTBSY);
            }
            if trunc {
                st.tx(|s| s.copy_up_truncated(ino))?;
            } else {
                st.tx(|s| s.copy_up(ino))?;
            }
        }
        if trunc {
            // FUSE_OPEN_KILL_SUIDGID, which fuser does not pass: the
            // caller's uid stands for its CAP_FSETID (killpriv.rs).
            let kill = st.killpriv && !may_keep_privs(st.ids, ctx.uid);
            st.tx(|s| {
                s.open_truncate(ino)?;
                if kill {
                    *killed |= s.kill_suidgid(ino)?;
                }
                Ok(())
            })?;
        }
        self.open_reply(st, ino, write)
    }

    pub(crate) fn op_create(
        &self,
        ctx: Ctx,
        parent: u64,
        name: &[u8],
        mode: u32,
        flags: i32,
        open_backing: OpenBacking,
    ) -> R<(fuser::FileAttr, Opened)> {
        // One hold of the lock for the whole request: the node, its upper
        // file (left open by do_create) and the handle.
        let mut st = self.st();
        let owner = self.owner(&st, ctx);
        let (ino, attr) =
            st.tx(|s| s.do_create(parent, name, NodeKind::File, mode, owner, new_file_data()))?;
        let write = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let fh = st.new_fh(Handle::File { ino, write });
        if let Ok(n) = st.node_mut(ino) {
            n.opens += 1;
        }
        let backing = self.new_backing(&mut st, ino, open_backing);
        Ok((attr, Opened::new(fh, backing)))
    }
}
