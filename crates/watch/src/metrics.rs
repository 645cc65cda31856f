//! OpenMetrics for Prometheus: the exposition (prometheus-client) and a
//! small HTTP endpoint that any long-running firmtime process can reuse.
//!
//! [`serve`] takes a closure that renders the OpenMetrics text; it knows
//! nothing of `watch`. `watch` renders [`Totals`]: the sums of the
//! intervals it has stored, so what Prometheus scrapes agrees with the
//! database interval by interval (counters move once per interval).
//!
//! The endpoint answers `GET /metrics` only, with an optional bearer token
//! (compared in constant time), a 2 s deadline per connection, a 8 KiB cap
//! on the request head, and at most [`MAX_CONNECTIONS`] connections served
//! at once, each on a short-lived thread of its own: a new connection
//! beyond that closes the oldest one still sending its request, so slow or
//! silent clients cannot keep a scrape out (sshd's MaxStartups, with the
//! oldest dropped), and nothing a stranger sends can grow memory or hold
//! the process. It never runs in RT context.
//!
//! A client (an IP address) gets at most one full render per
//! [`MIN_RENDER_INTERVAL`]; asking again sooner, it is served the last
//! text rendered (at most that old), so a flood of scrapes cannot make the
//! process render thousands of times a second. The endpoint's threads
//! count their CPU time ([`endpoint_cpu_ns`]): `watch` charges the
//! process's CPU to the watched CPUs without it, and serves it as
//! `firmtime_watch_endpoint_cpu_seconds`.

use crate::error::{Error, ErrorKind, Result};
use crate::hist::Hist;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The latency histogram's bucket edges, ns: 10 µs … 100 ms.
pub const BUCKET_EDGES_NS: [i64; 13] = [
    10_000,
    20_000,
    50_000,
    100_000,
    200_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    20_000_000,
    50_000_000,
    100_000_000,
];

/// What one CPU measured so far, summed over the stored intervals.
#[derive(Debug, Clone, Default)]
pub struct CpuTotals {
    /// Wake-ups.
    pub count: u64,
    /// Deadlines missed.
    pub missed: u64,
    /// Sum of latencies, ns.
    pub sum_ns: i128,
    /// Steal, ns.
    pub steal_ns: u64,
    /// `watch`'s own CPU time charged to this CPU, ns.
    pub watch_cpu_ns: u64,
    /// Intervals stored.
    pub intervals: u64,
    /// The latencies.
    pub hist: Option<Hist>,
    /// The last interval's max latency, ns.
    pub last_max_ns: i64,
    /// Events the explaining trace lost on this CPU (rows that recorded it).
    pub trace_lost_events: u64,
    /// The worst stored wake-up of the last interval that had one
    /// (`None` before one is stored).
    pub worst: Option<WorstWakeup>,
    /// The latency histogram's exemplars, one per bucket line (index as
    /// [`bucket_of`], the last `+Inf`): in each, the worst wake-up of the
    /// latest interval whose worst fell in that bucket. So a spike's
    /// interval keeps its exemplar until a later interval's worst lands in
    /// the same bucket, however many quiet intervals are stored before the
    /// next scrape; every exemplar served is one interval's worst, and an
    /// interval's worst is on one line only.
    pub exemplars: [Option<WorstWakeup>; BUCKET_EDGES_NS.len() + 1],
}

/// The worst wake-up of an interval as an OpenMetrics exemplar on the
/// latency histogram: its database id (`firmtime watch show ID`), its
/// latency and when its deadline was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorstWakeup {
    /// Its row id in the database.
    pub id: i64,
    /// Its latency, ns.
    pub latency_ns: i64,
    /// Its deadline, Unix ns.
    pub deadline_unix_ns: i64,
}

/// Everything `watch` exposes.
#[derive(Debug, Clone, Default)]
pub struct Totals {
    /// Per CPU.
    pub cpus: BTreeMap<usize, CpuTotals>,
    /// Explained worst wake-ups by cause category (the bounded label set of
    /// `firmtime_trace::explain::Category`).
    pub causes: BTreeMap<&'static str, u64>,
    /// The storage interval (`--store-every`), ns; 0 before the run starts
    /// (then its gauge is not served).
    pub interval_ns: u64,
    /// The end of the last stored interval, Unix ns (the run's start until
    /// the first is stored); `None` before the run starts.
    pub last_interval_end_unix_ns: Option<i64>,
}

