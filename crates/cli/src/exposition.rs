//! OpenMetrics of `net worker` and `rack` (prometheus-client), served by
//! firmtime-watch's endpoint (`firmtime_watch::metrics::serve`): the same
//! flags, token rules and caps as `watch`.
//!
//! Each scrape renders a snapshot of counters the engines already keep in
//! atomics ([`WorkerMetrics`], [`RackMetrics`]) on the endpoint's own
//! thread: the real-time threads never see a scrape.

use crate::args::UsageError;
use clap::Args;
use firmtime_net::published::PERIOD_TIME_EDGES_NS;
use firmtime_net::server::{WorkerMetrics, WorkerSnapshot};
use firmtime_net::DropReason;
use firmtime_rack::{RackCounts, RackMetrics};
use firmtime_watch::metrics::{self as endpoint, Server};
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::MetricType;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;

/// `--metrics-listen` and `--metrics-token` of `watch`, `net worker` and `rack`.
#[derive(Debug, Clone, Args)]
pub struct MetricsArgs {
    /// Serve OpenMetrics for Prometheus on this address (e.g. 127.0.0.1:9807); off by default.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
    /// File holding a bearer token (first line, 16 to 4096 printable ASCII
    /// characters) that scrapes must send. Secret-file rule: a regular file of
    /// at most 4 KiB that neither the group nor the world may write (refused),
    /// owned by root or you; a warning if others may read it.
    #[arg(long, value_name = "FILE", requires = "metrics_listen")]
    metrics_token: Option<PathBuf>,
}

/// What [`MetricsArgs::prepare`] checked: the address and token, if any.
pub struct Prepared(Option<(SocketAddr, Option<String>)>);

impl MetricsArgs {
    /// Reads the token file (before anything starts).
    ///
    /// # Errors
    /// A usage error naming `--metrics-token` and the file.
    pub fn prepare(&self) -> anyhow::Result<Prepared> {
        let Some(addr) = self.metrics_listen else {
            return Ok(Prepared(None));
        };
        let token = match &self.metrics_token {
            Some(p) => {
                let (token, warning) = read_token(p).map_err(UsageError)?;
                if let Some(w) = warning {
                    eprintln!("firmtime: warning: {w}");
                }
                Some(token)
            }
            None => None,
        };
        Ok(Prepared(Some((addr, token))))
    }
}

/// The shortest bearer token accepted, in characters.
pub const MIN_TOKEN_LEN: usize = 16;

/// Reads a `--metrics-token` file under the one rule for secrets
/// (`firmtime_rt::secret`: a regular file of at most 4 KiB, not writable by
/// others): its first line, trimmed, of at least [`MIN_TOKEN_LEN`] printable
/// ASCII characters; and the warning to show when others may read it.
///
/// # Errors
/// A message naming `--metrics-token` and the file.
pub fn read_token(path: &std::path::Path) -> Result<(String, Option<String>), String> {
    let mut s = firmtime_rt::secret::read_secret(
        path,
        firmtime_rt::secret::DEFAULT_MAX_LEN,
        "--metrics-token",
    )
    .map_err(|e| e.to_string())?;
    let warning = s.take_warning().map(|w| w.to_string());
    let first = s.bytes().split(|&b| b == b'\n').next().unwrap_or(&[]);
    let t = std::str::from_utf8(first).unwrap_or("").trim();
    if t.len() < MIN_TOKEN_LEN || t.chars().any(|c| !c.is_ascii_graphic()) {
        return Err(format!(
            "--metrics-token {}: the token must be at least {MIN_TOKEN_LEN} printable ASCII \
             characters on the first line",
            path.display()
        ));
    }
    Ok((t.to_string(), warning))
}

impl Prepared {
    /// Serves `render` if asked to, and says where on stderr as
    /// `WHO: serving OpenMetrics on http://ADDR/metrics`.
    ///
    /// # Errors
    /// The address cannot be bound (naming `--metrics-listen`).
    pub fn serve(
        self,
        who: &str,
        render: impl Fn() -> String + Send + 'static,
    ) -> anyhow::Result<Option<Server>> {
        let Some((addr, token)) = self.0 else {
            return Ok(None);
        };
        let s = endpoint::serve(addr, token, render)?;
        eprintln!("{who}: serving OpenMetrics on http://{}/metrics", s.addr());
        Ok(Some(s))
    }
}

