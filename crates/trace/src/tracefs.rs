//! A private tracefs instance and the drainer that empties its per-CPU
//! binary ring buffers.
//!
//! [`Instance::create`] mounts tracefs if needed (and says so), makes
//! `instances/firmtime-<pid>` so the global trace is left alone, sets the
//! `mono` trace clock (CLOCK_MONOTONIC, comparable with
//! [`firmtime_rt::clock::monotonic_ns`]) and the buffer size, and enables
//! the events of [`crate::raw::EVENTS`] that this kernel has. Dropping it
//! stops tracing and removes the instance.
//!
//! # RT contract
//! Not RT code. The drainer ([`drain`]) is an ordinary thread that wakes
//! every few tens of milliseconds, like klogger's export daemon; it decodes
//! into a vector preallocated (and touched) before tracing starts and
//! counts, never grows past, what does not fit.

use crate::error::{Error, ErrorKind, Result};
use crate::loss::{Loss, LossLog};
use crate::raw::{Decoder, Event, EventKind, Format, EVENTS, KERNEL_STACK_EVENT};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Where tracefs lives.
pub const TRACEFS: &str = "/sys/kernel/tracing";

/// A tracefs instance of this process. Removed on drop.
#[derive(Debug)]
pub struct Instance {
    path: PathBuf,
    /// True if this call mounted tracefs (it was not mounted).
    pub mounted: bool,
    /// The events enabled.
    pub events: Vec<EventKind>,
    /// Their tracefs paths (`sched/sched_switch`, …).
    paths: Vec<&'static str>,
    /// Decoder built from this kernel's formats.
    pub decoder: Decoder,
    /// The trace clock is `mono` (CLOCK_MONOTONIC): page time stamps
    /// compare with [`firmtime_rt::clock::monotonic_ns`].
    pub mono_clock: bool,
    /// The `trigger` files this instance wrote a `stacktrace` trigger to
    /// ([`Instance::add_stack_trigger`]); removed before the instance is.
    triggers: Vec<PathBuf>,
}

fn io(what: &str, e: std::io::Error) -> Error {
    let kind = match e.kind() {
        std::io::ErrorKind::PermissionDenied => ErrorKind::Unavailable,
        _ => ErrorKind::Io,
    };
    let hint = if kind == ErrorKind::Unavailable {
        " — lab trace needs root (tracefs instances and tracepoints): run it with sudo"
    } else {
        ""
    };
    Error::new(kind, format!("{what}: {e}{hint}"))
}

fn write(path: &Path, value: &str) -> Result<()> {
    std::fs::write(path, value)
        .map_err(|e| io(&format!("writing {value:?} to {}", path.display()), e))
}

/// A fresh instance name for this process: `firmtime-<pid>`, then
/// `firmtime-<pid>-2`, … for further instances (runs may overlap in tests).
pub fn instance_name() -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    if n == 1 {
        format!("firmtime-{pid}")
    } else {
        format!("firmtime-{pid}-{n}")
    }
}

/// Removes the instances ([`instance_name`]) of firmtime processes that
/// are gone: one killed while tracing (SIGKILL) leaves its instance and
/// its ring buffers behind.
fn remove_orphans(instances: &Path) {
    let Ok(dir) = std::fs::read_dir(instances) else {
        return;
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = orphan_pid(&name.to_string_lossy()) else {
            continue;
        };
        if !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

/// The pid in an instance name of [`instance_name`]'s form
/// (`firmtime-PID`, `firmtime-PID-N`, `firmtime-PID-N-explain`).
fn orphan_pid(name: &str) -> Option<u32> {
    name.strip_prefix("firmtime-")?
        .split('-')
        .next()?
        .parse()
        .ok()
}

/// Reads a tracefs text file. Some (`events/header_page`) misbehave on the
/// small first read `read_to_string` makes, so read with one large buffer.
///
/// # Errors
/// The open or read error.
pub fn read_text(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 256 * 1024];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(len * 2, 0);
        }
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(len);
    String::from_utf8(buf).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// True when the effective user is root (tracefs needs it).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Mounts tracefs at [`TRACEFS`] if it is not mounted. Returns true if it mounted it.
///
/// # Errors
/// [`ErrorKind::Unavailable`] if it is not mounted and cannot be (not root,
/// or a kernel without tracefs).
pub fn ensure_mounted() -> Result<bool> {
    let root = Path::new(TRACEFS);
    if root.join("instances").is_dir() {
        return Ok(false);
    }
    if !is_root() {
        return Err(Error::new(
            ErrorKind::Unavailable,
            format!(
                "tracefs is not mounted at {TRACEFS} and mounting it needs root: run `sudo firmtime lab …`, \
                 or `sudo mount -t tracefs nodev {TRACEFS}` first"
            ),
        ));
    }
    let c = |s: &str| std::ffi::CString::new(s).unwrap_or_default();
    let (src, target, fs) = (c("nodev"), c(TRACEFS), c("tracefs"));
    // SAFETY: all pointers are valid NUL-terminated strings that outlive the
    // call; data may be null.
    let r = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            fs.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        return Err(Error::new(
            ErrorKind::Unavailable,
            format!("cannot mount tracefs at {TRACEFS}: {e} (is CONFIG_TRACING enabled?)"),
        ));
    }
    Ok(true)
}

