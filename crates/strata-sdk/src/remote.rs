//! The wire to one `strata serve` (docs/server.md): HTTP/1.1 over its Unix
//! socket (`unix:///path/serve.sock`), loopback TCP (`http://127.0.0.1:P`)
//! or TLS (`https://host:P`), every request with the server's bearer
//! token. A request goes on a connection an earlier one left open and
//! ready (pool.rs: a connection still streaming a body is never used for
//! another call, so a long output stream never blocks one; a request is
//! sent twice only when it surely was not sent the first time, or is a
//! GET or HEAD), else on a new one: over TLS that saves a full handshake
//! per call.
//!
//! TLS: with a pinned SHA-256 fingerprint (what `strata serve` prints for
//! the certificate it generates), the one certificate whose DER hashes to
//! it is accepted and any other is refused, whoever signed it; without
//! one, the certificate must chain to the system's CA store and name the
//! host.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use serde::de::DeserializeOwned;
use serde::Serialize;
use strata_api::{ErrorBody, ErrorCode};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::error::{Error, Result};
use crate::pool::{Pool, SendError};

/// Where the server listens.
#[derive(Clone)]
enum Target {
    Unix(PathBuf),
    Tcp(String),
    Tls {
        addr: String,
        name: ServerName<'static>,
        config: Arc<rustls::ClientConfig>,
    },
}

/// A connection to one `strata serve`: its URL, token and, for TLS, the
/// certificate check, and the connections kept open to it (shared by the
/// clones). Cheap to clone.
#[derive(Clone)]
pub struct Remote {
    url: Arc<str>,
    token: Arc<str>,
    target: Target,
    pool: Arc<Pool<Full<Bytes>>>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the token.
        f.debug_struct("Remote").field("url", &self.url).finish()
    }
}

/// One stream a request goes over.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

const URL_HINT: &str = "give unix:///path/to/serve.sock, http://127.0.0.1:PORT or https://HOST:PORT (the address `strata serve` printed)";

/// A pinned fingerprint in the form `strata serve` prints
/// (`sha256:` and 64 hex digits; colons allowed), as 32 bytes.
pub(crate) fn parse_fingerprint(s: &str) -> Result<[u8; 32]> {
    strata_api::fingerprint::parse(s).map_err(|e| {
        Error::invalid(
            e,
            "give the fingerprint `strata serve` printed for its certificate",
        )
    })
}

/// Accepts exactly the certificate whose SHA-256 is `pin`; signatures
/// are still checked against its key (so the peer holds that key).
#[derive(Debug)]
struct Pinned {
    pin: [u8; 32],
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let digest = ring::digest::digest(&ring::digest::SHA256, end_entity.as_ref());
        let mut got = [0u8; 32];
        got.copy_from_slice(digest.as_ref());
        if got == self.pin {
            return Ok(ServerCertVerified::assertion());
        }
        Err(rustls::Error::General(format!(
            "the server's certificate has fingerprint {}, not the pinned {}: refused (the server's certificate changed, or someone else answers at this address)",
            strata_api::fingerprint::format(&got),
            strata_api::fingerprint::format(&self.pin)
        )))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

fn tls_config(fingerprint: Option<&str>) -> Result<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::invalid(format!("TLS set-up: {e}"), "report this as a bug"))?;
    let config = match fingerprint {
        Some(f) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Pinned {
                pin: parse_fingerprint(f)?,
                provider,
            }))
            .with_no_client_auth(),
        None => {
            let mut roots = rustls::RootCertStore::empty();
            let found = rustls_native_certs::load_native_certs();
            for c in found.certs {
                let _ = roots.add(c);
            }
            if roots.is_empty() {
                return Err(Error::invalid(
                    "https without a pinned fingerprint, and no CA certificates found on this system",
                    "pass the server's certificate fingerprint (--remote-fingerprint, STRATA_REMOTE_FINGERPRINT, or Client::connect_pinned)",
                ));
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
    };
    Ok(config)
}

