//! A Workspace's scratch holds changed files and, in the content cache,
//! the base's files: its directories are created 0700 and its files 0600
//! whatever the umask, so other users on the host read none of it.

mod common;

use common::*;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .mode()
        & 0o7777
}

#[test]
fn scratch_directories_are_0700_and_files_0600() {
    let fx = fixture();
    let old = rustix::process::umask(rustix::fs::Mode::empty());
    let ws = fx.create();
    rustix::process::umask(old);
    let h = fx.mount(&ws, false);
    // A changed file (an upper file) and a read of a base file (the cache).
    std::fs::write(fx.p("new.txt"), b"private\n").unwrap();
    assert_eq!(std::fs::read(fx.p("dir/a.txt")).unwrap(), b"file a\n");
    for d in [
        fx.scratch.clone(),
        ws.dir().to_path_buf(),
        ws.dir().join("upper"),
        fx.scratch.join("cache"),
    ] {
        assert_eq!(mode(&d), 0o700, "{}", d.display());
    }
    for f in ["journal.log", "lock"] {
        assert_eq!(mode(&ws.dir().join(f)), 0o600, "{f}");
    }
    let uppers: Vec<_> = std::fs::read_dir(ws.dir().join("upper"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(!uppers.is_empty(), "the new file has an upper file");
    for u in uppers {
        assert_eq!(mode(&u), 0o600, "{}", u.display());
    }
    drop(h);
}