/// The address of the kernel's tick handler (`tick_nohz_handler`, or
/// `tick_sched_timer` on older kernels) from /proc/kallsyms; None when the
/// addresses are hidden (kptr_restrict) or neither symbol exists.
pub fn tick_handler_address() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/kallsyms").ok()?;
    parse_kallsyms(&text, &["tick_nohz_handler", "tick_sched_timer"])
}

/// The address of the first of `names` found in kallsyms text (zero
/// addresses, shown when kptr_restrict hides them, count as absent).
pub fn parse_kallsyms(text: &str, names: &[&str]) -> Option<u64> {
    for want in names {
        for line in text.lines() {
            let mut f = line.split_whitespace();
            let (Some(addr), Some(_), Some(name)) = (f.next(), f.next(), f.next()) else {
                continue;
            };
            if name == *want && f.next().is_none() {
                let a = u64::from_str_radix(addr, 16).ok()?;
                return (a != 0).then_some(a);
            }
        }
    }
    None
}

impl Instance {
    /// Creates `instances/<name>` with `buffer_kb` KiB per CPU and the
    /// known events enabled, tracing off. Removes a stale instance of the same name first.
    ///
    /// # Errors
    /// [`ErrorKind::Unavailable`] without root or tracefs; [`ErrorKind::Io`]
    /// if the kernel refuses a setting or lacks `sched_switch`.
    pub fn create(name: &str, buffer_kb: u32) -> Result<Instance> {
        Self::create_with(name, buffer_kb, &EVENTS)
    }

