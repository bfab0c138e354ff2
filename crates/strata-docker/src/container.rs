//! What a strata container is, as Engine API JSON (B1, B2, B4), and the
//! check after start that the Engine made exactly that (B4: "verify, by
//! inspecting the container, that no capability, device or security
//! option was widened").
//!
//! The container (Engine API v1.41 `ContainerCreate`):
//!
//! * the image by its ID (`sha256:…`), resolved once at create: a tag that
//!   moves later does not change a Sandbox;
//! * entrypoint = the uploaded static strata binary, which builds the
//!   daemon's two-layer /dev ([`entrypoint`]) and then runs the daemon
//!   with its fixed arguments; no environment, user 0:0;
//! * `Init: true`: Docker's init (tini, `docker-init`) is PID 1 and reaps
//!   orphans a command leaves behind;
//! * `CapAdd: [CAP_SYS_ADMIN]` and nothing else added (the FUSE mount);
//!   Docker's default set otherwise, minus [`CAP_DROP`], none of which the
//!   daemon or the exec helper needs (commands end with no capability at
//!   all either way);
//! * exactly one device, `/dev/fuse`; `no-new-privileges`; Docker's default
//!   seccomp profile (it allows mount(2) because CAP_SYS_ADMIN is held);
//! * read-only root filesystem; a tmpfs /tmp; one small tmpfs per
//!   Workspace mount point (so the image needs no such directory and the
//!   read-only root is never written); the Sandbox's private host
//!   directory bound at [`INSIDE_ROOT`] and the Store bound below it, so
//!   both sit under a 0700 root-owned directory a command cannot traverse;
//! * network `none` unless the request asks for the host's;
//! * no terminal (`Tty: false`) and no stdin: nothing in the container
//!   has a controlling terminal.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use strata_sandbox::{CreateRequest, Network};

/// Where the Sandbox's private host directory is bound in the container.
pub const INSIDE_ROOT: &str = "/run/strata";
/// The one capability added.
pub const CAP_ADD: &str = "CAP_SYS_ADMIN";
/// Dropped from Docker's default set: raw sockets, device nodes, audit
/// writes, binding low ports and file capabilities serve neither the
/// daemon nor a command (which keeps no capability anyway). CAP_SYS_CHROOT
/// stays: the exec helper enters the commands' shared mount namespace with
/// setns(2), which needs it beside CAP_SYS_ADMIN (strata-sandbox
/// `commands_ns`).
pub const CAP_DROP: &[&str] = &[
    "CAP_NET_RAW",
    "CAP_MKNOD",
    "CAP_AUDIT_WRITE",
    "CAP_NET_BIND_SERVICE",
    "CAP_SETFCAP",
];
/// The one security option.
pub const SECURITY_OPT: &str = "no-new-privileges";
/// The device.
pub const DEV_FUSE: &str = "/dev/fuse";
/// Bits of the bounding set the container's init may hold: Docker's
/// default set (CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, SETGID, SETUID,
/// SETPCAP, NET_BIND_SERVICE, NET_RAW, SYS_CHROOT, MKNOD, AUDIT_WRITE,
/// SETFCAP = 0xa80425fb, as /proc/PID/status shows it) plus CAP_SYS_ADMIN
/// (bit 21). Anything outside it is a widened container.
pub const ALLOWED_CAPS: u64 = 0xa804_25fb | (1 << 21);

/// The label keys.
pub mod labels {
    /// The Sandbox ID (`sb-…`): marks a container as strata's.
    pub const SANDBOX: &str = "dev.strata.sandbox";
    /// The backend's state root: two roots never see each other's.
    pub const ROOT: &str = "dev.strata.root";
    /// The Sandbox's name, if any.
    pub const NAME: &str = "dev.strata.name";
    /// The image reference as requested (before pinning).
    pub const IMAGE: &str = "dev.strata.image";
    /// Prefix of the caller's labels.
    pub const USER_PREFIX: &str = "dev.strata.label.";
}

