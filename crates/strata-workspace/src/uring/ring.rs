//! The ring threads: one per kernel queue (one queue per possible CPU),
//! each with its own io_uring of 128-byte SQEs, a few registered entries
//! (a 288-byte header buffer and a payload buffer each) and a loop that
//! waits for a request, serves it and answers with COMMIT_AND_FETCH, which
//! also hands the entry back for the next request.
//!
//! The kernel writes into an entry's buffers only while the entry is its
//! own (from the REGISTER or COMMIT_AND_FETCH submission to the completion
//! that delivers a request), so the thread reads and writes them only
//! between a completion and the next submission. Buffers are freed only
//! once the kernel gave every entry back (a completion with an error,
//! -ENOTCONN at unmount, fuse_uring_entry_teardown()); a thread that stops
//! otherwise leaks them rather than free memory the kernel may still fill.
#![allow(unsafe_code)]

use super::abi::{self, InHeader};
use super::dispatch;
use crate::fs::WsFs;
use crate::serve::Later;
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Entries per queue. One thread serves a queue, one request at a time;
/// a second entry lets the kernel hand over the next request while the
/// first is being served.
const DEPTH: usize = 2;

/// How long registration may keep meeting EAGAIN (the connection is not
/// past FUSE_INIT yet, fuse_uring_cmd()) before the mount gives up.
const INIT_WAIT: Duration = Duration::from_secs(10);

/// A failed step of the ring transport, with the system call's error.
#[derive(Debug, thiserror::Error)]
pub enum UringError {
    #[error("io_uring_setup (128-byte entries, {entries} entries): {source}")]
    Setup {
        entries: u32,
        source: std::io::Error,
    },
    #[error("io_uring_enter: {0}")]
    Enter(std::io::Error),
    #[error("the kernel refused FUSE_IO_URING_CMD_REGISTER on queue {qid}: {source}")]
    Register { qid: u16, source: std::io::Error },
    #[error("dup of the /dev/fuse fd: {0}")]
    Dup(std::io::Error),
    #[error("spawn the ring thread of queue {qid}: {source}")]
    Spawn { qid: u16, source: std::io::Error },
    #[error("queue {qid} did not report its registration within {secs} s")]
    Timeout { qid: u16, secs: u64 },
}

/// A ring of 128-byte SQEs (IORING_SETUP_SQE128): FUSE's commands carry
/// struct fuse_uring_cmd_req in the SQE's command area, which only the
/// large entries have.
pub(crate) fn new_ring(entries: u32) -> Result<IoUring<squeue::Entry128>, UringError> {
    IoUring::<squeue::Entry128, cqueue::Entry>::builder()
        .build(entries)
        .map_err(|source| UringError::Setup { entries, source })
}

/// The running ring threads of one mount.
pub(crate) struct RingSet {
    threads: Vec<JoinHandle<()>>,
    /// Requests answered through the rings.
    pub served: Arc<AtomicU64>,
}

impl RingSet {
    /// Join the threads, which the kernel ends at unmount; one still
    /// running after `deadline` is left detached, with a warning, rather
    /// than hang the unmount. A thread drops its filesystem object (what
    /// the caller waited for) before it frees its entries and returns, so
    /// a moment may remain between the two: under the load of the whole
    /// `scripts/test` a ring thread was seen still alive right after the
    /// unmount when this only looked once (`tests/uring.rs`).
    pub(crate) fn join_finished(&mut self, deadline: Instant) {
        for t in self.threads.drain(..) {
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            if t.is_finished() {
                let _ = t.join();
            } else {
                tracing::warn!("an io_uring thread is still running after the unmount");
            }
        }
    }
}

