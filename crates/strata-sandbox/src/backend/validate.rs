//! The checks of a create request that every backend makes, with one rule
//! each: Sandbox IDs, names, label keys, the Store's place relative to the
//! state root, and the daemon's arguments (no token). What only one
//! backend can check (a rootfs directory, an image, exposed host paths)
//! stays with that backend.

use std::path::{Path, PathBuf};

use super::state::{invalid, state_err};
use super::{BackendError, CreateRequest, DaemonInstall};

/// `sb-` and 24 hex digits (96 random bits), the SDK's format.
pub fn valid_id(id: &str) -> bool {
    id.len() == 27
        && id.starts_with("sb-")
        && id[3..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A Sandbox name: 1-64 characters of `[A-Za-z0-9._-]` (it is the
/// hostname, and the docker backend's container name).
pub fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// A label key: 1-128 characters of `[A-Za-z0-9._/-]`. The stricter of
/// the two rules the backends once had: the docker backend stores a
/// label as the Docker label `dev.strata.label.KEY` and filters on
/// `KEY=VALUE`, so a key may not hold `=`, spaces or control characters;
/// the native backend uses the same rule, so that a request valid for
/// one backend is valid for the other.
pub fn valid_label_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 128
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b))
}

/// The name and label keys of `req` ([`valid_name`], [`valid_label_key`]).
pub fn check_name_and_labels(req: &CreateRequest) -> Result<(), BackendError> {
    if let Some(n) = &req.name {
        if !valid_name(n) {
            return Err(invalid(
                format!("name {n:?}"),
                "use 1-64 characters of [A-Za-z0-9._-]",
            ));
        }
    }
    if let Some(k) = req.labels.keys().find(|k| !valid_label_key(k)) {
        return Err(invalid(
            format!("label {k:?}"),
            "keys are 1-128 characters of [A-Za-z0-9._/-]",
        ));
    }
    Ok(())
}

/// The Store, resolved: a directory that neither contains nor lies in the
/// state root `root` (its host path is masked or absent in the Sandbox and
/// must hide neither the state nor the daemon; the state must not be in
/// the Store, which commands' Workspaces are made from).
pub fn check_store(req: &CreateRequest, root: &Path) -> Result<PathBuf, BackendError> {
    let store = req
        .store
        .canonicalize()
        .map_err(state_err("resolve the Store", &req.store))?;
    if !store.is_dir() || root.starts_with(&store) || store.starts_with(root) {
        return Err(invalid(
            format!("Store {}", store.display()),
            format!(
                "must be a directory that neither contains nor lies in the state root {}",
                root.display()
            ),
        ));
    }
    Ok(store)
}

/// Refuse daemon arguments or environment that contain the bearer token
/// (read from `token_file`): argv and env are visible in /proc.
pub fn refuse_token_in_args(token_file: &Path, daemon: &DaemonInstall) -> Result<(), BackendError> {
    let token =
        std::fs::read_to_string(token_file).map_err(state_err("read the token", token_file))?;
    let token = token.trim();
    let leaks = daemon
        .args
        .iter()
        .chain(daemon.env.iter().flat_map(|(k, v)| [k, v]))
        .any(|a| a.contains(token));
    if leaks {
        return Err(invalid(
            "daemon arguments or environment",
            "contain the bearer token; argv and env are visible in /proc, point the daemon at the token file instead",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_names_and_labels() {
        assert!(valid_id("sb-0123456789abcdef01234567"));
        for bad in [
            "sb-0123456789ABCDEF01234567",
            "sb-0123",
            "../../etc",
            "sb-0123456789abcdef0123456/",
        ] {
            assert!(!valid_id(bad), "{bad}");
        }
        assert!(valid_name("a.b_c-1"));
        for bad in ["", "a/b", "a b", &"x".repeat(65)] {
            assert!(!valid_name(bad), "{bad:?}");
        }
        assert!(valid_label_key("suite"));
        assert!(valid_label_key("team/owner.v-1_x"));
        for bad in ["", "a=b", "a b", "é", "tab\t", &"k".repeat(129)] {
            assert!(!valid_label_key(bad), "{bad:?}");
        }
    }

    #[test]
    fn request_check_names_what_is_wrong() {
        let mut req = CreateRequest::new("/nonexistent");
        req.labels.insert("a b".into(), "v".into());
        let e = check_name_and_labels(&req).unwrap_err().to_string();
        assert!(
            e.contains("label \"a b\"") && e.contains("[A-Za-z0-9._/-]"),
            "{e}"
        );
        req.labels.clear();
        req.name = Some("no/slash".into());
        let e = check_name_and_labels(&req).unwrap_err().to_string();
        assert!(e.contains("name \"no/slash\""), "{e}");
    }
}
