//! The periodic driver behind `firmtime net bench`: one [`Master`] per
//! worker, all driven from one SCHED_FIFO loop on an absolute grid, so the
//! middleware runs without audio hardware.
//!
//! Each period the loop fills every master's input (a counter), calls
//! [`Master::process`] on each in turn with the deadline
//! `period start + deadline_fraction × period` (as Lago's proxy plugins ran
//! one after the other in JACK's graph), and counts a period late if any
//! master's result was late. Each worker holds each block for the work
//! fraction of the period ([`Work`]). With a [`Ramp`], the fraction rises
//! step by step (each step its own run on a fresh grid, after the workers
//! confirmed the new fraction and a warm-up) and the *usable fraction* is
//! the largest step whose late fraction (late periods plus missed loop
//! deadlines, over all periods) is at most [`USABLE_LATE_FRACTION`].
//!
//! Each late period and each missed loop deadline gets a cause, seen from
//! the master ([`crate::late`]): the loop records the master's timestamps
//! of each one, each step classifies them (master late, worker or network
//! side, unknown), and the caller may name the master's late wake-ups from
//! an explaining trace ([`BenchReport::explain_late`]), matched by the
//! loop pass it offered to its [`Notes`].
//!
//! # RT contract
//! Setup (sessions, buffers, `mlockall`, policy) happens first; in the
//! loop only [`Master::process`], slice writes, the vDSO clock and CPU
//! reads, [`Notes::offer_on`], copies into late-period storage allocated
//! before the loop (at most [`LATE_RECORDS`] per step, the rest counted)
//! and the periodic sleep run (under `assert_no_alloc` with the
//! `assert-rt` feature). Round-trip samples are read and late periods
//! classified after each step.

use crate::block::{BlockSet, Direction};
use crate::error::{Error, Result};
use crate::late::{self, Classified, LateCause, LateRecord, TracedCause};
use crate::master::{Deadline, LatePolicy, Master, Outcome, WaitMode};
use crate::processor::{Transform, Work};
use crate::session::{connect, Link, LinkEventKind, SessionConfig};
use crate::wire::Key;
use firmtime_rt::clock::monotonic_ns;
use firmtime_rt::outliers::Notes;
pub use firmtime_rt::outliers::TraceCoverage;
use firmtime_rt::periodic::Periodic;
use firmtime_rt::sched::Policy;
use firmtime_rt::setup::{RtConditions, RtRequest};
use firmtime_rt::sleep;
use serde::Serialize;
use std::net::SocketAddr;
use std::time::Duration;

/// The late fraction at or below which a work fraction is usable (0.1 %).
pub const USABLE_LATE_FRACTION: f64 = 0.001;

/// Periods run before each step's counting starts.
const WARMUP_PERIODS: u64 = 50;

/// Late periods and missed-deadline wake-ups recorded per step; beyond
/// them late periods are counted as not recorded (cause unknown).
pub const LATE_RECORDS: usize = 4096;

/// Raising the work fraction step by step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Ramp {
    /// First fraction.
    pub from: f64,
    /// Last fraction (inclusive).
    pub to: f64,
    /// Step.
    pub step: f64,
    /// Counted time per step.
    pub step_duration: Duration,
    /// Stop after this many consecutive steps above the late threshold.
    pub stop_after_failures: u32,
}