/// One label, its value escaped as the exposition formats want.
struct Label(&'static str, String);

impl EncodeLabelSet for Label {
    fn encode(&self, mut encoder: LabelSetEncoder) -> std::fmt::Result {
        let mut l = encoder.encode_label();
        let mut k = l.encode_label_key()?;
        k.write_str(self.0)?;
        let mut v = k.encode_label_value()?;
        for c in self.1.chars() {
            match c {
                '\\' => v.write_str("\\\\")?,
                '"' => v.write_str("\\\"")?,
                '\n' => v.write_str("\\n")?,
                c => v.write_char(c)?,
            }
        }
        v.finish()
    }
}

fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> std::fmt::Result {
    enc.encode_descriptor(name, help, None, MetricType::Counter)?
        .encode_counter::<(), u64, f64>(&v, None)
}

fn counters(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    key: &'static str,
    values: &[(String, u64)],
) -> std::fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (label, v) in values {
        m.encode_family(&Label(key, label.clone()))?
            .encode_counter::<(), u64, f64>(v, None)?;
    }
    Ok(())
}

fn render(collector: impl prometheus_client::collector::Collector) -> String {
    let mut reg = prometheus_client::registry::Registry::default();
    reg.register_collector(Box::new(collector));
    let mut s = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut s, &reg);
    s
}

/// The lost-period reasons a worker serves (bounded).
pub const LOST_REASONS: [&str; 2] = ["incomplete", "busy"];

/// The drop reason served for datagrams the kernel dropped at the worker's
/// data socket (next to [`DropReason`]'s names).
pub const SOCKET_BUFFER_REASON: &str = "socket_buffer_full";

#[derive(Debug)]
struct WorkerCollector(WorkerSnapshot);

impl prometheus_client::collector::Collector for WorkerCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let s = &self.0;
        let d = &s.data;
        enc.encode_descriptor(
            "firmtime_net_worker_sessions",
            "Sessions (streams) being served now",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&(d.sessions as i64))?;
        for (name, help, v) in [
            (
                "firmtime_net_worker_sessions_opened",
                "Sessions set up since the worker started",
                s.sessions_opened,
            ),
            (
                "firmtime_net_worker_setups_refused",
                "Setup requests refused (a value out of range, a cap reached, a plugin refused)",
                s.setups_refused,
            ),
            (
                "firmtime_net_worker_sessions_cut_off",
                "Sessions cut off by the watchdog (a plugin run over its budget)",
                s.cut_off,
            ),
            (
                "firmtime_net_worker_periods",
                "Session periods processed (their input was complete and the work ran), ended sessions included",
                d.periods,
            ),
            (
                "firmtime_net_worker_late_periods",
                "Session periods answered more than the master's whole budget, (window + 1) x period, \
                 after their last input fragment arrived: late at the master whatever the network did \
                 (a lower bound: the worker cannot see the network's share)",
                d.late,
            ),
            (
                "firmtime_net_worker_datagrams",
                "Datagrams received on the data port",
                d.datagrams,
            ),
            (
                "firmtime_net_worker_probes",
                "Discovery probes answered",
                d.probes,
            ),
        ] {
            counter(&mut enc, name, help, v)?;
        }
        counters(
            &mut enc,
            "firmtime_net_worker_lost_periods",
            "Session periods received in part or whole but never answered: incomplete (a fragment never \
             came and a later period took the slot) or busy (given up while the session was still busy \
             or cut off). Periods of which nothing arrived are invisible to the worker",
            "reason",
            &[
                (LOST_REASONS[0].into(), d.incomplete),
                (LOST_REASONS[1].into(), d.busy + s.plugin_dropped),
            ],
        )?;
        let mut drops: Vec<(String, u64)> = DropReason::ALL
            .iter()
            .map(|&r| (r.name().to_string(), d.drops.get(r)))
            .collect();
        if let Some(n) = s.socket_drops {
            drops.push((SOCKET_BUFFER_REASON.into(), n));
        }
        counters(
            &mut enc,
            "firmtime_net_worker_dropped_datagrams",
            "Datagrams dropped, by reason: the wire checks (docs/WIRE.md) and socket_buffer_full, \
             those the kernel dropped at the data socket (/proc/net/udp)",
            "reason",
            &drops,
        )?;
        counters(
            &mut enc,
            "firmtime_net_worker_socket_errors",
            "Failed calls on the data socket, by operation",
            "op",
            &[
                ("recv".into(), d.recv_errors),
                ("send".into(), d.send_errors),
            ],
        )?;
        let t = &s.times;
        let mut buckets = Vec::with_capacity(t.counts.len());
        for (i, &n) in t.counts.iter().enumerate() {
            let edge = PERIOD_TIME_EDGES_NS
                .get(i)
                .map_or(f64::MAX, |&e| e as f64 / 1e9);
            buckets.push((edge, n));
        }
        enc.encode_descriptor(
            "firmtime_net_worker_period_time_seconds",
            "The worker's share of the round trip: from the receipt of a period's last input fragment \
             to the send of its result's last fragment (work and any hold included; built-in work \
             only, plugin sessions are answered by their runner and not timed)",
            None,
            MetricType::Histogram,
        )?
        .encode_histogram::<()>(t.sum_ns as f64 / 1e9, t.count(), &buckets, None)?;
        Ok(())
    }
}

