//! The Backend contract cases where a start fails or a request is refused
//! (docs/design.md §3: B2 names and labels, B5 the marker wait, B10 ids),
//! part of [`super`]'s suite and listed in its `CASES`.

use super::*;

/// B5: a daemon that exits before its marker ends the wait at once, with
/// its log.
pub fn dies_before_marker(h: &dyn Harness) {
    let b = h.backend();
    let info = b.create(&h.request(None)).unwrap();
    b.install_daemon(&info.id, &install(h, &info, "die"))
        .unwrap();
    let t0 = Instant::now();
    // A long deadline: the daemon's exit must end the wait, not the deadline.
    let e = b.start(&info.id, Duration::from_secs(30)).unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    let BackendError::Step { step, log_tail, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!(*step, "start");
    assert!(
        log_tail.contains("simulated failure before the marker"),
        "{e}"
    );
    assert!(
        e.to_string().contains("exited before its startup marker"),
        "{e}"
    );
    let opened = b.open(&info.id).unwrap();
    assert_eq!(opened.state, State::Stopped);
    h.check_stopped(&opened);
    b.delete(&info.id).unwrap();
    assert!(!h.host_path(&info, &info.daemon.state_dir).exists());
    h.check_deleted(&opened);
}

/// B5: no marker by the deadline: a typed error with the log, nothing
/// left running.
pub fn no_marker_hits_the_deadline(h: &dyn Harness) {
    let b = h.backend();
    let info = b.create(&h.request(None)).unwrap();
    b.install_daemon(&info.id, &install(h, &info, "hang"))
        .unwrap();
    // The deadline leaves the fake daemon time to start and log its line
    // first: 800 ms did not, once, in a microVM guest under TCG emulation
    // on a host at load 35 (its log was still empty at the deadline).
    let deadline = Duration::from_secs(3);
    let t0 = Instant::now();
    let e = b.start(&info.id, deadline).unwrap_err();
    let took = t0.elapsed();
    assert!(
        took >= deadline && took < deadline + Duration::from_secs(8),
        "{took:?}"
    );
    let BackendError::NoMarker { log_tail, .. } = &e else {
        panic!("{e}")
    };
    assert!(log_tail.contains("hanging without a marker"), "{e}");
    let opened = b.open(&info.id).unwrap();
    assert_eq!(opened.state, State::Stopped);
    h.check_stopped(&opened);
    b.delete(&info.id).unwrap();
    h.check_deleted(&opened);
}

/// B5: the first stdout line must be the marker.
pub fn wrong_first_line(h: &dyn Harness) {
    let b = h.backend();
    let info = b.create(&h.request(None)).unwrap();
    b.install_daemon(&info.id, &install(h, &info, "garbage"))
        .unwrap();
    let e = b.start(&info.id, Duration::from_secs(10)).unwrap_err();
    assert!(e.to_string().contains("not its startup marker"), "{e}");
    b.delete(&info.id).unwrap();
}

/// B1: a taken name is refused (naming the owner), never adopted; an ID
/// is never reused.
pub fn taken_name_refused(h: &dyn Harness) {
    let b = h.backend();
    let name = format!("dup-{}-{}", h.suite(), std::process::id());
    let first = b.create(&h.request(Some(&name))).unwrap();
    let e = b.create(&h.request(Some(&name))).unwrap_err();
    match &e {
        BackendError::NameTaken { name: n, id } => {
            assert_eq!(n, &name);
            assert_eq!(id, &first.id);
        }
        other => panic!("{other}"),
    }
    assert_eq!(b.list(&Filter::default()).unwrap().len(), 1);
    b.delete(&first.id).unwrap();
    let again = b.create(&h.request(Some(&name))).unwrap();
    assert_ne!(again.id, first.id, "an ID is never reused");
    b.delete(&again.id).unwrap();
}

/// Concurrent creates with one name give exactly one Sandbox.
pub fn concurrent_creates_with_one_name(h: &dyn Harness) {
    let name = format!("race-{}-{}", h.suite(), std::process::id());
    let results: Vec<Result<SandboxInfo, BackendError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|_| s.spawn(|| h.backend().create(&h.request(Some(&name)))))
            .collect();
        handles.into_iter().map(|j| j.join().unwrap()).collect()
    });
    let ok: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(ok.len(), 1, "{results:?}");
    for r in &results {
        if let Err(e) = r {
            assert!(
                matches!(e, BackendError::NameTaken { id, .. } if id == &ok[0].id),
                "{e}"
            );
        }
    }
    h.backend().delete(&ok[0].id).unwrap();
    assert!(h.backend().list(&Filter::default()).unwrap().is_empty());
}

