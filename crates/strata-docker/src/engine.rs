//! A thin, typed client of the Docker Engine API over its Unix socket:
//! HTTP/1.1 (hyper) on a fresh connection per request, JSON bodies, one
//! private current-thread tokio runtime so that the blocking [`Backend`]
//! methods can use it (they run on plain threads; the SDK calls them from
//! `spawn_blocking`).
//!
//! Every call is versioned (`/v1.41/...`): the Engine then answers with the
//! shapes documented for that version whatever its own version is, and an
//! Engine too old for it is refused up front by [`Engine::connect`] (it
//! reads `GET /version`, which is unversioned, and compares `ApiVersion`).
//!
//! [`Backend`]: strata_sandbox::Backend

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;

use crate::DockerError;

/// The Engine API version every request uses (Docker 20.10, the version
/// Debian 12 ships). Init, Mounts with tmpfs options, the archive API and
/// label filters are all older than this.
pub const API_VERSION: (u32, u32) = (1, 41);
/// Default socket when neither the caller nor `DOCKER_HOST` names one.
pub const DEFAULT_SOCKET: &str = "/var/run/docker.sock";
/// Bound of one request (an archive upload of a ~30 MiB binary included).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// A connection factory for one Engine.
#[derive(Debug, Clone)]
pub struct Engine {
    socket: PathBuf,
    /// What `GET /version` said, e.g. `1.41` / `20.10.24+dfsg1`.
    api_version: String,
    version: String,
}

/// One answer: status and body.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
}

impl Reply {
    /// The Engine's error message (`{"message": ...}`), or the body as text.
    pub fn message(&self) -> String {
        #[derive(serde::Deserialize)]
        struct Msg {
            message: String,
        }
        match serde_json::from_slice::<Msg>(&self.body) {
            Ok(m) => m.message,
            Err(_) => String::from_utf8_lossy(&self.body).trim().to_string(),
        }
    }
}

/// The socket named by `DOCKER_HOST` (`unix://PATH` only), else
/// [`DEFAULT_SOCKET`]. A TCP `DOCKER_HOST` is refused: the backend's
/// endpoint and bind mounts assume the Engine runs on this kernel.
pub fn socket_from_env() -> Result<PathBuf, DockerError> {
    match std::env::var("DOCKER_HOST") {
        Ok(h) if !h.is_empty() => match h.strip_prefix("unix://") {
            Some(p) => Ok(PathBuf::from(p)),
            None => Err(DockerError::Unsupported {
                what: format!("DOCKER_HOST={h}"),
                message: "only a local unix:// Engine socket is supported (bind mounts and the daemon's socket live on this machine)".into(),
            }),
        },
        _ => Ok(PathBuf::from(DEFAULT_SOCKET)),
    }
}

