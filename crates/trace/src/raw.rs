//! Decoding tracefs' binary per-CPU ring-buffer pages
//! (`per_cpu/cpuN/trace_pipe_raw`) into fixed-size [`Event`]s.
//!
//! The layouts come from the kernel itself: `events/header_page` gives the
//! page header (timestamp, commit word, data offset) and each event's
//! `format` file gives its id and field offsets, so nothing here assumes a
//! kernel version. Pure code: no I/O, unit-tested on captured pages.
//!
//! # RT contract
//! [`Decoder::decode_page`] never allocates: it calls a sink once per event.
//! It runs on the non-RT drainer thread.

use crate::error::{Error, ErrorKind, Result};

/// Ring-buffer event header `type_len` values (kernel `ring_buffer.h`).
const TYPE_PADDING: u32 = 29;
const TYPE_TIME_EXTEND: u32 = 30;
const TYPE_TIME_STAMP: u32 = 31;
/// Commit-word flags: events were lost before this page; their count is
/// stored after the data.
const MISSED_EVENTS: u64 = 1 << 31;
const MISSED_STORED: u64 = 1 << 30;
/// Timestamps keep 59 bits in an absolute time-stamp event.
const TS_BITS: u32 = 59;

/// `prev_state` bits below this are task states (S, D, T, t, X, Z, P, I);
/// 0 means the task was still runnable, i.e. preempted (`R`/`R+`).
pub const TASK_STATE_MASK: i64 = 0xff;

/// What an [`Event`] records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// `sched:sched_switch`: `prev_pid` leaves the CPU in `prev_state`, `next_pid` runs.
    Switch,
    /// `sched:sched_wakeup`: `prev_pid` = the woken task, `next_pid` = its target CPU.
    Wakeup,
    /// `sched:sched_wakeup_new`: as [`EventKind::Wakeup`], for a new task.
    WakeupNew,
    /// `sched:sched_process_fork`: `prev_pid` = parent, `next_pid` = child (threads too).
    Fork,
    /// `timer:hrtimer_expire_entry`: `arg` = the callback's address, `pid` = the interrupted task.
    HrtimerExpire,
    /// `irq_vectors:local_timer_entry`: the local APIC timer interrupt.
    LocalTimer,
    /// `irq_vectors:local_timer_exit`: the local APIC timer interrupt ends.
    LocalTimerExit,
    /// `irq:irq_handler_entry`: `prev_pid` = irq number, `comm` = the handler's name.
    IrqEntry,
    /// `irq:irq_handler_exit`: `prev_pid` = irq number, `next_pid` = its return value.
    IrqExit,
    /// `irq:softirq_entry`: `prev_pid` = the vector ([`softirq_name`]).
    SoftirqEntry,
    /// `irq:softirq_exit`: `prev_pid` = the vector.
    SoftirqExit,
    /// `power:cpu_idle`: `arg` = the idle state entered, [`IDLE_EXIT`] on exit.
    CpuIdle,
    /// `exceptions:page_fault_user`: `arg` = the faulting address, `pid` = the task.
    PageFault,
    /// One frame of an `ftrace:kernel_stack` record (what a `stacktrace`
    /// trigger writes, [`crate::tracefs::Instance::add_stack_trigger`]): a
    /// record of N return addresses becomes N events, innermost first, each
    /// with `pid` = the task whose stack it is, `prev_pid` = the frame's
    /// index, `next_pid` = N, `arg` = the address. At most
    /// [`STACK_FRAMES_MAX`] frames are kept of a record.
    KernelStack,
}

/// Frames kept of one kernel stack record (the rest are cut).
pub const STACK_FRAMES_MAX: usize = 32;

/// Where the kernel's stack records are described (`ftrace:kernel_stack`).
pub const KERNEL_STACK_EVENT: &str = "ftrace/kernel_stack";

