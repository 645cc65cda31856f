//! Billing arithmetic (Etsion et al. 2003, Table 3, Figure 4) is exact, and
//! the kernel's accounting scheme is stated.

use firmtime_lab::billing::{self, BillingRow, KernelAccounting, ProcAccounting, QuantumBill};

fn q(duration_ns: u64, ticks: u32) -> QuantumBill {
    QuantumBill { duration_ns, ticks }
}

#[test]
fn billing_ratio_and_missed_quanta_are_exact() {
    // 4 ms ticks. Five quanta, 3 charged no tick.
    let quanta = [
        q(500_000, 0),
        q(3_900_000, 0),
        q(1_000_000, 1),
        q(8_100_000, 2),
        q(100_000, 0),
    ];
    let acc = ProcAccounting {
        utime_ticks: 1,
        stime_ticks: 0,
        schedstat_ns: Some(13_600_000),
    };
    let r = BillingRow::compute(&quanta, 4_000_000, Some((acc, 100)));
    assert_eq!(r.runtime_ns, 13_600_000);
    assert_eq!(r.quanta, 5);
    assert_eq!(r.ticks, 3);
    assert_eq!(r.billed_ns, 12_000_000);
    assert_eq!(r.billing_ratio, Some(12_000_000.0 / 13_600_000.0));
    assert_eq!(r.missed_quanta, 3);
    assert_eq!(r.missed_percent, Some(60.0));
    let p = r.proc.unwrap();
    assert_eq!(p.stat_ns, 10_000_000);
    assert_eq!(p.stat_ratio, Some(10_000_000.0 / 13_600_000.0));
    assert_eq!(p.schedstat_ratio, Some(1.0));
}

#[test]
fn nothing_ran_means_no_ratio_rather_than_zero() {
    let r = BillingRow::compute(&[], 4_000_000, None);
    assert_eq!(r.billing_ratio, None);
    assert_eq!(r.missed_percent, None);
    assert!(r.proc.is_none());
}

#[test]
fn accounting_differences_saturate() {
    let a = ProcAccounting {
        utime_ticks: 10,
        stime_ticks: 4,
        schedstat_ns: Some(900),
    };
    let b = ProcAccounting {
        utime_ticks: 3,
        stime_ticks: 5,
        schedstat_ns: Some(100),
    };
    assert_eq!(
        a.since(&b),
        ProcAccounting {
            utime_ticks: 7,
            stime_ticks: 0,
            schedstat_ns: Some(800)
        }
    );
}

#[test]
fn own_thread_accounting_reads() {
    let tid = firmtime_lab::workloads::gettid();
    let acc = ProcAccounting::read(&format!("self/task/{tid}")).unwrap();
    // /proc/PID/schedstat exists without CONFIG_SCHEDSTATS (its first field
    // is sum_exec_runtime), so it is read here.
    assert!(acc.schedstat_ns.is_some());
    let e = ProcAccounting::read("999999999").unwrap_err();
    assert!(e.message().contains("/proc/999999999/stat"));
}

#[test]
fn fig4_bins_by_tenths_of_a_tick() {
    let quanta = [
        q(100_000, 0),
        q(300_000, 1),
        q(3_500_000, 0),
        q(3_600_000, 1),
        q(90_000_000, 22),
    ];
    let f = billing::fig4(&quanta, 4_000_000, 20);
    let rows: Vec<(f64, u64, f64, u64)> = f
        .iter()
        .map(|b| (b.quantum_ticks, b.quanta, b.mean_billed_ticks, b.unbilled))
        .collect();
    assert_eq!(
        rows,
        vec![
            (0.0, 2, 0.5, 1),
            (0.8, 1, 0.0, 1),
            (0.9, 1, 1.0, 0),
            (19.9, 1, 22.0, 0)
        ]
    );
}

#[test]
fn the_explanation_names_the_scheme_and_cputime_adjust() {
    let k =
        KernelAccounting::from_flags(Some(250), 100, Some(true), Some(false), Some(false), None);
    assert!(k.explanation.contains("CONFIG_TICK_CPU_ACCOUNTING"));
    assert!(k.explanation.contains("250 Hz"));
    assert!(k.explanation.contains("cputime_adjust"));
    assert!(k.explanation.contains("interrupt time is charged"));
    let v = KernelAccounting::from_flags(Some(1000), 100, Some(false), Some(true), None, None);
    assert!(v.explanation.contains("VIRT_CPU_ACCOUNTING_GEN"));
    assert_eq!(
        billing::paper_row("X Server").unwrap().billing_ratio.hz100,
        0.0202
    );
}
