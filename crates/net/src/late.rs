//! Why a `net bench` period was late, seen from the master.
//!
//! The bench loop records each late period and each missed loop deadline
//! as a [`LateRecord`] (plain copies into storage allocated before the
//! loop). After each step, [`side`] classifies each record from its
//! timestamps alone; after the run, [`causes`] names the cause of each
//! master-side record from the explaining trace, when there is one, and
//! groups them into [`LateCause`]s.
//!
//! # The rule
//! A result is due at its deadline, `window` periods plus the deadline
//! fraction after the tick of the period that sent its block. The master
//! can take time from it only on the sending side: the *send lag* (from
//! that tick to the call that sent the block: the loop's wake latency plus,
//! for the second and later workers, the earlier workers' calls) leaves the
//! worker and network the rest, the *available* time. A late wake at the
//! receiving period cannot make a result late: [`crate::Master::process`]
//! takes in everything that arrived before it looks, even after the
//! deadline. So a late result is
//!
//! * **master side** when the master's send lag exceeds the on-time
//!   tolerance ([`on_time_ns`]: a tenth of the period, at least 100 µs),
//!   the time it left was shorter than the step's median round trip of
//!   that worker, and a median round trip would have fitted had the
//!   master sent on its tick; a missed loop deadline is master side by
//!   definition;
//! * **worker or network side** when the master sent within the tolerance,
//!   or left at least a median round trip, or even an on-time send would
//!   not have left a median round trip (the worker is too slow for the
//!   period);
//! * **unknown** when the master sent late but no result was delivered in
//!   the step to compare with, or the record did not fit in the loop's
//!   storage (counted, never hidden).

use serde::Serialize;
use std::fmt::Write as _;

/// Which side made a period late.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// The master's loop sent the block too late, or missed its deadline.
    Master,
    /// The master sent on time: the worker or the network was late.
    WorkerOrNetwork,
    /// Cannot say from the timestamps.
    #[default]
    Unknown,
}

impl Side {
    /// In plain words.
    pub fn words(self) -> &'static str {
        match self {
            Side::Master => "master late",
            Side::WorkerOrNetwork => "worker or network side",
            Side::Unknown => "unknown",
        }
    }
}

/// One late period or missed loop deadline, as the loop recorded it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LateRecord {
    /// The loop pass (counted over every step) of the late period, or of
    /// the wake-up that missed deadlines; the index offered to the loop's
    /// notes.
    pub pass: u64,
    /// The loop pass that sent the late result's block (`window` calls earlier).
    pub send_pass: u64,
    /// The worker whose result was late (the first late one of the period).
    pub worker: u16,
    /// The master's wake latency at the sending pass, ns.
    pub send_wake_ns: i64,
    /// The master's wake latency at this pass, ns.
    pub recv_wake_ns: i64,
    /// From the sending pass's tick to the call that sent the block, ns.
    pub send_lag_ns: u64,
    /// From that call to the result's deadline, ns: the time left to the
    /// worker and the network.
    pub available_ns: u64,
    /// Loop deadlines missed at this pass (> 0: a missed-deadline record,
    /// not a late result).
    pub missed: u64,
}

/// A classified record, with the figures it was judged by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classified {
    /// The record.
    pub record: LateRecord,
    /// Its side ([`side`]).
    pub side: Side,
    /// The median round trip of its worker in its step, ns (`None`: no
    /// result delivered in the step).
    pub rtt_p50_ns: Option<u64>,
    /// The period, ns.
    pub period_ns: u64,
    /// False for a late period the loop's storage could not hold (only the
    /// count is known).
    pub recorded: bool,
}

use firmtime_rt::outliers::fmt_late;
pub use firmtime_rt::outliers::TracedCause;

/// Late periods and missed deadlines sharing a cause (`late_causes` in the JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LateCause {
    /// `master`, `worker_or_network` or `unknown`.
    pub side: Side,
    /// The trace's category for a traced master-side cause (`task`, `irq`,
    /// `softirq`, `vm`, `self`, `idle_exit`, `irqs_off`, `slack`); else
    /// `earlier_workers`, `not_traced`, `worker_or_network`, `not_recorded`
    /// or `unknown`.
    pub category: String,
    /// Its name (the task's comm, the interrupt, …), or empty.
    pub name: String,
    /// In words.
    pub cause: String,
    /// Late periods.
    pub periods: u64,
    /// Loop deadlines missed.
    pub missed: u64,
    /// Master side: the worst lateness of the master (send lag, or wake
    /// latency for a missed deadline); worker side: the most time a late
    /// result had; ns.
    pub worst_ns: u64,
    /// The worst one's figures, in one sentence.
    pub detail: String,
}

