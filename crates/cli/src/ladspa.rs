//! `firmtime ladspa`: list, describe and apply LADSPA plugins.

use crate::args::{self, UsageError};
use crate::Outcome;
use firmtime_ladspa::{
    ApplyOptions, Direction, OutputFormat, Plugin, PluginInfo, PortKind, Scan, Stage,
};
use std::path::PathBuf;

/// `firmtime ladspa …` arguments.
#[derive(Debug, clap::Args)]
pub struct LadspaArgs {
    #[command(subcommand)]
    command: LadspaCommand,
}

#[derive(Debug, clap::Subcommand)]
enum LadspaCommand {
    /// List every plugin in LADSPA_PATH (default /usr/lib/ladspa:/usr/local/lib/ladspa).
    List {
        /// Write the list as JSON to PATH (`-` or a bare --json: stdout) instead of the table.
        #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "-")]
        json: Option<PathBuf>,
    },
    /// Describe one plugin and its ports, like analyseplugin.
    Info {
        /// Label (`amp_mono`), unique ID (`1048`) or FILE:LABEL (`cmt.so:amp_mono`).
        plugin: String,
        /// Sample rate used to show bounds and defaults of sample-rate ports (1000–768000 Hz).
        #[arg(long, default_value_t = 44_100, value_parser = clap::value_parser!(u32).range(args::SAMPLE_RATES))]
        rate: u32,
        /// Write the description as JSON to PATH (`-` or a bare --json: stdout) instead of text.
        #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "-")]
        json: Option<PathBuf>,
    },
    /// Run a WAV file through a chain of plugins, like applyplugin.
    ///
    /// CHAIN is `PLUGIN [CONTROL…] [PLUGIN [CONTROL…]]…`: each PLUGIN is a
    /// label, an ID or FILE:LABEL, followed by values for its control
    /// inputs in port order (`firmtime ladspa info PLUGIN` lists them);
    /// missing trailing values take the port's default. The file's channels
    /// feed the first plugin's audio inputs in order, each plugin's outputs
    /// feed the next one's inputs. A plugin given by numeric ID right after
    /// a plugin with missing controls would be read as a control: give all
    /// controls or use a label there. Options go before IN: everything
    /// after OUT is read as the chain (negative control values included).
    Apply(ApplyArgs),
    /// Write an LV2 bundle for firmtime's plugin libraries (proxy, waste_time).
    ///
    /// Copies each LIBRARY into DIR and writes manifest.ttl and one .ttl per
    /// plugin, from the libraries' LADSPA descriptors as they are now: the
    /// proxy reads its configuration and asks its workers, so write the
    /// bundle again after changing proxy.toml. LV2 hosts search
    /// ~/.lv2:/usr/local/lib/lv2:/usr/lib/lv2 (or LV2_PATH); DIR should end
    /// in `.lv2`.
    Lv2Bundle {
        /// The bundle directory, e.g. /usr/local/lib/lv2/firmtime.lv2.
        dir: PathBuf,
        /// firmtime plugin libraries (built with their LV2 entry point).
        #[arg(required = true)]
        libraries: Vec<PathBuf>,
        /// Write what was written (URIs, .ttl files, libraries) as JSON to PATH
        /// (`-` or a bare --json: stdout).
        #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "-")]
        json: Option<PathBuf>,
    },
}

