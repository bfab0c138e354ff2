//! Ownership: a root daemon with allow_other serving another uid, and the
//! rootless id mapping (checked here on a root mount, without namespaces).

mod common;

use common::*;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::process::Command;
use strata_workspace::{IdMapping, MountOptions, Workspace, WorkspaceOptions};

#[test]
fn other_uid_writes_through_allow_other() {
    let fx = fixture();
    let opts = WorkspaceOptions {
        root_owner: Some((1500, 1500)),
        ..Default::default()
    };
    let ws = Workspace::create(&fx.store, "p/main", &fx.scratch, &opts).unwrap();
    // The mountpoint's parent must be searchable by uid 1500.
    std::fs::set_permissions(
        fx.tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let h = ws
        .mount(
            &fx.mnt,
            &MountOptions {
                allow_other: true,
                ..Default::default()
            },
        )
        .unwrap();
    let out = Command::new("sh")
        .args(["-c", "echo from-1500 > mine.txt && mkdir d && cat hello.txt && ! touch hello.txt 2>/dev/null"])
        .current_dir(&fx.mnt)
        .uid(1500)
        .gid(1500)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"hello world\n");
    let m = std::fs::metadata(fx.p("mine.txt")).unwrap();
    assert_eq!((m.uid(), m.gid()), (1500, 1500));
    ws.commit("by 1500").unwrap();
    h.unmount().unwrap();
    let e = fx.entry(b"mine.txt").unwrap();
    assert_eq!((e.uid, e.gid), (1500, 1500));
    assert_eq!(fx.bytes(b"mine.txt"), b"from-1500\n");
    let d = fx.entry(b"d").unwrap();
    assert_eq!((d.uid, d.gid), (1500, 1500));
}

#[test]
fn single_user_mapping_reports_zero_and_stores_the_user() {
    let fx = fixture();
    let ws = fx.create();
    let opts = MountOptions {
        id_mapping: IdMapping::SingleUser {
            uid: 4321,
            gid: 8765,
        },
        default_permissions: Some(false),
        ..Default::default()
    };
    let h = ws.mount(&fx.mnt, &opts).unwrap();
    // Outbound: every owner is 0 (the one id the namespace maps).
    let m = std::fs::metadata(fx.p("hello.txt")).unwrap();
    assert_eq!((m.uid(), m.gid()), (0, 0));
    // Inbound: 0 means the invoking user.
    std::fs::write(fx.p("made.txt"), b"x").unwrap();
    std::os::unix::fs::chown(fx.p("hello.txt"), Some(0), Some(0)).unwrap();
    let m = std::fs::metadata(fx.p("made.txt")).unwrap();
    assert_eq!((m.uid(), m.gid()), (0, 0));
    ws.commit("mapped").unwrap();
    h.unmount().unwrap();
    let e = fx.entry(b"made.txt").unwrap();
    assert_eq!((e.uid, e.gid), (4321, 8765));
    let e = fx.entry(b"hello.txt").unwrap();
    assert_eq!((e.uid, e.gid), (4321, 8765));
}
