//! Probes of what is installed and running beside the kernel: executables
//! on `$PATH`, a JACK server, RTC and MIDI devices, tickless CPUs, and steal
//! time over an interval. Facts only: `firmtime_lab::doctor` judges them.
//!
//! # RT contract
//!
//! Not RT-safe: reads files and directories, allocates, and
//! [`steal_percent_over`] sleeps. Call before any real-time work.

use crate::system::CpuTimes;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Share of CPU time stolen by the hypervisor over `interval`, percent:
/// /proc/stat read before and after sleeping `interval`. None when
/// /proc/stat is unreadable or no ticks elapsed.
pub fn steal_percent_over(interval: Duration) -> Option<f64> {
    let a = CpuTimes::now().ok()?;
    std::thread::sleep(interval);
    let b = CpuTimes::now().ok()?;
    b.steal_percent_since(&a)
}

/// Evidence that a JACK server runs: processes and shared-memory entries found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JackEvidence {
    /// `(pid, name)` of running `jackd`, `jackdbus` or `pipewire` processes.
    pub processes: Vec<(u32, String)>,
    /// `jack_default_*` / `jack-*` entries in /dev/shm. A server that exited
    /// without cleaning up leaves them behind: alone they prove nothing.
    pub shm: Vec<String>,
    /// Whether a JACK client could connect to the default server; None when
    /// not tried ([`JackEvidence::read`] does not try: rt loads no libjack,
    /// the caller that can — `firmtime doctor` through firmtime-jack — fills it).
    pub accepts_clients: Option<bool>,
}

impl JackEvidence {
    /// Looks for a JACK server: `jackd`, `jackdbus` and `pipewire` processes
    /// (`/proc/*/comm`) and `jack_default*`/`jack-*` entries in /dev/shm;
    /// `accepts_clients` is left None.
    pub fn read() -> Self {
        jack_evidence()
    }
}

/// The RTC devices present among `/dev/rtc` and `/dev/rtc0`.
pub fn rtc_devices() -> Vec<String> {
    existing(&["/dev/rtc", "/dev/rtc0"])
}

/// Whether the ALSA sequencer device `/dev/snd/seq` exists.
pub fn snd_seq_present() -> bool {
    Path::new("/dev/snd/seq").exists()
}

/// The tickless CPUs the kernel reports (`/sys/devices/system/cpu/nohz_full`,
/// list syntax, trimmed; `(null)` or empty when none). None when unreadable.
pub fn nohz_full_cpus() -> Option<String> {
    std::fs::read_to_string("/sys/devices/system/cpu/nohz_full")
        .ok()
        .map(|s| s.trim().to_string())
}

/// The first executable file named `name` in the directories of `$PATH`.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

fn existing(paths: &[&str]) -> Vec<String> {
    paths
        .iter()
        .filter(|p| Path::new(p).exists())
        .map(|p| p.to_string())
        .collect()
}

/// Raw MIDI devices: `/dev/midi*` and `/dev/snd/midiC*D*`, sorted.
pub fn midi_devices() -> Vec<String> {
    let mut found = Vec::new();
    let mut scan = |dir: &str, keep: &dyn Fn(&str) -> bool| {
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if keep(&n) {
                    found.push(format!("{dir}/{n}"));
                }
            }
        }
    };
    scan("/dev", &|n| n.starts_with("midi"));
    scan("/dev/snd", &|n| n.starts_with("midiC"));
    found.sort();
    found
}

fn jack_evidence() -> JackEvidence {
    let mut e = JackEvidence::default();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for entry in rd.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            if let Ok(comm) = std::fs::read_to_string(format!("/proc/{pid}/comm")) {
                let comm = comm.trim();
                if matches!(comm, "jackd" | "jackdbus" | "pipewire") {
                    e.processes.push((pid, comm.to_string()));
                }
            }
        }
    }
    e.processes.sort();
    if let Ok(rd) = std::fs::read_dir("/dev/shm") {
        for entry in rd.flatten() {
            let n = entry.file_name().to_string_lossy().into_owned();
            if n.starts_with("jack_default") || n.starts_with("jack-") {
                e.shm.push(n);
            }
        }
    }
    e.shm.sort();
    e
}
