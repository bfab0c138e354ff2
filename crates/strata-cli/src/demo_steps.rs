//! The demo's self-checking steps (`Demo`): each runs, is timed, prints
//! one line (or a JSON record) and stops the tour on failure. Shared by
//! `demo.rs` (the Store part) and `demo_sandbox.rs` (the Sandbox part).

use anyhow::{anyhow, Result};
use serde_json::{json, Value};
use std::time::Instant;

/// The demo's steps as they ran: printed as they end, kept for `--json`.
pub(crate) struct Demo {
    json: bool,
    pub(crate) steps: Vec<Value>,
}

/// A step failed; its error has been printed and recorded already.
#[derive(Debug)]
pub(crate) struct Failed;

impl Demo {
    pub(crate) fn new(json: bool) -> Demo {
        Demo {
            json,
            steps: Vec::new(),
        }
    }

    /// A line of narration under the last step (text mode only).
    pub(crate) fn note(&mut self, text: &str) {
        if !self.json {
            println!("       {text}");
        }
        if let Some(Value::Object(last)) = self.steps.last_mut() {
            let notes = last.entry("notes").or_insert_with(|| json!([]));
            if let Value::Array(a) = notes {
                a.push(json!(text));
            }
        }
    }

    /// A step that was skipped, and why (not a failure).
    pub(crate) fn skip(&mut self, name: &str, why: &str) {
        if !self.json {
            println!("[skip] {name:<60} {why}");
        }
        self.steps
            .push(json!({"step": name, "ok": true, "skipped": true, "detail": why}));
    }

    /// Record a failure that happened outside a step.
    pub(crate) fn fail<T>(&mut self, name: &str, e: &anyhow::Error) -> Result<T, Failed> {
        self.step(name, || -> Result<((), String)> { Err(anyhow!("{e:#}")) })?;
        Err(Failed)
    }

    pub(crate) fn step<T>(
        &mut self,
        name: &str,
        f: impl FnOnce() -> Result<(T, String)>,
    ) -> Result<T, Failed> {
        let t = Instant::now();
        let r = f();
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let (ok, detail, value) = match r {
            Ok((v, detail)) => (true, detail, Some(v)),
            Err(e) => (false, format!("{e:#}"), None),
        };
        if !self.json {
            let mark = if ok { "ok  " } else { "FAIL" };
            println!("[{mark}] {name:<60} {ms:>9.1} ms  {detail}");
        }
        self.steps
            .push(json!({"step": name, "ok": ok, "ms": ms, "detail": detail}));
        value.ok_or(Failed)
    }
}