/// B8: unknown IDs are NotFound, malformed ones BadId.
pub fn unknown_and_malformed_ids(h: &dyn Harness) {
    let b = h.backend();
    let unknown = SandboxId("sb-000000000000000000000000".into());
    assert!(matches!(b.open(&unknown), Err(BackendError::NotFound(_))));
    assert!(matches!(
        b.stop(&unknown, Duration::ZERO),
        Err(BackendError::NotFound(_))
    ));
    assert!(matches!(b.delete(&unknown), Err(BackendError::NotFound(_))));
    assert!(h
        .open_elsewhere(&unknown)
        .unwrap_err()
        .contains("not found"));
    for bad in ["../../etc", "sb-1", "", "sb-000000000000000000000000/.."] {
        let e = b.open(&SandboxId(bad.into())).unwrap_err();
        assert!(matches!(e, BackendError::BadId(_)), "{bad}: {e}");
    }
}

/// B3: the token never goes into argv or the environment.
pub fn token_never_in_argv_or_env(h: &dyn Harness) {
    let b = h.backend();
    let info = b.create(&h.request(None)).unwrap();
    let token = std::fs::read_to_string(&info.token_file).unwrap();
    let mut bad = install(h, &info, "ok");
    bad.env.push(("STRATA_TOKEN".into(), token.trim().into()));
    let e = b.install_daemon(&info.id, &bad).unwrap_err();
    assert!(e.to_string().contains("bearer token"), "{e}");
    let mut bad = install(h, &info, "ok");
    bad.args.push(format!("--token={}", token.trim()));
    assert!(b.install_daemon(&info.id, &bad).is_err());
    b.delete(&info.id).unwrap();
    // create_installed refuses it too, and leaves no Sandbox behind.
    let name = format!("cinst-{}", std::process::id());
    let e = b
        .create_installed(&h.request(Some(&name)), &|i| {
            let mut bad = install(h, i, "ok");
            let t = std::fs::read_to_string(&i.token_file).unwrap();
            bad.env.push(("STRATA_TOKEN".into(), t.trim().into()));
            bad
        })
        .unwrap_err();
    assert!(e.to_string().contains("bearer token"), "{e}");
    let f = Filter {
        name_prefix: Some(name),
        ..Default::default()
    };
    assert!(
        b.list(&f).unwrap().is_empty(),
        "a refused create_installed left a Sandbox"
    );
}

/// Bad requests are refused before anything is created.
pub fn bad_requests_refused(h: &dyn Harness) {
    let b = h.backend();
    // Beside the state root, not a fixed /var/tmp: a harness places its
    // directories where its environment has a disk (a VM's guest has no
    // /var).
    let scratch = h
        .state_root()
        .parent()
        .expect("the state root has a parent");
    let not_exe_file = tempfile::NamedTempFile::new_in(scratch).unwrap();
    let no_store = scratch.join("strata-no-such-store");
    let not_exe = not_exe_file.path().to_path_buf();
    let mut cases: Vec<(&str, Edit)> = vec![
        ("name", Box::new(|r| r.name = Some("a/b".into()))),
        (
            "mount point",
            Box::new(|r| r.mountpoints = vec!["rel".into()]),
        ),
        ("Store", Box::new(move |r| r.store = no_store.clone())),
        (
            "daemon binary",
            Box::new(move |r| r.daemon_exe = Some(not_exe.clone())),
        ),
    ];
    cases.extend(h.extra_bad_requests());
    for (what, edit) in cases {
        let mut req = h.request(None);
        edit(&mut req);
        let e = b.create(&req).unwrap_err();
        assert!(e.to_string().contains(what), "{what}: {e}");
    }
    let mut req = h.request(None);
    req.store = scratch.to_path_buf();
    assert!(b.create(&req).is_err(), "a Store containing the state root");
    assert!(b.list(&Filter::default()).unwrap().is_empty());
}

/// Every backend refuses the same names and label keys (one rule, in
/// strata-sandbox's `backend::validate`), naming what was wrong, before
/// anything is created; and accepts the same ones.
pub fn bad_names_and_labels_refused(h: &dyn Harness) {
    let b = h.backend();
    let long_name = "n".repeat(65);
    let long_key = "k".repeat(129);
    for name in ["", "a/b", "a b", "..\n", "é", long_name.as_str()] {
        let mut req = h.request(None);
        req.name = Some(name.to_string());
        let e = b.create(&req).unwrap_err().to_string();
        assert!(e.contains(&format!("name {name:?}")), "name {name:?}: {e}");
    }
    // A key with '=', a space, a control character or a non-ASCII letter
    // cannot become a Docker label filter `KEY=VALUE`: refused everywhere.
    for key in ["", "a=b", "a b", "tab\t", "é", long_key.as_str()] {
        let mut req = h.request(None);
        req.labels.insert(key.to_string(), "v".into());
        let e = b.create(&req).unwrap_err().to_string();
        assert!(e.contains(&format!("label {key:?}")), "label {key:?}: {e}");
    }
    assert!(b.list(&Filter::default()).unwrap().is_empty());
    let mut req = h.request(Some("Ok.name_1-x"));
    req.labels
        .insert("team/owner.v-1_x".into(), "any value = fine".into());
    let info = b.create(&req).unwrap();
    assert_eq!(b.open(&info.id).unwrap().labels, req.labels);
    b.delete(&info.id).unwrap();
}