#[derive(Debug, clap::Args)]
struct ApplyArgs {
    /// Input WAV file (integer PCM or 32-bit float).
    input: PathBuf,
    /// Output WAV file.
    output: PathBuf,
    /// The plugin chain: PLUGIN [CONTROL…] [PLUGIN [CONTROL…]]…
    #[arg(required = true, num_args = 1.., allow_hyphen_values = true, value_name = "CHAIN")]
    chain: Vec<String>,
    /// Frames per run() call (1–65536).
    #[arg(long, default_value_t = 2048, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_BLOCK))]
    block: usize,
    /// Silence to run after the input ends (applyplugin -s), e.g. 2s or 500ms: 0s to 60s
    /// (a bare number is seconds, as applyplugin takes it).
    #[arg(short = 's', long, value_name = "D", default_value = "0s", value_parser = args::duration_or_secs_upto(MAX_DECAY, "60s"))]
    decay: std::time::Duration,
    /// Output format: same (16-bit for integer input, float for float input), int16, float.
    #[arg(long, value_enum, default_value_t = Format::Same)]
    format: Format,
    /// Send control values outside a port's hinted range instead of refusing them.
    #[arg(long)]
    no_range_check: bool,
    /// Write the output late by the latency the plugins report (their
    /// `latency` control output), as applyplugin does. Default: compensate
    /// it, as `sox ladspa -l` does (drop that many leading frames, run that
    /// many frames of silence at the end), so the output lines up with the input.
    #[arg(long)]
    no_latency_compensation: bool,
    /// Write what was done as JSON to PATH (`-` or a bare --json: stdout).
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
}

/// The longest `--block`, frames.
const MAX_BLOCK: u64 = 65_536;
/// The longest `-s`/`--decay`: longer than any reverb's tail, and a
/// bound on what a typo can write (1e9 s once wrote 1.67 GB before failing).
const MAX_DECAY: std::time::Duration = std::time::Duration::from_secs(60);

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Format {
    Same,
    Int16,
    Float,
}

/// Runs a `firmtime ladspa` subcommand.
pub fn run(a: LadspaArgs) -> anyhow::Result<Outcome> {
    match a.command {
        LadspaCommand::List { json } => list(json),
        LadspaCommand::Info { plugin, rate, json } => info(&plugin, rate, json),
        LadspaCommand::Apply(a) => apply(a),
        LadspaCommand::Lv2Bundle {
            dir,
            libraries,
            json,
        } => lv2_bundle(&dir, &libraries, json.as_deref()),
    }
}

fn lv2_bundle(
    dir: &std::path::Path,
    libraries: &[PathBuf],
    json: Option<&std::path::Path>,
) -> anyhow::Result<Outcome> {
    if let Some(p) = json {
        args::check_output_file("--json", p)?;
    }
    let r = firmtime_ladspa::bundle::write_bundle(dir, libraries)?;
    if let Some(p) = json {
        let plugins: Vec<_> = r
            .plugins
            .iter()
            .map(|(uri, ttl)| serde_json::json!({"uri": uri, "ttl": ttl}))
            .collect();
        args::write_json(
            p,
            &serde_json::json!({"dir": r.dir, "plugins": plugins, "libraries": r.binaries}),
        )?;
    }
    let _redirect = args::StdoutToStderr::when_json_on_stdout(json)?;
    for (uri, file) in &r.plugins {
        println!("{uri}  {file}");
    }
    eprintln!(
        "firmtime: wrote {} LV2 plugin(s) from {} into {}",
        r.plugins.len(),
        r.binaries.join(", "),
        r.dir.display()
    );
    Ok(Outcome::Ok)
}

fn scan() -> Scan {
    let scan = Scan::search_path();
    for f in &scan.failures {
        eprintln!("firmtime: warning: {f}");
    }
    scan
}

fn counts(i: &PluginInfo) -> String {
    let n = |k, d| i.ports_of(k, d).len();
    format!(
        "{}>{} audio, {}>{} control",
        n(PortKind::Audio, Direction::Input),
        n(PortKind::Audio, Direction::Output),
        n(PortKind::Control, Direction::Input),
        n(PortKind::Control, Direction::Output)
    )
}

fn list(json: Option<PathBuf>) -> anyhow::Result<Outcome> {
    let scan = scan();
    let plugins = scan.plugins();
    if let Some(p) = json {
        let infos: Vec<&PluginInfo> = plugins.iter().map(|p| p.info()).collect();
        args::write_json(&p, &infos)?;
    } else {
        let mut t = crate::table::new(&["ID", "LABEL", "PORTS", "LIBRARY", "NAME"], &[0]);
        for p in &plugins {
            let i = p.info();
            let lib = i.library.file_name().unwrap_or_default().to_string_lossy();
            t.add_row([
                i.unique_id.to_string(),
                i.label.clone(),
                counts(i),
                lib.into_owned(),
                i.name.clone(),
            ]);
        }
        print!("{}", crate::table::render(&t));
    }
    if plugins.is_empty() {
        eprintln!(
            "firmtime: no LADSPA plugins in {}; install some (apt install swh-plugins cmt) or set LADSPA_PATH",
            scan.dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(":")
        );
        return Ok(Outcome::Failed);
    }
    Ok(Outcome::Ok)
}

