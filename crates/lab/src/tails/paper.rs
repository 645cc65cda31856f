//! Etsion et al. (2003) Table 6: the paper's tails, the rows compared.

use super::CellSpec;
use serde::Serialize;

/// Percentiles from the paper, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PaperTails {
    /// 0.9 quantile.
    pub p90_us: u64,
    /// 0.95 quantile.
    pub p95_us: u64,
    /// 0.99 quantile.
    pub p99_us: u64,
    /// Maximum.
    pub max_us: u64,
}

/// One row of the paper's Table 6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PaperRow {
    /// The cell the row stands for.
    pub cell: CellSpec,
    /// Linux 2.4 at 100 Hz, 60 ms quantum.
    pub hz100: PaperTails,
    /// Linux 2.4 at 20,000 Hz, 100 µs quantum.
    pub hz20000: PaperTails,
}

const fn tails(p90_us: u64, p95_us: u64, p99_us: u64, max_us: u64) -> PaperTails {
    PaperTails {
        p90_us,
        p95_us,
        p99_us,
        max_us,
    }
}

/// Etsion, Tsafrir and Feitelson (2003), "Effects of clock resolution on the
/// scheduling of interactive and soft real-time processes", SIGMETRICS,
/// Table 6: tails of the latency to deliver timer signals, in µs, on a
/// Pentium (uniprocessor) Linux 2.4 at 100 Hz (60 ms quantum) and at
/// 20,000 Hz (100 µs quantum). The paper has no 0.999 column.
pub const PAPER_TABLE6: [PaperRow; 10] = [
    PaperRow {
        cell: CellSpec::blk(2),
        hz100: tails(5, 8, 11, 40),
        hz20000: tails(13, 14, 21, 23),
    },
    PaperRow {
        cell: CellSpec::blk(8),
        hz100: tails(5, 12, 22, 420),
        hz20000: tails(7, 9, 13, 25),
    },
    PaperRow {
        cell: CellSpec::cont(2),
        hz100: tails(50_003, 60_003, 60_004, 160_006),
        hz20000: tails(102, 103, 18_468, 60_448),
    },
    PaperRow {
        cell: CellSpec::cont(8),
        hz100: tails(370_014, 400_014, 420_015, 740_025),
        hz20000: tails(656, 706, 15_096, 68_139),
    },
    PaperRow {
        cell: CellSpec::percent(2, 2, 0),
        hz100: tails(6, 9, 9_193, 19_153),
        hz20000: tails(13, 15, 23, 837),
    },
    PaperRow {
        cell: CellSpec::percent(2, 8, 0),
        hz100: tails(2_910, 8_419, 17_940, 32_944),
        hz20000: tails(12, 52, 53, 1_809),
    },
    PaperRow {
        cell: CellSpec::percent(8, 2, 0),
        hz100: tails(9, 12_431, 39_512, 60_003),
        hz20000: tails(14, 19, 53, 3_797),
    },
    PaperRow {
        cell: CellSpec::percent(8, 8, 0),
        hz100: tails(40_003, 60_005, 130_006, 294_291),
        hz20000: tails(53, 53, 54, 37_328),
    },
    PaperRow {
        cell: CellSpec::percent(4, 1, 2),
        hz100: tails(50_003, 50_003, 50_004, 50_005),
        hz20000: tails(55, 56, 200, 256),
    },
    PaperRow {
        cell: CellSpec::percent(4, 1, 8),
        hz100: tails(50_003, 50_003, 170_014, 280_010),
        hz20000: tails(56, 57, 59, 856),
    },
];
