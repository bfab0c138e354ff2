//! The SDK's one error type. Every variant says what failed and what to do.

use std::path::PathBuf;

/// The cause of an [`Error`], kept for [`std::error::Error::source`]: the
/// Store's, the Workspace layer's or the backend's own error value.
pub type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Result of every SDK call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, typed so that a caller can react (retry on [`Busy`],
/// continue from `actual_head` on [`Conflict`], show `log_tail` on
/// [`Backend`]) and printable as one or two sentences.
///
/// [`Busy`]: Error::Busy
/// [`Conflict`]: Error::Conflict
/// [`Backend`]: Error::Backend
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The named thing (Sandbox, Workspace, exec, branch, file) does not exist.
    #[error("{what} not found. {hint}")]
    NotFound {
        /// What was looked for.
        what: String,
        /// What to do.
        hint: String,
        /// The underlying error, if another layer reported it.
        #[source]
        source: Option<Source>,
    },

    /// A commit lost a race: the branch head moved to `actual_head`.
    #[error("{what}: the branch head is now {actual_head}. {hint}")]
    Conflict {
        /// Which commit lost.
        what: String,
        /// The head that won the race (hex commit id).
        actual_head: String,
        /// What to do (continue from `actual_head`).
        hint: String,
        /// The underlying error, if another layer reported it.
        #[source]
        source: Option<Source>,
    },

    /// Something is in use (a lock, a mount path, an attached stream);
    /// retrying later may work.
    #[error("{what} is busy. {hint}")]
    Busy {
        /// What is busy.
        what: String,
        /// What to do.
        hint: String,
        /// The underlying error, if another layer reported it.
        #[source]
        source: Option<Source>,
    },

    /// The daemon or the server refused the bearer token (401), or the
    /// server refused it this request (403, a token scoped to other
    /// projects).
    #[error("{what}. {hint}")]
    Unauthorized {
        /// Who refused what (`the daemon of sandbox sb-… refused our
        /// token (401)`).
        what: String,
        /// What to do.
        hint: String,
    },

    /// The request was refused before anything ran.
    #[error("invalid input: {what}. {hint}")]
    InvalidInput {
        /// What was wrong.
        what: String,
        /// How to fix it.
        hint: String,
        /// The underlying error, if another layer reported it.
        #[source]
        source: Option<Source>,
    },

    /// The backend (Sandbox, daemon) failed; `log_tail` is the end of the
    /// daemon's log.
    #[error("{what}\n--- daemon log tail ---\n{log_tail}")]
    Backend {
        /// What failed.
        what: String,
        /// The last lines of the daemon's log.
        log_tail: String,
        /// The underlying error, if another layer reported it.
        #[source]
        source: Option<Source>,
    },

    /// The command of an exec never ran (e.g. ENOENT: the program is not in
    /// the Sandbox). Never reported as a made-up exit status.
    #[error("exec {exec_id}: {stage} failed: {message} ({}). Check argv[0] exists in the Sandbox and is executable by the command's uid", errno_name.as_deref().unwrap_or("no errno"))]
    ExecFailed {
        /// The exec ID.
        exec_id: String,
        /// Where it failed (`exec`, `execve`, `chdir`, `seccomp`...).
        stage: String,
        /// The helper's message.
        message: String,
        /// The errno, e.g. 2.
        errno: Option<i32>,
        /// Its name, e.g. `ENOENT`.
        errno_name: Option<String>,
    },

    /// The server (`strata serve`) could not be reached or did not answer
    /// as one: connection refused, TLS refused (e.g. a certificate that is
    /// not the pinned one), a response that is not the API's.
    #[error("{what}. {hint}")]
    Unreachable {
        /// What failed, with the server's URL.
        what: String,
        /// What to do.
        hint: String,
    },

    /// A local I/O error (state directory, socket).
    #[error("could not {what} {path}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// To what.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// A Store error that has no better typed variant.
    #[error("store: {0}")]
    Store(#[source] strata_store::StoreError),
}

impl Error {
    pub(crate) fn io(
        what: impl Into<String>,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Error {
        let (what, path) = (what.into(), path.into());
        move |source| Error::Io { what, path, source }
    }

    pub(crate) fn backend(what: impl Into<String>, log_tail: impl Into<String>) -> Error {
        Error::Backend {
            what: what.into(),
            log_tail: log_tail.into(),
            source: None,
        }
    }

    pub(crate) fn invalid(what: impl Into<String>, hint: impl Into<String>) -> Error {
        Error::InvalidInput {
            what: what.into(),
            hint: hint.into(),
            source: None,
        }
    }

    pub(crate) fn not_found(what: impl Into<String>, hint: impl Into<String>) -> Error {
        Error::NotFound {
            what: what.into(),
            hint: hint.into(),
            source: None,
        }
    }

    pub(crate) fn busy(what: impl Into<String>, hint: impl Into<String>) -> Error {
        Error::Busy {
            what: what.into(),
            hint: hint.into(),
            source: None,
        }
    }

    /// The same error, with `cause` as its [`std::error::Error::source`]
    /// (variants that carry their own typed source keep it).
    pub(crate) fn caused_by(mut self, cause: impl Into<Source>) -> Error {
        match &mut self {
            Error::NotFound { source, .. }
            | Error::Conflict { source, .. }
            | Error::Busy { source, .. }
            | Error::InvalidInput { source, .. }
            | Error::Backend { source, .. } => *source = Some(cause.into()),
            Error::Unauthorized { .. }
            | Error::Unreachable { .. }
            | Error::ExecFailed { .. }
            | Error::Io { .. }
            | Error::Store(_) => {}
        }
        self
    }
}

impl From<strata_workspace::WsError> for Error {
    /// A Workspace-layer failure of an offline Workspace (no daemon, so no
    /// log tail), its message as the layer wrote it.
    fn from(e: strata_workspace::WsError) -> Self {
        Error::backend(e.to_string(), String::new()).caused_by(e)
    }
}

impl From<strata_store::StoreError> for Error {
    fn from(e: strata_store::StoreError) -> Self {
        use strata_store::StoreError as S;
        let msg = e.to_string();
        match e {
            S::NotFound { .. } | S::NoStore { .. } => Error::not_found(
                msg,
                "check the name (list with Store::branches / Store::projects)",
            )
            .caused_by(e),
            S::Busy { .. } => Error::busy(
                msg,
                "another process holds the Store's write lock; retry shortly",
            )
            .caused_by(e),
            S::Conflict { actual, .. } => Error::Conflict {
                what: msg,
                actual_head: actual.to_hex(),
                hint: "re-read the branch and retry from the new head".into(),
                source: Some(Box::new(e)),
            },
            S::InvalidName { .. }
            | S::Invalid(_)
            | S::AmbiguousRef { .. }
            | S::AlreadyExists { .. }
            | S::NotAStore { .. } => Error::invalid(msg, "fix the argument and retry").caused_by(e),
            other => Error::Store(other),
        }
    }
}
