//! A one-stage chain (gain ½) in a private JACK server of either kind, fed
//! and read back by a signal client: what `rack.rs` runs on jackd2's dummy
//! driver and `pipewire.rs` on PipeWire's JACK.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use firmtime_jack::{FrameGaps, ServerKind, TestServer};
use firmtime_ladspa::Scan;
use firmtime_rack::{HostOptions, RackFile, RackHost};
use firmtime_rt::testing::Attempt;

struct Signal {
    out: jack::Port<jack::AudioOut>,
    inp: jack::Port<jack::AudioIn>,
    next: f32,
    got: rtrb::Producer<f32>,
    gaps: FrameGaps,
    frame_gaps: Arc<AtomicU64>,
}

impl jack::ProcessHandler for Signal {
    fn process(&mut self, _: &jack::Client, ps: &jack::ProcessScope) -> jack::Control {
        if self.gaps.observe(ps.last_frame_time(), ps.n_frames()) {
            self.frame_gaps.fetch_add(1, Ordering::Relaxed);
        }
        for y in self.out.as_mut_slice(ps) {
            *y = self.next;
            self.next = if self.next >= 4095.0 {
                1.0
            } else {
                self.next + 1.0
            };
        }
        for &x in self.inp.as_slice(ps) {
            let _ = self.got.push(x);
        }
        jack::Control::Continue
    }
}

/// Runs the `rack` file text through a rack on a private server of `kind`
/// (48 kHz, 128 frames) and checks that every sample that came back is half
/// of a sent one, in order, none lost. A run in which the server dropped a
/// cycle (xruns and frame gaps are counted, never a failure of the rack)
/// cannot check that: it is waived (`WAIVED` in the skip list) and run again,
/// up to 3 times; waived every time, the test fails. Skips, saying why, when
/// `kind` is not installed.
pub fn halves_a_signal(scan: &Scan, rack: &str, kind: ServerKind) {
    static ONE_SERVER: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _g = ONE_SERVER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(first) = TestServer::start_for_test(kind, 48_000, 128) else {
        firmtime_rt::testing::skip(format!(
            "{} not installed ({})",
            kind.label(),
            kind.install_hint()
        ));
        return;
    };
    let mut first = Some(first);
    firmtime_rt::testing::until_checked(3, |_| {
        let server = first
            .take()
            .or_else(|| TestServer::start_for_test(kind, 48_000, 128))
            .expect("the server started for the first attempt");
        once(scan, rack, kind, server)
    });
}

/// One run of [`halves_a_signal`] on `server` (stopped at the end).
fn once(scan: &Scan, rack: &str, kind: ServerKind, server: TestServer) -> Attempt<()> {
    let file = RackFile::parse(rack, "amp.toml").unwrap();
    let host = RackHost::start(
        &file,
        scan,
        &HostOptions {
            server_name: Some(server.name().into()),
            client_name: Some("rack".into()),
            ..HostOptions::default()
        },
    )
    .unwrap();
    assert_eq!(host.block_size(), 128);
    assert_eq!(host.input_ports(), &["rack:in_1".to_string()]);

    // The signal client opens on the same private server.
    let client = firmtime_jack::open_client("signal", Some(server.name())).unwrap();
    let out = client
        .register_port("out", jack::AudioOut::default())
        .unwrap();
    let inp = client
        .register_port("in", jack::AudioIn::default())
        .unwrap();
    let (prod, mut cons) = rtrb::RingBuffer::new(1 << 16);
    let signal_gaps = Arc::new(AtomicU64::new(0));
    let active = client
        .activate_async(
            (),
            Signal {
                out,
                inp,
                next: 1.0,
                got: prod,
                gaps: FrameGaps::default(),
                frame_gaps: Arc::clone(&signal_gaps),
            },
        )
        .unwrap();
    let c = active.as_client();
    c.connect_ports_by_name("signal:out", "rack:in_1").unwrap();
    c.connect_ports_by_name("rack:out_1", "signal:in").unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.iter().filter(|&&x: &&f32| x != 0.0).count() < 4800 {
        assert!(
            Instant::now() < deadline,
            "no signal came back through the rack"
        );
        while let Ok(x) = cons.pop() {
            got.push(x);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    active.deactivate().unwrap();
    let (xruns, gaps) = (host.xruns(), host.frame_gaps());
    let signal_gaps = signal_gaps.load(Ordering::Relaxed);
    let stats = host.stop();
    drop(server);
    let back: Vec<f32> = got.iter().copied().skip_while(|&x| x == 0.0).collect();
    assert!(back.len() >= 4800);
    assert!(stats.cycles > 0);
    assert_eq!(stats.stages[0].runs, stats.cycles);
    let breaks = back
        .windows(2)
        .filter(|w| !(w[1] - w[0] == 0.5 || (w[0] == 2047.5 && w[1] == 0.5)))
        .count();
    eprintln!(
        "{}: {} cycles, xruns {xruns}, frame gaps {gaps} (signal client {signal_gaps}), \
         {breaks} breaks in the returned signal",
        kind.label(),
        stats.cycles
    );
    if xruns + gaps + signal_gaps > 0 {
        return Attempt::Waived(format!(
            "{}: the server dropped cycles (xruns {xruns}, frame gaps {gaps}, signal client \
             {signal_gaps}): the returned signal cannot be checked sample by sample",
            kind.label()
        ));
    }
    // Every sample that came back is half of a sent one, in order, none lost.
    for w in back.windows(2) {
        let step = w[1] - w[0];
        assert!(
            step == 0.5 || (w[0] == 2047.5 && w[1] == 0.5),
            "{} then {}",
            w[0],
            w[1]
        );
    }
    Attempt::Checked(())
}
