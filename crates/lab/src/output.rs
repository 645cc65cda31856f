//! Output formats other tools already read: cyclictest's `-h` histogram
//! text, rt-tests' JSON v1 and cyclictest's status line.
//!
//! The formats follow rt-tests 2.4 (`cyclictest -h N`, `--json FILE`,
//! `src/lib/rt-utils.c` `rt_write_json`) byte for byte, so the plotting
//! scripts written for cyclictest (OSADL's, rteval's) read firmtime's files
//! unchanged. Two rt-tests quirks are kept on purpose: the JSON keys
//! `"cmdline:"` and `"rt_test_version:"` end in a colon, and `"avg"` has
//! two decimals.
//!
//! One extension: cyclictest never sees a negative latency, firmtime can
//! (a wake before the deadline). Negative samples are kept out of the
//! buckets and counted as *underflows*: a `# Histogram Underflows:` line in
//! the text and an `"underflows"` key in the JSON thread object, both
//! written only when some thread has underflows.
//!
//! # RT contract
//!
//! [`ThreadHist::new`] allocates everything; [`ThreadHist::record_ns`] and
//! [`ThreadHist::record_us`] are **RT-safe**. Writing and parsing run after
//! the measured loop.

use std::fmt;
use std::io::Write;
use std::time::SystemTime;

use crate::error::{Error, ErrorKind, Result};
use firmtime_rt::system::{PreemptModel, SystemInfo};
use serde::Serialize;

/// One thread's (or one condition's) latency histogram in cyclictest's
/// model: 1 µs buckets `0..len`, larger values counted as overflows with
/// the cycle number of the first `len` of them, min/avg/max in µs.
///
/// Fields are public so a histogram read back with
/// [`parse_cyclictest_histogram`] or built from other data can be written
/// again. Built with [`new`](Self::new), recording is RT-safe.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadHist {
    /// Count per 1 µs bucket; the length is cyclictest's `-h` value.
    pub buckets: Vec<u64>,
    /// Samples at or above `buckets.len()` µs.
    pub overflows: u64,
    /// 0-based cycle numbers of the first `buckets.len()` overflows (as
    /// cyclictest logs them); the rest are reported as "others".
    pub overflow_cycles: Vec<u64>,
    /// Negative samples (kept out of the buckets; see the module docs).
    pub underflows: u64,
    /// Samples recorded (buckets + overflows + underflows).
    pub cycles: u64,
    /// Smallest sample, µs (0 when `cycles == 0`).
    pub min_us: i64,
    /// Largest sample, µs (0 when `cycles == 0`).
    pub max_us: i64,
    /// Latest sample, µs (the status line's `Act:`).
    pub act_us: i64,
    /// Sum of all samples, µs; `avg = sum_us / cycles`.
    pub sum_us: f64,
    /// CPU the thread ran on (`-1` if not pinned), for the JSON.
    pub cpu: i32,
    /// NUMA node of the thread (`-1` if unknown; cyclictest writes 0 when
    /// it does not use NUMA), for the JSON.
    pub node: i32,
}