/// Within this send lag the master counts as on time: a tenth of the
/// period, at least 100 µs.
pub fn on_time_ns(period_ns: u64) -> u64 {
    (period_ns / 10).max(100_000)
}

/// The side of a late record by the rule of the [module docs](self).
pub fn side(r: &LateRecord, rtt_p50_ns: Option<u64>, period_ns: u64) -> Side {
    if r.missed > 0 {
        return Side::Master;
    }
    if r.send_lag_ns <= on_time_ns(period_ns) {
        return Side::WorkerOrNetwork;
    }
    match rtt_p50_ns {
        Some(need) if r.available_ns < need && r.available_ns + r.send_lag_ns >= need => {
            Side::Master
        }
        Some(_) => Side::WorkerOrNetwork,
        None => Side::Unknown,
    }
}

fn fmt_lat(ns: i64) -> String {
    fmt_late(ns.max(0) as u64)
}

/// The loop passes whose wake-ups the trace should explain: the sending
/// pass of each master-side late result (or the pass that missed
/// deadlines), with the master's wake latency there. Of use to pick the
/// trace's threshold.
pub fn master_wakes(items: &[Classified]) -> impl Iterator<Item = (u64, i64)> + '_ {
    items
        .iter()
        .filter(|c| c.recorded && c.side == Side::Master)
        .map(|c| {
            if c.record.missed > 0 {
                (c.record.pass, c.record.recv_wake_ns)
            } else {
                (c.record.send_pass, c.record.send_wake_ns)
            }
        })
}

/// Whether a cause category names a cause (not `unknown`, `not_traced`,
/// `not_recorded`).
pub fn is_explained(category: &str) -> bool {
    !matches!(category, "unknown" | "not_traced" | "not_recorded")
}

struct One {
    side: Side,
    category: String,
    name: String,
    words: String,
    ns: u64,
    detail: String,
}

fn name_one(c: &Classified, trace: Option<&dyn Fn(u64) -> Option<TracedCause>>) -> One {
    let r = &c.record;
    let rtt = c
        .rtt_p50_ns
        .map_or("no result delivered in this step".to_string(), |n| {
            format!("rtt p50 {}", fmt_late(n))
        });
    let one = |category: &str, name: &str, words: &str, ns: u64, detail: String| One {
        side: c.side,
        category: category.into(),
        name: name.into(),
        words: words.into(),
        ns,
        detail,
    };
    if !c.recorded {
        return one(
            "not_recorded",
            "",
            "not recorded",
            0,
            "late period beyond the loop's record storage (counted, not classified)".into(),
        );
    }
    match c.side {
        Side::WorkerOrNetwork => {
            let master = if r.send_lag_ns <= on_time_ns(c.period_ns) {
                format!(
                    "the master woke on time ({} at send, {} at receive) and sent {} after \
                     its tick",
                    fmt_lat(r.send_wake_ns),
                    fmt_lat(r.recv_wake_ns),
                    fmt_late(r.send_lag_ns)
                )
            } else {
                format!(
                    "the master sent {} after its tick (woke {} late at send, {} at \
                     receive), which did not decide it",
                    fmt_late(r.send_lag_ns),
                    fmt_lat(r.send_wake_ns),
                    fmt_lat(r.recv_wake_ns)
                )
            };
            one(
                "worker_or_network",
                "",
                "worker or network side",
                r.available_ns,
                format!(
                    "{master}: the lateness is on the worker or network side; no result \
                     within {} of sending ({rtt})",
                    fmt_late(r.available_ns)
                ),
            )
        }
        Side::Unknown => one(
            "unknown",
            "",
            "unknown",
            r.send_lag_ns,
            format!(
                "the master sent {} after its tick (woke {} late) and {rtt} to compare with",
                fmt_late(r.send_lag_ns),
                fmt_lat(r.send_wake_ns)
            ),
        ),
        Side::Master => {
            let (pass, wake, lag, what) = if r.missed > 0 {
                (
                    r.pass,
                    r.recv_wake_ns,
                    r.recv_wake_ns.max(0) as u64,
                    format!(
                        "the master woke {} late and missed {} loop deadline(s)",
                        fmt_lat(r.recv_wake_ns),
                        r.missed
                    ),
                )
            } else {
                (
                    r.send_pass,
                    r.send_wake_ns,
                    r.send_lag_ns,
                    format!(
                        "the master woke {} late at send and sent {} after its tick, leaving \
                         {} ({rtt})",
                        fmt_lat(r.send_wake_ns),
                        fmt_late(r.send_lag_ns),
                        fmt_late(r.available_ns)
                    ),
                )
            };
            if r.missed == 0 && r.worker > 0 && wake.max(0) as u64 * 2 < lag {
                return one(
                    "earlier_workers",
                    "",
                    "the loop's calls to earlier workers",
                    lag,
                    format!(
                        "{what}: one loop serves every worker, and it first waited for the \
                         earlier workers' results"
                    ),
                );
            }
            match trace {
                None => one(
                    "not_traced",
                    "",
                    "the master woke late (not traced)",
                    lag,
                    format!("{what}; not traced"),
                ),
                Some(f) => match f(pass) {
                    Some(t) => One {
                        side: c.side,
                        category: t.category,
                        name: t.name,
                        words: t.words,
                        ns: lag,
                        detail: format!("{what}: {}", t.detail),
                    },
                    None => one(
                        "unknown",
                        "",
                        "the master woke late (not among the traced wake-ups)",
                        lag,
                        format!("{what}; its wake-up was not among those the trace explained"),
                    ),
                },
            }
        }
    }
}