/// Start one ring thread per queue on `dev` (the connection's /dev/fuse
/// fd, past or about to be past FUSE_INIT) and wait until each registered
/// its entries or failed. `payload` is the payload buffer size, at least
/// the kernel's max_payload_sz (fuse_uring_create(): the larger of
/// max_write and max_pages pages). `acl_owner`: the uid fuser's session
/// lets through (SessionACL::Owner), if any.
pub(crate) fn start(
    fs: Arc<WsFs>,
    dev: &OwnedFd,
    queues: usize,
    payload: usize,
    acl_owner: Option<u32>,
) -> Result<RingSet, UringError> {
    let served = Arc::new(AtomicU64::new(0));
    let (tx, rx) = mpsc::channel();
    let mut threads = Vec::new();
    for q in 0..queues {
        let qid = q as u16;
        let dev = dev.try_clone().map_err(UringError::Dup)?;
        let (fs, served, tx) = (fs.clone(), served.clone(), tx.clone());
        let t = std::thread::Builder::new()
            .name(format!("strata-ring-{q}"))
            .spawn(move || {
                let q = Queue {
                    fs,
                    dev: Arc::new(dev),
                    qid,
                    payload,
                    acl_owner,
                    served,
                };
                q.run(tx)
            })
            .map_err(|source| UringError::Spawn { qid, source })?;
        threads.push(t);
    }
    drop(tx);
    let mut set = RingSet { threads, served };
    let deadline = Instant::now() + INIT_WAIT + Duration::from_secs(5);
    let mut first_err = None;
    for q in 0..queues {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(_) => {
                first_err.get_or_insert(UringError::Timeout {
                    qid: q as u16,
                    secs: INIT_WAIT.as_secs() + 5,
                });
                break;
            }
        }
    }
    match first_err {
        // The threads of queues that did register stay until unmount (the
        // kernel then ends their entries); the caller decides whether the
        // mount goes on over /dev/fuse.
        Some(e) => {
            set.threads.clear();
            Err(e)
        }
        None => Ok(set),
    }
}

/// One registered entry's buffers, owned by raw pointer (see the module
/// comment for when the kernel may write them).
struct Entry {
    header: *mut u8,
    payload: *mut u8,
    iov: *mut [libc::iovec; 2],
    /// Still the kernel's or ours (false once it completed with an error).
    live: bool,
}

struct Queue {
    fs: Arc<WsFs>,
    /// Shared with the ring's passthrough backings (uring/backing.rs),
    /// which close their ids through it while it is open.
    dev: Arc<OwnedFd>,
    qid: u16,
    payload: usize,
    acl_owner: Option<u32>,
    served: Arc<AtomicU64>,
}

impl Queue {
    fn run(self, tx: mpsc::Sender<Result<(), UringError>>) {
        pin_to_cpu(self.qid as usize);
        let mut ring = match new_ring((DEPTH * 2) as u32) {
            Ok(r) => r,
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        };
        let mut ents: Vec<Entry> = (0..DEPTH).map(|_| self.alloc()).collect();
        let (registered, early) = match self.register(&mut ring, &mut ents) {
            Ok(early) => (Ok(()), early),
            Err(e) => (Err(e), Vec::new()),
        };
        let ok = registered.is_ok();
        let _ = tx.send(registered);
        let clean = ok && self.serve(&mut ring, &mut ents, early);
        if clean || ents.iter().all(|e| !e.live) {
            drop(ring);
            for e in ents {
                e.free(self.payload);
            }
        } else {
            // The kernel may still own an entry: leave its memory alone.
            tracing::warn!(
                "ring queue {}: stopped with entries still registered",
                self.qid
            );
        }
    }

    fn alloc(&self) -> Entry {
        let header = Box::into_raw(vec![0u8; abi::REQ_HEADER_SZ].into_boxed_slice()) as *mut u8;
        let payload = Box::into_raw(vec![0u8; self.payload].into_boxed_slice()) as *mut u8;
        let iov = Box::into_raw(Box::new([
            libc::iovec {
                iov_base: header.cast(),
                iov_len: abi::REQ_HEADER_SZ,
            },
            libc::iovec {
                iov_base: payload.cast(),
                iov_len: self.payload,
            },
        ]));
        Entry {
            header,
            payload,
            iov,
            live: false,
        }
    }