impl Remote {
    /// Parse `url` and prepare the connection (nothing is sent yet).
    /// `fingerprint` pins the server's certificate (https only).
    pub fn new(url: &str, token: &str, fingerprint: Option<&str>) -> Result<Remote> {
        let token = token.trim();
        if token.is_empty() {
            return Err(Error::invalid(
                "the server token is empty",
                "create one with `strata token create` on the server's host and pass it (STRATA_TOKEN or --token-file)",
            ));
        }
        let bad = |why: &str| Error::invalid(format!("server URL {url:?}: {why}"), URL_HINT);
        let target = if let Some(p) = url.strip_prefix("unix://") {
            if !p.starts_with('/') {
                return Err(bad("a Unix socket path must be absolute (unix:///path)"));
            }
            if fingerprint.is_some() {
                return Err(bad("a certificate fingerprint applies to https:// only"));
            }
            Target::Unix(PathBuf::from(p))
        } else if let Some(rest) = url.strip_prefix("http://") {
            if fingerprint.is_some() {
                return Err(bad("a certificate fingerprint applies to https:// only"));
            }
            Target::Tcp(host_port(rest).map_err(|w| bad(&w))?.0)
        } else if let Some(rest) = url.strip_prefix("https://") {
            let (addr, host) = host_port(rest).map_err(|w| bad(&w))?;
            let name = ServerName::try_from(host.trim_matches(['[', ']']).to_string())
                .map_err(|e| bad(&format!("{host:?} is not a host name or address: {e}")))?;
            Target::Tls {
                addr,
                name,
                config: Arc::new(tls_config(fingerprint)?),
            }
        } else {
            return Err(bad("unknown scheme"));
        };
        Ok(Remote {
            url: url.into(),
            token: token.into(),
            target,
            pool: Arc::new(Pool::new()),
        })
    }

    /// The URL as given.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn unreachable(&self, why: impl std::fmt::Display) -> Error {
        Error::Unreachable {
            what: format!("cannot reach strata serve at {}: {why}", self.url),
            hint: "is the server running, and is this the address it printed? (`strata serve` prints one ready line)".into(),
        }
    }

    async fn connect(&self) -> Result<Box<dyn Io>> {
        match &self.target {
            Target::Unix(p) => tokio::net::UnixStream::connect(p)
                .await
                .map(|s| Box::new(s) as Box<dyn Io>)
                .map_err(|e| self.unreachable(e)),
            Target::Tcp(a) => {
                let s = tokio::net::TcpStream::connect(a.as_str())
                    .await
                    .map_err(|e| self.unreachable(e))?;
                let _ = s.set_nodelay(true);
                Ok(Box::new(s))
            }
            Target::Tls { addr, name, config } => {
                let s = tokio::net::TcpStream::connect(addr.as_str())
                    .await
                    .map_err(|e| self.unreachable(e))?;
                let _ = s.set_nodelay(true);
                let tls = tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name.clone(), s)
                    .await
                    .map_err(|e| Error::Unreachable {
                        what: format!("TLS with {} failed: {e}", self.url),
                        hint: "check --remote-fingerprint against the fingerprint `strata serve` printed".into(),
                    })?;
                Ok(Box::new(tls))
            }
        }
    }

    /// A new connection: connect (and TLS), the HTTP/1 handshake, its
    /// task spawned on this runtime.
    async fn open(&self) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>> {
        let io = self.connect().await?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(|e| self.unreachable(format!("HTTP handshake: {e}")))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }

    fn request(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
        content_type: &str,
        headers: &[(&str, &str)],
    ) -> Result<Request<Full<Bytes>>> {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, "strata")
            .header(
                hyper::header::AUTHORIZATION,
                format!("Bearer {}", self.token),
            )
            .header(hyper::header::CONTENT_TYPE, content_type);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.body(Full::new(body)).map_err(|e| {
            Error::invalid(
                format!("request {path}: {e}"),
                "names must be valid in a URL",
            )
        })
    }

    /// Send one request to `path` (e.g. `/v1/projects`); returns the raw
    /// response (status unchecked, but 401 is [`Error::Unauthorized`]).
    /// On a kept connection when one is ready (pool.rs).
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
        content_type: &str,
        headers: &[(&str, &str)],
    ) -> Result<Response<Incoming>> {
        let repeatable = method == Method::GET || method == Method::HEAD;
        let req = self.request(method.clone(), path, body.clone(), content_type, headers)?;
        let sent = match self.pool.send(req, || self.open()).await {
            // A GET or HEAD that lost a kept connection (the server closed
            // it as the request went out): once more on a new one.
            Err(SendError::Http { reused: true, .. }) if repeatable => {
                let req = self.request(method, path, body, content_type, headers)?;
                self.pool.send_fresh(req, || self.open()).await
            }
            other => other,
        };
        let resp = sent.map_err(|e| match e {
            SendError::Open(e) => e,
            SendError::Http { error, .. } => self.unreachable(format!("{path}: {error}")),
        })?;
        if resp.status() == StatusCode::UNAUTHORIZED {
            return Err(Error::Unauthorized {
                what: format!("strata serve at {} refused the token (401)", self.url),
                hint: "the token is missing, wrong or revoked: create one with `strata token create` on the server's host and pass it in STRATA_TOKEN or --token-file".into(),
            });
        }
        Ok(resp)
    }

    /// Send JSON (or nothing), expect JSON.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<T> {
        let bytes = match body {
            Some(b) => Bytes::from(serde_json::to_vec(b).expect("request serializes")),
            None => Bytes::new(),
        };
        let resp = self
            .send(method, path, bytes, "application/json", &[])
            .await?;
        self.json(resp).await
    }

    /// The whole body of a 2xx response, anything else as a typed error.
    pub async fn bytes(&self, resp: Response<Incoming>) -> Result<Bytes> {
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| self.unreachable(format!("reading the response: {e}")))?
            .to_bytes();
        if status.is_success() {
            return Ok(body);
        }
        Err(self.error_from(status, &body))
    }

    /// Parse a response: 2xx into `T`, anything else into a typed error.
    pub async fn json<T: DeserializeOwned>(&self, resp: Response<Incoming>) -> Result<T> {
        let body = self.bytes(resp).await?;
        serde_json::from_slice(&body).map_err(|e| Error::Unreachable {
            what: format!(
                "unexpected response from {} ({e}): {}",
                self.url,
                String::from_utf8_lossy(&body)
            ),
            hint: "the server and this client are different versions; use the same strata on both sides".into(),
        })
    }

    /// The server's `{"error": {"code", "message"}}` as a typed error.
    pub fn error_from(&self, status: StatusCode, body: &[u8]) -> Error {
        let Ok(ErrorBody { error: d }) = serde_json::from_slice::<ErrorBody>(body) else {
            return Error::Unreachable {
                what: format!(
                    "{}: HTTP {status}: {}",
                    self.url,
                    String::from_utf8_lossy(body)
                ),
                hint: "is this address a strata server?".into(),
            };
        };
        let what = d.message;
        match d.code {
            ErrorCode::NotFound => Error::not_found(what, ""),
            ErrorCode::Conflict => Error::Conflict {
                what,
                actual_head: d.actual_head.unwrap_or_default(),
                hint: "re-read the branch and retry from the new head".into(),
                source: None,
            },
            ErrorCode::Busy => Error::busy(what, "retry shortly"),
            ErrorCode::Forbidden => Error::Unauthorized {
                what: format!("strata serve at {} refused (403): {what}", self.url),
                hint: "the token is scoped to other projects".into(),
            },
            ErrorCode::Internal => {
                Error::backend(format!("strata serve at {}: {what}", self.url), "")
            }
            // invalid_input, invalid_json, unknown_field, already_exists,
            // payload_too_large, unsupported_media_type,
            // range_not_satisfiable: the request was refused.
            _ => Error::invalid(what, ""),
        }
    }
}

