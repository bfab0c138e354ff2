//! Bearer tokens of `strata serve`, kept in `server-tokens.json` (0600) in
//! the Store directory, not in the Store's SQLite: the Store's schema and
//! history stay free of credentials (a copied or shared Store carries no
//! token), no schema migration is needed, and `strata token revoke` works
//! while the server runs (the server re-reads the file when its inode,
//! size or mtime changes; every write is a new file renamed into place).
//!
//! A token is `strata_<id>_<secret>`: 8 random bytes of id and 32 random
//! bytes of secret, in hex. Only BLAKE3(secret) is stored; a presented
//! token is checked by hashing its secret and comparing in constant time
//! (`subtle`). Writers serialize on `server-tokens.lock` (flock(2)).

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use crate::scope::{Caller, Scope};

pub const TOKENS_FILE: &str = "server-tokens.json";
const LOCK_FILE: &str = "server-tokens.lock";
const PREFIX: &str = "strata_";

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("could not {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is damaged ({reason}); fix or remove it (removing revokes every token) and create tokens again")]
    Corrupt { path: PathBuf, reason: String },
    #[error("no token with id {id}; `strata token list` shows the ids")]
    NotFound { id: String },
    #[error(transparent)]
    Name(#[from] strata_store::StoreError),
}

/// One stored token (never its secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenInfo {
    pub id: String,
    /// Projects it is limited to; `None` = every project.
    pub projects: Option<Vec<String>>,
    /// Seconds since the Unix epoch.
    pub created: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    #[serde(flatten)]
    info: TokenInfo,
    /// Hex BLAKE3 of the secret's bytes.
    hash: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    version: u32,
    tokens: Vec<Record>,
}

/// (inode, size, mtime) of the file as last read.
type Stamp = (u64, u64, i64, i64);

pub struct TokenStore {
    dir: PathBuf,
    cache: Mutex<Option<(Stamp, Vec<Record>)>>,
}

impl TokenStore {
    /// The tokens of the Store in `store_dir`.
    pub fn new(store_dir: &Path) -> TokenStore {
        TokenStore {
            dir: store_dir.to_path_buf(),
            cache: Mutex::new(None),
        }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(TOKENS_FILE)
    }

    fn io(&self, action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> TokenError {
        let path = path.to_path_buf();
        move |source| TokenError::Io {
            action,
            path,
            source,
        }
    }

    fn read(&self) -> Result<File, TokenError> {
        let path = self.path();
        match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| TokenError::Corrupt {
                path,
                reason: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(File {
                version: 1,
                tokens: Vec::new(),
            }),
            Err(e) => Err(self.io("read", &path)(e)),
        }
    }

    /// Write `f` as a new 0600 file, fsync it, rename it over the old one
    /// and fsync the directory (rename(2) is atomic: a reader sees the old
    /// or the new list, never a mix).
    fn write(&self, f: &File) -> Result<(), TokenError> {
        let path = self.path();
        let tmp = self
            .dir
            .join(format!(".{TOKENS_FILE}.{}.tmp", std::process::id()));
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(self.io("create", &tmp))?;
        let bytes = serde_json::to_vec_pretty(f).expect("the token list serializes");
        out.write_all(&bytes).map_err(self.io("write", &tmp))?;
        out.sync_all().map_err(self.io("fsync", &tmp))?;
        std::fs::rename(&tmp, &path).map_err(self.io("rename into place", &path))?;
        std::fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(self.io("fsync", &self.dir))?;
        Ok(())
    }

    /// Run `f` on the list under the writers' lock and write the result.
    fn update<T>(
        &self,
        f: impl FnOnce(&mut File) -> Result<T, TokenError>,
    ) -> Result<T, TokenError> {
        let lock_path = self.dir.join(LOCK_FILE);
        let lock = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&lock_path)
            .map_err(self.io("open", &lock_path))?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| self.io("lock", &lock_path)(e.into()))?;
        let mut file = self.read()?;
        file.version = 1;
        let out = f(&mut file)?;
        self.write(&file)?;
        Ok(out)
    }

    /// Make a token; returns the token (shown once) and its record.
    pub fn create(&self, projects: &[String]) -> Result<(String, TokenInfo), TokenError> {
        for p in projects {
            strata_store::validate_name("project", p)?;
        }
        let id: [u8; 8] = rand::random();
        let secret: [u8; 32] = rand::random();
        let id = hex::encode(id);
        let token = format!("{PREFIX}{id}_{}", hex::encode(secret));
        let set: BTreeSet<String> = projects.iter().cloned().collect();
        let info = TokenInfo {
            id: id.clone(),
            projects: (!projects.is_empty()).then(|| set.into_iter().collect()),
            created: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        };
        let rec = Record {
            info: info.clone(),
            hash: blake3::hash(&secret).to_hex().to_string(),
        };
        self.update(|f| {
            f.tokens.push(rec);
            Ok(())
        })?;
        Ok((token, info))
    }

    pub fn list(&self) -> Result<Vec<TokenInfo>, TokenError> {
        Ok(self.read()?.tokens.into_iter().map(|r| r.info).collect())
    }

    pub fn revoke(&self, id: &str) -> Result<(), TokenError> {
        self.update(|f| {
            let before = f.tokens.len();
            f.tokens.retain(|r| r.info.id != id);
            if f.tokens.len() == before {
                return Err(TokenError::NotFound { id: id.to_string() });
            }
            Ok(())
        })
    }

    /// The caller a presented token stands for, or `None` (malformed,
    /// unknown, revoked or wrong secret: the caller is not told which).
    pub fn verify(&self, presented: &str) -> Result<Option<Caller>, TokenError> {
        let Some((id, secret)) = presented
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split_once('_'))
        else {
            return Ok(None);
        };
        let mut secret_bytes = [0u8; 32];
        if hex::decode_to_slice(secret, &mut secret_bytes).is_err() {
            return Ok(None);
        }
        let hash = blake3::hash(&secret_bytes);
        let records = self.current()?;
        let Some(rec) = records.iter().find(|r| r.info.id == id) else {
            return Ok(None);
        };
        let mut stored = [0u8; 32];
        if hex::decode_to_slice(&rec.hash, &mut stored).is_err() {
            return Ok(None);
        }
        if !bool::from(hash.as_bytes().ct_eq(&stored)) {
            return Ok(None);
        }
        let scope = match &rec.info.projects {
            None => Scope::All,
            Some(p) => Scope::Projects(p.iter().cloned().collect()),
        };
        Ok(Some(Caller {
            token_id: rec.info.id.clone(),
            scope,
        }))
    }

    /// Whether the token with id `id` is still stored (not revoked). A
    /// stat(2) of the file when it has not changed, so long-lived streams
    /// can ask every second.
    pub fn is_live(&self, id: &str) -> Result<bool, TokenError> {
        Ok(self.current()?.iter().any(|r| r.info.id == id))
    }

    /// The records, re-read when the file changed since the last call.
    fn current(&self) -> Result<Vec<Record>, TokenError> {
        let path = self.path();
        let stamp = match std::fs::metadata(&path) {
            Ok(m) => (m.ino(), m.size(), m.mtime(), m.mtime_nsec()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (0, 0, 0, 0),
            Err(e) => return Err(self.io("inspect", &path)(e)),
        };
        let mut cache = self.cache.lock().unwrap();
        if let Some((s, recs)) = cache.as_ref() {
            if *s == stamp {
                return Ok(recs.clone());
            }
        }
        let recs = self.read()?.tokens;
        *cache = Some((stamp, recs.clone()));
        Ok(recs)
    }
}
