//! firmtime-jack against PipeWire's JACK: a private headless PipeWire per
//! test, this process on PipeWire's libjack (a test binary of its own: a
//! process uses one libjack). Skipped, with the reason printed, when
//! pipewire or pipewire-jack is not installed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use firmtime_jack::{
    activate, deactivate, jack_clock_offset, libjack_version, open_client, read_cycle_times,
    server_running, use_pipewire_libjack, FrameExtender, FrameGaps, JackClock, ServerKind,
    TestServer,
};
use jack::{Client, Control, ProcessScope};

static SERIAL: Mutex<()> = Mutex::new(());

// With `--features assert-rt`, an allocation inside the process callback
// aborts this test binary.
#[cfg(feature = "assert-rt")]
#[global_allocator]
static A: firmtime_rt::assert_rt::AllocDisabler = firmtime_rt::assert_rt::AllocDisabler;

fn server() -> Option<TestServer> {
    let srv = TestServer::start_for_test(ServerKind::PipeWire, 48_000, 256);
    if srv.is_none() {
        firmtime_rt::testing::skip(format!(
            "PipeWire's JACK not installed (Debian: {})",
            ServerKind::PipeWire.install_hint()
        ));
    }
    srv
}

#[derive(Default)]
struct Counts {
    cycles: AtomicU64,
    gaps: AtomicU64,
    /// Frames from the first cycle to the last one's end.
    span: AtomicU64,
    first: AtomicU64,
}

struct Counter {
    ext: FrameExtender,
    gaps: FrameGaps,
    counts: Arc<Counts>,
}

impl jack::ProcessHandler for Counter {
    fn process(&mut self, _: &Client, ps: &ProcessScope) -> Control {
        firmtime_rt::assert_rt::no_alloc(|| {
            let c = read_cycle_times(ps, &mut self.ext, 0);
            if self.gaps.observe_cycle(&c) {
                self.counts.gaps.fetch_add(1, Ordering::Relaxed);
            }
            if self.counts.cycles.fetch_add(1, Ordering::Relaxed) == 0 {
                self.counts.first.store(c.frame, Ordering::Relaxed);
            }
            let first = self.counts.first.load(Ordering::Relaxed);
            self.counts
                .span
                .store(c.end_frame() - first, Ordering::Relaxed);
            Control::Continue
        })
    }
}

#[test]
fn pipewire_serves_jack_clients_on_the_monotonic_clock_and_stops_clean() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut srv) = server() else { return };
    let version = libjack_version().expect("libjack loads");
    assert!(
        version.contains("PipeWire"),
        "PipeWire's libjack: {version}"
    );
    assert!(server_running(Some(srv.name())));
    let client = open_client("ft-pw", Some(srv.name())).unwrap();
    assert_eq!(client.sample_rate(), 48_000);
    assert_eq!(client.buffer_size(), 256);
    let (offset, clock) = jack_clock_offset(&client);
    assert_eq!(
        (offset, clock),
        (0, JackClock::Monotonic),
        "PipeWire's clock"
    );
    let counts = Arc::new(Counts::default());
    let active = activate(
        client,
        (),
        Counter {
            ext: FrameExtender::default(),
            gaps: FrameGaps::default(),
            counts: Arc::clone(&counts),
        },
        "test client",
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while counts.cycles.load(Ordering::Relaxed) < 100 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    deactivate(active, "test client").unwrap();
    let (cycles, gaps) = (
        counts.cycles.load(Ordering::Relaxed),
        counts.gaps.load(Ordering::Relaxed),
    );
    assert!(cycles >= 100, "{cycles} cycles in 10 s");
    if gaps == 0 {
        // No dropped cycle: the frames seen are exactly cycles × period.
        assert_eq!(counts.span.load(Ordering::Relaxed), cycles * 256);
    }
    println!("PipeWire ({version}): {cycles} cycles, {gaps} frame gaps");
    // Selecting again is harmless.
    use_pipewire_libjack().unwrap();
    let pid = srv.pid().unwrap();
    let name = srv.name().to_string();
    srv = match srv {
        TestServer::PipeWire(mut p) => {
            p.stop();
            TestServer::PipeWire(p)
        }
        other => other,
    };
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "daemon reaped"
    );
    let dir = std::path::Path::new(&name).parent().unwrap().to_path_buf();
    assert!(!dir.exists(), "{} removed", dir.display());
    assert!(!server_running(Some(&name)));
    drop(srv);
}

#[test]
fn no_pipewire_server_is_reported_not_hung() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if use_pipewire_libjack().is_err() {
        return firmtime_rt::testing::skip("PipeWire's JACK not installed");
    }
    let t = Instant::now();
    let e = open_client("ft-none", Some("/nonexistent/firmtime-pw")).unwrap_err();
    assert_eq!(e.kind(), firmtime_jack::ErrorKind::ServerUnavailable, "{e}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}
