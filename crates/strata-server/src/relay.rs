//! The relay: every daemon route `/v1/X` of a Sandbox is served as
//! `/v1/sandboxes/{id}/X`, by path prefix, so a route the daemon gains
//! needs no change here. The server speaks to the daemon with the daemon's
//! own token (the client's token never reaches the daemon, and the client
//! never sees the daemon's). Bodies stream both ways: the request's body
//! is handed to the daemon as it arrives and the daemon's answer to the
//! client as it comes, so an exec's output keeps its back-pressure and a
//! large read is never buffered here.
//!
//! Two forms of the exec output stream are the server's own: NDJSON lines
//! ([`OutputLine`], `?format=ndjson`) and an interactive WebSocket
//! ([`WsControl`]; docs/server.md).

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderName, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use base64::Engine;
use futures_util::{SinkExt, Stream, StreamExt};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use strata_sdk::pool::SendError;

use crate::api::*;
use crate::error::ApiError;
use crate::routes::{ApiPath, AppResult, St};
use crate::sandboxes::{daemon, forget, Daemon};
use crate::scope::Caller;
use crate::ServerState;

/// Largest mount request read before relaying it (its project is checked
/// first); a mount request is a few hundred bytes.
const MOUNT_BODY_MAX: usize = 64 << 10;

/// Request headers that are the connection's, not the request's, or that
/// the server sets itself (RFC 9110 §7.6.1), never forwarded.
/// `Expect: 100-continue` was answered by this server already.
const HOP: [HeaderName; 7] = [
    header::HOST,
    header::AUTHORIZATION,
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::TE,
    header::UPGRADE,
    header::EXPECT,
];

fn stopped(d: &Daemon, e: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        ErrorCode::Stopped,
        format!(
            "sandbox {} is not running: its daemon does not answer ({e}); POST /v1/sandboxes/{}/restart starts it again",
            d.id, d.id
        ),
    )
}

/// One request to the daemon over its Unix socket, with its token, on a
/// connection an earlier request left open and ready, else a new one
/// (strata-sdk's pool.rs: a connection still streaming, an exec's output,
/// is never used for another request, so a long stream never holds up
/// other calls; a request is sent again only when it surely was not sent).
pub(crate) async fn send(
    st: &ServerState,
    d: &Daemon,
    method: Method,
    path_and_query: &str,
    headers: &HeaderMap,
    body: Body,
) -> AppResult<hyper::Response<Incoming>> {
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(path_and_query)
        .body(body)
        .map_err(|e| ApiError::invalid(format!("cannot relay this request: {e}")))?;
    for (k, v) in headers {
        if !HOP.contains(k) {
            req.headers_mut().append(k.clone(), v.clone());
        }
    }
    let h = req.headers_mut();
    h.insert(header::HOST, "strata-daemon".parse().expect("valid header"));
    h.insert(
        header::AUTHORIZATION,
        format!("Bearer {}", d.token)
            .parse()
            .map_err(|_| ApiError::internal("the daemon token is not a valid header"))?,
    );
    let open = || async {
        let stream = match tokio::net::UnixStream::connect(&d.socket).await {
            Ok(s) => s,
            Err(e) => {
                // Perhaps restarted under another socket: look it up again
                // next time.
                forget(st, &d.id);
                return Err(stopped(d, e));
            }
        };
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| stopped(d, e))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    };
    let resp = d.pool.send(req, open).await.map_err(|e| match e {
        SendError::Open(e) => e,
        SendError::Http { error, .. } => stopped(d, error),
    })?;
    if resp.status() == StatusCode::UNAUTHORIZED {
        // The daemon refused the server's own token: not the client's
        // doing, and its 401 must not read as the client's token refused.
        return Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            ErrorCode::Backend,
            format!(
                "sandbox {}: its daemon refused the server's token (the Sandbox's token file changed?); close and re-create the Sandbox",
                d.id
            ),
        ));
    }
    Ok(resp)
}