impl Totals {
    /// Adds one stored interval of `cpu`.
    pub fn add(&mut self, row: &crate::store::CpuInterval) {
        self.last_interval_end_unix_ns = Some(
            self.last_interval_end_unix_ns
                .map_or(row.end_unix_ns, |e| e.max(row.end_unix_ns)),
        );
        let t = self.cpus.entry(row.cpu).or_default();
        t.count += row.count;
        t.missed += row.missed;
        if let Some(m) = row.mean_ns {
            t.sum_ns += (m * row.count as f64).round() as i128;
        }
        t.steal_ns += row.steal_ns;
        t.watch_cpu_ns += row.watch_cpu_ns.unwrap_or(0);
        t.intervals += 1;
        t.last_max_ns = row.max_ns.unwrap_or(0);
        t.trace_lost_events += row.trace_lost_events.unwrap_or(0);
        if let Some(w) = row
            .wakeups
            .iter()
            .filter(|w| w.id.is_some())
            .max_by_key(|w| (w.latency_ns, w.deadline_unix_ns))
        {
            t.worst = w.id.map(|id| WorstWakeup {
                id,
                latency_ns: w.latency_ns,
                deadline_unix_ns: w.deadline_unix_ns,
            });
            if let Some(x) = t.worst {
                t.exemplars[bucket_of(x.latency_ns)] = Some(x);
            }
        }
        t.hist
            .get_or_insert_with(Hist::new)
            .add_sparse(&row.histogram);
        for w in &row.wakeups {
            if let Some(c) = w
                .category
                .as_deref()
                .and_then(firmtime_trace::explain::Category::from_key)
            {
                *self.causes.entry(c.key()).or_default() += 1;
            }
        }
    }
}

/// Reads one counter's value from a CPU's totals.
type Getter = fn(&CpuTotals) -> f64;

/// A prometheus-client collector over shared [`Totals`].
#[derive(Debug, Clone)]
pub struct WatchCollector {
    totals: Arc<Mutex<Totals>>,
}

struct CpuLabel(String);

impl prometheus_client::encoding::EncodeLabelSet for CpuLabel {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::LabelSetEncoder,
    ) -> std::result::Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeLabel;
        ("cpu", self.0.as_str()).encode(encoder.encode_label())
    }
}

struct CategoryLabel(&'static str);

impl prometheus_client::encoding::EncodeLabelSet for CategoryLabel {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::LabelSetEncoder,
    ) -> std::result::Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeLabel;
        ("category", self.0).encode(encoder.encode_label())
    }
}

