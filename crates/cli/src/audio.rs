//! `firmtime audio roundtrip`: the round-trip latency of an audio path
//! through a loopback, jack_iodelay's job ([`firmtime_jack::roundtrip`]),
//! and the same measurement of `tap run`'s feedback path
//! (`--measure-roundtrip`, [`measure_feedback`]).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use firmtime_jack::roundtrip::{self, RoundTrip, RoundTripOptions};
use firmtime_rt::system::Provenance;
use serde::Serialize;

use crate::args::{self, Outcome, UsageError};
use crate::backend;
use crate::signals::{self, Repeat};

/// Arguments of `firmtime audio`.
#[derive(Debug, Args)]
pub struct AudioArgs {
    #[command(subcommand)]
    command: AudioCommand,
}

#[derive(Debug, Subcommand)]
enum AudioCommand {
    /// Round-trip latency of an audio path through a loopback (like jack_iodelay).
    ///
    /// Plays bursts of a maximum-length sequence on firmtime-roundtrip:out
    /// and finds them, by cross-correlation, on firmtime-roundtrip:in:
    /// frames and ms, with the latencies JACK reports for the two ports and
    /// the difference (jack_iodelay's "extra loopback latency"). On a sound
    /// card, cable an output to an input and give both ends (--connect-out
    /// system:playback_1 --connect system:capture_1). With --jack-dummy and
    /// no ports, out is connected straight to in (one period on that
    /// server). Xruns are counted; bursts near one are outvoted. Exit
    /// status 1 when nothing comes back. See docs/AUDIO.md.
    Roundtrip(RoundtripArgs),
}

/// Arguments of `firmtime audio roundtrip`.
#[derive(Debug, Args)]
struct RoundtripArgs {
    /// Connect our output (firmtime-roundtrip:out) to this port, e.g.
    /// system:playback_1 (the output the cable leaves from); repeatable.
    #[arg(long, value_name = "PORT")]
    connect_out: Vec<String>,
    /// Connect this port to our input (firmtime-roundtrip:in), e.g.
    /// system:capture_1 (the input the cable comes back to); repeatable.
    #[arg(long, value_name = "PORT")]
    connect: Vec<String>,
    /// JACK: the server name (default: $JACK_DEFAULT_SERVER or "default").
    #[arg(long, value_name = "NAME")]
    jack_server: Option<String>,
    /// JACK: when no server runs, start `jackd -d dummy` as a child under a
    /// private name (or --jack-server NAME) and stop it on exit.
    #[arg(long)]
    jack_dummy: bool,
    /// Test bursts to play (1..=100); the result is the lag most agree on.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=100))]
    bursts: u32,
    /// The longest round trip looked for (1ms..=5s); each burst takes this
    /// plus 4095 frames.
    #[arg(long, value_name = "D", default_value = "500ms", value_parser = max_latency)]
    max_latency: Duration,
    /// Level of the test signal, dBFS (-60..=0).
    #[arg(long, default_value_t = -12.0, allow_negative_numbers = true,
          value_parser = args::float_in(-60.0, 0.0, " dBFS"))]
    level_dbfs: f64,
    /// Wait this long for connections made elsewhere (jack_connect,
    /// qjackctl) before giving up on an open loop.
    #[arg(long, value_name = "D", default_value = "0s", value_parser = args::duration)]
    wait: Duration,
    /// Write the result as JSON to PATH (`-` or a bare --json: stdout); see docs/AUDIO.md.
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
}

/// clap value parser of `--max-latency`: a duration of 1 ms to 5 s.
fn max_latency(text: &str) -> Result<Duration, String> {
    let d = args::duration(text)?;
    if d < Duration::from_millis(1) || d > Duration::from_secs(5) {
        return Err(format!("{d:?} is out of range 1ms..=5s"));
    }
    Ok(d)
}