    /// REGISTER every entry; EAGAIN (FUSE_INIT not answered yet) retries.
    /// A refused registration comes back at once as a completion with the
    /// error (fuse_uring_cmd() returns it instead of -EIOCBQUEUED); an
    /// accepted one completes only when a request arrives. Returns the
    /// completions that already brought requests.
    fn register(
        &self,
        ring: &mut IoUring<squeue::Entry128>,
        ents: &mut [Entry],
    ) -> Result<Vec<(usize, i32)>, UringError> {
        let deadline = Instant::now() + INIT_WAIT;
        let mut pending: Vec<usize> = (0..ents.len()).collect();
        let mut early = Vec::new();
        loop {
            for &i in &pending {
                let sqe = register_sqe(self.dev.as_raw_fd(), self.qid, ents[i].iov, i as u64);
                self.push(ring, &sqe)?;
                ents[i].live = true;
            }
            ring.submit().map_err(UringError::Enter)?;
            pending.clear();
            let mut cq = ring.completion();
            cq.sync();
            for c in &mut cq {
                let i = c.user_data() as usize;
                if c.result() >= 0 {
                    early.push((i, c.result()));
                    continue;
                }
                ents[i].live = false;
                match -c.result() {
                    libc::EAGAIN if Instant::now() < deadline => pending.push(i),
                    err => {
                        return Err(UringError::Register {
                            qid: self.qid,
                            source: std::io::Error::from_raw_os_error(err),
                        })
                    }
                }
            }
            if pending.is_empty() {
                return Ok(early);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn push(
        &self,
        ring: &mut IoUring<squeue::Entry128>,
        sqe: &squeue::Entry128,
    ) -> Result<(), UringError> {
        // SAFETY: the SQE points at an iovec array and buffers that live
        // until the kernel returns the entry (freed only after that, see
        // `run`); the ring has 2 * DEPTH slots and at most DEPTH entries
        // are submitted between two submit calls, so the queue has room.
        let full = unsafe { ring.submission().push(sqe).is_err() };
        if full {
            ring.submit().map_err(UringError::Enter)?;
            // SAFETY: as above; the submit emptied the queue.
            unsafe { ring.submission().push(sqe) }
                .map_err(|_| UringError::Enter(std::io::Error::from_raw_os_error(libc::EBUSY)))?;
        }
        Ok(())
    }

    /// Serve requests until the kernel ends every entry. Returns whether
    /// every entry ended (memory safe to free).
    fn serve(
        &self,
        ring: &mut IoUring<squeue::Entry128>,
        ents: &mut [Entry],
        early: Vec<(usize, i32)>,
    ) -> bool {
        let mut done = early;
        while ents.iter().any(|e| e.live) {
            if done.is_empty() {
                match ring.submit_and_wait(1) {
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                    Err(e) => {
                        tracing::error!("ring queue {}: io_uring_enter: {e}", self.qid);
                        return false;
                    }
                }
                done.extend(
                    ring.completion()
                        .map(|c| (c.user_data() as usize, c.result())),
                );
            }
            let mut laters = Vec::new();
            for &(i, res) in &done {
                if res < 0 {
                    // -ENOTCONN: the connection is going away (unmount or
                    // abort); anything else ends this entry too.
                    if res != -libc::ENOTCONN {
                        tracing::warn!(
                            "ring queue {}: entry ended: {}",
                            self.qid,
                            std::io::Error::from_raw_os_error(-res)
                        );
                    }
                    ents[i].live = false;
                    continue;
                }
                let (commit_id, later) = self.answer(&ents[i]);
                let sqe = commit_sqe(self.dev.as_raw_fd(), self.qid, commit_id, i as u64);
                if let Err(e) = self.push(ring, &sqe) {
                    tracing::error!("ring queue {}: {e}", self.qid);
                    return false;
                }
                if !later.is_empty() {
                    laters.push(later);
                }
            }
            // Work that must follow the answers (an invalidation) runs
            // after a submission of its own; otherwise the answers leave
            // with the next wait's io_uring_enter, one system call per
            // request instead of two.
            if !laters.is_empty() {
                if let Err(e) = ring.submit() {
                    tracing::error!("ring queue {}: io_uring_enter: {e}", self.qid);
                    return false;
                }
                for l in laters {
                    self.fs.run_later(l);
                }
            }
            done.clear();
        }
        true
    }

    /// Serve the request in entry `e` and write the answer into its
    /// buffers. Returns the commit id to hand back.
    fn answer(&self, e: &Entry) -> (u64, Later) {
        // SAFETY: the kernel completed this entry's command, so the entry
        // is ours until the next submission (module comment); the header
        // buffer is REQ_HEADER_SZ bytes.
        let header = unsafe { std::slice::from_raw_parts_mut(e.header, abi::REQ_HEADER_SZ) };
        // SAFETY: as above, the payload buffer is self.payload bytes.
        let payload = unsafe { std::slice::from_raw_parts_mut(e.payload, self.payload) };
        let rd = abi::Rd::new(header);
        let commit_id = rd.u64_at(abi::ENT_COMMIT_ID).unwrap_or(0);
        let in_sz = (rd.u32_at(abi::ENT_PAYLOAD_SZ).unwrap_or(0) as usize).min(self.payload);
        let mut later = Later::default();
        let (unique, r) = match InHeader::parse(&header[..abi::IN_OUT_SZ]) {
            Some(h) => {
                let op_in = &header[abi::IN_OUT_SZ..abi::ENT_IN_OUT_OFF];
                let r = dispatch::serve(
                    &self.fs,
                    &self.dev,
                    self.acl_owner,
                    &h,
                    op_in,
                    &payload[..in_sz],
                    self.payload,
                    &mut later,
                );
                (h.unique, r)
            }
            None => (commit_id, Err(fuser::Errno::EIO)),
        };
        let (error, out) = match r {
            Ok(b) => (0, b),
            Err(e) => (-(i32::from(e)), Vec::new()),
        };
        payload[..out.len()].copy_from_slice(&out);
        let len = (16 + out.len()) as u32;
        header[..16].copy_from_slice(&abi::out_header(len, error, unique));
        header[abi::ENT_PAYLOAD_SZ..abi::ENT_PAYLOAD_SZ + 4]
            .copy_from_slice(&(out.len() as u32).to_ne_bytes());
        self.served.fetch_add(1, Ordering::Relaxed);
        (commit_id, later)
    }
}

impl Entry {
    fn free(self, payload: usize) {
        // SAFETY: made by Box::into_raw in `alloc` with these lengths and
        // no longer the kernel's (the caller checked), freed once.
        unsafe {
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.header,
                abi::REQ_HEADER_SZ,
            )));
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.payload,
                payload,
            )));
            drop(Box::from_raw(self.iov));
        }
    }
}