impl prometheus_client::collector::Collector for WatchCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::result::Result<(), std::fmt::Error> {
        let t = self
            .totals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        {
            let mut m = enc.encode_descriptor(
                "firmtime_watch_latency_seconds",
                "Wake-up latency of the periodic real-time thread (wake time minus deadline)",
                None,
                MetricType::Histogram,
            )?;
            for (cpu, c) in &t.cpus {
                let empty = Hist::new();
                let h = c.hist.as_ref().unwrap_or(&empty);
                let mut buckets = Vec::with_capacity(BUCKET_EDGES_NS.len() + 1);
                let mut below = 0;
                for e in BUCKET_EDGES_NS {
                    let n = h.at_or_below(e);
                    buckets.push((e as f64 / 1e9, n - below));
                    below = n;
                }
                buckets.push((f64::MAX, h.total() - below));
                let label = CpuLabel(cpu.to_string());
                let mut f = m.encode_family(&label)?;
                f.encode_histogram::<()>(c.sum_ns as f64 / 1e9, h.total(), &buckets, None)?;
            }
        }
        let counters: [(&str, &str, Getter); 5] = [
            ("firmtime_watch_wakeups", "Wake-ups measured", |c| {
                c.count as f64
            }),
            (
                "firmtime_watch_missed_deadlines",
                "Deadlines that passed while the thread was still late",
                |c| c.missed as f64,
            ),
            (
                "firmtime_watch_steal_seconds",
                "Time the hypervisor ran something else on the CPU (/proc/stat steal)",
                |c| c.steal_ns as f64 / 1e9,
            ),
            (
                "firmtime_watch_self_cpu_seconds",
                "CPU time firmtime watch itself used, charged to the watched CPU (its measuring thread plus an equal share of the rest)",
                |c| c.watch_cpu_ns as f64 / 1e9,
            ),
            (
                "firmtime_watch_trace_lost_events",
                "Events the kernel lost from the explaining trace of the CPU (ring buffer overrun); a late wake-up whose span lost events has the cause unknown (trace lost events)",
                |c| c.trace_lost_events as f64,
            ),
        ];
        for (name, help, get) in counters {
            let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (cpu, c) in &t.cpus {
                let label = CpuLabel(cpu.to_string());
                let f = m.encode_family(&label)?;
                encode_counter(f, get(c))?;
            }
        }
        {
            let mut m = enc.encode_descriptor(
                "firmtime_watch_intervals",
                "Intervals stored in the database",
                None,
                MetricType::Counter,
            )?;
            for (cpu, c) in &t.cpus {
                let label = CpuLabel(cpu.to_string());
                encode_counter(m.encode_family(&label)?, c.intervals as f64)?;
            }
        }
        {
            let mut m = enc.encode_descriptor(
                "firmtime_watch_worst_wakeups_by_cause",
                "Worst wake-ups of each interval explained by the trace, by cause category",
                None,
                MetricType::Counter,
            )?;
            for cat in firmtime_trace::explain::Category::ALL {
                let n = t.causes.get(cat.key()).copied().unwrap_or(0);
                let label = CategoryLabel(cat.key());
                encode_counter(m.encode_family(&label)?, n as f64)?;
            }
        }
        {
            let mut m = enc.encode_descriptor(
                "firmtime_watch_last_max_latency_seconds",
                "Largest wake-up latency of the last stored interval",
                None,
                MetricType::Gauge,
            )?;
            for (cpu, c) in &t.cpus {
                let label = CpuLabel(cpu.to_string());
                m.encode_family(&label)?
                    .encode_gauge(&(c.last_max_ns as f64 / 1e9))?;
            }
        }
        // What an alert needs to know whether the watch still stores, at
        // any --store-every and under any job name (contrib/prometheus).
        if t.interval_ns > 0 {
            enc.encode_descriptor(
                "firmtime_watch_interval_seconds",
                "The storage interval (--store-every): one interval is stored this often",
                None,
                MetricType::Gauge,
            )?
            .encode_gauge(&(t.interval_ns as f64 / 1e9))?;
        }
        if let Some(end) = t.last_interval_end_unix_ns {
            enc.encode_descriptor(
                "firmtime_watch_last_interval_end_timestamp_seconds",
                "End of the last stored interval, Unix seconds (the run's start until the first is stored)",
                None,
                MetricType::Gauge,
            )?
            .encode_gauge(&(end as f64 / 1e9))?;
        }
        encode_counter(
            enc.encode_descriptor(
                "firmtime_watch_endpoint_cpu_seconds",
                "CPU time of this metrics endpoint (its threads: accepting, reading requests, rendering), not charged to the watched CPUs",
                None,
                MetricType::Counter,
            )?,
            endpoint_cpu_ns() as f64 / 1e9,
        )?;
        encode_counter(
            enc.encode_descriptor(
                "firmtime_watch_endpoint_cached_responses",
                "Scrapes answered with the last rendered text because their client asked again within the minimum interval per client",
                None,
                MetricType::Counter,
            )?,
            ENDPOINT_CACHED.load(Ordering::Relaxed) as f64,
        )?;
        encode_counter(
            enc.encode_descriptor(
                "firmtime_watch_endpoint_refused_connections",
                "Connections answered 429 at once because their client opened more than 32 in 250 ms",
                None,
                MetricType::Counter,
            )?,
            ENDPOINT_REFUSED.load(Ordering::Relaxed) as f64,
        )?;
        encode_counter(
            enc.encode_descriptor(
                "firmtime_watch_endpoint_renders",
                "Scrapes answered with a full render (at most one per client every 250 ms)",
                None,
                MetricType::Counter,
            )?,
            ENDPOINT_RENDERS.load(Ordering::Relaxed) as f64,
        )?;
        Ok(())
    }
}

fn encode_counter(
    mut f: prometheus_client::encoding::MetricEncoder,
    v: f64,
) -> std::result::Result<(), std::fmt::Error> {
    f.encode_counter::<(), f64, f64>(&v, None)
}

impl WatchCollector {
    /// A collector over `totals`.
    pub fn new(totals: Arc<Mutex<Totals>>) -> Self {
        Self { totals }
    }

    /// The OpenMetrics text of `totals` (ends with `# EOF`), each CPU's
    /// latency histogram with its exemplars ([`CpuTotals::exemplars`],
    /// [`with_bucket_exemplars`]). The counts and the exemplars come from
    /// one snapshot taken under one lock: an exemplar is never of an
    /// interval the histogram beside it does not count yet.
    pub fn render(totals: &Arc<Mutex<Totals>>) -> String {
        let snapshot = lock(totals).clone();
        let exemplars: BTreeMap<usize, Vec<WorstWakeup>> = snapshot
            .cpus
            .iter()
            .map(|(&c, t)| (c, t.exemplars.iter().flatten().copied().collect()))
            .collect();
        let mut reg = prometheus_client::registry::Registry::default();
        reg.register_collector(Box::new(WatchCollector::new(Arc::new(Mutex::new(
            snapshot,
        )))));
        let mut s = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut s, &reg);
        with_bucket_exemplars(&s, &exemplars)
    }
}

/// The exemplar label naming a wake-up's database id.
pub const EXEMPLAR_LABEL: &str = "wakeup_id";

/// The upper edge (`le`) of the histogram bucket that holds `latency_ns`,
/// as an index into [`BUCKET_EDGES_NS`] (its length: `+Inf`).
pub fn bucket_of(latency_ns: i64) -> usize {
    BUCKET_EDGES_NS
        .iter()
        .position(|&e| latency_ns <= e)
        .unwrap_or(BUCKET_EDGES_NS.len())
}

