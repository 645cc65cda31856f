//! `firmtime lab sleep` (being written).

use super::Common;
use crate::Outcome;

/// Arguments of `firmtime lab sleep`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    common: Common,
}

pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let _ = args.common;
    anyhow::bail!("firmtime lab sleep is not built yet")
}