    /// Like [`Instance::create`], with the events of `events` (tracefs
    /// path and kind; `sched/sched_switch` is required, the others are
    /// enabled when this kernel has them).
    ///
    /// # Errors
    /// As [`Instance::create`].
    pub fn create_with(
        name: &str,
        buffer_kb: u32,
        events: &[(&'static str, EventKind)],
    ) -> Result<Instance> {
        let mounted = ensure_mounted()?;
        let root = Path::new(TRACEFS);
        let hp = read_text(&root.join("events/header_page"))
            .map_err(|e| io("reading tracefs events/header_page", e))?;
        let decoder = Decoder::new(&hp, &[])?;
        remove_orphans(&root.join("instances"));
        let path = root.join("instances").join(name);
        if path.exists() {
            let _ = std::fs::remove_dir(&path);
        }
        std::fs::create_dir(&path)
            .map_err(|e| io(&format!("creating tracefs instance {}", path.display()), e))?;
        // From here on, dropping `inst` removes the directory on any error.
        let mut inst = Instance {
            path,
            mounted,
            events: Vec::new(),
            paths: Vec::new(),
            decoder,
            mono_clock: false,
            triggers: Vec::new(),
        };
        write(&inst.path.join("tracing_on"), "0")?;
        // "mono" is CLOCK_MONOTONIC; older kernels without it keep "local".
        inst.mono_clock = write(&inst.path.join("trace_clock"), "mono").is_ok();
        write(&inst.path.join("buffer_size_kb"), &buffer_kb.to_string())?;
        let mut formats = Vec::new();
        for &(ev, kind) in events {
            let dir = inst.path.join("events").join(ev);
            let Ok(text) = read_text(&dir.join("format")) else {
                if kind == EventKind::Switch {
                    return Err(Error::new(
                        ErrorKind::Unavailable,
                        "this kernel has no sched:sched_switch tracepoint (CONFIG_TRACEPOINTS?)",
                    ));
                }
                continue;
            };
            let f = Format::parse(&text)?;
            write(&dir.join("enable"), "1")?;
            formats.push((kind, f));
            inst.events.push(kind);
            inst.paths.push(ev);
        }
        inst.decoder = Decoder::new(&hp, &formats)?;
        Ok(inst)
    }

    /// The instance's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The tracefs paths of the enabled events (`sched/sched_switch`, …).
    pub fn event_paths(&self) -> &[&'static str] {
        &self.paths
    }

    /// Starts (`true`) or stops recording.
    ///
    /// # Errors
    /// [`ErrorKind::Io`] if `tracing_on` cannot be written.
    pub fn set_on(&self, on: bool) -> Result<()> {
        write(&self.path.join("tracing_on"), if on { "1" } else { "0" })
    }

    /// Enables (`true`) or disables the instance's events, and starts or
    /// stops recording with them. Disabled, the tracepoints are patched out
    /// again (unless another instance uses them): the state of a kernel that
    /// is not tracing at all, not merely one that discards what it records.
    ///
    /// # Errors
    /// [`ErrorKind::Io`] if an `enable` or `tracing_on` file cannot be written.
    pub fn set_events(&self, on: bool) -> Result<()> {
        if !on {
            self.set_on(false)?;
        }
        for ev in &self.paths {
            let v = if on { "1" } else { "0" };
            write(&self.path.join("events").join(ev).join("enable"), v)?;
        }
        if on {
            self.set_on(true)?;
        }
        Ok(())
    }

    /// Sets the filter of event `path` (`exceptions/page_fault_user`) to
    /// `filter` (tracefs filter syntax, e.g. `comm ~ "firmtime-*"`).
    ///
    /// # Errors
    /// [`ErrorKind::Io`] if the kernel rejects the filter.
    pub fn set_filter(&self, path: &str, filter: &str) -> Result<()> {
        write(&self.path.join("events").join(path).join("filter"), filter)
    }

    /// Sets a `stacktrace if FILTER` trigger on event `path`
    /// (`sched/sched_switch`) of this instance: each time the event is
    /// recorded and `filter` holds, the kernel unwinds the current task's
    /// kernel stack into the ring buffer as an `ftrace:kernel_stack`
    /// record, which the decoder then reads ([`EventKind::KernelStack`]).
    /// Returns the trigger as the kernel reads it back. The trigger is
    /// removed before the instance is ([`Instance::remove_triggers`]).
    ///
    /// # Errors
    /// [`ErrorKind::Unavailable`] when this kernel does not offer it: no
    /// `trigger` file (CONFIG_EVENT_TRACING without triggers), no
    /// `stacktrace` among its triggers (CONFIG_STACKTRACE), no
    /// `ftrace/kernel_stack` format, or the write refused — the message
    /// says which.
    pub fn add_stack_trigger(&mut self, path: &str, filter: &str) -> Result<String> {
        let unavailable = |why: String| Error::new(ErrorKind::Unavailable, why);
        let file = self.path.join("events").join(path).join("trigger");
        let offered = read_text(&file).map_err(|e| {
            unavailable(format!(
                "this kernel offers no event triggers ({}: {e})",
                file.display()
            ))
        })?;
        if !offered.contains("stacktrace") {
            return Err(unavailable(format!(
                "this kernel offers no `stacktrace` trigger on {path} (CONFIG_STACKTRACE?): {}",
                offered.trim().replace('\n', " ")
            )));
        }
        let fmt = self
            .path
            .join("events")
            .join(KERNEL_STACK_EVENT)
            .join("format");
        let text = read_text(&fmt).map_err(|e| {
            unavailable(format!(
                "this kernel has no kernel stack record format ({}: {e})",
                fmt.display()
            ))
        })?;
        self.decoder
            .add(EventKind::KernelStack, &Format::parse(&text)?)?;
        let command = format!("stacktrace if {filter}");
        std::fs::write(&file, &command).map_err(|e| {
            unavailable(format!(
                "the kernel refused the trigger {command:?} on {}: {e}",
                file.display()
            ))
        })?;
        self.triggers.push(file.clone());
        let back = read_text(&file).map_err(|e| io(&format!("reading {}", file.display()), e))?;
        Ok(back
            .lines()
            .find(|l| l.starts_with("stacktrace"))
            .unwrap_or(command.as_str())
            .to_string())
    }

    /// Replaces the `stacktrace` trigger [`Instance::add_stack_trigger`]
    /// set on `path` with `stacktrace if FILTER` (the kernel holds one per
    /// event: the old one is removed first, and put back if the new one is
    /// refused; a switch in between records no stack). Returns the new
    /// trigger as the kernel reads it back.
    ///
    /// # Errors
    /// [`ErrorKind::Io`] if the kernel refuses the new filter (the old
    /// trigger is then back) or there was no trigger to replace.
    pub fn replace_stack_trigger(&self, path: &str, filter: &str) -> Result<String> {
        let file = self.path.join("events").join(path).join("trigger");
        let old = self
            .stack_trigger(path)
            .ok_or_else(|| Error::new(ErrorKind::Io, format!("no stacktrace trigger on {path}")))?;
        write(&file, "!stacktrace")?;
        let command = format!("stacktrace if {filter}");
        if let Err(e) = write(&file, &command) {
            if let Some((_, f)) = old.split_once(" if ") {
                let _ = write(&file, &format!("stacktrace if {f}"));
            }
            return Err(e);
        }
        Ok(self.stack_trigger(path).unwrap_or(command))
    }

    /// The `stacktrace` trigger on event `path` as the kernel reads it
    /// back (`stacktrace:unlimited if …`); `None` without one.
    pub fn stack_trigger(&self, path: &str) -> Option<String> {
        let file = self.path.join("events").join(path).join("trigger");
        read_text(&file).ok().and_then(|t| {
            t.lines()
                .find(|l| l.trim_start().starts_with("stacktrace"))
                .map(|l| l.trim().to_string())
        })
    }

    /// Removes the `stacktrace` triggers [`Instance::add_stack_trigger`]
    /// set (writes `!stacktrace`) and reads each `trigger` file back:
    /// true when none is left (or none was set).
    pub fn remove_triggers(&self) -> bool {
        let mut clean = true;
        for file in &self.triggers {
            let _ = std::fs::write(file, "!stacktrace");
            clean &= read_text(file).is_ok_and(|t| !has_stack_trigger(&t));
        }
        clean
    }

    /// The filter of event `path` as the kernel reads it back (`none`
    /// when there is none).
    ///
    /// # Errors
    /// [`ErrorKind::Io`] if the file cannot be read.
    pub fn filter(&self, path: &str) -> Result<String> {
        let p = self.path.join("events").join(path).join("filter");
        read_text(&p)
            .map(|s| s.trim().to_string())
            .map_err(|e| io(&format!("reading {}", p.display()), e))
    }

    /// Records only the events of `cpus` (the instance's
    /// `tracing_cpumask`): the other CPUs' events are never written.
    ///
    /// # Errors
    /// [`ErrorKind::Io`] if the kernel refuses the mask (a CPU it does not
    /// have).
    pub fn set_cpumask(&self, cpus: &[usize]) -> Result<()> {
        write(&self.path.join("tracing_cpumask"), &cpumask_hex(cpus))
    }

    /// The CPUs whose events are recorded (`tracing_cpumask` read back).
    ///
    /// # Errors
    /// [`ErrorKind::Io`] if the file cannot be read or parsed.
    pub fn cpumask(&self) -> Result<Vec<usize>> {
        let p = self.path.join("tracing_cpumask");
        let text = read_text(&p).map_err(|e| io(&format!("reading {}", p.display()), e))?;
        parse_cpumask(&text).ok_or_else(|| {
            Error::new(
                ErrorKind::Io,
                format!("{}: not a CPU mask: {:?}", p.display(), text.trim()),
            )
        })
    }

    /// Sets the ring buffer of each CPU to `kb` KiB (tracing may be on).
    ///
    /// # Errors
    /// [`ErrorKind::Io`] if the kernel refuses the size (memory).
    pub fn set_buffer_kb(&self, kb: u32) -> Result<()> {
        write(&self.path.join("buffer_size_kb"), &kb.to_string())
    }

    /// Empties the ring buffers and resets their counts (`overrun`,
    /// `bytes`): writes the instance's `trace` file empty.
    ///
    /// # Errors
    /// [`ErrorKind::Io`] if the file cannot be written.
    pub fn clear(&self) -> Result<()> {
        write(&self.path.join("trace"), "")
    }

    /// The `per_cpu/cpuN/stats` of `cpu`, parsed (all zero when unreadable).
    pub fn stats(&self, cpu: usize) -> CpuStats {
        read_text(&self.path.join(format!("per_cpu/cpu{cpu}/stats")))
            .map(|s| CpuStats::parse(&s))
            .unwrap_or_default()
    }

    /// Events the kernel lost (ring buffer overruns + dropped), summed over CPUs.
    pub fn lost_events(&self, cpus: &[usize]) -> u64 {
        self.lost_per_cpu(cpus).iter().map(|&(_, n)| n).sum()
    }

    /// Events the kernel lost per CPU: `(cpu, overrun + dropped)`.
    pub fn lost_per_cpu(&self, cpus: &[usize]) -> Vec<(usize, u64)> {
        cpus.iter()
            .filter_map(|&c| {
                read_text(&self.path.join(format!("per_cpu/cpu{c}/stats")))
                    .ok()
                    .map(|s| (c, parse_stats_lost(&s)))
            })
            .collect()
    }

    /// Measures how fast the enabled events fill the buffers: records for
    /// `probe` (with the filters and CPU mask in place), then reads each
    /// CPU's `bytes` (written, not yet read) and `overrun`, and empties
    /// the buffers again. Returns the bytes per second of the busiest CPU
    /// (a lower bound when the probe itself overran: then it is scaled by
    /// the events lost). Leaves tracing off.
    ///
    /// # Errors
    /// [`ErrorKind::Io`] if `tracing_on` or `trace` cannot be written.
    pub fn probe_rate(&self, cpus: &[usize], probe: Duration) -> Result<u64> {
        self.clear()?;
        let t0 = std::time::Instant::now();
        self.set_on(true)?;
        std::thread::sleep(probe);
        self.set_on(false)?;
        let secs = t0.elapsed().as_secs_f64().max(1e-3);
        let busiest = cpus
            .iter()
            .map(|&c| self.stats(c).bytes_written())
            .max()
            .unwrap_or(0);
        self.clear()?;
        Ok((busiest as f64 / secs) as u64)
    }
}

/// The buffer each CPU gets for a measured event rate (the busiest CPU's
/// bytes per second, [`Instance::probe_rate`]): room for
/// [`BUFFER_HORIZON_S`] seconds of it, at least `min_kb`, at most
/// [`BUFFER_MAX_KB`] — `clamp(ceil(rate × 2 s / 1024), min_kb, 256 MiB)`.
/// The drainer stops waiting for anyone once its pages are 100 ms old and
/// fell at most 120 ms behind in 30 stress runs: 2 s is 16 times that,
/// and covers a load that doubles after the probe eight times over.
pub fn buffer_kb_for_rate(bytes_per_s: u64, min_kb: u32) -> u32 {
    let kb = (bytes_per_s as f64 * BUFFER_HORIZON_S / 1024.0).ceil();
    let kb = if kb.is_finite() { kb as u64 } else { u64::MAX };
    u32::try_from(kb.clamp(u64::from(min_kb), u64::from(BUFFER_MAX_KB))).unwrap_or(BUFFER_MAX_KB)
}

/// Seconds of the measured event rate a ring buffer holds ([`buffer_kb_for_rate`]).
pub const BUFFER_HORIZON_S: f64 = 2.0;
/// The largest ring buffer per CPU sized from a rate, KiB (256 MiB).
pub const BUFFER_MAX_KB: u32 = 262_144;

/// A CPU list as `tracing_cpumask` takes it: hex digits in comma-separated
/// groups of 32 bits, the most significant first (`3`, `1,00000000`).
pub fn cpumask_hex(cpus: &[usize]) -> String {
    let words = cpus.iter().max().map_or(1, |&m| m / 32 + 1);
    let mut w = vec![0u32; words];
    for &c in cpus {
        w[c / 32] |= 1 << (c % 32);
    }
    let mut out = format!("{:x}", w[words - 1]);
    for x in w[..words - 1].iter().rev() {
        out.push_str(&format!(",{x:08x}"));
    }
    out
}

/// The CPUs of a `tracing_cpumask` text ([`cpumask_hex`]'s form); `None`
/// when it is not hex.
pub fn parse_cpumask(text: &str) -> Option<Vec<usize>> {
    let groups: Vec<&str> = text.trim().split(',').collect();
    let mut cpus = Vec::new();
    for (i, g) in groups.iter().rev().enumerate() {
        let v = u32::from_str_radix(g, 16).ok()?;
        cpus.extend((0..32).filter(|b| v & (1 << b) != 0).map(|b| i * 32 + b));
    }
    Some(cpus)
}

/// The figures of one `per_cpu/cpuN/stats` file this crate uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuStats {
    /// `entries:` events in the buffer, not yet read.
    pub entries: u64,
    /// `overrun:` events overwritten before they were read.
    pub overrun: u64,
    /// `bytes:` bytes in the buffer, not yet read.
    pub bytes: u64,
    /// `dropped events:` events not written (a full buffer, no overwrite).
    pub dropped: u64,
    /// `read events:` events read.
    pub read: u64,
}

impl CpuStats {
    /// Parses a `stats` file; missing lines are 0.
    pub fn parse(text: &str) -> CpuStats {
        let mut s = CpuStats::default();
        for l in text.lines() {
            let Some((k, v)) = l.split_once(':') else {
                continue;
            };
            let Ok(v) = v.trim().parse::<u64>() else {
                continue;
            };
            match k.trim() {
                "entries" => s.entries = v,
                "overrun" => s.overrun = v,
                "bytes" => s.bytes = v,
                "dropped events" => s.dropped = v,
                "read events" => s.read = v,
                _ => {}
            }
        }
        s
    }