/// IORING_OP_URING_CMD FUSE_IO_URING_CMD_REGISTER: sqe->addr points at
/// two iovecs (header, payload) and sqe->len must be 2
/// (fuse_uring_get_iovec_from_sqe()).
fn register_sqe(fd: i32, qid: u16, iov: *mut [libc::iovec; 2], user_data: u64) -> squeue::Entry128 {
    let sqe = opcode::UringCmd80::new(types::Fd(fd), abi::CMD_REGISTER)
        .cmd(abi::cmd_req(0, qid))
        .addr(Some(iov as u64))
        .build()
        .user_data(user_data);
    with_len(sqe, 2)
}

/// The io-uring crate's UringCmd80 sets no sqe->len; it is the u32 at
/// byte 24 of struct io_uring_sqe (after opcode, flags, ioprio, fd, off
/// and addr).
fn with_len(sqe: squeue::Entry128, len: u32) -> squeue::Entry128 {
    const _: () = assert!(std::mem::size_of::<squeue::Entry128>() == 128);
    // SAFETY: Entry128 is a #[repr(C)] wrapper of a 64-byte struct
    // io_uring_sqe and 64 command bytes, 128 bytes of plain integers with
    // no padding and no invalid bit patterns.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(sqe) };
    raw[24..28].copy_from_slice(&len.to_ne_bytes());
    // SAFETY: as above.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(raw) }
}

/// IORING_OP_URING_CMD FUSE_IO_URING_CMD_COMMIT_AND_FETCH: the answer is
/// in the entry's buffers; the command names the request by its commit id
/// (the request's unique) and queue.
fn commit_sqe(fd: i32, qid: u16, commit_id: u64, user_data: u64) -> squeue::Entry128 {
    opcode::UringCmd80::new(types::Fd(fd), abi::CMD_COMMIT_AND_FETCH)
        .cmd(abi::cmd_req(commit_id, qid))
        .build()
        .user_data(user_data)
}

/// Run the thread of queue `cpu` on that CPU: the kernel queues a request
/// on the queue of the CPU its caller runs on (fuse_uring_task_to_queue()),
/// so the answer comes from the same CPU's caches. Best effort.
fn pin_to_cpu(cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    if let Err(e) = rustix::thread::sched_setaffinity(None, &set) {
        tracing::debug!("ring queue {cpu}: sched_setaffinity: {e}");
    }
}
