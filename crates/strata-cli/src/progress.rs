//! `strata_store::Progress` drawn as an indicatif bar on stderr, only when
//! stderr is a terminal (scripts and tests see nothing).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::RwLock;
use std::time::Duration;
use strata_store::Progress;

pub struct Bar {
    enabled: bool,
    bar: RwLock<ProgressBar>,
}

impl Bar {
    /// A bar that draws only if stderr is a terminal.
    pub fn stderr() -> Bar {
        Bar {
            enabled: std::io::stderr().is_terminal(),
            bar: RwLock::new(ProgressBar::hidden()),
        }
    }

    fn current(&self) -> std::sync::RwLockReadGuard<'_, ProgressBar> {
        self.bar.read().unwrap_or_else(|p| p.into_inner())
    }
}

impl Progress for Bar {
    fn start(&self, what: &str, total: Option<u64>) {
        if !self.enabled {
            return;
        }
        let pb = match total {
            Some(n) => ProgressBar::with_draw_target(Some(n), ProgressDrawTarget::stderr())
                .with_style(
                    ProgressStyle::with_template(
                        "{msg:>8} [{bar:40}] {human_pos}/{human_len} {elapsed} (eta {eta})",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
                ),
            None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()).with_style(
                ProgressStyle::with_template("{spinner} {msg:>8} {human_pos} files {elapsed}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            ),
        };
        pb.set_message(what.to_string());
        pb.enable_steady_tick(Duration::from_millis(100));
        let old = std::mem::replace(
            &mut *self.bar.write().unwrap_or_else(|p| p.into_inner()),
            pb,
        );
        old.finish_and_clear();
    }

    fn advance(&self, n: u64) {
        if self.enabled {
            self.current().inc(n);
        }
    }

    fn finish(&self) {
        if self.enabled {
            self.current().finish_and_clear();
        }
    }
}

impl Drop for Bar {
    /// An error mid-operation must not leave a half-drawn bar behind.
    fn drop(&mut self) {
        if self.enabled {
            self.current().finish_and_clear();
        }
    }
}
