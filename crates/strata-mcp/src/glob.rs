//! Glob patterns over slash-separated paths, as a regular expression:
//! `*` and `?` never match `/`, `**/` matches zero or more directories,
//! a trailing `**` anything below, `[...]` a set (`[!...]` negated).

use regex::Regex;

use crate::error::ToolError;

/// Compile `pattern` into an anchored regex.
pub(crate) fn compile(pattern: &str) -> Result<Regex, ToolError> {
    let mut re = String::from("^");
    let chars: Vec<char> = pattern.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '*' if chars.get(i + 1) == Some(&'*') => {
                let at_start = i == 0 || chars[i - 1] == '/';
                if at_start && chars.get(i + 2) == Some(&'/') {
                    re.push_str("(?:[^/]*/)*");
                    i += 3;
                    continue;
                }
                re.push_str(".*");
                i += 2;
                continue;
            }
            '*' => re.push_str("[^/]*"),
            '?' => re.push_str("[^/]"),
            '[' => {
                let Some(end) = chars[i + 1..].iter().position(|&c| c == ']') else {
                    return Err(ToolError::new(format!(
                        "glob {pattern:?}: `[` without a closing `]`; escape nothing, close the set"
                    )));
                };
                let body: String = chars[i + 1..i + 1 + end].iter().collect();
                let (neg, body) = match body.strip_prefix('!') {
                    Some(rest) => (true, rest.to_string()),
                    None => (false, body),
                };
                re.push('[');
                if neg {
                    re.push('^');
                }
                for b in body.chars() {
                    if matches!(b, '\\' | '[' | ']' | '^') {
                        re.push('\\');
                    }
                    re.push(b);
                }
                re.push(']');
                i += end + 2;
                continue;
            }
            c => re.push_str(&regex::escape(&c.to_string())),
        }
        i += 1;
    }
    re.push('$');
    Regex::new(&re).map_err(|e| ToolError::new(format!("glob {pattern:?} is not valid: {e}")))
}

#[cfg(test)]
mod tests {
    use super::compile;

    #[test]
    fn globs_match_like_a_shell_with_globstar() {
        let m = |p: &str, s: &str| compile(p).unwrap().is_match(s);
        assert!(m("**/*.rs", "main.rs"));
        assert!(m("**/*.rs", "src/a/b.rs"));
        assert!(!m("*.rs", "src/b.rs"));
        assert!(m("src/*.py", "src/x.py"));
        assert!(!m("src/*.py", "src/a/x.py"));
        assert!(m("src/**", "src/a/x.py"));
        assert!(m("f?.[ch]", "f1.c"));
        assert!(!m("f?.[!ch]", "f1.c"));
        assert!(!m("a.txt", "aXtxt"));
        assert!(compile("[abc").is_err());
    }
}
