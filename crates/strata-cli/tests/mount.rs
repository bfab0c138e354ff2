//! `strata mount` and `strata ws ...` with real FUSE mounts (root; CI runs
//! as root with /dev/fuse): the JSON shapes, status kinds, commit read back
//! from the Store, unmount refusing uncommitted work, bad mount points, and
//! recovery after the serving process is killed.

mod common;

use common::{write, Env, BIN};
use serde_json::Value;
use std::process::Command;

struct Host<'a> {
    env: &'a Env,
}

impl Host<'_> {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.env_remove("STRATA_STORE")
            .env("XDG_RUNTIME_DIR", self.env.path("run"))
            .env("XDG_STATE_HOME", self.env.path("state"))
            .arg("--store")
            .arg(&self.env.store)
            .args(args);
        c
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let out = self.cmd(&a).output().unwrap();
        assert!(
            out.status.success(),
            "strata {a:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn fails(&self, args: &[&str]) -> String {
        let out = self.cmd(args).output().unwrap();
        assert!(!out.status.success(), "strata {args:?} succeeded");
        assert_eq!(out.status.code(), Some(1), "strata {args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}

fn mounted(path: &std::path::Path) -> bool {
    let p = path.canonicalize().unwrap();
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(1) == Some(p.to_str().unwrap()))
}

#[test]
fn mount_status_commit_unmount_and_recover() {
    assert!(
        rustix::process::geteuid().is_root(),
        "strata mount needs root (mount(2), /dev/fuse); CI runs as root"
    );
    let env = Env::new();
    let h = Host { env: &env };
    let src = env.path("src");
    write(&src, "keep.txt", b"keep\n");
    write(&src, "gone.txt", b"gone\n");
    env.ok(&["project", "create", "p", "--from", src.to_str().unwrap()]);
    let mp = env.path("mp");
    std::fs::create_dir(&mp).unwrap();

    // Bad mount points are refused before anything starts.
    let e = h.fails(&["mount", "p/main", env.path("missing").to_str().unwrap()]);
    assert!(e.contains("missing"), "{e}");
    let full = env.path("full");
    write(&full, "x", b"x");
    let e = h.fails(&["mount", "p/main", full.to_str().unwrap()]);
    assert!(e.contains("not empty"), "{e}");
    let inside = env.store.join("mp");
    std::fs::create_dir(&inside).unwrap();
    let e = h.fails(&["mount", "p/main", inside.to_str().unwrap()]);
    assert!(e.contains("inside the Store"), "{e}");
    std::fs::remove_dir(&inside).unwrap();
    let e = h.fails(&["mount", "p/nope", mp.to_str().unwrap()]);
    assert!(e.contains("not found"), "{e}");

    let m = h.json(&["mount", "p/main", mp.to_str().unwrap()]);
    let ws = m["workspace"].as_str().unwrap().to_string();
    assert_eq!(
        m["mountpoint"].as_str().unwrap(),
        mp.canonicalize().unwrap().to_str().unwrap()
    );
    assert!(mounted(&mp));
    assert_eq!(std::fs::read(mp.join("keep.txt")).unwrap(), b"keep\n");
    std::fs::write(mp.join("new.txt"), b"new\n").unwrap();
    std::fs::remove_file(mp.join("gone.txt")).unwrap();
    std::fs::write(mp.join("keep.txt"), b"changed\n").unwrap();
    // The host's run and state directories are private (0700), down to
    // the Workspace's scratch directory that holds the changed files.
    for d in [
        env.path("run/strata"),
        env.path("state/strata"),
        env.path("state/strata/workspaces"),
        env.path(&format!("state/strata/workspaces/{ws}")),
    ] {
        let m = std::fs::metadata(&d).unwrap();
        let mode = std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777;
        assert_eq!(mode, 0o700, "{}", d.display());
    }

    let list = h.json(&["ws", "list"]);
    assert_eq!(list[0]["workspace"], ws.as_str());
    assert_eq!(list[0]["alive"], true);
    let st = h.json(&["ws", "status", &ws]);
    let mut kinds: Vec<(String, String)> = st["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap().to_string(),
                c["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        vec![
            ("gone.txt".into(), "deleted".into()),
            ("keep.txt".into(), "modified".into()),
            ("new.txt".into(), "added".into())
        ]
    );
    // Unmount refuses uncommitted work.
    let e = h.fails(&["ws", "unmount", &ws]);
    assert!(e.contains("--discard"), "{e}");
    assert!(mounted(&mp));

    let c = h.json(&["ws", "commit", &ws, "-m", "edit"]);
    assert_eq!(c["commit"].as_str().unwrap().len(), 64, "{c}");
    let again = h.json(&["ws", "commit", &ws, "-m", "again"]);
    assert_eq!(again["committed"], false, "{again}");
    assert_eq!(again["branch"], "p/main", "{again}");
    // Read the Store back, not the exit status.
    assert_eq!(env.ok(&["cat", "p/main", "new.txt"]), b"new\n");
    assert_eq!(env.ok(&["cat", "p/main", "keep.txt"]), b"changed\n");
    env.fails(&["cat", "p/main", "gone.txt"], 1);

    // The serving process dies with uncommitted work: commit says how to
    // recover, the offline commit publishes it, unmount cleans up.
    std::fs::write(mp.join("late.txt"), b"late\n").unwrap();
    let pid = h.json(&["ws", "list"])[0]["pid"].as_u64().unwrap();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::path::Path::new(&format!("/proc/{pid}/status")).exists()
        && std::fs::read_to_string(format!("/proc/{pid}/status"))
            .map(|s| !s.contains("State:\tZ"))
            .unwrap_or(false)
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    let e = h.fails(&["ws", "commit", &ws, "-m", "late"]);
    assert!(e.contains("--offline"), "{e}");
    let c = h.json(&["ws", "commit", &ws, "--offline", "-m", "late"]);
    assert_eq!(c["commit"].as_str().unwrap().len(), 64, "{c}");
    assert_eq!(env.ok(&["cat", "p/main", "late.txt"]), b"late\n");
    h.json(&["ws", "unmount", &ws, "--discard"]);
    assert!(!mounted(&mp), "the dead mount was not detached");
    // No host mount is left (Sandboxes on this machine may list theirs).
    let left = h.json(&["ws", "list"]);
    assert!(
        left.as_array()
            .unwrap()
            .iter()
            .all(|w| !w["sandbox"].is_null()),
        "{left}"
    );
    assert_eq!(env.json(&["fsck"])["ok"], true);
}
