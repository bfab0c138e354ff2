//! Rendering: JSON values and human text for what the Store returns.

use anyhow::Result;
use serde_json::{json, Value};
use std::io::Write;
use strata_sdk::{CommitInfo, Entry};

/// Print a JSON value on stdout, one document, newline-terminated.
pub fn print_json(v: &Value) -> Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, v)?;
    writeln!(out)?;
    out.flush()?;
    Ok(())
}

/// Print lines of human text on stdout.
pub fn print_text(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    if !text.is_empty() && !text.ends_with('\n') {
        writeln!(out)?;
    }
    out.flush()?;
    Ok(())
}

/// A warning on stderr (never on stdout, so `--json` output stays parseable).
pub fn warn(msg: &str) {
    eprintln!("strata: warning: {msg}");
}

/// Raw bytes as a string for display: lossy UTF-8.
pub fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Add `key` (lossy text) and, when the bytes are not UTF-8, `key_hex` (exact).
pub fn put_bytes(obj: &mut serde_json::Map<String, Value>, key: &str, b: &[u8]) {
    obj.insert(key.into(), Value::String(lossy(b)));
    if std::str::from_utf8(b).is_err() {
        obj.insert(format!("{key}_hex"), Value::String(hex(b)));
    }
}

pub fn hex(b: &[u8]) -> String {
    hex::encode(b)
}

/// One tree entry as JSON.
pub fn entry_json(e: &Entry) -> Value {
    let mut m = serde_json::Map::new();
    put_bytes(&mut m, "name", &e.name);
    m.insert("type".into(), json!(e.kind));
    m.insert("mode".into(), json!(format!("{:04o}", e.mode)));
    m.insert("size".into(), json!(e.size));
    m.insert("uid".into(), json!(e.uid));
    m.insert("gid".into(), json!(e.gid));
    m.insert("mtime_ns".into(), json!(e.mtime_ns));
    if let Some(t) = &e.target {
        put_bytes(&mut m, "target", t);
    }
    if e.link_group != 0 {
        m.insert("link_group".into(), json!(e.link_group));
    }
    if !e.xattrs.is_empty() {
        let names: Vec<String> = e.xattrs.iter().map(|k| lossy(k)).collect();
        m.insert("xattrs".into(), json!(names));
    }
    Value::Object(m)
}

/// One tree entry as an `ls -l`-like line.
pub fn entry_line(e: &Entry) -> String {
    let t = match e.kind.as_str() {
        "file" => '-',
        "dir" => 'd',
        "symlink" => 'l',
        "fifo" => 'p',
        "socket" => 's',
        _ => '?',
    };
    let mut line = format!(
        "{t}{} {:>5} {:>5} {:>10} {} {}",
        mode_string(e.mode),
        e.uid,
        e.gid,
        e.size,
        fmt_time(e.mtime_ns),
        lossy(&e.name)
    );
    if let Some(target) = &e.target {
        line.push_str(" -> ");
        line.push_str(&lossy(target));
    }
    line
}

/// `rwxr-xr-x` with setuid/setgid/sticky shown as `s`/`S` and `t`/`T`.
pub fn mode_string(mode: u32) -> String {
    let mut s: Vec<char> = "rwxrwxrwx"
        .chars()
        .enumerate()
        .map(|(i, c)| if mode & (0o400 >> i) != 0 { c } else { '-' })
        .collect();
    let special = |s: &mut Vec<char>, bit: u32, at: usize, lower: char, upper: char| {
        if mode & bit != 0 {
            s[at] = if s[at] == 'x' { lower } else { upper };
        }
    };
    special(&mut s, 0o4000, 2, 's', 'S');
    special(&mut s, 0o2000, 5, 's', 'S');
    special(&mut s, 0o1000, 8, 't', 'T');
    s.into_iter().collect()
}

