//! `strata --remote URL …` (docs/server.md, "The CLI through a server"):
//! the same command through a real `strata serve` prints byte for byte what
//! it prints on the Store directly, `--json` included; a wrong token is the
//! unauthorized message and exit 1; a command that cannot work through a
//! server is refused with exit 2 and nothing happens.

mod common;

mod serve_common;

use common::Env;
use serve_common::*;

/// A Store with two projects, history, a symlink, a mode, a binary file,
/// a hard link and a branch that moved on.
fn populated() -> Env {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(src.join("lib/deep")).unwrap();
    std::fs::write(src.join("README"), "hello\n").unwrap();
    std::fs::write(src.join("lib/a.txt"), "a\n").unwrap();
    std::fs::write(src.join("lib/deep/b.bin"), [0u8, 159, 146, 150, 255]).unwrap();
    std::fs::hard_link(src.join("lib/a.txt"), src.join("lib/a-link.txt")).unwrap();
    std::os::unix::fs::symlink("lib/a.txt", src.join("latest")).unwrap();
    std::fs::set_permissions(
        src.join("lib/a.txt"),
        std::os::unix::fs::PermissionsExt::from_mode(0o640),
    )
    .unwrap();
    env.ok(&["project", "create", "web", "--from", src.to_str().unwrap()]);
    env.ok(&["branch", "create", "web/agent"]);
    std::fs::write(src.join("README"), "hello again\n").unwrap();
    std::fs::remove_file(src.join("lib/deep/b.bin")).unwrap();
    std::fs::write(src.join("new file.txt"), "spaces & symbols?#\n").unwrap();
    env.ok(&[
        "snapshot",
        "web/agent",
        src.to_str().unwrap(),
        "-m",
        "second\n\nwith a body",
    ]);
    env.ok(&["project", "create", "other", "-m", "empty"]);
    env
}

/// `strata ARGS` on the Store and `strata --remote URL ARGS` through the
/// server: (status, stdout, stderr) of each.
fn both(env: &Env, s: &Server, token: &str, args: &[&str]) -> (Output, Output) {
    let local = run(env.cmd(args));
    let url = url_of(s);
    let mut c = env.cmd(&[]);
    c.env("STRATA_TOKEN", token)
        .arg("--remote")
        .arg(&url)
        .args(args);
    (local, run(c))
}

#[test]
fn read_commands_print_the_same_bytes_through_the_server() {
    let env = populated();
    let (t, _) = token(&env, &[]);
    let s = Server::unix(&env);
    let head = head(&env, "web/main");
    let short = &head[..10];
    let cases: Vec<Vec<&str>> = vec![
        vec!["log", "web/agent"],
        vec!["log", "web/agent", "-n", "1"],
        vec!["log", short],
        vec!["ls", "web/main"],
        vec!["ls", "web/main", "lib"],
        vec!["ls", "web/main", "lib/deep/b.bin"],
        vec!["ls", "web/agent", "latest"],
        vec!["cat", "web/main", "README"],
        vec!["cat", "web/main", "lib/deep/b.bin"],
        vec!["cat", "web/agent", "new file.txt"],
        vec!["diff", "web/main", "web/agent"],
        vec!["diff", short, "web/agent"],
        vec!["branch", "list"],
        vec!["branch", "list", "web"],
        vec!["project", "list"],
    ];
    for args in &cases {
        for json in [false, true] {
            let mut a: Vec<&str> = if json { vec!["--json"] } else { vec![] };
            a.extend(args.iter().copied());
            let (local, remote) = both(&env, &s, &t, &a);
            assert_eq!(local.0, Some(0), "local {a:?}: {}", local.2);
            assert_eq!(remote.0, Some(0), "remote {a:?}: {}", remote.2);
            assert!(!local.1.is_empty(), "{a:?} printed nothing");
            assert!(
                local.1 == remote.1,
                "strata {a:?} differs through the server:\n--- local\n{}\n--- remote\n{}",
                String::from_utf8_lossy(&local.1),
                String::from_utf8_lossy(&remote.1)
            );
        }
    }
    // Errors are errors both ways, with the same exit codes.
    for args in [
        &["cat", "web/main", "lib"][..],
        &["cat", "web/main", "latest"],
        &["ls", "web/main", "no/such"],
        &["log", "web/nosuch"],
        &["log", "deadbeef00"],
        &["branch", "list", "nosuch"],
    ] {
        let (local, remote) = both(&env, &s, &t, args);
        assert_eq!(local.0, Some(1), "local {args:?}");
        assert_eq!(remote.0, Some(1), "remote {args:?}: {}", remote.2);
        assert!(remote.2.starts_with("strata: error: "), "{}", remote.2);
        assert!(remote.1.is_empty());
    }
    for args in [&["log", "zz"][..], &["branch", "create", "web/Bad"]] {
        let (local, remote) = both(&env, &s, &t, args);
        assert_eq!(
            (local.0, remote.0),
            (Some(2), Some(2)),
            "{args:?}: {}",
            remote.2
        );
    }
}