    /// Bytes written since the buffer was emptied, overwritten ones
    /// estimated at the mean size of those held.
    pub fn bytes_written(&self) -> u64 {
        let mean = self.bytes / self.entries.max(1);
        self.bytes + (self.overrun + self.dropped) * mean
    }
}

impl Instance {
    /// Stops tracing and removes the instance; true if it is gone.
    pub fn remove(mut self) -> bool {
        self.cleanup()
    }

    fn cleanup(&mut self) -> bool {
        if !self.path.exists() {
            return true;
        }
        let _ = write(&self.path.join("tracing_on"), "0");
        self.remove_triggers();
        for _ in 0..50 {
            if std::fs::remove_dir(&self.path).is_ok() || !self.path.exists() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.cleanup();
    }
}

/// True when the text of a `trigger` file lists a `stacktrace` trigger
/// (`stacktrace:unlimited if …`; the list of available triggers a file
/// without any shows is a comment).
pub fn has_stack_trigger(text: &str) -> bool {
    text.lines()
        .any(|l| l.trim_start().starts_with("stacktrace"))
}

/// `overrun:` + `dropped events:` of a `per_cpu/cpuN/stats` file.
pub fn parse_stats_lost(text: &str) -> u64 {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            matches!(k.trim(), "overrun" | "dropped events")
                .then(|| v.trim().parse::<u64>().ok())
                .flatten()
        })
        .sum()
}

