//! The daemon binary the docker backend uploads (B3) must run in any
//! image, including ones without glibc (busybox, distroless, scratch): it
//! must be statically linked. A dynamically linked ELF names its loader in
//! a `PT_INTERP` program header (ELF spec, "Program Header"); a static one
//! (glibc `+crt-static` or musl) has none. That is what is checked here,
//! before anything is created.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::DockerError;

/// Environment variable naming the static strata binary when the request
/// names none ([`strata_sandbox::CreateRequest::daemon_exe`]).
pub const STATIC_EXE_ENV: &str = "STRATA_STATIC_EXE";

/// How to get one, for error messages.
pub const BUILD_HINT: &str = "the strata repository's `cargo build --release -p strata-cli` makes a static `strata` (its .cargo/config.toml links with +crt-static; a RUSTFLAGS variable in the environment replaces that setting); pass it as daemon_exe or STRATA_STATIC_EXE=target/x86_64-unknown-linux-gnu/release/strata (see docs/docker.md)";

const PT_INTERP: u32 = 3;

/// The daemon binary to upload: `requested`, else `$STRATA_STATIC_EXE`,
/// else the current executable if it is static; refused unless it is a statically linked x86-64/aarch64 ELF executable.
pub fn resolve_static_exe(requested: Option<&Path>) -> Result<PathBuf, DockerError> {
    let path = match requested {
        Some(p) => p.to_path_buf(),
        None => match std::env::var_os(STATIC_EXE_ENV) {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            // A static `strata` running this backend uploads itself.
            _ if std::env::current_exe().is_ok_and(|me| check_static(&me).is_ok()) => {
                std::env::current_exe().unwrap_or_default()
            }
            _ => {
                return Err(DockerError::Exe {
                    path: PathBuf::new(),
                    message: format!(
                        "no daemon binary given, {STATIC_EXE_ENV} is not set and this program is not statically linked; {BUILD_HINT}"
                    ),
                })
            }
        },
    };
    check_static(&path)?;
    path.canonicalize().map_err(|e| DockerError::Exe {
        path: path.clone(),
        message: format!("resolve: {e}"),
    })
}

/// Refuse anything but a statically linked 64-bit little-endian ELF
/// executable.
pub fn check_static(path: &Path) -> Result<(), DockerError> {
    let bad = |message: String| DockerError::Exe {
        path: path.to_path_buf(),
        message,
    };
    let mut f = std::fs::File::open(path).map_err(|e| bad(format!("open: {e}; {BUILD_HINT}")))?;
    // Program headers sit near the start; 64 KiB covers any sane layout.
    let mut head = Vec::with_capacity(64 * 1024);
    f.by_ref()
        .take(64 * 1024)
        .read_to_end(&mut head)
        .map_err(|e| bad(format!("read: {e}")))?;
    match program_headers(&head) {
        Err(why) => Err(bad(format!("not a usable ELF executable: {why}"))),
        Ok(types) if types.contains(&PT_INTERP) => Err(bad(format!(
            "is dynamically linked (it has an ELF interpreter), so it cannot run in images without glibc; {BUILD_HINT}"
        ))),
        Ok(_) => Ok(()),
    }
}

/// The `p_type` of every program header of a 64-bit little-endian ELF
/// (ELF-64 header: e_phoff at 0x20, e_phentsize at 0x36, e_phnum at 0x38).
fn program_headers(b: &[u8]) -> Result<Vec<u32>, &'static str> {
    if b.len() < 64 || &b[..4] != b"\x7fELF" {
        return Err("no ELF magic");
    }
    if b[4] != 2 || b[5] != 1 {
        return Err("not a 64-bit little-endian ELF");
    }
    let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
    let e_type = u16_at(0x10);
    // ET_EXEC (2) or ET_DYN (3, static-pie too); not a relocatable object.
    if e_type != 2 && e_type != 3 {
        return Err("not an executable");
    }
    let phoff = u64::from_le_bytes(b[0x20..0x28].try_into().map_err(|_| "short header")?) as usize;
    let (entsize, num) = (u16_at(0x36), u16_at(0x38));
    if entsize < 4 || num == 0 {
        return Err("no program headers");
    }
    let mut out = Vec::with_capacity(num);
    for i in 0..num {
        let o = phoff + i * entsize;
        let t = b
            .get(o..o + 4)
            .ok_or("program headers beyond the first 64 KiB")?;
        out.push(u32::from_le_bytes([t[0], t[1], t[2], t[3]]));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_binary_is_refused_with_the_build_hint() {
        // Debian's coreutils are dynamically linked (this test binary is
        // not: the workspace links statically).
        let env = Path::new("/usr/bin/env");
        let e = check_static(env).unwrap_err().to_string();
        assert!(e.contains("dynamically linked"), "{e}");
        assert!(e.contains("crt-static"), "{e}");
        assert!(e.contains("cargo build"), "{e}");
    }

    #[test]
    fn non_elf_and_missing_files_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("script");
        std::fs::write(&p, "#!/bin/sh\necho hi\n").unwrap();
        assert!(check_static(&p).unwrap_err().to_string().contains("ELF"));
        let e = check_static(&d.path().join("missing")).unwrap_err();
        assert!(e.to_string().contains("open"), "{e}");
    }

    /// A minimal ELF-64 header with one program header of type `ptype`.
    fn elf_with(ptype: u32) -> Vec<u8> {
        let mut b = vec![0u8; 64 + 56];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2; // 64-bit
        b[5] = 1; // little-endian
        b[0x10] = 2; // ET_EXEC
        b[0x20] = 64; // e_phoff
        b[0x36] = 56; // e_phentsize
        b[0x38] = 1; // e_phnum
        b[64..68].copy_from_slice(&ptype.to_le_bytes());
        b
    }

    #[test]
    fn interp_header_decides() {
        let d = tempfile::tempdir().unwrap();
        let st = d.path().join("static");
        std::fs::write(&st, elf_with(1)).unwrap(); // PT_LOAD only
        check_static(&st).unwrap();
        let dy = d.path().join("dynamic");
        std::fs::write(&dy, elf_with(PT_INTERP)).unwrap();
        assert!(check_static(&dy).is_err());
    }
}