#[test]
fn writes_through_the_server_land_in_the_store() {
    let env = populated();
    let (t, _) = token(&env, &[]);
    let s = Server::unix(&env);
    let url = url_of(&s);
    let remote = |args: &[&str]| {
        let mut c = env.cmd(&[]);
        c.env("STRATA_TOKEN", &t)
            .args(["--remote", &url])
            .args(args);
        run(c)
    };
    // Same JSON shape as locally, and the Store has it.
    let o = remote(&[
        "--json",
        "branch",
        "create",
        "web/fix",
        "--from",
        "web/agent",
    ]);
    assert_eq!(o.0, Some(0), "{}", o.2);
    let v: serde_json::Value = serde_json::from_slice(&o.1).unwrap();
    let agent = head(&env, "web/agent");
    assert_eq!(v["commit"], agent.as_str());
    assert_eq!(v["from"], "web/agent");
    assert_eq!(head(&env, "web/fix"), agent);
    // A branch of another project by commit id.
    let o = remote(&["branch", "create", "other/copy", "--from", &agent[..12]]);
    assert_eq!(o.0, Some(0), "{}", o.2);
    assert_eq!(head(&env, "other/copy"), agent);
    let o = remote(&["--json", "branch", "delete", "web/fix"]);
    assert_eq!(o.0, Some(0), "{}", o.2);
    let v: serde_json::Value = serde_json::from_slice(&o.1).unwrap();
    assert_eq!(v["head"], agent.as_str());
    let branches = env.json(&["branch", "list", "web"]);
    assert!(
        !branches
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["name"] == "fix"),
        "{branches}"
    );
    let o = remote(&["--json", "project", "create", "api", "-m", "first"]);
    assert_eq!(o.0, Some(0), "{}", o.2);
    let v: serde_json::Value = serde_json::from_slice(&o.1).unwrap();
    assert_eq!(v["branch"], "api/main");
    let log = env.json(&["log", "api/main"]);
    assert_eq!(log[0]["message"], "first");
    assert_eq!(log[0]["commit"], v["commit"]);
}

#[test]
fn a_wrong_token_is_unauthorized_and_changes_nothing() {
    let env = populated();
    let (t, id) = token(&env, &[]);
    let s = Server::unix(&env);
    let url = url_of(&s);
    let before = env.ok(&["branch", "list"]);
    for (how, args) in [
        ("env", vec!["branch", "create", "web/x"]),
        ("env", vec!["log", "web/main"]),
        ("file", vec!["project", "list"]),
    ] {
        let mut c = env.cmd(&[]);
        c.args(["--remote", &url]);
        if how == "env" {
            c.env("STRATA_TOKEN", format!("{t}x"));
        } else {
            let f = env.path("wrong-token");
            std::fs::write(&f, "not-a-token\n").unwrap();
            c.env_remove("STRATA_TOKEN").arg("--token-file").arg(&f);
        }
        c.args(&args);
        let o = run(c);
        assert_eq!(o.0, Some(1), "{args:?}: {}", o.2);
        assert!(o.2.contains("refused the token (401)"), "{}", o.2);
        assert!(o.2.contains("strata token create"), "{}", o.2);
        assert!(!o.2.contains(&t), "the token is never printed: {}", o.2);
        assert!(o.1.is_empty());
    }
    assert_eq!(env.ok(&["branch", "list"]), before, "nothing changed");
    // A revoked token too; a good one from a file works.
    let f = env.path("token");
    std::fs::write(&f, format!("{t}\n")).unwrap();
    let mut c = env.cmd(&["--remote", &url, "--token-file"]);
    c.arg(&f).args(["branch", "list"]);
    assert_eq!(run(c).1, before);
    env.ok(&["token", "revoke", &id]);
    let mut c = env.cmd(&["--remote", &url, "--token-file"]);
    c.arg(&f).args(["branch", "list"]);
    let o = run(c);
    assert_eq!(o.0, Some(1));
    assert!(o.2.contains("refused the token (401)"), "{}", o.2);
    // No token at all says how to give one.
    let mut c = env.cmd(&["--remote", &url, "branch", "list"]);
    c.env_remove("STRATA_TOKEN");
    let o = run(c);
    assert_eq!(o.0, Some(1));
    assert!(o.2.contains("STRATA_TOKEN"), "{}", o.2);
}

