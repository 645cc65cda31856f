//! The full text of every config's validation errors, pinned byte for byte:
//! the CLI prints them as they are, and its tests look for the flag and
//! "valid" in them.

use firmtime_lab::load::{LoadSet, LoadSpec};
use firmtime_lab::measure::Priority;
use firmtime_lab::tails::CellSpec;
use firmtime_lab::{clockread, cyclic, frames, interrupts, overhead, quanta, suspend, tails};
use firmtime_lab::{ErrorKind, Result};
use firmtime_rt::sched;
use firmtime_rt::sleep::Mechanism;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// A CPU number no machine here has.
const OFFLINE: usize = 9999;

fn online() -> String {
    sched::format_cpu_list(&sched::online_cpus())
}

#[track_caller]
fn expect(r: Result<()>, want: &str) {
    let e = r.expect_err(want);
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert_eq!(e.message(), want);
}

#[test]
fn cyclic_messages() {
    let d = cyclic::Config::default;
    expect(
        cyclic::Config {
            interval_ns: 1,
            ..d()
        }
        .validate(),
        "--period 1ns is out of range: valid is 10us to 1s",
    );
    expect(
        cyclic::Config {
            duration_ns: 1,
            ..d()
        }
        .validate(),
        "--duration 1ns is out of range: valid is 10ms to 86400s and at least one --period (1ms)",
    );
    expect(
        cyclic::Config {
            interval_ns: 1_000_000_000,
            duration_ns: 500_000_000,
            ..d()
        }
        .validate(),
        "--duration 500ms is out of range: valid is 10ms to 86400s \
         and at least one --period (1s)",
    );
    expect(
        cyclic::Config {
            histogram_buckets: 0,
            ..d()
        }
        .validate(),
        "--histogram-buckets 0 is out of range: valid is 1 to 100000 (1 µs each)",
    );
    expect(
        cyclic::Config {
            sleeper: Mechanism::Hybrid { margin_ns: 0 },
            ..d()
        }
        .validate(),
        "--margin 0ns is out of range: valid is 1ns to less than --period (1ms)",
    );
    expect(
        cyclic::Config {
            cpus: Some(vec![]),
            ..d()
        }
        .validate(),
        &format!("--cpu is empty: valid are online CPUs {}", online()),
    );
    expect(
        cyclic::Config {
            cpus: Some(vec![0, OFFLINE]),
            ..d()
        }
        .validate(),
        &format!("--cpu: CPU 9999 is not online: valid are {}", online()),
    );
    expect(
        cyclic::Config {
            runaway_limit_ns: 5,
            ..d()
        }
        .validate(),
        "runaway limit 5ns is too short: valid is at least 1ms",
    );
}

#[test]
fn frames_messages() {
    let d = frames::Config::default;
    expect(
        frames::Config { fps: 0.5, ..d() }.validate(),
        "--fps 0.5 is out of range: valid is 1 to 1000",
    );
    expect(
        frames::Config {
            fps: f64::NAN,
            ..d()
        }
        .validate(),
        "--fps NaN is out of range: valid is 1 to 1000",
    );
    expect(
        frames::Config {
            fps: f64::INFINITY,
            ..d()
        }
        .validate(),
        "--fps inf is out of range: valid is 1 to 1000",
    );
    expect(
        frames::Config {
            duration_ns: 1,
            ..d()
        }
        .validate(),
        "--duration 1ns is out of range: valid is 100ms to 3600s",
    );
    expect(
        frames::Config {
            alarm_ns: 2_000_000_000,
            ..d()
        }
        .validate(),
        "--alarm 2s is out of range: valid is 1us to 1s",
    );
}

#[test]
fn interrupts_messages() {
    let d = interrupts::Config::default;
    expect(
        interrupts::Config {
            rates_hz: vec![],
            ..d()
        }
        .validate(),
        "--rates is empty: give at least one rate, 1 to 100000 Hz",
    );
    expect(
        interrupts::Config {
            rates_hz: vec![100, 0, 200_000],
            ..d()
        }
        .validate(),
        "--rates 0 is out of range: valid is 1 to 100000 Hz",
    );
    expect(
        interrupts::Config {
            levels: vec![],
            ..d()
        }
        .validate(),
        "--levels is empty: give at least one level, 1 to 64",
    );
    expect(
        interrupts::Config {
            levels: vec![1, 65],
            ..d()
        }
        .validate(),
        "--levels 65 is out of range: valid is 1 to 64",
    );
    expect(
        interrupts::Config { cell_ns: 1, ..d() }.validate(),
        "--duration 1ns is out of range: valid is 100ms to 60s",
    );
    expect(
        interrupts::Config { repeats: 0, ..d() }.validate(),
        "--repeats 0 is out of range: valid is 1 to 100",
    );
    expect(
        interrupts::Config {
            timer_priority: 0,
            ..d()
        }
        .validate(),
        "--priority 0 is out of range: valid is 1 to 99",
    );
    expect(
        interrupts::Config {
            array_bytes: Some(1),
            ..d()
        }
        .validate(),
        "--array-size 1 is out of range: valid is 4096 to 268435456 bytes",
    );
    expect(
        interrupts::Config {
            cpu: Some(OFFLINE),
            ..d()
        }
        .validate(),
        &format!("--cpu 9999 is not online: valid are {}", online()),
    );
}

