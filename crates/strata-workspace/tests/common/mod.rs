//! Shared helpers of the mount tests. They need root and /dev/fuse (CI runs
//! as root with /dev/fuse on this machine type); without them a test fails
//! with the reason instead of skipping.
#![allow(dead_code)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use strata_store::{BranchRef, EntryKind, NoProgress, ObjectId, Store, StoreOptions, TreeEntry};
use strata_workspace::{MountHandle, MountOptions, Workspace, WorkspaceOptions};

pub struct Fixture {
    pub tmp: tempfile::TempDir,
    pub store: Store,
    pub branch: BranchRef,
    pub scratch: PathBuf,
    pub mnt: PathBuf,
}

pub fn require_fuse() {
    assert!(
        rustix::process::geteuid().is_root(),
        "these tests mount FUSE filesystems and must run as root (CI does)"
    );
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: load the fuse module (modprobe fuse)"
    );
}

/// A Store with project `p` whose `main` is a snapshot of a small tree.
pub fn fixture() -> Fixture {
    require_fuse();
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("src");
    std::fs::create_dir_all(src.join("dir/sub")).unwrap();
    std::fs::write(src.join("hello.txt"), b"hello world\n").unwrap();
    std::fs::write(src.join("dir/a.txt"), b"file a\n").unwrap();
    std::fs::write(src.join("dir/sub/deep.txt"), b"deep\n").unwrap();
    std::fs::write(src.join("empty"), b"").unwrap();
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(src.join("big.bin"), &big).unwrap();
    std::os::unix::fs::symlink("hello.txt", src.join("link")).unwrap();
    std::fs::write(src.join("hard1"), b"linked\n").unwrap();
    std::fs::hard_link(src.join("hard1"), src.join("hard2")).unwrap();
    std::fs::create_dir_all(src.join("links/deep")).unwrap();
    std::fs::hard_link(src.join("hard1"), src.join("links/deep/hard3")).unwrap();
    std::fs::create_dir(src.join("todelete")).unwrap();
    std::fs::write(src.join("todelete/x"), b"x").unwrap();
    let store_dir = tmp.path().join("store");
    let store = Store::create(&store_dir, &StoreOptions::default()).expect("create store");
    store
        .create_project_from("p", &src, "base", &NoProgress)
        .expect("snapshot");
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    Fixture {
        scratch: tmp.path().join("scratch"),
        store,
        branch: BranchRef::parse("p/main").unwrap(),
        mnt,
        tmp,
    }
}

impl Fixture {
    pub fn create(&self) -> Workspace {
        Workspace::create(
            &self.store,
            "p/main",
            &self.scratch,
            &WorkspaceOptions::default(),
        )
        .expect("create workspace")
    }

    pub fn mount(&self, ws: &Workspace, passthrough: bool) -> MountHandle {
        let opts = MountOptions {
            passthrough,
            ..Default::default()
        };
        ws.mount(&self.mnt, &opts).expect("mount")
    }

    pub fn p(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    pub fn head(&self) -> ObjectId {
        self.store.branch_head(&self.branch).unwrap()
    }

    /// The entry at `path` in the branch head.
    pub fn entry(&self, path: &[u8]) -> Option<TreeEntry> {
        self.store.read_path(self.head(), path).expect("read_path")
    }

    /// The bytes of the file at `path` in the branch head.
    pub fn bytes(&self, path: &[u8]) -> Vec<u8> {
        let e = self
            .entry(path)
            .unwrap_or_else(|| panic!("{} missing", String::from_utf8_lossy(path)));
        match e.kind {
            EntryKind::File(c) => self
                .store
                .read_file_range(&c, 0, c.size as usize)
                .expect("read_file_range"),
            k => panic!("{} is a {}", String::from_utf8_lossy(path), k.type_name()),
        }
    }
}

pub fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

pub fn setxattr(p: &Path, name: &str, value: &[u8]) -> i32 {
    let (p, n) = (cpath(p), CString::new(name).unwrap());
    // SAFETY: valid NUL-terminated strings and a live buffer of value.len().
    unsafe {
        libc::setxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    }
}

pub fn getxattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    let (p, n) = (cpath(p), CString::new(name).unwrap());
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid strings; buf is writable for buf.len() bytes.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        return None;
    }
    buf.truncate(r as usize);
    Some(buf)
}

pub fn renameat2(a: &Path, b: &Path, flags: u32) -> i32 {
    let (a, b) = (cpath(a), cpath(b));
    // SAFETY: valid NUL-terminated paths; AT_FDCWD is always valid.
    unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            flags,
        )
    }
}

/// The body of a crash test's child server (the test binary re-executed
/// with `env` set to what [`spawn_child_server`] passed): open the
/// Workspace, mount it, say "ready" and serve until killed. Returns at
/// once in an ordinary test run (`env` unset).
pub fn serve_child_if_asked(env: &str) {
    let Ok(spec) = std::env::var(env) else {
        return;
    };
    let parts: Vec<&str> = spec.split('\n').collect();
    let store = Store::open(Path::new(parts[0]), &StoreOptions::default()).unwrap();
    let ws = Workspace::open(
        &store,
        parts[2],
        Path::new(parts[1]),
        &WorkspaceOptions::default(),
    )
    .unwrap();
    let _h = ws
        .mount(Path::new(parts[3]), &MountOptions::default())
        .unwrap();
    println!("ready");
    loop {
        std::thread::sleep(std::time::Duration::from_secs(60));
    }
}

/// Start this test binary again as a server of Workspace `id` of `fx`
/// (its test `child_test` calls [`serve_child_if_asked`] with `env`), and
/// wait until its mount appears; a process to SIGKILL for crash tests.
pub fn spawn_child_server(
    fx: &Fixture,
    id: &str,
    child_test: &str,
    env: &str,
    timeout: std::time::Duration,
) -> std::process::Child {
    let spec = [
        fx.store.dir().to_str().unwrap(),
        fx.scratch.to_str().unwrap(),
        id,
        fx.mnt.to_str().unwrap(),
    ]
    .join("\n");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", child_test, "--nocapture", "--test-threads=1"])
        .env(env, spec)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + timeout;
    let mnt = fx.mnt.to_str().unwrap().to_string();
    loop {
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
        if mounts
            .lines()
            .any(|l| l.split(' ').nth(1) == Some(mnt.as_str()))
        {
            return child;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the child server exited before mounting"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "the child server did not mount within {} s",
            timeout.as_secs()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
