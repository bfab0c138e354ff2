//! Repository hygiene, as a test so that `cargo test --workspace` enforces
//! it: the code is rustfmt-clean and no crate ships a placeholder macro.
//! (clippy runs in .ci/run; it is too slow for a test.)

use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/strata-cli is two levels below the root")
        .to_path_buf()
}

#[test]
fn code_is_formatted() {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["fmt", "--all", "--check"])
        .current_dir(repo_root())
        .output()
        .expect("run cargo fmt (install it with `rustup component add rustfmt`)");
    assert!(
        out.status.success(),
        "`cargo fmt --all --check` found unformatted code; run `cargo fmt --all`:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn no_placeholder_or_debug_macros_in_crate_sources() {
    // Spelled in pieces so that this file never matches itself.
    let banned = [
        concat!("todo", "!("),
        concat!("unimplemented", "!("),
        concat!("dbg", "!("),
    ];
    let mut files = Vec::new();
    for krate in std::fs::read_dir(repo_root().join("crates"))
        .unwrap()
        .flatten()
    {
        rust_files(&krate.path().join("src"), &mut files);
    }
    assert!(!files.is_empty(), "found no sources under crates/*/src");
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            for b in banned {
                if line.contains(b) {
                    found.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "placeholder macros left in:\n{}",
        found.join("\n")
    );
}
