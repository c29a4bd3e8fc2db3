//! Progress of long runs, the one way mtlab shows it: a bar on stderr when
//! stderr is a terminal, nothing when it is piped or with `-q`.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A bar over `total` steps, or nothing if `quiet` or stderr is not a terminal.
    pub fn new(total: u64, quiet: bool) -> Progress {
        if quiet || !std::io::stderr().is_terminal() {
            return Progress { bar: None };
        }
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} ({eta}) {msg}")
                .expect("static template")
                .progress_chars("=> "),
        );
        Progress { bar: Some(bar) }
    }

    pub fn hidden() -> Progress {
        Progress { bar: None }
    }

    pub fn set_prefix(&self, prefix: impl Into<String>) {
        if let Some(b) = &self.bar {
            b.set_prefix(prefix.into());
        }
    }

    /// Says what runs now.
    pub fn set_message(&self, msg: impl Into<String>) {
        if let Some(b) = &self.bar {
            b.set_message(msg.into());
        }
    }

    pub fn inc(&self) {
        if let Some(b) = &self.bar {
            b.inc(1);
        }
    }

    pub fn set_position(&self, n: u64) {
        if let Some(b) = &self.bar {
            b.set_position(n);
        }
    }

    /// Adds steps discovered late (e.g. a second phase).
    pub fn inc_length(&self, n: u64) {
        if let Some(b) = &self.bar {
            b.inc_length(n);
        }
    }

    /// A line that must not be torn by the bar.
    pub fn println(&self, line: impl AsRef<str>) {
        match &self.bar {
            Some(b) => b.println(line.as_ref()),
            None => say!("{}", line.as_ref()),
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
