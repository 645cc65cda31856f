//! `waste_time`: the LADSPA benchmark load of Lago (2004) §7.
//!
//! Each run() copies its input to its output, then busy-waits until a
//! target fraction of the period has passed since run() was entered (the
//! period is `n / sample_rate` seconds for a run of `n` frames). The
//! fraction starts at the *Start fraction* control and rises by *Step*
//! every *Step interval* seconds of processed audio, as Lago's plugin rose
//! by 100 µs every 10 s, capped at 1. A host whose deadline is missed shows
//! how much of the period a plugin can really use.
//!
//! The plugin keeps one log row per second of audio (and one per fraction
//! step) in memory allocated at instantiate: run durations, the fraction,
//! and this process's user/system CPU from `getrusage`. It writes the rows
//! as CSV at cleanup, off the RT path, to `$FIRMTIME_WASTE_LOG` (instances
//! after the first get `-N` before the extension) or else to
//! `/tmp/waste_time-<pid>-<N>.csv`. The format is in docs/LADSPA.md.
//!
//! Unique ID 4_700_001 ([`UNIQUE_ID`]), label `waste_time`.
//!
//! # Real-time contract
//! run() never allocates, locks, prints or blocks: it spins on
//! `clock_gettime(CLOCK_MONOTONIC)` and calls `getrusage` once per log
//! row. When the preallocated rows are full (10 hours at one per second)
//! the last row keeps accumulating, so nothing is lost, only coarser.
//!
//! The C entry points come from [`firmtime_ladspa::export_plugin!`]: every
//! one checks its pointers and runs inside `catch_unwind`, so a panic never
//! crosses into the C host. [`firmtime_ladspa::export_lv2!`] makes it the
//! LV2 plugin `urn:firmtime:waste_time` too (docs/LV2.md).

#![deny(missing_docs)]

use firmtime_ladspa::export::{entry_points, ExportedPlugin};
use firmtime_ladspa::ffi::*;
use firmtime_rt::clock::monotonic_ns;
use std::io::Write;
use std::os::raw::{c_char, c_int, c_ulong};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

/// The plugin's LADSPA unique ID. Chosen far above every ID used by the
/// plugins Debian 12 packages (ladspa-sdk, cmt, swh, tap, caps, blop…,
/// all below 10 000) and below the 0x1000000 hosts may assume.
pub const UNIQUE_ID: c_ulong = 4_700_001;
/// The plugin's label.
pub const LABEL: &str = "waste_time";

/// Port index of the audio input.
pub const PORT_INPUT: usize = 0;
/// Port index of the audio output.
pub const PORT_OUTPUT: usize = 1;
/// Port index of the fraction of the period wasted at the start (0..1).
pub const PORT_START: usize = 2;
/// Port index of the amount added to the fraction at each step (0..1).
pub const PORT_STEP: usize = 3;
/// Port index of the seconds of audio between steps (0 = never step).
pub const PORT_INTERVAL: usize = 4;
/// Port index of the output control reporting the current fraction.
pub const PORT_FRACTION: usize = 5;
const PORTS: usize = 6;

/// Log rows kept: ten hours at one row per second.
const LOG_ROWS: usize = 36_000;

#[repr(transparent)]
struct Shared<T>(T);
// SAFETY: the wrapped statics hold pointers to immutable 'static data only.
unsafe impl<T> Sync for Shared<T> {}

static PORT_DESCRIPTORS: [c_int; PORTS] = [
    PORT_INPUT_FLAG | PORT_AUDIO,
    PORT_OUTPUT_FLAG | PORT_AUDIO,
    PORT_INPUT_FLAG | PORT_CONTROL,
    PORT_INPUT_FLAG | PORT_CONTROL,
    PORT_INPUT_FLAG | PORT_CONTROL,
    PORT_OUTPUT_FLAG | PORT_CONTROL,
];
const PORT_INPUT_FLAG: c_int = firmtime_ladspa::ffi::PORT_INPUT;
const PORT_OUTPUT_FLAG: c_int = firmtime_ladspa::ffi::PORT_OUTPUT;