/// One commit as JSON.
pub fn commit_json(c: &CommitInfo) -> Value {
    json!({
        "commit": c.id,
        "tree": c.tree,
        "parents": c.parents,
        "message": c.message,
        "time_ns": c.time_ns,
        "time": fmt_time(c.time_ns),
        "metadata": c.metadata,
        "file_bytes": c.file_bytes,
        "entries": c.entries,
    })
}

/// One commit as a few lines of text.
pub fn commit_text(c: &CommitInfo) -> String {
    let mut s = format!("commit {}\nDate:   {}\n", c.id, fmt_time(c.time_ns));
    if c.parents.len() > 1 {
        // The short form of an id: its first 6 bytes.
        let ps: Vec<&str> = c.parents.iter().map(|p| &p[..p.len().min(12)]).collect();
        s.push_str(&format!("Merge:  {}\n", ps.join(" ")));
    }
    s.push('\n');
    for l in c.message.lines() {
        s.push_str("    ");
        s.push_str(l);
        s.push('\n');
    }
    s
}

/// Nanoseconds since the epoch as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn fmt_time(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Bytes in binary units (`10 B`, `1.50 KiB`, `32.00 MiB`), by indicatif.
pub fn human_bytes(n: u64) -> String {
    indicatif::HumanBytes(n).to_string()
}

/// Colours (ANSI) only when stdout is a terminal and NO_COLOR is unset
/// (https://no-color.org): pipes and `--json` never get escape codes.
pub fn colour() -> bool {
    use std::io::IsTerminal;
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none())
}

/// A change kind (`added`, `modified`, `deleted`, `type_changed`, or the
/// one-letter A/M/D/T of `diff`), padded, coloured on a terminal.
pub fn paint_change(kind: &str) -> String {
    let width = if kind.len() == 1 { 1 } else { 12 };
    let s = format!("{kind:<width$}");
    if !colour() {
        return s;
    }
    let c = match kind {
        "added" | "A" => "32",
        "deleted" | "D" => "31",
        "modified" | "M" => "33",
        _ => "36",
    };
    format!("\x1b[{c}m{s}\x1b[0m")
}

/// A duration for people: `850 µs`, `12.3 ms`, `1.52 s`, `2 min 5 s`.
pub fn human_duration(d: std::time::Duration) -> String {
    let us = d.as_micros();
    if us < 1000 {
        format!("{us} µs")
    } else if us < 1_000_000 {
        format!("{:.1} ms", us as f64 / 1000.0)
    } else if d.as_secs() < 60 {
        format!("{:.2} s", d.as_secs_f64())
    } else {
        format!("{} min {} s", d.as_secs() / 60, d.as_secs() % 60)
    }
}

/// The error and its causes as one line, without repeating a cause that the
/// message before it already quotes (StoreError texts include their source).
pub fn render(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let s = cause.to_string();
        if out.contains(&s) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&s);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_does_not_repeat_quoted_causes() {
        let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied");
        let e: anyhow::Error = anyhow::Error::new(io).context("could not read x: denied");
        assert_eq!(render(&e), "could not read x: denied");
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(render(&e), "outer: inner");
    }

    #[test]
    fn times_format_as_utc() {
        assert_eq!(fmt_time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(
            fmt_time(1_709_210_096_000_000_000),
            "2024-02-29 12:34:56 UTC"
        );
        assert_eq!(fmt_time(-1_000_000_000), "1969-12-31 23:59:59 UTC");
    }

    #[test]
    fn modes_render_like_ls() {
        assert_eq!(mode_string(0o755), "rwxr-xr-x");
        assert_eq!(mode_string(0o4755), "rwsr-xr-x");
        assert_eq!(mode_string(0o2644), "rw-r-Sr--");
        assert_eq!(mode_string(0o1777), "rwxrwxrwt");
    }

    #[test]
    fn bytes_render_in_binary_units() {
        assert_eq!(human_bytes(10), "10 B");
        assert_eq!(human_bytes(1536), "1.50 KiB");
        assert_eq!(human_bytes(32 << 20), "32.00 MiB");
    }
}
