//! `firmtime lab tails` (being written).

use super::Common;
use crate::Outcome;

/// Arguments of `firmtime lab tails`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    common: Common,
}

pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let _ = args.common;
    anyhow::bail!("firmtime lab tails is not built yet")
}