/// Adds to the OpenMetrics text `om` each CPU's exemplar: on the line of
/// `firmtime_watch_latency_seconds_bucket` of that CPU whose bucket holds
/// the worst wake-up's latency, ` # {wakeup_id="ID"} LATENCY_S DEADLINE_S`
/// (OpenMetrics 1.0: the exemplar's value lies in its bucket; its
/// timestamp is the deadline). prometheus-client 0.22 cannot build an
/// exemplar from outside, so it is added to its text (pure: unit-tested).
pub fn with_exemplars(om: &str, worst: &BTreeMap<usize, WorstWakeup>) -> String {
    let each: BTreeMap<usize, Vec<WorstWakeup>> =
        worst.iter().map(|(&c, &w)| (c, vec![w])).collect();
    with_bucket_exemplars(om, &each)
}

/// As [`with_exemplars`], with any number of exemplars per CPU: each on
/// the bucket line that holds its latency. OpenMetrics allows one
/// exemplar per line: of several in one bucket, the latest (by deadline)
/// is written.
pub fn with_bucket_exemplars(om: &str, worst: &BTreeMap<usize, Vec<WorstWakeup>>) -> String {
    if worst.values().all(Vec::is_empty) {
        return om.to_string();
    }
    let mut out = String::with_capacity(om.len() + 64 * worst.len());
    // The k-th bucket line of a CPU is its k-th edge (then +Inf).
    let mut seen: BTreeMap<usize, usize> = BTreeMap::new();
    for l in om.lines() {
        out.push_str(l);
        if let Some(rest) = l.strip_prefix("firmtime_watch_latency_seconds_bucket{") {
            let cpu = rest
                .split(',')
                .find_map(|kv| kv.strip_prefix("cpu=\""))
                .and_then(|v| v.split('"').next())
                .and_then(|v| v.parse::<usize>().ok());
            if let Some(cpu) = cpu {
                let k = seen.entry(cpu).or_insert(0);
                let here = worst.get(&cpu).and_then(|ws| {
                    ws.iter()
                        .filter(|w| bucket_of(w.latency_ns) == *k)
                        .max_by_key(|w| (w.deadline_unix_ns, w.id))
                });
                if let Some(w) = here {
                    out.push_str(&format!(
                        " # {{{EXEMPLAR_LABEL}=\"{}\"}} {} {}",
                        w.id,
                        w.latency_ns as f64 / 1e9,
                        w.deadline_unix_ns as f64 / 1e9
                    ));
                }
                *k += 1;
            }
        }
        out.push('\n');
    }
    out
}

/// Largest request head read, bytes.
pub const MAX_REQUEST: usize = 8192;
/// Deadline for one connection (read and write).
pub const CONN_DEADLINE: Duration = Duration::from_secs(2);
/// The OpenMetrics content type.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The shortest time between two full renders for one client (its IP
/// address): a client asking again sooner is answered with the last text
/// rendered (at most this old), so a flood of scrapes costs at most
/// `1 s / MIN_RENDER_INTERVAL` renders a second per client.
pub const MIN_RENDER_INTERVAL: Duration = Duration::from_millis(250);
/// Connections one client may open per [`MIN_RENDER_INTERVAL`] that are
/// served (the first gets a render, the rest the cached text); beyond
/// them the accepting thread answers `429 Too Many Requests` itself and
/// closes, without reading the request or starting a thread, so a flood
/// costs little more than its accepts. Twice the connections the
/// endpoint keeps open at most (`2 × MAX_CONNECTIONS`), so that a client's
/// few held connections meet the slots' rule (the oldest closed) first and
/// this one only a flood.
pub const MAX_CONNECTIONS_PER_WINDOW: u32 = 4 * MAX_CONNECTIONS as u32;
/// Clients whose last render time is remembered; beyond it, the oldest
/// memories are forgotten (the bound still holds per remembered client).
pub const MAX_CLIENTS: usize = 1024;

/// CPU time of the endpoints' threads (accept loops and connections),
/// ns, over the process's life.
static ENDPOINT_CPU_NS: AtomicU64 = AtomicU64::new(0);
/// Scrapes answered with cached text.
static ENDPOINT_CACHED: AtomicU64 = AtomicU64::new(0);
/// Scrapes answered with a full render.
static ENDPOINT_RENDERS: AtomicU64 = AtomicU64::new(0);
/// Connections refused with 429 by the accepting thread.
static ENDPOINT_REFUSED: AtomicU64 = AtomicU64::new(0);

/// Connections per client in the current window, on the accepting thread.
#[derive(Debug, Default)]
struct Windows {
    seen: std::collections::HashMap<std::net::IpAddr, (std::time::Instant, u32)>,
}

