//! File operations on a live Workspace (`Workspace::read_file`,
//! `write_file`, `list`, `stat`, `remove`, `rename`, `mkdir`) in a real
//! Sandbox: attacks by a command that plants symlinks and FIFOs for the
//! root daemon to trip on, the owner of what the API creates as a command
//! sees it, and a round trip committed and read back from the Store.
//!
//! Its own `main` (harness = false): the binary is re-executed as the
//! Sandbox init, the daemon and the exec helper.

mod common;

use common::sh;

use strata_sdk::{Error, FileKind, Sandbox, Store, Workspace};

fn main() {
    strata_sdk::maybe_run_internal();
    strata_testkit::cases::require_root();
    let rt = tokio::runtime::Runtime::new().expect("tokio");
    // Under /var/tmp: the Sandbox's view of the host has no /tmp of the
    // host, and the outside file must be one the daemon (root) could reach.
    let tmp = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let mut cases = common::Cases::new(&rt, tmp.path(), "files-test-run");
    cases.run(
        "planted_symlinks_never_reach_outside",
        planted_symlinks_never_reach_outside,
    );
    cases.run("round_trip_owner_and_commit", round_trip_owner_and_commit);
    cases.finish();
}

async fn sandbox(dir: &std::path::Path, name: &str) -> (Store, Sandbox, Workspace) {
    common::sandbox(
        dir,
        name,
        "files-test-run",
        &[
            ("hello.txt", b"hello\n".as_slice()),
            ("dir/a.txt", b"a\n".as_slice()),
        ],
    )
    .await
}

fn invalid(r: Result<impl std::fmt::Debug, Error>, what: &str) -> String {
    match r {
        Err(e @ Error::InvalidInput { .. }) => e.to_string(),
        other => panic!("{what}: expected InvalidInput, got {other:?}"),
    }
}

/// A command (uid 1500) plants symlinks to the host's /etc/shadow, to /,
/// to a directory outside holding a file, and a FIFO; the API (root in
/// the Sandbox) reads, writes and removes through them. Nothing outside
/// is read or changed, and the daemon still answers.
async fn planted_symlinks_never_reach_outside(dir: &std::path::Path) {
    let (_store, sb, ws) = sandbox(dir, "attack").await;
    // A file outside the Workspace that the daemon (root) could reach by
    // path, and its known bytes.
    let outside = dir.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let victim = outside.join("victim.txt");
    std::fs::write(&victim, b"host secret\n").unwrap();
    let shadow = std::fs::read("/etc/shadow").unwrap_or_default();
    sh(
        &ws,
        &format!(
            "ln -s /etc/shadow x && ln -s / root && ln -s {o} out && ln -s {v} w \
             && ln -s ../../../../../../../..{v} rel && mkfifo fifo && ls -la",
            o = outside.display(),
            v = victim.display()
        ),
    )
    .await;

    // Reads through absolute and climbing symlinks: refused (EXDEV).
    let victim_rel = victim.display().to_string();
    for p in [
        "x",
        "root/etc/shadow",
        "root/etc/passwd",
        "out/victim.txt",
        "w",
        "rel",
        &format!("root{victim_rel}"),
    ] {
        let r = ws.read_file(p).await;
        if let Ok(bytes) = &r {
            assert!(
                !(bytes.starts_with(b"host secret") || (!shadow.is_empty() && *bytes == shadow)),
                "{p}: the host file's bytes came back"
            );
        }
        let msg = invalid(r, p);
        assert!(msg.contains("outside the Workspace"), "{p}: {msg}");
        assert!(!msg.contains("host secret"), "{msg}");
    }
    // `..` is refused before anything is opened.
    for p in ["../../x", "dir/../../x", "..", ""] {
        let msg = invalid(ws.read_file(p).await, p);
        assert!(msg.contains("path"), "{p}: {msg}");
    }
    // A FIFO is refused at once (opened non-blocking), never waited on.
    let msg = invalid(ws.read_file("fifo").await, "fifo");
    assert!(msg.contains("not a regular file"), "{msg}");

    // Writes through them: into a directory symlink leading out, refused;
    // onto a symlink to an outside file, the symlink is replaced.
    let msg = invalid(
        ws.write_file("out/victim.txt", &b"pwned"[..]).await,
        "write out/victim.txt",
    );
    assert!(msg.contains("outside the Workspace"), "{msg}");
    let msg = invalid(
        ws.write_file("out/new.txt", &b"pwned"[..]).await,
        "write out/new.txt",
    );
    assert!(msg.contains("outside the Workspace"), "{msg}");
    let e = ws
        .write_file("w", &b"replaced\n"[..])
        .await
        .expect("write w");
    assert_eq!(e.kind, FileKind::File);
    assert_eq!(ws.read_file("w").await.unwrap(), b"replaced\n");
    assert_eq!(
        sh(&ws, "cat w; test -L w || echo not-a-link").await,
        "replaced\nnot-a-link\n"
    );
    // mkdir and rename into the outside, refused.
    invalid(ws.mkdir_all("out/sub").await, "mkdir out/sub");
    invalid(ws.rename("hello.txt", "out/moved").await, "rename to out/");
    invalid(
        ws.rename("out/victim.txt", "stolen").await,
        "rename from out/",
    );
    // Removing a symlink removes the symlink, not its target.
    ws.remove("rel", false).await.expect("remove rel");
    ws.remove("out", true)
        .await
        .expect("remove out (a symlink)");
    assert!(matches!(ws.stat("out").await, Err(Error::NotFound { .. })));
    // The outside is as it was.
    assert_eq!(std::fs::read(&victim).unwrap(), b"host secret\n");
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        1,
        "a file appeared outside"
    );
    // stat and list describe a symlink, never follow it.
    let x = ws.stat("x").await.expect("stat x");
    assert_eq!(x.kind, FileKind::Symlink);
    assert_eq!(x.target.as_deref(), Some("/etc/shadow"));
    let names: Vec<String> = ws
        .list("/")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(names.contains(&"x".to_string()), "{names:?}");
    invalid(ws.list("root/etc").await, "list root/etc");
    // The daemon still answers, the Workspace still works.
    assert_eq!(ws.read_file("hello.txt").await.unwrap(), b"hello\n");
    ws.unmount(true).await.unwrap();
    sb.close_discard().await.unwrap();
}