/// The daemon's answer as the client's, its body streamed until the
/// server shuts down.
fn relayed(st: &ServerState, resp: hyper::Response<Incoming>) -> Response {
    let (mut parts, body) = resp.into_parts();
    for h in [header::CONNECTION, header::TRANSFER_ENCODING] {
        parts.headers.remove(h);
    }
    let stop = st.shutting_down();
    let body = Body::from_stream(body.into_data_stream().take_until(stop));
    Response::from_parts(parts, body)
}

/// The raw (still percent-encoded) part of the path after
/// `/v1/sandboxes/{id}/`.
fn rest_of(uri: &Uri) -> &str {
    uri.path().splitn(5, '/').nth(4).unwrap_or("")
}

/// `/v1/sandboxes/{id}/{*rest}`, every method: relayed to the daemon's
/// `/v1/{rest}`.
pub(crate) async fn relay(
    State(st): St,
    Extension(caller): Extension<Caller>,
    ApiPath((id, decoded)): ApiPath<(String, String)>,
    req: Request,
) -> AppResult<Response> {
    let d = daemon(&st, &caller, &id).await?;
    let (parts, body) = req.into_parts();
    let rest = rest_of(&parts.uri).to_string();
    let segs: Vec<&str> = rest.split('/').collect();
    // Closing is DELETE /v1/sandboxes/{id}: the daemon's own shutdown
    // would leave a Sandbox that reads as crashed.
    if segs[0] == "shutdown" {
        return Err(ApiError::not_found(
            "no such route: close a Sandbox with DELETE /v1/sandboxes/{id}",
        ));
    }
    let mut query = parts.uri.query().map(str::to_string);
    let mut ndjson = false;
    if parts.method == Method::GET && segs.len() == 3 && segs[0] == "execs" && segs[2] == "output" {
        let mut pairs: Vec<(String, String)> =
            serde_urlencoded::from_str(query.as_deref().unwrap_or(""))
                .map_err(|e| ApiError::invalid(format!("query: {e}")))?;
        if let Some(i) = pairs.iter().position(|(k, _)| k == "format") {
            match pairs.remove(i).1.as_str() {
                "ndjson" => ndjson = true,
                "frames" => {}
                other => {
                    return Err(ApiError::invalid(format!(
                        "format {other:?}: give format=ndjson (lines {{\"stream\",\"seq\",\"data_b64\"}} then {{\"exit\"}}), or leave it out for the daemon's frames"
                    )))
                }
            }
        }
        query = Some(serde_urlencoded::to_string(&pairs).unwrap_or_default());
    }
    let is_mount = parts.method == Method::POST
        && (rest.trim_matches('/') == "workspaces" || decoded.trim_matches('/') == "workspaces");
    let body = if is_mount {
        // Mounting: the branch must be of a project this token sees and,
        // in a Sandbox created for a project, of that project.
        let bytes = axum::body::to_bytes(body, MOUNT_BODY_MAX)
            .await
            .map_err(|_| {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    ErrorCode::PayloadTooLarge,
                    "a mount request is {\"ref\": \"PROJECT/BRANCH\", \"at\": PATH}; this body is larger than 64 KiB",
                )
            })?;
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) {
            if let Some(r) = v.get("ref").and_then(|r| r.as_str()) {
                let project = r.split('/').next().unwrap_or("");
                let allowed =
                    caller.scope.sees(project) && d.project.as_deref().is_none_or(|p| p == project);
                if !allowed {
                    return Err(ApiError::not_found(format!(
                        "branch not found: {r}{}",
                        match &d.project {
                            Some(p) => format!(" (this Sandbox mounts branches of project {p})"),
                            None => String::new(),
                        }
                    )));
                }
            }
        }
        Body::from(bytes)
    } else {
        body
    };
    let target = match query.as_deref().filter(|q| !q.is_empty()) {
        Some(q) => format!("/v1/{rest}?{q}"),
        None => format!("/v1/{rest}"),
    };
    let resp = send(&st, &d, parts.method, &target, &parts.headers, body).await?;
    if ndjson && resp.status() == StatusCode::OK {
        let (mut parts, body) = resp.into_parts();
        parts.headers.remove(header::CONTENT_LENGTH);
        parts.headers.remove(header::TRANSFER_ENCODING);
        let stop = st.shutting_down();
        let out = lines(body)
            .map(|l| {
                let mut v = serde_json::to_vec(&output_line(&l)).expect("serializes");
                v.push(b'\n');
                Ok::<Bytes, std::convert::Infallible>(Bytes::from(v))
            })
            .take_until(stop);
        return Ok(Response::from_parts(parts, Body::from_stream(out)));
    }
    Ok(relayed(&st, resp))
}