/// Groups `items` by cause, most late periods and missed deadlines first;
/// `trace` names the cause of a master-side item from the loop pass of the
/// master's late wake-up (`None`: not traced). Returns the causes and how
/// many late periods plus missed deadlines have one ([`is_explained`]).
pub fn causes(
    items: &[Classified],
    trace: Option<&dyn Fn(u64) -> Option<TracedCause>>,
) -> (Vec<LateCause>, u64) {
    let mut v: Vec<LateCause> = Vec::new();
    let mut explained = 0;
    for c in items {
        let o = name_one(c, trace);
        let (periods, missed) = if c.record.missed > 0 {
            (0, c.record.missed)
        } else {
            (1, 0)
        };
        if is_explained(&o.category) {
            explained += periods + missed;
        }
        let k = match v
            .iter()
            .position(|k| k.side == o.side && k.category == o.category && k.name == o.name)
        {
            Some(k) => k,
            None => {
                v.push(LateCause {
                    side: o.side,
                    category: o.category.clone(),
                    name: o.name.clone(),
                    cause: o.words.clone(),
                    ..LateCause::default()
                });
                v.len() - 1
            }
        };
        let k = &mut v[k];
        k.periods += periods;
        k.missed += missed;
        if o.ns >= k.worst_ns || k.detail.is_empty() {
            k.worst_ns = o.ns;
            k.detail = o.detail;
        }
    }
    v.sort_by(|a, b| {
        (b.periods + b.missed)
            .cmp(&(a.periods + a.missed))
            .then(b.worst_ns.cmp(&a.worst_ns))
    });
    (v, explained)
}