impl ThreadHist {
    /// A histogram of `buckets` 1 µs buckets (cyclictest's `-h buckets`),
    /// with room to log `buckets` overflow cycle numbers. CPU and node are
    /// 0; set the fields if you know better.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] if `buckets` is 0.
    pub fn new(buckets: usize) -> Result<Self> {
        if buckets == 0 {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "a cyclictest histogram needs at least 1 bucket (1 µs each); \
                 choose a histogram size such as 1000",
            ));
        }
        Ok(Self {
            buckets: vec![0; buckets],
            overflows: 0,
            overflow_cycles: Vec::with_capacity(buckets),
            underflows: 0,
            cycles: 0,
            min_us: 0,
            max_us: 0,
            act_us: 0,
            sum_us: 0.0,
            cpu: 0,
            node: 0,
        })
    }

    /// Records one latency in ns, truncated toward zero to whole µs as
    /// cyclictest does.
    ///
    /// **RT-safe** for a histogram built with [`new`](Self::new): never
    /// allocates, locks or blocks.
    #[inline]
    pub fn record_ns(&mut self, latency_ns: i64) {
        self.record_us(latency_ns / 1000);
    }

    /// Records one latency in whole µs.
    ///
    /// **RT-safe** for a histogram built with [`new`](Self::new): never
    /// allocates, locks or blocks.
    pub fn record_us(&mut self, us: i64) {
        let cycle = self.cycles;
        if cycle == 0 {
            self.min_us = us;
            self.max_us = us;
        } else {
            self.min_us = self.min_us.min(us);
            self.max_us = self.max_us.max(us);
        }
        self.cycles += 1;
        self.act_us = us;
        self.sum_us += us as f64;
        if us < 0 {
            self.underflows += 1;
        } else if (us as u64) < self.buckets.len() as u64 {
            self.buckets[us as usize] += 1;
        } else {
            self.overflows += 1;
            if self.overflow_cycles.len() < self.buckets.len()
                && self.overflow_cycles.len() < self.overflow_cycles.capacity()
            {
                self.overflow_cycles.push(cycle);
            }
        }
    }

    /// Samples inside the buckets (cyclictest's `# Total:`).
    pub fn total(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// Mean latency in µs (0.0 when empty).
    pub fn avg_us(&self) -> f64 {
        if self.cycles == 0 {
            0.0
        } else {
            self.sum_us / self.cycles as f64
        }
    }

    /// Mean truncated to whole µs, as cyclictest prints it.
    fn avg_trunc(&self) -> i64 {
        self.avg_us() as i64
    }

    /// The status line for this histogram's statistics.
    pub fn status_line(&self, thread: usize, tid: i32, prio: i32, interval_us: u64) -> StatusLine {
        StatusLine {
            thread,
            tid,
            prio,
            interval_us,
            cycles: self.cycles,
            min_us: self.min_us,
            act_us: self.act_us,
            avg_us: self.avg_trunc(),
            max_us: self.max_us,
        }
    }
}

fn output_err(e: std::io::Error) -> Error {
    Error::new(
        ErrorKind::Output,
        format!("writing the histogram failed: {e}; check the disk space and the file's directory"),
    )
}