/// `power:cpu_idle`'s state on leaving idle (`PWR_EVENT_EXIT`, -1 as u32).
pub const IDLE_EXIT: u64 = u32::MAX as u64;

/// The softirq vector's name, as the kernel prints it (`NET_RX`, `TIMER`, …).
pub fn softirq_name(vec: i32) -> &'static str {
    const NAMES: [&str; 10] = [
        "HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER",
        "RCU",
    ];
    usize::try_from(vec)
        .ok()
        .and_then(|v| NAMES.get(v))
        .copied()
        .unwrap_or("?")
}

/// The two kernel priorities packed into a switch's `arg` (see [`Event::arg`]).
pub fn switch_prios(arg: u64) -> (i32, i32) {
    (arg as u32 as i32, (arg >> 32) as u32 as i32)
}

/// One decoded trace record: fixed size, `Copy`, no heap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// Trace clock time, ns (the instance uses `mono`: CLOCK_MONOTONIC).
    pub time_ns: u64,
    /// CPU whose buffer held the record.
    pub cpu: u16,
    /// What happened.
    pub kind: EventKind,
    /// `common_pid`: the task running on `cpu` when the record was written.
    pub pid: i32,
    /// Switch: prev_pid; wakeups: the woken pid; fork: the parent.
    pub prev_pid: i32,
    /// Switch: next_pid; wakeups: target CPU; fork: the child.
    pub next_pid: i32,
    /// Switch: prev_state (0 or [`TASK_STATE_MASK`]-free = preempted);
    /// HrtimerExpire: the `now` field (the timer base's time when it ran).
    pub prev_state: i64,
    /// HrtimerExpire: the callback function's address; LocalTimer: the
    /// vector; Switch: `prev_prio` in the low and `next_prio` in the high 32
    /// bits ([`switch_prios`]); CpuIdle: the state; PageFault: the address.
    pub arg: u64,
    /// Switch: prev_comm; wakeups: comm; IrqEntry: the handler's name
    /// (NUL-padded, cut at 16 bytes); else zeros.
    pub comm: [u8; 16],
}

impl Event {
    /// An all-zero record (a switch at time 0 on CPU 0): what preallocated
    /// event storage is filled with before use.
    pub const ZERO: Event = Event {
        time_ns: 0,
        cpu: 0,
        kind: EventKind::Switch,
        pid: 0,
        prev_pid: 0,
        prev_state: 0,
        next_pid: 0,
        arg: 0,
        comm: [0; 16],
    };

    /// The `comm` as text (up to the first NUL).
    pub fn comm_str(&self) -> &str {
        let n = self.comm.iter().position(|&b| b == 0).unwrap_or(16);
        std::str::from_utf8(&self.comm[..n]).unwrap_or("?")
    }

    /// True for a switch-out in a runnable state: the task was preempted
    /// (the paper's "preempted" versus "blocked").
    pub fn preempted(&self) -> bool {
        self.prev_state & TASK_STATE_MASK == 0
    }
}

/// One field of an event format: `field:pid_t prev_pid; offset:24; size:4; signed:1;`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Field name (`prev_pid`, `comm`, …).
    pub name: String,
    /// Byte offset in the record.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
    /// Signed integer.
    pub signed: bool,
}

/// A parsed `events/<system>/<event>/format` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format {
    /// Event name (`sched_switch`).
    pub name: String,
    /// Event id (the record's `common_type`).
    pub id: u16,
    /// Every field, common ones first.
    pub fields: Vec<Field>,
}