/// Settings of a bench run.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Worker addresses; one master each.
    pub workers: Vec<SocketAddr>,
    /// Hot standbys: the k-th serves the k-th worker's stream (mirrored;
    /// see [`crate::Master`], "Hot standby"); fewer than the workers leaves
    /// the rest without one.
    pub standby: Vec<SocketAddr>,
    /// Pre-shared key.
    pub key: Option<Key>,
    /// Encrypt every session's data plane (needs `key`; see
    /// [`SessionConfig::encrypt`]).
    pub encrypt: bool,
    /// Frames per period (one f32 channel each way).
    pub period_frames: u32,
    /// Sample rate in Hz.
    pub rate: u32,
    /// 0, 1 or 2.
    pub window: u8,
    /// The hold (its fraction is the first step's with a ramp).
    pub work: Work,
    /// Counted time (without a ramp).
    pub duration: Duration,
    /// Raise the fraction step by step.
    pub ramp: Option<Ramp>,
    /// Deadline inside the period, as a fraction of it (1 = the period's end).
    pub deadline_fraction: f64,
    /// How masters wait.
    pub wait: WaitMode,
    /// The loop thread's policy and memory locking.
    pub rt: RtRequest,
}

impl BenchConfig {
    /// Defaults: 64 frames at 48 kHz, window 1, no work, 10 s, deadline at
    /// the period's end, poll wait, SCHED_FIFO 80 with `mlockall`.
    pub fn new(workers: Vec<SocketAddr>) -> Self {
        Self {
            workers,
            standby: Vec::new(),
            key: None,
            encrypt: false,
            period_frames: 64,
            rate: 48_000,
            window: 1,
            work: Work::default(),
            duration: Duration::from_secs(10),
            ramp: None,
            deadline_fraction: 1.0,
            wait: WaitMode::Poll,
            rt: RtRequest {
                policy: Policy::Fifo { priority: 80 },
                mlock: true,
                prefault_stack: 256 * 1024,
                ..RtRequest::default()
            },
        }
    }

    /// The period in ns.
    pub fn period_ns(&self) -> u64 {
        u64::from(self.period_frames) * 1_000_000_000 / u64::from(self.rate.max(1))
    }
}

/// One worker's share of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct WorkerDetail {
    /// Its address.
    pub addr: String,
    /// Results delivered in time.
    pub delivered: u64,
    /// Results late.
    pub late: u64,
    /// Late results of which nothing arrived.
    pub lost: u64,
    /// Results that arrived out of order.
    pub reordered: u64,
    /// Packets the master dropped from this worker (after deadline, malformed…).
    pub dropped: u64,
    /// Times the worker was lost.
    pub losses: u64,
    /// Times the stream was set up again.
    pub reconnects: u64,
    /// Reconnection times, CLOCK_REALTIME ns.
    pub reconnected_at_realtime_ns: Vec<u64>,
    /// Loss times, CLOCK_REALTIME ns.
    pub lost_at_realtime_ns: Vec<u64>,
    /// Median round trip.
    pub rtt_p50_ns: u64,
    /// The hot standby's address (`--standby`), `null` without one.
    pub standby: Option<String>,
    /// Results delivered from the standby (counted in `delivered`).
    pub from_standby: u64,
    /// Times the master switched the worker it serves from (to the standby
    /// when the worker missed a deadline or was gone, and back).
    pub takeovers: u64,
    /// Each switch's time, CLOCK_REALTIME ns (at most 64 kept).
    pub takeover_at_realtime_ns: Vec<u64>,
    /// Times the standby was lost.
    pub standby_losses: u64,
    /// Times the standby's stream was set up again.
    pub standby_reconnects: u64,
    /// Periods of which not one fragment of the standby's result arrived,
    /// among those it had not answered when the period was decided.
    pub standby_lost: u64,
    /// Results delivered (from either worker) whose samples differ from
    /// the input they were computed from (the bench's workers copy): not
    /// bit-exact with a run where nothing went wrong. 0 expected.
    pub mismatched: u64,
}

/// One step of a ramp (or the single step of a plain run).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StepReport {
    /// The work fraction.
    pub fraction: f64,
    /// Periods counted.
    pub periods: u64,
    /// Periods with at least one late result.
    pub late: u64,
    /// Loop deadlines missed (the master itself overran).
    pub missed: u64,
    /// (late + missed) / (periods + missed).
    pub late_fraction: f64,
    /// Whether `late_fraction ≤ 0.1 %`.
    pub usable: bool,
}

