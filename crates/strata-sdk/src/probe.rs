//! What this host offers strata (`strata probe`): one `KEY=VALUE` fact per
//! property, read from /proc, /dev, statfs(2) and the kernel's version, and
//! a live self-check through a throwaway Sandbox. Each value that is not
//! good news says why and what to do. The CLI prints them; the rootless
//! mode's own line comes from strata-rootless's probe.

use std::path::{Path, PathBuf};

use crate::error::Error;

/// One `KEY=VALUE` fact per host property, in a fixed order: kernel,
/// /dev/fuse, capabilities, user namespaces, cgroups, passthrough, the
/// filesystems of the Store (`store`, which need not exist yet) and /tmp.
/// A value that is not good news says why and what to do.
pub fn facts(store: Option<&Path>) -> Vec<(String, String)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let mut v: Vec<(String, String)> = Vec::new();
    let mut put = |k: &str, s: String| v.push((k.to_string(), s));

    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|e| {
            format!("unknown: cannot read /proc/sys/kernel/osrelease ({e}); is /proc mounted?")
        });
    put("kernel", kernel);

    match std::fs::metadata("/dev/fuse") {
        Ok(m) if m.file_type().is_char_device() => {
            put("dev_fuse", "present".into());
            put("dev_fuse_mode", format!("{:o}", m.mode() & 0o7777));
        }
        Ok(_) => put(
            "dev_fuse",
            "missing: /dev/fuse is not a character device; recreate it (mknod /dev/fuse c 10 229)"
                .into(),
        ),
        Err(e) => put(
            "dev_fuse",
            format!("missing: {e}; load the fuse module (modprobe fuse) or pass --device /dev/fuse to the container"),
        ),
    }

    let fs = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    let fuse = fs
        .lines()
        .any(|l| l.split_whitespace().last() == Some("fuse"));
    put(
        "fuse_filesystem",
        if fuse {
            "yes".into()
        } else {
            "no: fuse is not in /proc/filesystems; load the module (modprobe fuse)".into()
        },
    );

    put("euid", rustix::process::geteuid().as_raw().to_string());

    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    for key in ["CapEff", "CapBnd", "NoNewPrivs", "Seccomp"] {
        let val = status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}:")))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|| "unknown: not in /proc/self/status".into());
        put(&key.to_ascii_lowercase(), val);
    }
    let cap_sys_admin = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|s| u64::from_str_radix(s.trim(), 16).ok())
        .map(|c| c & (1 << 21) != 0);
    put(
        "cap_sys_admin",
        match cap_sys_admin {
            Some(true) => "yes".into(),
            Some(false) => "no: Sandboxes and host mounts need CAP_SYS_ADMIN; run as root (or a privileged container); `strata run` works without it".into(),
            None => "unknown: cannot read CapEff from /proc/self/status".into(),
        },
    );

    put(
        "user_namespaces",
        match strata_sandbox::host_allows_unprivileged_userns() {
            Ok(true) => "yes".into(),
            Ok(false) => "no: unprivileged user namespaces are refused (kernel.unprivileged_userns_clone, user.max_user_namespaces or a seccomp profile); rootless `strata run` needs them, root Sandboxes do not".into(),
            Err(e) => format!("unknown: the check failed ({e})"),
        },
    );

    put(
        "cgroup",
        match strata_sandbox::cgroup::detect() {
            Ok(strata_sandbox::Hierarchy::V2 { root }) => format!("v2 at {}", root.display()),
            Ok(strata_sandbox::Hierarchy::V1 { mounts }) => format!(
                "v1 ({})",
                mounts
                    .iter()
                    .map(|(c, _)| c.as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            Err(e) => format!("unavailable: {e}; Sandbox limits (--memory, --pids) need a mounted cgroup hierarchy"),
        },
    );

    // A Sandbox's start moves PID 1 into its cgroup; the first move after a
    // quiet spell waits for a full RCU grace period unless the kernel
    // expedites them (docs/benchmarks.md, "The cgroup move"). A host-wide
    // setting, so reported with what to do, never changed by strata.
    put(
        "rcu_expedited",
        match std::fs::read_to_string("/sys/kernel/rcu_expedited") {
            Ok(v) if v.trim() == "0" => "0: a Sandbox's first cgroup move after a quiet spell waits a full RCU grace period (14-30 ms measured); `echo 1 > /sys/kernel/rcu_expedited` (root, the whole host, until reboot) made it ~1.5 ms".into(),
            Ok(v) => format!("{}: cgroup moves wait an expedited grace period", v.trim()),
            Err(e) => format!("unknown: /sys/kernel/rcu_expedited: {e}"),
        },
    );

    put(
        "dev_kvm",
        match std::fs::metadata("/dev/kvm") {
            Ok(m) => format!("present (mode {:o})", m.mode() & 0o7777),
            Err(e) => format!("missing: {e}; only the microVM backend needs it (enable virtualization or pass --device /dev/kvm)"),
        },
    );

    put("fuse_passthrough", passthrough(&kernel_release()));
    // FUSE over io_uring (crates/strata-workspace/src/uring): whether the
    // kernel lets a mount use it, and what a mount here would use.
    let uring = strata_workspace::uring::probe();
    put("fuse_io_uring", uring.to_string());
    put(
        "fuse_transport",
        uring.transport_line(strata_workspace::Transport::from_env()),
    );
    let store_dir = store.map(existing_ancestor);
    put(
        "store_fs",
        match &store_dir {
            Some(d) => fs_line(d, true),
            None => "unknown: no Store path (pass --store or set STRATA_STORE)".into(),
        },
    );
    put("tmp_fs", fs_line(Path::new("/tmp"), false));
    v
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// FUSE passthrough (reads and writes of file data bypass the daemon) needs
/// kernel >= 6.9 with CONFIG_FUSE_PASSTHROUGH and a root (CAP_SYS_ADMIN)
/// server; the kernel confirms it per mount at FUSE_INIT, and a Workspace
/// falls back to serving data itself when it is refused.
fn passthrough(release: &str) -> String {
    let mut nums = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|s| s.parse::<u32>().ok());
    let (maj, min) = (nums.next().unwrap_or(0), nums.next().unwrap_or(0));
    if (maj, min) < (6, 9) {
        return format!("off: kernel {release} is older than 6.9; Workspaces serve file data through the daemon (slower); upgrade the kernel for passthrough");
    }
    let config = std::fs::read_to_string(format!("/boot/config-{release}")).ok();
    if let Some(c) = &config {
        if !c.lines().any(|l| l == "CONFIG_FUSE_PASSTHROUGH=y") {
            return "off: the kernel is built without CONFIG_FUSE_PASSTHROUGH; Workspaces serve file data through the daemon".into();
        }
    }
    if !rustix::process::geteuid().is_root() {
        return "off for this user: passthrough needs a root (CAP_SYS_ADMIN) FUSE server, i.e. a Sandbox or `strata mount` as root; `strata run` serves data itself".into();
    }
    match config {
        Some(_) => "on: kernel >= 6.9 with CONFIG_FUSE_PASSTHROUGH=y, root server".into(),
        None => "on: kernel >= 6.9, root server (kernel config not readable; the kernel confirms at mount time)".into(),
    }
}

/// The nearest existing directory at or above `p` (a Store not created yet
/// will live on its parent's filesystem).
fn existing_ancestor(p: &Path) -> PathBuf {
    let mut d = p.to_path_buf();
    while !d.exists() {
        if !d.pop() {
            return PathBuf::from("/");
        }
    }
    d
}

/// `statfs` type of `dir`, named; for the Store also whether SQLite's WAL
/// locking can be trusted there (strata refuses the others).
fn fs_line(dir: &Path, store: bool) -> String {
    let magic = match rustix::fs::statfs(dir) {
        Ok(st) => st.f_type as u64,
        Err(e) => return format!("unknown: statfs {}: {e}", dir.display()),
    };
    let name = match magic {
        0xEF53 => "ext4",
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        0x0102_1994 => "tmpfs",
        0x794C_7630 => "overlayfs",
        0x2FC1_2FC1 => "zfs",
        0xF2F5_2010 => "f2fs",
        0xCA45_1A4E => "bcachefs",
        0x6969 => "nfs",
        0x6573_5546 => "fuse",
        0x0102_1997 => "9p",
        0xFF53_4D42 | 0xFE53_4D42 | 0x517B => "smb",
        _ => "",
    };
    let name = if name.is_empty() {
        format!("unrecognised (statfs type {magic:#x})")
    } else {
        name.to_string()
    };
    if !store {
        return format!("{name} ({})", dir.display());
    }
    match strata_store::check_filesystem(dir) {
        Ok(()) => format!("{name} ({})", dir.display()),
        Err(_) => format!(
            "{name} ({}): refused for a Store, its locking cannot be trusted by SQLite's WAL; put the Store on a local disk (ext4, xfs, btrfs) or pass --allow-any-fs if you know better",
            dir.display()
        ),
    }
}

/// The live check, as `allow_other_mount` and `privilege_split` facts:
/// as root with /dev/fuse, a throwaway Sandbox on a temporary Store (in
/// /var/tmp) mounts a Workspace with allow_other and one command checks
/// the privilege split on itself ([`crate::check`]); otherwise both say
/// why they were not checked.
pub async fn self_check() -> Vec<(String, String)> {
    if !rustix::process::geteuid().is_root() {
        return not_checked(
            "needs root (a Sandbox daemon mounts as root); run `sudo strata probe`",
        );
    }
    if !Path::new("/dev/fuse").exists() {
        return not_checked("no /dev/fuse");
    }
    let uring = (
        "fuse_io_uring_live".to_string(),
        tokio::task::spawn_blocking(uring_live)
            .await
            .unwrap_or_else(|e| format!("failed: the check panicked ({e})")),
    );
    match live_check().await {
        Ok((mount, split)) => vec![
            ("allow_other_mount".into(), mount),
            ("privilege_split".into(), split),
            uring,
        ],
        Err(e) => vec![
            (
                "allow_other_mount".into(),
                format!(
                    "failed: {}; see the line below and `strata sandbox logs`",
                    chain(&e)
                ),
            ),
            (
                "privilege_split".into(),
                "not checked: no Sandbox could be started".into(),
            ),
            uring,
        ],
    }
}

/// FUSE over io_uring for real: a throwaway Workspace mounted with the
/// io_uring transport (the kernel accepts or refuses the queues'
/// registration only on a live connection), one file written and read
/// back through it, and the count of requests its rings served.
fn uring_live() -> String {
    use strata_workspace::{MountOptions, Transport, Workspace, WorkspaceOptions};
    let p = strata_workspace::uring::probe();
    if let Some(why) = &p.unusable {
        return format!("not checked: {why}");
    }
    let run = || -> Result<u64, String> {
        let tmp = tempfile::Builder::new()
            .prefix("strata-probe-uring-")
            .tempdir_in("/var/tmp")
            .map_err(|x| format!("temporary directory: {x}"))?;
        let sopts = strata_store::StoreOptions::default();
        let store = strata_store::Store::create(&tmp.path().join("store"), &sopts)
            .map_err(|x| format!("create a Store: {x}"))?;
        store
            .create_project("probe", "strata probe")
            .map_err(|x| format!("create a project: {x}"))?;
        let ws = Workspace::create(
            &store,
            "probe/main",
            &tmp.path().join("scratch"),
            &WorkspaceOptions::default(),
        )
        .map_err(|x| format!("create a Workspace: {x}"))?;
        let mnt = tmp.path().join("mnt");
        std::fs::create_dir(&mnt).map_err(|x| format!("mkdir: {x}"))?;
        let opts = MountOptions {
            transport: Transport::IoUring,
            ..Default::default()
        };
        let h = ws.mount(&mnt, &opts).map_err(|x| format!("mount: {x}"))?;
        let served = h.ring_requests();
        let io = std::fs::write(mnt.join("probe"), b"io_uring\n")
            .and_then(|()| std::fs::read(mnt.join("probe")));
        h.unmount().map_err(|x| format!("unmount: {x}"))?;
        match io {
            Ok(b) if b == b"io_uring\n" => {}
            Ok(_) => return Err("a file read back differs from what was written".into()),
            Err(x) => return Err(format!("write and read a file: {x}")),
        }
        Ok(served.map_or(0, |c| c.get()))
    };
    match run() {
        Ok(0) => "failed: the mount served no request through its rings".into(),
        Ok(n) => format!(
            "registered: {} queues; a file written and read back, {n} requests through the rings",
            p.queues
        ),
        Err(why) => format!("failed: {why}"),
    }
}

/// The live check's two facts, not checked for reason `why`.
pub fn not_checked(why: &str) -> Vec<(String, String)> {
    vec![
        (
            "allow_other_mount".to_string(),
            format!("not checked: {why}"),
        ),
        ("privilege_split".to_string(), format!("not checked: {why}")),
        (
            "fuse_io_uring_live".to_string(),
            format!("not checked: {why}"),
        ),
    ]
}

/// An error and its causes as one line, without repeating a cause that the
/// message before it already quotes.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = String::new();
    let mut cur = Some(e);
    while let Some(c) = cur {
        let s = c.to_string();
        if !out.contains(&s) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&s);
        }
        cur = c.source();
    }
    out
}

