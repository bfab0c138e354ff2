//! The programmatic API: create/open a Workspace, status, commit, discard,
//! and serve it over FUSE (mounted at a path by a root daemon, or on a
//! /dev/fuse fd handed over from a user namespace).

use crate::cache::ContentCache;
use crate::commit::{Change, CommitOutcome};
use crate::config::{MountOptions, WorkspaceOptions};
use crate::error::{Result, WsError};
use crate::fs::WsFs;
use crate::journal::Journal;
use crate::mount_handle::MountHandle;
use crate::node::{now_ns, Data, Node, NodeKind, Slot, ROOT};
use crate::state::State;
use fuser::{Config, MountOption, Session, SessionACL};
use std::collections::HashMap;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};
use strata_store::{BranchRef, ObjectId, Store};

const JOURNAL: &str = "journal.log";
const UPPER: &str = "upper";
const LOCK: &str = "lock";

pub(crate) struct Shared {
    pub state: Mutex<State>,
    pub id: String,
    pub dir: PathBuf,
    pub mounted: AtomicBool,
    pub commit_lock: Mutex<()>,
    /// Held (flock) while this Workspace is open: one server per ID.
    _lock: File,
}

/// A writable projection of one branch head. Cheap to clone; all clones
/// share one state, so a control thread can call [`Workspace::status`] and
/// [`Workspace::commit`] while the FUSE session serves the mount.
#[derive(Clone)]
pub struct Workspace {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Workspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workspace")
            .field("id", &self.shared.id)
            .finish()
    }
}

/// Create directory `p` (and, with `parents`, its missing ancestors) with
/// mode 0700 whatever the umask: a scratch directory holds the changed
/// files of a Workspace and the content cache its base's files, which
/// only the user serving the Workspace may read (ARCHITECTURE.md; the
/// Store itself is 0700 for the same reason).
pub(crate) fn private_dir(p: &Path, parents: bool) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(parents)
        .mode(0o700)
        .create(p)?;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700))
}

fn lock_dir(dir: &Path, id: &str) -> Result<File> {
    let p = dir.join(LOCK);
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&p)
        .map_err(WsError::io("open the workspace lock", &p))?;
    // flock(2): released by the kernel when the holder dies, so a crashed
    // server never leaves a stale lock behind.
    //
    // A lock just released can still look held for a moment: the lock
    // belongs to the open file description, and a child that another
    // thread of this process is forking copies the descriptor table, so it
    // holds the description until its exec closes the O_CLOEXEC descriptor
    // (fork(2), flock(2)). A server that closes a Workspace and reopens it
    // while it starts Sandbox commands meets exactly that (seen as a
    // `Locked` error in `tests/crash.rs` when the other tests of the binary
    // spawned servers at the same time). So a held lock is tried again for
    // up to LOCK_PATIENCE before the answer is `Locked`.
    let deadline = Instant::now() + LOCK_PATIENCE;
    let mut pause = Duration::from_millis(1);
    loop {
        match rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(f),
            Err(rustix::io::Errno::WOULDBLOCK) if Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(_) => {
                return Err(WsError::Locked {
                    id: id.to_string(),
                    path: p.clone(),
                })
            }
        }
    }
}

/// How long a held Workspace lock is tried again before `Locked`.
const LOCK_PATIENCE: Duration = Duration::from_millis(500);

fn valid_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && id != "cache";
    if !ok {
        return Err(WsError::Invalid(format!(
            "workspace id {id:?}: use 1-64 characters of [A-Za-z0-9_-] (not \"cache\")"
        )));
    }
    Ok(())
}

