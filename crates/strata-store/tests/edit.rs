//! `Store::edit_tree`: a base tree plus path edits, read back through the
//! Store (and exported to disk).

use std::collections::BTreeMap;

use strata_store::{
    BranchRef, EditOp, EntryKind, NoProgress, Store, StoreError, StoreOptions, TreeEdit,
};

fn put(store: &Store, path: &str, bytes: &[u8], mode: u32) -> TreeEdit {
    TreeEdit {
        path: path.as_bytes().to_vec(),
        op: EditOp::File {
            content: store.write_file_bytes(bytes, None).unwrap(),
            mode,
        },
    }
}

fn edit(path: &str, op: EditOp) -> TreeEdit {
    TreeEdit {
        path: path.as_bytes().to_vec(),
        op,
    }
}

fn cat(store: &Store, tree: strata_store::ObjectId, path: &str) -> Option<Vec<u8>> {
    match store.lookup_path(tree, path.as_bytes()).unwrap()?.kind {
        EntryKind::File(c) => Some(store.read_file_range(&c, 0, c.size as usize).unwrap()),
        _ => None,
    }
}

#[test]
fn edits_apply_in_order_and_leave_untouched_subtrees_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::create(&tmp.path().join("s"), &StoreOptions::default()).unwrap();
    let base = store.write_tree(Vec::new()).unwrap();
    let t1 = store
        .edit_tree(
            base,
            &[
                put(&store, "a/b/c.txt", b"one", 0o644),
                put(&store, "keep/k", b"k", 0o600),
                put(&store, "x", b"x", 0o755),
                edit(
                    "l",
                    EditOp::Symlink {
                        target: b"a/b/c.txt".to_vec(),
                    },
                ),
                edit("e", EditOp::Mkdir { mode: 0o700 }),
            ],
        )
        .unwrap();
    assert_eq!(cat(&store, t1, "a/b/c.txt").unwrap(), b"one");
    assert_eq!(store.lookup_path(t1, b"x").unwrap().unwrap().mode, 0o755);
    let keep1 = store.lookup_path(t1, b"keep").unwrap().unwrap().kind;

    let t2 = store
        .edit_tree(
            t1,
            &[
                edit("a", EditOp::Delete),
                put(&store, "a/new", b"new", 0o644),
                edit("x", EditOp::Chmod { mode: 0o600 }),
                put(&store, "x", b"x2", 0o644),
            ],
        )
        .unwrap();
    assert_eq!(cat(&store, t2, "a/new").unwrap(), b"new");
    assert!(store.lookup_path(t2, b"a/b").unwrap().is_none());
    assert_eq!(cat(&store, t2, "x").unwrap(), b"x2");
    // The untouched directory keeps its tree id.
    assert_eq!(store.lookup_path(t2, b"keep").unwrap().unwrap().kind, keep1);

    // Errors: a path through a file, a file over a directory, a missing
    // path, bad paths.
    let e = store
        .edit_tree(t2, &[put(&store, "x/y", b"", 0o644)])
        .unwrap_err();
    assert!(matches!(e, StoreError::Invalid(_)), "{e}");
    let e = store
        .edit_tree(t2, &[put(&store, "a", b"", 0o644)])
        .unwrap_err();
    assert!(e.to_string().contains("is a directory"), "{e}");
    let e = store
        .edit_tree(t2, &[edit("nope/z", EditOp::Delete)])
        .unwrap_err();
    assert!(matches!(e, StoreError::NotFound { .. }), "{e}");
    for bad in ["", "/abs", "a//b", "a/../b", "./a", "a/"] {
        let e = store
            .edit_tree(t2, &[edit(bad, EditOp::Delete)])
            .unwrap_err();
        assert!(matches!(e, StoreError::Invalid(_)), "{bad:?}: {e}");
    }

    // Published and exported, the tree is what was asked.
    let head = store.create_project("p", "init").unwrap();
    let b = BranchRef::new("p", "main").unwrap();
    store
        .commit_tree(&b, head, t2, "edit", BTreeMap::new())
        .unwrap();
    let out = tmp.path().join("out");
    let c = store.branch_head(&b).unwrap();
    store.export(c, &out, false, &NoProgress).unwrap();
    assert_eq!(std::fs::read(out.join("a/new")).unwrap(), b"new");
    assert_eq!(
        std::fs::read_link(out.join("l")).unwrap().to_str(),
        Some("a/b/c.txt")
    );
    assert!(out.join("e").is_dir());
}

#[test]
fn a_deep_path_does_not_recurse() {
    // 2,000 levels on a 256 KiB stack, like the other deep-tree tests.
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::create(&tmp.path().join("s"), &StoreOptions::default()).unwrap();
    let path = "d/".repeat(2000) + "f";
    let s2 = store.clone();
    let tree = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || {
            let base = s2.write_tree(Vec::new()).unwrap();
            let e = put(&s2, &path, b"deep", 0o644);
            s2.edit_tree(base, &[e]).unwrap()
        })
        .unwrap()
        .join()
        .unwrap();
    let path = "d/".repeat(2000) + "f";
    assert_eq!(cat(&store, tree, &path).unwrap(), b"deep");
}
