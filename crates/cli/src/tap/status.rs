//! The live status line of `firmtime tap run`: on a terminal, one line on
//! stderr redrawn in place four times a second while a trial runs (trial n
//! of N, elapsed and remaining time, taps heard, late outputs, xruns, input
//! dropped before the start, `INPUT LOST`); nothing when stderr is piped.
//!
//! The line is drawn by a thread of its own, started before the session
//! thread takes real-time priority (so it runs at normal priority), from
//! the engine's [`LiveStatus`] atomics: the engine never waits for it.

use std::io::{IsTerminal, Write as _};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use firmtime_tap::live::{self, LiveStatus};
use firmtime_tap::TrialEnd;

/// How often the line is redrawn.
const EVERY: Duration = Duration::from_millis(250);

/// The trial the line shows, set by the session between trials.
struct Showing {
    trial: u32,
    of: u32,
    name: String,
    end: TrialEnd,
    live: Arc<LiveStatus>,
}

impl Showing {
    /// The status line of this trial at `snap`, now.
    fn line(&self, snap: &live::LiveSnapshot) -> String {
        live::status_line(
            self.trial,
            self.of,
            &self.name,
            &self.end,
            snap,
            firmtime_rt::clock::monotonic_ns(),
        )
    }
}

struct Shared {
    /// `None` between trials; the lock also keeps the session's own lines
    /// from landing in the middle of a redraw.
    showing: Mutex<Option<Showing>>,
    /// A line is on the screen now (to be cleared).
    drawn: AtomicBool,
    quit: AtomicBool,
}

/// The live line's owner; dropping it stops the drawing thread.
pub struct StatusLine {
    shared: Option<Arc<Shared>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StatusLine {
    /// A status line when stderr is a terminal; else one that does nothing.
    /// Call it before the calling thread takes real-time priority: the
    /// drawing thread inherits its scheduling.
    pub fn start() -> Self {
        if !std::io::stderr().is_terminal() {
            return Self {
                shared: None,
                thread: None,
            };
        }
        let shared = Arc::new(Shared {
            showing: Mutex::new(None),
            drawn: AtomicBool::new(false),
            quit: AtomicBool::new(false),
        });
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("ft-tap-status".into())
            .spawn(move || draw_loop(&s))
            .ok();
        Self {
            shared: thread.is_some().then_some(shared),
            thread,
        }
    }

    /// From now on the line shows trial `trial` of `of`.
    pub fn show(&self, trial: u32, of: u32, name: &str, end: TrialEnd, live: Arc<LiveStatus>) {
        if let Some(s) = &self.shared {
            *lock(&s.showing) = Some(Showing {
                trial,
                of,
                name: name.to_string(),
                end,
                live,
            });
        }
    }

    /// The trial is over: the line is cleared, and stays so until the next
    /// [`StatusLine::show`], so that the session's own lines print clean.
    /// A trial that lost its input leaves its last line, `INPUT LOST (…)`
    /// first, on the screen instead: the loss ends the trial at once, maybe
    /// before the next redraw.
    pub fn clear(&self) {
        if let Some(s) = &self.shared {
            let mut g = lock(&s.showing);
            let last = g.take().and_then(|show| {
                let snap = show.live.read();
                snap.input_lost.map(|_| show.line(&snap))
            });
            let drawn = s.drawn.swap(false, Ordering::Relaxed);
            match last {
                Some(line) => eprintln!("\r\x1b[K{line}"),
                None if drawn => eprint!("\r\x1b[K"),
                None => {}
            }
        }
    }
}

impl Drop for StatusLine {
    fn drop(&mut self) {
        self.clear();
        if let Some(s) = &self.shared {
            s.quit.store(true, Ordering::Relaxed);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn draw_loop(s: &Shared) {
    while !s.quit.load(Ordering::Relaxed) {
        std::thread::sleep(EVERY);
        let g = lock(&s.showing);
        let Some(show) = g.as_ref() else {
            continue;
        };
        let snap = show.live.read();
        if !snap.running {
            continue;
        }
        let line = show.line(&snap);
        let width = terminal_width().saturating_sub(1).max(20);
        let line: String = line.chars().take(width).collect();
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[K{line}");
        let _ = err.flush();
        s.drawn.store(true, Ordering::Relaxed);
    }
}

/// Columns of the terminal on stderr (80 when unknown).
fn terminal_width() -> usize {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one winsize into the valid struct given.
    let r = unsafe { libc::ioctl(2, libc::TIOCGWINSZ, &mut ws) };
    if r == 0 && ws.ws_col > 0 {
        usize::from(ws.ws_col)
    } else {
        80
    }
}
