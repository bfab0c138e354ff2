//! "Does the privilege split hold here?", asked the way a user's command
//! would find out: one exec in a mounted Workspace inspects itself and
//! tries what it must not be able to do. `strata probe` and `strata demo`
//! both print this report; the tests of strata-sandbox prove each point
//! separately.

use std::collections::BTreeMap;

use crate::error::Result;
use crate::workspace::Workspace;

/// What one command found out about itself inside a Sandbox.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SplitReport {
    /// `id -u` / `id -g` of the command.
    pub uid: String,
    /// `id -g`.
    pub gid: String,
    /// CapEff / CapBnd / NoNewPrivs / Seccomp lines of /proc/self/status.
    pub cap_eff: String,
    /// Bounding set.
    pub cap_bnd: String,
    /// 1 when no_new_privs is set.
    pub no_new_privs: String,
    /// 2 when a seccomp filter is installed.
    pub seccomp: String,
    /// It wrote a file in the Workspace and read the same bytes back.
    pub writes: bool,
    /// Owner `uid:gid` of the file it created.
    pub file_owner: String,
    /// Result of `umount`, `umount -l` and `fusermount3 -u` of the mount:
    /// `denied`, `ALLOWED` or `missing` (the tool is not installed).
    pub unmount: BTreeMap<String, String>,
    /// Result of `unshare -U true`, `unshare -Urm true` and `unshare -m
    /// true`: `denied` or `ALLOWED`.
    pub unshare: BTreeMap<String, String>,
    /// `hidden` when the Store's host path shows nothing to the command.
    pub store: String,
}

impl SplitReport {
    /// Everything that should hold, holds.
    pub fn holds(&self) -> bool {
        self.problems().is_empty()
    }

    /// What does not hold, one sentence each.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.uid == "0" || self.gid == "0" {
            p.push(format!("the command runs as {}:{}", self.uid, self.gid));
        }
        if !self.cap_eff.trim_start_matches('0').is_empty() {
            p.push(format!(
                "the command holds capabilities (CapEff={})",
                self.cap_eff
            ));
        }
        if !self.cap_bnd.trim_start_matches('0').is_empty() {
            p.push(format!(
                "the bounding set is not empty (CapBnd={})",
                self.cap_bnd
            ));
        }
        if self.no_new_privs != "1" {
            p.push("no_new_privs is not set".into());
        }
        if self.seccomp != "2" {
            p.push(format!("no seccomp filter (Seccomp={})", self.seccomp));
        }
        if !self.writes {
            p.push("the command could not write and read back a file in the Workspace".into());
        }
        if self.file_owner != format!("{}:{}", self.uid, self.gid) {
            p.push(format!(
                "a file the command created is owned by {}, not by it",
                self.file_owner
            ));
        }
        for (k, v) in self.unmount.iter().chain(&self.unshare) {
            if v == "ALLOWED" {
                p.push(format!("`{k}` succeeded for the command"));
            }
        }
        if self.store != "hidden" {
            p.push(format!(
                "the Store is visible to the command ({})",
                self.store
            ));
        }
        p
    }
}

/// The script the command runs: KEY=VALUE lines only.
const SCRIPT: &str = r#"
m="$1"; store="$2"
echo "uid=$(id -u)"; echo "gid=$(id -g)"
for k in CapEff CapBnd NoNewPrivs Seccomp; do
  echo "$k=$(awk -v k="$k:" '$1==k {print $2}' /proc/self/status)"
done
f="$m/.strata-check-$$"
if echo probe > "$f" && [ "$(cat "$f")" = probe ]; then echo writes=yes; else echo writes=no; fi
echo "owner=$(stat -c %u:%g "$f" 2>/dev/null)"; rm -f "$f"
t() { if "$@" >/dev/null 2>&1; then echo ALLOWED; else echo denied; fi; }
echo "umount=$(t umount "$m")"
echo "umount -l=$(t umount -l "$m")"
if command -v fusermount3 >/dev/null 2>&1; then echo "fusermount3 -u=$(t fusermount3 -u "$m")"; else echo "fusermount3 -u=missing"; fi
echo "unshare -U=$(t unshare -U true)"
echo "unshare -Urm=$(t unshare -Urm true)"
echo "unshare -m=$(t unshare -m true)"
if [ -n "$(ls -A "$store" 2>/dev/null)" ]; then echo store=visible; else echo store=hidden; fi
"#;

/// Run the check as the default command identity in `ws` (which must be
/// mounted in a Sandbox). `store` is the Store's host path, which must
/// show nothing to the command.
pub async fn privilege_split(ws: &Workspace, store: &str) -> Result<SplitReport> {
    let out = ws
        .exec(["sh", "-c", SCRIPT, "strata-check", ws.path(), store])
        .output()
        .await?;
    let text = out.stdout_str();
    let kv: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
    let get = |k: &str| kv.get(k).copied().unwrap_or("?").to_string();
    let pick = |keys: &[&str]| -> BTreeMap<String, String> {
        keys.iter().map(|k| (k.to_string(), get(k))).collect()
    };
    Ok(SplitReport {
        uid: get("uid"),
        gid: get("gid"),
        cap_eff: get("CapEff"),
        cap_bnd: get("CapBnd"),
        no_new_privs: get("NoNewPrivs"),
        seccomp: get("Seccomp"),
        writes: get("writes") == "yes",
        file_owner: get("owner"),
        unmount: pick(&["umount", "umount -l", "fusermount3 -u"]),
        unshare: pick(&["unshare -U", "unshare -Urm", "unshare -m"]),
        store: get("store"),
    })
}