/// The OpenMetrics text of a worker's counters now.
pub fn worker_text(m: &WorkerMetrics) -> String {
    render(WorkerCollector(m.snapshot()))
}

#[derive(Debug)]
struct RackCollector(RackCounts);

impl prometheus_client::collector::Collector for RackCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let c = &self.0;
        let e = &c.engine;
        for (name, help, v) in [
            ("firmtime_rack_cycles", "JACK process cycles run", e.cycles),
            (
                "firmtime_rack_xruns",
                "Xruns the JACK server reported (PipeWire never does: see frame gaps)",
                c.xruns,
            ),
            (
                "firmtime_rack_frame_gaps",
                "Cycles the server dropped, seen as gaps in the frame counter",
                c.frame_gaps,
            ),
            (
                "firmtime_rack_overruns",
                "Cycles whose processing took longer than the period",
                e.overruns,
            ),
            (
                "firmtime_rack_oversize_cycles",
                "Cycles larger than the block size, silenced",
                e.oversize,
            ),
            (
                "firmtime_rack_controls_applied",
                "Control changes the engine applied",
                e.controls_applied,
            ),
        ] {
            counter(&mut enc, name, help, v)?;
        }
        let all = |f: fn(&firmtime_rack::StageCounts) -> u64| -> Vec<(String, u64)> {
            e.stages.iter().map(|s| (s.name.clone(), f(s))).collect()
        };
        counters(
            &mut enc,
            "firmtime_rack_stage_runs",
            "Cycles each stage ran",
            "stage",
            &all(|s| s.runs),
        )?;
        let mut m = enc.encode_descriptor(
            "firmtime_rack_stage_time_seconds",
            "Time in each stage (a remote stage: sending plus waiting for the result)",
            None,
            MetricType::Counter,
        )?;
        for s in &e.stages {
            m.encode_family(&Label("stage", s.name.clone()))?
                .encode_counter::<(), f64, f64>(&(s.time_sum_ns as f64 / 1e9), None)?;
        }
        let remote: Vec<(String, u64)> = e
            .stages
            .iter()
            .filter(|s| s.remote)
            .map(|s| (s.name.clone(), s.late))
            .collect();
        counters(
            &mut enc,
            "firmtime_rack_late_blocks",
            "Cycles whose remote stage's result was late or whose worker was away (dry pass-through instead)",
            "stage",
            &remote,
        )?;
        Ok(())
    }
}