/// Writes `threads` in cyclictest's `-h` text format (rt-tests 2.4):
/// `# Histogram`, one row per µs bucket with one tab-separated column per
/// thread, then `# Total:`, `# Min Latencies:`, `# Avg Latencies:`,
/// `# Max Latencies:`, `# Histogram Overflows:`, `# Histogram Overflow at
/// cycle number:` with one `# Thread N:` line each, and a blank line.
///
/// With `sum_column` (cyclictest's `-H`) and more than one thread, rows,
/// `Total`, `Max` and `Overflows` get an extra all-threads column.
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`] if `threads` is empty or the threads have
/// different bucket counts; [`ErrorKind::Output`] if writing fails.
pub fn write_cyclictest_histogram(
    w: &mut impl Write,
    threads: &[ThreadHist],
    sum_column: bool,
) -> Result<()> {
    let Some(first) = threads.first() else {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "no histogram to write: the measurement recorded no thread",
        ));
    };
    let n = first.buckets.len();
    if threads.iter().any(|t| t.buckets.len() != n) {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "cannot write threads with different histogram sizes in one cyclictest file; \
             create every ThreadHist with the same number of buckets",
        ));
    }
    let sum = sum_column && threads.len() > 1;
    let mut s = String::with_capacity(16 + n * (7 + 7 * threads.len()));
    use fmt::Write as _;
    let _ = writeln!(s, "# Histogram");
    for i in 0..n {
        let _ = write!(s, "{i:06} ");
        let mut all = 0u64;
        for (j, t) in threads.iter().enumerate() {
            if j > 0 {
                s.push('\t');
            }
            let _ = write!(s, "{:06}", t.buckets[i]);
            all += t.buckets[i];
        }
        if sum {
            let _ = write!(s, "\t{all:06}");
        }
        s.push('\n');
    }
    s.push_str("# Total:");
    for t in threads {
        let _ = write!(s, " {:09}", t.total());
    }
    if sum {
        let _ = write!(
            s,
            " {:09}",
            threads.iter().map(ThreadHist::total).sum::<u64>()
        );
    }
    s.push_str("\n# Min Latencies:");
    for t in threads {
        let _ = write!(s, " {:05}", t.min_us);
    }
    s.push_str("\n# Avg Latencies:");
    for t in threads {
        let _ = write!(s, " {:05}", t.avg_trunc());
    }
    s.push_str("\n# Max Latencies:");
    for t in threads {
        let _ = write!(s, " {:05}", t.max_us);
    }
    if sum {
        let maxmax = threads.iter().map(|t| t.max_us).max().unwrap_or(0).max(0);
        let _ = write!(s, " {maxmax:05}");
    }
    s.push_str("\n# Histogram Overflows:");
    for t in threads {
        let _ = write!(s, " {:05}", t.overflows);
    }
    if sum {
        let _ = write!(
            s,
            " {:05}",
            threads.iter().map(|t| t.overflows).sum::<u64>()
        );
    }
    s.push('\n');
    if threads.iter().any(|t| t.underflows > 0) {
        s.push_str("# Histogram Underflows:");
        for t in threads {
            let _ = write!(s, " {:05}", t.underflows);
        }
        s.push('\n');
    }
    s.push_str("# Histogram Overflow at cycle number:\n");
    for (i, t) in threads.iter().enumerate() {
        let _ = write!(s, "# Thread {i}:");
        for c in &t.overflow_cycles {
            let _ = write!(s, " {c:05}");
        }
        let logged = t.overflow_cycles.len() as u64;
        if logged < t.overflows {
            let _ = write!(s, " # {:05} others", t.overflows - logged);
        }
        s.push('\n');
    }
    s.push('\n');
    w.write_all(s.as_bytes()).map_err(output_err)
}

/// A cyclictest `-h` histogram read back by [`parse_cyclictest_histogram`].
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedHistogram {
    /// One histogram per thread, in column order. `cycles` is
    /// `Total + overflows + underflows`; `sum_us` is `avg × cycles`, so the
    /// average is the file's (truncated) one; `act_us` is 0.
    pub threads: Vec<ThreadHist>,
    /// The file had an all-threads column (cyclictest `-H`).
    pub sum_column: bool,
}

fn parse_err(line_no: usize, what: &str) -> Error {
    Error::new(
        ErrorKind::InvalidInput,
        format!(
            "line {line_no} of the cyclictest histogram: {what}; \
             expected the text cyclictest -h writes"
        ),
    )
}

fn parse_nums<T: std::str::FromStr>(rest: &str, line_no: usize) -> Result<Vec<T>> {
    rest.split_whitespace()
        .map(|x| {
            x.parse()
                .map_err(|_| parse_err(line_no, &format!("{x:?} is not a number")))
        })
        .collect()
}

/// Parses cyclictest's `-h`/`-H` histogram text (as written by cyclictest
/// or by [`write_cyclictest_histogram`]). Other `#` lines (cyclictest's
/// `# /dev/cpu_dma_latency set to 0us`, `# Thread Ids:`) and blank lines
/// are ignored. Rows may be sparse (newer rt-tests skip empty buckets);
/// the bucket count is then the last row's index + 1.
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`] naming the line, if a number is malformed,
/// the `# Min Latencies:` line is missing, or the columns disagree.
pub fn parse_cyclictest_histogram(text: &str) -> Result<ParsedHistogram> {
    let mut rows: Vec<(usize, Vec<u64>)> = Vec::new();
    let mut total: Option<Vec<u64>> = None;
    let mut min: Option<Vec<i64>> = None;
    let mut avg: Option<Vec<i64>> = None;
    let mut max: Option<Vec<i64>> = None;
    let mut oflows: Option<Vec<u64>> = None;
    let mut uflows: Option<Vec<u64>> = None;
    let mut cycles_at: Vec<(usize, Vec<u64>)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let no = i + 1;
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        if let Some(c) = line.strip_prefix('#') {
            let c = c.trim_start();
            if let Some(r) = c.strip_prefix("Total:") {
                total = Some(parse_nums(r, no)?);
            } else if let Some(r) = c.strip_prefix("Min Latencies:") {
                min = Some(parse_nums(r, no)?);
            } else if let Some(r) = c.strip_prefix("Avg Latencies:") {
                avg = Some(parse_nums(r, no)?);
            } else if let Some(r) = c.strip_prefix("Max Latencies:") {
                max = Some(parse_nums(r, no)?);
            } else if let Some(r) = c.strip_prefix("Histogram Overflows:") {
                oflows = Some(parse_nums(r, no)?);
            } else if let Some(r) = c.strip_prefix("Histogram Underflows:") {
                uflows = Some(parse_nums(r, no)?);
            } else if let Some(r) = c.strip_prefix("Thread ") {
                if let Some((idx, list)) = r.split_once(':') {
                    if let Ok(idx) = idx.trim().parse::<usize>() {
                        // " 00012 00034 # 00005 others": the count of others
                        // is implied by the overflow total, drop it.
                        let list = list.split('#').next().unwrap_or("");
                        cycles_at.push((idx, parse_nums(list, no)?));
                    }
                }
            }
            continue;
        }
        let mut it = line.split_whitespace();
        let idx = it.next().unwrap_or("");
        let idx: usize = idx
            .parse()
            .map_err(|_| parse_err(no, &format!("bucket index {idx:?} is not a number")))?;
        let counts = parse_nums(&it.collect::<Vec<_>>().join(" "), no)?;
        rows.push((idx, counts));
    }
    let min = min.ok_or_else(|| parse_err(0, "no \"# Min Latencies:\" line"))?;
    let nthreads = min.len();
    if nthreads == 0 {
        return Err(parse_err(0, "\"# Min Latencies:\" lists no thread"));
    }
    let sum_column = rows.first().is_some_and(|(_, c)| c.len() == nthreads + 1);
    let ncols = nthreads + usize::from(sum_column);
    let nbuckets = rows.iter().map(|(i, _)| i + 1).max().unwrap_or(0);
    let get = |v: &Option<Vec<i64>>, j: usize| v.as_ref().and_then(|v| v.get(j)).copied();
    let getu = |v: &Option<Vec<u64>>, j: usize| v.as_ref().and_then(|v| v.get(j)).copied();
    let mut threads = Vec::with_capacity(nthreads);
    for j in 0..nthreads {
        let mut buckets = vec![0u64; nbuckets];
        for (idx, counts) in &rows {
            if counts.len() != ncols {
                return Err(parse_err(
                    0,
                    &format!(
                        "bucket {idx} has {} columns, expected {ncols}",
                        counts.len()
                    ),
                ));
            }
            buckets[*idx] = counts[j];
        }
        let in_buckets: u64 = buckets.iter().sum();
        let overflows = getu(&oflows, j).unwrap_or(0);
        let underflows = getu(&uflows, j).unwrap_or(0);
        let cycles = getu(&total, j).unwrap_or(in_buckets) + overflows + underflows;
        let avg_us = get(&avg, j).unwrap_or(0);
        threads.push(ThreadHist {
            buckets,
            overflows,
            overflow_cycles: cycles_at
                .iter()
                .find(|(i, _)| *i == j)
                .map(|(_, c)| c.clone())
                .unwrap_or_default(),
            underflows,
            cycles,
            min_us: min[j],
            max_us: get(&max, j).unwrap_or(0),
            act_us: 0,
            sum_us: avg_us as f64 * cycles as f64,
            cpu: 0,
            node: 0,
        });
    }
    Ok(ParsedHistogram {
        threads,
        sum_column,
    })
}

