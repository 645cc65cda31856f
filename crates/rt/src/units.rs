//! Durations and sizes as users type them: `500us`, `1.5ms`, `10s`, `64KiB`.
//!
//! Every firmtime flag and experiment file that takes a duration or a size
//! goes through these parsers, so the accepted spellings and the error
//! messages are the same everywhere. Pure functions: no I/O.

use crate::error::{Error, Result};
use std::time::Duration;

/// Duration units accepted by [`parse_duration`], with their length in ns.
const DURATION_UNITS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("min", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Size units accepted by [`parse_size`], with their length in bytes.
const SIZE_UNITS: &[(&str, u128)] = &[
    ("B", 1),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("kB", 1_000),
    ("KB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
];

/// Splits `text` into a decimal number and a unit, and returns the number
/// scaled by the unit's factor, rounded to the nearest integer.
fn scaled(text: &str, units: &[(&str, u128)], what: &str) -> Result<(u128, bool)> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = (&t[..split], t[split..].trim());
    if num.is_empty() {
        return Err(Error::invalid(format!(
            "'{text}' is not a {what}: expected a number followed by a unit ({})",
            unit_list(units)
        )));
    }
    let (int_part, frac_part) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num, ""),
    };
    if frac_part.contains('.') || (int_part.is_empty() && frac_part.is_empty()) {
        return Err(Error::invalid(format!(
            "'{text}' is not a {what}: malformed number '{num}'"
        )));
    }
    let factor = if unit.is_empty() {
        None
    } else {
        match units.iter().find(|(u, _)| *u == unit) {
            Some(&(_, f)) => Some(f),
            None => {
                return Err(Error::invalid(format!(
                    "'{text}' is not a {what}: unknown unit '{unit}' (use {})",
                    unit_list(units)
                )))
            }
        }
    };
    let overflow = || Error::invalid(format!("'{text}' is too large for a {what}"));
    let int: u128 = if int_part.is_empty() {
        0
    } else {
        int_part.parse().map_err(|_| overflow())?
    };
    let f = factor.unwrap_or(1);
    let mut value = int.checked_mul(f).ok_or_else(overflow)?;
    // Fraction: exact decimal arithmetic, rounded to the nearest unit of the base.
    if !frac_part.is_empty() {
        let digits = frac_part.len().min(30) as u32;
        let frac: u128 = frac_part[..digits as usize]
            .parse()
            .map_err(|_| overflow())?;
        let scale = 10u128.pow(digits);
        let part = (frac.checked_mul(f).ok_or_else(overflow)? + scale / 2) / scale;
        value = value.checked_add(part).ok_or_else(overflow)?;
    }
    Ok((value, factor.is_some()))
}

fn unit_list(units: &[(&str, u128)]) -> String {
    units.iter().map(|(u, _)| *u).collect::<Vec<_>>().join(", ")
}

/// Parses a duration such as `500us`, `1.5ms`, `10s`, `2min` or `250ns`.
///
/// A unit is required (a bare `10` is ambiguous: 10 what?). Accepted units:
/// `ns`, `us` (or `µs`), `ms`, `s`, `min`, `h`. Decimals are allowed; the result
/// is rounded to the nearest nanosecond.
///
/// # Errors
/// [`crate::ErrorKind::InvalidInput`] with a message that quotes the input and
/// lists the accepted units.
pub fn parse_duration(text: &str) -> Result<Duration> {
    let (ns, had_unit) = scaled(text, DURATION_UNITS, "duration")?;
    if !had_unit {
        return Err(Error::invalid(format!(
            "'{text}' is not a duration: add a unit ({})",
            unit_list(DURATION_UNITS)
        )));
    }
    let ns = u64::try_from(ns)
        .map_err(|_| Error::invalid(format!("'{text}' is too large for a duration")))?;
    Ok(Duration::from_nanos(ns))
}

/// Parses a duration and checks that it lies in `min..=max`.
///
/// # Errors
/// As [`parse_duration`], and [`crate::ErrorKind::InvalidInput`] naming the
/// valid range when the value is outside it.
pub fn parse_duration_in(text: &str, min: Duration, max: Duration) -> Result<Duration> {
    let d = parse_duration(text)?;
    if d < min || d > max {
        return Err(Error::invalid(format!(
            "'{text}' is out of range: valid is {} to {}",
            format_duration(min),
            format_duration(max)
        )));
    }
    Ok(d)
}