#[test]
fn local_only_commands_refuse_remote_with_exit_2() {
    let env = populated();
    let (t, _) = token(&env, &[]);
    let s = Server::unix(&env);
    let url = url_of(&s);
    let stats_before = env.json(&["stats"]);
    let out = env.path("out");
    for args in [
        vec!["gc"],
        vec!["fsck"],
        vec!["stats"],
        vec!["init"],
        vec!["mount", "web/main", out.to_str().unwrap()],
        vec!["run", "web/main", "--", "true"],
        vec!["serve"],
        vec!["token", "create"],
    ] {
        // Through STRATA_REMOTE as well as the flag.
        let mut c = env.cmd(&[]);
        c.env("STRATA_TOKEN", &t)
            .env("STRATA_REMOTE", &url)
            .args(&args);
        let o = run(c);
        assert_eq!(o.0, Some(2), "{args:?}: {}", o.2);
        assert!(
            o.2.contains("cannot run through a server"),
            "{args:?}: {}",
            o.2
        );
        assert!(o.1.is_empty());
    }
    assert!(!out.exists(), "mount made nothing");
    assert_eq!(env.json(&["stats"]), stats_before, "nothing changed");
}

#[test]
fn a_bad_remote_url_or_a_dead_server_is_a_clear_error() {
    let env = populated();
    for (url, needle) in [
        ("ftp://x:1", "unknown scheme"),
        ("unix://relative.sock", "absolute"),
        ("http://127.0.0.1", "port"),
    ] {
        let mut c = env.cmd(&["--remote", url, "branch", "list"]);
        c.env("STRATA_TOKEN", "t");
        let o = run(c);
        assert_eq!(o.0, Some(1), "{url}: {}", o.2);
        assert!(o.2.contains(needle), "{url}: {}", o.2);
    }
    let gone = env.path("gone.sock");
    let mut c = env.cmd(&[
        "--remote",
        &format!("unix://{}", gone.display()),
        "log",
        "web/main",
    ]);
    c.env("STRATA_TOKEN", "t");
    let o = run(c);
    assert_eq!(o.0, Some(1));
    assert!(o.2.contains("cannot reach strata serve"), "{}", o.2);
}

#[test]
fn https_with_the_pinned_fingerprint_works_and_any_other_is_refused() {
    let env = populated();
    let (t, _) = token(&env, &[]);
    let s = Server::start(&env, &["--listen", "tcp:127.0.0.1:0", "--tls-generate"]);
    let fp = s.ready["fingerprint"]
        .as_str()
        .unwrap_or_else(|| panic!("no fingerprint in {}", s.ready))
        .to_string();
    let url = format!("https://{}", s.addr.strip_prefix("tcp:").unwrap());
    let with = |pin: &str, args: &[&str]| {
        let mut c = env.cmd(&[]);
        c.env("STRATA_TOKEN", &t)
            .args(["--remote", &url, "--remote-fingerprint", pin])
            .args(args);
        run(c)
    };
    let local = run(env.cmd(&["--json", "log", "web/agent"]));
    let o = with(&fp, &["--json", "log", "web/agent"]);
    assert_eq!(o.0, Some(0), "{}", o.2);
    assert_eq!(o.1, local.1, "the same bytes over TLS");
    // The openssl form (colons, upper case) names the same certificate.
    let hex = fp.strip_prefix("sha256:").unwrap();
    let colons: Vec<String> = hex
        .as_bytes()
        .chunks(2)
        .map(|p| String::from_utf8_lossy(p).to_uppercase())
        .collect();
    assert_eq!(with(&colons.join(":"), &["branch", "list"]).0, Some(0));
    // One digit off: refused before any request, naming both.
    let last = hex.chars().last().unwrap();
    let wrong = format!(
        "{}{}",
        &fp[..fp.len() - 1],
        if last == '0' { '1' } else { '0' }
    );
    let before = env.ok(&["branch", "list"]);
    let o = with(&wrong, &["branch", "create", "web/pinned"]);
    assert_eq!(o.0, Some(1), "{}", o.2);
    assert!(o.2.contains("not the pinned"), "{}", o.2);
    assert!(o.2.contains(&fp), "names the certificate it saw: {}", o.2);
    assert_eq!(env.ok(&["branch", "list"]), before, "nothing was created");
    // Without a pin, a self-signed certificate does not chain to the
    // system's CAs: refused too.
    let mut c = env.cmd(&["--remote", &url, "branch", "list"]);
    c.env("STRATA_TOKEN", &t)
        .env_remove("STRATA_REMOTE_FINGERPRINT");
    let o = run(c);
    assert_eq!(o.0, Some(1), "{}", o.2);
}

