//! firmtime-jack against a real jackd: each test starts its own dummy server
//! under a unique private name and stops it. Skipped, with the reason
//! printed, when `jackd` is not installed.
//!
//! Xruns of the dummy server skip cycles: the frame checks allow a skipped
//! cycle (a gap of whole periods), never a partial one.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use firmtime_jack::{
    activate, deactivate, jack_clock_offset, list_ports, open_client, port_name, read_cycle_times,
    server_running, shm_entries_of, CycleTimes, DummyOptions, DummyServer, ErrorKind,
    FrameExtender, XrunNotifier,
};
use jack::{Client, Control, MidiIn, ProcessScope};

/// One server at a time.
static SERIAL: Mutex<()> = Mutex::new(());

// With `--features assert-rt`, an allocation inside the process callback
// aborts this test binary.
#[cfg(feature = "assert-rt")]
#[global_allocator]
static A: firmtime_rt::assert_rt::AllocDisabler = firmtime_rt::assert_rt::AllocDisabler;

/// Why a test that needs jackd skips without it.
const NO_JACKD: &str = "jackd not installed (Debian: apt-get install jackd2)";

#[derive(Default)]
struct Shared {
    xruns: AtomicU64,
    full: AtomicBool,
}

/// Records each cycle's times into preallocated storage.
struct Recorder {
    ext: FrameExtender,
    offset_ns: i64,
    cycles: Vec<CycleTimes>,
    shared: Arc<Shared>,
}

impl jack::ProcessHandler for Recorder {
    fn process(&mut self, _: &Client, ps: &ProcessScope) -> Control {
        firmtime_rt::assert_rt::no_alloc(|| {
            let c = read_cycle_times(ps, &mut self.ext, self.offset_ns);
            if self.cycles.len() < self.cycles.capacity() {
                self.cycles.push(c);
            } else {
                self.shared.full.store(true, Ordering::Release);
            }
            Control::Continue
        })
    }
}

#[test]
fn no_server_is_reported_with_what_to_do() {
    let name = DummyOptions::unique_name();
    assert!(!server_running(Some(&name)));
    let e = open_client("ft-none", Some(&name)).unwrap_err();
    if e.kind() == ErrorKind::NotInstalled {
        firmtime_rt::testing::skip(format!("{e}"));
        return;
    }
    assert_eq!(e.kind(), ErrorKind::ServerUnavailable, "{e}");
    assert!(e.message().contains("--jack-dummy"), "{e}");
}

#[test]
fn cycle_times_advance_by_whole_periods_on_the_monotonic_clock() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(srv) = DummyServer::start_for_test(48_000, 128) else {
        return firmtime_rt::testing::skip(NO_JACKD);
    };
    assert!(server_running(Some(srv.name())));
    let client = open_client("ft-clock", Some(srv.name())).unwrap();
    let port = client.register_port("in", MidiIn::default()).unwrap();
    let full_name = port_name(&port).unwrap();
    assert_eq!(full_name, "ft-clock:in");
    let (offset_ns, clock) = jack_clock_offset(&client);
    println!("JACK clock: {clock:?}, offset to CLOCK_MONOTONIC {offset_ns} ns");
    let shared = Arc::new(Shared::default());
    let rec = Recorder {
        ext: FrameExtender::default(),
        offset_ns,
        cycles: Vec::with_capacity(64),
        shared: Arc::clone(&shared),
    };
    let t0 = firmtime_rt::clock::monotonic_ns();
    let notifier = XrunNotifier::new(&shared, |s| &s.xruns);
    let active = activate(client, notifier, rec, "JACK client").unwrap();
    let ports = list_ports(Some(srv.name())).unwrap();
    assert!(
        ports.iter().any(|p| p.name == full_name && p.is_input),
        "{ports:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !shared.full.load(Ordering::Acquire) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let (_, _, rec) = deactivate(active, "JACK client").unwrap();
    let t1 = firmtime_rt::clock::monotonic_ns();
    let xruns = shared.xruns.load(Ordering::Relaxed);
    let cycles = &rec.cycles;
    assert_eq!(cycles.len(), 64, "64 cycles within 10 s");
    for w in cycles.windows(2) {
        let (a, b) = (w[0], w[1]);
        assert_eq!(a.n_frames, 128);
        let gap = b.frame - a.frame;
        assert!(
            gap > 0 && gap % 128 == 0,
            "gap of {gap} frames ({xruns} xruns)"
        );
        assert!(b.start_ns > a.start_ns);
        assert!(a.next_ns > a.start_ns);
    }
    // The cycles ran between t0 and t1 on CLOCK_MONOTONIC (a cycle's start
    // may precede activation by one period).
    let period_ns = 128 * 1_000_000_000 / 48_000;
    assert!(
        cycles[0].start_ns + 2 * period_ns >= t0,
        "{:?} vs {t0}",
        cycles[0]
    );
    assert!(cycles[63].start_ns <= t1, "{:?} vs {t1}", cycles[63]);
}

#[test]
fn dummy_server_stops_without_leftovers() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(srv) = DummyServer::start_for_test(48_000, 64) else {
        return firmtime_rt::testing::skip(NO_JACKD);
    };
    let name = srv.name().to_string();
    let pid = srv.pid().unwrap();
    let client = open_client("ft-leak", Some(&name)).unwrap();
    let active = activate(client, (), (), "JACK client").unwrap();
    assert!(!shm_entries_of(&name).is_empty(), "jackd's shm is visible");
    drop(active);
    drop(srv);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "jackd reaped"
    );
    assert_eq!(shm_entries_of(&name), Vec::<std::path::PathBuf>::new());
}

#[test]
fn pipewire_libjack_is_refused_once_jackd2s_is_loaded() {
    // One libjack per process: this binary uses the default (jackd2's).
    let Some(version) = firmtime_jack::libjack_version() else {
        return firmtime_rt::testing::skip("no libjack");
    };
    if firmtime_jack::pipewire_jack_dir().is_none() {
        return firmtime_rt::testing::skip("pipewire-jack not installed");
    }
    let r = firmtime_jack::use_pipewire_libjack();
    if version.contains("PipeWire") {
        // Run under pw-jack: PipeWire's is the one loaded, so it is kept.
        assert!(r.is_ok(), "{r:?}");
    } else {
        let e = r.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        assert!(e.message().contains("pw-jack"), "{e}");
    }
}