#[test]
fn suspend_messages() {
    let d = suspend::Config::default;
    expect(
        suspend::Config {
            intervals_ns: vec![],
            ..d()
        }
        .validate(),
        "--interval is empty: give at least one interval from 1us to 1s",
    );
    expect(
        suspend::Config {
            intervals_ns: vec![1_000, 1],
            ..d()
        }
        .validate(),
        "--interval 1ns is out of range: valid is 1us to 1s",
    );
    expect(
        suspend::Config {
            mechanisms: vec![],
            ..d()
        }
        .validate(),
        "--sleeper is empty: give at least one (e.g. clock_nanosleep)",
    );
    expect(
        suspend::Config { samples: 0, ..d() }.validate(),
        "--samples 0 is out of range: valid is 1 to 1000000",
    );
    expect(
        suspend::Config {
            fifo_priority: 100,
            ..d()
        }
        .validate(),
        "--priority 100 is out of range: valid is 1 to 99",
    );
}

#[test]
fn clockread_messages() {
    let d = || clockread::Config {
        load_exe: Some("/bin/true".into()),
        ..clockread::Config::full()
    };
    expect(
        clockread::Config { calls: 1, ..d() }.validate(),
        "--samples 1 is out of range: valid is 2 to 100000000",
    );
    expect(
        clockread::Config { hogs: 257, ..d() }.validate(),
        "--hogs 257 is out of range: valid is 0 to 256 (0 = idle cells only)",
    );
    expect(
        clockread::Config {
            fifo_priority: 0,
            ..d()
        }
        .validate(),
        "--priority 0 is out of range: valid is 1 to 99",
    );
    expect(
        clockread::Config {
            load_exe: None,
            ..d()
        }
        .validate(),
        "load cells need the firmtime executable to run `firmtime load cpu:N`; \
         set load_exe or use --hogs 0",
    );
}

#[test]
fn overhead_messages() {
    let d = overhead::Config::full;
    expect(
        overhead::Config {
            repetitions: 0,
            ..d()
        }
        .validate(),
        "--repeats 0 is out of range: valid is 1 to 1000",
    );
    expect(
        overhead::Config {
            round_trips: 0,
            ..d()
        }
        .validate(),
        "--round-trips 0 is out of range: valid is 1 to 100000000",
    );
    expect(
        overhead::Config {
            traps: 200_000_000,
            ..d()
        }
        .validate(),
        "--traps 200000000 is out of range: valid is 1 to 100000000",
    );
    expect(
        overhead::Config {
            clock_reads: 0,
            ..d()
        }
        .validate(),
        "--clock-reads 0 is out of range: valid is 1 to 100000000",
    );
    expect(
        overhead::Config {
            clock_reads: 1,
            ..d()
        }
        .validate(),
        "--clock-reads 1 is out of range: valid is 2 to 100000000",
    );
    expect(
        overhead::Config {
            memcpy_bytes: 1,
            ..d()
        }
        .validate(),
        "--memcpy-size 1 is out of range: valid is 4096 to 4294967296",
    );
    expect(
        overhead::Config {
            priority: Priority::Fifo(0),
            ..d()
        }
        .validate(),
        "--priority fifo:0 is out of range: valid is fifo:1 to fifo:99",
    );
}

#[test]
fn trace_messages() {
    let d = quanta::Config::default;
    expect(
        quanta::Config {
            duration_ns: 1,
            ..d()
        }
        .validate(),
        "--duration 1ns is out of range: valid is 100ms to 3600s",
    );
    expect(
        quanta::Config {
            buffer_kb: 1,
            ..d()
        }
        .validate(),
        "--buffer-kb 1 is out of range: valid is 64 to 1048576 (KiB per CPU)",
    );
    expect(
        quanta::Config {
            max_events: 1,
            ..d()
        }
        .validate(),
        "--max-events 1 is out of range: valid is 1000 to 50000000",
    );
    expect(
        quanta::Config {
            drain_interval_ns: 1,
            ..d()
        }
        .validate(),
        "drain interval 1ns is out of range: valid is 1ms to 10s",
    );
    expect(
        quanta::Config {
            workloads: vec![],
            ..d()
        }
        .validate(),
        "nothing to trace: give --workload typist|player|sorter|xserver|all, \
         --pids LIST or -- CMD…",
    );
    expect(
        quanta::Config {
            pids: vec![-1],
            ..d()
        }
        .validate(),
        "--pids: process -1 does not exist: valid are running process ids",
    );
    expect(
        quanta::Config {
            command: vec![String::new()],
            ..d()
        }
        .validate(),
        "-- CMD: the command is empty",
    );
}

