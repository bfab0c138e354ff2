//! Where the server listens: a Unix socket (0600, the default), TCP on a
//! loopback address, or TCP on any address with TLS. A non-loopback
//! address without TLS would put bearer tokens on a network in clear
//! text, so it is refused.

use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::ServeError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("--listen {0:?}: expected unix:PATH or tcp:HOST:PORT (an IP address)")]
    Syntax(String),
    #[error("--listen {0:?}: a non-loopback address is served only with TLS, because a bearer token must not cross a network in clear text: add --tls-cert FILE --tls-key FILE, or --tls-generate (a self-signed certificate whose fingerprint clients pin)")]
    NotLoopback(String),
    #[error("--listen {0:?}: TLS is for TCP addresses; a Unix socket is protected by its file permissions (0600)")]
    TlsOnUnix(String),
}

impl Listen {
    pub fn parse(s: &str) -> Result<Listen, ListenError> {
        if let Some(p) = s.strip_prefix("unix:") {
            if p.is_empty() {
                return Err(ListenError::Syntax(s.into()));
            }
            return Ok(Listen::Unix(PathBuf::from(p)));
        }
        if let Some(a) = s.strip_prefix("tcp:") {
            let addr: SocketAddr = a.parse().map_err(|_| ListenError::Syntax(s.into()))?;
            return Ok(Listen::Tcp(addr));
        }
        Err(ListenError::Syntax(s.into()))
    }

    /// The default: `serve.sock` in the Store directory, next to the data
    /// it serves and under the Store directory's own permissions.
    pub fn default_for(store_dir: &Path) -> Listen {
        Listen::Unix(store_dir.join("serve.sock"))
    }

    /// Refuse what may not be served: a non-loopback address without
    /// TLS, TLS on a Unix socket.
    pub fn check(&self, tls: bool) -> Result<(), ListenError> {
        match self {
            Listen::Tcp(a) if !tls && !a.ip().is_loopback() => {
                Err(ListenError::NotLoopback(format!("tcp:{a}")))
            }
            Listen::Unix(p) if tls => Err(ListenError::TlsOnUnix(format!("unix:{}", p.display()))),
            _ => Ok(()),
        }
    }

    /// Bind with TLS (TCP only).
    pub async fn bind_tls(&self, tls: &crate::tls::TlsServer) -> Result<Bound, ServeError> {
        self.check(true)?;
        match self.bind_plain().await? {
            Bound::Tcp { listener, addr } => Ok(Bound::Tls {
                listener: crate::tls::TlsListener::new(listener, tls).map_err(|source| {
                    ServeError::Io {
                        action: "listen with TLS on",
                        path: addr.to_string(),
                        source,
                    }
                })?,
                addr,
            }),
            _ => unreachable!("check refuses TLS on a Unix socket"),
        }
    }

    /// Bind without TLS (Unix or loopback TCP).
    pub async fn bind(&self) -> Result<Bound, ServeError> {
        self.check(false)?;
        self.bind_plain().await
    }

    /// Bind. A Unix socket is bound under a temporary name, made 0600 and
    /// renamed into place, so it is never reachable with looser
    /// permissions; a stale socket (no one accepts on it) is replaced, a
    /// live one is an error.
    async fn bind_plain(&self) -> Result<Bound, ServeError> {
        match self {
            Listen::Unix(path) => bind_unix(path).await,
            Listen::Tcp(addr) => {
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|source| ServeError::Io {
                        action: "bind",
                        path: addr.to_string(),
                        source,
                    })?;
                let addr = listener.local_addr().map_err(|source| ServeError::Io {
                    action: "read the address of",
                    path: addr.to_string(),
                    source,
                })?;
                Ok(Bound::Tcp { listener, addr })
            }
        }
    }
}

async fn bind_unix(path: &Path) -> Result<Bound, ServeError> {
    let shown = path.display().to_string();
    let io = |action: &'static str| {
        let path = shown.clone();
        move |source| ServeError::Io {
            action,
            path,
            source,
        }
    };
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if m.file_type().is_socket() {
            if tokio::net::UnixStream::connect(path).await.is_ok() {
                return Err(ServeError::InUse { path: shown });
            }
        } else {
            return Err(io("replace (it is not a socket)")(std::io::Error::from(
                std::io::ErrorKind::AlreadyExists,
            )));
        }
    }
    let tmp = path.with_file_name(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("sock"),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&tmp);
    let listener = tokio::net::UnixListener::bind(&tmp).map_err(io("bind"))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
        .map_err(io("chmod 600"))?;
    std::fs::rename(&tmp, path).map_err(io("move the socket into place at"))?;
    Ok(Bound::Unix {
        listener,
        path: path.to_path_buf(),
    })
}

/// A bound listener.
pub enum Bound {
    Unix {
        listener: tokio::net::UnixListener,
        path: PathBuf,
    },
    Tcp {
        listener: tokio::net::TcpListener,
        addr: SocketAddr,
    },
    Tls {
        listener: crate::tls::TlsListener,
        addr: SocketAddr,
    },
}

impl Bound {
    /// `unix:PATH` or `tcp:ADDR:PORT` (the real port when 0 was asked).
    pub fn display(&self) -> String {
        match self {
            Bound::Unix { path, .. } => format!("unix:{}", path.display()),
            Bound::Tcp { addr, .. } | Bound::Tls { addr, .. } => format!("tcp:{addr}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_and_a_non_loopback_one_needs_tls() {
        assert_eq!(
            Listen::parse("unix:/tmp/s").unwrap(),
            Listen::Unix("/tmp/s".into())
        );
        assert!(matches!(
            Listen::parse("tcp:127.0.0.1:0").unwrap(),
            Listen::Tcp(_)
        ));
        assert!(matches!(
            Listen::parse("tcp:[::1]:80").unwrap(),
            Listen::Tcp(_)
        ));
        let any = Listen::parse("tcp:0.0.0.0:80").unwrap();
        let e = any.check(false).unwrap_err();
        assert!(e.to_string().contains("--tls-generate"), "{e}");
        assert!(any.check(true).is_ok());
        assert!(matches!(
            Listen::parse("tcp:10.0.0.1:80").unwrap().check(false),
            Err(ListenError::NotLoopback(_))
        ));
        assert!(Listen::parse("tcp:127.0.0.1:80")
            .unwrap()
            .check(false)
            .is_ok());
        assert!(matches!(
            Listen::parse("unix:/tmp/s").unwrap().check(true),
            Err(ListenError::TlsOnUnix(_))
        ));
        assert!(matches!(
            Listen::parse("http://x"),
            Err(ListenError::Syntax(_))
        ));
        assert!(matches!(
            Listen::parse("unix:"),
            Err(ListenError::Syntax(_))
        ));
    }
}