impl Windows {
    /// Whether `peer`'s connection accepted `now` is one too many (pure:
    /// unit-tested).
    fn too_many(&mut self, peer: std::net::IpAddr, now: std::time::Instant) -> bool {
        if self.seen.len() >= MAX_CLIENTS && !self.seen.contains_key(&peer) {
            self.seen
                .retain(|_, (t, _)| now.saturating_duration_since(*t) < MIN_RENDER_INTERVAL);
            if self.seen.len() >= MAX_CLIENTS {
                if let Some(oldest) = self
                    .seen
                    .iter()
                    .min_by_key(|(_, (t, _))| *t)
                    .map(|(k, _)| *k)
                {
                    self.seen.remove(&oldest);
                }
            }
        }
        let w = self.seen.entry(peer).or_insert((now, 0));
        if now.saturating_duration_since(w.0) >= MIN_RENDER_INTERVAL {
            *w = (now, 0);
        }
        w.1 += 1;
        w.1 > MAX_CONNECTIONS_PER_WINDOW
    }
}

/// What the accepting thread answers a client over its window.
const TOO_MANY: &[u8] = b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Type: text/plain\r\nContent-Length: 18\r\nConnection: close\r\n\r\ntoo many requests\n";

/// The CPU time the metrics endpoints of this process have used, ns: what
/// their threads (accepting, reading, rendering, writing) ran, counted
/// apart so that the process's CPU can be charged without it (`watch`'s
/// own-CPU figure of the measuring threads excludes it).
pub fn endpoint_cpu_ns() -> u64 {
    ENDPOINT_CPU_NS.load(Ordering::Relaxed)
}

/// The calling thread's CPU time, ns.
fn thread_cpu_ns() -> u64 {
    firmtime_rt::clock::read_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Per-client render times and the last text rendered.
#[derive(Debug, Default)]
struct Limiter {
    last: std::collections::HashMap<std::net::IpAddr, std::time::Instant>,
    text: Option<Arc<str>>,
}

impl Limiter {
    /// Whether `peer` may have a full render now (then it is noted), or
    /// gets the cached text (`Some`).
    fn cached_for(&mut self, peer: std::net::IpAddr, now: std::time::Instant) -> Option<Arc<str>> {
        if let (Some(t), Some(text)) = (self.last.get(&peer), &self.text) {
            if now.saturating_duration_since(*t) < MIN_RENDER_INTERVAL {
                return Some(Arc::clone(text));
            }
        }
        if self.last.len() >= MAX_CLIENTS && !self.last.contains_key(&peer) {
            self.last
                .retain(|_, t| now.saturating_duration_since(*t) < MIN_RENDER_INTERVAL);
            if self.last.len() >= MAX_CLIENTS {
                // Every remembered client is within its interval: forget
                // the oldest one.
                if let Some(oldest) = self.last.iter().min_by_key(|(_, t)| **t).map(|(k, _)| *k) {
                    self.last.remove(&oldest);
                }
            }
        }
        self.last.insert(peer, now);
        None
    }
}

/// A running endpoint; dropping it stops it.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// The address it listens on (the port chosen when given port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Serves `GET /metrics` on `addr` with `render`'s text, on a thread of its
/// own, until the returned [`Server`] is dropped. With `token`, a request
/// needs `Authorization: Bearer <token>` (401 otherwise).
///
/// # Errors
/// [`ErrorKind::Io`] when the address cannot be bound (naming it and
/// `--metrics-listen`).
pub fn serve(
    addr: SocketAddr,
    token: Option<String>,
    render: impl Fn() -> String + Send + 'static,
) -> Result<Server> {
    let listener = TcpListener::bind(addr).map_err(|e| {
        Error::new(
            ErrorKind::Io,
            format!("--metrics-listen {addr}: cannot listen: {e}"),
        )
    })?;
    let addr = listener.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = Arc::clone(&stop);
    let render: Arc<Mutex<Box<dyn Fn() -> String + Send>>> = Arc::new(Mutex::new(Box::new(render)));
    let token: Option<Arc<str>> = token.map(Arc::from);
    let slots = Arc::new(Mutex::new(Slots::default()));
    let limiter = Arc::new(Mutex::new(Limiter::default()));
    let thread = std::thread::Builder::new()
        .name("ft-metrics".into())
        .stack_size(crate::run::THREAD_STACK)
        .spawn(move || {
            let mut counted = thread_cpu_ns();
            let mut windows = Windows::default();
            loop {
                // The peer's address as accepted: asked later, a connection
                // the client has closed meanwhile has none.
                let conn = listener.accept();
                // This thread's CPU (accepting, starting threads) is the
                // endpoint's: added as it goes.
                let now = thread_cpu_ns();
                ENDPOINT_CPU_NS.fetch_add(now.saturating_sub(counted), Ordering::Relaxed);
                counted = now;
                if s2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok((c, peer)) = conn else { continue };
                let peer = peer.ip();
                if windows.too_many(peer, std::time::Instant::now()) {
                    ENDPOINT_REFUSED.fetch_add(1, Ordering::Relaxed);
                    // Never blocks: a full socket buffer drops the answer.
                    let _ = c.set_nonblocking(true);
                    let _ = (&c).write(TOO_MANY);
                    continue;
                }
                let Some(id) = lock(&slots).admit(&c) else {
                    continue; // every slot is writing a response: refused
                };
                let (sl, render, token, lim) = (
                    Arc::clone(&slots),
                    Arc::clone(&render),
                    token.clone(),
                    Arc::clone(&limiter),
                );
                let spawned = std::thread::Builder::new()
                    .name("ft-metrics-conn".into())
                    .stack_size(crate::run::THREAD_STACK)
                    .spawn(move || {
                        // Decided and rendered under one lock: a client's
                        // request that arrives while a render runs waits
                        // for its text rather than rendering again.
                        let body = || -> Arc<str> {
                            let mut l = lock(&lim);
                            if let Some(t) = l.cached_for(peer, std::time::Instant::now()) {
                                ENDPOINT_CACHED.fetch_add(1, Ordering::Relaxed);
                                return t;
                            }
                            ENDPOINT_RENDERS.fetch_add(1, Ordering::Relaxed);
                            let text: Arc<str> = Arc::from((lock(&render))());
                            l.text = Some(Arc::clone(&text));
                            text
                        };
                        let _ = handle(c, token.as_deref(), &body, &|| lock(&sl).headed(id));
                        lock(&sl).done(id);
                        ENDPOINT_CPU_NS.fetch_add(thread_cpu_ns(), Ordering::Relaxed);
                    });
                if spawned.is_err() {
                    // The closure (and the connection) were dropped.
                    lock(&slots).done(id);
                }
            }
            ENDPOINT_CPU_NS.fetch_add(thread_cpu_ns().saturating_sub(counted), Ordering::Relaxed);
        })
        .map_err(|e| {
            Error::new(
                ErrorKind::Io,
                format!("cannot start the metrics thread: {e}"),
            )
        })?;
    Ok(Server {
        addr,
        stop,
        thread: Some(thread),
    })
}

/// The Prometheus text format's content type (0.0.4), served to clients
/// that do not ask for OpenMetrics (curl, `promtool check metrics`).
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The Prometheus text format (0.0.4) of an OpenMetrics text: counters'
/// `# HELP`/`# TYPE` lines take the `_total` name their samples have, and
/// the `# EOF` line goes. Everything else is the same in both formats.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let counters: std::collections::BTreeSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for l in openmetrics.lines() {
        if l == "# EOF" {
            continue;
        }
        // The text format has no exemplars.
        let l = match l.split_once(" # {") {
            Some((sample, _)) if !l.starts_with('#') => sample,
            _ => l,
        };
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|p| {
            let rest = l.strip_prefix(p)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{p}{name}_total {tail}"))
        });
        match renamed {
            Some(r) => out.push_str(&r),
            None => out.push_str(l),
        }
        out.push('\n');
    }
    out
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    /// `GET /metrics` (with the token when one is needed); `true` when the
    /// client accepts OpenMetrics (Prometheus does), else the text format.
    Metrics(bool),
    /// Missing or wrong bearer token.
    Unauthorized,
    /// Another path.
    NotFound,
    /// Another method.
    MethodNotAllowed,
    /// Not HTTP.
    Bad,
}

