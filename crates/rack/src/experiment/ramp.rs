//! When a step passes, and the ramp of loads a point tries. **Pure.**

use crate::error::{Error, ErrorKind, Result};

/// Largest share of a step's periods allowed a late remote result.
pub const LATE_TOLERANCE: f64 = 0.001;

/// Does a step pass? `xruns` in `seconds`, against the idle baseline rate
/// `baseline_per_s`; `late` remote results out of `periods`.
///
/// The xruns allowed are the baseline's expectation plus three standard
/// deviations of a Poisson count, and at least one, rounded down:
/// `floor(λ + max(1, 3·√λ))` with `λ = baseline_per_s × seconds`. **Pure.**
pub fn passes(xruns: u64, late: u64, periods: u64, seconds: f64, baseline_per_s: f64) -> bool {
    xruns <= allowed_xruns(seconds, baseline_per_s)
        && (late as f64) <= LATE_TOLERANCE * periods as f64
}

/// The xruns a step of `seconds` may have (see [`passes`]). **Pure.**
pub fn allowed_xruns(seconds: f64, baseline_per_s: f64) -> u64 {
    let lambda = (baseline_per_s * seconds).max(0.0);
    (lambda + (3.0 * lambda.sqrt()).max(1.0)).floor() as u64
}

/// The ramp of one point: fractions of the period from `start` up by
/// `coarse` until a step fails, then from the last passing fraction up by
/// `fine` until a step fails or reaches the failed coarse fraction. The
/// usable fraction is the largest that passed. **Pure.**
#[derive(Debug, Clone, PartialEq)]
pub struct Search {
    coarse: f64,
    fine: f64,
    max: f64,
    next: Option<f64>,
    fine_until: Option<f64>,
    usable: Option<f64>,
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

impl Search {
    /// A ramp from `start` to at most `max`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] unless `0 < fine <= coarse` and `0 <= start <= max`.
    pub fn new(start: f64, coarse: f64, fine: f64, max: f64) -> Result<Search> {
        if !(fine > 0.0 && fine <= coarse && (0.0..=max).contains(&start)) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("ramp: need 0 < fine ({fine}) <= coarse ({coarse}) and 0 <= start ({start}) <= max ({max})"),
            ));
        }
        Ok(Search {
            coarse,
            fine,
            max,
            next: Some(round6(start)),
            fine_until: None,
            usable: None,
        })
    }

    /// The fraction to try next; `None` when the ramp is over.
    pub fn next(&self) -> Option<f64> {
        self.next
    }

    /// Records whether the step at [`Search::next`] passed.
    pub fn record(&mut self, passed: bool) {
        let Some(f) = self.next else { return };
        let below = |x: f64, ceiling: f64| x < ceiling - 1e-9;
        if passed {
            self.usable = Some(self.usable.map_or(f, |u| u.max(f)));
            self.next = match self.fine_until {
                None => Some(round6(f + self.coarse)).filter(|&x| x <= self.max + 1e-9),
                Some(c) => Some(round6(f + self.fine)).filter(|&x| below(x, c)),
            };
            return;
        }
        let ceiling = self.fine_until.map_or(f, |c| c.min(f));
        let searching_fine = self.fine_until.is_some() && self.usable.is_some();
        self.fine_until = Some(ceiling);
        self.next = if searching_fine {
            None
        } else if let Some(u) = self.usable {
            Some(round6(u + self.fine)).filter(|&x| below(x, ceiling))
        } else if f - self.coarse > 1e-9 {
            // Even the first step failed: walk down until one passes.
            Some(round6(f - self.coarse))
        } else {
            Some(round6(self.fine)).filter(|&x| below(x, f))
        };
    }

    /// The largest fraction that passed so far.
    pub fn usable(&self) -> Option<f64> {
        self.usable
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drive(mut s: Search, fail_at: f64) -> (Vec<f64>, Option<f64>) {
        let mut tried = Vec::new();
        while let Some(f) = s.next() {
            tried.push(f);
            s.record(f < fail_at - 1e-9);
            assert!(tried.len() < 100, "ramp does not end");
        }
        (tried, s.usable())
    }

    #[test]
    fn ramp_goes_coarse_then_fine() {
        let s = Search::new(0.5, 0.1, 0.02, 1.0).unwrap();
        let (tried, usable) = drive(s, 0.75);
        assert_eq!(tried, vec![0.5, 0.6, 0.7, 0.8, 0.72, 0.74, 0.76]);
        assert_eq!(usable, Some(0.74));
    }

    #[test]
    fn ramp_that_never_fails_stops_at_max() {
        let (tried, usable) = drive(Search::new(0.5, 0.1, 0.02, 1.0).unwrap(), 9.0);
        assert_eq!(tried, vec![0.5, 0.6, 0.7, 0.8, 0.9, 1.0]);
        assert_eq!(usable, Some(1.0));
    }

    #[test]
    fn ramp_failing_at_once_searches_below() {
        let (tried, usable) = drive(Search::new(0.5, 0.1, 0.05, 1.0).unwrap(), 0.47);
        assert_eq!(tried, vec![0.5, 0.4, 0.45]);
        assert_eq!(usable, Some(0.45));
        let (tried, usable) = drive(Search::new(0.5, 0.1, 0.02, 1.0).unwrap(), 0.25);
        assert_eq!(tried, vec![0.5, 0.4, 0.3, 0.2, 0.22, 0.24, 0.26]);
        assert_eq!(usable, Some(0.24));
        let (tried, usable) = drive(Search::new(0.1, 0.1, 0.05, 1.0).unwrap(), 0.01);
        assert_eq!(tried, vec![0.1, 0.05]);
        assert_eq!(usable, None);
    }

    #[test]
    fn ramp_rejects_bad_steps() {
        assert_eq!(
            Search::new(0.5, 0.01, 0.1, 1.0).unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
    }

    #[test]
    fn sporadic_xruns_are_discounted() {
        // No idle xruns: one xrun is tolerated, two are the load's.
        assert_eq!(allowed_xruns(1.0, 0.0), 1);
        assert!(passes(1, 0, 1000, 1.0, 0.0));
        assert!(!passes(2, 0, 1000, 1.0, 0.0));
        // 4 idle xruns per second over 1 s: λ = 4, 4 + 3·2 = 10 allowed.
        assert_eq!(allowed_xruns(1.0, 4.0), 10);
        assert!(passes(10, 0, 1000, 1.0, 4.0));
        assert!(!passes(11, 0, 1000, 1.0, 4.0));
        // Overload: an xrun almost every period.
        assert!(!passes(400, 0, 450, 1.0, 4.0));
    }

    #[test]
    fn late_results_fail_a_step() {
        assert!(passes(0, 1, 1000, 1.0, 0.0));
        assert!(!passes(0, 2, 1000, 1.0, 0.0));
    }
}
