//! `firmtime lab cyclic` (being written).

use super::Common;
use crate::Outcome;

/// Arguments of `firmtime lab cyclic`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    common: Common,
}

pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let _ = args.common;
    anyhow::bail!("firmtime lab cyclic is not built yet")
}