impl Workspace {
    /// Create a Workspace on `branch_ref` ("project/branch"), with its
    /// scratch directory under `scratch_root`. Reads only the base commit
    /// object: cost does not depend on the size of the tree.
    pub fn create(
        store: &Store,
        branch_ref: &str,
        scratch_root: &Path,
        opts: &WorkspaceOptions,
    ) -> Result<Workspace> {
        let resolved = store
            .resolve(branch_ref)
            .map_err(WsError::store("resolve the branch"))?;
        let branch = resolved.branch.ok_or_else(|| WsError::NotABranch {
            reference: branch_ref.to_string(),
        })?;
        let base = resolved.commit;
        let tree = store
            .read_commit(base)
            .map_err(WsError::store("read the base commit"))?
            .tree;
        let id = match &opts.id {
            Some(id) => id.clone(),
            None => format!("{:016x}", rand::random::<u64>()),
        };
        valid_id(&id)?;
        let dir = scratch_root.join(&id);
        if !scratch_root.is_dir() {
            private_dir(scratch_root, true)
                .map_err(WsError::io("create the scratch root", scratch_root))?;
        }
        private_dir(&dir, false).map_err(WsError::io("create the workspace directory", &dir))?;
        private_dir(&dir.join(UPPER), false)
            .map_err(WsError::io("create the upper directory", &dir))?;
        let lock = lock_dir(&dir, &id)?;
        let journal = Journal::open(&dir.join(JOURNAL))?;
        store
            .pin(&format!("workspace:{id}"), base)
            .map_err(WsError::store("pin the base commit"))?;
        let (uid, gid) = opts.root_owner.unwrap_or_else(|| {
            (
                rustix::process::geteuid().as_raw(),
                rustix::process::getegid().as_raw(),
            )
        });
        let mut root = Node::new(
            NodeKind::Dir,
            opts.root_mode.unwrap_or(0o755),
            uid,
            gid,
            now_ns(),
            Data::None,
        );
        root.dir_mut().expect("dir").lower = Some(tree);
        let mut state = new_state(store, &id, branch, base, &dir, opts, journal)?;
        state.nodes.insert(ROOT, root);
        state
            .tx(|s| {
                s.journal
                    .set_meta("id", &id)
                    .map_err(|e| crate::state::eio("journal", e))?;
                s.journal
                    .set_meta("branch", &s.branch.to_string())
                    .map_err(|e| crate::state::eio("journal", e))?;
                s.journal
                    .set_meta("base", &base.to_hex())
                    .map_err(|e| crate::state::eio("journal", e))?;
                s.persist(ROOT)
            })
            .map_err(|e| WsError::Invalid(format!("initialize the journal: {e:?}")))?;
        Ok(Workspace::wrap(state, id, dir, lock))
    }