impl Format {
    /// Parses a format file.
    ///
    /// # Errors
    /// [`ErrorKind::Io`] if the name, id or a field line is malformed.
    pub fn parse(text: &str) -> Result<Format> {
        let bad = |what: &str| Error::new(ErrorKind::Io, format!("tracefs format file: {what}"));
        let mut name = None;
        let mut id = None;
        let mut fields = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if let Some(n) = line.strip_prefix("name:") {
                name = Some(n.trim().to_string());
            } else if let Some(i) = line.strip_prefix("ID:") {
                id = Some(i.trim().parse::<u16>().map_err(|_| bad("bad ID"))?);
            } else if let Some(rest) = line.strip_prefix("field:") {
                let mut parts = rest.split(';').map(str::trim);
                let decl = parts.next().ok_or_else(|| bad("empty field"))?;
                let mut num = |key: &str| -> Result<usize> {
                    parts
                        .next()
                        .and_then(|p| p.strip_prefix(key))
                        .and_then(|v| v.trim().parse().ok())
                        .ok_or_else(|| bad(&format!("field `{decl}` lacks {key}")))
                };
                let offset = num("offset:")?;
                let size = num("size:")?;
                let signed = num("signed:")? != 0;
                // The name is the last word of the declaration, minus any `[16]`.
                let last = decl.split_whitespace().last().unwrap_or("");
                let fname = last.split('[').next().unwrap_or("").to_string();
                fields.push(Field {
                    name: fname,
                    offset,
                    size,
                    signed,
                });
            }
        }
        Ok(Format {
            name: name.ok_or_else(|| bad("no name"))?,
            id: id.ok_or_else(|| bad("no ID"))?,
            fields,
        })
    }

    /// The field called `name`.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }
}

/// Where to find one integer field.
#[derive(Debug, Clone, Copy, Default)]
struct Loc {
    offset: usize,
    size: usize,
    signed: bool,
}

impl Loc {
    fn of(f: &Format, name: &str) -> Result<Loc> {
        let fd = f.field(name).ok_or_else(|| {
            Error::new(
                ErrorKind::Io,
                format!("tracefs format of {} has no field {name}", f.name),
            )
        })?;
        Ok(Loc {
            offset: fd.offset,
            size: fd.size,
            signed: fd.signed,
        })
    }

    fn read(self, rec: &[u8]) -> i64 {
        let Some(b) = rec.get(self.offset..self.offset + self.size) else {
            return 0;
        };
        match (self.size, self.signed) {
            (1, false) => i64::from(b[0]),
            (1, true) => i64::from(b[0] as i8),
            (2, false) => i64::from(u16::from_le_bytes([b[0], b[1]])),
            (2, true) => i64::from(i16::from_le_bytes([b[0], b[1]])),
            (4, false) => i64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            (4, true) => i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            (8, _) => i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
            _ => 0,
        }
    }
}

/// How to decode one event type.
#[derive(Debug, Clone, Copy)]
struct Layout {
    id: u16,
    kind: EventKind,
    a: Option<Loc>,
    b: Option<Loc>,
    state: Option<Loc>,
    arg: Option<Loc>,
    /// Switch: `next_prio`, packed into the high half of `arg`.
    arg_high: Option<Loc>,
    comm: Option<Loc>,
    /// `comm` is a `__data_loc` string (offset and length in one u32).
    comm_dynamic: bool,
}

/// What one page held besides its events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageInfo {
    /// Records decoded into events.
    pub events: u64,
    /// Records of types not asked for (skipped).
    pub other: u64,
    /// The kernel flagged lost events before this page.
    pub missed_flag: bool,
    /// How many, when the kernel stored the count.
    pub missed: u64,
    /// The page was filled up to its last [`FULL_SLACK`] bytes: the kernel
    /// had moved on to the next page, so more are likely waiting. A page
    /// less full than that was the one being written: the reader has
    /// caught up.
    pub full: bool,
    /// The page's time stamp (the time base of its first record), in the
    /// instance's trace clock.
    pub start_ns: u64,
}

/// Room a full page may leave unused: more than the largest record this
/// crate asks for (a `sched_switch` is 68 bytes with its header).
pub const FULL_SLACK: usize = 128;

/// Decodes pages of one trace instance.
#[derive(Debug, Clone)]
pub struct Decoder {
    data_offset: usize,
    commit_offset: usize,
    commit_size: usize,
    page_size: usize,
    layouts: Vec<Layout>,
}

