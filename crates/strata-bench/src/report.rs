//! Rows, medians, the printed table and the JSON file.

use serde::Serialize;
use std::time::{Duration, Instant};

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub group: String,
    pub workload: String,
    pub unit: String,
    pub strata: f64,
    pub comparison: Option<f64>,
    pub comparison_name: String,
    pub ratio: Option<f64>,
    pub goal: String,
    pub met: Option<bool>,
}

impl Row {
    pub fn new(group: &str, workload: &str, unit: &str, strata: f64) -> Row {
        Row {
            group: group.into(),
            workload: workload.into(),
            unit: unit.into(),
            strata,
            comparison: None,
            comparison_name: String::new(),
            ratio: None,
            goal: String::new(),
            met: None,
        }
    }

    pub fn compare(mut self, name: &str, value: f64) -> Row {
        self.comparison = Some(value);
        self.comparison_name = name.into();
        self.ratio = (value != 0.0).then(|| self.strata / value);
        self
    }

    pub fn goal(mut self, text: &str, met: bool) -> Row {
        self.goal = text.into();
        self.met = Some(met);
        self
    }

    /// A goal column that is not judged (`met` stays empty): a figure
    /// reported for the record, or a goal that does not apply to this run.
    pub fn note(mut self, text: &str) -> Row {
        self.goal = text.into();
        self.met = None;
        self
    }
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The 99th percentile (nearest rank).
pub fn p99(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() as f64 - 1.0) * 0.99).round() as usize]
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Time `f` once.
pub fn time<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let v = f();
    (v, t.elapsed())
}

pub fn print_table(rows: &[Row]) {
    println!(
        "{:<8} {:<52} {:>12} {:>12} {:<26} {:>7} {:<16} {:<4}",
        "group", "workload", "strata", "comparison", "(comparison)", "ratio", "goal", "met"
    );
    for r in rows {
        let f = |v: f64| {
            if v.abs() >= 100.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.4}")
            }
        };
        println!(
            "{:<8} {:<52} {:>12} {:>12} {:<26} {:>7} {:<16} {:<4}",
            r.group,
            format!("{} [{}]", r.workload, r.unit),
            f(r.strata),
            r.comparison.map(f).unwrap_or_else(|| "-".into()),
            r.comparison_name,
            r.ratio
                .map(|x| format!("{x:.3}"))
                .unwrap_or_else(|| "-".into()),
            r.goal,
            match r.met {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "-",
            }
        );
    }
}

pub fn write_json(path: &std::path::Path, rows: &[Row]) -> anyhow::Result<()> {
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let machine = format!(
        "{} cores, kernel {}",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
    );
    let doc = serde_json::json!({ "machine": machine, "commit": commit, "rows": rows });
    std::fs::write(path, serde_json::to_vec_pretty(&doc)?)?;
    Ok(())
}
