//! `firmtime lab overhead` (being written).

use super::Common;
use crate::Outcome;

/// Arguments of `firmtime lab overhead`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    common: Common,
}

pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let _ = args.common;
    anyhow::bail!("firmtime lab overhead is not built yet")
}
