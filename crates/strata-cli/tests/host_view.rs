//! The command's view of the host in a default native Sandbox, attacked
//! from inside (`strata exec`, uid 1500), through the real binary (root
//! with /dev/fuse; CI runs as root): host data under /home, /srv, /opt,
//! /var/lib and another Store are out of sight, the system directories and
//! /etc are there without what is not world-readable, `--expose` shows
//! exactly the exposed path (read-only, or writable with :rw), and /proc
//! lists no process of another uid. docs/security.md has a row per attack.

mod common;

use common::canary::Canaries;
use common::sb::{text, Rm, Sb};
use std::os::unix::fs::{MetadataExt, PermissionsExt};

#[test]
fn host_data_is_out_of_sight_and_system_files_are_there() {
    let canaries = Canaries::plant("view");
    let sb = Sb::with_project(&[("a.txt", b"a\n")]);
    let id = sb.create(&[]);
    let _rm = Rm(&sb, id.clone());
    let ws = sb.mount(&id, "p/main");
    // Positive control: the host's /etc/shadow has content to leak.
    let shadow = std::fs::read("/etc/shadow").expect("read the host's /etc/shadow");
    assert!(!shadow.is_empty(), "the host's /etc/shadow is empty");
    let script = format!(
        "{reads}\
         echo ROOT: $(ls -A /)\n\
         /usr/bin/env true && echo ENV-RAN\n\
         head -n 1 /etc/passwd\n\
         echo SHADOW-BYTES: $(wc -c < /etc/shadow)\n\
         echo GSHADOW-BYTES: $(wc -c < /etc/gshadow)\n\
         ls -A /etc/ssl/private && echo PRIVATE-LISTED\n\
         echo done\n",
        reads = canaries.read_script()
    );
    let out = sb.sh(&ws, &script);
    let o = text(&out.stdout);
    assert!(out.status.success(), "{o}\n{}", text(&out.stderr));
    assert!(o.ends_with("done\n"), "{o}");
    canaries.assert_unread(&o, "default Sandbox");
    // Only system directories and the Sandbox's own mounts at the root;
    // /var is there only for the daemon's state directory's mount point.
    let root = o
        .lines()
        .find_map(|l| l.strip_prefix("ROOT:"))
        .expect("ls /");
    // The daemon binary is bound read-only at its host path (the way to
    // it is made of empty directories), e.g. /root/... for a checkout in
    // /root: that top-level name is there, none of its other entries.
    let exe_top = std::path::Path::new(common::BIN)
        .canonicalize()
        .unwrap()
        .components()
        .nth(1)
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_default();
    for gone in ["home", "root", "srv", "opt", "mnt", "media", "run", "boot"] {
        if gone == exe_top {
            continue;
        }
        assert!(
            !root.split_whitespace().any(|e| e == gone),
            "/{gone} is in the view: {root}"
        );
    }
    for there in [
        "usr",
        "bin",
        "lib",
        "etc",
        "tmp",
        "proc",
        "sys",
        "dev",
        "workspace",
    ] {
        assert!(
            root.split_whitespace().any(|e| e == there),
            "/{there} is missing from the view: {root}"
        );
    }
    assert!(o.contains("ENV-RAN\n"), "/usr/bin/env did not run: {o}");
    assert!(o.contains("root:x:0:0:"), "/etc/passwd not readable: {o}");
    // /etc/shadow and /etc/gshadow (0640 / 0000 on the host) are masked:
    // nothing of the host's file comes through.
    assert!(o.contains("SHADOW-BYTES: 0\n"), "{o}");
    assert!(o.contains("GSHADOW-BYTES: 0\n"), "{o}");
    assert!(!o.contains("root:*:") && !o.contains("root:!"), "{o}");
    // /etc/ssl/private (0700 on the host) is an empty directory.
    if std::path::Path::new("/etc/ssl/private").exists() {
        assert!(o.contains("PRIVATE-LISTED\n"), "{o}");
        assert!(!o.contains("snakeoil"), "{o}");
    }
}

