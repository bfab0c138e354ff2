//! `strata run` as a real nonroot user: process lifetimes and failures
//! (missing binary, refused cwd, kills, Ctrl-C, /dev/fuse 0600). The
//! fixture is in `rootless/mod.rs`; data landing in the Store in `run.rs`.

mod common;
mod rootless;

use rootless::*;
use std::time::Duration;

#[test]
fn a_missing_binary_is_an_error_not_127() {
    let f = Fixture::new(0o666, base_tree);
    for prog in ["/nonexistent/prog", "no-such-program-strata-test"] {
        // A PATH the user may search (root's may hold dirs uid 1500 cannot
        // enter, which makes execvp report EACCES instead of ENOENT).
        let out = f
            .user(&["run", "p/main", "--", prog])
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(RUN_FAILED),
            "{prog}: {}",
            stderr(&out)
        );
        assert!(stderr(&out).contains("cannot start"), "{}", stderr(&out));
        assert!(stderr(&out).contains("No such file"), "{}", stderr(&out));
    }
    assert!(user_pids().is_empty(), "processes left: {:?}", user_pids());
    // A REF that is not there is strata's failure too.
    let out = f.user(&["run", "p/nosuch", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(RUN_FAILED), "{}", stderr(&out));
    assert!(stderr(&out).contains("strata: error:"), "{}", stderr(&out));
}

#[test]
fn a_cwd_inside_the_mountpoint_is_refused_before_anything_runs() {
    let f = Fixture::new(0o666, base_tree);
    let at = f.path("mnt");
    std::fs::create_dir_all(at.join("sub")).unwrap();
    chown_tree(&at);
    let marker = f.path("sync/ran");
    for cwd in [at.clone(), at.join("sub")] {
        let out = f
            .user(&["run", "p/main", "--at", s(&at), "--", "touch", s(&marker)])
            .current_dir(&cwd)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(RUN_FAILED), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("inside the mountpoint"),
            "{}",
            stderr(&out)
        );
        assert!(!marker.exists(), "the command ran");
    }
}

