//! Backend opening shared by `firmtime midi` and `firmtime tap`: the JACK
//! server to use (starting a private dummy one when asked) and the
//! real-time request of a backend's thread.

use anyhow::Context;
use firmtime_jack::{DummyOptions, DummyServer};
use firmtime_rt::sched::Policy;
use firmtime_rt::setup::RtRequest;

/// The JACK server to use: `named` (or the default) when it runs; with
/// `dummy` and none running, a private `jackd -d dummy` started here (named
/// `named` if given) and stopped when the returned value drops.
/// `realtime`: run the dummy server's graph at SCHED_FIFO (`jackd -R`), so
/// that load on the machine does not turn into xruns.
pub(crate) fn jack_server(
    named: Option<&str>,
    dummy: bool,
    realtime: bool,
) -> anyhow::Result<(Option<String>, Option<DummyServer>)> {
    let named = named.map(str::to_string);
    if !dummy || firmtime_jack::server_running(named.as_deref()) {
        return Ok((named, None));
    }
    let mut options = DummyOptions::new();
    options.realtime = realtime;
    if let Some(n) = &named {
        options.name = n.clone();
    }
    let server =
        DummyServer::start(options).context("starting a dummy JACK server (--jack-dummy)")?;
    Ok((Some(server.name().to_string()), Some(server)))
}

/// SCHED_FIFO at `priority` with memory locking (when `mlock`), or nothing
/// at all with `no_rt`.
pub(crate) fn rt_request(no_rt: bool, priority: u8, mlock: bool) -> RtRequest {
    if no_rt {
        RtRequest::default()
    } else {
        RtRequest {
            policy: Policy::Fifo { priority },
            mlock,
            prefault_stack: if mlock { 256 * 1024 } else { 0 },
            ..RtRequest::default()
        }
    }
}
