//! Unit tests of [`super`]: the settings' encoding and the helper's argv.

use super::*;

#[test]
fn settings_roundtrip() {
    let env = vec![("A".into(), "b=c".into()), ("EMPTY".into(), "".into())];
    let argv = vec![OsString::from("/bin/echo"), "--".into(), "x=y".into()];
    let enc = encode_settings("{}", &env, &argv);
    let (json, e, a) = decode_settings(&enc).unwrap();
    assert_eq!(json, "{}");
    assert_eq!(e, env);
    assert_eq!(a, argv);
    // Through a real memfd, read from offset 0 whatever the writer's
    // offset.
    let fd = settings_memfd(&enc).unwrap();
    let n = OsString::from(fd.as_raw_fd().to_string());
    std::mem::forget(fd); // read_settings takes ownership
    let (json, e, a) = read_settings(Some(&n)).unwrap();
    assert_eq!((json.as_str(), e, a), ("{}", env, argv));
}

#[test]
fn argv_roundtrip() {
    let env = vec![("A".into(), "b=c".into())];
    let argv = vec![OsString::from("/bin/echo"), "--".into()];
    let enc = encode_argv("sub", "{}", &env, &argv);
    assert_eq!(enc[0], "sub");
    let (json, e, a) = decode_argv(&enc[1..]).unwrap();
    assert_eq!((json.as_str(), e, a), ("{}", env, argv));
}

#[test]
fn bad_settings_are_an_error() {
    assert!(decode_settings(b"").is_err());
    assert!(decode_settings(b"{}\0NOEQ\0--\0").is_err());
    assert!(decode_settings(b"{}\0A=b\0").is_err());
    assert!(decode_settings(b"{}\0--").is_err());
    assert!(read_settings(Some(&"1".into())).is_err());
    assert!(read_settings(Some(&"x".into())).is_err());
    assert!(read_settings(None).is_err());
}

#[test]
fn the_helpers_argv_is_its_role_and_a_number() {
    let spec = ExecSpec {
        argv: vec!["/bin/echo".into(), "argv-secret".into()],
        env: vec![("TOKEN".into(), "env-secret".into())],
        cwd: "/cwd-secret".into(),
        identity: Identity::default(),
        rlimits: vec![],
        session: Session::Inherit,
    };
    let h = exec_helper_command(Path::new("/bin/true"), &spec).unwrap();
    let args: Vec<&OsStr> = h.command.get_args().collect();
    assert_eq!(args.len(), 2, "{args:?}");
    assert_eq!(args[0], EXEC_ARG);
    assert!(
        args[1].as_bytes().iter().all(u8::is_ascii_digit),
        "{args:?}"
    );
    assert_eq!(h.command.get_envs().count(), 0);
    // The helper reads them from the memfd instead (a duplicate here:
    // the command still owns the original).
    let n: RawFd = args[1].to_str().unwrap().parse().unwrap();
    // SAFETY: `n` is the memfd `h.command` owns, open until it drops.
    let dup = rustix::io::fcntl_dupfd_cloexec(unsafe { BorrowedFd::borrow_raw(n) }, 3).unwrap();
    let dup = OsString::from(std::mem::ManuallyDrop::new(dup).as_raw_fd().to_string());
    let (json, env, argv) = read_settings(Some(&dup)).unwrap();
    assert!(json.contains("/cwd-secret"));
    assert_eq!(env, spec.env);
    assert_eq!(argv, spec.argv);
}

#[test]
fn reports() {
    assert_eq!(parse_report(b""), None);
    let f = Failure {
        stage: "exec".into(),
        message: "m".into(),
        errno: Some(2),
    };
    assert_eq!(parse_report(&serde_json::to_vec(&f).unwrap()), Some(f));
    assert!(parse_report(b"garbage").is_some());
    assert!(parse_report(&vec![b'x'; MAX_REPORT_BYTES + 1]).is_some());
}
