//! Options for creating and mounting Workspaces.

use std::path::PathBuf;

/// Options for [`crate::Workspace::create`] and [`crate::Workspace::open`].
#[derive(Clone, Debug, Default)]
pub struct WorkspaceOptions {
    /// Directory of the content cache (unchanged files materialized once,
    /// keyed by `FileContent::key()`, shared by all Workspaces of one Store).
    /// Default: `<scratch_root>/cache`. Put it on the same filesystem as the
    /// scratch directories.
    pub cache_dir: Option<PathBuf>,
    /// Use this Workspace ID instead of a random one (create only).
    pub id: Option<String>,
    /// Owner of the mount's root directory (create only; the root has no
    /// entry in a commit). Default: the effective uid/gid of the caller.
    /// A sandbox that runs commands as uid 1500 wants that uid here.
    pub root_owner: Option<(u32, u32)>,
    /// Permission bits of the root directory (create only). Default 0755.
    pub root_mode: Option<u32>,
}

/// How owners are translated between the Workspace and the FUSE wire.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IdMapping {
    /// uids/gids pass unchanged (a root daemon in the initial user namespace).
    #[default]
    Identity,
    /// Rootless mode: the mount lives in a user namespace that maps exactly
    /// one id (the invoking user as 0). Uids/gids on the FUSE wire are in the
    /// *mount's* namespace, so every owner is reported as 0 outbound (an
    /// unmapped id would render as the overflow id and make unlink/rename/link
    /// of existing files fail with EOVERFLOW and write-opens with EACCES), and
    /// 0 inbound means this user.
    SingleUser { uid: u32, gid: u32 },
}

impl IdMapping {
    /// Owner as stored -> owner as reported to the kernel.
    pub fn outbound(self, uid: u32, gid: u32) -> (u32, u32) {
        match self {
            IdMapping::Identity => (uid, gid),
            IdMapping::SingleUser { .. } => (0, 0),
        }
    }

    /// Owner as sent by the kernel -> owner as stored.
    pub fn inbound_uid(self, uid: u32) -> u32 {
        match self {
            IdMapping::SingleUser { uid: u, .. } if uid == 0 => u,
            _ => uid,
        }
    }

    pub fn inbound_gid(self, gid: u32) -> u32 {
        match self {
            IdMapping::SingleUser { gid: g, .. } if gid == 0 => g,
            _ => gid,
        }
    }
}

/// Options for [`crate::Workspace::mount`] and [`crate::Workspace::serve_fd`].
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// Mount with `allow_other` so that other users (e.g. the sandboxed
    /// command's uid) can use the mount.
    pub allow_other: bool,
    /// `default_permissions` (kernel permission checks). `None` = on when the
    /// daemon is root and `id_mapping` is `Identity`; must stay off in rootless
    /// mode, where owners render as nobody inside the namespace.
    pub default_permissions: Option<bool>,
    /// Use FUSE passthrough (`open_backing`, kernel >= 6.9, needs
    /// CAP_SYS_ADMIN) when the kernel offers it; falls back silently.
    pub passthrough: bool,
    /// Owner translation, see [`IdMapping`].
    pub id_mapping: IdMapping,
    /// FUSE worker threads.
    pub threads: usize,
    /// Source name shown in /proc/self/mounts.
    pub fsname: String,
    /// How requests travel: /dev/fuse reads (fuser's session threads) or
    /// FUSE over io_uring (crate::uring). Default: from the
    /// `STRATA_FUSE_TRANSPORT` environment variable
    /// ([`crate::Transport::from_env`]), else `auto`: io_uring where the
    /// kernel offers it and the mount succeeds, /dev/fuse otherwise.
    pub transport: crate::Transport,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            allow_other: false,
            default_permissions: None,
            passthrough: true,
            id_mapping: IdMapping::Identity,
            threads: 4,
            fsname: "strata".to_string(),
            transport: crate::Transport::from_env(),
        }
    }
}

impl MountOptions {
    pub(crate) fn effective_default_permissions(&self) -> bool {
        self.default_permissions.unwrap_or_else(|| {
            rustix::process::geteuid().is_root() && self.id_mapping == IdMapping::Identity
        })
    }
}
