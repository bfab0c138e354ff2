//! `strata-bench`: runs each workload several times after a warm-up and
//! prints one table: strata's median, the comparison's median measured in the
//! same run (or a published reference figure, named as such), the ratio, the
//! goal and whether it is met. See docs/benchmarks.md for the methodology.
#![forbid(unsafe_code)]

mod fs;
mod report;
mod rootless;
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
    /// Run only this group (store, fs, rootless).
    #[arg(long)]
    only: Option<String>,
    /// Also write the rows as JSON to this file.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Where to put scratch data (default: a temp dir under /var/tmp, on the
    /// root filesystem, so that ext4 is measured rather than a tmpfs).
    #[arg(long)]
    scratch: Option<std::path::PathBuf>,
}

/// A group of workloads: runs them all and returns their rows.
type Group = fn(&Ctx) -> anyhow::Result<Vec<Row>>;

pub struct Ctx {
    pub quick: bool,
    pub scratch: std::path::PathBuf,
}

fn main() -> anyhow::Result<()> {
    // The rootless group re-executes this binary as its helper: first thing.
    strata_rootless::maybe_run_internal();
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
        scratch: scratch.path().to_path_buf(),
    };
    let groups: &[(&str, Group)] = &[
        ("store", store::run),
        ("fs", fs::run),
        ("rootless", rootless::run),
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
