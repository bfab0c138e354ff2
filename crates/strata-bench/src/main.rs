//! `strata-bench`: runs each workload several times after a warm-up and
//! prints one table: strata's median, the comparison's median measured in the
//! same run (or a published reference figure, named as such), the ratio, the
//! goal and whether it is met. See docs/benchmarks.md for the methodology.
#![forbid(unsafe_code)]

mod edit_commit;
mod fs;
mod mcp;
mod microvm;
mod python;
mod report;
mod rootless;
mod sandbox;
mod server;
mod server_conn;
mod server_load;
mod store;

use clap::Parser;
use report::Row;

#[derive(Parser)]
#[command(
    name = "strata-bench",
    about = "Measure strata side by side with its comparisons"
)]
struct Args {
    /// Fewer runs and smaller sizes where a size is not part of the goal (CI).
    #[arg(long)]
    quick: bool,
    /// Run only this group (store, fs, sandbox, rootless, server, mcp, python,
    /// microvm).
    #[arg(long)]
    only: Option<String>,
    /// Run only the workloads whose name contains one of these
    /// comma-separated texts, e.g. `--only fs --workload unlink,rm -rf` or
    /// `--only store --workload import` (store workloads: import, growth,
    /// commit).
    #[arg(long)]
    workload: Option<String>,
    /// Also write the rows as JSON to this file.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Where to put scratch data (default: a temp dir under /var/tmp, on the
    /// root filesystem, so that ext4 is measured rather than a tmpfs).
    #[arg(long)]
    scratch: Option<std::path::PathBuf>,
}

impl Ctx {
    /// Whether `--workload` selects the workload named `name`.
    pub fn wants(&self, name: &str) -> bool {
        self.workload
            .as_deref()
            .is_none_or(|w| w.split(',').any(|p| name.contains(p.trim())))
    }
}

/// A group of workloads: runs them all and returns their rows.
type Group = fn(&Ctx) -> anyhow::Result<Vec<Row>>;

pub struct Ctx {
    pub quick: bool,
    pub workload: Option<String>,
    pub scratch: std::path::PathBuf,
}

fn main() -> anyhow::Result<()> {
    // The rootless group re-executes this binary as its helper: first thing.
    strata_rootless::maybe_run_internal();
    // So does the sandbox group (Sandbox init, daemon, exec helper).
    strata_sdk::maybe_run_internal();
    // And the mcp group (its `strata mcp` server on stdio).
    mcp::maybe_serve();
    let args = Args::parse();
    let base = args
        .scratch
        .clone()
        .unwrap_or_else(|| std::path::PathBuf::from("/var/tmp"));
    std::fs::create_dir_all(&base)?;
    let scratch = tempfile::Builder::new()
        .prefix("strata-bench-")
        .tempdir_in(&base)?;
    let ctx = Ctx {
        quick: args.quick,
        workload: args.workload.clone(),
        scratch: scratch.path().to_path_buf(),
    };
    let groups: &[(&str, Group)] = &[
        ("store", store::run),
        ("fs", fs::run),
        ("sandbox", sandbox::run),
        ("rootless", rootless::run),
        ("server", server::run),
        ("mcp", mcp::run),
        ("python", python::run),
        ("microvm", microvm::run),
    ];
    let mut rows = Vec::new();
    for (name, f) in groups {
        if args.only.as_deref().is_some_and(|o| o != *name) {
            continue;
        }
        eprintln!("== group {name}");
        rows.extend(f(&ctx)?);
    }
    if let Some(o) = &args.only {
        if !groups.iter().any(|(n, _)| n == o) {
            anyhow::bail!(
                "unknown group {o:?}; groups: {}",
                groups.iter().map(|g| g.0).collect::<Vec<_>>().join(", ")
            );
        }
    }
    report::print_table(&rows);
    if let Some(path) = &args.json {
        report::write_json(path, &rows)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