/// The daemon's NDJSON output body as its lines (without the newline).
fn lines(body: Incoming) -> impl Stream<Item = Bytes> + Send + 'static {
    let s = body.into_data_stream();
    futures_util::stream::unfold(
        (s, Vec::<u8>::new(), false),
        |(mut s, mut buf, mut done)| async move {
            loop {
                if let Some(i) = buf.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=i).collect();
                    return Some((Bytes::from(line[..i].to_vec()), (s, buf, done)));
                }
                if done {
                    if buf.is_empty() {
                        return None;
                    }
                    let line = std::mem::take(&mut buf);
                    return Some((Bytes::from(line), (s, buf, done)));
                }
                match s.next().await {
                    Some(Ok(chunk)) => buf.extend_from_slice(&chunk),
                    _ => done = true,
                }
            }
        },
    )
}

/// One daemon frame (`{"type": "stdout", "seq", "data"}`, …, `{"type":
/// "exit", …}`) as the server's [`OutputLine`]. A line that is not a frame
/// (it cannot happen with a daemon of this version) reads as a failure,
/// never as made-up output.
fn output_line(line: &[u8]) -> OutputLine {
    let bad = |why: &str| OutputLine::Failed {
        failed: ExecFailed {
            stage: "relay".into(),
            message: format!(
                "the daemon sent an output line the server does not understand ({why}): {}",
                String::from_utf8_lossy(line)
            ),
            errno: None,
            errno_name: None,
        },
    };
    let Ok(serde_json::Value::Object(mut m)) = serde_json::from_slice(line) else {
        return bad("not a JSON object");
    };
    let kind = m
        .remove("type")
        .and_then(|t| t.as_str().map(String::from))
        .unwrap_or_default();
    let seq = m.get("seq").and_then(|s| s.as_u64()).unwrap_or(0);
    m.remove("seq");
    let obj = serde_json::Value::Object(m);
    match kind.as_str() {
        "stdout" | "stderr" => OutputLine::Chunk {
            stream: kind,
            seq,
            data_b64: obj["data"].as_str().unwrap_or("").to_string(),
        },
        "exit" => match serde_json::from_value(obj) {
            Ok(exit) => OutputLine::Exit { exit },
            Err(e) => bad(&e.to_string()),
        },
        "error" => match serde_json::from_value(obj) {
            Ok(failed) => OutputLine::Failed { failed },
            Err(e) => bad(&e.to_string()),
        },
        other => bad(&format!("type {other:?}")),
    }
}

#[utoipa::path(get, tag = "sandboxes", path = "/v1/sandboxes/{id}/execs/{eid}/ws",
    params(("id" = String, Path, description = "Sandbox ID"),
           ("eid" = String, Path, description = "Exec ID")),
    responses(
        (status = 101, description = "WebSocket: binary frames in are stdin; binary frames out are output, first byte 1 (stdout) or 2 (stderr); a text WsControl frame in resizes the terminal or closes stdin; the last frame out is a text OutputLine (exit or failed), then close"),
        (status = 400, description = "Not a WebSocket upgrade request", body = ErrorBody),
        (status = 401, description = "Missing, wrong or revoked token", body = ErrorBody),
        (status = 404, description = "No such Sandbox or exec (or not in the token's scope)", body = ErrorBody),
        (status = 409, description = "The exec's output is attached elsewhere, or the Sandbox is stopped", body = ErrorBody)))]