/// One line naming the causes: `late periods 12, missed deadlines 3: 10
/// worker or network side; 5 master late: 5 task ft-hog (worst 2.90 ms);
/// 15 of 15 have a cause`.
pub fn summary(causes: &[LateCause], late: u64, missed: u64, explained: u64) -> String {
    let mut s = format!("late periods {late}, missed deadlines {missed}");
    if late + missed == 0 {
        return s;
    }
    s.push(':');
    let mut first = true;
    for side in [Side::WorkerOrNetwork, Side::Master, Side::Unknown] {
        let of: Vec<&LateCause> = causes.iter().filter(|c| c.side == side).collect();
        let n: u64 = of.iter().map(|c| c.periods + c.missed).sum();
        if n == 0 {
            continue;
        }
        let _ = write!(s, "{} {n} {}", if first { "" } else { ";" }, side.words());
        first = false;
        if side == Side::WorkerOrNetwork {
            s.push_str(" (the master sent in time)");
            continue;
        }
        let parts: Vec<String> = of
            .iter()
            .map(|c| {
                format!(
                    "{} {} (worst {})",
                    c.periods + c.missed,
                    c.cause,
                    fmt_late(c.worst_ns)
                )
            })
            .collect();
        let _ = write!(s, ": {}", parts.join(", "));
    }
    let _ = write!(s, "; {explained} of {} have a cause", late + missed);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 1_333_333;

    fn late(send_lag_ns: u64, available_ns: u64) -> LateRecord {
        LateRecord {
            pass: 10,
            send_pass: 9,
            send_wake_ns: send_lag_ns as i64,
            send_lag_ns,
            available_ns,
            ..LateRecord::default()
        }
    }

    fn classified(r: LateRecord, rtt: Option<u64>) -> Classified {
        Classified {
            record: r,
            side: side(&r, rtt, P),
            rtt_p50_ns: rtt,
            period_ns: P,
            recorded: true,
        }
    }

    #[test]
    fn a_master_that_sent_on_time_puts_the_lateness_on_the_worker() {
        // 20 µs lag, the rest of the period left, a median round trip of
        // 1.6 ms (worker too slow): worker side.
        let r = late(20_000, P - 20_000);
        assert_eq!(side(&r, Some(1_600_000), P), Side::WorkerOrNetwork);
        // Nothing delivered at all in the step: still the worker's side.
        assert_eq!(side(&r, None, P), Side::WorkerOrNetwork);
    }

    #[test]
    fn a_late_send_that_left_less_than_a_round_trip_is_the_master() {
        // Woke 1.3 ms late: 33 µs left, a round trip takes 80 µs.
        let r = late(1_300_000, P - 1_300_000);
        assert_eq!(side(&r, Some(80_000), P), Side::Master);
        // A missed loop deadline is the master's by definition.
        let m = LateRecord {
            missed: 2,
            ..LateRecord::default()
        };
        assert_eq!(side(&m, None, P), Side::Master);
    }

    #[test]
    fn a_late_send_that_left_a_round_trip_is_not_the_master() {
        // 300 µs late but 1 ms left for an 80 µs round trip.
        let r = late(300_000, P - 300_000);
        assert_eq!(side(&r, Some(80_000), P), Side::WorkerOrNetwork);
        // Or the worker would have been late anyway (round trip > period).
        let r = late(300_000, P - 300_000);
        assert_eq!(side(&r, Some(1_500_000), P), Side::WorkerOrNetwork);
        // Late, and nothing to compare with: unknown.
        assert_eq!(side(&r, None, P), Side::Unknown);
    }

    #[test]
    fn causes_name_the_trace_for_the_master_and_count_coverage() {
        let hog = classified(late(1_300_000, 33_000), Some(80_000));
        let slow = classified(late(20_000, P), Some(80_000));
        let missed = classified(
            LateRecord {
                pass: 20,
                recv_wake_ns: 3_000_000,
                missed: 2,
                ..LateRecord::default()
            },
            Some(80_000),
        );
        let unknown = classified(late(300_000, P - 300_000), None);
        let lost = Classified {
            recorded: false,
            side: Side::Unknown,
            ..slow
        };
        let items = [hog, slow, slow, missed, unknown, lost];
        let lookup = |pass: u64| {
            (pass == 9 || pass == 20).then(|| TracedCause {
                category: "task".into(),
                name: "ft-hog".into(),
                words: "task ft-hog".into(),
                ns: 1_200_000,
                detail: "ft-hog ran 1.2 ms at a higher priority".into(),
            })
        };
        let (v, explained) = causes(&items, Some(&lookup));
        let hogs = v.iter().find(|c| c.name == "ft-hog").unwrap();
        assert_eq!((hogs.periods, hogs.missed), (1, 2));
        assert_eq!(hogs.side, Side::Master);
        assert!(hogs.detail.contains("higher priority"), "{}", hogs.detail);
        assert_eq!(v[0].name, "ft-hog");
        let w = v
            .iter()
            .find(|c| c.category == "worker_or_network")
            .unwrap();
        assert_eq!(w.periods, 2);
        // 1 + 2 missed + 2 worker side; the unknown and the unrecorded are not.
        assert_eq!(explained, 5);
        let line = summary(&v, 5, 2, explained);
        assert!(line.starts_with("late periods 5, missed deadlines 2: 2 worker or network side"));
        assert!(
            line.contains("3 master late: 3 task ft-hog (worst 3.00 ms)"),
            "{line}"
        );
        assert!(line.ends_with("; 5 of 7 have a cause"), "{line}");

        // Without the trace the master's side is classified but not named.
        let (v, explained) = causes(&items, None);
        assert_eq!(explained, 2);
        assert!(v
            .iter()
            .any(|c| c.category == "not_traced" && c.periods == 1 && c.missed == 2));
    }

    #[test]
    fn the_worker_side_says_whether_the_master_was_on_time() {
        let on_time = classified(late(20_000, P - 20_000), Some(1_600_000));
        let (v, _) = causes(&[on_time], None);
        assert!(v[0]
            .detail
            .starts_with("the master woke on time (20 µs at send"));
        let late_but_in_time = classified(late(300_000, P - 300_000), Some(80_000));
        let (v, _) = causes(&[late_but_in_time], None);
        assert_eq!(v[0].side, Side::WorkerOrNetwork);
        assert!(
            v[0].detail
                .starts_with("the master sent 300 µs after its tick"),
            "{}",
            v[0].detail
        );
    }

    #[test]
    fn a_send_delayed_by_earlier_workers_is_named_so() {
        let mut r = late(1_300_000, 33_000);
        r.worker = 1;
        r.send_wake_ns = 10_000;
        let (v, _) = causes(&[classified(r, Some(80_000))], None);
        assert_eq!(v[0].category, "earlier_workers");
    }
}
