//! The two clients `strata serve` has beyond plain HTTP: a WebSocket
//! (tokio-tungstenite over the Unix socket) and a TLS client that pins the
//! server's certificate fingerprint (rustls with a custom verifier).

use std::sync::Arc;

use serde_json::Value;

use super::*;

pub enum WsIn {
    Bin(Vec<u8>),
    Text(Value),
}

/// Connect a WebSocket over the server's Unix socket, send `input`, and
/// collect stdout, stderr and the final text frame until the close.
pub async fn ws_session(
    sock: &str,
    token: &str,
    path: &str,
    input: Vec<WsIn>,
) -> (Vec<u8>, Vec<u8>, Value) {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message;
    let stream = tokio::net::UnixStream::connect(sock).await.unwrap();
    let mut req = format!("ws://strata{path}").into_client_request().unwrap();
    req.headers_mut()
        .insert("Authorization", format!("Bearer {token}").parse().unwrap());
    let (mut ws, resp) = tokio_tungstenite::client_async(req, stream)
        .await
        .unwrap_or_else(|e| panic!("websocket upgrade of {path}: {e}"));
    assert_eq!(resp.status(), 101);
    for m in input {
        let msg = match m {
            WsIn::Bin(b) => Message::Binary(b.into()),
            WsIn::Text(v) => Message::Text(v.to_string().into()),
        };
        ws.send(msg).await.unwrap();
    }
    let (mut out, mut err, mut end) = (Vec::new(), Vec::new(), Value::Null);
    let read = async {
        while let Some(m) = ws.next().await {
            match m.unwrap() {
                Message::Binary(b) => match b.first() {
                    Some(1) => out.extend_from_slice(&b[1..]),
                    Some(2) => err.extend_from_slice(&b[1..]),
                    other => panic!("untagged binary frame {other:?}"),
                },
                Message::Text(t) => end = serde_json::from_str(t.as_str()).unwrap(),
                Message::Close(_) => break,
                _ => {}
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), read)
        .await
        .expect("the WebSocket ends within 60 s");
    (out, err, end)
}

/// A rustls verifier that accepts exactly one certificate: the one whose
/// SHA-256 is pinned (signatures still checked with the provider's
/// algorithms).
#[derive(Debug)]
pub struct Pin {
    want: [u8; 32],
    provider: Arc<tokio_rustls::rustls::crypto::CryptoProvider>,
}

mod pin_impl {
    use super::Pin;
    use sha2::Digest;
    use tokio_rustls::rustls::client::danger::{
        HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
    };
    use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use tokio_rustls::rustls::{DigitallySignedStruct, Error, SignatureScheme};

    impl ServerCertVerifier for Pin {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: UnixTime,
        ) -> Result<ServerCertVerified, Error> {
            let got: [u8; 32] = sha2::Sha256::digest(end_entity.as_ref()).into();
            if got == self.want {
                Ok(ServerCertVerified::assertion())
            } else {
                Err(Error::General(
                    "certificate fingerprint does not match the pin".into(),
                ))
            }
        }
        fn verify_tls12_signature(
            &self,
            m: &[u8],
            c: &CertificateDer<'_>,
            d: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            tokio_rustls::rustls::crypto::verify_tls12_signature(
                m,
                c,
                d,
                &self.provider.signature_verification_algorithms,
            )
        }
        fn verify_tls13_signature(
            &self,
            m: &[u8],
            c: &CertificateDer<'_>,
            d: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            tokio_rustls::rustls::crypto::verify_tls13_signature(
                m,
                c,
                d,
                &self.provider.signature_verification_algorithms,
            )
        }
        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.provider
                .signature_verification_algorithms
                .supported_schemes()
        }
    }
}

/// One HTTP/1.1 request over TLS to `addr`, pinning `fp`.
pub async fn tls_get(addr: &str, fp: [u8; 32], path: &str, token: &str) -> std::io::Result<Resp> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::rustls;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pin { want: fp, provider }))
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await?;
    tls.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: strata\r\nConnection: close\r\nAuthorization: Bearer {token}\r\n\r\n")
            .as_bytes(),
    )
    .await?;
    let mut raw = Vec::new();
    let _ = tls.read_to_end(&mut raw).await;
    Ok(parse(&raw))
}

/// The fingerprint's 32 bytes (the format of strata-api's `fingerprint`).
pub fn strata_server_fingerprint(s: &str) -> [u8; 32] {
    let hex = s.strip_prefix("sha256:").unwrap();
    std::array::from_fn(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
}