static PORT_NAMES: Shared<[*const c_char; PORTS]> = Shared([
    c"Input".as_ptr(),
    c"Output".as_ptr(),
    c"Start fraction".as_ptr(),
    c"Step".as_ptr(),
    c"Step interval (s)".as_ptr(),
    c"Fraction".as_ptr(),
]);

const fn hint(d: c_int, lo: f32, hi: f32) -> LADSPA_PortRangeHint {
    LADSPA_PortRangeHint {
        HintDescriptor: d,
        LowerBound: lo,
        UpperBound: hi,
    }
}
const BOUNDED: c_int = HINT_BOUNDED_BELOW | HINT_BOUNDED_ABOVE;

static PORT_HINTS: [LADSPA_PortRangeHint; PORTS] = [
    hint(0, 0.0, 0.0),
    hint(0, 0.0, 0.0),
    // Default low = 0.75·0 + 0.25·1 = 0.25 of the period.
    hint(BOUNDED | HINT_DEFAULT_LOW, 0.0, 1.0),
    // Default 0: a constant load unless asked to step.
    hint(BOUNDED | HINT_DEFAULT_0, 0.0, 1.0),
    // Default low = 0.25·40 = 10 s, Lago's interval.
    hint(BOUNDED | HINT_DEFAULT_LOW, 0.0, 40.0),
    hint(BOUNDED, 0.0, 1.0),
];

static DESCRIPTOR: Shared<LADSPA_Descriptor> = Shared(LADSPA_Descriptor {
    UniqueID: UNIQUE_ID,
    Label: c"waste_time".as_ptr(),
    Properties: PROPERTY_HARD_RT_CAPABLE,
    Name: c"firmtime waste_time (busy-waits a fraction of the period)".as_ptr(),
    Maker: c"firmtime developers".as_ptr(),
    Copyright: c"MIT OR Apache-2.0".as_ptr(),
    PortCount: PORTS as c_ulong,
    PortDescriptors: PORT_DESCRIPTORS.as_ptr(),
    PortNames: &PORT_NAMES.0 as *const [*const c_char; PORTS] as *const *const c_char,
    PortRangeHints: PORT_HINTS.as_ptr(),
    ImplementationData: std::ptr::null_mut(),
    ..entry_points::<WasteTime>()
});

/// The fraction of the period to waste after `frames` frames of audio at
/// `sample_rate`: `start + step · floor(frames / interval_frames)`, where
/// `interval_frames` is the interval rounded to whole frames (counting
/// frames keeps the steps exact; no steps when it is 0), clamped to 0..=1.
/// Pure, for tests and for readers of the log.
pub fn fraction_at(start: f32, step: f32, interval: f32, frames: u64, sample_rate: f64) -> f32 {
    let interval_frames = (f64::from(interval) * sample_rate).round();
    let steps = if interval_frames >= 1.0 {
        (frames as f64 / interval_frames).floor() as f32
    } else {
        0.0
    };
    let f = start + step * steps;
    if f.is_nan() {
        0.0
    } else {
        f.clamp(0.0, 1.0)
    }
}

/// Process user and system CPU time in ns.
fn cpu_ns() -> (u64, u64) {
    // SAFETY: an all-zero rusage is a valid value to overwrite.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: ru is a valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    (ns(ru.ru_utime), ns(ru.ru_stime))
}

/// One log row: a window of runs at one fraction.
#[derive(Debug, Clone, Copy, Default)]
struct Row {
    audio_end_s: f64,
    wall_end_ns: u64,
    wall_start_ns: u64,
    fraction: f32,
    runs: u64,
    frames: u64,
    run_min_ns: u64,
    run_sum_ns: u64,
    run_max_ns: u64,
    target_sum_ns: u64,
    /// Runs that took longer than their period.
    overruns: u64,
    user_ns: u64,
    system_ns: u64,
    user_delta_ns: u64,
    system_delta_ns: u64,
}

