//! A writer for the cpio "newc" format (the SVR4 portable format without
//! checksums), the only format the kernel unpacks into the initial rootfs
//! (Documentation/driver-api/early-userspace/buffer-format.rst in the
//! kernel tree): a 110-byte ASCII header per entry, the NUL-terminated name
//! and the data, each padded to 4 bytes, ended by the entry `TRAILER!!!`.

use std::io::{self, Write};

/// Writes entries in order; directories must come before what they hold.
pub struct CpioWriter<W: Write> {
    out: W,
    ino: u32,
    written: u64,
    /// The device number of the entry being written (device nodes only).
    rdev: (u32, u32),
}

impl<W: Write> CpioWriter<W> {
    pub fn new(out: W) -> Self {
        CpioWriter {
            out,
            ino: 1,
            written: 0,
            rdev: (0, 0),
        }
    }

    /// A directory (mode bits without the type, e.g. 0o755).
    pub fn dir(&mut self, name: &str, perm: u32) -> io::Result<()> {
        self.entry(name, 0o040000 | perm, 2, &[])
    }

    /// A regular file with its whole content.
    pub fn file(&mut self, name: &str, perm: u32, data: &[u8]) -> io::Result<()> {
        self.entry(name, 0o100000 | perm, 1, data)
    }

    /// A symbolic link to `target` (newc stores the target as the data).
    pub fn symlink(&mut self, name: &str, target: &str) -> io::Result<()> {
        self.entry(name, 0o120000 | 0o777, 1, target.as_bytes())
    }

    /// A character device node (mode bits without the type).
    pub fn char_dev(&mut self, name: &str, perm: u32, major: u32, minor: u32) -> io::Result<()> {
        self.rdev = (major, minor);
        let r = self.entry(name, 0o020000 | perm, 1, &[]);
        self.rdev = (0, 0);
        r
    }

    /// The trailer; returns the writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.entry("TRAILER!!!", 0, 1, &[])?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn entry(&mut self, name: &str, mode: u32, nlink: u32, data: &[u8]) -> io::Result<()> {
        let size = u32::try_from(data.len()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{name}: {} bytes is too large for cpio newc (4 GiB)",
                    data.len()
                ),
            )
        })?;
        let ino = if name == "TRAILER!!!" { 0 } else { self.ino };
        self.ino += 1;
        // c_magic, then 13 fields of 8 hex digits: ino, mode, uid, gid,
        // nlink, mtime, filesize, devmajor, devminor, rdevmajor, rdevminor,
        // namesize (with the NUL), check (0 for newc).
        let (rmaj, rmin) = self.rdev;
        let header = format!(
            "070701{ino:08X}{mode:08X}{:08X}{:08X}{nlink:08X}{:08X}{size:08X}{:08X}{:08X}{rmaj:08X}{rmin:08X}{:08X}{:08X}",
            0,
            0,
            0,
            0,
            0,
            name.len() + 1,
            0
        );
        self.put(header.as_bytes())?;
        self.put(name.as_bytes())?;
        self.put(&[0])?;
        self.pad()?;
        self.put(data)?;
        self.pad()
    }

    fn put(&mut self, b: &[u8]) -> io::Result<()> {
        self.out.write_all(b)?;
        self.written += b.len() as u64;
        Ok(())
    }

    fn pad(&mut self) -> io::Result<()> {
        let n = (4 - (self.written % 4) as usize) % 4;
        self.put(&[0u8; 3][..n])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_newc_and_4_byte_aligned() {
        let mut w = CpioWriter::new(Vec::new());
        w.dir("lib", 0o755).unwrap();
        w.file("init", 0o755, b"hello").unwrap();
        let out = w.finish().unwrap();
        assert_eq!(out.len() % 4, 0);
        assert!(out.starts_with(b"070701"));
        // Header of "init": mode 0100755, size 5, name size 5.
        let s = String::from_utf8_lossy(&out);
        let at = s.find("init\0").unwrap();
        let hdr = &s[at - 110..at];
        assert_eq!(&hdr[14..22], "000081ED");
        assert_eq!(&hdr[54..62], "00000005");
        assert_eq!(&hdr[94..102], "00000005");
        assert!(s.contains("TRAILER!!!\0"));
        // 110 + 5 name bytes end at 2 mod 4 from an aligned start: 1 byte of padding.
        assert_eq!(&out[at + 6..at + 11], b"hello");
    }
}