/// Runs `firmtime audio …`.
pub fn run(a: AudioArgs) -> anyhow::Result<Outcome> {
    match a.command {
        AudioCommand::Roundtrip(r) => roundtrip_cmd(r),
    }
}

#[derive(Serialize)]
struct RoundtripOut<'a> {
    provenance: Provenance,
    server: String,
    dummy_server_started: bool,
    /// Our out was connected straight to our in (a dummy server, no ports given).
    self_loop: bool,
    /// The test signal and how it is found.
    method: &'static str,
    /// A stop signal ended the run early; the result is what was captured.
    interrupted: bool,
    #[serde(flatten)]
    result: &'a RoundTrip,
}

/// How the signal is made and found, for the JSON and the docs.
const METHOD: &str = "MLS of order 12 (4095 frames) per burst, placed by JACK frame; \
                      cross-correlation (matched filter), lag of the peak";

fn roundtrip_cmd(a: RoundtripArgs) -> anyhow::Result<Outcome> {
    let mut provenance = Provenance::begin(std::env::args().collect());
    if let Some(p) = &a.json {
        args::check_output_file("--json", p)?;
    }
    let (server_name, server) = backend::jack_server(a.jack_server.as_deref(), a.jack_dummy, true)?;
    let dummy_started = server.is_some();
    let self_loop = dummy_started && a.connect.is_empty() && a.connect_out.is_empty();
    let options = RoundTripOptions {
        server: server_name.clone(),
        connect_out: a.connect_out.clone(),
        connect_in: a.connect.clone(),
        self_loop,
        bursts: a.bursts,
        max_latency: a.max_latency,
        level_dbfs: a.level_dbfs,
        wait_for_connections: a.wait,
        ..RoundTripOptions::new()
    };
    let label = backend::server_label(server_name.as_deref());
    if self_loop {
        eprintln!(
            "firmtime: no ports given: measuring a direct JACK connection {0}:out -> {0}:in on the \
             dummy server (a loop inside JACK: one period)",
            options.client_name
        );
    }
    signals::catch(Repeat::Caught)?;
    let rt = roundtrip::measure(&options, &signals::interrupted)
        .with_context(|| format!("audio round trip on JACK server {label:?}"))?;
    drop(server);
    provenance.finish();
    let to_stdout = args::is_stdout(a.json.as_deref());
    let text = render(&rt, &label);
    if to_stdout {
        eprint!("{text}");
    } else {
        print!("{text}");
    }
    if let Some(p) = &a.json {
        args::write_json(
            p,
            &RoundtripOut {
                provenance,
                server: label,
                dummy_server_started: dummy_started,
                self_loop,
                method: METHOD,
                interrupted: signals::interrupted(),
                result: &rt,
            },
        )?;
    }
    Ok(if signals::interrupted() {
        Outcome::Failed
    } else {
        Outcome::Ok
    })
}

/// The human report of a round trip.
fn render(rt: &RoundTrip, server: &str) -> String {
    let ms = |f: f64| rt.frames_to_ms(f);
    let list = |v: &[String]| {
        if v.is_empty() {
            "nothing".to_string()
        } else {
            v.join(", ")
        }
    };
    let reported = u64::from(rt.playback_latency.max) + u64::from(rt.capture_latency.max);
    let mut s = format!(
        "audio round trip on JACK server {server:?}, {} Hz, {} frames per period\n\
         path              {} -> {} ... {} -> {}\n\
         round trip        {} frames   {:.3} ms   ({} of {} bursts agree; correlation {:.3}, back at {:+.1} dB)\n",
        rt.sample_rate,
        rt.period,
        rt.out_port,
        list(&rt.out_connections),
        list(&rt.in_connections),
        rt.in_port,
        rt.frames,
        rt.ms,
        rt.agreeing,
        rt.bursts,
        rt.correlation,
        rt.gain_db + 0.0, // no "-0.0"
    );
    if rt.min_frames != rt.max_frames {
        s.push_str(&format!(
            "spread            {} .. {} frames among the {} bursts that came back\n",
            rt.min_frames, rt.max_frames, rt.detected
        ));
    }
    if rt.sub_frame.abs() >= 0.01 {
        s.push_str(&format!(
            "sub-frame         {:+.2} frames (an analog path: the peak lies between frames)\n",
            rt.sub_frame
        ));
    }
    s.push_str(&format!(
        "JACK reports      playback {}..{} + capture {}..{} = {reported} frames ({:.3} ms)\n\
         extra loopback    {} frames ({:.3} ms) beyond what JACK reports (jack_iodelay's \"extra loopback latency\")\n\
         xruns             {} (skipped cycles {}; bursts near one {})\n",
        rt.playback_latency.min,
        rt.playback_latency.max,
        rt.capture_latency.min,
        rt.capture_latency.max,
        ms(reported as f64),
        rt.extra_frames,
        ms(rt.extra_frames as f64),
        rt.xruns,
        rt.frame_gaps,
        rt.disturbed,
    ));
    if rt.inverted {
        s.push_str("polarity          inverted (the loop flips the signal's sign)\n");
    }
    s
}