struct WasteTime {
    sample_rate: f64,
    ports: [*mut f32; PORTS],
    frames_done: u64,
    activated_ns: u64,
    rows: Vec<Row>,
    current: Row,
    window_audio_start: f64,
    cpu_at_window_start: (u64, u64),
    log_path: PathBuf,
    written: bool,
}

static INSTANCES: AtomicU32 = AtomicU32::new(0);

fn log_path(n: u32) -> PathBuf {
    match std::env::var_os("FIRMTIME_WASTE_LOG") {
        Some(p) if !p.is_empty() => {
            let p = PathBuf::from(p);
            if n == 0 {
                return p;
            }
            let stem = p
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let name = match p.extension() {
                Some(e) => format!("{stem}-{n}.{}", e.to_string_lossy()),
                None => format!("{stem}-{n}"),
            };
            p.with_file_name(name)
        }
        _ => std::env::temp_dir().join(format!("waste_time-{}-{n}.csv", std::process::id())),
    }
}

impl WasteTime {
    fn new(sample_rate: f64) -> Self {
        let n = INSTANCES.fetch_add(1, Ordering::Relaxed);
        Self {
            sample_rate,
            ports: [std::ptr::null_mut(); PORTS],
            frames_done: 0,
            activated_ns: monotonic_ns(),
            rows: Vec::with_capacity(LOG_ROWS),
            current: Row::default(),
            window_audio_start: 0.0,
            cpu_at_window_start: cpu_ns(),
            log_path: log_path(n),
            written: false,
        }
    }

    fn control(&self, port: usize, default: f32) -> f32 {
        let p = self.ports[port];
        if p.is_null() {
            default
        } else {
            // SAFETY: the host connected this control port to one valid f32.
            unsafe { p.read() }
        }
    }

    fn activate(&mut self) {
        self.frames_done = 0;
        self.activated_ns = monotonic_ns();
        self.window_audio_start = 0.0;
        self.cpu_at_window_start = cpu_ns();
        self.current = Row {
            wall_start_ns: self.activated_ns,
            ..Row::default()
        };
    }

    /// Closes the current window into a row. RT-safe: pushes within capacity;
    /// when full, the last row absorbs the window instead.
    fn close_window(&mut self, now: u64) {
        if self.current.runs == 0 {
            return;
        }
        let (u, s) = cpu_ns();
        let mut row = self.current;
        row.audio_end_s = self.frames_done as f64 / self.sample_rate;
        row.wall_end_ns = now;
        row.user_ns = u;
        row.system_ns = s;
        row.user_delta_ns = u.saturating_sub(self.cpu_at_window_start.0);
        row.system_delta_ns = s.saturating_sub(self.cpu_at_window_start.1);
        if self.rows.len() < self.rows.capacity() {
            self.rows.push(row);
        } else if let Some(last) = self.rows.last_mut() {
            last.audio_end_s = row.audio_end_s;
            last.wall_end_ns = row.wall_end_ns;
            last.runs += row.runs;
            last.frames += row.frames;
            last.run_min_ns = last.run_min_ns.min(row.run_min_ns);
            last.run_max_ns = last.run_max_ns.max(row.run_max_ns);
            last.run_sum_ns += row.run_sum_ns;
            last.target_sum_ns += row.target_sum_ns;
            last.overruns += row.overruns;
            last.user_ns = u;
            last.system_ns = s;
            last.user_delta_ns += row.user_delta_ns;
            last.system_delta_ns += row.system_delta_ns;
            last.fraction = row.fraction;
        }
        self.cpu_at_window_start = (u, s);
        self.window_audio_start = row.audio_end_s;
        self.current = Row {
            wall_start_ns: now,
            ..Row::default()
        };
    }