/// `uname -s` of every Linux kernel (its UTS_SYSNAME), the `sysname` of
/// rt-tests JSON.
const SYSNAME: &str = "Linux";

/// The `sysinfo` block of rt-tests JSON, from the one machine report:
/// `sysname`, `nodename` (host name), `release`, `version`, `machine`
/// (`uname -s/-n/-r/-v/-m`) and `realtime` (1 on a PREEMPT_RT kernel, as
/// `/sys/kernel/realtime` says).
#[derive(Serialize)]
struct RtTestsSysinfo<'a> {
    sysname: &'static str,
    nodename: &'a str,
    release: &'a str,
    version: &'a str,
    machine: &'a str,
    realtime: u8,
}

impl<'a> RtTestsSysinfo<'a> {
    fn of(si: &'a SystemInfo) -> Self {
        RtTestsSysinfo {
            sysname: SYSNAME,
            nodename: si.hostname.as_deref().unwrap_or(""),
            release: &si.kernel_release,
            version: &si.kernel_version,
            machine: &si.arch,
            realtime: u8::from(si.preempt_model == PreemptModel::Rt),
        }
    }
}

/// A time in rt-tests' JSON format: local time, RFC 2822
/// (`strftime("%a, %d %b %Y %T %z")`), e.g. `Sun, 22 Nov 2026 02:10:16 +0000`.
/// Falls back to UTC if the local time zone cannot be read.
pub fn rt_tests_timestamp(t: SystemTime) -> String {
    let secs = match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => d.as_secs() as libc::time_t,
        Err(e) => -(e.duration().as_secs() as libc::time_t),
    };
    // SAFETY: tm is plain old data; all-zero is a valid value.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call; localtime_r is reentrant.
    let ok = !unsafe { libc::localtime_r(&secs, &mut tm) }.is_null();
    if !ok {
        // SAFETY: as above; gmtime_r is reentrant.
        unsafe { libc::gmtime_r(&secs, &mut tm) };
    }
    let mut buf = [0u8; 64];
    // SAFETY: buf is writable for its length, the format is NUL-terminated,
    // tm is initialized; strftime writes at most buf.len() bytes.
    let n = unsafe {
        libc::strftime(
            buf.as_mut_ptr().cast(),
            buf.len(),
            c"%a, %d %b %Y %T %z".as_ptr(),
            &tm,
        )
    };
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// The run-level fields of an rt-tests JSON v1 file.
#[derive(Debug, Clone, PartialEq)]
pub struct RtTestsHeader {
    /// The command line, space-separated (written under `"cmdline:"`).
    pub cmdline: String,
    /// The tool's version (written under `"rt_test_version:"`), e.g.
    /// firmtime's `CARGO_PKG_VERSION`.
    pub version: String,
    /// Start time, see [`rt_tests_timestamp`].
    pub start_time: String,
    /// End time, see [`rt_tests_timestamp`].
    pub end_time: String,
    /// The exit status of the run.
    pub return_code: i32,
    /// The machine (written as rt-tests' `sysinfo` block), e.g.
    /// [`SystemInfo::collect`] or a [`Provenance`](firmtime_rt::system::Provenance)'s `system`.
    pub sysinfo: SystemInfo,
}

