//! The content cache: unchanged files of the base materialized once from
//! their chunks, keyed by `FileContent::key()`, shared by every Workspace of
//! one Store. Files are written under a temporary name and renamed into
//! place, so a reader never sees a half-written file and two Workspaces
//! materializing the same content race harmlessly (rename(2) is atomic).

use crate::error::{Result, WsError};
use std::fs::File;
use std::path::{Path, PathBuf};
use strata_store::{FileContent, Store};

#[derive(Debug, Clone)]
pub(crate) struct ContentCache {
    dir: PathBuf,
}

impl ContentCache {
    pub(crate) fn new(dir: PathBuf) -> Result<ContentCache> {
        if !dir.is_dir() {
            crate::workspace::private_dir(&dir, true)
                .map_err(WsError::io("create the content cache", &dir))?;
        }
        Ok(ContentCache { dir })
    }

    fn path_of(&self, c: &FileContent) -> PathBuf {
        match c.key() {
            Some(k) => self.dir.join(k.to_hex()),
            None => self.dir.join("empty"),
        }
    }

    /// The path of a complete cache file holding `c`'s bytes.
    pub(crate) fn ensure(&self, store: &Store, c: &FileContent) -> Result<PathBuf> {
        let path = self.path_of(c);
        if let Ok(m) = std::fs::metadata(&path) {
            if m.len() == c.size {
                return Ok(path);
            }
        }
        let tmp = self.dir.join(format!(
            ".tmp-{}-{}-{:x}",
            path.file_name().and_then(|n| n.to_str()).unwrap_or("x"),
            std::process::id(),
            rand::random::<u64>()
        ));
        let res = if c.key().is_none() {
            File::create(&tmp)
                .map(drop)
                .map_err(WsError::io("create", &tmp))
        } else {
            store
                .materialize(c, &tmp)
                .map_err(WsError::store("materialize a file into the content cache"))
        };
        if let Err(e) = res {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        std::fs::rename(&tmp, &path)
            .map_err(WsError::io("rename into the content cache", &path))?;
        Ok(path)
    }

    pub(crate) fn open(&self, store: &Store, c: &FileContent) -> Result<File> {
        let p = self.ensure(store, c)?;
        File::open(&p).map_err(WsError::io("open cached content", &p))
    }

    #[allow(dead_code)]
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
}
