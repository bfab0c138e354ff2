//! The 15-call flow as a test (docs/benchmarks.md): the same code as
//! `examples/flow.rs`, each step asserting its result, including the
//! committed bytes read back from the Store. Its own `main` (harness =
//! false): the test binary is re-executed as the Sandbox init, the daemon
//! and the exec helper, so `maybe_run_internal` must run first.

mod common;

#[path = "../examples/flow.rs"]
mod flow_example;

fn main() {
    strata_sdk::maybe_run_internal();
    assert!(
        rustix::process::geteuid().is_root(),
        "the flow test creates a native Sandbox: run it as root (CI does)"
    );
    let rt = tokio::runtime::Runtime::new().expect("tokio");
    let tmp = tempfile::tempdir().expect("tempdir");
    let result = rt.block_on(flow_example::flow(tmp.path()));
    if result.is_err() {
        // Close the Sandbox a failed step left running.
        rt.block_on(common::close_leftovers("flow-run"));
    }
    let steps = result.unwrap_or_else(|e| panic!("flow failed: {e}"));
    assert_eq!(steps.len(), 15);
    let total = flow_example::print_table(&steps);
    println!("flow: 15 calls ok in {:.1} ms", total.as_secs_f64() * 1e3);
}