/// An rt-tests JSON v1 file, in cyclictest's key order.
#[derive(Serialize)]
struct RtTestsFile<'a> {
    file_version: u32,
    #[serde(rename = "cmdline:")]
    cmdline: &'a str,
    #[serde(rename = "rt_test_version:")]
    version: &'a str,
    start_time: &'a str,
    end_time: &'a str,
    return_code: i32,
    sysinfo: RtTestsSysinfo<'a>,
    num_threads: usize,
    resolution_in_ns: u32,
    thread: RtTestsThreads<'a>,
}

/// `"thread": {"0": {…}, "1": {…}}`.
struct RtTestsThreads<'a>(&'a [ThreadHist]);

impl Serialize for RtTestsThreads<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (i, t) in self.0.iter().enumerate() {
            let t = RtTestsThread::of(t).map_err(serde::ser::Error::custom)?;
            m.serialize_entry(&i.to_string(), &t)?;
        }
        m.end()
    }
}

/// One thread: cyclictest writes `avg` with 2 decimals, `underflows` only
/// when non-zero.
#[derive(Serialize)]
struct RtTestsThread<'a> {
    histogram: RtTestsHistogram<'a>,
    cycles: u64,
    min: i64,
    max: i64,
    avg: Box<serde_json::value::RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    underflows: Option<u64>,
    cpu: i32,
    node: i32,
}

