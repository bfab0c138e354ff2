//! Mount a fresh Workspace of a branch and serve it until the mountpoint is
//! unmounted (`umount MOUNTPOINT`). Used by scripts/pjdfstest.sh and
//! scripts/fsx.sh.
//!
//! usage: mount STORE_DIR PROJECT/BRANCH MOUNTPOINT [--allow-other]
//!        [--no-passthrough] [--threads N] [--scratch DIR] [--commit-on-exit MSG]
//!        [--transport dev-fuse|auto|uring]
//!
//! Creates the Store and the project if they do not exist. Prints
//! `workspace <ID> mounted at <MOUNTPOINT>` once the mount is live, then
//! `transport: <io_uring|/dev/fuse>`, and after the unmount, on io_uring,
//! `ring-served requests: N` (scripts check it is not 0).

use std::path::PathBuf;
use strata_store::{BranchRef, Store, StoreOptions};
use strata_workspace::{MountOptions, Transport, Workspace, WorkspaceOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: mount STORE_DIR PROJECT/BRANCH MOUNTPOINT [--allow-other] [--no-passthrough] [--threads N] [--scratch DIR] [--commit-on-exit MSG] [--transport dev-fuse|auto|uring]";
    let store_dir = PathBuf::from(args.next().ok_or(usage)?);
    let branch = args.next().ok_or(usage)?;
    let mountpoint = PathBuf::from(args.next().ok_or(usage)?);
    let mut opts = MountOptions::default();
    let mut scratch = None;
    let mut commit_msg = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--allow-other" => opts.allow_other = true,
            "--no-passthrough" => opts.passthrough = false,
            "--threads" => opts.threads = args.next().ok_or(usage)?.parse()?,
            "--scratch" => scratch = Some(PathBuf::from(args.next().ok_or(usage)?)),
            "--commit-on-exit" => commit_msg = Some(args.next().ok_or(usage)?),
            "--transport" => {
                opts.transport = match args.next().ok_or(usage)?.as_str() {
                    "dev-fuse" => Transport::DevFuse,
                    "auto" => Transport::IoUringIfAvailable,
                    "uring" => Transport::IoUring,
                    t => return Err(format!("unknown transport {t:?}; {usage}").into()),
                }
            }
            _ => return Err(format!("unknown argument {a:?}; {usage}").into()),
        }
    }
    let sopts = StoreOptions::default();
    let store = if store_dir.join("store.db").exists() || Store::open(&store_dir, &sopts).is_ok() {
        Store::open(&store_dir, &sopts)?
    } else {
        std::fs::create_dir_all(&store_dir)?;
        Store::create(&store_dir, &sopts)?
    };
    let b = BranchRef::parse(&branch)?;
    if !store.list_projects()?.contains(&b.project) {
        store.create_project(&b.project, "created by strata-workspace example mount")?;
    }
    if store.branch_head(&b).is_err() {
        let main = store.branch_head(&BranchRef::new(&b.project, "main")?)?;
        store.create_branch(&b, main)?;
    }
    let scratch = scratch.unwrap_or_else(|| store_dir.with_extension("scratch"));
    let ws = Workspace::create(&store, &branch, &scratch, &WorkspaceOptions::default())?;
    let handle = ws.mount(&mountpoint, &opts)?;
    println!("workspace {} mounted at {}", ws.id(), mountpoint.display());
    println!("transport: {}", handle.transport());
    let ring = handle.ring_requests();
    handle.join()?;
    if let Some(n) = ring {
        println!("ring-served requests: {}", n.get());
    }
    if let Some(msg) = commit_msg {
        println!("commit: {:?}", ws.commit(&msg)?);
    }
    Ok(())
}
