//! What every lab measurement shares: the conditions it runs under, the
//! envelope its result is written in, skipped cells, progress and Ctrl-C.
//!
//! A measurement runs its measured loop on a dedicated thread set up by
//! [`run_in_thread`]: the requested real-time conditions are applied first
//! (and read back), the loop runs, then the conditions are undone, so one
//! process can measure several conditions in turn. A refusal is an error,
//! never a silent downgrade — unless the request allows downgrades, and then
//! the downgrade is in the returned [`RtConditions`].

use crate::error::{Error, ErrorKind, Result};
use firmtime_rt::memory;
use firmtime_rt::sched::Policy;
use firmtime_rt::setup::{self, RtConditions, RtRequest};
use firmtime_rt::system::Provenance;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};

/// The version of the JSON envelope written by every lab command.
pub const FORMAT_VERSION: u32 = 1;

/// Finney's (2001) three priority conditions, Table 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    /// A normal user process: SCHED_OTHER, nice 0, nothing locked.
    User,
    /// `setpriority(-20)` plus `mlockall` (the paper's "Setpriority").
    Setpriority,
    /// SCHED_FIFO at the given priority plus `mlockall`.
    Fifo(u8),
}

impl Priority {
    /// The three conditions of Finney's Table 1, in the paper's order.
    pub const FINNEY: [Priority; 3] = [Priority::User, Priority::Setpriority, Priority::Fifo(80)];

    /// The label used in tables and JSON: `user`, `setpriority`, `sched_fifo`.
    pub fn label(self) -> &'static str {
        match self {
            Priority::User => "user",
            Priority::Setpriority => "setpriority",
            Priority::Fifo(_) => "sched_fifo",
        }
    }

    /// The paper's name for the condition: `User`, `Setpriority`, `SCHED_FIFO`.
    pub fn paper_name(self) -> &'static str {
        match self {
            Priority::User => "User",
            Priority::Setpriority => "Setpriority",
            Priority::Fifo(_) => "SCHED_FIFO",
        }
    }

    /// The real-time request this condition stands for.
    pub fn request(self) -> RtRequest {
        let (policy, mlock) = match self {
            Priority::User => (Policy::Other { nice: 0 }, false),
            Priority::Setpriority => (Policy::Other { nice: -20 }, true),
            Priority::Fifo(priority) => (Policy::Fifo { priority }, true),
        };
        RtRequest {
            policy,
            mlock,
            prefault_stack: if mlock { 256 * 1024 } else { 0 },
            ..RtRequest::default()
        }
    }
}

/// A cell of a result table: measured, or skipped with the reason.
///
/// A mechanism that is not available here ("no /dev/rtc", "SCHED_DEADLINE
/// refused", "TSC not invariant") is a skipped cell, never a row of zeros.
/// In JSON: `{"status": "measured", ...fields}` or `{"status": "skipped", "reason": "..."}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Cell<T> {
    /// The measurement ran.
    Measured(T),
    /// The measurement could not run here; the reason says why.
    Skipped {
        /// Why, in words a user can act on.
        reason: String,
    },
}

impl<T> Cell<T> {
    /// The measured value, if any.
    pub fn measured(&self) -> Option<&T> {
        match self {
            Cell::Measured(t) => Some(t),
            Cell::Skipped { .. } => None,
        }
    }

    /// Turns an error that means "not available here" into a skipped cell and
    /// passes any other error on.
    ///
    /// # Errors
    /// Errors other than [`ErrorKind::Unavailable`] and [`ErrorKind::Realtime`].
    pub fn from_result(r: Result<T>) -> Result<Cell<T>> {
        match r {
            Ok(t) => Ok(Cell::Measured(t)),
            Err(e) if matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Realtime) => {
                Ok(Cell::Skipped {
                    reason: e.message().to_string(),
                })
            }
            Err(e) => Err(e),
        }
    }
}

/// What every lab JSON file holds around its result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Envelope<T> {
    /// Which measurement: `lab-clock`, `lab-sleep`, `lab-cyclic`, …
    pub kind: String,
    /// [`FORMAT_VERSION`].
    pub format_version: u32,
    /// True when the run was interrupted (Ctrl-C): the result holds what was
    /// measured until then.
    pub partial: bool,
    /// Version, command line, system block, start and end time.
    pub provenance: Provenance,
    /// The measurement's own result.
    pub result: T,
}

