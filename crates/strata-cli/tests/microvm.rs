//! `strata vm`: a real qemu microVM per project under TCG (docs/microvm.md).
//! The Store lives on the VM's ext4 disk and is reached only through the
//! guest's `strata serve` over the loopback port forward. Needs
//! qemu-system-x86 and linux-image-amd64 (scripts/test installs them);
//! without them these tests fail and say so. VM boots are few: each costs
//! seconds of emulated CPU.

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};
use strata_microvm::vm::qemus_under;
use strata_testkit::http::{parse, Resp};

mod microvm_common;
use microvm_common::{require_qemu_and_kernel, Cleanup};

const BIN: &str = env!("CARGO_BIN_EXE_strata");

fn vm(state: &Path, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .arg("--json")
        .arg("vm")
        .args(args)
        .arg("--state")
        .arg(state)
        .output()
        .expect("run strata vm")
}

fn vm_ok(state: &Path, args: &[&str]) -> Value {
    json_ok(vm(state, args), "strata vm", args)
}

/// The JSON stdout of a command that must have succeeded.
fn json_ok(o: std::process::Output, what: &str, args: &[&str]) -> Value {
    assert!(
        o.status.success(),
        "{what} {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&o.stdout)
    );
    serde_json::from_slice(&o.stdout).expect("JSON")
}

