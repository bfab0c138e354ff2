//! `strata run --isolate` as a real nonroot user (uid 1500), attacked from
//! inside: the command cannot read host data the same user reads without
//! --isolate (canaries under /home, /srv, /opt, /var/lib, another Store),
//! runs with NoNewPrivs and the Sandbox's seccomp filter, has no network
//! interface but `lo`, and its writes to the Workspace still land in the
//! Store (read back). The fixture is in `rootless/mod.rs`.

mod common;
mod rootless;

use common::canary::Canaries;
use rootless::*;

/// What the command prints about itself and its network.
const SELF_SCRIPT: &str = "grep -E '^(NoNewPrivs|Seccomp|CapEff|CapBnd):' /proc/self/status\n\
     echo IFACES: $(tail -n +3 /proc/net/dev | cut -d: -f1)\n";

#[test]
fn isolate_confines_the_command_and_its_writes_still_land() {
    let f = Fixture::new(0o666, base_tree);
    let canaries = Canaries::plant("isolate");
    let script = format!(
        "{reads}{me}echo written > \"$STRATA_ROOT/out.txt\"\n\
         cat \"$STRATA_ROOT/keep.txt\"\n\
         ls -A / | tr '\\n' ' '; echo\n\
         echo done\n",
        reads = canaries.read_script(),
        me = SELF_SCRIPT,
    );

    // Control: plain `strata run` is no sandbox; the same user reads the
    // canaries and has the host's network.
    let plain = f.run_sh(&[], &script);
    let p = String::from_utf8_lossy(&plain.stdout).into_owned();
    assert!(plain.status.success(), "{p}\n{}", stderr(&plain));
    canaries.assert_read(&p, "plain strata run");

    let out = f.run_sh(&["--isolate", "--commit", "-m", "isolated"], &script);
    let o = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{o}\n{}", stderr(&out));
    assert!(o.ends_with("done\n"), "{o}\n{}", stderr(&out));
    canaries.assert_unread(&o, "strata run --isolate");
    assert!(o.contains("NoNewPrivs:\t1\n"), "{o}");
    assert!(o.contains("Seccomp:\t2\n"), "{o}");
    assert!(o.contains("CapEff:\t0000000000000000\n"), "{o}");
    assert!(o.contains("CapBnd:\t0000000000000000\n"), "{o}");
    let ifaces: Vec<&str> = o
        .lines()
        .find_map(|l| l.strip_prefix("IFACES:"))
        .expect("the interface list")
        .split_whitespace()
        .collect();
    assert_eq!(ifaces, ["lo"], "{o}");
    // The Workspace is where it always is, and the base is readable.
    assert!(o.contains("keep\n"), "{o}");
    for gone in ["home", "srv", "opt", "root", "run", "mnt", "media"] {
        assert!(
            !o.lines().any(|l| l.split_whitespace().any(|e| e == gone)),
            "/{gone} is in the isolated view: {o}"
        );
    }
    // The write landed in the Store.
    let (store, head, _copy) = f.read_back();
    assert_eq!(
        file_bytes(&store, head, "out.txt").as_deref(),
        Some(&b"written\n"[..]),
        "the isolated command's write is not in the Store"
    );
}

#[test]
fn isolate_with_at_outside_tmp_and_lo_up() {
    let f = Fixture::new(0o666, base_tree);
    // `--at` outside /tmp (the view's /tmp is private): the mount point is
    // made on the view's own tmpfs, the Workspace grafted there.
    let parent = tempfile::Builder::new()
        .prefix("strata-isolate-at-")
        .tempdir_in("/var/tmp")
        .unwrap();
    chown_tree(parent.path());
    let at = parent.path().join("wsdir");
    let script = "cat /sys/class/net/lo/flags; pwd; echo x > y.txt; ls -A /var/tmp; echo done";
    let out = f.run_sh(
        &["--isolate", "--commit", "--at", s(&at), "-m", "at"],
        script,
    );
    let o = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{o}\n{}", stderr(&out));
    assert!(o.ends_with("done\n"), "{o}");
    // IFF_UP (0x1) is set on lo: the isolated command has a working
    // loopback, as a Sandbox command has.
    let flags = o.lines().find(|l| l.starts_with("0x")).expect("lo flags");
    let flags = u32::from_str_radix(flags.trim_start_matches("0x"), 16).unwrap();
    assert_eq!(flags & 1, 1, "lo is down: {o}");
    assert!(o.contains(&format!("{}\n", at.display())), "cwd: {o}");
    // Nothing else of /var/tmp: only the way to the mount point.
    let name = parent.path().file_name().unwrap().to_str().unwrap();
    assert!(o.contains(&format!("\n{name}\ndone\n")), "{o}");
    let (store, head, _copy) = f.read_back();
    assert_eq!(
        file_bytes(&store, head, "y.txt").as_deref(),
        Some(&b"x\n"[..])
    );
}