/// The daemon's fixed arguments: the container's command is fixed at
/// create, before [`strata_sandbox::Backend::install_daemon`] is called,
/// so the docker backend accepts exactly these.
pub fn daemon_args() -> Vec<String> {
    vec![
        "__strata-daemon".into(),
        "--config".into(),
        format!("{INSIDE_ROOT}/config.json"),
    ]
}

/// The container's entrypoint: the uploaded strata binary builds the
/// daemon's two-layer /dev first (`strata_sandbox::daemon_view`: commands
/// get a /dev without `/dev/fuse` and an empty [`INSIDE_ROOT`], the same
/// masks a native Sandbox applies), then execs itself with
/// [`daemon_args`] (the container's `Cmd`, appended by the Engine).
pub fn entrypoint() -> Vec<String> {
    let exe = PathBuf::from(format!("{INSIDE_ROOT}/bin/strata"));
    strata_sandbox::daemon_view_entrypoint(&exe, &[PathBuf::from(INSIDE_ROOT)])
        .into_iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// Docker's container name for a Sandbox name (names are unique per
/// Engine, so a taken one is a 409 from create: refused, never adopted).
pub fn container_name(name: &str) -> String {
    format!("strata-{name}")
}

/// The `ContainerCreate` body.
pub fn create_body(
    req: &CreateRequest,
    id: &str,
    image_id: &str,
    state_root: &Path,
    dir: &Path,
    store: &Path,
) -> Value {
    let mut labels = BTreeMap::new();
    labels.insert(labels::SANDBOX.to_string(), id.to_string());
    labels.insert(labels::ROOT.to_string(), state_root.display().to_string());
    labels.insert(
        labels::IMAGE.to_string(),
        req.image.clone().unwrap_or_default(),
    );
    if let Some(n) = &req.name {
        labels.insert(labels::NAME.to_string(), n.clone());
    }
    for (k, v) in &req.labels {
        labels.insert(format!("{}{k}", labels::USER_PREFIX), v.clone());
    }
    let mut mounts = vec![
        json!({"Type": "bind", "Source": dir, "Target": INSIDE_ROOT, "ReadOnly": false}),
        json!({"Type": "bind", "Source": store, "Target": format!("{INSIDE_ROOT}/store"), "ReadOnly": false}),
    ];
    for m in &req.mountpoints {
        // An empty directory to mount a Workspace on; tiny, since the
        // daemon mounts FUSE over it.
        mounts.push(json!({"Type": "tmpfs", "Target": m, "TmpfsOptions": {"SizeBytes": 65536, "Mode": 0o755}}));
    }
    let network = match req.network {
        Network::None => "none",
        Network::Host => "host",
    };
    let limits = &req.limits;
    json!({
        "Image": image_id,
        "Entrypoint": entrypoint(),
        "Cmd": daemon_args(),
        "Env": [],
        "User": "0:0",
        "WorkingDir": "/",
        // No terminal and no stdin: the daemon and everything it starts run
        // without a controlling terminal (docs/security.md), like the
        // native backend's setsid.
        "Tty": false,
        "OpenStdin": false,
        "AttachStdin": false,
        "Hostname": req.name.clone().unwrap_or_else(|| "strata".into()),
        "Labels": labels,
        "NetworkDisabled": req.network == Network::None,
        "HostConfig": {
            "Init": true,
            "ReadonlyRootfs": true,
            "Privileged": false,
            "CapAdd": [CAP_ADD],
            "CapDrop": CAP_DROP,
            "Devices": [{"PathOnHost": DEV_FUSE, "PathInContainer": DEV_FUSE, "CgroupPermissions": "rwm"}],
            "SecurityOpt": [SECURITY_OPT],
            "NetworkMode": network,
            // Docker's default on a cgroup v1 host is the host's cgroup
            // namespace; ask for a private one everywhere.
            "CgroupnsMode": "private",
            // exec: builds run their test binaries from /tmp.
            "Tmpfs": {"/tmp": "rw,nosuid,nodev,exec,mode=1777"},
            "Mounts": mounts,
            "Memory": limits.memory_bytes.unwrap_or(0),
            "PidsLimit": limits.pids.map(|p| p as i64),
            "NanoCpus": limits.cpu_millis.map(|c| c * 1_000_000).unwrap_or(0),
            // The daemon (and Docker's init) is never the OOM killer's
            // choice; the exec helper raises each command to +500. Only
            // where the host may lower a score: without CAP_SYS_RESOURCE
            // runc fails the start, so the container keeps the default 0.
            "OomScoreAdj": if strata_sandbox::exec::can_lower_oom_score() {
                strata_sandbox::exec::DAEMON_OOM_SCORE_ADJ
            } else {
                0
            },
            "RestartPolicy": {"Name": "no"},
            "AutoRemove": false,
            // The daemon's stdout/stderr (marker, early errors) are few
            // lines; bound them anyway.
            "LogConfig": {"Type": "json-file", "Config": {"max-size": "1m", "max-file": "2"}},
        }
    })
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn norm_cap(c: &str) -> String {
    let c = c.to_ascii_uppercase();
    if c.starts_with("CAP_") {
        c
    } else {
        format!("CAP_{c}")
    }
}

/// What the container must look like after start, besides the fixed
/// options: its mounts' targets and its network mode.
#[derive(Debug, Clone)]
pub struct Expected {
    pub mount_targets: Vec<PathBuf>,
    pub network: Network,
}

impl Expected {
    pub fn of(req: &CreateRequest) -> Self {
        let mut mount_targets = vec![
            PathBuf::from(INSIDE_ROOT),
            PathBuf::from(format!("{INSIDE_ROOT}/store")),
        ];
        mount_targets.extend(req.mountpoints.iter().cloned());
        Expected {
            mount_targets,
            network: req.network,
        }
    }
}

/// Every way `inspect` (`GET /containers/{id}/json`) differs from what
/// strata asked for; empty if none. Widening is refused, and so is any
/// narrowing the daemon could not live with (e.g. a missing /dev/fuse).
pub fn verify(inspect: &Value, expected: &Expected) -> Vec<String> {
    let mut bad = Vec::new();
    let cfg = &inspect["Config"];
    for key in ["Tty", "OpenStdin"] {
        if cfg[key].as_bool() != Some(false) {
            bad.push(format!("Config.{key} is {}, not false", cfg[key]));
        }
    }
    let hc = &inspect["HostConfig"];
    if hc["Privileged"].as_bool() != Some(false) {
        bad.push(format!("Privileged is {}", hc["Privileged"]));
    }
    let add: Vec<String> = strs(&hc["CapAdd"]).iter().map(|c| norm_cap(c)).collect();
    if add != [CAP_ADD] {
        bad.push(format!("CapAdd is {add:?}, not [{CAP_ADD}]"));
    }
    let mut drop: Vec<String> = strs(&hc["CapDrop"]).iter().map(|c| norm_cap(c)).collect();
    drop.sort();
    let mut want_drop: Vec<String> = CAP_DROP.iter().map(|c| c.to_string()).collect();
    want_drop.sort();
    if drop != want_drop {
        bad.push(format!("CapDrop is {drop:?}, not {want_drop:?}"));
    }
    let devices = hc["Devices"].as_array().cloned().unwrap_or_default();
    let fuse_only = devices.len() == 1
        && devices[0]["PathOnHost"] == DEV_FUSE
        && devices[0]["PathInContainer"] == DEV_FUSE;
    if !fuse_only {
        bad.push(format!(
            "Devices are {}, not exactly {DEV_FUSE}",
            hc["Devices"]
        ));
    }
    for key in ["DeviceCgroupRules", "DeviceRequests"] {
        if hc[key].as_array().is_some_and(|a| !a.is_empty()) {
            bad.push(format!("{key} is {}", hc[key]));
        }
    }
    if strs(&hc["SecurityOpt"]) != [SECURITY_OPT] {
        bad.push(format!(
            "SecurityOpt is {}, not [\"{SECURITY_OPT}\"] (no seccomp, AppArmor or label override)",
            hc["SecurityOpt"]
        ));
    }
    if hc["ReadonlyRootfs"].as_bool() != Some(true) {
        bad.push("the root filesystem is writable".into());
    }
    if hc["Init"].as_bool() != Some(true) {
        bad.push("no init (HostConfig.Init is not true)".into());
    }
    for key in [
        "PidMode",
        "IpcMode",
        "UTSMode",
        "UsernsMode",
        "CgroupnsMode",
    ] {
        if hc[key].as_str() == Some("host") {
            bad.push(format!("{key} is host"));
        }
    }
    let net = match expected.network {
        Network::None => "none",
        Network::Host => "host",
    };
    if hc["NetworkMode"].as_str() != Some(net) {
        bad.push(format!("NetworkMode is {}, not {net}", hc["NetworkMode"]));
    }
    // The mounts as the Engine made them: exactly ours plus the /tmp tmpfs
    // (HostConfig.Tmpfs mounts are not listed in Mounts).
    let mut got: Vec<PathBuf> = inspect["Mounts"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|m| m["Destination"].as_str().map(PathBuf::from))
                .collect()
        })
        .unwrap_or_default();
    got.sort();
    let mut want: Vec<PathBuf> = expected
        .mount_targets
        .iter()
        .filter(|t| !is_tmpfs_target(inspect, t))
        .cloned()
        .collect();
    want.sort();
    if got != want {
        bad.push(format!("mounts are {got:?}, not {want:?}"));
    }
    let tmpfs = hc["Tmpfs"].as_object().map(|o| o.len()).unwrap_or(0);
    if tmpfs != 1 || hc["Tmpfs"]["/tmp"].is_null() {
        bad.push(format!("Tmpfs is {}, not just /tmp", hc["Tmpfs"]));
    }
    if strs(&hc["Binds"]).iter().any(|b| !b.is_empty()) {
        bad.push(format!("Binds is {}", hc["Binds"]));
    }
    bad
}