/// The events `lab trace` records, with their tracefs paths.
pub const EVENTS: [(&str, EventKind); 6] = [
    ("sched/sched_switch", EventKind::Switch),
    ("sched/sched_wakeup", EventKind::Wakeup),
    ("sched/sched_wakeup_new", EventKind::WakeupNew),
    ("sched/sched_process_fork", EventKind::Fork),
    ("timer/hrtimer_expire_entry", EventKind::HrtimerExpire),
    ("irq_vectors/local_timer_entry", EventKind::LocalTimer),
];

/// The events the explaining trace records ([`crate::explain`]): the
/// scheduler's, interrupts, softirqs, idle states and user page faults.
/// (`sched_wakeup` and `page_fault_user` are filtered to the measured threads.)
pub const EXPLAIN_EVENTS: [(&str, EventKind); 10] = [
    ("sched/sched_switch", EventKind::Switch),
    ("sched/sched_wakeup", EventKind::Wakeup),
    ("irq_vectors/local_timer_entry", EventKind::LocalTimer),
    ("irq_vectors/local_timer_exit", EventKind::LocalTimerExit),
    ("irq/irq_handler_entry", EventKind::IrqEntry),
    ("irq/irq_handler_exit", EventKind::IrqExit),
    ("irq/softirq_entry", EventKind::SoftirqEntry),
    ("irq/softirq_exit", EventKind::SoftirqExit),
    ("power/cpu_idle", EventKind::CpuIdle),
    ("exceptions/page_fault_user", EventKind::PageFault),
];

impl Decoder {
    /// Builds a decoder from the text of `events/header_page` and the
    /// formats of the enabled events (any of [`EVENTS`]; others are ignored).
    ///
    /// # Errors
    /// [`ErrorKind::Io`] if the header page or a needed field is missing.
    pub fn new(header_page: &str, formats: &[(EventKind, Format)]) -> Result<Decoder> {
        let hp = parse_header_page(header_page)?;
        let layouts = formats
            .iter()
            .map(|(kind, f)| layout(*kind, f))
            .collect::<Result<Vec<_>>>()?;
        Ok(Decoder {
            data_offset: hp.0,
            commit_offset: hp.1,
            commit_size: hp.2,
            page_size: hp.3,
            layouts,
        })
    }

    /// Decodes records of `f` as `kind` too (a format read after the
    /// decoder was built: [`KERNEL_STACK_EVENT`] once a trigger writes it).
    ///
    /// # Errors
    /// [`ErrorKind::Io`] if a needed field is missing.
    pub fn add(&mut self, kind: EventKind, f: &Format) -> Result<()> {
        let l = layout(kind, f)?;
        self.layouts.retain(|x| x.id != f.id);
        self.layouts.push(l);
        Ok(())
    }