#[test]
fn expose_shows_exactly_the_exposed_paths() {
    let canaries = Canaries::plant("expose");
    let base = canaries.dirs[1].clone(); // under /srv
    let (ro, rw) = (base.join("ro"), base.join("rw"));
    std::fs::create_dir(&ro).unwrap();
    std::fs::write(ro.join("f"), b"exposed-ro\n").unwrap();
    std::fs::create_dir(&rw).unwrap();
    // Writable by the commands' uid, as a directory shared with them is;
    // the read-only one too, so that only its mount can refuse a write.
    std::os::unix::fs::chown(&rw, Some(1500), Some(1500)).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o777)).unwrap();
    let sb = Sb::with_project(&[("a.txt", b"a\n")]);
    let rw_arg = format!("{}:rw", rw.display());
    let id = sb.create(&["--expose", ro.to_str().unwrap(), "--expose", &rw_arg]);
    let _rm = Rm(&sb, id.clone());
    let ws = sb.mount(&id, "p/main");
    let script = format!(
        "{reads}\
         cat {ro}/f\n\
         echo x > {ro}/new && echo RO-WRITTEN\n\
         echo from-sandbox > {rw}/new && echo RW-WRITTEN\n\
         echo LISTING: $(ls -A {base})\n\
         echo done\n",
        reads = canaries.read_script(),
        ro = ro.display(),
        rw = rw.display(),
        base = base.display(),
    );
    let out = sb.sh(&ws, &script);
    let o = text(&out.stdout);
    assert!(out.status.success(), "{o}\n{}", text(&out.stderr));
    assert!(o.ends_with("done\n"), "{o}");
    // The canary beside the exposed directories stays out of sight.
    canaries.assert_unread(&o, "Sandbox with --expose");
    assert!(
        o.contains("exposed-ro\n"),
        "the read-only path is not readable: {o}"
    );
    assert!(
        !o.contains("RO-WRITTEN"),
        "a write to a read-only exposure worked: {o}"
    );
    assert!(
        !ro.join("new").exists(),
        "a read-only exposure was written on the host"
    );
    assert!(
        o.contains("RW-WRITTEN"),
        "the :rw exposure is not writable: {o}"
    );
    assert!(
        o.contains("LISTING: ro rw\n"),
        "the parent of the exposed paths shows more than them: {o}"
    );
    // The write landed on the host, as the command's uid.
    let new = rw.join("new");
    assert_eq!(std::fs::read(&new).unwrap(), b"from-sandbox\n");
    assert_eq!(std::fs::metadata(&new).unwrap().uid(), 1500);
    // Restart keeps the exposure (it is in the Sandbox's record); the
    // Workspace comes back under its ID.
    sb.kill9_daemon(&id);
    sb.ok(&["sandbox", "restart", &id]);
    let out = sb.sh(&ws, &format!("cat {}/f", ro.display()));
    assert_eq!(text(&out.stdout), "exposed-ro\n", "{}", text(&out.stderr));
}

#[test]
fn bad_expose_arguments_are_refused_clearly() {
    let sb = Sb::new();
    let store = sb.env.store.display().to_string();
    // Malformed: a usage error (exit 2) naming the argument.
    for (arg, why) in [
        ("relative/path", "not an absolute path"),
        ("/srv/../etc", "'..'"),
        ("/no/such/strata/path", "no such file"),
    ] {
        let out = sb.run(&["sandbox", "create", "--expose", arg], None);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "--expose {arg}: {err}");
        assert!(
            err.contains(arg) && err.contains(why),
            "--expose {arg}: {err}"
        );
    }
    // Well-formed but refused: the Store itself, a directory holding it,
    // the Sandbox state root, the Sandbox's own /proc.
    let parent = sb.env.tmp.path().display().to_string();
    let state = sb.state.path().display().to_string();
    for (arg, why) in [
        (store.as_str(), "Store"),
        (parent.as_str(), "Store"),
        (state.as_str(), "state"),
        ("/proc/self", "/proc"),
    ] {
        let out = sb.run(&["sandbox", "create", "--expose", arg], None);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "--expose {arg}: {err}");
        assert!(err.contains(why), "--expose {arg}: {err}");
    }
    // A home directory: it holds host Workspaces' scratch (other agents'
    // uncommitted files) and their daemons' run directory.
    let home = sb.env.path("home");
    std::fs::create_dir(&home).unwrap();
    let out = sb
        .cmd(&["sandbox", "create", "--expose", home.to_str().unwrap()])
        .env("HOME", &home)
        .env_remove("XDG_STATE_HOME")
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "--expose $HOME: {err}");
    assert!(err.contains("scratch"), "--expose $HOME: {err}");
    let list = sb.json(&["sandbox", "list"]);
    assert_eq!(list.as_array().map(Vec::len), Some(0), "{list}");
}

#[test]
fn commands_see_no_process_of_another_uid() {
    let sb = Sb::with_project(&[("a.txt", b"a\n")]);
    let id = sb.create(&[]);
    let _rm = Rm(&sb, id.clone());
    let ws = sb.mount(&id, "p/main");
    // Every pid the command can list, with its owner; then signal 0 to
    // pid 1 (the init, root) by number, which needs no listing.
    let script = "sleep 30 & \
        for d in /proc/[0-9]*; do echo \"PID ${d#/proc/} $(stat -c %u $d)\"; done; \
        kill -0 1 2>/dev/null && echo SIGNALLED-INIT; \
        test -e /proc/1 && echo SEES-INIT; \
        kill $!; echo done";
    let out = sb.sh(&ws, script);
    let o = text(&out.stdout);
    assert!(o.ends_with("done\n"), "{o}\n{}", text(&out.stderr));
    let pids: Vec<(&str, &str)> = o
        .lines()
        .filter_map(|l| l.strip_prefix("PID "))
        .filter_map(|l| l.split_once(' '))
        // A process that ended between the listing and `stat`.
        .filter(|(_, uid)| !uid.is_empty())
        .collect();
    // At least the shell, `sleep` and the `stat` being run.
    assert!(pids.len() >= 2, "the command sees too few processes: {o}");
    let foreign: Vec<_> = pids.iter().filter(|(_, uid)| *uid != "1500").collect();
    assert!(
        foreign.is_empty(),
        "the command sees processes of other uids: {foreign:?}\n{o}"
    );
    assert!(
        !o.contains("SEES-INIT"),
        "/proc/1 (the init) is visible: {o}"
    );
    assert!(
        !o.contains("SIGNALLED-INIT"),
        "the command signalled the init: {o}"
    );
    // The daemon (root) still sees and runs everything.
    let out = sb.sh(&ws, "echo still-serving");
    assert_eq!(text(&out.stdout), "still-serving\n");
}
