//! The Sandbox half of `strata demo` (root with /dev/fuse): two Sandboxes
//! work on two branches side by side through the SDK, real commands run in
//! them as uid 1500, both commit, and the result is read back from the
//! Store in this process. Every step checks what it claims.

use crate::demo_steps::{Demo, Failed};
use crate::output::human_bytes;
use anyhow::{anyhow, ensure, Result};
use std::collections::BTreeSet;
use std::path::Path;
use strata_sdk::{CommitOutcome, Sandbox, SandboxSpec, Workspace};
use strata_store::{BranchRef, ObjectId, Store};

/// The uid:gid commands run as (the SDK's default identity).
pub const AGENT_UID: u32 = 1500;

/// Why Sandboxes cannot run here, if they cannot (None: they can).
pub fn missing() -> Option<String> {
    let mut why = Vec::new();
    if !rustix::process::geteuid().is_root() {
        why.push("root (the Sandbox daemon mounts Workspaces and creates namespaces)");
    }
    if !Path::new("/dev/fuse").exists() {
        why.push("/dev/fuse (modprobe fuse, or --device /dev/fuse for a container)");
    }
    (!why.is_empty()).then(|| why.join(" and "))
}

/// The build agent A runs: a digest of the sources, the project's script,
/// and a test of both; everything under build/.
const BUILD: &str = r#"set -e
mkdir -p build
cat src/d0*/*.txt | sort | sha256sum | cut -c1-16 > build/digest
sh bin/run.sh > build/out.txt
test -s build/digest && grep -q "hello from strata" build/out.txt
echo "built as $(id -u): $(cat build/digest)""#;

/// What agent B does: edit the script in place, run it, take notes from stdin.
const EDIT: &str = r#"set -e
sed -i 's/hello from strata/hi from agent b/' bin/run.sh
sh bin/run.sh
tr a-z A-Z > NOTES.txt"#;

struct Agent {
    sb: Sandbox,
    ws: Workspace,
}

pub fn steps(d: &mut Demo, store: &Store, base: ObjectId) -> Result<(), Failed> {
    let rt = match crate::ctx::runtime() {
        Ok(rt) => rt,
        Err(e) => return d.fail("start an async runtime", &e),
    };
    let a_br = BranchRef::new("demo", "agent-a").map_err(|_| Failed)?;
    let b_br = BranchRef::new("demo", "agent-b").map_err(|_| Failed)?;
    d.step("fork demo/agent-a and demo/agent-b from demo/main", || {
        store.create_branch(&a_br, base)?;
        store.create_branch(&b_br, base)?;
        Ok(((), format!("both at {}", base.short())))
    })?;
    // The Sandbox records go to a throwaway state root, not under /tmp (a
    // Sandbox has a /tmp of its own): the demo leaves nothing behind.
    let state_tmp = match tempfile::Builder::new()
        .prefix("strata-demo-state-")
        .tempdir_in("/var/tmp")
    {
        Ok(t) => t,
        Err(e) => return d.fail("create a state directory in /var/tmp", &e.into()),
    };
    let state = state_tmp.path().to_path_buf();
    let store_dir = store.dir().to_path_buf();
    let agents = d.step("create two Sandboxes and mount one branch in each", || {
        rt.block_on(async {
            let mut out = Vec::new();
            for (name, branch) in [("a", "demo/agent-a"), ("b", "demo/agent-b")] {
                let mut spec = SandboxSpec::new(&store_dir).label("strata.demo", name);
                spec.state_dir = Some(state.clone());
                let sb = Sandbox::create(spec).await?;
                let ws = sb.mount(branch, None).await?;
                out.push(Agent { sb, ws });
            }
            let detail = format!(
                "{} and {}, each with its branch at {}",
                out[0].sb.id(),
                out[1].sb.id(),
                out[0].ws.path()
            );
            Ok::<_, anyhow::Error>((out, detail))
        })
    })?;
    let (a, b) = (&agents[0], &agents[1]);
    let r = run_agents(d, &rt, store, a, b, &a_br, &b_br);
    // Clean up whatever happened; a failed close is a failed demo too.
    let closed = d.step("unmount both Workspaces and close both Sandboxes", || {
        rt.block_on(async {
            for ag in agents {
                // Already committed: a refusal here would mean lost work.
                ag.ws.clone().unmount(r.is_err()).await?;
                if r.is_err() {
                    ag.sb.close_discard().await?;
                } else {
                    ag.sb.close().await?;
                }
            }
            Ok::<_, anyhow::Error>(((), "the Store is untouched by closing".into()))
        })
    });
    drop(state_tmp);
    r.and(closed)
}

fn run_agents(
    d: &mut Demo,
    rt: &tokio::runtime::Runtime,
    store: &Store,
    a: &Agent,
    b: &Agent,
    a_br: &BranchRef,
    b_br: &BranchRef,
) -> Result<(), Failed> {
    d.step("run both agents' commands at once, as uid 1500", || {
        rt.block_on(async {
            let (ra, rb) = tokio::join!(
                a.ws.exec(["sh", "-c", BUILD]).output(),
                b.ws.exec(["sh", "-c", EDIT])
                    .stdin_bytes("agent b took notes\n")
                    .output(),
            );
            let (ra, rb) = (ra?, rb?);
            ensure!(
                ra.status.success(),
                "build in A: {:?}: {}",
                ra.status,
                ra.stderr_str()
            );
            ensure!(
                rb.status.success(),
                "edit in B: {:?}: {}",
                rb.status,
                rb.stderr_str()
            );
            ensure!(
                rb.stdout_str() == "hi from agent b\n",
                "B's script printed {:?}",
                rb.stdout_str()
            );
            Ok((
                (),
                format!(
                    "A: {}; B: {}",
                    ra.stdout_str().trim(),
                    rb.stdout_str().trim()
                ),
            ))
        })
    })?;
    d.step("each Sandbox sees only its own Workspace", || {
        rt.block_on(async {
            let la = a.ws.exec(["ls", a.ws.path()]).output().await?.stdout_str();
            let lb = b.ws.exec(["ls", b.ws.path()]).output().await?.stdout_str();
            ensure!(
                la.contains("build") && !la.contains("NOTES.txt"),
                "A lists {la:?}"
            );
            ensure!(
                lb.contains("NOTES.txt") && !lb.contains("build"),
                "B lists {lb:?}"
            );
            let mounts = std::fs::read_to_string("/proc/self/mounts")?;
            ensure!(
                !mounts.contains(&format!("strata:{}", a.ws.id()))
                    && !mounts.contains(&format!("strata:{}", b.ws.id())),
                "a Workspace mount is visible on the host"
            );
            Ok((
                (),
                "A has build/, B has NOTES.txt; the host sees neither mount".into(),
            ))
        })
    })?;
    let split = d.step("isolation: what a command can and cannot do", || {
        rt.block_on(async {
            let r = strata_sdk::check::privilege_split(&a.ws, &store.dir().display().to_string())
                .await?;
            ensure!(r.holds(), "{}", r.problems().join("; "));
            Ok((r, "checked from inside Sandbox A".to_string()))
        })
    })?;
    d.note(&format!(
        "command identity   uid {} gid {}, files it creates owned by {}",
        split.uid, split.gid, split.file_owner
    ));
    d.note(&format!(
        "capabilities       CapEff={} CapBnd={} NoNewPrivs={} Seccomp={}",
        split.cap_eff, split.cap_bnd, split.no_new_privs, split.seccomp
    ));
    d.note(&format!("cannot unmount     {}", kv_line(&split.unmount)));
    d.note(&format!("no user namespace  {}", kv_line(&split.unshare)));
    let before = store.stats().map_err(|_| Failed)?;
    let (ca, cb) = d.step("commit both Workspaces", || {
        rt.block_on(async {
            let ca = a.ws.commit("agent a: build").await?;
            let cb = b.ws.commit("agent b: edit and notes").await?;
            let (CommitOutcome::Committed(ca), CommitOutcome::Committed(cb)) = (ca, cb) else {
                return Err(anyhow!("a Workspace had nothing to commit"));
            };
            let detail = format!("demo/agent-a at {:.12}, demo/agent-b at {:.12}", ca, cb);
            Ok(((ca, cb), detail))
        })
    })?;
    d.step("read the committed work back from the Store", || {
        let ha = store.branch_head(a_br)?;
        let hb = store.branch_head(b_br)?;
        ensure!(
            ha.to_hex() == ca && hb.to_hex() == cb,
            "branch heads differ from the commits"
        );
        let read = |h: ObjectId, p: &str| -> Result<Vec<u8>> {
            let e = store
                .read_path(h, p.as_bytes())?
                .ok_or_else(|| anyhow!("{p} is missing"))?;
            let strata_store::EntryKind::File(c) = &e.kind else {
                return Err(anyhow!("{p} is not a file"));
            };
            ensure!(
                e.uid == AGENT_UID,
                "{p} is owned by uid {}, not {AGENT_UID}",
                e.uid
            );
            Ok(store.read_file_range(c, 0, c.size as usize)?)
        };
        ensure!(
            read(ha, "build/out.txt")? == b"hello from strata\n",
            "A's build output"
        );
        ensure!(
            read(hb, "NOTES.txt")? == b"AGENT B TOOK NOTES\n",
            "B's notes"
        );
        Ok(((), "build/out.txt and NOTES.txt, owned by uid 1500".into()))
    })?;
    d.step("diff demo/agent-a demo/agent-b", || {
        let ha = store.branch_head(a_br)?;
        let hb = store.branch_head(b_br)?;
        let got: BTreeSet<(String, &str)> = store
            .diff(ha, hb)?
            .into_iter()
            .map(|c| {
                (
                    String::from_utf8_lossy(&c.path).into_owned(),
                    c.kind.as_str(),
                )
            })
            .collect();
        for want in [
            ("NOTES.txt", "added"),
            ("bin/run.sh", "modified"),
            ("build", "deleted"),
        ] {
            ensure!(
                got.contains(&(want.0.to_string(), want.1)),
                "diff lacks {want:?}: {got:?}"
            );
        }
        let lines: Vec<String> = got.iter().map(|(p, k)| format!("{k} {p}")).collect();
        Ok(((), lines.join(", ")))
    })?;
    d.step("log demo/agent-b", || {
        let log = store.log(store.branch_head(b_br)?, 10)?;
        let msgs: Vec<&str> = log.iter().map(|(_, c)| c.message.as_str()).collect();
        ensure!(
            msgs.first() == Some(&"agent b: edit and notes"),
            "log: {msgs:?}"
        );
        Ok(((), msgs.join(" <- ")))
    })?;
    d.step("storage cost of both commits", || {
        let after = store.stats()?;
        let grew = after.stored_bytes.saturating_sub(before.stored_bytes);
        // Two small edits on a 9 MiB project: kilobytes, not a copy.
        ensure!(
            grew < 1 << 20,
            "the two commits stored {}",
            human_bytes(grew)
        );
        Ok((
            (),
            format!(
                "{} stored for both commits; the Store holds {} for {} of files (dedup {:.2})",
                human_bytes(grew),
                human_bytes(after.stored_bytes),
                human_bytes(after.logical_bytes),
                after.dedup_ratio
            ),
        ))
    })?;
    Ok(())
}

fn kv_line(m: &std::collections::BTreeMap<String, String>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}
