//! Progress of long work: bars on a terminal; when stderr is piped, nothing
//! ([`Bars::new`]) or, for runs of several steps (`lab all`), one line per
//! step with an estimate of the time left and a line every 30 s within a
//! long step ([`Bars::with_piped_lines`]), as CI logs and ssh sessions need.

use firmtime_lab::measure::Progress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// [`Progress`] drawn with indicatif on stderr when it is a terminal.
pub struct Bars {
    bar: Option<ProgressBar>,
    visible: bool,
    /// Piped stderr with lines asked for.
    lines: Option<Lines>,
}

impl Bars {
    /// Bars that show only when stderr is a terminal.
    pub fn new() -> Self {
        Self {
            bar: None,
            visible: std::io::stderr().is_terminal(),
            lines: None,
        }
    }

    /// Bars on a terminal; lines on stderr when it is piped.
    pub fn with_piped_lines() -> Self {
        let mut b = Self::new();
        if !b.visible {
            b.lines = Some(Lines::new(Box::new(std::io::stderr()), Instant::now()));
        }
        b
    }

    /// The run is over: with piped lines, one that says so and how long it took.
    pub fn finish(&mut self, what: &str) {
        if let Some(l) = &mut self.lines {
            l.finish(what, Instant::now());
        }
    }
}

impl Progress for Bars {
    fn begin(&mut self, label: &str, total: u64) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
        if let Some(l) = &mut self.lines {
            l.begin(label, total, Instant::now());
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
        if let Some(l) = &mut self.lines {
            l.advance(n, Instant::now());
        }
    }

    fn end(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }

    fn step(&mut self, n: usize, of: usize, name: &str) {
        if let Some(l) = &mut self.lines {
            l.step(n, of, name, Instant::now());
        }
    }
}

/// The phase (one measurement's `begin`) under way.
struct Phase {
    label: String,
    total: u64,
    pos: u64,
    started: Instant,
    last_line: Instant,
}

/// Progress as plain lines: one when each step starts, with the time so
/// far and an estimate of the time left (the remaining steps taken as long
/// as the average step so far), and one every [`Lines::EVERY`] within a
/// long step.
pub struct Lines {
    out: Box<dyn Write>,
    started: Instant,
    phase: Option<Phase>,
}

impl Lines {
    /// How often a long step reports its own progress.
    pub const EVERY: Duration = Duration::from_secs(30);

    /// Lines to `out`, the run having started at `started`.
    pub fn new(out: Box<dyn Write>, started: Instant) -> Self {
        Self {
            out,
            started,
            phase: None,
        }
    }

    fn line(&mut self, text: &str) {
        // A closed stderr drops the line; the run goes on.
        let _ = writeln!(self.out, "{text}");
        let _ = self.out.flush();
    }

    /// Step `n` of `of` begins at `now`.
    pub fn step(&mut self, n: usize, of: usize, name: &str, now: Instant) {
        let elapsed = now.saturating_duration_since(self.started);
        let done = n.saturating_sub(1);
        let left = if done == 0 {
            "time left estimated after the first step".to_string()
        } else {
            let per = elapsed.as_secs_f64() / done as f64;
            format!(
                "about {} left",
                clock(Duration::from_secs_f64(per * (of + 1 - n) as f64))
            )
        };
        self.phase = None;
        self.line(&format!(
            "firmtime: step {n}/{of}: {name} ({} so far, {left})",
            clock(elapsed)
        ));
    }

    /// The run ended at `now`.
    pub fn finish(&mut self, what: &str, now: Instant) {
        let took = clock(now.saturating_duration_since(self.started));
        self.line(&format!("firmtime: {what} in {took}"));
    }

    /// A measurement's phase begins.
    pub fn begin(&mut self, label: &str, total: u64, now: Instant) {
        self.phase = Some(Phase {
            label: label.to_string(),
            total,
            pos: 0,
            started: now,
            last_line: now,
        });
    }

    /// `n` more of the phase done at `now`; a line when the last was
    /// [`Lines::EVERY`] ago.
    pub fn advance(&mut self, n: u64, now: Instant) {
        let Some(p) = &mut self.phase else {
            return;
        };
        p.pos = (p.pos + n).min(p.total);
        if now.saturating_duration_since(p.last_line) < Self::EVERY || p.total == 0 {
            return;
        }
        p.last_line = now;
        let spent = now.saturating_duration_since(p.started).as_secs_f64();
        let share = p.pos as f64 / p.total as f64;
        let left = if share > 0.0 {
            format!(
                ", about {} left in it",
                clock(Duration::from_secs_f64(spent / share * (1.0 - share)))
            )
        } else {
            String::new()
        };
        let text = format!("firmtime:   {}: {:.0}% done{left}", p.label, share * 100.0);
        self.line(&text);
    }
}

/// A duration as `m:ss` (`h:mm:ss` from an hour on).
fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A writer the test reads back.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn piped_lines_say_each_step_and_estimate_the_time_left() {
        let sink = Sink::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut l = Lines::new(Box::new(sink.clone()), t0);
        l.step(1, 4, "clock", at(0));
        l.begin("clock", 10, at(0));
        l.advance(5, at(10)); // under 30 s since the phase began: quiet
        l.step(2, 4, "sleep", at(20));
        l.begin("sleep", 100, at(20));
        l.advance(25, at(50)); // 30 s on, a quarter done: 90 s left in it
        l.advance(25, at(60)); // 10 s after the last line: quiet
        l.step(3, 4, "cyclic SCHED_FIFO, idle", at(140));
        l.finish("done", at(3725));
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "firmtime: step 1/4: clock (0:00 so far, time left estimated after the first step)",
                // One step in 20 s: three to go.
                "firmtime: step 2/4: sleep (0:20 so far, about 1:00 left)",
                "firmtime:   sleep: 25% done, about 1:30 left in it",
                // Two steps in 140 s: 70 s each, two to go.
                "firmtime: step 3/4: cyclic SCHED_FIFO, idle (2:20 so far, about 2:20 left)",
                "firmtime: done in 1:02:05",
            ]
        );
    }

    #[test]
    fn clock_reads_minutes_and_hours() {
        assert_eq!(clock(Duration::from_secs(59)), "0:59");
        assert_eq!(clock(Duration::from_secs(61)), "1:01");
        assert_eq!(clock(Duration::from_secs(3725)), "1:02:05");
    }
}