fn parse_version(v: &str) -> Option<(u32, u32)> {
    let (a, b) = v.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

impl Engine {
    /// Connect to the Engine at `socket` and check its API version.
    pub fn connect(socket: impl Into<PathBuf>) -> Result<Engine, DockerError> {
        let socket = socket.into();
        // A missing socket is the common case (dockerd not running): say
        // so before trying to speak HTTP to it.
        if let Err(source) = std::fs::metadata(&socket) {
            return Err(DockerError::NoEngine { socket, source });
        }
        let mut engine = Engine {
            socket,
            api_version: String::new(),
            version: String::new(),
        };
        #[derive(serde::Deserialize)]
        struct Version {
            #[serde(rename = "ApiVersion")]
            api_version: String,
            #[serde(rename = "Version", default)]
            version: String,
        }
        // Unversioned on purpose: an old Engine answers it too.
        let r = engine.raw(Method::GET, "/version", None)?;
        if !r.status.is_success() {
            return Err(DockerError::Engine {
                action: "GET /version".into(),
                status: r.status.as_u16(),
                message: r.message(),
            });
        }
        let v: Version = decode("GET /version", &r.body)?;
        let have = parse_version(&v.api_version);
        if have.is_none_or(|h| h < API_VERSION) {
            return Err(DockerError::ApiTooOld {
                socket: engine.socket.clone(),
                have: v.api_version,
                need: format!("{}.{}", API_VERSION.0, API_VERSION.1),
            });
        }
        engine.api_version = v.api_version;
        engine.version = v.version;
        Ok(engine)
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The Engine's API version and its release, as it reported them.
    pub fn versions(&self) -> (&str, &str) {
        (&self.api_version, &self.version)
    }

    /// One request to an unversioned path.
    fn raw(
        &self,
        method: Method,
        path: &str,
        body: Option<(&'static str, Bytes)>,
    ) -> Result<Reply, DockerError> {
        let action = format!("{method} {path}");
        let socket = self.socket.clone();
        let fut = async move {
            let stream = tokio::net::UnixStream::connect(&socket)
                .await
                .map_err(|source| DockerError::NoEngine {
                    socket: socket.clone(),
                    source,
                })?;
            let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| DockerError::Protocol {
                    action: action.clone(),
                    message: e.to_string(),
                })?;
            tokio::spawn(conn);
            let mut req = Request::builder()
                .method(method)
                .uri(path)
                // Required by HTTP/1.1; the Engine ignores its value.
                .header(hyper::header::HOST, "docker");
            let body = match body {
                Some((ct, b)) => {
                    req = req.header(hyper::header::CONTENT_TYPE, ct);
                    b
                }
                None => Bytes::new(),
            };
            let req = req
                .body(Full::new(body))
                .map_err(|e| DockerError::Protocol {
                    action: action.clone(),
                    message: e.to_string(),
                })?;
            let resp = send
                .send_request(req)
                .await
                .map_err(|e| DockerError::Protocol {
                    action: action.clone(),
                    message: e.to_string(),
                })?;
            let status = resp.status();
            let headers = resp.headers().clone();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| DockerError::Protocol {
                    action: action.clone(),
                    message: format!("reading the body: {e}"),
                })?
                .to_bytes();
            Ok(Reply {
                status,
                headers,
                body,
            })
        };
        let action = path.to_string();
        let socket = self.socket.clone();
        // A current-thread runtime per request, built and dropped here: an
        // Engine (and a backend holding one) can then be dropped anywhere,
        // also inside someone's async task, which a runtime kept in the
        // struct forbids (tokio panics when a runtime is dropped there).
        let run = move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|source| DockerError::Io {
                    action: "start the Engine client's runtime",
                    path: socket,
                    source,
                })?;
            rt.block_on(async { tokio::time::timeout(REQUEST_TIMEOUT, fut).await })
                .map_err(|_| DockerError::Timeout {
                    action,
                    after: REQUEST_TIMEOUT,
                })?
        };
        // Called from inside a runtime (an async caller that did not use
        // spawn_blocking): block_on would panic there, so run the request
        // on a thread of its own.
        if tokio::runtime::Handle::try_current().is_ok() {
            std::thread::scope(|s| s.spawn(run).join()).unwrap_or_else(|_| {
                Err(DockerError::Protocol {
                    action: path.to_string(),
                    message: "the request thread panicked".into(),
                })
            })
        } else {
            run()
        }
    }

    /// One request to `/v1.41{path}`.
    pub fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<(&'static str, Bytes)>,
    ) -> Result<Reply, DockerError> {
        let p = format!("/v{}.{}{path}", API_VERSION.0, API_VERSION.1);
        self.raw(method, &p, body)
    }

    /// A JSON request whose success status is any 2xx; anything else is a
    /// typed [`DockerError::Engine`] with the Engine's message.
    pub fn json<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<T, DockerError> {
        let action = format!("{method} {path}");
        let body = body.map(|b| ("application/json", Bytes::from(b.to_string())));
        let r = self.call(method, path, body)?;
        if !r.status.is_success() {
            return Err(DockerError::Engine {
                action,
                status: r.status.as_u16(),
                message: r.message(),
            });
        }
        decode(&action, &r.body)
    }

    /// A request whose answer has no body of interest; `ok` lists the
    /// statuses that count as success besides 2xx (e.g. 304 "already
    /// stopped", 404 "already gone").
    pub fn expect(
        &self,
        method: Method,
        path: &str,
        body: Option<(&'static str, Bytes)>,
        ok: &[u16],
    ) -> Result<StatusCode, DockerError> {
        let action = format!("{method} {path}");
        let r = self.call(method, path, body)?;
        if r.status.is_success() || ok.contains(&r.status.as_u16()) {
            return Ok(r.status);
        }
        Err(DockerError::Engine {
            action,
            status: r.status.as_u16(),
            message: r.message(),
        })
    }
}