impl<T> Envelope<T> {
    /// Wraps `result`, finishing `provenance` (end time) now.
    pub fn new(kind: &str, mut provenance: Provenance, partial: bool, result: T) -> Self {
        provenance.finish();
        Self {
            kind: kind.to_string(),
            format_version: FORMAT_VERSION,
            partial,
            provenance,
            result,
        }
    }
}

/// Progress reporting for long measurements. The CLI draws bars on a
/// terminal; libraries only call these methods.
pub trait Progress {
    /// A new phase of `total` steps begins.
    fn begin(&mut self, label: &str, total: u64);
    /// `n` more steps are done.
    fn advance(&mut self, n: u64);
    /// The phase ended.
    fn end(&mut self);
    /// Step `n` (from 1) of `of` of a run of several measurements (`lab
    /// all`) begins; its phases follow. Default: nothing.
    fn step(&mut self, _n: usize, _of: usize, _name: &str) {}
}

/// Progress that shows nothing (piped output, tests).
#[derive(Debug, Default, Clone, Copy)]
pub struct Silent;

impl Progress for Silent {
    fn begin(&mut self, _label: &str, _total: u64) {}
    fn advance(&mut self, _n: u64) {}
    fn end(&mut self) {}
}

/// Set by SIGINT (Ctrl-C), SIGTERM or SIGHUP once the binary catches them
/// ([`crate::load::stop_flag`]): measurements stop at the next check and return what they have, flagged partial.
pub fn stop_requested() -> bool {
    crate::load::stop_flag().load(Ordering::Relaxed)
}

/// The stop flag itself, for loops that poll it. **RT-safe** to read.
pub fn stop_flag() -> &'static AtomicBool {
    crate::load::stop_flag()
}

/// Runs `f` on a new thread set up with `req`, and returns its result with
/// the conditions obtained.
///
/// The thread applies `req` first ([`setup::apply`]), runs `f`, then unlocks
/// memory again if `req` locked it (mlockall is process-wide), so the next
/// condition starts clean.
///
/// # Errors
/// [`ErrorKind::Realtime`] when the request is refused (with the reason and
/// the fix), or when the measuring thread panicked.
pub fn run_in_thread<R, F>(req: &RtRequest, f: F) -> Result<(R, RtConditions)>
where
    R: Send,
    F: FnOnce(&RtConditions) -> R + Send,
{
    std::thread::scope(|s| {
        let handle = std::thread::Builder::new()
            .name("firmtime-measure".into())
            .spawn_scoped(s, || {
                let rt = setup::apply(req)?;
                let r = f(&rt.conditions);
                let conditions = rt.conditions.clone();
                drop(rt);
                if req.mlock {
                    let _ = memory::unlock_all();
                }
                Ok::<_, Error>((r, conditions))
            })
            .map_err(|e| {
                Error::new(ErrorKind::Io, format!("cannot start measuring thread: {e}"))
            })?;
        handle
            .join()
            .map_err(|_| Error::new(ErrorKind::Io, "the measuring thread panicked"))?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finney_conditions_map_to_requests() {
        let u = Priority::User.request();
        assert_eq!(u.policy, Policy::Other { nice: 0 });
        assert!(!u.mlock);
        let s = Priority::Setpriority.request();
        assert_eq!(s.policy, Policy::Other { nice: -20 });
        assert!(s.mlock);
        let f = Priority::Fifo(80).request();
        assert_eq!(f.policy, Policy::Fifo { priority: 80 });
        assert!(f.mlock);
        assert!(!f.allow_downgrade, "conditions never downgrade silently");
    }

    #[test]
    fn skipped_cells_serialize_with_their_reason() {
        let c: Cell<u32> = Cell::from_result(Err(Error::new(
            ErrorKind::Unavailable,
            "not present: /dev/rtc does not exist",
        )))
        .unwrap();
        let j = serde_json::to_value(&c).unwrap();
        assert_eq!(j["status"], "skipped");
        assert_eq!(j["reason"], "not present: /dev/rtc does not exist");
        let io: Result<Cell<u32>> = Cell::from_result(Err(Error::new(ErrorKind::Io, "disk")));
        assert!(io.is_err(), "only unavailability becomes a skipped cell");
    }
}