fn info(spec: &str, rate: u32, json: Option<PathBuf>) -> anyhow::Result<Outcome> {
    let plugin = scan().find(spec).map_err(usage)?;
    let i = plugin.info();
    if let Some(p) = json {
        #[derive(serde::Serialize)]
        struct Port<'a> {
            #[serde(flatten)]
            port: &'a firmtime_ladspa::PortInfo,
            /// Bounds and default at --rate.
            lower_at_rate: Option<f32>,
            upper_at_rate: Option<f32>,
            default_at_rate: Option<f32>,
        }
        #[derive(serde::Serialize)]
        struct Out<'a> {
            #[serde(flatten)]
            info: &'a PluginInfo,
            rate: u32,
            port_values: Vec<Port<'a>>,
        }
        let port_values = i
            .ports
            .iter()
            .map(|port| {
                let (lo, hi) = port.hints.bounds(rate as f32);
                Port {
                    port,
                    lower_at_rate: lo,
                    upper_at_rate: hi,
                    default_at_rate: port.hints.default_value(rate as f32),
                }
            })
            .collect();
        args::write_json(
            &p,
            &Out {
                info: i,
                rate,
                port_values,
            },
        )?;
        return Ok(Outcome::Ok);
    }
    let yes = |b: bool| if b { "yes" } else { "no" };
    println!("Plugin Name: \"{}\"", i.name);
    println!("Plugin Label: \"{}\"", i.label);
    println!("Plugin Unique ID: {}", i.unique_id);
    println!("Library: {} (descriptor {})", i.library.display(), i.index);
    println!("Maker: \"{}\"", i.maker);
    println!("Copyright: \"{}\"", i.copyright);
    println!(
        "Properties: realtime {}, inplace-broken {}, hard-rt-capable {}",
        yes(i.properties.realtime),
        yes(i.properties.inplace_broken),
        yes(i.properties.hard_rt_capable)
    );
    println!(
        "Functions: activate {}, deactivate {}, run_adding {}",
        yes(i.has_activate),
        yes(i.has_deactivate),
        yes(i.has_run_adding)
    );
    println!("Ports (bounds and defaults at {rate} Hz):");
    for p in &i.ports {
        let mut parts = vec![
            format!("{:>3} \"{}\"", p.index, p.name),
            match p.direction {
                Direction::Input => "input".into(),
                Direction::Output => "output".into(),
            },
            match p.kind {
                PortKind::Audio => "audio".into(),
                PortKind::Control => "control".into(),
            },
        ];
        let h = &p.hints;
        if h.lower.is_some() || h.upper.is_some() {
            parts.push(p.range_text(rate as f32));
        }
        if let Some(d) = h.default_value(rate as f32) {
            parts.push(format!("default {d}"));
        }
        for (on, word) in [
            (h.sample_rate, "sample-rate"),
            (h.logarithmic, "logarithmic"),
            (h.integer, "integer"),
            (h.toggled, "toggled"),
        ] {
            if on {
                parts.push(word.into());
            }
        }
        println!("  {}", parts.join(", "));
    }
    Ok(Outcome::Ok)
}

/// Errors caused by what the user typed exit 2, like other usage errors.
fn usage(e: firmtime_ladspa::Error) -> anyhow::Error {
    use firmtime_ladspa::ErrorKind as K;
    match e.kind() {
        K::NotFound | K::InvalidControl | K::Mismatch => UsageError(e.to_string()).into(),
        _ => e.into(),
    }
}

