//! The wire types of the Sandbox routes of `strata serve` (docs/server.md,
//! "Sandboxes"). Everything under `/v1/sandboxes/{id}/…` that is not one
//! of these routes is the Sandbox daemon's own API relayed as it is
//! (docs/api/openapi.yaml, `strata_daemon::api`), except the two exec
//! stream forms defined here ([`OutputLine`], [`WsControl`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// The label under which the server records the project a Sandbox was
/// created for (`CreateSandbox::project`). A token scoped to projects sees
/// only Sandboxes labelled with one of its projects.
pub const PROJECT_LABEL: &str = "strata.project";

/// Network of a Sandbox.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SandboxNetwork {
    /// Its own network namespace with only `lo` (the default).
    #[default]
    None,
    /// The host's network namespace.
    Host,
}

/// `POST /v1/sandboxes`: create a Sandbox and start its daemon. Host paths
/// (`expose`, a root filesystem directory) are not offered over the wire.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSandbox {
    /// The project whose branches this Sandbox mounts. Required for a
    /// token scoped to projects (one of its projects); recorded as the
    /// label `strata.project`, and then only that project's branches may
    /// be mounted in it.
    #[serde(default)]
    pub project: Option<String>,
    /// Unique among existing Sandboxes (an existing name is 409).
    #[serde(default)]
    pub name: Option<String>,
    /// Labels, for `GET /v1/sandboxes?label=K=V`. `strata.project` is set
    /// by the server from `project`, never by the client.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// `none` (loopback only, the default) or `host`.
    #[serde(default)]
    pub network: SandboxNetwork,
    /// Memory limit in bytes, at least 64 MiB (default: half of the
    /// host's RAM).
    #[serde(default)]
    pub memory: Option<u64>,
    /// Most tasks at once, at least 64 (default 4096).
    #[serde(default)]
    pub pids: Option<u64>,
    /// CPUs, 0.01 to 4096, e.g. 0.5 or 2 (default: no CPU limit).
    #[serde(default)]
    pub cpus: Option<f64>,
    /// No default limits: only those given apply.
    #[serde(default)]
    pub no_limits: bool,
    /// Run on the docker backend with this local image (`NAME:TAG` or
    /// `NAME@sha256:…`) instead of the native one.
    #[serde(default)]
    pub image: Option<String>,
}

/// Where a Sandbox is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SandboxState {
    /// Created, its daemon not started yet.
    Created,
    /// Its daemon runs.
    Running,
    /// Its daemon ended (stopped, crashed, or never got ready); `restart`
    /// starts it again.
    Stopped,
}

/// A mounted Workspace, as listed with a Sandbox (the daemon's
/// `WorkspaceInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SandboxWorkspace {
    pub id: String,
    /// Where it is mounted inside the Sandbox.
    pub path: String,
    /// `PROJECT/BRANCH`.
    pub branch: String,
    /// The commit it shows changes against.
    pub base: String,
    /// What serves its FUSE requests: `io_uring` or `/dev/fuse` (the
    /// default transport, `auto`, takes io_uring where the Sandbox's
    /// kernel offers it); absent when its daemon is older than the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
}

/// A Sandbox (`strata_sdk::SandboxInfo`, without host paths).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SandboxInfo {
    /// `sb-` and 24 hex digits.
    pub id: String,
    pub name: Option<String>,
    /// As recorded by the backend.
    pub state: SandboxState,
    pub labels: BTreeMap<String, String>,
    /// The project it was created for (its `strata.project` label).
    pub project: Option<String>,
    /// `native`, `docker` or `micro_vm`.
    pub backend: String,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
    pub network: SandboxNetwork,
    /// The memory limit that applies, in bytes, if any.
    pub memory: Option<u64>,
    /// The tasks limit that applies, if any.
    pub pids: Option<u64>,
    /// The CPU limit that applies, in CPUs, if any.
    pub cpus: Option<f64>,
    /// The docker image (docker backend).
    pub image: Option<String>,
    /// The mounted Workspaces: present on `GET /v1/sandboxes/{id}` and
    /// after `restart` when the daemon answers, absent in lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspaces: Option<Vec<SandboxWorkspace>>,
}

/// `GET /v1/sandboxes`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SandboxList {
    /// The Sandboxes this token sees, oldest first.
    pub sandboxes: Vec<SandboxInfo>,
}