/// The result of a run (`--json` writes it).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct BenchReport {
    /// Periods counted over every step.
    pub periods: u64,
    /// Periods with a late result (any worker).
    pub late: u64,
    /// Late results of which nothing arrived, over every worker.
    pub lost: u64,
    /// Results out of order, over every worker.
    pub reordered: u64,
    /// Loop deadlines missed.
    pub missed: u64,
    /// (late + missed) / (periods + missed).
    pub late_fraction: f64,
    /// Round trip percentiles over every worker (send to last fragment's arrival).
    pub rtt_p50_ns: u64,
    /// 99th percentile.
    pub rtt_p99_ns: u64,
    /// Maximum.
    pub rtt_max_ns: u64,
    /// Largest work fraction with at most 0.1 % late periods; `None` if
    /// none was, or without a [`Ramp`] (not measured: see
    /// [`StepReport::usable`] of the single step).
    pub usable_fraction: Option<f64>,
    /// CPU time of the loop thread over wall time.
    pub master_cpu_fraction: f64,
    /// `master_cpu_fraction` divided by the number of workers.
    pub master_cpu_fraction_per_worker: f64,
    /// Period in ns.
    pub period_ns: u64,
    /// Frames per period.
    pub period_frames: u32,
    /// Sample rate.
    pub rate: u32,
    /// Window.
    pub window: u8,
    /// Whether the data plane was encrypted (ChaCha20-Poly1305).
    pub encrypt: bool,
    /// Results delivered from hot standbys, over every worker.
    pub from_standby: u64,
    /// Switches to and from hot standbys, over every worker.
    pub takeovers: u64,
    /// Delivered results not bit-exact with their input (copied by the
    /// worker), over every worker; 0 expected.
    pub mismatched: u64,
    /// When the loop woke after missing deadlines (counted periods),
    /// CLOCK_REALTIME ns, at most 64 kept: to tell the misses near an
    /// event (a worker killed) from the others.
    pub missed_at_realtime_ns: Vec<u64>,
    /// `spin`, `sleep` or `none`.
    pub work_mode: String,
    /// Each step.
    pub steps: Vec<StepReport>,
    /// Each worker.
    pub workers: Vec<WorkerDetail>,
    /// The RT conditions of the loop thread.
    pub rt: Option<RtConditions>,
    /// Late periods and missed loop deadlines by cause, most first
    /// ([`crate::late`]).
    pub late_causes: Vec<LateCause>,
    /// Of the late periods plus missed deadlines, those with a cause (not
    /// `unknown`, `not_traced` or `not_recorded`).
    pub late_explained: u64,
    /// Late periods beyond the loop's record storage (cause unknown).
    pub late_not_recorded: u64,
    /// The explaining trace's figures, when it ran (set by the caller).
    pub trace: Option<TraceCoverage>,
    /// Every late period and missed deadline, classified (for
    /// [`BenchReport::explain_late`]; not in the JSON).
    #[serde(skip)]
    pub late_items: Vec<Classified>,
}

impl BenchReport {
    /// Names the causes of the late periods again, the master's late
    /// wake-ups by `trace` (the cause the explaining trace gave the loop
    /// pass offered to the run's [`Notes`], if any).
    pub fn explain_late(&mut self, trace: Option<&dyn Fn(u64) -> Option<TracedCause>>) {
        let (causes, explained) = late::causes(&self.late_items, trace);
        self.late_causes = causes;
        self.late_explained = explained;
    }

    /// One line naming the causes ([`late::summary`]).
    pub fn late_summary(&self) -> String {
        late::summary(
            &self.late_causes,
            self.late,
            self.missed,
            self.late_explained,
        )
    }

    /// The loop passes of the master's late wake-ups that made periods
    /// late, with their wake latency: what the trace should explain.
    pub fn master_wakes(&self) -> impl Iterator<Item = (u64, i64)> + '_ {
        late::master_wakes(&self.late_items)
    }
}

