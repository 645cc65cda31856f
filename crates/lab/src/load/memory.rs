//! The memory load: allocate a working set once, then keep writing to each
//! of its pages, so the kernel must keep it resident (and the caches and
//! TLB are churned).

use super::{Until, Work};
use crate::error::{Error, ErrorKind, Result};
use std::hint::black_box;

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// MemAvailable from /proc/meminfo, in bytes, if readable.
fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Refuses a working set larger than 90 % of the memory available, which
/// would push the machine into swap or the OOM killer.
pub(super) fn check_available(bytes: u64) -> Result<()> {
    if let Some(avail) = mem_available() {
        if bytes > avail / 10 * 9 {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "memory load of {} is more than 90% of the {} available (MemAvailable in /proc/meminfo): use a smaller size",
                    super::format_size(bytes),
                    super::format_size(avail)
                ),
            ));
        }
    }
    Ok(())
}

/// Allocates `bytes`, touches every page once, then keeps touching them until done.
pub(super) fn toucher(until: &Until<'_>, bytes: u64) -> Result<Work> {
    let len = usize::try_from(bytes).map_err(|_| {
        Error::new(
            ErrorKind::InvalidInput,
            "memory load: size exceeds the address space",
        )
    })?;
    let mut set: Vec<u8> = Vec::new();
    set.try_reserve_exact(len).map_err(|e| {
        Error::new(
            ErrorKind::Io,
            format!(
                "memory load: cannot allocate {}: {e}; use a smaller size",
                super::format_size(bytes)
            ),
        )
    })?;
    set.resize(len, 0);
    let page = page_size();
    let pages = len.div_ceil(page) as u64;
    let mut w = Work {
        pages,
        ..Work::default()
    };
    let mut first = true;
    'outer: loop {
        for (i, off) in (0..len).step_by(page).enumerate() {
            set[off] = set[off].wrapping_add(1);
            w.pages_touched += 1;
            // The first pass always completes: the whole set is touched once.
            if !first && i % 256 == 255 && until.done() {
                break 'outer;
            }
        }
        black_box(set.as_mut_slice());
        first = false;
        if until.done() {
            break;
        }
    }
    Ok(w)
}
