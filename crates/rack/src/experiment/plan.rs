//! What to run: the points of Figures 5–8, their timing, and the rack
//! file of a point at a load.

use crate::error::{Error, ErrorKind, Result};
use crate::file::{RackFile, RemoteSpec, StageKind, StageSpec};
use firmtime_net::{Work, WorkMode};
use serde::Serialize;
use std::net::SocketAddr;

/// Where the load runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Placement {
    /// The `waste_time` plugin in the rack.
    Local,
    /// The workers' built-in work, one stage per worker, in series.
    Remote {
        /// Worker count.
        workers: usize,
        /// Window, 0 to 2.
        window: u8,
    },
}

/// One point of a figure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PointSpec {
    /// Figure number, 5 to 8.
    pub figure: u8,
    /// Sample rate, Hz.
    pub rate: u32,
    /// Frames per period.
    pub period_frames: u32,
    /// Where the load runs.
    pub placement: Placement,
    /// `Some(f)`: one step at load `f` (Figure 7) instead of a ramp.
    pub fixed: Option<f64>,
}

impl PointSpec {
    /// The period in milliseconds.
    pub fn period_ms(&self) -> f64 {
        f64::from(self.period_frames) * 1000.0 / f64::from(self.rate)
    }
}

/// How long steps last and how the ramp moves.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Timing {
    /// Idle measurement per point, s.
    pub baseline_s: f64,
    /// Counted time per step, s.
    pub step_s: f64,
    /// Settling time after a change, before counting, s.
    pub settle_s: f64,
    /// Coarse ramp step.
    pub coarse: f64,
    /// Fine ramp step.
    pub fine: f64,
    /// First fraction.
    pub start: f64,
}

impl Timing {
    /// The full run: every point of Figures 5–8 at full length.
    pub fn full() -> Self {
        Timing {
            baseline_s: 2.0,
            step_s: 1.0,
            settle_s: 0.1,
            coarse: 0.1,
            fine: 0.02,
            start: 0.5,
        }
    }

    /// `--quick`: shorter steps, coarser fine steps.
    pub fn quick() -> Self {
        Timing {
            baseline_s: 1.0,
            step_s: 0.3,
            settle_s: 0.05,
            coarse: 0.1,
            fine: 0.05,
            start: 0.5,
        }
    }
}

/// The points of Figures 5–8 (`quick`: a subset).
pub fn plan(quick: bool) -> Vec<PointSpec> {
    let mut v = Vec::new();
    let p = |figure, rate, period_frames, placement, fixed| PointSpec {
        figure,
        rate,
        period_frames,
        placement,
        fixed,
    };
    let (f5_44, f5_96): (&[u32], &[u32]) = if quick {
        (&[64, 128, 256], &[])
    } else {
        (&[64, 96, 128, 256, 512], &[140, 210, 288])
    };
    for &n in f5_44 {
        v.push(p(5, 44_100, n, Placement::Local, None));
    }
    for &n in f5_96 {
        v.push(p(5, 96_000, n, Placement::Local, None));
    }
    for workers in 1..=3 {
        v.push(p(
            6,
            44_100,
            128,
            Placement::Remote { workers, window: 0 },
            None,
        ));
    }
    let f7: &[(u32, u32, usize)] = if quick {
        &[
            (44_100, 96, 1),
            (44_100, 96, 2),
            (44_100, 96, 4),
            (96_000, 210, 7),
        ]
    } else {
        &[
            (44_100, 96, 1),
            (44_100, 96, 2),
            (44_100, 96, 3),
            (44_100, 96, 4),
            (96_000, 210, 4),
            (96_000, 210, 7),
        ]
    };
    for &(rate, n, workers) in f7 {
        v.push(p(
            7,
            rate,
            n,
            Placement::Remote { workers, window: 2 },
            Some(0.5),
        ));
    }
    let f8: &[(u32, usize)] = if quick {
        &[(210, 4), (210, 7)]
    } else {
        &[(140, 4), (210, 4), (288, 4), (432, 4), (210, 7)]
    };
    for &(n, workers) in f8 {
        v.push(p(
            8,
            96_000,
            n,
            Placement::Remote { workers, window: 1 },
            None,
        ));
    }
    v
}

/// The rack file of a point at load `fraction`.
pub fn rack_for(spec: &PointSpec, workers: &[SocketAddr], fraction: f64) -> Result<RackFile> {
    let stages = match spec.placement {
        Placement::Local => vec![StageSpec {
            name: "load".into(),
            kind: StageKind::Plugin("waste_time".into()),
            controls: vec![
                ("Start fraction".into(), fraction as f32),
                ("Step".into(), 0.0),
                ("Step interval (s)".into(), 0.0),
            ],
            remote: None,
            at: Default::default(),
        }],
        Placement::Remote { workers: n, window } => {
            if workers.len() < n {
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!(
                        "this point needs {n} workers but {} were given",
                        workers.len()
                    ),
                ));
            }
            workers[..n]
                .iter()
                .enumerate()
                .map(|(k, w)| StageSpec {
                    name: format!("w{}", k + 1),
                    kind: StageKind::Work {
                        work: Work {
                            fraction,
                            mode: WorkMode::Sleep,
                        },
                        channels: Some(1),
                    },
                    controls: Vec::new(),
                    remote: Some(RemoteSpec {
                        worker: w.to_string(),
                        key_file: None,
                        window,
                        encrypt: false,
                        standby: None,
                    }),
                    at: Default::default(),
                })
                .collect()
        }
    };
    Ok(RackFile {
        origin: format!("figure {} point", spec.figure),
        client: "firmtime-experiment".into(),
        connect_in: Vec::new(),
        connect_out: Vec::new(),
        deadline: 0.9,
        stages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn plan_covers_figures_5_to_8() {
        for quick in [true, false] {
            let p = plan(quick);
            for f in 5..=8 {
                assert!(p.iter().any(|s| s.figure == f), "figure {f} quick={quick}");
            }
            assert!(p
                .iter()
                .filter(|s| s.figure == 7)
                .all(|s| s.fixed.is_some()
                    && matches!(s.placement, Placement::Remote { window: 2, .. })));
            assert!(p
                .iter()
                .filter(|s| s.figure == 6)
                .all(|s| matches!(s.placement, Placement::Remote { window: 0, .. })));
        }
        assert_eq!(
            plan(false)
                .iter()
                .map(|s| match s.placement {
                    Placement::Remote { workers, .. } => workers,
                    _ => 0,
                })
                .max(),
            Some(7)
        );
    }

    #[test]
    fn rack_for_a_remote_point_has_one_stage_per_worker() {
        let spec = PointSpec {
            figure: 8,
            rate: 96_000,
            period_frames: 210,
            placement: Placement::Remote {
                workers: 2,
                window: 1,
            },
            fixed: None,
        };
        let w: Vec<SocketAddr> = vec![
            "127.0.0.1:1".parse().unwrap(),
            "127.0.0.1:2".parse().unwrap(),
        ];
        let f = rack_for(&spec, &w, 0.3).unwrap();
        assert_eq!(f.stages.len(), 2);
        assert_eq!(f.stages[1].remote.as_ref().unwrap().worker, "127.0.0.1:2");
        assert_eq!(f.stages[1].remote.as_ref().unwrap().window, 1);
        assert!(rack_for(&spec, &w[..1], 0.3).is_err());
    }
}
