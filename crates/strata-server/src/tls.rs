//! TLS for TCP listeners (rustls with the ring provider): a given
//! certificate and key, or a self-signed certificate the server generates
//! once and keeps in the Store directory, so that its fingerprint (printed
//! in the ready line, [`strata_api::fingerprint`]) stays the same across
//! restarts and a client can pin it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sha2::Digest;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// The generated certificate and key, in the Store directory (0600).
pub const GENERATED_CERT: &str = "server-tls-cert.pem";
pub const GENERATED_KEY: &str = "server-tls-key.pem";

/// A client that has not finished its TLS handshake by then is dropped,
/// so a slow or silent client cannot hold a connection slot.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the certificate comes from.
#[derive(Debug, Clone)]
pub enum TlsSetup {
    /// PEM files: the certificate chain and its private key.
    Files { cert: PathBuf, key: PathBuf },
    /// A self-signed certificate for `names` (DNS names or IP addresses),
    /// generated into `dir` the first time and reused after.
    Generate { dir: PathBuf, names: Vec<String> },
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("TLS: could not {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("TLS: {path}: {what}; give a PEM certificate chain (--tls-cert) and its PEM private key (--tls-key), or --tls-generate")]
    Pem { path: String, what: String },
    #[error("TLS: the certificate and key do not make a server configuration: {0}")]
    Config(String),
    #[error("TLS: could not generate a certificate: {0}")]
    Generate(String),
}

/// What a TLS listener serves with.
#[derive(Clone)]
pub struct TlsServer {
    pub config: Arc<ServerConfig>,
    /// `sha256:` and 64 hex digits, of the leaf certificate's DER.
    pub fingerprint: String,
}

impl std::fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsServer")
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> TlsError {
    let path = path.display().to_string();
    move |source| TlsError::Io {
        action,
        path,
        source,
    }
}

/// The SHA-256 fingerprint of a certificate, as printed and pinned.
pub fn fingerprint(der: &[u8]) -> String {
    let d: [u8; 32] = sha2::Sha256::digest(der).into();
    strata_api::fingerprint::format(&d)
}

/// Write `data` to a new 0600 file, atomically: tempfile makes its file
/// with mode 0600 beside `path` (one filesystem, so the rename is atomic),
/// then it is synced and renamed over `path`.
fn write_private(path: &Path, data: &[u8]) -> Result<(), TlsError> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut f = tempfile::NamedTempFile::new_in(dir).map_err(io("create a file in", dir))?;
    f.write_all(data)
        .and_then(|()| f.as_file().sync_all())
        .map_err(io("write", f.path()))?;
    f.persist(path)
        .map_err(|e| io("move into place", path)(e.error))?;
    Ok(())
}

impl TlsSetup {
    /// The certificate and key files, generating them first if asked.
    fn files(&self) -> Result<(PathBuf, PathBuf), TlsError> {
        match self {
            TlsSetup::Files { cert, key } => Ok((cert.clone(), key.clone())),
            TlsSetup::Generate { dir, names } => {
                let (cert, key) = (dir.join(GENERATED_CERT), dir.join(GENERATED_KEY));
                if cert.exists() && key.exists() {
                    return Ok((cert, key));
                }
                let ck = rcgen::generate_simple_self_signed(names.clone())
                    .map_err(|e| TlsError::Generate(e.to_string()))?;
                // The key first: a certificate without its key is useless.
                write_private(&key, ck.key_pair.serialize_pem().as_bytes())?;
                write_private(&cert, ck.cert.pem().as_bytes())?;
                Ok((cert, key))
            }
        }
    }

    /// Load (or generate) the certificate and build the server config.
    pub fn load(&self) -> Result<TlsServer, TlsError> {
        let (cert_path, key_path) = self.files()?;
        let pem = std::fs::read(&cert_path).map_err(io("read", &cert_path))?;
        let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut pem.as_slice())
            .collect::<Result<_, _>>()
            .map_err(|e| TlsError::Pem {
                path: cert_path.display().to_string(),
                what: e.to_string(),
            })?;
        let Some(leaf) = certs.first() else {
            return Err(TlsError::Pem {
                path: cert_path.display().to_string(),
                what: "no CERTIFICATE block".into(),
            });
        };
        let fingerprint = fingerprint(leaf.as_ref());
        let pem = std::fs::read(&key_path).map_err(io("read", &key_path))?;
        let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut pem.as_slice())
            .map_err(|e| TlsError::Pem {
                path: key_path.display().to_string(),
                what: e.to_string(),
            })?
            .ok_or_else(|| TlsError::Pem {
                path: key_path.display().to_string(),
                what: "no PRIVATE KEY block".into(),
            })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| TlsError::Config(e.to_string()))?;
        // HTTP/1.1 only: the exec WebSocket is an HTTP/1.1 upgrade.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsServer {
            config: Arc::new(config),
            fingerprint,
        })
    }
}

/// A TCP listener whose connections are TLS. Handshakes run on their own
/// tasks (bounded by [`HANDSHAKE_TIMEOUT`]), so one slow client does not
/// hold up the accepting of others.
pub struct TlsListener {
    rx: tokio::sync::mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    addr: SocketAddr,
    accept_task: tokio::task::JoinHandle<()>,
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accept_task.abort();
    }
}

impl TlsListener {
    pub fn new(listener: TcpListener, tls: &TlsServer) -> std::io::Result<TlsListener> {
        let addr = listener.local_addr()?;
        let acceptor = TlsAcceptor::from(tls.config.clone());
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let accept_task = tokio::spawn(async move {
            loop {
                let (tcp, peer) = match listener.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        // EMFILE and the like: wait, as axum's own
                        // listener does, instead of spinning.
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(s)) => {
                            let _ = tx.send((s, peer)).await;
                        }
                        Ok(Err(e)) => tracing::info!(%peer, "TLS handshake failed: {e}"),
                        Err(_) => tracing::info!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(TlsListener {
            rx,
            addr,
            accept_task,
        })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(c) => c,
            // The accept task never ends on its own; if it is gone, wait
            // for the shutdown like an idle listener.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}
