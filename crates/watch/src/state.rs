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

pub use firmtime_rt::system::parse_steal_ticks;

/// Per-CPU steal so far, ns (10 ms resolution).
pub fn steal_ns(cpus: &[usize]) -> Vec<u64> {
    firmtime_rt::system::steal_ns_per_cpu(cpus)
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
