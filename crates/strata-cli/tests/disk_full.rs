//! A disk that fills up mid-import: a clear error, the branch where it was,
//! and a Store that still passes fsck. Needs root (to mount a small tmpfs);
//! fails with the reason otherwise.

mod common;

use common::{random_bytes, s, write, Env};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A size-limited tmpfs, unmounted on drop (also when the test panics).
struct SmallFs(PathBuf);

impl SmallFs {
    fn mount(dir: &Path, size: &str) -> Option<SmallFs> {
        std::fs::create_dir_all(dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| SmallFs(dir.to_path_buf()))
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_mid_import_is_a_clear_error_and_loses_nothing() {
    // Declared after `env`, so it is unmounted before the temp dir goes.
    let mut env = Env::bare();
    let Some(_fs) = SmallFs::mount(&env.path("small"), "3m") else {
        panic!("cannot mount a 3 MiB tmpfs for the full disk: run this test as root");
    };
    env.store = env.path("small/store");
    env.json(&["init"]);
    let src = env.path("src");
    write(&src, "a.txt", b"before\n");
    let old = env.json(&["project", "create", "p", "--from", s(&src)])["commit"].clone();

    write(&src, "big.bin", &random_bytes(11, 8 << 20));
    let e = env.fails(&["snapshot", "p/main", s(&src)], 1);
    assert!(e.contains("full"), "the error says the disk is full: {e}");

    assert_eq!(env.json(&["fsck"])["ok"], true);
    assert_eq!(env.json(&["branch", "list", "p"])[0]["head"], old);
    assert_eq!(env.ok(&["cat", "p/main", "a.txt"]), b"before\n");
    contains_none(&env, "big.bin");

    // With the big file gone the Store takes snapshots again.
    std::fs::remove_file(src.join("big.bin")).unwrap();
    write(&src, "a.txt", b"after\n");
    env.json(&["snapshot", "p/main", s(&src)]);
    assert_eq!(env.ok(&["cat", "p/main", "a.txt"]), b"after\n");
}

fn contains_none(env: &Env, name: &str) {
    let ls = env.json(&["ls", "p/main"]);
    assert!(
        ls.as_array().unwrap().iter().all(|e| e["name"] != name),
        "{name} must not be in the old head: {ls}"
    );
}
