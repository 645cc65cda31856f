//! Progress bars on a terminal; nothing when stderr is piped.

use firmtime_lab::measure::Progress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// [`Progress`] drawn with indicatif on stderr when it is a terminal.
pub struct Bars {
    bar: Option<ProgressBar>,
    visible: bool,
}

impl Bars {
    /// Bars that show only when stderr is a terminal.
    pub fn new() -> Self {
        Self {
            bar: None,
            visible: std::io::stderr().is_terminal(),
        }
    }
}

impl Progress for Bars {
    fn begin(&mut self, label: &str, total: u64) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
        if !self.visible {
            return;
        }
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{msg:40} [{bar:30}] {pos}/{len} ({eta})")
                .expect("static template")
                .progress_chars("=> "),
        );
        bar.set_message(label.to_string());
        self.bar = Some(bar);
    }

    fn advance(&mut self, n: u64) {
        if let Some(b) = &self.bar {
            b.inc(n);
        }
    }

    fn end(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}