    /// RT-safe: copies, spins, records.
    fn run(&mut self, n: usize) {
        let t0 = monotonic_ns();
        let (inp, out) = (self.ports[PORT_INPUT], self.ports[PORT_OUTPUT]);
        if !inp.is_null() && !out.is_null() && n > 0 {
            // SAFETY: the host connected both audio ports to at least n
            // samples; ptr::copy allows them to be the same buffer.
            unsafe { std::ptr::copy(inp, out, n) };
        }
        let fraction = fraction_at(
            self.control(PORT_START, 0.25),
            self.control(PORT_STEP, 0.0),
            self.control(PORT_INTERVAL, 10.0),
            self.frames_done,
            self.sample_rate,
        );
        let out_fraction = self.ports[PORT_FRACTION];
        if !out_fraction.is_null() {
            // SAFETY: the host connected the output control to one f32.
            unsafe { out_fraction.write(fraction) };
        }
        if self.current.runs > 0 && fraction != self.current.fraction {
            self.close_window(t0);
        }
        let period_ns = (n as f64 / self.sample_rate * 1e9) as u64;
        let target_ns = (f64::from(fraction) * period_ns as f64) as u64;
        let mut t1 = monotonic_ns();
        while t1.saturating_sub(t0) < target_ns {
            std::hint::spin_loop();
            t1 = monotonic_ns();
        }
        let took = t1 - t0;
        let c = &mut self.current;
        if c.runs == 0 {
            c.run_min_ns = took;
            c.fraction = fraction;
        }
        c.runs += 1;
        c.frames += n as u64;
        c.run_min_ns = c.run_min_ns.min(took);
        c.run_max_ns = c.run_max_ns.max(took);
        c.run_sum_ns += took;
        c.target_sum_ns += target_ns;
        c.overruns += u64::from(took > period_ns);
        self.frames_done += n as u64;
        if self.frames_done as f64 / self.sample_rate - self.window_audio_start >= 1.0 {
            self.close_window(t1);
        }
    }

    fn csv(&self) -> String {
        let mut s = String::from(
            "audio_time_s,wall_time_s,fraction,runs,frames,run_min_us,run_mean_us,run_max_us,\
             target_mean_us,overruns,user_s,system_s,user_pct,system_pct,sample_rate\n",
        );
        for r in &self.rows {
            let wall = r.wall_end_ns.saturating_sub(r.wall_start_ns).max(1) as f64;
            let mean = |sum: u64| sum as f64 / r.runs.max(1) as f64 / 1e3;
            s.push_str(&format!(
                "{:.6},{:.6},{},{},{},{:.3},{:.3},{:.3},{:.3},{},{:.6},{:.6},{:.2},{:.2},{}\n",
                r.audio_end_s,
                r.wall_end_ns.saturating_sub(self.activated_ns) as f64 / 1e9,
                r.fraction,
                r.runs,
                r.frames,
                r.run_min_ns as f64 / 1e3,
                mean(r.run_sum_ns),
                r.run_max_ns as f64 / 1e3,
                mean(r.target_sum_ns),
                r.overruns,
                r.user_ns as f64 / 1e9,
                r.system_ns as f64 / 1e9,
                r.user_delta_ns as f64 / wall * 100.0,
                r.system_delta_ns as f64 / wall * 100.0,
                self.sample_rate,
            ));
        }
        s
    }

    /// Writes the log atomically (temp file, fsync, rename). Not RT.
    fn write_log(&mut self) -> std::io::Result<()> {
        self.close_window(monotonic_ns());
        if self.written {
            return Ok(());
        }
        self.written = true;
        firmtime_rt::fs::write_atomic(&self.log_path, self.csv().as_bytes())
    }
}