/// `host:port[/...]` (a trailing slash allowed) as (`host:port`, `host`).
fn host_port(rest: &str) -> std::result::Result<(String, String), String> {
    let hp = rest.trim_end_matches('/');
    if hp.contains('/') || hp.contains('?') || hp.contains('@') {
        return Err("give only HOST:PORT after the scheme (no path, query or user)".into());
    }
    let (host, port) = hp
        .rsplit_once(':')
        .ok_or_else(|| "the port is missing (HOST:PORT)".to_string())?;
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(format!("{hp:?} is not HOST:PORT"));
    }
    Ok((hp.to_string(), host.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_fingerprints_parse() {
        assert!(Remote::new("unix:///run/s.sock", "t", None).is_ok());
        assert!(Remote::new("http://127.0.0.1:7878", "t", None).is_ok());
        assert!(Remote::new("http://127.0.0.1:7878/", "t", None).is_ok());
        assert!(Remote::new("unix://rel.sock", "t", None).is_err());
        assert!(Remote::new("http://127.0.0.1", "t", None).is_err());
        assert!(Remote::new("ftp://x:1", "t", None).is_err());
        assert!(Remote::new("http://127.0.0.1:1", "", None).is_err());
        let f = "sha256:".to_string() + &"ab".repeat(32);
        assert!(Remote::new("https://localhost:8443", "t", Some(&f)).is_ok());
        assert!(Remote::new("http://127.0.0.1:1", "t", Some(&f)).is_err());
        assert_eq!(parse_fingerprint(&f).unwrap(), [0xab; 32]);
        let colons = "AB:".repeat(31) + "AB";
        assert_eq!(parse_fingerprint(&colons).unwrap(), [0xab; 32]);
        assert!(parse_fingerprint("abcd").is_err());
    }
}
