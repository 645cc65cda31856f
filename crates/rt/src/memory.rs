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

/// What [`unlock_unused`] gave back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unlocked {
    /// Bytes of the executable's unwinding tables unlocked and dropped.
    pub unwind_bytes: usize,
    /// Bytes of the named libraries' read-only mappings unlocked and dropped.
    pub library_bytes: usize,
}

/// The executable's sections read only while a panic unwinds (or a
/// backtrace is taken): the unwinding tables and the exception tables.
const UNWIND_SECTIONS: [&str; 3] = [".eh_frame_hdr", ".eh_frame", ".gcc_except_table"];

/// Unlocks, and drops from this process's resident memory, file pages a
/// locked process never runs: the executable's unwinding tables (read only
/// when a panic unwinds) and the read-only mappings of the shared libraries
/// whose file names start with one of `libraries` (linked, never called by
/// this process, e.g. `libasound.so` in `watch`). They stay mapped: touched
/// again, they fault back in from the page cache, unlocked. Only mappings
/// that are not writable and hold no private copy of a page (no relocated
/// or written page) are touched, so nothing the process wrote is lost.
///
/// Call it after the last [`lock_all`] (`MCL_CURRENT` locks them again).
/// Setup-time only. Returns what it gave back; a mapping it cannot read
/// is left locked (nothing is given back then).
///
/// # Errors
/// [`ErrorKind::Io`] if `/proc/self/smaps` cannot be read.
pub fn unlock_unused(libraries: &[&str]) -> Result<Unlocked> {
    let smaps = std::fs::read_to_string("/proc/self/smaps")
        .map_err(|e| Error::new(ErrorKind::Io, format!("/proc/self/smaps: {e}")))?;
    let maps = parse_smaps(&smaps);
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let clean = |a: usize, b: usize| {
        maps.iter()
            .any(|m| m.start <= a && b <= m.end && !m.writable && m.anonymous_kib == 0)
    };
    let mut out = Unlocked::default();
    for (a, b) in unwind_ranges(page).unwrap_or_default() {
        if clean(a, b) && drop_pages(a, b) {
            out.unwind_bytes += b - a;
        }
    }
    for m in &maps {
        let named = m
            .path
            .rsplit('/')
            .next()
            .is_some_and(|f| libraries.iter().any(|l| f.starts_with(l)));
        if named && clean(m.start, m.end) && drop_pages(m.start, m.end) {
            out.library_bytes += m.end - m.start;
        }
    }
    Ok(out)
}

/// One mapping of `/proc/self/smaps`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mapping {
    start: usize,
    end: usize,
    writable: bool,
    /// `Anonymous:` — pages of this mapping that are private copies.
    anonymous_kib: u64,
    path: String,
}

fn parse_smaps(text: &str) -> Vec<Mapping> {
    let mut out: Vec<Mapping> = Vec::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let Some(first) = f.next() else { continue };
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(start), Ok(end)) =
                (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            {
                let perms = f.next().unwrap_or("");
                let path = f.nth(3).unwrap_or("").to_string();
                out.push(Mapping {
                    start,
                    end,
                    writable: perms.contains('w'),
                    anonymous_kib: 0,
                    path,
                });
                continue;
            }
        }
        if first == "Anonymous:" {
            if let (Some(m), Some(v)) = (out.last_mut(), f.next().and_then(|v| v.parse().ok())) {
                m.anonymous_kib = v;
            }
        }
    }
    out
}

/// Unlocks `[a, b)` and drops its pages from this process (they fault back
/// in from the file). False if the kernel refused either.
fn drop_pages(a: usize, b: usize) -> bool {
    let len = b - a;
    // SAFETY: [a, b) lies inside a mapping of this process that is not
    // writable and holds no private page (checked by the caller): dropping
    // its pages loses nothing, a later touch reads them from the file again.
    unsafe {
        libc::munlock(a as *const libc::c_void, len) == 0
            && libc::madvise(a as *mut libc::c_void, len, libc::MADV_DONTNEED) == 0
    }
}

