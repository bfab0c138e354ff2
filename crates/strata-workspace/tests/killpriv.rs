//! setuid/setgid clearing with FUSE_HANDLE_KILLPRIV_V2, where the server
//! (not the kernel) clears the bits: a write, truncate or O_TRUNC open by a
//! user without CAP_FSETID clears S_ISUID (and S_ISGID with group execute),
//! with and without passthrough (whose writes never reach the server), and
//! also when the bit was set on a file already open for writing. Checked
//! with stat on the mount and in the Store after commit.

mod common;

use common::*;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::process::Command;
use strata_workspace::{MountOptions, Workspace, WorkspaceOptions};

/// Run `script` with sh as uid:gid 1500:1500 (no capabilities) in `dir`.
fn as_1500(dir: &std::path::Path, script: &str) {
    let out = Command::new("sh")
        .args(["-euc", script])
        .current_dir(dir)
        .uid(1500)
        .gid(1500)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "as uid 1500: {script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().mode() & 0o7777
}

fn writes_clear_suid_sgid(passthrough: bool) {
    let fx = fixture();
    let opts = WorkspaceOptions {
        root_owner: Some((1500, 1500)),
        ..Default::default()
    };
    let ws = Workspace::create(&fx.store, "p/main", &fx.scratch, &opts).unwrap();
    // The mountpoint's parent must be searchable by uid 1500.
    std::fs::set_permissions(fx.tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let h = ws
        .mount(
            &fx.mnt,
            &MountOptions {
                allow_other: true,
                passthrough,
                ..Default::default()
            },
        )
        .unwrap();

    // Files of uid 1500, given their bits by their owner.
    as_1500(
        &fx.mnt,
        "for f in su sg both nox tr ot; do printf x > $f; done
         chmod 4755 su; chmod 2755 sg; chmod 6755 both; chmod 2745 nox
         chmod 4755 tr ot",
    );
    // Root's files: one that 1500 may write, one only root writes, one
    // that root gives away.
    for (name, m) in [("rootsu", 0o4777), ("rootkeep", 0o4755), ("given", 0o4755)] {
        std::fs::write(fx.p(name), b"root\n").unwrap();
        std::fs::set_permissions(fx.p(name), std::fs::Permissions::from_mode(m)).unwrap();
    }
    std::fs::create_dir(fx.p("sgdir")).unwrap();
    std::fs::set_permissions(fx.p("sgdir"), std::fs::Permissions::from_mode(0o2755)).unwrap();
    assert_eq!(mode(&fx.p("su")), 0o4755);
    assert_eq!(mode(&fx.p("rootsu")), 0o4777);

    // Writes by 1500 (WRITE with FUSE_WRITE_KILL_SUIDGID), a truncate
    // (SETATTR size), an O_TRUNC open (OPEN), and a file that becomes
    // setuid while open for writing: with passthrough its write never
    // reaches the server, which clears the bit at the kernel's
    // security.capability question before the write.
    as_1500(
        &fx.mnt,
        "for f in su sg both nox rootsu; do printf y >> $f; done
         truncate -s 0 tr
         printf z > ot
         exec 3>>late
         chmod 4755 late
         printf q >&3
         exec 3>&-",
    );
    // Root has CAP_FSETID: its write keeps the bit.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(fx.p("rootkeep"))
        .unwrap();
    f.write_all(b"more\n").unwrap();
    drop(f);
    // chown of a non-directory clears suid whoever does it; a setgid
    // directory keeps its bit.
    std::os::unix::fs::chown(fx.p("given"), Some(1500), Some(1500)).unwrap();
    std::os::unix::fs::chown(fx.p("sgdir"), Some(1500), Some(1500)).unwrap();

    let expected = [
        ("su", 0o755),
        ("sg", 0o755),
        ("both", 0o755),
        // setgid without group execute is not a privilege: kept
        ("nox", 0o2745),
        ("rootsu", 0o777),
        ("tr", 0o755),
        ("ot", 0o755),
        ("late", 0o755),
        ("rootkeep", 0o4755),
        ("given", 0o755),
        ("sgdir", 0o2755),
    ];
    for (name, m) in expected {
        assert_eq!(
            mode(&fx.p(name)),
            m,
            "{name} on the mount (passthrough {passthrough})"
        );
    }
    assert_eq!(std::fs::read(fx.p("late")).unwrap(), b"q");
    assert_eq!(std::fs::read(fx.p("su")).unwrap(), b"xy");
    ws.commit("killpriv").unwrap();
    h.unmount().unwrap();
    for (name, m) in expected {
        let e = fx.entry(name.as_bytes()).unwrap();
        assert_eq!(
            e.mode & 0o7777,
            m,
            "{name} in the Store (passthrough {passthrough})"
        );
    }
    assert_eq!(fx.bytes(b"late"), b"q");
    assert_eq!(fx.bytes(b"rootsu"), b"root\ny");
}

#[test]
fn writes_clear_suid_sgid_passthrough() {
    writes_clear_suid_sgid(true);
}

#[test]
fn writes_clear_suid_sgid_no_passthrough() {
    writes_clear_suid_sgid(false);
}
