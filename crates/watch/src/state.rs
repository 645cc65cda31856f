//! The machine's state and steal time, read by the writer between
//! intervals (never in an RT loop).

use crate::store::MachineState;

fn read_trim(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// The frequency governors of `cpus` (`none` without cpufreq), distinct,
/// comma-separated in CPU order.
pub fn governors(cpus: &[usize]) -> String {
    let mut v: Vec<String> = Vec::new();
    for c in cpus {
        let g = read_trim(&format!(
            "/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_governor"
        ))
        .unwrap_or_else(|| "none".into());
        if !v.contains(&g) {
            v.push(g);
        }
    }
    v.join(",")
}

/// Reads the state now. `preempt_model` and `virtualization` come from the
/// system report taken at the start (`firmtime_rt::system::SystemInfo`);
/// the preemption mode is re-read where the kernel exposes it
/// (`/sys/kernel/debug/sched/preempt`), so a change at run time shows.
pub fn read(cpus: &[usize], preempt_at_start: &str, virtualization: &str) -> MachineState {
    let preempt = read_trim("/sys/kernel/debug/sched/preempt")
        .and_then(|t| firmtime_rt::system::parse_preempt_debugfs(&t))
        .map_or_else(|| preempt_at_start.to_string(), |m| m.name().to_string());
    MachineState {
        kernel_release: read_trim("/proc/sys/kernel/osrelease").unwrap_or_default(),
        kernel_cmdline: read_trim("/proc/cmdline").unwrap_or_default(),
        governors: governors(cpus),
        preempt_model: preempt,
        clocksource: read_trim("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .unwrap_or_default(),
        virtualization: virtualization.to_string(),
        tuned_profile: read_trim("/etc/tuned/active_profile")
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "none".into()),
    }
}

/// Per-CPU steal from the text of /proc/stat, in USER_HZ ticks (0 for a
/// CPU not listed).
pub fn parse_steal_ticks(stat: &str, cpus: &[usize]) -> Vec<u64> {
    cpus.iter()
        .map(|c| {
            let tag = format!("cpu{c}");
            stat.lines()
                .find(|l| l.split_whitespace().next() == Some(tag.as_str()))
                .and_then(|l| l.split_whitespace().nth(8)?.parse().ok())
                .unwrap_or(0)
        })
        .collect()
}

/// Per-CPU steal so far, ns (10 ms resolution).
pub fn steal_ns(cpus: &[usize]) -> Vec<u64> {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = u64::try_from(hz).ok().filter(|&h| h > 0).unwrap_or(100);
    parse_steal_ticks(&text, cpus)
        .into_iter()
        .map(|t| t * (1_000_000_000 / hz))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_is_the_eighth_field_of_each_cpu_line() {
        let stat =
            "cpu  10 0 5 100 0 0 0 7 0 0\ncpu0 5 0 2 50 0 0 0 3 0 0\ncpu1 5 0 3 50 0 0 0 4 0 0\n";
        assert_eq!(parse_steal_ticks(stat, &[0, 1, 5]), vec![3, 4, 0]);
    }
}