/// Tmpfs mounts made through `HostConfig.Mounts` are listed by inspect's
/// `Mounts` in some Engine versions and not others; accept either.
fn is_tmpfs_target(inspect: &Value, t: &Path) -> bool {
    let listed = inspect["Mounts"].as_array().is_some_and(|a| {
        a.iter()
            .any(|m| m["Destination"].as_str() == t.to_str() && m["Type"] == "tmpfs")
    });
    let declared = inspect["HostConfig"]["Mounts"].as_array().is_some_and(|a| {
        a.iter()
            .any(|m| m["Target"].as_str() == t.to_str() && m["Type"] == "tmpfs")
    });
    declared && !listed
}

/// The kernel's view of the container's init (`/proc/PID/status` on this
/// host): its bounding set within [`ALLOWED_CAPS`], CAP_SYS_ADMIN present,
/// no_new_privs set and a seccomp filter installed. Empty if all hold.
pub fn verify_process(status: &str) -> Vec<String> {
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    let mut bad = Vec::new();
    match u64::from_str_radix(&field("CapBnd:"), 16) {
        Ok(b) if b & !ALLOWED_CAPS != 0 => bad.push(format!(
            "the bounding set {b:#x} holds capabilities beyond {ALLOWED_CAPS:#x}"
        )),
        Ok(b) if b & (1 << 21) == 0 => bad.push("CAP_SYS_ADMIN is missing".into()),
        Ok(_) => {}
        Err(_) => bad.push("no CapBnd in /proc/PID/status".into()),
    }
    if field("NoNewPrivs:") != "1" {
        bad.push(format!("NoNewPrivs is {:?}", field("NoNewPrivs:")));
    }
    if field("Seccomp:") != "2" {
        bad.push(format!(
            "Seccomp is {:?}, not 2 (filter)",
            field("Seccomp:")
        ));
    }
    bad
}