/// The master's call that sent one sequence number to one worker.
#[derive(Debug, Clone, Copy, Default)]
struct Sent {
    seq: u64,
    pass: u64,
    tick_ns: u64,
    wake_ns: i64,
    at_ns: u64,
}

struct Remote {
    master: Master,
    link: Link,
    input: crate::block::BlockId<f32>,
    output: crate::block::BlockId<f32>,
    late: u64,
    mismatched: u64,
    /// CLOCK_REALTIME of each takeover (preallocated, at most [`TAKEOVERS_KEPT`]).
    takeovers: Vec<u64>,
    /// The last calls, by sequence number modulo 4 (window ≤ 2).
    sent: [Sent; 4],
}

/// Quantile `p` of `sorted` by nearest rank, as every firmtime figure
/// ([`firmtime_rt::quantile`]); 0 when empty.
fn percentile(sorted: &[u64], p: f64) -> u64 {
    firmtime_rt::quantile::of_sorted(sorted, p).unwrap_or(0)
}

/// Takeover times kept per worker.
const TAKEOVERS_KEPT: usize = 64;

/// Counter values the bench sends are exact in an f32 below 2^24.
const EXACT_COUNTER: u64 = 1 << 24;

fn thread_cpu_ns() -> u64 {
    firmtime_rt::clock::read_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Runs the bench on the calling thread (which it makes real-time) and
/// returns the report. `progress` hears one line per step. Each loop pass
/// (counted over every step, from 0) is offered to `notes`
/// ([`Notes::offer_on`]) as due at its tick and woken when the master's
/// first call of the pass began (the wake-up plus anything that ran before
/// the loop got to send); `Notes::new(0)` notes nothing.
///
/// # Errors
/// No worker given; a session cannot be set up (the message names the
/// worker); the RT setup was refused (the message says how to grant it);
/// the periodic sleep failed.
pub fn run(
    cfg: &BenchConfig,
    notes: &mut Notes,
    progress: &mut dyn FnMut(&str),
) -> Result<BenchReport> {
    if cfg.workers.is_empty() {
        return Err(Error::invalid("no workers: give --workers A,B,…"));
    }
    if !(0.05..=1.0).contains(&cfg.deadline_fraction) {
        return Err(Error::invalid(format!(
            "deadline fraction {} is out of range: give 0.05 to 1",
            cfg.deadline_fraction
        )));
    }
    let period_ns = cfg.period_ns();
    if period_ns < 100_000 {
        return Err(Error::invalid(format!(
            "period of {period_ns} ns is too short: use at least 100 µs (frames / rate)"
        )));
    }
    if cfg.standby.len() > cfg.workers.len() {
        return Err(Error::invalid(format!(
            "{} standbys for {} workers: give at most one standby per worker (the k-th \
             standby serves the k-th worker)",
            cfg.standby.len(),
            cfg.workers.len()
        )));
    }
    let frames = cfg.period_frames as usize;
    let mut remotes = Vec::with_capacity(cfg.workers.len());
    for (k, &w) in cfg.workers.iter().enumerate() {
        let mut blocks = BlockSet::new();
        let input = blocks.add::<f32>(Direction::ToWorker, frames)?;
        let output = blocks.add::<f32>(Direction::FromWorker, frames)?;
        let mut sc = SessionConfig::new(w, period_ns);
        sc.standby = cfg.standby.get(k).copied();
        sc.key = cfg.key.clone();
        sc.encrypt = cfg.encrypt;
        sc.window = cfg.window;
        sc.transform = Transform::Copy;
        sc.work = cfg.work;
        sc.wait = cfg.wait;
        sc.late_policy = Some(LatePolicy::Dry);
        let (master, link) = connect(sc, blocks)?;
        remotes.push(Remote {
            master,
            link,
            input,
            output,
            late: 0,
            mismatched: 0,
            takeovers: Vec::with_capacity(TAKEOVERS_KEPT),
            sent: [Sent::default(); 4],
        });
    }
    let before = firmtime_rt::sched::current_thread().ok();
    let setup = firmtime_rt::setup::apply(&cfg.rt).map_err(|e| {
        Error::new(
            crate::ErrorKind::PermissionDenied,
            format!("the bench loop's real-time setup was refused: {e}"),
        )
    })?;
    let mut sleeper = sleep::open(sleep::Mechanism::ClockNanosleep)
        .map_err(|e| Error::invalid(format!("opening clock_nanosleep: {e}")))?;

    let fractions: Vec<f64> = match cfg.ramp {
        None => vec![cfg.work.fraction],
        Some(r) => {
            let mut v = Vec::new();
            let mut k = 0u32;
            loop {
                let f = r.from + f64::from(k) * r.step;
                if f > r.to + 1e-9 || r.step <= 0.0 {
                    break;
                }
                v.push((f * 1e6).round() / 1e6);
                k += 1;
            }
            if v.is_empty() {
                v.push(r.from);
            }
            v
        }
    };
    let step_duration = cfg.ramp.map_or(cfg.duration, |r| r.step_duration);
    let counted = (step_duration.as_nanos() as u64 / period_ns).max(1);
    let deadline_offset = (period_ns as f64 * cfg.deadline_fraction) as u64;

    let mut report = BenchReport {
        period_ns,
        period_frames: cfg.period_frames,
        rate: cfg.rate,
        window: cfg.window,
        encrypt: cfg.encrypt,
        work_mode: format!("{:?}", cfg.work.mode).to_lowercase(),
        ..BenchReport::default()
    };
    let mut rtts: Vec<u64> = Vec::new();
    let mut per_rtts: Vec<Vec<u64>> = vec![Vec::new(); remotes.len()];
    let mut failures = 0u32;
    let mut cpu_ns = 0u64;
    let mut wall_ns = 0u64;
    let mut counter = 0f32;
    let mut records: Vec<LateRecord> = Vec::with_capacity(LATE_RECORDS);
    let mut missed_at: Vec<u64> = Vec::with_capacity(TAKEOVERS_KEPT);
    let mut pass = 0u64;
    for &fraction in &fractions {
        let work = Work {
            fraction,
            mode: cfg.work.mode,
        };
        if cfg.ramp.is_some() {
            for r in &remotes {
                r.link.set_work(work, Duration::from_secs(2))?;
            }
        }
        for r in remotes.iter_mut() {
            r.master.clear_rtt();
        }
        let mut step = StepReport {
            fraction,
            ..StepReport::default()
        };
        let mut grid = Periodic::new(monotonic_ns() + period_ns, period_ns);
        let total = WARMUP_PERIODS + counted;
        let mut cpu0 = 0;
        let mut wall0 = 0;
        records.clear();
        let mut not_recorded = 0u64;
        let mut missed_not_recorded = 0u64;
        for i in 0..total {
            if i == WARMUP_PERIODS {
                cpu0 = thread_cpu_ns();
                wall0 = monotonic_ns();
                for r in remotes.iter_mut() {
                    r.master.clear_rtt();
                }
            }
            let tick = grid
                .wait(&mut *sleeper)
                .map_err(|e| Error::invalid(format!("the periodic sleep failed: {e:?}")))?;
            let deadline = tick.deadline_ns + deadline_offset;
            counter += 1.0;
            let counting = i >= WARMUP_PERIODS;
            let any_late = firmtime_rt::assert_rt::no_alloc(|| {
                let cpu = firmtime_rt::sched::current_cpu();
                let mut any_late = false;
                let mut record = None;
                let mut first_ns = tick.wake_ns;
                for (k, r) in remotes.iter_mut().enumerate() {
                    let input = r.input;
                    r.master.blocks_mut().get_mut(input).fill(counter);
                    let at_ns = monotonic_ns();
                    if k == 0 {
                        first_ns = at_ns;
                    }
                    let takeovers = r.master.stats().takeovers;
                    let rep = r.master.process(Deadline::At(deadline));
                    if r.master.stats().takeovers != takeovers
                        && r.takeovers.len() < r.takeovers.capacity()
                    {
                        r.takeovers.push(firmtime_rt::clock::gettimeofday_ns());
                    }
                    if let (Outcome::Delivered, Some(due)) = (rep.outcome, rep.result_seq) {
                        // The worker copies: the result of period `due` is
                        // the counter sent then (pass `due` sent `due + 1`).
                        let want = (due + 1) as f32;
                        if due + 1 < EXACT_COUNTER
                            && r.master.blocks().get(r.output).iter().any(|&y| y != want)
                        {
                            r.mismatched += 1;
                        }
                    }
                    r.sent[(rep.seq % 4) as usize] = Sent {
                        seq: rep.seq,
                        pass,
                        tick_ns: tick.deadline_ns,
                        wake_ns: tick.latency_ns,
                        at_ns,
                    };
                    if rep.outcome == Outcome::Late {
                        any_late = true;
                        if counting {
                            r.late += 1;
                        }
                        let sent = rep.result_seq.map(|due| r.sent[(due % 4) as usize]);
                        if let (None, Some(s)) = (record, sent) {
                            if Some(s.seq) == rep.result_seq {
                                record = Some(LateRecord {
                                    pass,
                                    send_pass: s.pass,
                                    worker: k as u16,
                                    send_wake_ns: s.wake_ns,
                                    recv_wake_ns: tick.latency_ns,
                                    send_lag_ns: s.at_ns.saturating_sub(s.tick_ns),
                                    available_ns: deadline.saturating_sub(s.at_ns),
                                    missed: 0,
                                });
                            }
                        }
                    }
                }
                // Noted up to the first call, not just the wake-up: a task
                // that preempts the loop between the two delays the send too.
                notes.offer_on(cpu, pass, tick.deadline_ns, first_ns, tick.missed);
                if counting {
                    // Within capacity `push` never allocates; the rest is counted.
                    match record {
                        Some(rec) if records.len() < records.capacity() => records.push(rec),
                        _ if any_late => not_recorded += 1,
                        _ => {}
                    }
                    if tick.missed > 0 {
                        if missed_at.len() < missed_at.capacity() {
                            missed_at.push(firmtime_rt::clock::gettimeofday_ns());
                        }
                        if records.len() < records.capacity() {
                            records.push(LateRecord {
                                pass,
                                send_pass: pass,
                                recv_wake_ns: tick.latency_ns,
                                missed: tick.missed,
                                ..LateRecord::default()
                            });
                        } else {
                            missed_not_recorded += tick.missed;
                        }
                    }
                }
                any_late
            });
            pass += 1;
            if counting {
                step.periods += 1;
                step.late += u64::from(any_late);
                step.missed += tick.missed;
            }
        }
        cpu_ns += thread_cpu_ns().saturating_sub(cpu0);
        wall_ns += monotonic_ns().saturating_sub(wall0);
        let mut step_p50 = Vec::with_capacity(remotes.len());
        for (k, r) in remotes.iter().enumerate() {
            let mut s: Vec<u64> = r.master.rtt_samples().collect();
            rtts.extend_from_slice(&s);
            per_rtts[k].extend_from_slice(&s);
            s.sort_unstable();
            step_p50.push((!s.is_empty()).then(|| percentile(&s, 0.5)));
        }
        for rec in &records {
            let p50 = step_p50.get(usize::from(rec.worker)).copied().flatten();
            report.late_items.push(Classified {
                record: *rec,
                side: late::side(rec, p50, period_ns),
                rtt_p50_ns: p50,
                period_ns,
                recorded: true,
            });
        }
        let unrecorded = Classified {
            record: LateRecord::default(),
            side: late::Side::Unknown,
            rtt_p50_ns: None,
            period_ns,
            recorded: false,
        };
        report.late_not_recorded += not_recorded;
        for _ in 0..not_recorded {
            report.late_items.push(unrecorded);
        }
        if missed_not_recorded > 0 {
            report.late_items.push(Classified {
                record: LateRecord {
                    missed: missed_not_recorded,
                    ..LateRecord::default()
                },
                ..unrecorded
            });
        }
        step.late_fraction =
            (step.late + step.missed) as f64 / (step.periods + step.missed).max(1) as f64;
        step.usable = step.late_fraction <= USABLE_LATE_FRACTION;
        progress(&format!(
            "work {:.1} %: {} periods, {} late, {} missed ({:.3} % late){}",
            fraction * 100.0,
            step.periods,
            step.late,
            step.missed,
            step.late_fraction * 100.0,
            if step.usable { "" } else { " — above 0.1 %" }
        ));
        report.periods += step.periods;
        report.late += step.late;
        report.missed += step.missed;
        if step.usable {
            failures = 0;
            // One fixed fraction measures nothing about the limit.
            if cfg.ramp.is_some() {
                report.usable_fraction =
                    Some(report.usable_fraction.map_or(fraction, |u| u.max(fraction)));
            }
        } else {
            failures += 1;
        }
        report.steps.push(step);
        if let Some(r) = cfg.ramp {
            if failures >= r.stop_after_failures.max(1) {
                break;
            }
        }
    }
    report.missed_at_realtime_ns = missed_at;
    report.rt = Some(setup.conditions.clone());
    drop(setup);
    if let Some(p) = before {
        // Back to the caller's policy: the remaining work is not real-time.
        let _ = firmtime_rt::sched::set_current_thread(&p);
    }
    report.late_fraction =
        (report.late + report.missed) as f64 / (report.periods + report.missed).max(1) as f64;
    rtts.sort_unstable();
    report.rtt_p50_ns = percentile(&rtts, 0.5);
    report.rtt_p99_ns = percentile(&rtts, 0.99);
    report.rtt_max_ns = rtts.last().copied().unwrap_or(0);
    report.explain_late(None);
    report.master_cpu_fraction = cpu_ns as f64 / wall_ns.max(1) as f64;
    report.master_cpu_fraction_per_worker = report.master_cpu_fraction / remotes.len() as f64;
    for (k, r) in remotes.iter().enumerate() {
        let st = r.master.stats();
        let status = r.link.status();
        let events = r.link.events();
        per_rtts[k].sort_unstable();
        report.lost += st.lost;
        report.reordered += st.reordered;
        report.from_standby += st.from_standby;
        report.takeovers += st.takeovers;
        report.mismatched += r.mismatched;
        let sb = r.link.standby();
        report.workers.push(WorkerDetail {
            addr: r.link.worker().to_string(),
            delivered: st.delivered,
            late: r.late,
            lost: st.lost,
            reordered: st.reordered,
            dropped: st.drops.total(),
            losses: status.losses,
            reconnects: status.reconnects,
            reconnected_at_realtime_ns: events
                .iter()
                .filter(|e| e.kind == LinkEventKind::Reconnected)
                .map(|e| e.realtime_ns)
                .collect(),
            lost_at_realtime_ns: events
                .iter()
                .filter(|e| e.kind == LinkEventKind::Lost)
                .map(|e| e.realtime_ns)
                .collect(),
            rtt_p50_ns: percentile(&per_rtts[k], 0.5),
            standby: r.master.standby().map(|a| a.to_string()),
            from_standby: st.from_standby,
            takeovers: st.takeovers,
            takeover_at_realtime_ns: r.takeovers.clone(),
            standby_losses: sb.map_or(0, |l| l.status().losses),
            standby_reconnects: sb.map_or(0, |l| l.status().reconnects),
            standby_lost: st.standby.lost,
            mismatched: r.mismatched,
        });
    }
    Ok(report)
}
