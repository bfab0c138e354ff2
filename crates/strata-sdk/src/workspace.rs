//! Workspaces mounted in a Sandbox, driven over the daemon API.

use base64::Engine;
use hyper::Method;
use strata_daemon::api;

use crate::client::DaemonClient;
use crate::error::Result;
use crate::exec::ExecBuilder;

/// One changed path of [`Workspace::status`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Slash-separated path relative to the Workspace root (exact bytes).
    pub path: Vec<u8>,
    /// `added`, `modified`, `deleted` or `type_changed`.
    pub kind: String,
}

impl From<api::ChangeEntry> for Change {
    /// The exact bytes from `path_b64`; the lossy `path` only if a daemon
    /// sent no valid base64.
    fn from(c: api::ChangeEntry) -> Self {
        Change {
            path: base64::engine::general_purpose::STANDARD
                .decode(&c.path_b64)
                .unwrap_or_else(|_| c.path.into_bytes()),
            kind: c.kind,
        }
    }
}

/// Result of [`Workspace::commit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitOutcome {
    /// Published; the Workspace continues from this commit (hex id).
    Committed(String),
    /// Nothing changed; nothing was written. The base commit (hex id).
    UpToDate(String),
}

impl CommitOutcome {
    /// From the daemon's response.
    pub(crate) fn from_api(r: api::CommitResponse) -> CommitOutcome {
        match r.outcome {
            api::Outcome::Committed => CommitOutcome::Committed(r.commit),
            api::Outcome::UpToDate => CommitOutcome::UpToDate(r.commit),
        }
    }

    /// Whether a commit was published (the branch moved).
    pub fn committed(&self) -> bool {
        matches!(self, CommitOutcome::Committed(_))
    }

    /// The commit id either way.
    pub fn commit(&self) -> &str {
        match self {
            CommitOutcome::Committed(c) | CommitOutcome::UpToDate(c) => c,
        }
    }
}

/// A Workspace mounted in a Sandbox (from [`crate::Sandbox::mount`]).
#[derive(Debug, Clone)]
pub struct Workspace {
    pub(crate) client: DaemonClient,
    pub(crate) info: api::WorkspaceInfo,
}

impl Workspace {
    /// Workspace ID.
    pub fn id(&self) -> &str {
        &self.info.id
    }
    /// Mount path inside the Sandbox.
    pub fn path(&self) -> &str {
        &self.info.path
    }
    /// `PROJECT/BRANCH` it projects and commits to.
    pub fn branch(&self) -> &str {
        &self.info.branch
    }
    /// The commit it was mounted from (hex).
    pub fn base(&self) -> &str {
        &self.info.base
    }

    /// Changed paths relative to the base commit.
    pub async fn status(&self) -> Result<Vec<Change>> {
        let st: api::StatusResponse = self
            .client
            .call(
                Method::GET,
                &format!("/v1/workspaces/{}/status", self.info.id),
                None::<&()>,
            )
            .await?;
        Ok(st.changes.into_iter().map(Change::from).collect())
    }

    /// Publish the changes as a commit on the branch and continue from it.
    /// A lost race is [`crate::Error::Conflict`] with the actual head.
    pub async fn commit(&self, message: &str) -> Result<CommitOutcome> {
        let r: api::CommitResponse = self
            .client
            .call(
                Method::POST,
                &format!("/v1/workspaces/{}/commit", self.info.id),
                Some(&api::CommitRequest {
                    message: message.into(),
                }),
            )
            .await?;
        Ok(CommitOutcome::from_api(r))
    }

    /// Unmount. Without `discard` it refuses ([`crate::Error::Busy`])
    /// while there are uncommitted changes (closing the Sandbox would
    /// delete them); with `discard` they are dropped. Never commits.
    pub async fn unmount(self, discard: bool) -> Result<()> {
        let _: api::UnmountResponse = self
            .client
            .call(
                Method::POST,
                &format!("/v1/workspaces/{}/unmount", self.info.id),
                Some(&api::UnmountRequest { discard }),
            )
            .await?;
        Ok(())
    }

    /// Build an exec of `argv` (no shell) in this Workspace.
    pub fn exec<I, S>(&self, argv: I) -> ExecBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ExecBuilder {
            client: self.client.clone(),
            workspace: self.info.id.clone(),
            req: api::ExecRequest {
                argv: argv.into_iter().map(Into::into).collect(),
                ..Default::default()
            },
            env: Default::default(),
        }
    }
}
