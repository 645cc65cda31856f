//! Memory locking: `mlockall(MCL_CURRENT | MCL_FUTURE)` and stack prefault.
//!
//! A page fault on the real-time path costs microseconds (minor) to
//! milliseconds (major). Locking all memory, present and future, and touching
//! the stack the loop will use moves those faults to setup time.
//!
//! # RT contract
//!
//! Setup-time only: nothing here is RT-safe. Lock and prefault before the loop.

use crate::error::{Errno, Error, ErrorKind, Result};

/// Bytes of stack each level of [`touch_stack`] touches.
const CHUNK: usize = 4096;
/// Stack kept free below the prefaulted region (signal handlers, the caller).
const STACK_MARGIN: usize = 64 * 1024;

/// Locks all current and future memory of the process
/// (`mlockall(MCL_CURRENT | MCL_FUTURE)`), then touches
/// `prefault_stack_bytes` of the calling thread's stack so those pages are
/// present and locked before the real-time loop runs.
///
/// `mlockall` applies to the whole process; the prefault to the calling
/// thread only (call [`prefault_stack`] on each RT thread).
///
/// # Errors
/// - [`ErrorKind::InvalidInput`] if the prefault does not fit in the stack
///   left on this thread (checked first: nothing is locked then).
/// - [`ErrorKind::MemlockDenied`] if the kernel refuses: the message gives
///   RLIMIT_MEMLOCK, whether CAP_IPC_LOCK is held, and the fix.
pub fn lock_all(prefault_stack_bytes: usize) -> Result<()> {
    check_stack_room(prefault_stack_bytes)?;
    // SAFETY: mlockall takes flags only.
    let r = unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) };
    if r != 0 {
        let errno = Errno::last().0;
        return Err(crate::setup::diagnose_mlock(
            errno,
            &crate::privileges::Privileges::read(),
        ));
    }
    touch_stack(prefault_stack_bytes.div_ceil(CHUNK));
    Ok(())
}

/// Touches `bytes` of the calling thread's stack so the pages are present
/// (and locked, after [`lock_all`]).
///
/// # Errors
/// [`ErrorKind::InvalidInput`] if that much stack is not left on this
/// thread; the message says how much is and how to get more.
pub fn prefault_stack(bytes: usize) -> Result<()> {
    check_stack_room(bytes)?;
    touch_stack(bytes.div_ceil(CHUNK));
    Ok(())
}

/// Unlocks all memory of the process (`munlockall`).
///
/// # Errors
/// [`ErrorKind::Io`] if `munlockall` fails.
pub fn unlock_all() -> Result<()> {
    // SAFETY: munlockall has no arguments.
    if unsafe { libc::munlockall() } != 0 {
        return Err(Error::last_os("munlockall"));
    }
    Ok(())
}

/// Whether the process has locked memory: `VmLck` in `/proc/self/status`
/// is above 0. `None` if that cannot be read.
pub fn is_locked() -> Option<bool> {
    locked_kib().map(|k| k > 0)
}

/// Locked memory of the process in KiB (`VmLck` in `/proc/self/status`).
pub fn locked_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    status_kib(&s, "VmLck")
}

/// Reads a `Key:   1234 kB` line of a `/proc/<pid>/status` text.
pub fn status_kib(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        if k.trim() != key {
            return None;
        }
        v.trim().trim_end_matches("kB").trim().parse().ok()
    })
}

/// Bytes of stack left below the current frame on the calling thread.
fn stack_left() -> Option<usize> {
    // SAFETY: pthread_attr_t is plain data, initialised by pthread_getattr_np.
    let mut attr: libc::pthread_attr_t = unsafe { std::mem::zeroed() };
    // SAFETY: `attr` is a valid, owned attribute object.
    if unsafe { libc::pthread_getattr_np(libc::pthread_self(), &mut attr) } != 0 {
        return None;
    }
    let mut addr: *mut libc::c_void = std::ptr::null_mut();
    let mut size: libc::size_t = 0;
    // SAFETY: `attr` was initialised above; the out-pointers are valid.
    let r = unsafe { libc::pthread_attr_getstack(&attr, &mut addr, &mut size) };
    // SAFETY: `attr` was initialised by pthread_getattr_np and is destroyed once.
    unsafe { libc::pthread_attr_destroy(&mut attr) };
    if r != 0 {
        return None;
    }
    let here = 0u8;
    let sp = std::hint::black_box(&here) as *const u8 as usize;
    sp.checked_sub(addr as usize)
}

fn check_stack_room(bytes: usize) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    let Some(left) = stack_left() else {
        return Ok(());
    };
    // Each level of the touch uses a little more than CHUNK bytes.
    let need = bytes + bytes / 16 + STACK_MARGIN;
    if need > left {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "stack prefault of {bytes} bytes does not fit: this thread has {left} bytes of stack left (keep {STACK_MARGIN} spare); ask for less, or run the RT work on a thread spawned with a larger stack (std::thread::Builder::stack_size)"
            ),
        ));
    }
    Ok(())
}

/// Touches `chunks` × [`CHUNK`] bytes of stack, one frame per chunk.
#[inline(never)]
fn touch_stack(chunks: usize) {
    if chunks == 0 {
        return;
    }
    let mut buf = [0u8; CHUNK];
    // Volatile writes, one per page, so the compiler cannot drop the frame.
    let mut i = 0;
    while i < CHUNK {
        // SAFETY: `i < CHUNK`, so the pointer is inside `buf`.
        unsafe { std::ptr::write_volatile(buf.as_mut_ptr().add(i), 1) };
        i += 1024;
    }
    std::hint::black_box(&mut buf);
    touch_stack(chunks - 1);
    std::hint::black_box(&buf);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_are_parsed() {
        let s = "Name:\tx\nVmLck:\t    1234 kB\nVmRSS:\t  88 kB\n";
        assert_eq!(status_kib(s, "VmLck"), Some(1234));
        assert_eq!(status_kib(s, "VmRSS"), Some(88));
        assert_eq!(status_kib(s, "VmSwap"), None);
    }

    #[test]
    fn prefault_larger_than_the_stack_is_refused_with_the_fix() {
        let e = prefault_stack(1 << 40).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.message().contains("stack_size"), "{e}");
    }

    #[test]
    fn prefault_that_fits_runs() {
        assert!(stack_left().unwrap() > 256 * 1024);
        prefault_stack(256 * 1024).unwrap();
    }
}