    /// Reopen Workspace `id` (e.g. after its server died): the uncommitted
    /// state is exactly what the journal and the upper directory hold.
    pub fn open(
        store: &Store,
        id: &str,
        scratch_root: &Path,
        opts: &WorkspaceOptions,
    ) -> Result<Workspace> {
        valid_id(id)?;
        let dir = scratch_root.join(id);
        if !dir.join(JOURNAL).exists() {
            return Err(WsError::NotFound {
                id: id.to_string(),
                scratch_root: scratch_root.to_path_buf(),
            });
        }
        let lock = lock_dir(&dir, id)?;
        let journal = Journal::open(&dir.join(JOURNAL))?;
        let meta = |k: &str| -> Result<String> {
            journal
                .get_meta(k)
                .map_err(journal.err("read metadata"))?
                .ok_or_else(|| WsError::CorruptJournal {
                    path: journal.path().to_path_buf(),
                    reason: format!("no {k}"),
                })
        };
        let branch =
            BranchRef::parse(&meta("branch")?).map_err(WsError::store("parse the branch"))?;
        let base_hex = meta("base")?;
        let base = ObjectId::from_hex(&base_hex).ok_or_else(|| WsError::CorruptJournal {
            path: journal.path().to_path_buf(),
            reason: format!("bad base {base_hex:?}"),
        })?;
        let (nodes, entries) = journal.load()?;
        let mut journal = journal;
        // A server that died between publishing a commit and journalling
        // its new base left the branch one commit ahead, made by this
        // Workspace from this base: adopt it. Status compares values, not
        // flags, so the live tree (dirs still reading their old trees) shows
        // exactly the changes made since.
        let mut adopted = false;
        let base = match store.branch_head(&branch) {
            Ok(head) if head != base => match store.read_commit(head) {
                Ok(c)
                    if c.parents == [base]
                        && c.metadata.get("workspace").map(String::as_str) == Some(id) =>
                {
                    journal
                        .set_meta("base", &head.to_hex())
                        .map_err(journal.err("record the adopted base"))?;
                    adopted = true;
                    head
                }
                _ => base,
            },
            _ => base,
        };
        let mut state = new_state(store, id, branch, base, &dir, opts, journal)?;
        for (ino, rec) in nodes {
            state.nodes.insert(ino, Node::from_record(rec));
            state.next_ino = state.next_ino.max(ino + 1);
        }
        if !state.nodes.contains_key(&ROOT) {
            return Err(WsError::CorruptJournal {
                path: dir.join(JOURNAL),
                reason: "no root".into(),
            });
        }
        for (parent, name, child) in entries {
            let slot = match child {
                Some(c) if state.nodes.contains_key(&c) => Slot::Node(c),
                Some(_) => continue,
                None => Slot::Whiteout,
            };
            if let Slot::Node(c) = slot {
                state
                    .nodes
                    .get_mut(&c)
                    .expect("checked")
                    .links
                    .push((parent, name.clone()));
            }
            if let Some(d) = state.nodes.get_mut(&parent).and_then(|n| n.dir_mut()) {
                d.children.insert(name, slot);
            }
        }
        for (ino, n) in &state.nodes {
            if n.link_group != 0 {
                state.groups.insert(n.link_group, *ino);
                // Other links of a changed base group are found again at
                // the next status/commit (they were not journalled).
                state.pending_groups.insert(n.link_group);
            }
        }
        // Upper files of inodes the journal does not know: deleted files
        // (pooled, or unlinked while open when the server died). Emptied
        // and pooled for reuse (pool.rs); anything else there is garbage.
        let upper = dir.join(UPPER);
        if let Ok(rd) = std::fs::read_dir(&upper) {
            for e in rd.flatten() {
                match e.file_name().to_str().and_then(|s| s.parse::<u64>().ok()) {
                    Some(i) if state.nodes.contains_key(&i) => {}
                    Some(i) if i > ROOT => state.adopt_upper_file(i),
                    _ => {
                        let _ = std::fs::remove_file(e.path());
                    }
                }
            }
            state.dispose_adopted();
        }
        if adopted {
            // The upper files still name the contents they were copied
            // from; re-derive what they hold now (hashing dedups against
            // the adopted commit, so nothing new is stored).
            state.rebase_uppers()?;
        }
        store
            .pin(&format!("workspace:{id}"), base)
            .map_err(WsError::store("pin the base commit"))?;
        Ok(Workspace::wrap(state, id.to_string(), dir, lock))
    }