pub(crate) async fn ws(
    State(st): St,
    Extension(caller): Extension<Caller>,
    ApiPath((id, eid)): ApiPath<(String, String)>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> AppResult<Response> {
    let d = daemon(&st, &caller, &id).await?;
    if eid.is_empty() || !eid.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(ApiError::not_found(format!(
            "no exec {eid:?} in sandbox {id}"
        )));
    }
    let upgrade = upgrade.map_err(|e| {
        ApiError::invalid(format!(
            "{e}: this route is a WebSocket (GET with Upgrade: websocket); for a plain stream use GET /v1/sandboxes/{id}/execs/{eid}/output?format=ndjson"
        ))
    })?;
    let out = send(
        &st,
        &d,
        Method::GET,
        &format!("/v1/execs/{eid}/output"),
        &HeaderMap::new(),
        Body::empty(),
    )
    .await?;
    if out.status() != StatusCode::OK {
        return Ok(relayed(&st, out));
    }
    let st2 = st.clone();
    Ok(upgrade
        .on_upgrade(move |sock| session(st2, d, eid, caller.token_id, out.into_body(), sock))
        .into_response())
}

/// How often an open WebSocket re-checks its token: a revoked token ends
/// the session within this long (close code 1008, policy violation, RFC
/// 6455 §7.4.1), as the next plain request would be refused.
const TOKEN_RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// One WebSocket session: output out, stdin and control in, each
/// direction on its own task so a command that does not read its stdin
/// cannot stop its output from flowing.
async fn session(
    st: Arc<ServerState>,
    d: Arc<Daemon>,
    eid: String,
    token_id: String,
    out: Incoming,
    sock: WebSocket,
) {
    let (mut tx, mut rx) = sock.split();
    let (err_tx, mut err_rx) = tokio::sync::mpsc::channel::<String>(4);
    let input = {
        let (st, d, eid) = (st.clone(), d.clone(), eid.clone());
        tokio::spawn(async move {
            while let Some(Ok(msg)) = rx.next().await {
                let (path, body, ctype) = match msg {
                    Message::Binary(b) => (
                        format!("/v1/execs/{eid}/stdin"),
                        b,
                        "application/octet-stream",
                    ),
                    Message::Text(t) => match serde_json::from_str::<WsControl>(t.as_str()) {
                        Ok(WsControl::Resize { rows, cols }) => (
                            format!("/v1/execs/{eid}/resize"),
                            Bytes::from(
                                serde_json::json!({"rows": rows, "cols": cols}).to_string(),
                            ),
                            "application/json",
                        ),
                        Ok(WsControl::CloseStdin) => (
                            format!("/v1/execs/{eid}/stdin/close"),
                            Bytes::new(),
                            "application/json",
                        ),
                        Err(e) => {
                            let _ = err_tx
                                .send(format!("text frame {t:?}: {e}; expected {{\"type\": \"resize\", \"rows\", \"cols\"}} or {{\"type\": \"close_stdin\"}}"))
                                .await;
                            continue;
                        }
                    },
                    Message::Close(_) => break,
                    _ => continue,
                };
                let mut h = HeaderMap::new();
                h.insert(header::CONTENT_TYPE, ctype.parse().expect("valid header"));
                let r = send(&st, &d, Method::POST, &path, &h, Body::from(body)).await;
                let msg = match r {
                    Ok(resp) if resp.status().is_success() => None,
                    Ok(resp) => {
                        let status = resp.status();
                        let b = resp
                            .into_body()
                            .collect()
                            .await
                            .map(|c| c.to_bytes())
                            .unwrap_or_default();
                        Some(format!(
                            "{path}: HTTP {status}: {}",
                            String::from_utf8_lossy(&b)
                        ))
                    }
                    Err(e) => Some(e.detail.message),
                };
                if let Some(m) = msg {
                    let _ = err_tx.send(m).await;
                }
            }
        })
    };
    let stop = st.shutting_down();
    tokio::pin!(stop);
    let lines = lines(out);
    tokio::pin!(lines);
    let close = |code: u16, reason: &str| {
        Message::Close(Some(CloseFrame {
            code,
            reason: reason.to_string().into(),
        }))
    };
    let mut recheck = tokio::time::interval(TOKEN_RECHECK);
    recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut stop => {
                let _ = tx.send(close(1001, "the server is shutting down")).await;
                break;
            }
            _ = recheck.tick() => {
                // A token store that cannot be read ends the session too:
                // it could not be checked either.
                if !st.tokens.is_live(&token_id).unwrap_or(false) {
                    let _ = tx.send(close(1008, "the token was revoked")).await;
                    break;
                }
            }
            m = err_rx.recv() => {
                // None: the client's half ended (it closed or went away).
                // Stop reading the output too, so that the exec's one
                // output attachment is free for the next reader.
                let Some(m) = m else { break };
                let e = ErrorBody { error: ErrorDetail { code: ErrorCode::InvalidInput, message: m, hint: None, actual_head: None, errno: None } };
                if tx.send(Message::Text(serde_json::to_string(&e).unwrap_or_default().into())).await.is_err() {
                    break;
                }
            }
            line = lines.next() => {
                let Some(line) = line else {
                    let _ = tx.send(close(1011, "the exec's output stream ended without an exit")).await;
                    break;
                };
                let msg = match output_line(&line) {
                    OutputLine::Chunk { stream, data_b64, .. } => {
                        let tag = if stream == "stderr" { WS_STDERR } else { WS_STDOUT };
                        let mut v = vec![tag];
                        v.extend(base64::engine::general_purpose::STANDARD.decode(data_b64).unwrap_or_default());
                        Message::Binary(v.into())
                    }
                    end => {
                        let _ = tx.send(Message::Text(serde_json::to_string(&end).unwrap_or_default().into())).await;
                        let _ = tx.send(close(1000, "")).await;
                        break;
                    }
                };
                if tx.send(msg).await.is_err() {
                    break;
                }
            }
        }
    }
    // RFC 6455 §7.1.1: the TCP connection is closed after both sending
    // and receiving a Close frame. The input task ends when the client's
    // Close (or the end of its stream) arrives; dropping the socket before
    // that resets a client still answering our Close, and clients that
    // treat that write error as fatal (Python's websockets) then lose the
    // frames they had not handed out yet, the exit frame among them. A
    // client that never answers is cut off after a grace period.
    let mut input = input;
    if tokio::time::timeout(std::time::Duration::from_secs(2), &mut input)
        .await
        .is_err()
    {
        input.abort();
    }
    drop(tx);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn daemon_frames_become_output_lines() {
        let l = output_line(br#"{"type":"stderr","seq":4,"data":"aGk="}"#);
        assert_eq!(
            serde_json::to_value(&l).unwrap(),
            serde_json::json!({"stream": "stderr", "seq": 4, "data_b64": "aGk="})
        );
        let l =
            output_line(br#"{"type":"exit","seq":5,"code":3,"cancelled":false,"timed_out":false}"#);
        assert_eq!(
            serde_json::to_value(&l).unwrap(),
            serde_json::json!({"exit": {"code": 3, "cancelled": false, "timed_out": false}})
        );
        let l = output_line(br#"{"type":"error","seq":0,"stage":"execve","message":"no","errno":2,"errno_name":"ENOENT"}"#);
        assert_eq!(
            serde_json::to_value(&l).unwrap(),
            serde_json::json!({"failed": {"stage": "execve", "message": "no", "errno": 2, "errno_name": "ENOENT"}})
        );
        // Not a frame: a failure naming the line, never made-up output.
        match output_line(b"garbage") {
            OutputLine::Failed { failed } => assert!(failed.message.contains("garbage")),
            other => panic!("{other:?}"),
        }
    }
}