    /// Size of one ring-buffer page (sub-buffer), bytes.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Decodes one page read from `trace_pipe_raw` of `cpu`, calling `sink`
    /// for every known record in order. Malformed data ends the page early
    /// (it is never trusted past its commit size). Never allocates.
    pub fn decode_page(&self, page: &[u8], cpu: u16, sink: &mut dyn FnMut(Event)) -> PageInfo {
        let mut info = PageInfo::default();
        if page.len() < self.data_offset {
            return info;
        }
        let mut ts = read_u64(page, 0);
        info.start_ns = ts;
        let commit = match self.commit_size {
            4 => u64::from(read_u32(page, self.commit_offset)),
            _ => read_u64(page, self.commit_offset),
        };
        info.missed_flag = commit & MISSED_EVENTS != 0;
        let size = (commit & !(MISSED_EVENTS | MISSED_STORED) & 0xffff_ffff) as usize;
        let end = (self.data_offset + size).min(page.len());
        info.full = size + FULL_SLACK >= page.len().saturating_sub(self.data_offset);
        if commit & MISSED_STORED != 0 && end + 8 <= page.len() {
            info.missed = read_u64(page, end);
        }
        let mut p = self.data_offset;
        while p + 4 <= end {
            let hdr = read_u32(page, p);
            let type_len = hdr & 0x1f;
            let delta = u64::from(hdr >> 5);
            match type_len {
                TYPE_PADDING => {
                    if delta == 0 || p + 8 > end {
                        break; // the rest of the page is padding
                    }
                    p += 4 + read_u32(page, p + 4) as usize;
                }
                TYPE_TIME_EXTEND => {
                    if p + 8 > end {
                        break;
                    }
                    ts += (u64::from(read_u32(page, p + 4)) << 27) | delta;
                    p += 8;
                }
                TYPE_TIME_STAMP => {
                    if p + 8 > end {
                        break;
                    }
                    let abs = (u64::from(read_u32(page, p + 4)) << 27) | delta;
                    let high = ts & !((1u64 << TS_BITS) - 1);
                    ts = high | abs;
                    p += 8;
                }
                _ => {
                    let (data, len) = if type_len == 0 {
                        if p + 8 > end {
                            break;
                        }
                        // array[0] holds the length including itself.
                        let l = read_u32(page, p + 4) as usize;
                        (p + 8, l.saturating_sub(4))
                    } else {
                        (p + 4, type_len as usize * 4)
                    };
                    if data + len > end || len == 0 {
                        break;
                    }
                    ts += delta;
                    let rec = &page[data..data + len];
                    if self.decode_record(rec, ts, cpu, sink) {
                        info.events += 1;
                    } else {
                        info.other += 1;
                    }
                    p = data + len;
                }
            }
        }
        info
    }

    fn decode_record(&self, rec: &[u8], ts: u64, cpu: u16, sink: &mut dyn FnMut(Event)) -> bool {
        if rec.len() < 8 {
            return false;
        }
        let id = u16::from_le_bytes([rec[0], rec[1]]);
        let Some(l) = self.layouts.iter().find(|l| l.id == id) else {
            return false;
        };
        let get = |loc: Option<Loc>| loc.map(|l| l.read(rec)).unwrap_or(0);
        if l.kind == EventKind::KernelStack {
            self.decode_stack(l, rec, ts, cpu, sink);
            return true;
        }
        let mut comm = [0u8; 16];
        if let Some(c) = l.comm {
            let (at, len) = if l.comm_dynamic {
                // __data_loc: offset in the low, length in the high 16 bits.
                let v = c.read(rec) as u32;
                ((v & 0xffff) as usize, (v >> 16) as usize)
            } else {
                (c.offset, c.size)
            };
            if let Some(src) = rec.get(at..at + len.min(16)) {
                comm[..src.len()].copy_from_slice(src);
            }
        }
        let arg = match (l.arg, l.arg_high) {
            (Some(lo), Some(hi)) => {
                u64::from(lo.read(rec) as u32) | (u64::from(hi.read(rec) as u32) << 32)
            }
            (lo, _) => get(lo) as u64,
        };
        sink(Event {
            time_ns: ts,
            cpu,
            kind: l.kind,
            pid: i32::from_le_bytes([rec[4], rec[5], rec[6], rec[7]]),
            prev_pid: get(l.a) as i32,
            next_pid: get(l.b) as i32,
            prev_state: get(l.state),
            arg,
            comm,
        });
        true
    }
}