#[test]
fn trace_overhead_messages() {
    use quanta::overhead::Config;
    let d = Config::default;
    expect(
        Config { pairs: 0, ..d() }.validate(),
        "--repeats 0 is out of range: valid is 1 to 10000",
    );
    expect(
        Config {
            slice_ns: 10_500_000,
            ..d()
        }
        .validate(),
        "--slice 10ms is out of range: valid is 50ms to 1min",
    );
    expect(
        Config {
            buffer_kb: 1,
            ..d()
        }
        .validate(),
        "--buffer-kb 1 is out of range: valid is 64 to 1048576",
    );
    expect(
        Config {
            rates_hz: vec![],
            ..d()
        }
        .validate(),
        "--rates : valid are 0 (no extra timer) to 100000 Hz, comma-separated",
    );
    expect(
        Config {
            rates_hz: vec![0, 200_000],
            ..d()
        }
        .validate(),
        "--rates 0,200000: valid are 0 (no extra timer) to 100000 Hz, comma-separated",
    );
    expect(
        Config {
            cpu: Some(OFFLINE),
            ..d()
        }
        .validate(),
        &format!("--cpu 9999 is not online: valid are {}", online()),
    );
}

#[test]
fn tails_messages() {
    let d = tails::Config::quick;
    expect(
        tails::Config { alarms: 0, ..d() }.validate(),
        "--alarms 0 is out of range: valid is 1 to 100000",
    );
    expect(
        tails::Config {
            max_delay_ns: 1_500_000,
            ..d()
        }
        .validate(),
        "--max-delay 1.5ms is out of range: valid is 2ms to 10s \
         (delays are uniform from 1ms to it)",
    );
    expect(
        tails::Config { priority: 0, ..d() }.validate(),
        "--priority 0 is out of range: valid is 1 to 99",
    );
    expect(
        tails::Config {
            cells: vec![],
            ..d()
        }
        .validate(),
        "no cells to measure: give at least one value to --procs and one type to --types",
    );
    expect(
        tails::Config {
            cells: vec![CellSpec::blk(65)],
            ..d()
        }
        .validate(),
        "--procs 65 is out of range: valid is 1 to 64",
    );
    expect(
        tails::Config {
            cells: vec![CellSpec::percent(4, 1, 65)],
            ..d()
        }
        .validate(),
        "--extra-cpu 65 is out of range: valid is 0 to 64",
    );
    expect(
        tails::Config {
            cells: vec![CellSpec::percent(101, 1, 0)],
            ..d()
        }
        .validate(),
        "--percents 101 is out of range: valid is 1 to 99",
    );
    expect(
        tails::Config {
            cpu: Some(OFFLINE),
            ..d()
        }
        .validate(),
        &format!(
            "--cpu 9999 is not an online CPU: online CPUs are {}",
            online()
        ),
    );
    expect(
        tails::Config::matrix(&[1], &[0], &[], false, false, true).map(drop),
        "--percents 0 is out of range: valid is 1 to 99",
    );
}

#[test]
fn load_messages() {
    let stop = AtomicBool::new(false);
    expect(
        firmtime_lab::load::run_generator(&LoadSpec::Cpu { hogs: 1 }, Duration::ZERO, &stop)
            .map(drop),
        "load duration 0ns is out of range: valid is 1ms to 24h",
    );
    expect(
        LoadSet::spawn(Path::new("/bin/true"), &[], Duration::from_secs(100_000)).map(drop),
        "load duration 100000s is out of range: valid is 1ms to 24h",
    );
    expect(
        LoadSpec::Cpu { hogs: 0 }.validate(),
        "cpu hogs 0 is out of range: valid is 1 to 256",
    );
    expect(
        LoadSpec::Memory { bytes: 1 }.validate(),
        "memory size 1B is out of range: valid is 4KiB to 1024GiB",
    );
    expect(
        LoadSpec::Duty {
            percent: 50,
            period: Duration::ZERO,
            workers: 1,
        }
        .validate(),
        "duty period 0ns is out of range: valid is 100us to 10s",
    );
    expect(
        LoadSpec::Disk {
            file_size: 64 << 10,
            chunk: 1 << 20,
        }
        .validate(),
        "disk chunk 1MiB is larger than the file size 64KiB: use a chunk of at most the file size",
    );
}