/// Why the live check could not run.
#[derive(Debug, thiserror::Error)]
enum LiveError {
    #[error("could not prepare a temporary Store in /var/tmp: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Sdk(#[from] Error),
}

async fn live_check() -> Result<(String, String), LiveError> {
    // Not under /tmp: a Sandbox has a private /tmp, and the state root
    // must not be there either.
    let tmp = tempfile::Builder::new()
        .prefix("strata-probe-")
        .tempdir_in("/var/tmp")?;
    let store_dir = tmp.path().join("store");
    let src = tmp.path().join("src");
    std::fs::create_dir(&src)?;
    std::fs::write(src.join("README"), "probe\n")?;
    let store = crate::Store::create(&store_dir).await?;
    store.create_project_from("probe", &src).await?;
    let mut spec = crate::SandboxSpec::new(&store_dir).label("strata.probe", "1");
    spec.state_dir = Some(tmp.path().join("state"));
    let sb = crate::Sandbox::create(spec).await?;
    let r = async {
        let ws = sb.mount("probe/main", None).await?;
        let rep = crate::check::privilege_split(&ws, &store_dir.display().to_string()).await?;
        Ok::<_, Error>(rep)
    }
    .await;
    let _ = sb.close_discard().await;
    let rep = r?;
    let mount = if rep.writes {
        format!("yes: a Workspace mounted by the Sandbox daemon (root, allow_other) was written and read by uid {}", rep.uid)
    } else {
        "no: the command could not write and read back a file in the Workspace; see `strata sandbox logs`".into()
    };
    let split = if rep.holds() {
        format!(
            "holds: uid {}:{}, CapEff={}, CapBnd={}, NoNewPrivs={}, Seccomp={}; umount, umount -l, fusermount3 -u and unshare -U/-Urm/-m denied; Store hidden",
            rep.uid, rep.gid, rep.cap_eff, rep.cap_bnd, rep.no_new_privs, rep.seccomp
        )
    } else {
        format!(
            "BROKEN: {}; do not run untrusted commands here and report this",
            rep.problems().join("; ")
        )
    };
    Ok((mount, split))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_lines_are_key_value() {
        for (k, _) in facts(Some(Path::new("/var/tmp/none/store"))) {
            assert!(!k.is_empty() && !k.contains('=') && !k.contains(' '), "{k}");
        }
    }

    #[test]
    fn passthrough_needs_6_9() {
        assert!(passthrough("6.8.12").starts_with("off"));
        assert!(passthrough("5.15.0-91-generic").starts_with("off"));
    }
}
