//! Holding `/dev/cpu_dma_latency` at a value while a guard lives.
//!
//! Writing a latency in µs to `/dev/cpu_dma_latency` and keeping the file
//! open asks the kernel's PM QoS to keep CPUs out of idle states whose exit
//! latency exceeds it (0 = stay in C0, i.e. never sleep deeply). Closing the
//! file drops the request. This costs power and heat, so firmtime holds it
//! only when asked, never by default.
//!
//! # RT contract
//!
//! Setup-time only: take the guard before the loop and drop it after.

use crate::error::{Error, ErrorKind, Result};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;

/// The PM QoS device.
pub const DEVICE: &str = "/dev/cpu_dma_latency";

/// Holds a CPU DMA latency request; dropping it releases the request.
#[derive(Debug)]
pub struct DmaLatencyGuard {
    file: File,
    us: u32,
}

impl DmaLatencyGuard {
    /// Asks the kernel to keep CPU wake-up latency at or below `us` µs for
    /// as long as the guard lives.
    ///
    /// # Errors
    /// - [`ErrorKind::InvalidInput`] if `us` exceeds `i32::MAX`.
    /// - [`ErrorKind::NotPresent`] if the device does not exist (kernel
    ///   without PM QoS, or a container without `/dev`).
    /// - [`ErrorKind::PermissionDenied`] if it cannot be opened for writing
    ///   (root only by default); the message gives the udev rule that fixes it.
    /// - [`ErrorKind::Io`] if the write fails.
    pub fn hold(us: u32) -> Result<Self> {
        let value = i32::try_from(us).map_err(|_| {
            Error::invalid(format!(
                "DMA latency {us}us is out of range: valid is 0 to {}us",
                i32::MAX
            ))
        })?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(DEVICE)
            .map_err(|e| open_error(&e))?;
        file.write_all(&value.to_ne_bytes()).map_err(|e| {
            Error::with_errno(
                ErrorKind::Io,
                format!("writing {us}us to {DEVICE}: {e}"),
                e.raw_os_error().unwrap_or(0),
            )
        })?;
        Ok(Self { file, us })
    }

    /// The value this guard asked for, in µs.
    pub fn requested_us(&self) -> u32 {
        self.us
    }

    /// The latency limit the kernel enforces now, in µs: the smallest of all
    /// requests in the system, so at most [`requested_us`](Self::requested_us).
    ///
    /// # Errors
    /// [`ErrorKind::Io`] if the device cannot be read.
    pub fn effective_us(&self) -> Result<i32> {
        let mut b = [0u8; 4];
        let n = self.file.read_at(&mut b, 0).map_err(|e| {
            Error::with_errno(
                ErrorKind::Io,
                format!("reading {DEVICE}: {e}"),
                e.raw_os_error().unwrap_or(0),
            )
        })?;
        if n != 4 {
            return Err(Error::new(
                ErrorKind::Io,
                format!("reading {DEVICE}: got {n} bytes, expected 4"),
            ));
        }
        Ok(i32::from_ne_bytes(b))
    }
}

fn open_error(e: &std::io::Error) -> Error {
    let errno = e.raw_os_error().unwrap_or(0);
    match e.kind() {
        std::io::ErrorKind::NotFound => Error::with_errno(
            ErrorKind::NotPresent,
            format!("{DEVICE} does not exist: this kernel has no CPU latency PM QoS interface (or /dev is not mounted); run without a DMA latency request"),
            errno,
        ),
        std::io::ErrorKind::PermissionDenied => Error::with_errno(
            ErrorKind::PermissionDenied,
            format!("{DEVICE} cannot be opened for writing: it is root-only by default. Run as root, or add a udev rule such as \
                     KERNEL==\"cpu_dma_latency\", GROUP=\"audio\", MODE=\"0660\" in /etc/udev/rules.d/99-cpu-dma-latency.rules, then `udevadm trigger` (see docs/RT-SETUP.md)"),
            errno,
        ),
        _ => Error::with_errno(ErrorKind::Io, format!("opening {DEVICE}: {e}"), errno),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_errors_are_actionable() {
        let e = open_error(&std::io::Error::from_raw_os_error(libc::ENOENT));
        assert_eq!(e.kind(), ErrorKind::NotPresent);
        let e = open_error(&std::io::Error::from_raw_os_error(libc::EACCES));
        assert_eq!(e.kind(), ErrorKind::PermissionDenied);
        assert!(e.message().contains("udev"), "{e}");
        assert_eq!(e.errno(), Some(libc::EACCES));
    }

    #[test]
    fn out_of_range_value_is_rejected() {
        let e = DmaLatencyGuard::hold(u32::MAX).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
    }
}
