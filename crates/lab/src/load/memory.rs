//! The memory load: allocate a working set once, then keep writing to each
//! of its pages, so the kernel must keep it resident (and the caches and
//! TLB are churned).

use super::{Until, Work};
use crate::error::{Error, ErrorKind, Result};

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
                    super::human_size(bytes),
                    super::human_size(avail)
                ),
            ));
        }
    }
    Ok(())
}

/// An anonymous private mapping, unmapped on drop. Its pages are mapped
/// lazily: the first write to each is what makes it resident.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(len: usize) -> std::io::Result<Self> {
        // SAFETY: a fresh anonymous mapping; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self { ptr: p.cast(), len })
    }

    /// Adds 1 to the byte at `off` (volatile, so the write is never elided).
    fn bump(&mut self, off: usize) {
        assert!(off < self.len);
        // SAFETY: `off` is inside the mapping, which is readable and writable
        // and owned by `self` for its whole life.
        unsafe {
            let p = self.ptr.add(off);
            p.write_volatile(p.read_volatile().wrapping_add(1));
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Maps `bytes`, writes to every page once (even if that takes longer than
/// the duration: the working set is the point), then keeps writing to its
/// pages in order until done.
pub(super) fn toucher(until: &Until<'_>, bytes: u64) -> Result<Work> {
    let len = usize::try_from(bytes).map_err(|_| {
        Error::new(
            ErrorKind::InvalidInput,
            "memory load: size exceeds the address space",
        )
    })?;
    let mut set = Mapping::new(len).map_err(|e| {
        Error::new(
            ErrorKind::Io,
            format!(
                "memory load: cannot map {}: {e}; use a smaller size",
                super::human_size(bytes)
            ),
        )
    })?;
    let page = page_size();
    let pages = len.div_ceil(page) as u64;
    let mut w = Work {
        pages,
        ..Work::default()
    };
    let mut first = true;
    'outer: loop {
        for (i, off) in (0..len).step_by(page).enumerate() {
            set.bump(off);
            w.pages_touched += 1;
            if !first && i % 256 == 255 && until.done() {
                break 'outer;
            }
        }
        first = false;
        if until.done() {
            break;
        }
    }
    Ok(w)
}