/// What the drainer collected.
#[derive(Debug, Clone, Default)]
pub struct Capture {
    /// Decoded events, per CPU in time order (not merged).
    pub events: Vec<Event>,
    /// Events that did not fit in the preallocated store.
    pub dropped: u64,
    /// Pages read.
    pub pages: u64,
    /// Pages the kernel flagged as following lost events.
    pub missed_pages: u64,
    /// Lost events the kernel counted in page headers.
    pub missed: u64,
    /// Where the lost events were, per CPU in time ([`crate::loss`]): the
    /// hole before each page flagged as following lost events.
    pub losses: Vec<Loss>,
    /// How far behind the kernel the drainer fell: the oldest a page was
    /// when it was read ([`Backlog::age_ns`]), ns.
    pub max_age_ns: u64,
}

/// Drains `per_cpu/cpuN/trace_pipe_raw` of `cpus` every `interval` until
/// `stop` is set, then once more until empty. Decodes into a store of
/// `capacity` events allocated and touched before the first read.
///
/// # Errors
/// [`ErrorKind::Io`] if a buffer cannot be opened or read.
pub fn drain(
    inst: &Instance,
    cpus: &[usize],
    capacity: usize,
    interval: Duration,
    stop: &AtomicBool,
) -> Result<Capture> {
    let mut events = vec![Event::ZERO; capacity];
    events.clear();
    let mut dropped = 0;
    let mut cap = drain_with(
        inst,
        cpus,
        Pace::fixed(interval),
        stop,
        &mut |e| {
            if events.len() < events.capacity() {
                events.push(e);
            } else {
                dropped += 1;
            }
        },
        &mut || {},
        &mut |_| {},
    )?;
    cap.events = events;
    cap.dropped = dropped;
    Ok(cap)
}