/// `tap run --measure-roundtrip PORT`: the feedback path's round trip,
/// measured before the first trial from the ports the experiment's audio
/// goes to (`backend_detail["audio"]["connect"]`) back through `capture`
/// on the backend's server. Prints one line to stderr and returns the
/// JSON recorded in every trial's sidecar.
///
/// # Errors
/// A [`UsageError`] when the session has no audio output or it goes
/// nowhere; the measurement's errors (nothing came back, …).
pub fn measure_feedback(
    backend_detail: &serde_json::Value,
    capture: &str,
) -> anyhow::Result<serde_json::Value> {
    let Some(audio) = backend_detail.get("audio").filter(|a| !a.is_null()) else {
        return Err(UsageError(
            "--measure-roundtrip measures the audio feedback path: the experiments need audio \
             output ([output] device = \"audio\") and --backend jack"
                .into(),
        )
        .into());
    };
    let playback: Vec<String> = audio
        .get("connect")
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .unwrap_or_default();
    if playback.is_empty() {
        return Err(UsageError(
            "--measure-roundtrip: the audio output is connected to nothing; give --audio-out PORT \
             (the output the loopback cable leaves from)"
                .into(),
        )
        .into());
    }
    let server = backend_detail
        .get("server")
        .and_then(|s| s.as_str())
        .map(str::to_string);
    let options = RoundTripOptions {
        client_name: "firmtime-tap-roundtrip".into(),
        server: server.clone(),
        connect_out: playback,
        connect_in: vec![capture.to_string()],
        bursts: 4,
        ..RoundTripOptions::new()
    };
    let rt = roundtrip::measure(&options, &signals::interrupted).with_context(|| {
        format!("--measure-roundtrip {capture}: measuring the audio feedback path's round trip")
    })?;
    eprintln!(
        "firmtime: audio feedback path: round trip {} frames ({:.3} ms) through {} and back on {capture}; \
         JACK reports playback latency {} frames ({:.3} ms) of it ({} of {} bursts agree, {} xruns)",
        rt.frames,
        rt.ms,
        rt.out_connections.join(", "),
        rt.playback_latency.max,
        rt.frames_to_ms(f64::from(rt.playback_latency.max)),
        rt.agreeing,
        rt.bursts,
        rt.xruns,
    );
    Ok(serde_json::json!({
        "capture_port": capture,
        "method": METHOD,
        "frames": rt.frames,
        "ms": rt.ms,
        "sample_rate": rt.sample_rate,
        "period": rt.period,
        "playback_ports": rt.out_connections,
        "playback_latency": rt.playback_latency,
        "capture_latency": rt.capture_latency,
        "extra_frames": rt.extra_frames,
        "bursts": rt.bursts,
        "agreeing": rt.agreeing,
        "xruns": rt.xruns,
    }))
}