fn vm_err(state: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let mut c = Command::new(BIN);
    c.arg("vm").args(args).arg("--state").arg(state);
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().expect("run strata vm");
    assert!(!o.status.success(), "strata vm {args:?} succeeded");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// One HTTP/1.1 exchange with the guest's server through the endpoint.
fn http(ep: &Value, method: &str, path: &str, token: Option<&str>, body: Option<Value>) -> Resp {
    let url = ep["url"].as_str().unwrap();
    let addr = url.strip_prefix("http://").unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: strata\r\nConnection: close\r\n");
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    let b = body
        .map(|v| serde_json::to_vec(&v).unwrap())
        .unwrap_or_default();
    if !b.is_empty() {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    req.push_str("\r\n");
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the VM's endpoint");
    s.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(&b).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    parse(&raw)
}

#[test]
fn a_commit_survives_a_vm_restart_and_each_project_has_its_own_vm() {
    require_qemu_and_kernel();
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("vms");
    let _cleanup = Cleanup(tmp.path());

    // The first start decides KVM or TCG by a probe boot under KVM (cached
    // in the state root); under TCG it warns and says why.
    let o = vm(&state, &["start", "--project", "alpha"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let a: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(a["started"], true);
    assert!(
        a["kernel"].as_str().unwrap().starts_with("/boot/vmlinuz-"),
        "{a}"
    );
    if a["accel"] == "tcg" {
        assert!(
            stderr.contains("runs under TCG (emulation, slow)"),
            "{stderr}"
        );
        let why = a["accel_reason"].as_str().unwrap();
        assert!(stderr.contains(why), "{stderr}");
        eprintln!("TCG because: {why}");
    }
    let url = a["url"].as_str().unwrap();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let token = a["token"].as_str().unwrap().to_string();
    eprintln!("alpha: boot-to-ready {} ms under TCG", a["boot_ms"]);
    // The endpoint file is the token's only copy on the host: 0600.
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(state.join("alpha/endpoint.json"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);

    // A second start finds it running.
    let again = vm_ok(&state, &["start", "--project", "alpha"]);
    assert_eq!(again["started"], false);
    assert_eq!(again["url"], a["url"]);

    // No token, no entry.
    assert_eq!(http(&a, "GET", "/v1/projects", None, None).status, 401);
    // A project and a commit through the guest's server.
    let r = http(
        &a,
        "POST",
        "/v1/projects",
        Some(&token),
        Some(json!({"name": "web"})),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let h0 = r.json()["head"].as_str().unwrap().to_string();
    let r = http(
        &a,
        "POST",
        "/v1/projects/web/branches/main/commits",
        Some(&token),
        Some(json!({"expected_head": h0, "message": "in the vm",
            "changes": [{"op": "put", "path": "hello.txt", "content": "from the host\n"}]})),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let c1 = r.json()["commit"].as_str().unwrap().to_string();

    // A second project: its own VM, its own disk, its own Store.
    let b = vm_ok(&state, &["start", "--project", "beta"]);
    assert_ne!(b["url"], a["url"]);
    assert_ne!(b["disk"], a["disk"]);
    assert_ne!(b["pid"], a["pid"]);
    let r = http(
        &b,
        "GET",
        "/v1/projects",
        Some(b["token"].as_str().unwrap()),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["projects"], json!([]), "{}", r.text());
    // alpha's token opens nothing in beta.
    assert_eq!(
        http(&b, "GET", "/v1/projects", Some(&token), None).status,
        401
    );

    // alpha's disk is alpha's: another VM may not take it, and the refusal
    // leaves no qemu behind.
    let gamma_dir = state.join("gamma");
    let e = vm_err(
        &state,
        &[
            "start",
            "--project",
            "gamma",
            "--disk",
            a["disk"].as_str().unwrap(),
        ],
        &[("STRATA_VM_ACCEL", "tcg")],
    );
    assert!(e.contains("is in use by another VM"), "{e}");
    assert!(e.contains(&format!("qemu pid {}", a["pid"])), "{e}");
    assert!(qemus_under(&gamma_dir).is_empty());

    // Stop: a clean power-off, nothing running, the disk stays.
    let s = vm_ok(&state, &["stop", "--project", "alpha"]);
    assert_eq!(s["clean"], true, "{s}");
    assert!(qemus_under(&state.join("alpha")).is_empty());
    let st = vm_ok(&state, &["status", "--project", "alpha"]);
    assert_eq!(st["running"], false);
    assert!(state.join("alpha/disk.img").is_file());

    // Boot again: the commit is on the disk.
    let a2 = vm_ok(&state, &["start", "--project", "alpha"]);
    assert_eq!(a2["started"], true);
    let t2 = a2["token"].as_str().unwrap();
    assert_ne!(t2, token, "a fresh token per boot");
    assert_eq!(
        http(&a2, "GET", "/v1/projects", Some(&token), None).status,
        401,
        "the old boot's token is revoked"
    );
    let r = http(
        &a2,
        "GET",
        "/v1/projects/web/cat?ref=main&path=hello.txt",
        Some(t2),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.body, b"from the host\n");
    let r = http(&a2, "GET", "/v1/projects/web/log?ref=main", Some(t2), None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains(&c1), "{}", r.text());
    assert!(r.text().contains("in the vm"), "{}", r.text());

    for p in ["alpha", "beta"] {
        let s = vm_ok(&state, &["stop", "--project", p]);
        assert_eq!(s["clean"], true, "{s}");
    }
    assert!(qemus_under(tmp.path()).is_empty(), "a qemu is left running");
    // Stopping what is not running is a clear error.
    let e = vm_err(&state, &["stop", "--project", "alpha"], &[]);
    assert!(e.contains("no VM is running for project alpha"), "{e}");
}

#[test]
fn bad_input_is_a_clear_error_and_starts_nothing() {
    require_qemu_and_kernel();
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("vms");
    let _cleanup = Cleanup(tmp.path());
    let start = |extra: &[&str], env: &[(&str, &str)]| {
        let mut args = vec!["start", "--project", "p"];
        args.extend_from_slice(extra);
        vm_err(&state, &args, env)
    };

    // No qemu on PATH.
    let empty = tmp.path().join("empty-bin");
    std::fs::create_dir(&empty).unwrap();
    let e = start(&[], &[("PATH", empty.to_str().unwrap())]);
    assert!(
        e.contains("no qemu: qemu-system-x86_64 is not on PATH"),
        "{e}"
    );
    assert!(e.contains("apt-get install qemu-system-x86"), "{e}");

    // No kernel.
    let e = start(&["--kernel", "/nonexistent/vmlinuz-0"], &[]);
    assert!(
        e.contains("no guest kernel: --kernel /nonexistent/vmlinuz-0: no such file"),
        "{e}"
    );

    // A kernel without its modules.
    let kernel = std::fs::read_dir("/boot")
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("vmlinuz-")
        })
        .unwrap();
    let nomods = tmp.path().join("nomods");
    std::fs::create_dir(&nomods).unwrap();
    let k = kernel.to_str().unwrap();
    let e = start(&["--kernel", k, "--modules", nomods.to_str().unwrap()], &[]);
    assert!(e.contains("lacks its modules"), "{e}");

    // A kernel without FUSE: its module list without fuse.
    let version = kernel.file_name().unwrap().to_string_lossy()["vmlinuz-".len()..].to_string();
    let real = Path::new("/lib/modules").join(&version);
    let nofuse = tmp.path().join("nofuse");
    std::fs::create_dir(&nofuse).unwrap();
    let dep = std::fs::read_to_string(real.join("modules.dep")).unwrap();
    let dep: String = dep
        .lines()
        .filter(|l| !l.contains("fs/fuse/"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(nofuse.join("modules.dep"), dep).unwrap();
    let e = start(&["--kernel", k, "--modules", nofuse.to_str().unwrap()], &[]);
    assert!(
        e.contains("lacks the fuse module (needed for Workspaces)"),
        "{e}"
    );

    // A disk image that is not ext4.
    let junk = tmp.path().join("junk.img");
    std::fs::write(&junk, vec![0x5au8; 1 << 20]).unwrap();
    let e = start(&["--disk", junk.to_str().unwrap()], &[]);
    assert!(e.contains("not an ext4 filesystem image"), "{e}");
    // A missing one.
    let e = start(
        &["--disk", tmp.path().join("none.img").to_str().unwrap()],
        &[],
    );
    assert!(e.contains("--disk: no such disk image"), "{e}");
    // A bad project name.
    let e = vm_err(&state, &["start", "--project", "../x"], &[]);
    assert!(e.contains("bad project name"), "{e}");

    // A Sandbox in a VM: no qemu is the same clear error, host paths are
    // refused before anything starts.
    let mut c = Command::new(BIN);
    c.args([
        "sandbox",
        "create",
        "--backend",
        "microvm",
        "--project",
        "p",
    ])
    .env("STRATA_VM_STATE", &state)
    .env("PATH", empty.to_str().unwrap());
    let o = c.output().unwrap();
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("no qemu: qemu-system-x86_64 is not on PATH"),
        "{e}"
    );
    let o = Command::new(BIN)
        .args([
            "sandbox",
            "create",
            "--backend",
            "microvm",
            "--project",
            "p",
        ])
        .args(["--rootfs", "/usr"])
        .env("STRATA_VM_STATE", &state)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("SandboxSpec::rootfs with microvm"), "{e}");
    // A Sandbox in a VM names its project.
    let o = Command::new(BIN)
        .args(["sandbox", "create", "--backend", "microvm"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("--project <P>"), "{e}");

    assert!(
        qemus_under(tmp.path()).is_empty(),
        "a qemu was left running"
    );
    // Nothing was created for the refused starts but the VM directory.
    assert!(!state.join("p/disk.img").exists());
}

#[test]
fn probe_reports_the_microvm_route() {
    require_qemu_and_kernel();
    let o = Command::new(BIN)
        .args(["--json", "probe", "--no-self-check"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let qemu = v["microvm.qemu"].as_str().unwrap();
    assert!(qemu.starts_with("QEMU emulator version"), "{qemu}");
    let k = v["microvm.kernel"].as_str().unwrap();
    assert!(k.contains("/boot/vmlinuz-"), "{k}");
    let vsock = v["microvm.vsock"].as_str().unwrap();
    assert!(vsock.contains("loopback port forward"), "{vsock}");
    assert!(v["microvm.kvm"].is_string(), "{v}");
    assert!(v["microvm.use"].is_string(), "{v}");
}

/// `strata --json ARGS` with the VMs' state root at `state`.
fn strata(state: &Path, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .arg("--json")
        .args(args)
        .env("STRATA_VM_STATE", state)
        .output()
        .expect("run strata")
}

fn strata_ok(state: &Path, args: &[&str]) -> Value {
    json_ok(strata(state, args), "strata", args)
}

/// `sh -c SCRIPT` in Workspace `ws` (found by ID through the VM's record):
/// stdout and stderr.
fn sh(state: &Path, ws: &str, script: &str) -> (String, String) {
    let o = Command::new(BIN)
        .args(["exec", ws, "--", "sh", "-c", script])
        .env("STRATA_VM_STATE", state)
        .output()
        .expect("run strata exec");
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    assert!(o.status.success(), "{script}: {out}\n{err}");
    (out, err)
}

/// `strata ws mount SB BRANCH`: the Workspace's ID.
fn mount(state: &Path, sb: &str, branch: &str) -> String {
    let v = strata_ok(state, &["ws", "mount", sb, branch]);
    v["workspace"].as_str().unwrap().to_string()
}

fn status_line<'a>(status: &'a str, key: &str) -> &'a str {
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .unwrap_or_else(|| panic!("no {key} in {status}"))
        .trim()
}

#[test]
fn sandboxes_in_a_project_vm_are_confined_share_it_and_survive_a_killed_vm() {
    require_qemu_and_kernel();
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("vms");
    let _cleanup = Cleanup(tmp.path());
    let create = || {
        let t = std::time::Instant::now();
        let v = strata_ok(
            &state,
            &[
                "sandbox",
                "create",
                "--backend",
                "microvm",
                "--project",
                "web",
            ],
        );
        (v["sandbox"].as_str().unwrap().to_string(), t.elapsed())
    };

    // The first Sandbox boots the project's VM; the second reuses it.
    let (sb1, first) = create();
    let pid = vm_ok(&state, &["status", "--project", "web"])["endpoint"]["pid"].clone();
    // The second through the SDK: SandboxSpec::microvm on an in-process
    // client (its own Store on the host is not the Sandbox's).
    let host_store = tmp.path().join("host-store");
    let o = Command::new(BIN)
        .arg("--store")
        .arg(&host_store)
        .arg("init")
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let t = std::time::Instant::now();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let sb = rt
        .block_on(async {
            let c = strata_sdk::Client::local(&host_store).await?;
            let mut spec = strata_sdk::SandboxSpec::new(&host_store);
            spec.microvm = Some(strata_sdk::MicroVm {
                project: "web".into(),
                state_root: Some(state.clone()),
                exe: Some(BIN.into()),
            });
            c.create_sandbox(spec).await
        })
        .expect("create a Sandbox in the VM through the SDK");
    let second = t.elapsed();
    assert_eq!(
        serde_json::to_value(sb.info()).unwrap()["backend"],
        "micro_vm"
    );
    let sb2 = sb.id().to_string();
    drop(sb);
    eprintln!("create-to-ready under TCG: first (VM boot) {first:?}, second {second:?}");
    let st = vm_ok(&state, &["status", "--project", "web"]);
    assert_eq!(
        st["endpoint"]["pid"], pid,
        "the second Sandbox shares the VM"
    );
    assert!(state.join(format!("web/sandboxes/{sb1}")).is_file());
    let i = strata_ok(&state, &["sandbox", "inspect", &sb1]);
    assert_eq!(i["backend"], "micro_vm", "{i}");
    let store = host_store.to_str().unwrap();
    let l = strata_ok(
        &state,
        &[
            "--store",
            store,
            "sandbox",
            "list",
            "--label",
            "strata.project=web",
        ],
    );
    let mut ids: Vec<&str> = l
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    ids.sort();
    let mut want = vec![sb1.as_str(), sb2.as_str()];
    want.sort();
    assert_eq!(ids, want, "{l}");
    assert_eq!(i["running"], true, "{i}");
    let ws1 = mount(&state, &sb1, "web/main");
    let ws2 = mount(&state, &sb2, "web/main");

    // As uid 1500 with no capabilities, read from inside.
    let (status, _) = sh(&state, &ws1, "cat /proc/self/status");
    assert_eq!(status_line(&status, "Uid"), "1500\t1500\t1500\t1500");
    for cap in ["CapEff", "CapPrm", "CapInh", "CapAmb"] {
        assert_eq!(status_line(&status, cap), "0000000000000000", "{cap}");
    }
    // One kernel, the VM's (not the host's), under both Sandboxes.
    let boot = |ws: &str| sh(&state, ws, "cat /proc/sys/kernel/random/boot_id").0;
    let host_boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    assert_eq!(boot(&ws1), boot(&ws2));
    assert_ne!(boot(&ws1), host_boot);
    // The host's userland, read-only, and none of its private /etc.
    let os = sh(&state, &ws1, "cat /usr/lib/os-release").0;
    assert_eq!(os, std::fs::read_to_string("/usr/lib/os-release").unwrap());
    let (out, _) = sh(
        &state,
        &ws1,
        "touch /usr/strata-vm-probe 2>&1; test -e /etc/shadow && echo shadow-visible; true",
    );
    assert!(out.contains("Read-only file system"), "{out}");
    assert!(!out.contains("shadow-visible"), "{out}");
    assert!(!Path::new("/usr/strata-vm-probe").exists());

    // Attacks: unmount the Workspace, make a user namespace.
    let (out, err) = sh(
        &state,
        &ws1,
        "echo kept > /workspace/a.txt; umount /workspace; umount -l /workspace; \
         grep -c ' /workspace .* - fuse ' /proc/self/mountinfo; cat /workspace/a.txt",
    );
    assert_eq!(out, "1\nkept\n", "the Workspace is still mounted: {err}");
    let (out, err) = sh(
        &state,
        &ws1,
        "readlink /proc/self/ns/user; unshare -U readlink /proc/self/ns/user; \
         cat /proc/sys/user/max_user_namespaces",
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "no second user namespace: {out}\n{err}");
    assert!(lines[0].starts_with("user:["), "{out}");
    assert_eq!(lines[1], "0", "the guest's sysctl closes them too");
    assert!(err.contains("Operation not permitted"), "{err}");

    // Another project: its own VM (another kernel). A command spinning on
    // the CPU there does not stop web's VM from answering.
    let args = "sandbox create --backend microvm --project api".split(' ');
    let api = strata_ok(&state, &args.collect::<Vec<_>>())["sandbox"]
        .as_str()
        .unwrap()
        .to_string();
    let api_pid = vm_ok(&state, &["status", "--project", "api"])["endpoint"]["pid"].clone();
    assert_ne!(api_pid, pid);
    let ws_api = mount(&state, &api, "api/main");
    assert_ne!(boot(&ws_api), boot(&ws1));
    let spin = strata_ok(
        &state,
        &[
            "exec",
            "-d",
            "--timeout",
            "5m",
            &ws_api,
            "--",
            "sh",
            "-c",
            "while :; do :; done",
        ],
    )["exec"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(sh(&state, &ws1, "echo alive").0, "alive\n");
    // The exec is found by its ID in the other VM, and cancelled there.
    let o = strata(&state, &["exec", "cancel", &spin]);
    assert!(o.status.success(), "{o:?}");
    let w = strata(&state, &["exec", "wait", &spin]);
    assert!(!w.status.success(), "a cancelled exec: {w:?}");
    // Nor does one filling its memory there; the guest's OOM killer ends it
    // at its Sandbox's limit and the VM answers after.
    memory_hog(&state, "api", &ws_api, &ws1);
    // The SDK's close of a VM's last Sandbox stops the VM; the disk stays.
    rt.block_on(async {
        let sb = strata_sdk::microvm::open(&api, Some(state.clone())).await?;
        let sb = sb.expect("api's record names it");
        assert_eq!(sb.vm_project(), Some("api"));
        sb.close().await
    })
    .expect("close api's Sandbox through the SDK");
    assert!(!state.join(format!("api/sandboxes/{api}")).exists());
    assert!(
        qemus_under(&state.join("api")).is_empty(),
        "api's qemu runs"
    );
    assert!(state.join("api/disk.img").is_file());
    assert_eq!(
        vm_ok(&state, &["status", "--project", "api"])["running"],
        false
    );

    // `ws list` finds the VM Sandbox's Workspace beside the host's.
    let l = strata_ok(&state, &["ws", "list"]);
    let row = l
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["workspace"] == ws1.as_str());
    let row = row.unwrap_or_else(|| panic!("ws list lacks {ws1}: {l}"));
    assert_eq!(
        (&row["branch"], &row["sandbox"]),
        (&json!("web/main"), &json!(sb1)),
        "{row}"
    );
    // Commit, and read it back from the host through the VM's API.
    let c = strata_ok(&state, &["ws", "commit", &ws1, "-m", "in a vm sandbox"]);
    let commit = c["commit"].as_str().unwrap().to_string();
    let ep = vm_ok(&state, &["status", "--project", "web"])["endpoint"].clone();
    let token = ep["token"].as_str().unwrap();
    let r = http(
        &ep,
        "GET",
        "/v1/projects/web/cat?ref=main&path=a.txt",
        Some(token),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.body, b"kept\n");
    // The second Sandbox's Workspace is another view of the same Store.
    let (out, _) = sh(&state, &ws2, "test -e /workspace/a.txt || echo absent");
    assert_eq!(out, "absent\n", "ws2 was mounted before the commit");

    // Uncommitted work (flushed to the guest's disk), then a kill -9 of qemu.
    sh(&state, &ws1, "echo pending > /workspace/b.txt; sync");
    let qemu = pid.as_u64().unwrap().to_string();
    assert!(Command::new("kill")
        .args(["-9", &qemu])
        .status()
        .unwrap()
        .success());
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !qemus_under(tmp.path()).is_empty() && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let o = strata(&state, &["sandbox", "inspect", &sb1]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("the VM of project web is not running"), "{e}");
    assert!(e.contains("strata vm start --project web"), "{e}");

    // Start again: the disk, its history and the Sandbox's record are there.
    let a = vm_ok(&state, &["start", "--project", "web"]);
    assert_eq!(a["started"], true);
    let t = a["token"].as_str().unwrap();
    let r = http(&a, "GET", "/v1/projects/web/log?ref=main", Some(t), None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains(&commit), "{}", r.text());
    // The Sandbox comes back as a native one does after its daemon died,
    // with its Workspace and the uncommitted file.
    let i = strata_ok(&state, &["sandbox", "inspect", &sb1]);
    assert_eq!(i["running"], false, "{i}");
    let r = strata_ok(&state, &["sandbox", "restart", &sb1]);
    assert_eq!(r["workspaces"][0]["workspace"], ws1.as_str(), "{r}");
    assert_eq!(r["unrecovered"], json!([]), "{r}");
    let s = strata_ok(&state, &["ws", "status", &ws1]);
    assert_eq!(
        s["changes"],
        json!([{"path": "b.txt", "kind": "added"}]),
        "{s}"
    );
    assert_eq!(sh(&state, &ws1, "cat /workspace/b.txt").0, "pending\n");

    // rm closes it in the VM and drops the host's record; the VM stops
    // with its last Sandbox, its disk stays.
    strata_ok(&state, &["sandbox", "rm", &sb1, "--discard"]);
    assert!(!state.join(format!("web/sandboxes/{sb1}")).exists());
    let st = vm_ok(&state, &["status", "--project", "web"]);
    assert_eq!(st["running"], true, "sb2 still runs in it");
    let o = strata(&state, &["sandbox", "inspect", &sb1]);
    assert!(!o.status.success());
    let o = strata(&state, &["sandbox", "rm", &sb2, "--discard"]);
    assert!(o.status.success(), "{o:?}");
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("stopped the VM of project web: its last Sandbox closed"),
        "{e}"
    );
    assert!(!state.join(format!("web/sandboxes/{sb2}")).exists());
    let st = vm_ok(&state, &["status", "--project", "web"]);
    assert_eq!(st["running"], false, "{st}");
    assert!(state.join("web/disk.img").is_file());
    assert!(qemus_under(tmp.path()).is_empty(), "a qemu is left running");
}

/// In project `hog`'s VM (Workspace `hog_ws`): a command that holds 128
/// MiB until told to go on, then fills memory without bound (`tail` keeps
/// all of a stream without newlines). Another project's Workspace
/// (`other_ws`) answers an exec while the hog holds (it certainly runs
/// then: it waits for `go`) and while it grows (under TCG the growth to
/// the limit takes 10-20 s). The hog dies by the guest kernel's cgroup OOM
/// killer at its Sandbox's memory limit (half the VM's RAM), and its VM,
/// Sandbox and Workspace answer after.
fn memory_hog(state: &Path, hog: &str, hog_ws: &str, other_ws: &str) {
    let script = "{ head -c 128M /dev/zero; touch filled; \
        while [ ! -e go ]; do sleep 0.1; done; exec cat /dev/zero; } | tail";
    let mut args: Vec<&str> = "exec -d --timeout 5m".split(' ').collect();
    args.extend([hog_ws, "--", "sh", "-c", script]);
    let id = strata_ok(state, &args)["exec"].as_str().unwrap().to_owned();
    // At most 2 minutes, then `test` fails the exec and the test.
    let held = "i=0; while [ ! -e filled ] && [ $i -lt 600 ]; do sleep 0.2; i=$((i+1)); done; \
        test -e filled && echo held";
    assert_eq!(sh(state, hog_ws, held).0, "held\n");
    let console = state.join(hog).join("console.log");
    let killed = || {
        std::fs::read_to_string(&console)
            .unwrap_or_default()
            .lines()
            .find(|l| l.contains("Killed process") && l.contains("(tail)"))
            .map(str::to_string)
    };
    let answers = |when: &str| {
        let t = std::time::Instant::now();
        let out = sh(state, other_ws, &format!("echo {when}")).0;
        let took = t.elapsed();
        assert_eq!(out, format!("{when}\n"));
        assert!(took.as_secs() < 30, "the other VM took {took:?} ({when})");
        let by_then = ["running", "killed"][killed().is_some() as usize];
        eprintln!("the other VM answered in {took:?} {when} (hog {by_then} by then)");
    };
    answers("while-held");
    sh(state, hog_ws, "touch go");
    answers("while-growing");
    let w = strata(state, &["exec", "wait", &id]);
    let s: Value = serde_json::from_slice(&w.stdout).expect("exec wait's JSON");
    // sh reports its last command, tail, killed by SIGKILL: 128 + 9.
    assert_eq!(s["code"], 137, "{s}");
    // The guest kernel says who killed it and at which limit.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while killed().is_none() && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let line = killed().expect("the guest's console names the OOM kill of tail");
    assert!(line.contains("Memory cgroup out of memory"), "{line}");
    eprintln!("hog: {}", line.trim());
    assert_eq!(sh(state, hog_ws, "rm filled go; echo fine").0, "fine\n");
    answers("after");
}