/// How often a drainer empties the ring buffers.
///
/// Every pass wakes the drainer and reads each CPU's buffer, full or not:
/// at a fixed 20 ms that is 50 wake-ups a second whatever the machine
/// does, which on a quiet machine is most of a long-running trace's cost.
/// A paced drainer starts at `min` and, after each pass, doubles its wait
/// (up to `max`) while every CPU's buffer was less than
/// [`Pace::LOW_FILL`] full, and shortens it in proportion (down to `min`)
/// when one was more than [`Pace::HIGH_FILL`] full, so a burst of events
/// cannot overflow a buffer between two passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    /// Shortest wait between passes.
    pub min: Duration,
    /// Longest wait between passes (`min`: a fixed interval).
    pub max: Duration,
    /// One CPU's ring buffer, bytes.
    pub buffer_bytes: u64,
}

impl Pace {
    /// Below this share of a buffer read in a pass, the wait doubles.
    pub const LOW_FILL: f64 = 0.05;
    /// Above this share, the wait shortens in proportion.
    pub const HIGH_FILL: f64 = 0.25;

    /// A fixed interval.
    pub fn fixed(interval: Duration) -> Pace {
        Pace {
            min: interval,
            max: interval,
            buffer_bytes: u64::MAX,
        }
    }

    /// The wait after a pass that waited `cur` and read at most
    /// `bytes_read` from one CPU's buffer (pure: unit-tested).
    pub fn next(&self, cur: Duration, bytes_read: u64) -> Duration {
        let fill = bytes_read as f64 / self.buffer_bytes.max(1) as f64;
        let next = if fill > Self::HIGH_FILL {
            cur.mul_f64(Self::HIGH_FILL / fill)
        } else if fill < Self::LOW_FILL {
            cur.saturating_mul(2)
        } else {
            cur
        };
        next.clamp(self.min, self.max.max(self.min))
    }
}

/// Pages [`drain_with`] reads from one CPU's buffer before it turns to the
/// next (256 KiB with 4 KiB pages: ~20 ms of the stress load's busiest CPU).
const PAGES_PER_VISIT: u64 = 64;

/// How far behind the kernel a drainer is, as [`drain_with`] tells its gate
/// before each page it reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backlog {
    /// More pages are likely waiting: the page just read from this CPU's
    /// buffer was full ([`PageInfo::full`](crate::raw::PageInfo::full)), or,
    /// before its first page of a visit, the last visit read more than one
    /// page from it.
    pub full: bool,
    /// How old the page just read was when it was read (now minus its time
    /// stamp, ns). Before a CPU's first page of a visit: the age of the
    /// last page read from it if that visit ended with pages waiting, else
    /// 0; always 0 with a trace clock other than `mono`. A ring buffer of
    /// B bytes filled at R bytes/s overflows once this reaches B/R.
    pub age_ns: u64,
}

