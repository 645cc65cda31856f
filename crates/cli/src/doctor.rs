//! `firmtime doctor` (being written).

use crate::Outcome;
use std::path::PathBuf;

/// Arguments of `firmtime doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Write the checks and the system block as JSON to PATH (`-` for stdout).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
}

pub fn run(args: DoctorArgs) -> anyhow::Result<Outcome> {
    if let Some(p) = &args.json {
        crate::args::write_json(p, &serde_json::json!({"checks": []}))?;
    }
    Ok(Outcome::Ok)
}
