//! firmtime's kernel tracing, shared by `lab`, `tap run` and `net bench`.
//!
//! - [`tracefs`]: private tracefs instances (an instance per user, removed
//!   when dropped, orphans of dead firmtime processes cleaned up), their
//!   per-CPU binary ring buffers drained by a thread into preallocated
//!   storage;
//! - [`loss`]: where the kernel lost events, in time, so that no late
//!   wake-up is explained from a trace with a hole in it;
//! - [`raw`]: the binary pages decoded with the kernel's own format files;
//! - [`explain`]: the explaining trace — windows kept around the late
//!   wake-ups a real-time loop flags (`firmtime_rt::outliers`), the
//!   attribution of each late wake-up to what ran on its CPU between
//!   deadline and wake-up, and the fixes that would remove them, each
//!   outlier credited once ([`explain::advice`]).
//!
//! `firmtime-lab` keeps the measurements (`lab trace`'s quanta, the
//! periodic wake-ups) and the report; this crate prints nothing.
//!
//! # RT contract
//! Nothing here runs at a deadline: the loops being explained only touch
//! `firmtime_rt::outliers` (RT-safe); the drainer is an ordinary thread
//! whose storage is allocated before it starts.

pub mod error;
pub mod explain;
pub mod loss;
pub mod raw;
pub mod tracefs;

pub use error::{Error, ErrorKind, Result};

/// Valid kernel ring buffer sizes per CPU, KiB (`--buffer-kb`).
pub const BUFFER_KB: std::ops::RangeInclusive<u32> = 64..=1_048_576;
/// Valid event store sizes (`--max-events`, `--explain-max-events`).
pub const MAX_EVENTS: std::ops::RangeInclusive<usize> = 1_000..=50_000_000;

/// `{what} {value} is out of range: valid is {start} to {end}{note}` as an
/// [`ErrorKind::InvalidInput`] error, or `Ok` within the range (the lab's
/// wording for every flag).
pub(crate) fn in_range<T: PartialOrd + Copy + std::fmt::Display>(
    what: &str,
    value: T,
    range: &std::ops::RangeInclusive<T>,
    note: &str,
) -> Result<()> {
    if range.contains(&value) {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "{what} {value} is out of range: valid is {} to {}{note}",
                range.start(),
                range.end()
            ),
        ))
    }
}