/// `strata sandbox create|list|inspect|logs|rm` through the server: the
/// same JSON shapes as locally, the Sandbox real (listed by the local
/// command on the same state root), and gone after `rm`.
#[test]
fn sandbox_commands_through_the_server() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test creates a native Sandbox: run it as root (CI does)"
    );
    let env = populated();
    let (t, _) = token(&env, &[]);
    let state = tempfile::Builder::new()
        .prefix("strata-cli-remote-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let sock = env.path("s.sock");
    let s = Server::start_with(
        &env,
        &["--listen", &format!("unix:{}", sock.display())],
        &[("STRATA_SANDBOX_STATE", state.path())],
    );
    let url = url_of(&s);
    let remote = |args: &[&str]| {
        let mut c = env.cmd(&[]);
        c.env("STRATA_TOKEN", &t)
            .args(["--remote", &url])
            .args(args);
        let o = run(c);
        assert_eq!(o.0, Some(0), "{args:?}: {}", o.2);
        o.1
    };
    let local = |args: &[&str]| {
        let mut c = env.cmd(args);
        c.env("STRATA_SANDBOX_STATE", state.path());
        let o = run(c);
        assert_eq!(o.0, Some(0), "{args:?}: {}", o.2);
        o.1
    };
    let json = |b: Vec<u8>| -> serde_json::Value { serde_json::from_slice(&b).unwrap() };
    let created = json(remote(&[
        "--json",
        "sandbox",
        "create",
        "--label",
        "via=remote",
    ]));
    let id = created["sandbox"].as_str().unwrap().to_string();
    let keys =
        |v: &serde_json::Value| -> Vec<String> { v.as_object().unwrap().keys().cloned().collect() };
    let r = json(remote(&[
        "--json",
        "sandbox",
        "list",
        "--label",
        "via=remote",
    ]));
    let l = json(local(&[
        "--json",
        "sandbox",
        "list",
        "--label",
        "via=remote",
    ]));
    assert_eq!(r.as_array().unwrap().len(), 1, "{r}");
    assert_eq!(r[0]["id"], id.as_str());
    assert_eq!(
        l[0]["id"],
        id.as_str(),
        "the local command sees the same Sandbox"
    );
    assert_eq!(keys(&r[0]), keys(&l[0]), "the same JSON shape");
    for k in [
        "id",
        "name",
        "labels",
        "backend",
        "state",
        "created_unix_ms",
    ] {
        assert_eq!(r[0][k], l[0][k], "{k}");
    }
    let i = json(remote(&["--json", "sandbox", "inspect", &id]));
    assert_eq!(i["running"], true);
    let logs = json(remote(&["--json", "sandbox", "logs", &id]));
    assert!(
        logs["log"]
            .as_str()
            .unwrap()
            .contains("STRATA-DAEMON-READY"),
        "{logs}"
    );
    remote(&["sandbox", "rm", &id]);
    let l = json(local(&[
        "--json",
        "sandbox",
        "list",
        "--label",
        "via=remote",
    ]));
    assert_eq!(l.as_array().unwrap().len(), 0, "removed: {l}");
}