/// Write, read (whole and a range), list, stat, mkdir, rename, remove;
/// what the API made belongs to 1500:1500 as a command sees it; commit
/// and read the Store back.
async fn round_trip_owner_and_commit(dir: &std::path::Path) {
    let (store, sb, ws) = sandbox(dir, "trip").await;
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let e = ws
        .write_file("deep/er/big.bin", big.clone())
        .await
        .expect("write big");
    assert_eq!(
        (e.kind, e.size, e.mode, e.uid, e.gid),
        (FileKind::File, 3_000_000, 0o644, 1500, 1500)
    );
    assert_eq!(ws.read_file("deep/er/big.bin").await.unwrap(), big);
    assert_eq!(
        ws.read_range("deep/er/big.bin", 1_000_000, 10)
            .await
            .unwrap(),
        &big[1_000_000..1_000_010]
    );
    assert_eq!(
        ws.read_range("deep/er/big.bin", 2_999_995, 100)
            .await
            .unwrap(),
        &big[2_999_995..]
    );
    invalid(
        ws.read_range("deep/er/big.bin", 3_000_000, 1).await,
        "range past the end",
    );
    // Streamed: the same bytes in order, counted; a missing file is
    // NotFound before any byte; a writer that fails ends the read with
    // an Io error naming the file, and the daemon still answers.
    let mut streamed = Vec::new();
    let n = ws
        .read_file_to("deep/er/big.bin", &mut streamed)
        .await
        .expect("streamed read");
    assert_eq!((n, streamed == big), (3_000_000, true));
    let mut untouched = Vec::new();
    match ws.read_file_to("deep/er/nope.bin", &mut untouched).await {
        Err(strata_sdk::Error::NotFound { .. }) => assert!(untouched.is_empty()),
        other => panic!("a missing file streamed: {other:?}"),
    }
    struct Full(usize);
    impl std::io::Write for Full {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if self.0 + b.len() > 100_000 {
                return Err(std::io::Error::other("disk full"));
            }
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    match ws.read_file_to("deep/er/big.bin", &mut Full(0)).await {
        Err(e @ strata_sdk::Error::Io { .. }) => {
            assert!(e.to_string().contains("deep/er/big.bin"), "{e}")
        }
        other => panic!("a failing writer: {other:?}"),
    }
    assert_eq!(ws.stat("deep/er/big.bin").await.unwrap().size, 3_000_000);
    ws.write_file_mode("run.sh", &b"#!/bin/sh\necho ran\n"[..], Some(0o755))
        .await
        .unwrap();
    ws.mkdir("made").await.unwrap();
    invalid(ws.mkdir("made").await, "mkdir of an existing directory");
    ws.mkdir_all("made/a/b").await.unwrap();
    // A command sees the owner and mode the API gave.
    assert_eq!(
        sh(&ws, "stat -c '%u:%g %a %n' deep deep/er/big.bin run.sh made/a/b && ./run.sh").await,
        "1500:1500 755 deep\n1500:1500 644 deep/er/big.bin\n1500:1500 755 run.sh\n1500:1500 755 made/a/b\nran\n"
    );
    // Replace keeps the mode; a command's file is readable by the API.
    ws.write_file("run.sh", &b"#!/bin/sh\necho ran again\n"[..])
        .await
        .unwrap();
    assert_eq!(ws.stat("run.sh").await.unwrap().mode, 0o755);
    sh(&ws, "echo from-command > cmd.txt").await;
    assert_eq!(ws.read_file("cmd.txt").await.unwrap(), b"from-command\n");
    // rename, list, remove.
    let e = ws.rename("hello.txt", "made/hello.txt").await.unwrap();
    assert_eq!(e.name, "hello.txt");
    assert!(matches!(
        ws.stat("hello.txt").await,
        Err(Error::NotFound { .. })
    ));
    let names: Vec<(String, FileKind)> = ws
        .list("made")
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.kind))
        .collect();
    assert_eq!(
        names,
        vec![
            ("a".into(), FileKind::Dir),
            ("hello.txt".into(), FileKind::File)
        ]
    );
    invalid(
        ws.remove("made", false).await,
        "remove a non-empty directory",
    );
    invalid(ws.remove("/", true).await, "remove the root");
    invalid(ws.read_file("made").await, "read a directory");
    ws.remove("made/a", true).await.unwrap();
    ws.remove("dir/a.txt", false).await.unwrap();
    ws.remove("dir", false).await.unwrap();
    assert!(matches!(
        ws.read_file("nope").await,
        Err(Error::NotFound { .. })
    ));
    // No temporary file is left behind by a write.
    let left = sh(&ws, "find . -name '.strata-put-*'").await;
    assert_eq!(left, "");

    let c = ws.commit("files over the API").await.unwrap();
    assert!(c.committed());
    assert_eq!(
        store.read_file("p/main", "deep/er/big.bin").await.unwrap(),
        big
    );
    assert_eq!(
        store.read_file("p/main", "run.sh").await.unwrap(),
        b"#!/bin/sh\necho ran again\n"
    );
    assert_eq!(
        store.read_file("p/main", "made/hello.txt").await.unwrap(),
        b"hello\n"
    );
    assert!(store.read_file("p/main", "hello.txt").await.is_err());
    assert!(store.read_file("p/main", "made/a/b").await.is_err());
    assert!(store.read_file("p/main", "dir/a.txt").await.is_err());
    // Owner and mode as the Store recorded them.
    let raw = strata_store::Store::open(&store.dir(), &Default::default()).unwrap();
    let head = raw
        .branch_head(&strata_store::BranchRef::parse("p/main").unwrap())
        .unwrap();
    let e = raw.read_path(head, b"run.sh").unwrap().expect("run.sh");
    assert_eq!((e.uid, e.gid, e.mode & 0o777), (1500, 1500, 0o755));
    ws.unmount(false).await.unwrap();
    sb.close().await.unwrap();
}