#[test]
fn killing_the_parent_leaves_no_mount_and_no_process() {
    let f = Fixture::new(0o666, base_tree);
    let scratch_before = user_scratch_dirs();
    let sync = f.path("sync");
    // The command also leaves a daemon behind: it must die too.
    let script = format!(
        r#"cd "$STRATA_ROOT"; (sleep 1000 &) ; echo x > new.txt; touch {0}/ready; exec sleep 1000"#,
        s(&sync)
    );
    let mut child = f
        .user(&["run", "p/main", "--commit", "--", "sh", "-c", &script])
        .spawn_output_later();
    wait_for("the command to be ready", Duration::from_secs(60), || {
        sync.join("ready").exists() || child.try_wait_done()
    });
    assert!(
        user_pids().len() >= 4,
        "expected strata, helper, init, sleeps: {:?}",
        user_pids()
    );
    child.kill9();
    wait_for(
        "every uid 1500 process to go",
        Duration::from_secs(10),
        || user_pids().is_empty(),
    );
    assert!(!host_mounts().contains("/strata-run-"));
    // Nothing was committed.
    let (store, head, _c) = f.read_back();
    assert!(store.read_path(head, b"new.txt").unwrap().is_none());
    // SIGKILL gave the parent no chance to remove its scratch directory;
    // the next run removes it (its run lock is free).
    let killed: Vec<_> = user_scratch_dirs()
        .difference(&scratch_before)
        .cloned()
        .collect();
    assert_eq!(
        killed.len(),
        1,
        "expected the killed run's scratch: {killed:?}"
    );
    let pins = |f: &Fixture| -> i64 {
        let (_s, _h, copy) = f.read_back();
        let db = rusqlite::Connection::open(copy.path().join("store/strata.db")).unwrap();
        db.query_row(
            "SELECT count(*) FROM pins WHERE holder LIKE 'workspace:%'",
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    assert_eq!(
        pins(&f),
        1,
        "the killed run's Workspace should still pin its base"
    );
    let out = f.user(&["run", "p/main", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert!(
        !killed[0].exists(),
        "the killed run's scratch was not swept"
    );
    // ...and its Workspace's pin on the base commit is released.
    assert_eq!(
        pins(&f),
        0,
        "the killed run's Workspace pin was not released"
    );
}

#[test]
fn killing_the_command_ends_the_run_with_128_plus_9() {
    let f = Fixture::new(0o666, base_tree);
    let sync = f.path("sync");
    let script = format!(r#"echo $$ > {0}/pid; exec sleep 1000"#, s(&sync));
    let mut child = f
        .user(&["run", "p/main", "--", "sh", "-c", &script])
        .spawn_output_later();
    wait_for("the command's pid", Duration::from_secs(60), || {
        std::fs::read_to_string(sync.join("pid")).is_ok_and(|s| s.ends_with('\n'))
            || child.try_wait_done()
    });
    // The pid is the one in the command's PID namespace: find the host pid
    // of that sleep through uid 1500's processes instead.
    let sleeper = user_pids()
        .into_iter()
        .find(|p| {
            std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.starts_with("sleep\0"))
        })
        .expect("the sleep process");
    kill9(sleeper);
    let out = child.finish();
    assert_eq!(out.status.code(), Some(137), "stderr: {}", stderr(&out));
    wait_for(
        "every uid 1500 process to go",
        Duration::from_secs(10),
        || user_pids().is_empty(),
    );
}

#[test]
fn a_dead_helper_or_init_is_an_error_never_an_exit_status() {
    // docs/design.md §4: a helper failure must surface as an error, never as
    // a plausible exit status (SIGKILL would otherwise read as 137).
    let f = Fixture::new(0o666, base_tree);
    let sync = f.path("sync");
    for (victim, want) in [(0, "rootless helper exited"), (1, "namespace init ended")] {
        let _ = std::fs::remove_file(sync.join("ready"));
        let script = format!(r#"touch {0}/ready; exec sleep 1000"#, s(&sync));
        let mut child = f
            .user(&["run", "p/main", "--commit", "--", "sh", "-c", &script])
            .spawn_output_later();
        wait_for("the command to be ready", Duration::from_secs(60), || {
            sync.join("ready").exists() || child.try_wait_done()
        });
        let (helper, init) = helper_and_init();
        kill9(if victim == 0 { helper } else { init });
        let out = child.finish();
        assert_eq!(out.status.code(), Some(RUN_FAILED), "{}", stderr(&out));
        assert!(stderr(&out).contains(want), "{}", stderr(&out));
        wait_for(
            "every uid 1500 process to go",
            Duration::from_secs(10),
            || user_pids().is_empty(),
        );
    }
    assert!(!host_mounts().contains("/strata-run-"));
}

#[test]
fn ctrl_c_goes_to_the_command_and_its_status_comes_back() {
    // The terminal sends SIGINT to the whole foreground process group:
    // strata and its helper ignore it (as system(3) does), the command
    // dies of it, and the run reports 128+2 with the mount torn down.
    let f = Fixture::new(0o666, base_tree);
    let sync = f.path("sync");
    let script = format!(r#"touch {0}/ready; exec sleep 1000"#, s(&sync));
    let mut child = f
        .user(&["run", "p/main", "--", "sh", "-c", &script])
        .spawn_output_later_in(Some(0));
    wait_for("the command to be ready", Duration::from_secs(60), || {
        sync.join("ready").exists() || child.try_wait_done()
    });
    let pgid = child.child.as_ref().unwrap().id() as libc::pid_t;
    // SAFETY: kill has no memory arguments; -pgid names the job's group.
    assert_eq!(unsafe { libc::kill(-pgid, libc::SIGINT) }, 0);
    let out = child.finish();
    assert_eq!(out.status.code(), Some(128 + 2), "stderr: {}", stderr(&out));
    wait_for(
        "every uid 1500 process to go",
        Duration::from_secs(10),
        || user_pids().is_empty(),
    );
}

#[test]
fn dev_fuse_mode_0600_gets_a_verdict_with_the_fix() {
    // docs/design.md §4: /dev/fuse is mode 0600 on these machines.
    let f = Fixture::new(0o600, base_tree);
    let out = f.run_sh(&["--commit"], "echo x > \"$STRATA_ROOT/new.txt\"");
    assert_eq!(out.status.code(), Some(RUN_FAILED), "{}", stderr(&out));
    let e = stderr(&out);
    assert!(e.contains("/dev/fuse is mode 0600"), "{e}");
    assert!(e.contains("chmod 0666 /dev/fuse"), "{e}");
    let (store, head, _c) = f.read_back();
    assert!(store.read_path(head, b"new.txt").unwrap().is_none());
}