/// Parses a size such as `64KiB`, `4MiB`, `1GB` or `4096` (bytes).
///
/// Binary units `KiB`, `MiB`, `GiB`; decimal units `kB`/`KB`, `MB`, `GB`;
/// `B` or no unit for bytes.
///
/// # Errors
/// [`crate::ErrorKind::InvalidInput`] with a message that quotes the input.
pub fn parse_size(text: &str) -> Result<u64> {
    let (bytes, _) = scaled(text, SIZE_UNITS, "size")?;
    u64::try_from(bytes).map_err(|_| Error::invalid(format!("'{text}' is too large for a size")))
}

/// Formats a duration with the largest unit that keeps it readable:
/// `750ns`, `12.5us`, `1ms`, `2.25s`.
pub fn format_duration(d: Duration) -> String {
    format_ns(d.as_nanos() as f64)
}

/// Formats a (possibly negative, possibly fractional) number of nanoseconds
/// like [`format_duration`].
pub fn format_ns(ns: f64) -> String {
    let a = ns.abs();
    let (v, u) = if a < 1e3 {
        (ns, "ns")
    } else if a < 1e6 {
        (ns / 1e3, "us")
    } else if a < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, "s")
    };
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}{u}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_every_unit() {
        assert_eq!(parse_duration("500us").unwrap(), Duration::from_micros(500));
        assert_eq!(parse_duration("500µs").unwrap(), Duration::from_micros(500));
        assert_eq!(parse_duration("1ms").unwrap(), Duration::from_millis(1));
        assert_eq!(
            parse_duration("1.5ms").unwrap(),
            Duration::from_micros(1500)
        );
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("2min").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("250ns").unwrap(), Duration::from_nanos(250));
        assert_eq!(parse_duration(".5s").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration(" 3 ms ").unwrap(), Duration::from_millis(3));
    }

    #[test]
    fn fractional_nanoseconds_round_to_nearest() {
        assert_eq!(
            parse_duration("1.0006us").unwrap(),
            Duration::from_nanos(1001)
        );
        assert_eq!(parse_duration("0.4ns").unwrap(), Duration::from_nanos(0));
    }

    #[test]
    fn bare_number_is_rejected_with_the_units() {
        let e = parse_duration("10").unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidInput);
        assert!(e.message().contains("add a unit"), "{e}");
        assert!(e.message().contains("ms"), "{e}");
    }

    #[test]
    fn garbage_is_rejected_quoting_the_input() {
        for bad in ["", "ms", "1.2.3ms", "5 parsecs", "-1ms", "1e3us"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.message().contains(&format!("'{bad}'")), "{bad}: {e}");
        }
    }

    #[test]
    fn overflow_is_an_error_not_a_wrap() {
        assert!(parse_duration("99999999999999999999h").is_err());
        assert!(parse_size("99999999999999999999GiB").is_err());
    }

    #[test]
    fn range_check_names_the_range() {
        let e =
            parse_duration_in("5s", Duration::from_micros(10), Duration::from_secs(1)).unwrap_err();
        assert!(e.message().contains("10us to 1s"), "{e}");
        assert!(parse_duration_in("1s", Duration::from_micros(10), Duration::from_secs(1)).is_ok());
    }

    #[test]
    fn sizes_binary_decimal_and_bare() {
        assert_eq!(parse_size("64KiB").unwrap(), 65536);
        assert_eq!(parse_size("4MiB").unwrap(), 4 << 20);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("2kB").unwrap(), 2000);
        assert_eq!(parse_size("1.5KiB").unwrap(), 1536);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4096B").unwrap(), 4096);
        assert!(parse_size("4 pages")
            .unwrap_err()
            .message()
            .contains("unknown unit 'pages'"));
    }

    #[test]
    fn formatting_picks_a_readable_unit() {
        assert_eq!(format_duration(Duration::from_nanos(750)), "750ns");
        assert_eq!(format_duration(Duration::from_nanos(12_500)), "12.5us");
        assert_eq!(format_duration(Duration::from_millis(1)), "1ms");
        assert_eq!(format_duration(Duration::from_millis(2250)), "2.25s");
        assert_eq!(format_ns(-1500.0), "-1.5us");
    }
}