impl<'a> RtTestsThread<'a> {
    fn of(t: &'a ThreadHist) -> serde_json::Result<Self> {
        let a = t.avg_us();
        let a = if a.is_finite() { a } else { 0.0 };
        let avg = serde_json::value::RawValue::from_string(format!("{a:.2}"))?;
        Ok(RtTestsThread {
            histogram: RtTestsHistogram(&t.buckets),
            cycles: t.cycles,
            min: t.min_us,
            max: t.max_us,
            avg,
            underflows: (t.underflows > 0).then_some(t.underflows),
            cpu: t.cpu,
            node: t.node,
        })
    }
}

/// `"histogram": {"<µs>": count}` for the non-empty buckets, in µs order.
struct RtTestsHistogram<'a>(&'a [u64]);

impl Serialize for RtTestsHistogram<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        for (us, &c) in self.0.iter().enumerate().filter(|(_, &c)| c != 0) {
            m.serialize_entry(&us.to_string(), &c)?;
        }
        m.end()
    }
}

/// Writes an rt-tests JSON v1 file (the layout of `cyclictest --json`):
/// header fields, `sysinfo`, `num_threads`, `resolution_in_ns` (0: values
/// are µs) and per thread `histogram` (`"<µs>": count` for non-empty
/// buckets), `cycles`, `min`, `max`, `avg` (2 decimals), `cpu`, `node`,
/// plus `underflows` when non-zero.
///
/// # Errors
///
/// [`ErrorKind::Output`] if writing fails.
pub fn write_rt_tests_json(
    w: &mut impl Write,
    header: &RtTestsHeader,
    threads: &[ThreadHist],
) -> Result<()> {
    let file = RtTestsFile {
        file_version: 1,
        cmdline: &header.cmdline,
        version: &header.version,
        start_time: &header.start_time,
        end_time: &header.end_time,
        return_code: header.return_code,
        sysinfo: RtTestsSysinfo::of(&header.sysinfo),
        num_threads: threads.len(),
        resolution_in_ns: 0,
        thread: RtTestsThreads(threads),
    };
    let mut out =
        serde_json::to_vec_pretty(&file).map_err(|e| output_err(std::io::Error::other(e)))?;
    out.push(b'\n');
    w.write_all(&out).map_err(output_err)
}

/// One cyclictest status line; [`fmt::Display`] renders it exactly as
/// cyclictest does in µs mode:
/// `T: 0 ( 1234) P:80 I:1000 C:   1000 Min:      5 Act:   10 Avg:   12 Max:     100`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusLine {
    /// Thread index.
    pub thread: usize,
    /// Kernel thread id.
    pub tid: i32,
    /// Real-time priority.
    pub prio: i32,
    /// Period, µs.
    pub interval_us: u64,
    /// Cycles so far.
    pub cycles: u64,
    /// Smallest latency, µs.
    pub min_us: i64,
    /// Latest latency, µs.
    pub act_us: i64,
    /// Mean latency, µs (truncated).
    pub avg_us: i64,
    /// Largest latency, µs.
    pub max_us: i64,
}

impl fmt::Display for StatusLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "T:{:2} ({:5}) P:{:2} I:{} C:{:7} Min:{:7} Act:{:5} Avg:{:5} Max:{:8}",
            self.thread,
            self.tid,
            self.prio,
            self.interval_us,
            self.cycles,
            self.min_us,
            self.act_us,
            self.avg_us,
            self.max_us
        )
    }
}

/// The status line as a `String` (see [`StatusLine`]).
pub fn cyclictest_status_line(line: &StatusLine) -> String {
    line.to_string()
}
