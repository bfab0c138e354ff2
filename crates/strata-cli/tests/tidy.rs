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

/// Every file under `dir` (recursively) whose name ends with one of `exts`
/// (all files if `exts` is empty).
fn files_with(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if name != "target" && !name.starts_with('.') {
                files_with(&p, exts, out);
            }
        } else if exts.is_empty() || exts.iter().any(|x| name.ends_with(x)) {
            out.push(p);
        }
    }
}

fn crate_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(repo_root().join("crates"))
        .expect("read crates/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    dirs.sort();
    assert!(!dirs.is_empty(), "found no crates under crates/");
    dirs
}

/// One row of ARCHITECTURE.md's layer table.
struct Layer {
    level: u32,
    may_use: Vec<String>,
    unsafe_forbidden: bool,
}

/// ARCHITECTURE.md's layer table: `| N layer | crate | deps, ... | unsafe |`.
fn layer_table() -> std::collections::BTreeMap<String, Layer> {
    let text = std::fs::read_to_string(repo_root().join("ARCHITECTURE.md")).unwrap();
    let mut rows = std::collections::BTreeMap::new();
    for line in text.lines() {
        let cells: Vec<&str> = line.trim().split('|').map(str::trim).collect();
        // "", layer, crate, may depend on, unsafe, ""
        if cells.len() != 6 || !cells[2].starts_with("strata-") {
            continue;
        }
        let level = cells[1]
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("ARCHITECTURE.md layer table: {line:?} has no layer number"));
        let may_use = cells[3]
            .split(',')
            .map(str::trim)
            .filter(|d| d.starts_with("strata-"))
            .map(String::from)
            .collect();
        let layer = Layer {
            level,
            may_use,
            unsafe_forbidden: cells[4] == "forbidden",
        };
        rows.insert(cells[2].to_string(), layer);
    }
    assert!(
        !rows.is_empty(),
        "found no layer table in ARCHITECTURE.md (rows `| N layer | strata-x | deps | unsafe |`)"
    );
    rows
}

/// The strata crates named in a Cargo.toml's `[dependencies]` section.
fn strata_dependencies(cargo_toml: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(cargo_toml).unwrap();
    let mut in_deps = false;
    let mut deps = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if !in_deps || !line.starts_with("strata-") {
            continue;
        }
        let name: String = line
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .collect();
        deps.push(name);
    }
    deps
}

