//! What a token may see: every project, or a set of them. A project
//! outside the set reads as not found, with the same message as a project
//! that does not exist, so a scoped token cannot learn which names exist.

use std::collections::BTreeSet;

use crate::error::ApiError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every project, and commit ids without a reachability check.
    All,
    /// Only these projects.
    Projects(BTreeSet<String>),
}

impl Scope {
    pub fn sees(&self, project: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Projects(p) => p.contains(project),
        }
    }

    /// `Err(404)` for a project this token does not see.
    pub fn check(&self, project: &str) -> Result<(), ApiError> {
        if self.sees(project) {
            Ok(())
        } else {
            Err(ApiError::not_found(format!("project not found: {project}")))
        }
    }
}

/// The token that made a request (put in the request's extensions by the
/// authentication layer).
#[derive(Debug, Clone)]
pub struct Caller {
    pub token_id: String,
    pub scope: Scope,
}