/// Query of `GET /v1/sandboxes` (for the document; the server reads the
/// raw query so that `label` may repeat).
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SandboxListQuery {
    /// `KEY=VALUE`; repeat for several (every one must match).
    #[serde(default)]
    #[param(pattern = "^[^=]+=.*$")]
    pub label: Option<String>,
}

/// Query of `GET /v1/sandboxes/{id}/logs`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct SandboxLogsQuery {
    /// The last this many lines (default 100, at most 10000). Also
    /// accepted as `tail`, the daemon's own name for it (this route
    /// stands where the relayed daemon route `/v1/logs` would).
    #[serde(default, alias = "tail")]
    pub lines: Option<usize>,
}

/// How an exec ended (the daemon's `ExitInfo`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ExecExit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal_name: Option<String>,
    #[serde(default)]
    pub cancelled: bool,
    #[serde(default)]
    pub timed_out: bool,
}

/// Why an exec never ran its program (the daemon's `ExecFailure`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ExecFailed {
    pub stage: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno_name: Option<String>,
}

/// One line of `GET /v1/sandboxes/{id}/execs/{eid}/output?format=ndjson`:
/// output chunks in the order the daemon saw them, then exactly one
/// `{"exit": …}` or `{"failed": …}` line. (Without `format=ndjson` the
/// route relays the daemon's own frames, `{"type": "stdout", "seq",
/// "data"}`.) Also the last text frame of the WebSocket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum OutputLine {
    /// Bytes the command wrote.
    Chunk {
        /// `stdout` or `stderr`.
        stream: String,
        /// Frame number, from 0, across both streams.
        seq: u64,
        /// The bytes, base64 (standard alphabet).
        data_b64: String,
    },
    /// The command ended.
    Exit { exit: ExecExit },
    /// The command never ran.
    Failed { failed: ExecFailed },
}

/// The WebSocket `GET /v1/sandboxes/{id}/execs/{eid}/ws`: binary frames
/// from the client are the command's stdin; binary frames from the server
/// are output, their first byte [`WS_STDOUT`] or [`WS_STDERR`] and the
/// rest the bytes; the server's last frame is a text [`OutputLine`]
/// (`exit` or `failed`), then a close frame. A text frame from the client
/// is one of these.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum WsControl {
    /// Resize the command's terminal (a `tty` exec).
    Resize { rows: u16, cols: u16 },
    /// Close the command's stdin (EOF).
    CloseStdin,
}

/// First byte of a server binary WebSocket frame carrying stdout.
pub const WS_STDOUT: u8 = 1;
/// First byte of a server binary WebSocket frame carrying stderr.
pub const WS_STDERR: u8 = 2;

/// TLS certificate fingerprints as `strata serve --tls-generate` prints
/// them and a client pins them: `sha256:` and the 64 lowercase hex digits
/// of the SHA-256 of the certificate's DER encoding.
pub mod fingerprint {
    /// The printed form of a certificate's SHA-256 digest.
    pub fn format(sha256_of_der: &[u8; 32]) -> String {
        let mut s = String::with_capacity(71);
        s.push_str("sha256:");
        for b in sha256_of_der {
            s.push_str(&format!("{b:02x}"));
        }
        s
    }

    /// The digest a fingerprint names: `sha256:` (optional) then 64 hex
    /// digits, in either case, optionally separated by `:` (the form
    /// `openssl x509 -fingerprint -sha256` prints).
    pub fn parse(s: &str) -> Result<[u8; 32], String> {
        let t = s.trim();
        let t = t
            .strip_prefix("sha256:")
            .or_else(|| t.strip_prefix("SHA256:"))
            .or_else(|| t.strip_prefix("sha256//"))
            .unwrap_or(t);
        let hex: String = t.chars().filter(|c| *c != ':').collect();
        let bad = || {
            format!("fingerprint {s:?}: expected sha256: and 64 hex digits (as `strata serve --tls-generate` prints it)")
        };
        if hex.len() != 64 || !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let mut out = [0u8; 32];
        for (i, o) in out.iter_mut().enumerate() {
            *o = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(out)
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn round_trip_and_openssl_form() {
            let d: [u8; 32] = std::array::from_fn(|i| (i * 7) as u8);
            let f = super::format(&d);
            assert_eq!(f.len(), 71);
            assert_eq!(super::parse(&f).unwrap(), d);
            let openssl: Vec<String> = d.iter().map(|b| format!("{b:02X}")).collect();
            assert_eq!(super::parse(&openssl.join(":")).unwrap(), d);
            assert!(super::parse("sha256:abc").is_err());
        }
    }
}