impl Engine {
    /// Import a root filesystem tar as image `repo:tag` (`POST
    /// /images/create?fromSrc=-`, the API behind `docker import`; no
    /// registry involved) and return its image ID (`sha256:…`).
    pub fn import_image(
        &self,
        rootfs_tar: Vec<u8>,
        repo: &str,
        tag: &str,
    ) -> Result<String, DockerError> {
        let path = format!("/images/create?fromSrc=-&repo={}&tag={}", q(repo), q(tag));
        let r = self.call(
            Method::POST,
            &path,
            Some(("application/x-tar", Bytes::from(rootfs_tar))),
        )?;
        // The answer is a stream of JSON progress messages; a failure can
        // come as an `error` message with status 200.
        let text = String::from_utf8_lossy(&r.body);
        let streamed_error = text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find_map(|v| v["error"].as_str().map(String::from));
        if !r.status.is_success() || streamed_error.is_some() {
            return Err(DockerError::Engine {
                action: format!("POST {path}"),
                status: r.status.as_u16(),
                message: streamed_error.unwrap_or_else(|| r.message()),
            });
        }
        #[derive(serde::Deserialize)]
        struct Img {
            #[serde(rename = "Id")]
            id: String,
        }
        let img: Img = self.json(
            Method::GET,
            &format!("/images/{}/json", q(&format!("{repo}:{tag}"))),
            None,
        )?;
        Ok(img.id)
    }
}

fn decode<T: DeserializeOwned>(action: &str, body: &[u8]) -> Result<T, DockerError> {
    serde_json::from_slice(body).map_err(|e| DockerError::Protocol {
        action: action.to_string(),
        message: format!("unexpected JSON: {e}"),
    })
}

/// Percent-encode a query value (RFC 3986 unreserved characters stay).
pub fn q(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The payloads of a non-TTY container's log stream. The Engine
/// multiplexes stdout and stderr into frames of an 8-byte header (stream
/// type, 3 zero bytes, big-endian u32 length) and the payload (Engine API,
/// "Attach to a container", stream format). Returns (stdout, stderr); a
/// truncated last frame is ignored.
pub fn demux_logs(mut raw: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    while raw.len() >= 8 {
        let len = u32::from_be_bytes([raw[4], raw[5], raw[6], raw[7]]) as usize;
        let Some(payload) = raw.get(8..8 + len) else {
            break;
        };
        match raw[0] {
            2 => err.extend_from_slice(payload),
            _ => out.extend_from_slice(payload),
        }
        raw = &raw[8 + len..];
    }
    (out, err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_numerically() {
        assert_eq!(parse_version("1.41"), Some((1, 41)));
        assert!(parse_version("1.9").unwrap() < API_VERSION);
        assert!(parse_version("1.100").unwrap() > API_VERSION);
        assert_eq!(parse_version("x"), None);
    }

    #[test]
    fn log_frames_are_split_by_stream() {
        let mut raw = vec![1, 0, 0, 0, 0, 0, 0, 3];
        raw.extend_from_slice(b"ab\n");
        raw.extend_from_slice(&[2, 0, 0, 0, 0, 0, 0, 2]);
        raw.extend_from_slice(b"e\n");
        raw.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 9, b'x']);
        assert_eq!(demux_logs(&raw), (b"ab\n".to_vec(), b"e\n".to_vec()));
    }

    #[test]
    fn query_values_are_encoded() {
        assert_eq!(
            q(r#"{"label":["a=b"]}"#),
            "%7B%22label%22%3A%5B%22a%3Db%22%5D%7D"
        );
    }
}