/// The OpenMetrics text of a rack's counters now.
pub fn rack_text(m: &RackMetrics) -> String {
    render(RackCollector(m.snapshot()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use firmtime_net::published::{DataTotals, PeriodTimesSnapshot};
    use firmtime_rack::{EngineCounts, StageCounts};

    #[test]
    fn a_worker_snapshot_renders_every_series_with_bounded_labels() {
        let mut drops = firmtime_net::DropCounts::default();
        drops.add(DropReason::BadMac);
        let s = WorkerSnapshot {
            data: DataTotals {
                periods: 7,
                late: 2,
                incomplete: 1,
                busy: 3,
                sessions: 1,
                drops,
                ..DataTotals::default()
            },
            plugin_dropped: 4,
            sessions_opened: 2,
            socket_drops: Some(5),
            times: PeriodTimesSnapshot {
                counts: [1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1],
                sum_ns: 60_500_000,
            },
            ..WorkerSnapshot::default()
        };
        let t = render(WorkerCollector(s));
        for want in [
            "firmtime_net_worker_sessions 1\n",
            "firmtime_net_worker_sessions_opened_total 2\n",
            "firmtime_net_worker_periods_total 7\n",
            "firmtime_net_worker_late_periods_total 2\n",
            "firmtime_net_worker_lost_periods_total{reason=\"incomplete\"} 1\n",
            "firmtime_net_worker_lost_periods_total{reason=\"busy\"} 7\n",
            "firmtime_net_worker_dropped_datagrams_total{reason=\"bad_mac\"} 1\n",
            "firmtime_net_worker_dropped_datagrams_total{reason=\"socket_buffer_full\"} 5\n",
            "firmtime_net_worker_period_time_seconds_bucket{le=\"0.00005\"} 1\n",
            "firmtime_net_worker_period_time_seconds_bucket{le=\"0.0002\"} 3\n",
            "firmtime_net_worker_period_time_seconds_bucket{le=\"+Inf\"} 4\n",
            "firmtime_net_worker_period_time_seconds_count 4\n",
            "firmtime_net_worker_period_time_seconds_sum 0.0605\n",
        ] {
            assert!(t.contains(want), "{want:?} not in\n{t}");
        }
        assert!(t.ends_with("# EOF\n"));
        // Every drop reason, always: a bounded, stable label set.
        let n = t
            .lines()
            .filter(|l| l.starts_with("firmtime_net_worker_dropped_datagrams_total{"))
            .count();
        assert_eq!(n, DropReason::ALL.len() + 1);
    }

    /// The series names in an exposition (`_total`, `_bucket`… as served).
    fn served_names(text: &str) -> std::collections::BTreeSet<String> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split(['{', ' ']).next())
            .map(str::to_string)
            .collect()
    }

    /// Every `firmtime_*` name in the shipped fleet dashboard and net alert
    /// rules is one the worker or the rack serves (rendered here by the
    /// same code the endpoints run).
    #[test]
    fn the_fleet_dashboard_and_net_rules_query_only_series_worker_and_rack_serve() {
        let s = WorkerSnapshot {
            socket_drops: Some(0),
            ..WorkerSnapshot::default()
        };
        let stage = |name: &str, remote| StageCounts {
            name: name.into(),
            remote,
            runs: 0,
            late: 0,
            time_sum_ns: 0,
        };
        let rack = RackCounts {
            engine: EngineCounts {
                cycles: 0,
                oversize: 0,
                overruns: 0,
                controls_applied: 0,
                stages: vec![stage("a", false), stage("b", true)],
            },
            xruns: 0,
            frame_gaps: 0,
        };
        let mut served = served_names(&render(WorkerCollector(s)));
        served.extend(served_names(&render(RackCollector(rack))));
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../contrib/");
        let d: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(format!("{root}grafana/firmtime-fleet.json")).unwrap(),
        )
        .unwrap();
        let panels = d["panels"].as_array().unwrap();
        assert_eq!(panels.len(), 7);
        let mut exprs: Vec<String> = panels
            .iter()
            .flat_map(|p| p["targets"].as_array().unwrap().iter())
            .map(|t| t["expr"].as_str().unwrap().to_string())
            .collect();
        for v in d["templating"]["list"].as_array().unwrap() {
            if let Some(q) = v["definition"].as_str() {
                exprs.push(q.to_string());
            }
        }
        let rules =
            std::fs::read_to_string(format!("{root}prometheus/firmtime-net.rules.yml")).unwrap();
        exprs.push(rules);
        let mut seen = std::collections::BTreeSet::new();
        for e in &exprs {
            let names: Vec<&str> = e
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("firmtime_"))
                .collect();
            assert!(!names.is_empty(), "{e}");
            for n in names {
                assert!(served.contains(n), "{n} in {e} is not served");
                seen.insert(n);
            }
        }
        // The worker's late, lost and time series and the rack's late
        // blocks, xruns and frame gaps are each on the dashboard or in a rule.
        for n in [
            "firmtime_net_worker_late_periods_total",
            "firmtime_net_worker_lost_periods_total",
            "firmtime_net_worker_period_time_seconds_bucket",
            "firmtime_net_worker_dropped_datagrams_total",
            "firmtime_rack_late_blocks_total",
            "firmtime_rack_xruns_total",
            "firmtime_rack_frame_gaps_total",
        ] {
            assert!(seen.contains(n), "{n} is shown nowhere");
        }
    }

    #[test]
    fn a_rack_snapshot_names_its_stages_escaped_and_late_blocks_of_remote_ones() {
        let stage = |name: &str, remote, late| StageCounts {
            name: name.into(),
            remote,
            runs: 10,
            late,
            time_sum_ns: 1_500_000,
        };
        let c = RackCounts {
            engine: EngineCounts {
                cycles: 10,
                oversize: 0,
                overruns: 1,
                controls_applied: 0,
                stages: vec![stage("amp", false, 0), stage("far\"x", true, 3)],
            },
            xruns: 2,
            frame_gaps: 1,
        };
        let t = render(RackCollector(c));
        for want in [
            "firmtime_rack_cycles_total 10\n",
            "firmtime_rack_xruns_total 2\n",
            "firmtime_rack_frame_gaps_total 1\n",
            "firmtime_rack_overruns_total 1\n",
            "firmtime_rack_stage_runs_total{stage=\"amp\"} 10\n",
            "firmtime_rack_stage_time_seconds_total{stage=\"amp\"} 0.0015\n",
            "firmtime_rack_late_blocks_total{stage=\"far\\\"x\"} 3\n",
        ] {
            assert!(t.contains(want), "{want:?} not in\n{t}");
        }
        assert!(!t.contains("late_blocks_total{stage=\"amp\"}"), "{t}");
    }
}
