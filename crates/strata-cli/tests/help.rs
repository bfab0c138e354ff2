//! `--help` shows an example for every command, and `strata completions`
//! prints a script each shell accepts (checked with the shell itself when
//! it is installed: bash always is on CI).

mod common;

use assert_cmd::Command;

fn help(path: &[&str]) -> String {
    let out = Command::new(common::BIN)
        .args(path)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "{path:?} --help: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The visible subcommands listed in a `--help` text.
fn subcommands(text: &str) -> Vec<String> {
    let Some(start) = text.find("Commands:\n") else {
        return Vec::new();
    };
    text[start + 10..]
        .lines()
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(String::from)
        .collect()
}

#[test]
fn every_command_has_an_example_in_its_help() {
    let mut todo: Vec<Vec<String>> = vec![vec![]];
    let mut leaves = 0;
    let mut missing = Vec::new();
    while let Some(path) = todo.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let text = help(&args);
        let subs = subcommands(&text);
        // `exec` runs a command and also has subcommands: it is a leaf too.
        if subs.is_empty() || args == ["exec"] {
            leaves += 1;
            if !text.contains("Example") {
                missing.push(args.join(" "));
            }
        }
        for s in subs {
            let mut p = path.clone();
            p.push(s);
            todo.push(p);
        }
    }
    assert!(leaves > 30, "only {leaves} commands found");
    assert!(missing.is_empty(), "no example in --help of: {missing:?}");
}

#[test]
fn completions_for_bash_zsh_and_fish() {
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(common::BIN)
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}: {out:?}");
        let script = String::from_utf8(out.stdout).unwrap();
        for word in ["strata", "sandbox", "exec", "json"] {
            assert!(script.contains(word), "{shell} script lacks {word}");
        }
    }
    // bash parses the script and registers the completion function.
    let out = std::process::Command::new("bash")
        .args([
            "-c",
            &format!(
                "source <({} completions bash) && complete -p strata",
                common::BIN
            ),
        ])
        .output()
        .expect("bash is installed");
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("strata"));
    let out = Command::new(common::BIN)
        .args(["completions", "nosuchshell"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