/// The backlog the gate hears of: `this` CPU's, or that of a CPU left with
/// pages waiting (`left`: the time stamp of its last page read), whichever
/// is further behind.
fn worst(this: Backlog, left: &[Option<u64>]) -> Backlog {
    let Some(oldest) = left.iter().flatten().min() else {
        return this;
    };
    let age_ns = firmtime_rt::clock::monotonic_ns().saturating_sub(*oldest);
    Backlog {
        full: true,
        age_ns: age_ns.max(this.age_ns),
    }
}

/// Like [`drain`], handing each decoded event to `sink` and calling
/// `pass_done` after each pass over the CPUs' buffers (a pass reads at most
/// 64 pages of each, and the next follows at once when one had more);
/// `gate` is called before each page is read and before `pass_done` (it
/// may sleep, to keep the drainer off the CPUs while a measured thread is
/// due); its argument says how far behind the kernel the drainer is
/// ([`Backlog`]: of the CPU furthest behind). Between
/// passes it waits as `pace` says, parked: whoever sets `stop` should
/// unpark the thread to end a long wait at once. The returned
/// [`Capture`] holds the page counts only (no events).
///
/// # Errors
/// [`ErrorKind::Io`] if a buffer cannot be opened or read.
pub fn drain_with(
    inst: &Instance,
    cpus: &[usize],
    pace: Pace,
    stop: &AtomicBool,
    sink: &mut dyn FnMut(Event),
    pass_done: &mut dyn FnMut(),
    gate: &mut dyn FnMut(Backlog),
) -> Result<Capture> {
    let mut files = Vec::with_capacity(cpus.len());
    for &c in cpus {
        let p = inst.path.join(format!("per_cpu/cpu{c}/trace_pipe_raw"));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&p)
            .map_err(|e| io(&format!("opening {}", p.display()), e))?;
        files.push((c as u16, f));
    }
    let mut cap = Capture::default();
    let mut page = vec![0u8; inst.decoder.page_size()];
    let mut wait = pace.min;
    // Per CPU: the last pass read more than one page from its buffer, so a
    // backlog is likely before the first page of this one.
    let mut busy = vec![false; files.len()];
    // Per CPU: the time stamp of the last page read when the visit ended
    // with more waiting (PAGES_PER_VISIT reached), else None.
    let mut left: Vec<Option<u64>> = vec![None; files.len()];
    // Per CPU: the time of the last event read (where a hole begins).
    let mut last_event = vec![0u64; files.len()];
    let mut losses = LossLog::new();
    loop {
        let last = stop.load(Ordering::SeqCst);
        // The last pass empties every buffer; the others move on to the
        // next CPU after PAGES_PER_VISIT, so a CPU whose events come faster
        // than the drainer reads them does not keep it from the others.
        let limit = if last { u64::MAX } else { PAGES_PER_VISIT };
        let mut most = 0u64;
        for (i, (cpu, f)) in files.iter_mut().enumerate() {
            let (mut pages, mut read, mut last_ts) = (0u64, 0u64, 0u64);
            let mut backlog = match left[i] {
                Some(ts) => Backlog {
                    full: true,
                    age_ns: firmtime_rt::clock::monotonic_ns().saturating_sub(ts),
                },
                None => Backlog {
                    full: busy[i],
                    age_ns: 0,
                },
            };
            left[i] = None;
            loop {
                if pages == limit {
                    left[i] = Some(last_ts);
                    break;
                }
                // The gate hears of the CPU furthest behind, this one or
                // another left with pages waiting.
                gate(worst(backlog, &left));
                let n = match f.read(&mut page) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(io("reading trace_pipe_raw", e)),
                };
                cap.pages += 1;
                pages += 1;
                read += n as u64;
                let before = last_event[i];
                let mut newest = before;
                let info = inst.decoder.decode_page(&page[..n], *cpu, &mut |e| {
                    newest = newest.max(e.time_ns);
                    sink(e);
                });
                last_event[i] = newest;
                if info.missed_flag {
                    cap.missed_pages += 1;
                    losses.note(*cpu, before, info.start_ns, info.missed);
                }
                cap.missed += info.missed;
                // Without the mono clock the age is unknown (0) and the
                // visit leaves no time stamp behind.
                last_ts = if inst.mono_clock {
                    info.start_ns
                } else {
                    u64::MAX
                };
                backlog = Backlog {
                    full: info.full,
                    age_ns: firmtime_rt::clock::monotonic_ns().saturating_sub(last_ts),
                };
                cap.max_age_ns = cap.max_age_ns.max(backlog.age_ns);
            }
            busy[i] = read > page.len() as u64;
            most = most.max(read);
        }
        let behind = left.iter().any(Option::is_some);
        gate(worst(Backlog::default(), &left));
        pass_done();
        if last {
            break;
        }
        if behind {
            continue; // more to read at once
        }
        wait = pace.next(wait, most);
        let until = std::time::Instant::now() + wait;
        // Parked, not slept: `stop` with an unpark ends the wait at once.
        loop {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() || stop.load(Ordering::SeqCst) {
                break;
            }
            std::thread::park_timeout(left);
        }
    }
    cap.losses = losses.losses;
    Ok(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paced_drainer_waits_longer_while_buffers_stay_near_empty_and_less_in_a_burst() {
        let ms = Duration::from_millis;
        let p = Pace {
            min: ms(20),
            max: ms(1000),
            buffer_bytes: 1 << 20,
        };
        // Quiet: doubles up to max.
        let mut w = p.min;
        let mut seen = vec![w];
        for _ in 0..8 {
            w = p.next(w, 4096);
            seen.push(w);
        }
        assert_eq!(
            seen[..7],
            [ms(20), ms(40), ms(80), ms(160), ms(320), ms(640), ms(1000)]
        );
        assert_eq!(w, ms(1000));
        // Half a buffer read in one pass: the wait halves (0.25 / 0.5).
        assert_eq!(p.next(ms(1000), 1 << 19), ms(500));
        // A full buffer: down to a quarter, never below min.
        assert_eq!(p.next(ms(1000), 1 << 20), ms(250));
        assert_eq!(p.next(ms(40), 1 << 20), ms(20));
        // Between the two fills: unchanged.
        assert_eq!(p.next(ms(300), 1 << 17), ms(300));
        // Fixed: always the interval.
        let f = Pace::fixed(ms(20));
        assert_eq!(
            (f.next(ms(20), 0), f.next(ms(20), u64::MAX)),
            (ms(20), ms(20))
        );
    }

    #[test]
    fn cpumasks_are_hex_in_32_bit_groups_and_read_back_to_the_same_cpus() {
        assert_eq!(cpumask_hex(&[0]), "1");
        assert_eq!(cpumask_hex(&[0, 1]), "3");
        assert_eq!(cpumask_hex(&[1]), "2");
        assert_eq!(cpumask_hex(&[4, 7]), "90");
        assert_eq!(cpumask_hex(&[32]), "1,00000000");
        assert_eq!(cpumask_hex(&[0, 33]), "2,00000001");
        assert_eq!(parse_cpumask("3\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpumask("2,00000001"), Some(vec![0, 33]));
        assert_eq!(parse_cpumask("00000000,00000002"), Some(vec![1]));
        assert_eq!(parse_cpumask("xyz"), None);
        for cpus in [vec![0], vec![1, 5, 31], vec![2, 40, 63, 64]] {
            assert_eq!(parse_cpumask(&cpumask_hex(&cpus)), Some(cpus));
        }
    }

    #[test]
    fn the_buffer_holds_two_seconds_of_the_measured_rate_within_its_bounds() {
        // 13 MB/s (the stress load's busiest CPU): 2 s = 25,391 KiB.
        assert_eq!(buffer_kb_for_rate(13_000_000, 4096), 25_391);
        // Quiet: the floor.
        assert_eq!(buffer_kb_for_rate(10_000, 4096), 4096);
        // Absurd: the ceiling.
        assert_eq!(buffer_kb_for_rate(u64::MAX, 4096), BUFFER_MAX_KB);
    }

    #[test]
    fn stats_files_parse_and_estimate_what_was_overwritten() {
        let text = "entries: 100\noverrun: 50\ncommit overrun: 0\nbytes: 4000\n\
                    oldest event ts: 1.0\nnow ts: 2.0\ndropped events: 0\nread events: 7\n";
        let s = CpuStats::parse(text);
        assert_eq!(
            s,
            CpuStats {
                entries: 100,
                overrun: 50,
                bytes: 4000,
                dropped: 0,
                read: 7
            }
        );
        assert_eq!(s.bytes_written(), 4000 + 50 * 40);
        assert_eq!(parse_stats_lost(text), 50);
    }

    #[test]
    fn orphan_pids_come_from_firmtime_instance_names_only() {
        assert_eq!(orphan_pid("firmtime-4242"), Some(4242));
        assert_eq!(orphan_pid("firmtime-4242-3"), Some(4242));
        assert_eq!(orphan_pid("firmtime-4242-explain"), Some(4242));
        assert_eq!(orphan_pid("firmtime-4242-2-explain"), Some(4242));
        assert_eq!(orphan_pid("rtla-timerlat"), None);
        assert_eq!(orphan_pid("firmtime-x"), None);
    }
}
