//! Schemathesis (PyPI) against a real Sandbox's daemon and the daemon's
//! published document, docs/api/openapi.yaml: every operation but
//! `shutdown` (which would end the run), schema-valid and schema-violating
//! requests, all of schemathesis's checks. Passes only when it reports no
//! failure at all; fails loudly when schemathesis is missing (scripts/test
//! installs it into target/py-venv from scripts/requirements-test.txt).
//!
//! schemathesis speaks TCP and the daemon listens on its Sandbox's Unix
//! socket, so this test relays one to the other on 127.0.0.1 (bytes
//! copied both ways, nothing interpreted). The runner is
//! `scripts/schemathesis`, which takes the document, the base URL and the
//! token file, so the same script serves `strata serve`'s
//! `/v1/openapi.json`.
//!
//! `STRATA_SCHEMATHESIS_EXAMPLES` (default 25) and
//! `STRATA_SCHEMATHESIS_SEED` (default 1, so a run is reproducible) tune
//! it. Its own `main` (harness = false): the binary is re-executed as the
//! Sandbox init, the daemon and the exec helper.

use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;

use strata_sdk::{Sandbox, SandboxSpec, Store};

fn main() {
    strata_sdk::maybe_run_internal();
    assert!(
        rustix::process::geteuid().is_root(),
        "this test creates a native Sandbox: run it as root (CI does)"
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let rt = tokio::runtime::Runtime::new().expect("tokio");
    let tmp = tempfile::tempdir().expect("tempdir");
    let (sb, socket, token_file) = rt.block_on(async {
        let src = tmp.path().join("src");
        std::fs::create_dir_all(src.join("dir")).unwrap();
        std::fs::write(src.join("hello.txt"), b"hello\n").unwrap();
        std::fs::write(src.join("dir/a.txt"), b"a\n").unwrap();
        let store = Store::create(tmp.path().join("store")).await.unwrap();
        store.create_project_from("p", &src).await.unwrap();
        let sb = Sandbox::create(SandboxSpec::new(store.dir()))
            .await
            .expect("create a Sandbox");
        // One Workspace mounted, so that execs reach the exec helper.
        sb.mount("p/main", None).await.expect("mount");
        let socket = match &sb.info().endpoint {
            Some(strata_sandbox::Endpoint::Unix { path }) => path.clone(),
            other => panic!("a native Sandbox's daemon listens on a Unix socket, not {other:?}"),
        };
        let token_file = sb.info().token_file.clone();
        (sb, socket, token_file)
    });
    let port = relay(socket);

    let examples = std::env::var("STRATA_SCHEMATHESIS_EXAMPLES").unwrap_or_else(|_| "25".into());
    let seed = std::env::var("STRATA_SCHEMATHESIS_SEED").unwrap_or_else(|_| "1".into());
    let report = tmp.path().join("report");
    let status = Command::new("bash")
        .arg(root.join("scripts/schemathesis"))
        .arg("--schema")
        .arg(root.join("docs/api/openapi.yaml"))
        .args(["--url", &format!("http://127.0.0.1:{port}")])
        .arg("--token-file")
        .arg(&token_file)
        .args(["--max-examples", &examples, "--seed", &seed])
        .args(["--exclude-operation-id", "shutdown"])
        .arg("--report-dir")
        .arg(&report)
        .status()
        .expect("run scripts/schemathesis");

    // The daemon is still up after all that, and still answers.
    let health = rt.block_on(sb.health());
    rt.block_on(async {
        let _ = sb.close_discard().await;
    });
    let health = health.expect("the daemon answers after the run");
    assert_eq!(health.status, "ok");
    assert!(
        status.success(),
        "schemathesis reported failures against docs/api/openapi.yaml ({status}); its report is above (rerun with STRATA_SCHEMATHESIS_SEED={seed} to reproduce)"
    );
    println!("test schemathesis_finds_no_failure ... ok");
}

/// Relay 127.0.0.1:PORT to the Unix socket, one thread pair per
/// connection, until the process ends; returns the port.
fn relay(socket: PathBuf) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(tcp) = conn else { continue };
            let Ok(unix) = UnixStream::connect(&socket) else {
                continue;
            };
            pipe(tcp, unix);
        }
    });
    port
}

fn pipe(tcp: TcpStream, unix: UnixStream) {
    let (mut t_in, mut u_out) = (tcp.try_clone().unwrap(), unix.try_clone().unwrap());
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut t_in, &mut u_out);
        let _ = u_out.shutdown(std::net::Shutdown::Write);
    });
    let (mut u_in, mut t_out) = (unix, tcp);
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut u_in, &mut t_out);
        let _ = t_out.shutdown(std::net::Shutdown::Write);
    });
}