/// The whole pages of the executable's [`UNWIND_SECTIONS`] in memory
/// (adjacent sections merged first), from its ELF section headers and the
/// load address the kernel gave it (`AT_PHDR`).
fn unwind_ranges(page: usize) -> Option<Vec<(usize, usize)>> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open("/proc/self/exe").ok()?;
    let read = |off: u64, len: usize| -> Option<Vec<u8>> {
        let mut b = vec![0u8; len];
        f.read_exact_at(&mut b, off).ok()?;
        Some(b)
    };
    let h = read(0, 64)?;
    // ELF, 64-bit, little-endian.
    if h[..4] != *b"\x7fELF" || h[4] != 2 || h[5] != 1 {
        return None;
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]));
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
    let (phoff, shoff) = (u64_at(&h, 0x20), u64_at(&h, 0x28));
    let (phnum, shentsize, shnum, shstrndx) = (
        usize::from(u16_at(&h, 0x38)),
        usize::from(u16_at(&h, 0x3A)),
        usize::from(u16_at(&h, 0x3C)),
        usize::from(u16_at(&h, 0x3E)),
    );
    // The load bias: where the program headers are, less where the file
    // says they are (PT_PHDR's address).
    let ph = read(phoff, phnum * 56)?;
    let phdr_vaddr = (0..phnum)
        .map(|i| &ph[i * 56..(i + 1) * 56])
        .find(|p| u32_at(p, 0) == 6)
        .map(|p| u64_at(p, 16))?;
    // SAFETY: getauxval has no preconditions.
    let at_phdr = unsafe { libc::getauxval(libc::AT_PHDR) };
    let bias = at_phdr.checked_sub(phdr_vaddr)?;
    if shentsize != 64 || shstrndx >= shnum {
        return None;
    }
    let sh = read(shoff, shnum * 64)?;
    let hdr = |i: usize| &sh[i * 64..(i + 1) * 64];
    let names = read(
        u64_at(hdr(shstrndx), 24),
        usize::try_from(u64_at(hdr(shstrndx), 32)).ok()?,
    )?;
    let name_of = |off: usize| -> &[u8] {
        let rest = names.get(off..).unwrap_or(&[]);
        &rest[..rest.iter().position(|&c| c == 0).unwrap_or(rest.len())]
    };
    let mut spans: Vec<(u64, u64)> = (0..shnum)
        .map(hdr)
        .filter(|s| {
            let n = name_of(u32_at(s, 0) as usize);
            // SHF_ALLOC: loaded into memory.
            u64_at(s, 8) & 2 != 0 && UNWIND_SECTIONS.iter().any(|w| w.as_bytes() == n)
        })
        .map(|s| (bias + u64_at(s, 16), bias + u64_at(s, 16) + u64_at(s, 32)))
        .collect();
    spans.sort_unstable();
    let page = page as u64;
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (a, b) in spans {
        match merged.last_mut() {
            Some(last) if a <= last.1 + page => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    Some(
        merged
            .into_iter()
            .map(|(a, b)| (a.div_ceil(page) * page, b / page * page))
            .filter(|(a, b)| a < b)
            .filter_map(|(a, b)| Some((usize::try_from(a).ok()?, usize::try_from(b).ok()?)))
            .collect(),
    )
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
    fn smaps_mappings_are_read_with_their_private_pages() {
        let t = "55d0-55e0 r--p 00000000 fe:00 123  /usr/bin/x\n\
                 Size:  64 kB\nAnonymous:  0 kB\n\
                 55e0-55f0 rw-p 00001000 fe:00 123  /usr/bin/x\n\
                 Anonymous:  8 kB\n\
                 7f00-7f10 rw-p 00000000 00:00 0 \n\
                 Anonymous:  16 kB\n";
        let m = parse_smaps(t);
        assert_eq!(m.len(), 3);
        assert_eq!(
            (m[0].start, m[0].end, m[0].writable),
            (0x55d0, 0x55e0, false)
        );
        assert_eq!(m[0].path, "/usr/bin/x");
        assert_eq!(m[1].anonymous_kib, 8);
        assert!(m[1].writable);
        assert_eq!(m[2].path, "");
        assert_eq!(m[2].anonymous_kib, 16);
    }

    #[test]
    fn prefault_that_fits_runs() {
        assert!(stack_left().unwrap() > 256 * 1024);
        prefault_stack(256 * 1024).unwrap();
    }
}
