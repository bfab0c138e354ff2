//! Rootless group: `strata run` of `true`, end to end through the library
//! (Workspace create, helper re-exec of this binary, user+mount+PID
//! namespaces, FUSE mount with an fd, SCM_RIGHTS, serve, run, wait for the
//! mount to go, discard). Median over 50 runs (11 with --quick). Run by
//! root it measures the same path as a user does (the namespace maps root
//! to itself), plus passthrough.

use crate::report::{median, ms, time, Row};
use crate::Ctx;
use strata_store::{Store, StoreOptions};

pub fn run(ctx: &Ctx) -> anyhow::Result<Vec<Row>> {
    let probe = strata_rootless::probe();
    if !probe.ok() {
        eprintln!("rootless: skipped: {probe}");
        return Ok(Vec::new());
    }
    let store = Store::create(
        &ctx.scratch.join("rootless-store"),
        &StoreOptions::default(),
    )?;
    store.create_project("r", "empty")?;
    let spec = strata_rootless::RunSpec {
        reference: "r/main".into(),
        argv: vec!["true".into()],
        scratch_parent: Some(ctx.scratch.clone()),
        ..Default::default()
    };
    // Warm-up.
    strata_rootless::run(&store, &spec)?;
    let n = if ctx.quick { 11 } else { 50 };
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let (r, d) = time(|| strata_rootless::run(&store, &spec));
        let out = r?;
        anyhow::ensure!(
            out.status == strata_rootless::CommandStatus::Exited(0),
            "true ended with {:?}",
            out.status
        );
        v.push(ms(d));
    }
    let m = median(v);
    Ok(vec![Row::new(
        "rootless",
        &format!("strata run of `true`, end to end (median of {n})"),
        "ms",
        m,
    )
    .goal("< 30 ms", m < 30.0)])
}