impl ExportedPlugin for WasteTime {
    fn descriptor(index: usize) -> Option<&'static LADSPA_Descriptor> {
        (index == 0).then_some(&DESCRIPTOR.0)
    }

    fn instantiate(_: &LADSPA_Descriptor, sample_rate: c_ulong) -> Option<Self> {
        Some(WasteTime::new(sample_rate as f64))
    }

    fn connect_port(&mut self, port: usize, data: *mut LADSPA_Data) {
        if let Some(slot) = self.ports.get_mut(port) {
            *slot = data;
        }
    }

    fn activate(&mut self) {
        WasteTime::activate(self);
    }

    fn run(&mut self, frames: usize) {
        WasteTime::run(self, frames);
    }

    fn deactivate(&mut self) {
        self.close_window(monotonic_ns());
    }

    fn cleanup(mut self) {
        if let Err(e) = self.write_log() {
            // The step's own error: the message names the log file itself.
            let cause =
                std::error::Error::source(&e).map_or_else(|| e.to_string(), |s| s.to_string());
            // The only channel a plugin has to its user; off the RT path.
            let _ = writeln!(
                std::io::stderr(),
                "waste_time: cannot write log {}: {cause}; set FIRMTIME_WASTE_LOG to a writable path",
                self.log_path.display()
            );
        }
    }
}

firmtime_ladspa::export_plugin!(WasteTime);
firmtime_ladspa::export_lv2!(WasteTime, "urn:firmtime:");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fraction_steps_every_interval_and_caps_at_one() {
        let sr = 48_000.0;
        assert_eq!(fraction_at(0.1, 0.1, 10.0, 0, sr), 0.1);
        assert_eq!(fraction_at(0.1, 0.1, 10.0, 479_999, sr), 0.1);
        assert_eq!(fraction_at(0.1, 0.25, 10.0, 480_000, sr), 0.35);
        // 0.05 s is not exact in f32; counting frames still steps at 2400.
        assert_eq!(fraction_at(0.3, 0.2, 0.05, 2_400, sr), 0.5);
        assert_eq!(fraction_at(0.5, 0.25, 1.0, 120_000, sr), 1.0);
        assert_eq!(fraction_at(0.5, 0.25, 1.0, 4_800_000, sr), 1.0);
        assert_eq!(
            fraction_at(0.3, 0.1, 0.0, 4_800_000, sr),
            0.3,
            "interval 0 never steps"
        );
        assert_eq!(fraction_at(-1.0, 0.0, 1.0, 0, sr), 0.0);
        assert_eq!(fraction_at(f32::NAN, 0.0, 1.0, 0, sr), 0.0);
    }

    #[test]
    fn log_path_numbers_later_instances() {
        let p = log_path(3);
        assert!(p.to_string_lossy().ends_with("-3.csv"), "{}", p.display());
    }

    #[test]
    fn descriptor_index_one_is_null() {
        // SAFETY: any index is allowed.
        assert!(unsafe { ladspa_descriptor(1) }.is_null());
        // SAFETY: as above.
        let d = unsafe { &*ladspa_descriptor(0) };
        assert_eq!(d.UniqueID, UNIQUE_ID);
        assert_eq!(d.PortCount as usize, PORTS);
    }

    #[test]
    fn null_handles_are_ignored() {
        let d = &DESCRIPTOR.0;
        // SAFETY: NULL handles are what these must tolerate.
        unsafe {
            d.connect_port.unwrap()(std::ptr::null_mut(), 0, std::ptr::null_mut());
            d.activate.unwrap()(std::ptr::null_mut());
            d.run.unwrap()(std::ptr::null_mut(), 64);
            d.deactivate.unwrap()(std::ptr::null_mut());
            d.cleanup.unwrap()(std::ptr::null_mut());
            assert!(d.instantiate.unwrap()(std::ptr::null(), 48_000).is_null());
            assert!(d.instantiate.unwrap()(d, 0).is_null());
        }
    }
}