/// Splits the chain words into plugins and their control values.
fn parse_chain(scan: &Scan, words: &[String]) -> anyhow::Result<Vec<(Plugin, Vec<f32>)>> {
    let mut out = Vec::new();
    let mut k = 0;
    while k < words.len() {
        let plugin = scan.find(&words[k]).map_err(usage)?;
        k += 1;
        let wanted = plugin
            .info()
            .ports
            .iter()
            .filter(|p| p.is_control_input())
            .count();
        let mut values = Vec::new();
        while k < words.len() {
            let w = &words[k];
            match w.parse::<f32>() {
                Ok(v) if values.len() < wanted => {
                    values.push(v);
                    k += 1;
                }
                Ok(_) => {
                    let all_digits = w.bytes().all(|b| b.is_ascii_digit());
                    if all_digits && scan.find(w).is_ok() {
                        break; // the next plugin, by ID
                    }
                    return Err(UsageError(format!(
                        "plugin {} takes {wanted} control value(s) but more were given (extra: {}); \
                         `firmtime ladspa info {}` lists its controls",
                        plugin.info().label,
                        firmtime_ladspa::shown(w),
                        plugin.info().label
                    ))
                    .into());
                }
                Err(_) => {
                    let numeric = w.starts_with(|c: char| c.is_ascii_digit() || "+-.".contains(c));
                    if numeric {
                        return Err(UsageError(format!(
                            "control value \"{}\" for plugin {} is not a number",
                            firmtime_ladspa::shown(w),
                            plugin.info().label
                        ))
                        .into());
                    }
                    break; // the next plugin, by label
                }
            }
        }
        out.push((plugin, values));
    }
    Ok(out)
}

fn apply(a: ApplyArgs) -> anyhow::Result<Outcome> {
    let scan = scan();
    let parsed = parse_chain(&scan, &a.chain)?;
    let rate = firmtime_ladspa::wav_sample_rate(&a.input)?;
    let mut stages = Vec::new();
    for (plugin, given) in parsed {
        let controls = plugin
            .info()
            .resolve_controls(&given, rate as f32, !a.no_range_check)
            .map_err(usage)?;
        stages.push(Stage { plugin, controls });
    }
    let opts = ApplyOptions {
        block_size: a.block,
        decay_seconds: a.decay.as_secs_f32(),
        format: match a.format {
            Format::Same => OutputFormat::Same,
            Format::Int16 => OutputFormat::Int16,
            Format::Float => OutputFormat::Float32,
        },
        compensate_latency: !a.no_latency_compensation,
    };
    let report = firmtime_ladspa::apply(&a.input, &a.output, &stages, &opts).map_err(usage)?;
    if let Some(p) = &a.json {
        #[derive(serde::Serialize)]
        struct Out<'a> {
            firmtime_version: &'a str,
            input: &'a std::path::Path,
            output: &'a std::path::Path,
            block: usize,
            chain: Vec<serde_json::Value>,
            #[serde(flatten)]
            report: &'a firmtime_ladspa::ApplyReport,
        }
        let chain = stages
            .iter()
            .map(|s| {
                serde_json::json!({
                    "label": s.plugin.info().label,
                    "unique_id": s.plugin.info().unique_id,
                    "library": s.plugin.info().library,
                    "controls": s.controls,
                })
            })
            .collect();
        args::write_json(
            p,
            &Out {
                firmtime_version: env!("CARGO_PKG_VERSION"),
                input: &a.input,
                output: &a.output,
                block: a.block,
                chain,
                report: &report,
            },
        )?;
    }
    if !args::is_stdout(a.json.as_deref()) {
        println!(
            "wrote {}: {} frames, {} channel(s) at {} Hz; peak {} (1 = full scale){}{}",
            a.output.display(),
            report.output_frames,
            report.output_channels,
            report.sample_rate,
            report.peak,
            if report.clipped > 0 {
                format!("; {} samples clipped", report.clipped)
            } else {
                String::new()
            },
            match (report.latency_frames, report.latency_compensated) {
                (0, _) => String::new(),
                (l, true) => format!("; latency {l} frames compensated"),
                (l, false) => format!("; late by the plugins' latency, {l} frames"),
            }
        );
    }
    Ok(Outcome::Ok)
}