#[test]
fn crate_dependencies_follow_the_layer_table() {
    let table = layer_table();
    let mut problems = Vec::new();
    for dir in crate_dirs() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let Some(row) = table.get(&name) else {
            problems.push(format!(
                "{name} has no row in ARCHITECTURE.md's layer table: add one (its layer, the strata crates it may use)"
            ));
            continue;
        };
        for dep in strata_dependencies(&dir.join("Cargo.toml")) {
            if !row.may_use.contains(&dep) {
                problems.push(format!(
                    "crates/{name}/Cargo.toml depends on {dep}, which ARCHITECTURE.md's layer table does not allow for {name}: remove the dependency, or move the code, or (if the design changed) change the table and the diagram"
                ));
            }
        }
        for dep in &row.may_use {
            match table.get(dep) {
                Some(d) if d.level < row.level => {}
                Some(d) => problems.push(format!(
                    "ARCHITECTURE.md's layer table lets {name} (layer {}) use {dep} (layer {}): a crate may only use lower layers",
                    row.level, d.level
                )),
                None => problems.push(format!(
                    "ARCHITECTURE.md's layer table lets {name} use {dep}, which has no row"
                )),
            }
        }
    }
    for name in table.keys() {
        if !repo_root().join("crates").join(name).is_dir() {
            problems.push(format!(
                "ARCHITECTURE.md's layer table names {name}, which is not in crates/: remove its row"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn unsafe_code_is_forbidden_where_the_architecture_says() {
    let mut problems = Vec::new();
    for (name, row) in layer_table() {
        if !row.unsafe_forbidden {
            continue;
        }
        for root in ["src/lib.rs", "src/main.rs"] {
            let p = repo_root().join("crates").join(&name).join(root);
            let Ok(text) = std::fs::read_to_string(&p) else {
                continue;
            };
            if !text.contains("#![forbid(unsafe_code)]") {
                problems.push(format!(
                    "{}: add `#![forbid(unsafe_code)]` (ARCHITECTURE.md's layer table says {name} has no unsafe code)",
                    p.display()
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Files that may hold SQL text, with the reason (ARCHITECTURE.md,
/// "Invariants": schema changes are reviewed in one place).
const SQL_ALLOWED: &[(&str, &str)] = &[
    ("strata-store/src/sql.rs", "every statement of the Store"),
    (
        "strata-workspace/src/journal.rs",
        "the Workspace's own journal database",
    ),
];

#[test]
fn no_sql_text_outside_sql_rs_and_the_journal() {
    // A heuristic: a string literal that starts a statement. Spelled in
    // pieces so that this file never matches itself.
    let starts = [
        concat!("SEL", "ECT "),
        concat!("INSERT ", "INTO"),
        concat!("PRAG", "MA "),
    ];
    let mut files = Vec::new();
    for dir in crate_dirs() {
        files_with(&dir.join("src"), &[".rs"], &mut files);
    }
    let mut found = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(repo_root().join("crates")).unwrap();
        if SQL_ALLOWED.iter().any(|(p, _)| rel == Path::new(p)) {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for s in starts {
                if let Some(at) = line.find(s) {
                    if line[..at].contains('"') {
                        found.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
                    }
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "SQL text outside strata-store/src/sql.rs: move each statement into sql.rs as a named constant and use it (or, if truly needed, add the file to SQL_ALLOWED with the reason):\n{}",
        found.join("\n")
    );
}

#[test]
fn no_citation_of_documents_the_repository_does_not_have() {
    let root = repo_root();
    let mut files = Vec::new();
    for dir in ["crates", "scripts", "docs", ".ci"] {
        files_with(
            &root.join(dir),
            &[".rs", ".md", ".toml", ".sh", ".yaml", ".txt", "run"],
            &mut files,
        );
    }
    files.push(root.join("README.md"));
    files.push(root.join("ARCHITECTURE.md"));
    // Spelled in pieces so that this file never matches itself.
    let design = concat!("BRI", "EF");
    let issue = concat!("iss", "ue");
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            let lower = line.to_ascii_lowercase();
            let cites_issue = lower.match_indices(issue).any(|(at, _)| {
                let rest = lower[at + issue.len()..].trim_start_matches([' ', '#']);
                rest.starts_with(|c: char| c.is_ascii_digit())
            });
            let names_it =
                lower.contains(concat!("the bri", "ef")) || lower.contains(concat!("bri", "ef's"));
            if line.contains(design) || names_it || cites_issue {
                found.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "citations of documents outside the repository (a design brief, issue numbers): cite the repository's own docs instead (docs/design.md §N, ARCHITECTURE.md, docs/*.md):\n{}",
        found.join("\n")
    );
}

#[test]
fn no_test_prints_that_it_skipped() {
    // A test that cannot run must fail with the reason, never print
    // "skipped" and pass (ARCHITECTURE.md, strata-torture: "Must never").
    let mut files = Vec::new();
    for dir in crate_dirs() {
        files_with(&dir.join("tests"), &[".rs"], &mut files);
    }
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            let lower = line.to_ascii_lowercase();
            let prints = lower.contains("print!(") || lower.contains("println!(");
            if prints
                && (lower.contains(concat!("skip", "ped"))
                    || lower.contains(concat!("skip", "ping")))
            {
                found.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "tests that print that they skipped (and pass): make each fail with the reason and what to do (panic!/assert!) instead:\n{}",
        found.join("\n")
    );
}

/// Every case of the Backend contract suite (strata-testkit's
/// `contract::CASES`, which a project VM's guest runs as a whole) has a
/// test on each host backend: strata-sandbox's `tests/native.rs` and
/// strata-docker's `tests/docker.rs` call `contract::NAME(` for each.
#[test]
fn every_contract_case_runs_on_every_backend() {
    let root = repo_root();
    for file in [
        "crates/strata-sandbox/tests/native.rs",
        "crates/strata-docker/tests/docker.rs",
    ] {
        let src = std::fs::read_to_string(root.join(file)).unwrap();
        let missing: Vec<&str> = strata_testkit::contract::CASES
            .iter()
            .map(|(name, _)| *name)
            .filter(|name| !src.contains(&format!("contract::{name}(")))
            .collect();
        assert!(
            missing.is_empty(),
            "{file} runs no test for the contract cases {missing:?}"
        );
    }
}