    /// IDs of the Workspaces under `scratch_root`.
    pub fn list(scratch_root: &Path) -> Result<Vec<String>> {
        let mut out = Vec::new();
        let rd = match std::fs::read_dir(scratch_root) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(WsError::io("list", scratch_root)(e)),
        };
        for e in rd.flatten() {
            if e.path().join(JOURNAL).exists() {
                if let Some(s) = e.file_name().to_str() {
                    out.push(s.to_string());
                }
            }
        }
        out.sort();
        Ok(out)
    }

    fn wrap(state: State, id: String, dir: PathBuf, lock: File) -> Workspace {
        Workspace {
            shared: Arc::new(Shared {
                state: Mutex::new(state),
                id,
                dir,
                mounted: AtomicBool::new(false),
                commit_lock: Mutex::new(()),
                _lock: lock,
            }),
        }
    }

    fn st(&self) -> MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// The scratch directory (journal, upper layer).
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// The commit the Workspace currently shows changes against.
    pub fn base(&self) -> ObjectId {
        self.st().base
    }

    pub fn branch(&self) -> BranchRef {
        self.st().branch.clone()
    }

    pub fn is_mounted(&self) -> bool {
        self.shared.mounted.load(Ordering::SeqCst)
    }

    /// Added / modified / deleted / type-changed paths relative to the base,
    /// sorted by path. Reads no unchanged file contents.
    pub fn status(&self) -> Result<Vec<Change>> {
        self.st().status()
    }

    /// Publish the changes as a commit on the branch (compare-and-swap on
    /// the head) and continue from it; open files keep working. With no
    /// changes returns `UpToDate` and writes nothing. If the branch moved,
    /// returns `WsError::Conflict` and changes nothing.
    pub fn commit(&self, message: &str) -> Result<CommitOutcome> {
        // One commit at a time; the state lock is released while changed
        // files are chunked and hashed, then taken again for the tree walk.
        let _one = self
            .shared
            .commit_lock
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let (store, files) = {
            let mut st = self.st();
            (st.store.clone(), st.files_to_hash())
        };
        let pre = match files.and_then(|files| crate::commit::prehash(&store, files)) {
            Ok(pre) => pre,
            Err(e) => {
                // Inode numbers may be reused again (pool.rs).
                self.st().pool.hashing = false;
                return Err(e);
            }
        };
        self.st().commit(message, pre)
    }

    /// Drop all uncommitted changes and the Workspace itself (scratch
    /// directory and base pin). Refused while mounted.
    pub fn discard(self) -> Result<()> {
        if self.is_mounted() {
            return Err(WsError::Mounted {
                id: self.shared.id.clone(),
            });
        }
        let store = self.st().store.clone();
        store
            .unpin(&format!("workspace:{}", self.shared.id))
            .map_err(WsError::store("unpin the base"))?;
        let dir = self.shared.dir.clone();
        drop(self);
        std::fs::remove_dir_all(&dir).map_err(WsError::io("remove the workspace directory", &dir))
    }

    fn claim_mount(&self) -> Result<()> {
        if self.shared.mounted.swap(true, Ordering::SeqCst) {
            return Err(WsError::Mounted {
                id: self.shared.id.clone(),
            });
        }
        Ok(())
    }

    fn fs(
        &self,
        opts: &MountOptions,
        serving: &Arc<()>,
        notifier: &Arc<OnceLock<fuser::Notifier>>,
    ) -> WsFs {
        self.st().ids = opts.id_mapping;
        WsFs {
            shared: self.shared.clone(),
            want_passthrough: opts.passthrough,
            want_uring: false,
            notifier: notifier.clone(),
            _serving: serving.clone(),
        }
    }

    fn config(&self, opts: &MountOptions, acl: SessionACL) -> Config {
        let mut c = Config::default();
        c.mount_options = vec![
            MountOption::FSName(opts.fsname.clone()),
            MountOption::Subtype("strata".into()),
            MountOption::RW,
        ];
        if opts.effective_default_permissions() {
            c.mount_options.push(MountOption::DefaultPermissions);
        }
        c.acl = acl;
        c.n_threads = Some(opts.threads.max(1));
        c.clone_fd = opts.threads > 1;
        c
    }

    /// Mount at `mountpoint` (must be an existing empty directory outside
    /// the Store) and serve in background threads until the handle is
    /// unmounted or dropped. Needs root (or CAP_SYS_ADMIN) for mount(2);
    /// without it fuser mounts through fusermount3 (/dev/fuse reads, no
    /// passthrough), for `auto` too, and the handle unmounts through it.
    pub fn mount(&self, mountpoint: &Path, opts: &MountOptions) -> Result<MountHandle> {
        self.check_mountpoint(mountpoint)?;
        if crate::uring::mount::wanted(opts)? {
            match self.mount_uring(mountpoint, opts) {
                Ok(handle) => return Ok(handle),
                // A failed io_uring mount leaves nothing mounted and the
                // Workspace unclaimed (mount_uring undoes its steps), so
                // `auto` goes on with fuser's own mount: e.g. a caller
                // without CAP_SYS_ADMIN, whose mount(2) is refused with
                // EPERM where fuser mounts through fusermount3.
                Err(e) if opts.transport == crate::Transport::IoUringIfAvailable => {
                    tracing::info!("FUSE transport: /dev/fuse reads (the io_uring mount: {e})");
                }
                Err(e) => return Err(e),
            }
        }
        self.claim_mount()?;
        let cfg = self.config(opts, session_acl(opts));
        let serving = Arc::new(());
        let notifier = Arc::new(OnceLock::new());
        let session = Session::new(self.fs(opts, &serving, &notifier), mountpoint, &cfg)
            .and_then(|s| {
                let _ = notifier.set(s.notifier());
                s.spawn()
            })
            .map_err(|e| {
                self.shared.mounted.store(false, Ordering::SeqCst);
                WsError::Mountpoint {
                    path: mountpoint.to_path_buf(),
                    reason: format!("mount failed: {e}"),
                }
            })?;
        Ok(MountHandle {
            serving,
            session: Some(session),
            mountpoint: Some(mountpoint.to_path_buf()),
            shared: self.shared.clone(),
            ring: None,
        })
    }

    /// Mount served over io_uring (crate::uring): FUSE_INIT, FORGET and
    /// INTERRUPT through fuser's session on the same fd, every other
    /// request through the ring threads (which register passthrough
    /// backings themselves, uring/backing.rs).
    fn mount_uring(&self, mountpoint: &Path, opts: &MountOptions) -> Result<MountHandle> {
        self.claim_mount()?;
        let unclaim = |e| {
            self.shared.mounted.store(false, Ordering::SeqCst);
            e
        };
        let fd = crate::uring::mount::mount(mountpoint, opts).map_err(unclaim)?;
        let cfg = self.config(opts, session_acl(opts));
        let serving = Arc::new(());
        let notifier = Arc::new(OnceLock::new());
        let (session_fs, ring_fs) = (
            self.fs(opts, &serving, &notifier),
            self.fs(opts, &serving, &notifier),
        );
        let session_fs = WsFs {
            want_uring: true,
            ..session_fs
        };
        let umount = || {
            let _ = rustix::mount::unmount(mountpoint, rustix::mount::UnmountFlags::DETACH);
        };
        let session_fd = fd.try_clone().map_err(|e| {
            umount();
            unclaim(WsError::io(
                "dup the /dev/fuse fd",
                mountpoint.to_path_buf(),
            )(e))
        })?;
        let session = Session::from_fd(session_fs, session_fd, session_acl(opts), cfg)
            .and_then(|s| {
                let _ = notifier.set(s.notifier());
                s.spawn()
            })
            .map_err(|e| {
                umount();
                unclaim(WsError::Mountpoint {
                    path: mountpoint.to_path_buf(),
                    reason: format!("serve the FUSE fd: {e}"),
                })
            })?;
        let mut handle = MountHandle {
            serving,
            session: Some(session),
            mountpoint: Some(mountpoint.to_path_buf()),
            shared: self.shared.clone(),
            ring: None,
        };
        match crate::uring::mount::start(ring_fs, &fd, mountpoint, opts.allow_other) {
            Ok(r) => {
                tracing::debug!("FUSE transport: io_uring at {}", mountpoint.display());
                handle.ring = Some(r);
                Ok(handle)
            }
            // A refused registration turned io_uring off for this
            // connection (fuse_uring_cmd()): requests go on over
            // /dev/fuse, which is what `auto` asks for.
            Err(e) if opts.transport == crate::Transport::IoUringIfAvailable => {
                tracing::warn!("FUSE transport: /dev/fuse reads ({e})");
                Ok(handle)
            }
            Err(e) => {
                drop(handle);
                Err(e)
            }
        }
    }

    /// Serve on an already-mounted /dev/fuse `fd` (rootless mode: a helper
    /// mounted it inside a user namespace and passed it over SCM_RIGHTS).
    /// Use `IdMapping::SingleUser` there; `default_permissions` stays off.
    /// The session ends when the mount disappears (the namespace's last
    /// process exits); [`MountHandle::join`] waits for that.
    pub fn serve_fd(&self, fd: OwnedFd, opts: &MountOptions) -> Result<MountHandle> {
        self.claim_mount()?;
        // Requests carry ids of the mount's namespace (0), not our euid:
        // fuser's owner filter would refuse them all, so accept every uid;
        // the namespace itself confines who can reach the mount.
        let cfg = self.config(opts, SessionACL::All);
        let serving = Arc::new(());
        let notifier = Arc::new(OnceLock::new());
        let session =
            Session::from_fd(self.fs(opts, &serving, &notifier), fd, SessionACL::All, cfg)
                .and_then(|s| {
                    let _ = notifier.set(s.notifier());
                    s.spawn()
                })
                .map_err(|e| {
                    self.shared.mounted.store(false, Ordering::SeqCst);
                    WsError::Invalid(format!("serve the FUSE fd: {e}"))
                })?;
        Ok(MountHandle {
            serving,
            session: Some(session),
            mountpoint: None,
            shared: self.shared.clone(),
            ring: None,
        })
    }

    fn check_mountpoint(&self, mp: &Path) -> Result<()> {
        let bad = |reason: String| WsError::Mountpoint {
            path: mp.to_path_buf(),
            reason,
        };
        let meta = std::fs::metadata(mp).map_err(|e| bad(format!("{e}")))?;
        if !meta.is_dir() {
            return Err(bad("not a directory".into()));
        }
        let mut rd = std::fs::read_dir(mp).map_err(|e| bad(format!("{e}")))?;
        if rd.next().is_some() {
            return Err(bad("directory is not empty".into()));
        }
        let canon = mp.canonicalize().map_err(|e| bad(format!("{e}")))?;
        let store_dir = self.st().store.dir().to_path_buf();
        for (what, dir) in [
            ("the Store", store_dir),
            ("the workspace scratch directory", self.shared.dir.clone()),
        ] {
            if let Ok(d) = dir.canonicalize() {
                if canon.starts_with(&d) {
                    return Err(bad(format!("it is inside {what} ({})", d.display())));
                }
            }
        }
        Ok(())
    }
}

fn new_state(
    store: &Store,
    id: &str,
    branch: BranchRef,
    base: ObjectId,
    dir: &Path,
    opts: &WorkspaceOptions,
    journal: Journal,
) -> Result<State> {
    let cache_dir = opts
        .cache_dir
        .clone()
        .unwrap_or_else(|| dir.parent().unwrap_or(dir).join("cache"));
    Ok(State {
        store: store.clone(),
        id: id.to_string(),
        branch,
        base,
        nodes: HashMap::new(),
        next_ino: ROOT + 1,
        groups: HashMap::new(),
        upper_dir: dir.join(UPPER),
        pool: crate::pool::FreePool::open(dir)
            .map_err(WsError::io("open the pool of free upper files", dir))?,
        cache: ContentCache::new(cache_dir)?,
        journal,
        handles: HashMap::new(),
        next_fh: 1,
        ids: Default::default(),
        passthrough: false,
        killpriv: false,
        pending_groups: Default::default(),
        scanned_groups: Default::default(),
    })
}

/// Which users fuser's session serves: every user with `allow_other`,
/// else only the one who mounted.
fn session_acl(opts: &MountOptions) -> SessionACL {
    if opts.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    }
}
