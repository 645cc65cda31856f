//! Hashing random data, like Varoquaux's `dd if=/dev/urandom | md5sum`:
//! reads /dev/urandom and folds it through FNV-1a 64.

use super::{Until, Work};
use crate::error::{Error, ErrorKind, Result};
use std::io::Read;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a 64 of `bytes`, continuing from `h`.
pub(super) fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// Reads /dev/urandom in 64 KiB blocks (dd's bs) and hashes them until done.
pub(super) fn urandom(until: &Until<'_>) -> Result<Work> {
    let mut f = std::fs::File::open("/dev/urandom").map_err(|e| {
        Error::new(
            ErrorKind::Io,
            format!("stress load: cannot open /dev/urandom: {e}; it is needed for the hashing part of the mix"),
        )
    })?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut w = Work {
        hash: FNV_OFFSET,
        ..Work::default()
    };
    while !until.done() {
        let n = match f.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(Error::new(
                    ErrorKind::Io,
                    format!("stress load: reading /dev/urandom failed: {e}"),
                ))
            }
        };
        w.hash = fnv1a(w.hash, &buf[..n]);
        w.bytes_hashed += n as u64;
    }
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        assert_eq!(fnv1a(FNV_OFFSET, b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(FNV_OFFSET, b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(FNV_OFFSET, b"foobar"), 0x8594_4171_f739_67e8);
        // Hashing in pieces equals hashing at once.
        assert_eq!(
            fnv1a(fnv1a(FNV_OFFSET, b"foo"), b"bar"),
            fnv1a(FNV_OFFSET, b"foobar")
        );
    }
}
