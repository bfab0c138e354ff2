//! Several writers on one Store at once (separate connections, as separate
//! processes would have): every acknowledged commit is present afterwards,
//! and the only error a writer may see is the typed `Busy`.

mod common;
use common::*;
use std::collections::BTreeMap;
use strata_store::*;

#[test]
fn parallel_writers_lose_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let base = store.create_project("p", "init").unwrap();
    for w in 0..4 {
        store
            .create_branch(&BranchRef::parse(&format!("p/w{w}")).unwrap(), base)
            .unwrap();
    }
    let dir = tmp.path().join("store");
    let handles: Vec<_> = (0..4u64)
        .map(|w| {
            let dir = dir.clone();
            std::thread::spawn(move || {
                let s = Store::open(&dir, &StoreOptions::default()).unwrap();
                let b = BranchRef::parse(&format!("p/w{w}")).unwrap();
                let mut acked = Vec::new();
                for i in 0..15u64 {
                    let body = seeded_bytes(w * 1000 + i + 1, 20_000);
                    loop {
                        let attempt = (|| -> Result<ObjectId> {
                            let _s = s.write_session()?;
                            let c = s.write_file_bytes(&body, None)?;
                            let t = s.write_tree(vec![file_entry("f", c)])?;
                            let head = s.branch_head(&b)?;
                            s.commit_tree(&b, head, t, &format!("{i}"), BTreeMap::new())
                        })();
                        match attempt {
                            Ok(id) => {
                                acked.push((id, body));
                                break;
                            }
                            Err(e) if e.is_busy() => continue,
                            Err(e) => panic!("writer {w}: unexpected error {e}"),
                        }
                    }
                }
                acked
            })
        })
        .collect();
    for (w, h) in handles.into_iter().enumerate() {
        let acked = h.join().unwrap();
        assert_eq!(acked.len(), 15);
        let b = BranchRef::parse(&format!("p/w{w}")).unwrap();
        let log = store.log(store.branch_head(&b).unwrap(), 100).unwrap();
        assert_eq!(log.len(), 16, "writer {w} lost commits");
        for (id, body) in acked {
            let e = store.read_path(id, b"f").unwrap().unwrap();
            let EntryKind::File(c) = e.kind else { panic!() };
            assert_eq!(store.read_file_range(&c, 0, body.len()).unwrap(), body);
        }
    }
    assert!(store.fsck(&NoProgress).unwrap().ok);
}
