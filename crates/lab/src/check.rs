//! Parameter checks shared by the configs' `validate()`: one wording for
//! "out of range" and "not online", so every flag's error names the flag
//! and what is valid in the same way.

use crate::error::{Error, ErrorKind, Result};
use firmtime_rt::sched;
use std::fmt::Display;
use std::ops::RangeInclusive;
use std::time::Duration;

/// An [`ErrorKind::InvalidInput`] error with `message`.
pub(crate) fn invalid(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidInput, message)
}

/// A duration in ns as the flags take it: `10us`, `1ms`, `3600s`.
pub(crate) fn fmt_ns(ns: u64) -> String {
    firmtime_rt::units::format_duration(Duration::from_nanos(ns))
}

/// `{what} {value} is out of range: valid is {start} to {end}{note}`, each
/// number written by `show`.
pub(crate) fn out_of_range<T: Copy>(
    what: &str,
    value: T,
    range: &RangeInclusive<T>,
    show: impl Fn(T) -> String,
    note: &str,
) -> Error {
    invalid(format!(
        "{what} {} is out of range: valid is {} to {}{note}",
        show(value),
        show(*range.start()),
        show(*range.end())
    ))
}

fn within<T: PartialOrd + Copy>(
    what: &str,
    value: T,
    range: &RangeInclusive<T>,
    show: impl Fn(T) -> String,
    note: &str,
) -> Result<()> {
    if range.contains(&value) {
        Ok(())
    } else {
        Err(out_of_range(what, value, range, show, note))
    }
}

/// Checks that `range` holds `value`, written as it displays.
pub(crate) fn in_range<T: PartialOrd + Copy + Display>(
    what: &str,
    value: T,
    range: &RangeInclusive<T>,
) -> Result<()> {
    within(what, value, range, |v| v.to_string(), "")
}

/// [`in_range`] with `note` (a unit or a remark, with its leading space)
/// after the valid range.
pub(crate) fn in_range_note<T: PartialOrd + Copy + Display>(
    what: &str,
    value: T,
    range: &RangeInclusive<T>,
    note: &str,
) -> Result<()> {
    within(what, value, range, |v| v.to_string(), note)
}

/// Checks that `range` holds `value`, each number written by `show`.
pub(crate) fn in_range_as<T: PartialOrd + Copy>(
    what: &str,
    value: T,
    range: &RangeInclusive<T>,
    show: impl Fn(T) -> String,
) -> Result<()> {
    within(what, value, range, show, "")
}

/// Checks that `range` holds the duration `ns`, written as [`fmt_ns`] does.
pub(crate) fn ns_in_range(what: &str, ns: u64, range: &RangeInclusive<u64>) -> Result<()> {
    in_range_as(what, ns, range, fmt_ns)
}

/// Checks that every CPU of `cpus` is online; else `{what} {cpu} is not
/// online: valid are {online list}`. Reads the online list only if there is
/// a CPU to check.
pub(crate) fn online(what: &str, cpus: impl IntoIterator<Item = usize>) -> Result<()> {
    let mut online = None;
    for c in cpus {
        let online = online.get_or_insert_with(sched::online_cpus);
        if !online.contains(&c) {
            return Err(invalid(format!(
                "{what} {c} is not online: valid are {}",
                sched::format_cpu_list(online)
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_errors_name_the_value_and_both_ends() {
        assert!(in_range("--n", 5u32, &(1..=9)).is_ok());
        let e = in_range("--n", 10u32, &(1..=9)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert_eq!(e.message(), "--n 10 is out of range: valid is 1 to 9");
        let e = ns_in_range("--d", 1, &(1_000..=1_000_000_000)).unwrap_err();
        assert_eq!(e.message(), "--d 1ns is out of range: valid is 1us to 1s");
        let e = in_range_as("--p", 0u8, &(1..=99), |p| format!("p{p}")).unwrap_err();
        assert_eq!(e.message(), "--p p0 is out of range: valid is p1 to p99");
        let e = in_range_note("--r", 0u32, &(1..=9), " Hz").unwrap_err();
        assert_eq!(e.message(), "--r 0 is out of range: valid is 1 to 9 Hz");
    }

    #[test]
    fn online_checks_each_cpu_and_lists_the_online_ones() {
        assert!(online("--cpu", None).is_ok());
        let all = sched::online_cpus();
        assert!(online("--cpu", all.iter().copied()).is_ok());
        let e = online("--cpu", Some(usize::MAX)).unwrap_err();
        assert_eq!(
            e.message(),
            format!(
                "--cpu {} is not online: valid are {}",
                usize::MAX,
                sched::format_cpu_list(&all)
            )
        );
    }
}
