//! Generated watch histories, for the roll-up tests and the benchmark
//! (`examples/rollup_bench.rs`): one-minute intervals per CPU made without
//! a machine, fast enough for 90 days in seconds.

#![allow(dead_code)]

use firmtime_watch::hist::Hist;
use firmtime_watch::store::{CpuInterval, MachineState, Wakeup};

/// A small deterministic generator (no dependency, same sequence everywhere).
pub struct Lcg(pub u64);

impl Lcg {
    /// The next 31 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The causes the generated wake-ups name: `(category, name)`.
pub const CAUSES: [(&str, &str); 6] = [
    ("irq", "eth0"),
    ("task", "kworker/0:1"),
    ("vm", ""),
    ("softirq", "TIMER"),
    ("task", "rcu_preempt"),
    ("irq", "nvme0q1"),
];

/// A machine state (kernel `release`).
pub fn state(release: &str) -> MachineState {
    MachineState {
        kernel_release: release.into(),
        kernel_cmdline: "quiet".into(),
        governors: "performance".into(),
        preempt_model: "full".into(),
        clocksource: "tsc".into(),
        virtualization: "kvm".into(),
        tuned_profile: "none".into(),
    }
}

/// What shapes one generated interval.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Wake-ups drawn one by one (and recorded into the union histogram);
    /// `None`: the histogram is made bucket by bucket (the benchmark's
    /// 6000 wake-ups a minute, fast).
    pub samples: Option<usize>,
    /// Worst wake-ups kept.
    pub worst: usize,
    /// Distinct cause names to draw from: at most [`CAUSES`]'s length uses
    /// it, more adds `task-K` names (to overflow a roll-up's cause list).
    pub names: usize,
    /// One drawn wake-up in this many is a late one (100 µs – 25.1 ms,
    /// missing deadlines beyond the 10 ms period).
    pub tail_every: u64,
    /// The cause of every kept wake-up, instead of drawn ones.
    pub cause: Option<(&'static str, &'static str)>,
    /// The interval's length, ns.
    pub len_ns: i64,
}

impl Default for Shape {
    fn default() -> Self {
        Shape {
            samples: None,
            worst: 10,
            names: 6,
            tail_every: 300,
            cause: None,
            len_ns: 60_000_000_000,
        }
    }
}

/// One CPU's interval of one minute from `start_ns`, with period 10 ms.
/// With `Shape::samples` every latency is also recorded into `union`.
pub fn minute(
    rng: &mut Lcg,
    cpu: usize,
    seq: u64,
    start_ns: i64,
    shape: Shape,
    union: Option<&mut Hist>,
) -> CpuInterval {
    let period = 10_000_000i64;
    let mut h = Hist::new();
    let mut lat: Vec<(i64, i64)> = Vec::new(); // (latency, deadline) of candidates for the worst
    let mut sum = 0f64;
    let mut missed = 0u64;
    let (mut min, mut max) = (i64::MAX, i64::MIN);
    match shape.samples {
        Some(n) => {
            let mut u = union;
            for i in 0..n {
                let l = if rng.below(shape.tail_every) == 0 {
                    // Up to 25 ms: beyond the 10 ms period, deadlines are missed.
                    100_000 + rng.below(25_000_000) as i64
                } else {
                    2_000 + rng.below(40_000) as i64
                };
                h.record(l);
                if let Some(u) = u.as_deref_mut() {
                    u.record(l);
                }
                sum += l as f64;
                missed += (l / period) as u64;
                min = min.min(l);
                max = max.max(l);
                lat.push((l, start_ns + i as i64 * period));
            }
        }
        None => {
            let mut counts: Vec<(i64, u64)> = Vec::new();
            let mut left = 6000u64;
            // A VM's spread (about 150 non-empty buckets a minute, as the
            // soak in docs/WATCH.md stored: ~3.9 KB a row).
            for us in 3..=150i64 {
                let c = (left / 30).max(1) + rng.below(4);
                let c = c.min(left);
                left -= c;
                counts.push((us * 1000, c));
            }
            counts.push((151_000, left));
            for _ in 0..(3 + rng.below(12)) {
                let l = 100_000 + rng.below(2_000_000) as i64;
                let i = firmtime_watch::hist::index(l);
                counts.push((firmtime_watch::hist::edge(i), 1));
                lat.push((l, start_ns + rng.below(6000) as i64 * period));
            }
            for (e, c) in counts {
                if c == 0 {
                    continue;
                }
                h.add_sparse(&[(e, c)]);
                sum += (e * c as i64) as f64;
                min = min.min(e - 999);
            }
            max = lat.iter().map(|x| x.0).max().unwrap_or(151_000);
        }
    }
    let count = h.total();
    lat.sort_by_key(|x| std::cmp::Reverse(x.0));
    lat.truncate(shape.worst);
    let wakeups = lat
        .iter()
        .map(|&(l, d)| {
            let k = rng.below(shape.names as u64) as usize;
            let (cat, name) = if let Some((c, n)) = shape.cause {
                (c.to_string(), n.to_string())
            } else if k < CAUSES.len() {
                (CAUSES[k].0.to_string(), CAUSES[k].1.to_string())
            } else {
                ("task".to_string(), format!("task-{k}"))
            };
            Wakeup {
                deadline_unix_ns: d,
                latency_ns: l,
                missed: (l / period) as u64,
                category: Some(cat),
                name: Some(name),
                cause_ns: Some(l as u64 / 2),
                ..Wakeup::default()
            }
        })
        .collect::<Vec<_>>();
    if shape.samples.is_none() {
        missed = wakeups.iter().map(|w| w.missed).sum();
    }
    CpuInterval {
        seq,
        cpu,
        start_unix_ns: start_ns,
        end_unix_ns: start_ns + shape.len_ns,
        period_ns: period as u64,
        count,
        missed,
        min_ns: Some(min),
        max_ns: Some(max),
        mean_ns: Some(sum / count.max(1) as f64),
        p99_ns: h.quantile(0.99, max),
        p999_ns: h.quantile(0.999, max),
        steal_ns: rng.below(1_000_000),
        partial: false,
        merged: 0,
        explained: true,
        histogram: h.sparse(),
        wakeups,
        watch_cpu_ns: Some(250_000_000 + rng.below(50_000_000)),
        trace_lost_events: Some(0),
    }
}