/// Parses a request head (pure: unit-tested).
pub fn parse_request(head: &str, token: Option<&str>) -> Request {
    let mut lines = head.split("\r\n");
    let first = lines.next().unwrap_or("");
    let mut parts = first.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Request::Bad;
    };
    if !version.starts_with("HTTP/1.") {
        return Request::Bad;
    }
    if method != "GET" && method != "HEAD" {
        return Request::MethodNotAllowed;
    }
    let path = target.split('?').next().unwrap_or("");
    if path != "/metrics" {
        return Request::NotFound;
    }
    let headers: Vec<&str> = lines.collect();
    let header = |name: &'static str| {
        headers.iter().filter_map(move |l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then_some(v.trim())
        })
    };
    let openmetrics = header("accept").any(|v| v.contains("application/openmetrics-text"));
    if let Some(t) = token {
        let ok = header("authorization").any(|v| {
            v.strip_prefix("Bearer ")
                .is_some_and(|got| ct_eq(got.trim().as_bytes(), t.as_bytes()))
        });
        if !ok {
            return Request::Unauthorized;
        }
    }
    Request::Metrics(openmetrics)
}

/// Connections served at once (each on its own thread).
pub const MAX_CONNECTIONS: usize = 8;

/// The endpoint's connections: those still sending their request head
/// (oldest first, a clone to close them by) and how many are open.
#[derive(Debug, Default)]
struct Slots {
    next_id: u64,
    open: usize,
    reading: std::collections::VecDeque<(u64, TcpStream)>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Slots {
    /// Takes a slot for `c`: when all are open, the oldest connection still
    /// reading its head is closed to make room; when every one is already
    /// answering, `None` (refused). Open connections never exceed
    /// `2 × MAX_CONNECTIONS` (a closed one's thread ends at its next read).
    fn admit(&mut self, c: &TcpStream) -> Option<u64> {
        if self.open >= MAX_CONNECTIONS {
            let (_, oldest) = self.reading.pop_front()?;
            let _ = oldest.shutdown(std::net::Shutdown::Both);
            if self.open >= 2 * MAX_CONNECTIONS {
                return None;
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        self.open += 1;
        if let Ok(clone) = c.try_clone() {
            self.reading.push_back((id, clone));
        }
        Some(id)
    }

    /// Connection `id` has sent its head: it is answered, not closed.
    fn headed(&mut self, id: u64) {
        self.reading.retain(|(i, _)| *i != id);
    }

    /// Connection `id` is over.
    fn done(&mut self, id: u64) {
        self.headed(id);
        self.open = self.open.saturating_sub(1);
    }
}

fn handle(
    mut c: TcpStream,
    token: Option<&str>,
    render: &dyn Fn() -> Arc<str>,
    headed: &dyn Fn(),
) -> std::io::Result<()> {
    let deadline = std::time::Instant::now() + CONN_DEADLINE;
    c.set_write_timeout(Some(CONN_DEADLINE))?;
    let mut buf = vec![0u8; MAX_REQUEST];
    let mut n = 0;
    let head_end = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || n == buf.len() {
            break None;
        }
        c.set_read_timeout(Some(left))?;
        // A timeout or a reset ends the request as incomplete (400).
        let r = c.read(&mut buf[n..]).unwrap_or(0);
        if r == 0 {
            break None;
        }
        n += r;
        if let Some(p) = buf[..n].windows(4).position(|w| w == b"\r\n\r\n") {
            break Some(p);
        }
    };
    headed();
    let req = match head_end {
        Some(p) => parse_request(&String::from_utf8_lossy(&buf[..p]), token),
        None => Request::Bad,
    };
    let (status, ctype, body) = match req {
        Request::Metrics(true) => ("200 OK", CONTENT_TYPE, render().to_string()),
        Request::Metrics(false) => ("200 OK", TEXT_CONTENT_TYPE, to_prometheus_text(&render())),
        Request::Unauthorized => (
            "401 Unauthorized",
            "text/plain",
            "bearer token required\n".to_string(),
        ),
        Request::NotFound => ("404 Not Found", "text/plain", "only /metrics\n".to_string()),
        Request::MethodNotAllowed => (
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n".to_string(),
        ),
        Request::Bad => ("400 Bad Request", "text/plain", "bad request\n".to_string()),
    };
    let extra = if req == Request::Unauthorized {
        "WWW-Authenticate: Bearer\r\n"
    } else {
        ""
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    );
    c.write_all(head.as_bytes())?;
    c.write_all(body.as_bytes())?;
    c.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_parsed_with_and_without_a_token() {
        let get = "GET /metrics HTTP/1.1\r\nHost: x";
        assert_eq!(parse_request(get, None), Request::Metrics(false));
        let om = "GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5";
        assert_eq!(parse_request(om, None), Request::Metrics(true));
        assert_eq!(
            parse_request(get, Some("0123456789abcdef")),
            Request::Unauthorized
        );
        let auth = "GET /metrics HTTP/1.1\r\nauthorization: Bearer 0123456789abcdef";
        assert_eq!(
            parse_request(auth, Some("0123456789abcdef")),
            Request::Metrics(false)
        );
        assert_eq!(
            parse_request(auth, Some("0123456789abcdeX")),
            Request::Unauthorized
        );
        assert_eq!(parse_request("GET / HTTP/1.1", None), Request::NotFound);
        assert_eq!(
            parse_request("POST /metrics HTTP/1.1", None),
            Request::MethodNotAllowed
        );
        assert_eq!(parse_request("hello", None), Request::Bad);
    }

    /// A flood of scrapes from one client: ~10,000 a second once cost
    /// ~1.1 CPU, every one a full render. Now one client gets at most one
    /// render per MIN_RENDER_INTERVAL, the rest the cached text (the same
    /// bytes), and the endpoint's threads count their CPU time. Eight
    /// clients at once on one address: with the address asked of the
    /// connection late, one the endpoint had closed to make room had none,
    /// and was rendered for without a limit (130 renders a second).
    #[test]
    fn a_scrape_flood_is_bounded_per_client_and_its_cpu_counted_apart() {
        let renders = Arc::new(AtomicU64::new(0));
        let r2 = Arc::clone(&renders);
        let server = serve("127.0.0.1:0".parse().unwrap(), None, move || {
            let n = r2.fetch_add(1, Ordering::SeqCst);
            // A render that costs CPU, as watch's does.
            let mut s = String::new();
            for k in 0..2000 {
                s.push_str(&format!("m_{k} {n}\n"));
            }
            s.push_str("# EOF\n");
            s
        })
        .unwrap();
        let addr = server.addr();
        let cpu0 = endpoint_cpu_ns();
        let t0 = std::time::Instant::now();
        let clients: Vec<_> = (0..8)
            .map(|_| {
                std::thread::spawn(move || {
                    let (mut answered, mut closed) = (0u64, 0u64);
                    let mut served = std::collections::BTreeSet::new();
                    while t0.elapsed() < Duration::from_millis(1200) {
                        let mut c = TcpStream::connect(addr).unwrap();
                        let mut out = String::new();
                        let sent = c.write_all(
                            b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text\r\n\r\n",
                        );
                        if sent.is_err() || c.read_to_string(&mut out).is_err() || out.is_empty() {
                            // Closed to make room for a newer connection.
                            closed += 1;
                            continue;
                        }
                        if out.starts_with("HTTP/1.1 429 Too Many Requests\r\n") {
                            closed += 1;
                            continue;
                        }
                        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out:.200}");
                        // Every answer is a whole render.
                        let body = out.split_once("\r\n\r\n").unwrap().1;
                        assert!(body.ends_with("\n# EOF\n"), "{body:.100}");
                        served.insert(body.lines().next().unwrap().to_string());
                        answered += 1;
                    }
                    (answered, closed, served)
                })
            })
            .collect();
        let (mut answered, mut closed) = (0, 0);
        let mut served = std::collections::BTreeSet::new();
        for c in clients {
            let (a, z, s) = c.join().unwrap();
            answered += a;
            closed += z;
            served.extend(s);
        }
        let elapsed = t0.elapsed();
        drop(server);
        let n = renders.load(Ordering::SeqCst);
        let bound = (elapsed.as_nanos() / MIN_RENDER_INTERVAL.as_nanos()) as u64 + 1;
        assert!(
            answered > 4 * bound,
            "the flood was too slow to test: {answered} answered, {closed} closed"
        );
        assert!(
            n <= bound,
            "{n} full renders for {answered} scrapes ({closed} closed) in {elapsed:?}: bound {bound}"
        );
        // The cached answers are renders that were made (no other text).
        assert!(served.len() as u64 <= n, "{served:?}");
        assert!(
            endpoint_cpu_ns() > cpu0,
            "the endpoint's CPU was not counted"
        );
    }

    #[test]
    fn a_client_over_its_window_is_refused_until_the_next() {
        let mut w = Windows::default();
        let t = std::time::Instant::now();
        let a = std::net::IpAddr::from([10, 0, 0, 1]);
        let b = std::net::IpAddr::from([10, 0, 0, 2]);
        for _ in 0..MAX_CONNECTIONS_PER_WINDOW {
            assert!(!w.too_many(a, t));
        }
        assert!(w.too_many(a, t + MIN_RENDER_INTERVAL / 2));
        // Another client is not held back by the first.
        assert!(!w.too_many(b, t + MIN_RENDER_INTERVAL / 2));
        // The next window starts afresh.
        assert!(!w.too_many(a, t + MIN_RENDER_INTERVAL));
        for k in 0..(MAX_CLIENTS as u32 + 10) {
            let _ = w.too_many(std::net::IpAddr::from(k.to_be_bytes()), t);
        }
        assert!(w.seen.len() <= MAX_CLIENTS);
    }

    #[test]
    fn the_limiter_forgets_clients_beyond_its_bound() {
        let mut l = Limiter::default();
        let t = std::time::Instant::now();
        let ip = |k: u32| std::net::IpAddr::from(k.to_be_bytes());
        // No text yet: everyone renders.
        assert!(l.cached_for(ip(1), t).is_none());
        l.text = Some(Arc::from("x"));
        assert_eq!(l.cached_for(ip(1), t).as_deref(), Some("x"));
        assert!(l.cached_for(ip(1), t + MIN_RENDER_INTERVAL).is_none());
        for k in 2..(MAX_CLIENTS as u32 + 10) {
            assert!(l.cached_for(ip(k), t + MIN_RENDER_INTERVAL).is_none());
        }
        assert!(l.last.len() <= MAX_CLIENTS, "{}", l.last.len());
    }

    #[test]
    fn the_text_format_names_counters_as_their_samples() {
        let om = "# HELP a_b Wake-ups.\n# TYPE a_b counter\na_b_total{cpu=\"0\"} 3\n# TYPE g gauge\ng 1\n# EOF\n";
        assert_eq!(
            to_prometheus_text(om),
            "# HELP a_b_total Wake-ups.\n# TYPE a_b_total counter\na_b_total{cpu=\"0\"} 3\n# TYPE g gauge\ng 1\n"
        );
    }
}