impl Decoder {
    /// One [`EventKind::KernelStack`] event per frame of a stack record:
    /// `size` frames from `caller` on, as many as the record holds, at
    /// most [`STACK_FRAMES_MAX`].
    fn decode_stack(&self, l: &Layout, rec: &[u8], ts: u64, cpu: u16, sink: &mut dyn FnMut(Event)) {
        let (Some(size), Some(caller)) = (l.a, l.arg) else {
            return;
        };
        let held = rec.len().saturating_sub(caller.offset) / 8;
        let n = usize::try_from(size.read(rec).max(0))
            .unwrap_or(0)
            .min(held)
            .min(STACK_FRAMES_MAX);
        let pid = i32::from_le_bytes([rec[4], rec[5], rec[6], rec[7]]);
        for i in 0..n {
            let addr = read_u64(rec, caller.offset + 8 * i);
            sink(Event {
                time_ns: ts,
                cpu,
                kind: EventKind::KernelStack,
                pid,
                prev_pid: i as i32,
                next_pid: n as i32,
                prev_state: 0,
                arg: addr,
                comm: [0; 16],
            });
        }
    }
}

/// How to decode records of format `f` as `kind`.
fn layout(kind: EventKind, f: &Format) -> Result<Layout> {
    let opt = |n: &str| Loc::of(f, n).ok();
    let plain = |a: Option<Loc>, b: Option<Loc>, arg: Option<Loc>| Layout {
        id: f.id,
        kind,
        a,
        b,
        state: None,
        arg,
        arg_high: None,
        comm: None,
        comm_dynamic: false,
    };
    let l = match kind {
        EventKind::Switch => Layout {
            id: f.id,
            kind,
            a: Some(Loc::of(f, "prev_pid")?),
            b: Some(Loc::of(f, "next_pid")?),
            state: Some(Loc::of(f, "prev_state")?),
            arg: opt("prev_prio"),
            arg_high: opt("next_prio"),
            comm: opt("prev_comm"),
            comm_dynamic: false,
        },
        EventKind::Wakeup | EventKind::WakeupNew => Layout {
            id: f.id,
            kind,
            a: Some(Loc::of(f, "pid")?),
            b: opt("target_cpu"),
            state: None,
            arg: None,
            arg_high: None,
            comm: opt("comm"),
            comm_dynamic: false,
        },
        EventKind::Fork => plain(
            Some(Loc::of(f, "parent_pid")?),
            Some(Loc::of(f, "child_pid")?),
            None,
        ),
        EventKind::HrtimerExpire => Layout {
            state: opt("now"),
            ..plain(None, None, Some(Loc::of(f, "function")?))
        },
        EventKind::LocalTimer | EventKind::LocalTimerExit => plain(None, None, opt("vector")),
        EventKind::IrqEntry => Layout {
            comm: opt("name"),
            comm_dynamic: true,
            ..plain(Some(Loc::of(f, "irq")?), None, None)
        },
        EventKind::IrqExit => plain(Some(Loc::of(f, "irq")?), opt("ret"), None),
        EventKind::SoftirqEntry | EventKind::SoftirqExit => {
            plain(Some(Loc::of(f, "vec")?), None, None)
        }
        EventKind::CpuIdle => plain(None, opt("cpu_id"), Some(Loc::of(f, "state")?)),
        EventKind::PageFault => plain(None, None, Some(Loc::of(f, "address")?)),
        // `size` (the number of frames) and the `caller` array,
        // which runs on past its declared 8 when there are more.
        EventKind::KernelStack => {
            plain(Some(Loc::of(f, "size")?), None, Some(Loc::of(f, "caller")?))
        }
    };
    Ok(l)
}

/// (data offset, commit offset, commit size, page size) from `header_page`.
fn parse_header_page(text: &str) -> Result<(usize, usize, usize, usize)> {
    let f = Format::parse(&format!("name: header_page\nID: 0\n{text}"))?;
    let data = f
        .field("data")
        .ok_or_else(|| Error::new(ErrorKind::Io, "tracefs header_page has no `data` field"))?;
    let commit = f
        .field("commit")
        .ok_or_else(|| Error::new(ErrorKind::Io, "tracefs header_page has no `commit` field"))?;
    Ok((
        data.offset,
        commit.offset,
        commit.size,
        data.offset + data.size,
    ))
}

fn read_u32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .unwrap_or(0)
}

fn read_u64(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .map(|s| u64::from_le_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]]))
        .unwrap_or(0)
}
