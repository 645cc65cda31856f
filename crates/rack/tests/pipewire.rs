//! The rack as a client of PipeWire's JACK: the chain test of `rack.rs`
//! (`chain/`) on a private headless PipeWire; this process uses PipeWire's
//! libjack (one per process, hence a binary of its own). Skipped, saying
//! why, without pipewire, pipewire-jack or the LADSPA SDK's amp plugin.

mod chain;

use firmtime_jack::ServerKind;
use firmtime_ladspa::Scan;
use std::path::PathBuf;

const AMP: &str =
    "[[stage]]\nname = \"gain\"\nplugin = \"amp:amp_mono\"\ncontrols = { Gain = 0.5 }\n";

#[test]
fn chain_in_pipewire_halves_a_signal() {
    let dir = PathBuf::from("/usr/lib/ladspa");
    if !dir.join("amp.so").exists() {
        firmtime_rt::testing::skip("/usr/lib/ladspa/amp.so missing (apt install ladspa-sdk)");
        return;
    }
    chain::halves_a_signal(&Scan::dirs(&[dir]), AMP, ServerKind::PipeWire);
}
