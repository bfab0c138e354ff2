//! Host data a command must not see (docs/security.md, "the command's view
//! of the host"): world-readable canary files in fresh directories under
//! /home, /srv, /opt and /var/lib, and a second Store under /srv, each
//! removed on drop. World-readable on purpose, so that only the command's
//! view keeps them out (a positive control shows they are readable on the
//! host by the same uid).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The planted data.
pub struct Canaries {
    /// The unique directories, removed on drop.
    pub dirs: Vec<PathBuf>,
    /// (path, bytes) of each canary file.
    pub files: Vec<(PathBuf, Vec<u8>)>,
    /// The other Store's database.
    pub store_db: PathBuf,
}

/// The first bytes of every SQLite database file.
pub const SQLITE_MAGIC: &str = "SQLite format 3";

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()));
}

impl Canaries {
    /// Plant them; `tag` makes the names unique to the test.
    pub fn plant(tag: &str) -> Canaries {
        let unique = format!(
            "strata-canary-{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        );
        let mut c = Canaries {
            dirs: Vec::new(),
            files: Vec::new(),
            store_db: PathBuf::new(),
        };
        for parent in ["/home", "/srv", "/opt", "/var/lib"] {
            let dir = Path::new(parent).join(&unique);
            std::fs::create_dir_all(&dir)
                .unwrap_or_else(|e| panic!("cannot run: create {}: {e}", dir.display()));
            c.dirs.push(dir.clone());
            chmod(&dir, 0o755);
            let file = dir.join("canary");
            let bytes = format!("CANARY:{unique}:{parent}\n").into_bytes();
            std::fs::write(&file, &bytes).unwrap();
            chmod(&file, 0o644);
            c.files.push((file, bytes));
        }
        let store = Path::new("/srv").join(&unique).join("store");
        strata_store::Store::create(&store, &strata_store::StoreOptions::default())
            .unwrap_or_else(|e| panic!("cannot run: create a Store at {}: {e}", store.display()));
        chmod(&store, 0o755);
        c.store_db = store.join("strata.db");
        chmod(&c.store_db, 0o644);
        c
    }

    /// A shell script that tries to read every canary and the other
    /// Store's header, printing `DENIED <path>` or `READ <path>` per try.
    pub fn read_script(&self) -> String {
        let mut s = String::new();
        for p in self
            .files
            .iter()
            .map(|(p, _)| p)
            .chain(std::iter::once(&self.store_db))
        {
            let p = p.display();
            s.push_str(&format!(
                "if head -c 100 '{p}'; then echo; echo 'READ {p}'; else echo 'DENIED {p}'; fi\n"
            ));
        }
        s
    }

    /// Panics unless `out` (the script's stdout) shows every read failed
    /// and no canary byte or SQLite header got through.
    pub fn assert_unread(&self, out: &str, context: &str) {
        for (p, bytes) in &self.files {
            let b = String::from_utf8_lossy(bytes);
            assert!(
                !out.contains(b.trim()),
                "{context}: canary {} leaked:\n{out}",
                p.display()
            );
        }
        assert!(
            !out.contains(SQLITE_MAGIC),
            "{context}: the other Store's header leaked:\n{out}"
        );
        for p in self
            .files
            .iter()
            .map(|(p, _)| p)
            .chain(std::iter::once(&self.store_db))
        {
            let p = p.display().to_string();
            assert!(
                out.contains(&format!("DENIED {p}")),
                "{context}: no failed read of {p}:\n{out}"
            );
            assert!(
                !out.contains(&format!("READ {p}")),
                "{context}: {p} was read:\n{out}"
            );
        }
    }

    /// Panics unless `out` shows every canary read (the positive control).
    pub fn assert_read(&self, out: &str, context: &str) {
        for (p, bytes) in &self.files {
            let b = String::from_utf8_lossy(bytes);
            assert!(
                out.contains(b.trim()),
                "{context}: canary {} not read:\n{out}",
                p.display()
            );
        }
        assert!(
            out.contains(SQLITE_MAGIC),
            "{context}: the other Store not read:\n{out}"
        );
    }
}

impl Drop for Canaries {
    fn drop(&mut self) {
        for d in &self.dirs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}
