//! The value types and value parsers of the command line's flags, shared
//! by the modules that declare subcommands (a leaf: it imports no other
//! module of the CLI).

// Value parsers: a malformed flag value is a usage error, so clap reports
// it (naming the flag) and exits 2 before any command runs (README.md,
// "Exit codes"). Each returns the typed value the command uses.

/// A usage error found after parsing (flags that only conflict in
/// combination): `main` reports it in clap's format with exit status 2.
#[derive(Debug)]
pub struct Usage {
    pub kind: clap::error::ErrorKind,
    pub msg: String,
}

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for Usage {}

/// `KEY=VALUE` (`--label`, `--env`); the value may contain `=`.
pub fn key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{s:?} is not KEY=VALUE")),
    }
}

/// A byte count, or a number with a K, M or G suffix (`--memory`), in
/// binary units (512M is 512 MiB) as cgroups and docker read them.
pub fn byte_size(s: &str) -> Result<u64, String> {
    parse_size::Config::new()
        .with_binary()
        .parse_size(s.trim())
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| "give bytes, or a number with K, M or G (e.g. 512M)".to_string())
}

/// CPUs as a fraction (`--cpu 0.5`), returned in thousandths of a CPU.
pub fn cpu_millis(s: &str) -> Result<u64, String> {
    match s.trim().parse::<f64>() {
        Ok(c) if c.is_finite() && c > 0.0 && c <= 4096.0 => {
            Ok(((c * 1000.0).round() as u64).max(1))
        }
        _ => Err("give a positive number of CPUs, e.g. 0.5 or 2".to_string()),
    }
}

/// Numeric `UID:GID`, or one number for both (`--user`).
pub fn uid_gid(s: &str) -> Result<(u32, u32), String> {
    let (u, g) = s.split_once(':').unwrap_or((s, s));
    match (u.parse(), g.parse()) {
        (Ok(u), Ok(g)) => Ok((u, g)),
        _ => Err("give numeric UID:GID, e.g. 1500:1500".to_string()),
    }
}

/// `--network`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NetworkArg {
    /// Loopback only.
    None,
    /// The host's network namespace.
    Host,
}

/// `--backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendArg {
    /// Namespaces and seccomp on this host.
    Native,
    /// One container through the Docker Engine API.
    Docker,
    /// Namespaces inside the project's qemu VM (started if needed).
    Microvm,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_cpus_users_and_pairs_parse() {
        assert_eq!(byte_size("512M").unwrap(), 512 << 20);
        assert_eq!(byte_size("1g").unwrap(), 1 << 30);
        assert_eq!(byte_size("4096").unwrap(), 4096);
        assert_eq!(byte_size("64KiB").unwrap(), 64 << 10);
        assert!(byte_size("x").is_err());
        assert!(byte_size("-1M").is_err());
        assert!(byte_size("0").is_err());
        assert_eq!(cpu_millis("0.5").unwrap(), 500);
        assert!(cpu_millis("0").is_err());
        assert!(cpu_millis("NaN").is_err());
        assert_eq!(uid_gid("1500:1600").unwrap(), (1500, 1600));
        assert_eq!(uid_gid("7").unwrap(), (7, 7));
        assert!(uid_gid("a:b").is_err());
        assert_eq!(key_value("A=b=c").unwrap(), ("A".into(), "b=c".into()));
        assert!(key_value("=x").is_err());
        assert!(key_value("x").is_err());
    }
}
