use std::error::Error;
use std::path::PathBuf;

use crate::access::{parse_block_trace, AccessSpec};
use crate::gc::{run_sweep, GcConfig, GcPolicy, GcResult, ThreadedLogging, RANDOM_WRITE_COST};
use crate::plot::{line_chart, Chart, Series};

use super::{parse_list, CommonArgs};

#[derive(clap::Args, Debug, Clone)]
pub struct GcArgs {
    /// Disk size in blocks.
    #[arg(long, default_value_t = 1_000_000)]
    pub disk_blocks: u64,
    #[arg(long, default_value_t = 128)]
    pub segment_blocks: u32,
    /// Comma-separated disk utilizations (live / disk blocks).
    #[arg(long, default_value = "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.75,0.8,0.85")]
    pub utilizations: String,
    /// Comma-separated: timestamp, greedy, cost-benefit, cost-hotness, balanced, oracle, or "all".
    #[arg(long, default_value = "greedy,cost-benefit")]
    pub policies: String,
    /// uniform, hot-cold, zipf or trace.
    #[arg(long, default_value = "hot-cold")]
    pub access: String,
    /// Hot-cold: fraction of the blocks that are hot.
    #[arg(long, default_value_t = 0.1)]
    pub hot_fraction: f64,
    /// Hot-cold: fraction of the writes that go to hot blocks.
    #[arg(long, default_value_t = 0.9)]
    pub hot_writes: f64,
    #[arg(long, default_value_t = 1.0)]
    pub zipf_exponent: f64,
    /// Trace file of block numbers (with --access trace).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Overwrites before measuring, per live block.
    #[arg(long, default_value_t = 4.0)]
    pub warmup: f64,
    /// Measured overwrites, per live block.
    #[arg(long, default_value_t = 4.0)]
    pub measure: f64,
    /// Victims selected per cleaning pass.
    #[arg(long, default_value_t = 8)]
    pub clean_batch: usize,
    /// Cost-benefit skips segments changed within this many user writes.
    #[arg(long, default_value_t = 0)]
    pub min_quiet_writes: u64,
    /// Histogram bins over [0, 1] (64 divides the default 128-block segments evenly).
    #[arg(long, default_value_t = 64)]
    pub histogram_bins: usize,
    /// Plot the histogram of the run closest to this utilization (default: the highest).
    #[arg(long)]
    pub histogram_at: Option<f64>,
    /// Worker threads (0 = all cores).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Write cost against utilization (Rosenblum's figure), as SVG.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Write amplification against utilization, as SVG.
    #[arg(long)]
    pub plot_wa: Option<PathBuf>,
    /// Do not simulate: load results saved with --json and only print / plot them.
    #[arg(long)]
    pub from_json: Option<PathBuf>,
    /// Segment utilization distribution at the highest utilization, as SVG.
    #[arg(long)]
    pub histogram: Option<PathBuf>,
    /// Threaded logging (hole plugging), comma-separated modes to run: off (append only),
    /// always (plug every write below the cleaner's low-water mark, F2FS SSR's target),
    /// adaptive (plug a victim the policy picks instead of cleaning it when R < 2/(1-u) and
    /// R is below the measured cost of recent cleaning), per-victim (adaptive without the
    /// measured gate).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "off")]
    pub threaded: Vec<ThreadedLogging>,
    /// R: cost of one plugged (random) block write in sequential block writes; a finite
    /// number >= 1. Default: fio on this machine, 203,472 / 19,144 blocks/s.
    #[arg(long, value_name = "R", default_value_t = RANDOM_WRITE_COST, value_parser = parse_random_write_cost)]
    pub random_write_cost: f64,
    /// Threaded logging: cost per user write (plugged blocks at R) against utilization, as SVG.
    #[arg(long)]
    pub plot_cost: Option<PathBuf>,
    /// Threaded logging: fraction of user writes plugged into holes against utilization, as SVG.
    #[arg(long)]
    pub plot_plugged: Option<PathBuf>,
    #[command(flatten)]
    pub common: CommonArgs,
}

impl GcArgs {
    pub fn access_spec(&self) -> Result<AccessSpec, Box<dyn Error>> {
        Ok(match self.access.as_str() {
            "uniform" => AccessSpec::Uniform,
            "hot-cold" => AccessSpec::HotCold {
                hot_fraction: self.hot_fraction,
                hot_write_fraction: self.hot_writes,
            },
            "zipf" => AccessSpec::Zipf {
                exponent: self.zipf_exponent,
            },
            "trace" => {
                let path = self
                    .trace
                    .as_ref()
                    .ok_or("--access trace needs --trace FILE")?;
                AccessSpec::Trace {
                    blocks: parse_block_trace(&std::fs::read_to_string(path)?)?,
                }
            }
            other => return Err(format!("unknown access pattern {other:?}").into()),
        })
    }

    pub fn policies(&self) -> Result<Vec<GcPolicy>, Box<dyn Error>> {
        if self.policies == "all" {
            return Ok(GcPolicy::all());
        }
        self.policies
            .split(',')
            .map(|n| {
                GcPolicy::from_name(n.trim()).ok_or_else(|| format!("unknown policy {n:?}").into())
            })
            .collect()
    }

    pub fn jobs(&self) -> Result<Vec<GcConfig>, Box<dyn Error>> {
        let access = self.access_spec()?;
        let utilizations: Vec<f64> = parse_list(&self.utilizations)?;
        let mut jobs = Vec::new();
        for policy in self.policies()? {
            for &threaded in &self.threaded {
                for &u in &utilizations {
                    if !(0.0..1.0).contains(&u) {
                        return Err(format!("utilization {u} outside (0, 1)").into());
                    }
                    // The simulated log keeps the cleaner's reserve free (low water:
                    // streams + 2, a batch of victims, the open segments): refuse what
                    // would not fit rather than fail inside a worker thread. (The
                    // oracle's stream count depends on the trace; it checks itself.)
                    let streams = match policy {
                        GcPolicy::Shared(k) if !k.build(0).wants_temperature_streams() => 2,
                        _ => 4,
                    };
                    let seg = self.segment_blocks.max(1) as u64;
                    let disk = self.disk_blocks / seg * seg;
                    let reserve = 2 * streams + 2 + self.clean_batch.max(1) as u64;
                    let room = disk.saturating_sub((reserve + 1) * seg);
                    if !matches!(policy, GcPolicy::Oracle)
                        && (u * disk as f64).round() as u64 > room
                    {
                        return Err(format!(
                            "--utilizations: {u} leaves no room for the cleaner's reserve of \
                             {reserve} segments of {seg} blocks on {disk} blocks; at most {:.3} \
                             here (use a larger --disk-blocks or smaller --segment-blocks)",
                            room as f64 / disk.max(1) as f64
                        )
                        .into());
                    }
                    let mut c = GcConfig::new(self.disk_blocks, u, policy);
                    c.segment_blocks = self.segment_blocks;
                    c.access = access.clone();
                    c.warmup_writes_per_block = self.warmup;
                    c.measure_writes_per_block = self.measure;
                    c.clean_batch_segments = self.clean_batch;
                    c.min_quiet_writes = self.min_quiet_writes;
                    c.histogram_bins = self.histogram_bins;
                    c.seed = self.common.seed;
                    c.threaded = threaded;
                    c.random_write_cost = self.random_write_cost;
                    jobs.push(c);
                }
            }
        }
        Ok(jobs)
    }
}

fn parse_random_write_cost(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r >= 1.0 => Ok(r),
        _ => Err(format!(
            "{s:?} is not a valid R: expected a finite number >= 1 (a random block write \
             costs at least a sequential one)"
        )),
    }
}

pub(super) fn run(args: GcArgs) -> Result<(), Box<dyn Error>> {
    let started = std::time::Instant::now();
    let mut results: Vec<GcResult> = match &args.from_json {
        Some(path) => serde_json::from_str(&std::fs::read_to_string(path)?)?,
        None => run_sweep(&args.jobs()?, args.threads, !args.common.quiet),
    };
    for r in results.iter_mut() {
        // Results saved before threaded logging have no cost: nothing was plugged, so it is
        // the write cost.
        if r.plugged_blocks == 0 && r.cost == 0.0 {
            r.cost = r.write_cost;
        }
    }
    let elapsed_secs = started.elapsed().as_secs_f64();
    if args.common.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        print_table(&results);
        eprintln!("{} runs in {elapsed_secs:.1} s", results.len());
    }
    if let Some(path) = &args.plot {
        plot_curves(path, &results, Metric::WriteCost)?;
    }
    if let Some(path) = &args.plot_wa {
        plot_curves(path, &results, Metric::WriteAmplification)?;
    }
    if let Some(path) = &args.histogram {
        plot_histogram(path, &results, args.histogram_at)?;
    }
    if let Some(path) = &args.plot_cost {
        plot_threaded(path, &results, Metric::Cost)?;
    }
    if let Some(path) = &args.plot_plugged {
        plot_threaded(path, &results, Metric::PluggedFraction)?;
    }
    Ok(())
}

fn print_table(results: &[GcResult]) {
    if results.iter().any(|r| r.threaded != ThreadedLogging::Off) {
        print_threaded_table(results);
        return;
    }
    println!(
        "{:<13} {:>6} {:>8} {:>8} {:>10} {:>10} {:>10}",
        "policy", "util", "WA", "w.cost", "efficiency", "victim u", "cleaned"
    );
    for r in results {
        println!(
            "{:<13} {:>6.3} {:>8.3} {:>8.3} {:>10.3} {:>10.3} {:>10}",
            r.policy,
            r.utilization,
            r.write_amplification,
            r.write_cost,
            r.cleaner_efficiency,
            r.mean_victim_utilization,
            r.segments_cleaned
        );
    }
}

fn print_threaded_table(results: &[GcResult]) {
    println!(
        "{:<13} {:>9} {:>6} {:>8} {:>8} {:>8} {:>10} {:>8}",
        "policy", "threaded", "util", "WA", "w.cost", "cost", "victim u", "plugged"
    );
    for r in results {
        println!(
            "{:<13} {:>9} {:>6.3} {:>8.3} {:>8.3} {:>8.3} {:>10.3} {:>8.3}",
            r.policy,
            r.threaded.name(),
            r.utilization,
            r.write_amplification,
            r.write_cost,
            r.cost,
            r.mean_victim_utilization,
            r.plugged_fraction()
        );
    }
    for s in switch_points(results) {
        let at = |x: Option<f64>| x.map_or("none in range".to_string(), |u| format!("{u:.3}"));
        println!(
            "{} {}: always beats off from u = {}; adaptive plugs > 1 % from u = {}; \
             adaptive / min(off, always) at most {:.3}",
            s.access,
            s.policy,
            at(s.always_beats_off),
            at(s.adaptive_plugs),
            s.adaptive_worst_ratio
        );
    }
}

/// Where threaded logging starts to pay, for one access pattern and policy.
pub(crate) struct SwitchPoint {
    pub access: String,
    pub policy: String,
    /// The utilization where always's cost crosses below off's (linear interpolation of
    /// off − always between the neighbouring runs); None if it never does in the range.
    pub always_beats_off: Option<f64>,
    /// The lowest utilization where adaptive plugged more than 1 % of the writes.
    pub adaptive_plugs: Option<f64>,
    /// The largest adaptive cost / min(off cost, always cost) over the utilizations run in all
    /// three modes (NaN if there are none).
    pub adaptive_worst_ratio: f64,
}

pub(crate) fn switch_points(results: &[GcResult]) -> Vec<SwitchPoint> {
    let mut keys: Vec<(String, String)> = Vec::new();
    for r in results {
        let k = (r.access.clone(), r.policy.clone());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut out = Vec::new();
    for (access, policy) in keys {
        let curve = |mode: ThreadedLogging| {
            let mut v: Vec<&GcResult> = results
                .iter()
                .filter(|r| r.access == access && r.policy == policy && r.threaded == mode)
                .collect();
            v.sort_by(|a, b| a.utilization.total_cmp(&b.utilization));
            v
        };
        let (off, always, adaptive) = (
            curve(ThreadedLogging::Off),
            curve(ThreadedLogging::Always),
            curve(ThreadedLogging::Adaptive),
        );
        let same_u = |a: &GcResult, b: &GcResult| (a.utilization - b.utilization).abs() < 1e-9;
        let pairs: Vec<(f64, f64)> = off
            .iter()
            .filter_map(|o| {
                always
                    .iter()
                    .find(|a| same_u(o, a))
                    .map(|a| (o.utilization, o.cost - a.cost))
            })
            .collect();
        let always_beats_off = pairs.iter().enumerate().find_map(|(i, &(u, d))| {
            if d <= 0.0 {
                return None;
            }
            Some(match i.checked_sub(1).map(|j| pairs[j]) {
                Some((u0, d0)) => u0 + (u - u0) * (-d0) / (d - d0),
                None => u,
            })
        });
        let adaptive_plugs = adaptive
            .iter()
            .find(|r| r.plugged_fraction() > 0.01)
            .map(|r| r.utilization);
        let adaptive_worst_ratio = adaptive
            .iter()
            .filter_map(|a| {
                let o = off.iter().find(|o| same_u(o, a))?;
                let l = always.iter().find(|l| same_u(l, a))?;
                Some(a.cost / o.cost.min(l.cost))
            })
            .fold(f64::NAN, f64::max);
        if off.is_empty() || always.is_empty() {
            continue;
        }
        out.push(SwitchPoint {
            access,
            policy,
            always_beats_off,
            adaptive_plugs,
            adaptive_worst_ratio,
        });
    }
    out
}

fn by_policy(results: &[GcResult], value: impl Fn(&GcResult) -> f64) -> Vec<Series> {
    let mut series: Vec<Series> = Vec::new();
    for r in results {
        let point = (r.utilization, value(r));
        match series.iter_mut().find(|s| s.label == r.policy) {
            Some(s) => s.points.push(point),
            None => series.push(Series {
                label: r.policy.clone(),
                points: vec![point],
            }),
        }
    }
    series
}

#[derive(Clone, Copy)]
pub(crate) enum Metric {
    WriteCost,
    WriteAmplification,
    /// Threaded logging: cost per user write, plugged blocks at R.
    Cost,
    /// Threaded logging: share of user writes plugged.
    PluggedFraction,
}

/// The access pattern of a set of runs (they share one), for plot titles.
fn access_of(results: &[GcResult]) -> String {
    results
        .first()
        .map(|r| r.access.clone())
        .unwrap_or_default()
}

pub(crate) fn plot_curves(
    path: &std::path::Path,
    results: &[GcResult],
    metric: Metric,
) -> Result<(), Box<dyn Error>> {
    let access = access_of(results);
    let (series, name) = match metric {
        Metric::WriteCost => (by_policy(results, |r| r.write_cost), "Write cost"),
        Metric::WriteAmplification => (
            by_policy(results, |r| r.write_amplification),
            "Write amplification",
        ),
        Metric::Cost | Metric::PluggedFraction => return plot_threaded(path, results, metric),
    };
    let title = format!("{name} vs disk utilization ({access})");
    let chart = Chart {
        title: &title,
        x_label: "disk utilization",
        y_label: name,
        y_max: Some(14.0),
        log_y: false,
        legend: plotters::prelude::SeriesLabelPosition::UpperLeft,
    };
    line_chart(path, &chart, &series)
}

/// The distribution of segment utilizations at the run closest to `at` (default: highest).
pub(crate) fn plot_histogram(
    path: &std::path::Path,
    results: &[GcResult],
    at: Option<f64>,
) -> Result<(), Box<dyn Error>> {
    let highest = results.iter().map(|r| r.utilization).fold(0.0, f64::max);
    let wanted = at.unwrap_or(highest);
    let top = results
        .iter()
        .map(|r| r.utilization)
        .min_by(|a, b| (a - wanted).abs().total_cmp(&(b - wanted).abs()))
        .unwrap_or(highest);
    let series: Vec<Series> = results
        .iter()
        .filter(|r| (r.utilization - top).abs() < 1e-9)
        .map(|r| {
            let total: u64 = r.segment_histogram.iter().sum::<u64>().max(1);
            let bins = r.segment_histogram.len() as f64;
            let points = r
                .segment_histogram
                .iter()
                .enumerate()
                .map(|(i, &c)| ((i as f64 + 0.5) / bins, c as f64 / total as f64))
                .collect();
            Series {
                label: r.policy.clone(),
                points,
            }
        })
        .collect();
    let title = format!(
        "Segment utilization distribution at {:.0} % disk utilization",
        top * 100.0
    );
    let chart = Chart {
        title: &title,
        x_label: "segment utilization",
        y_label: "fraction of segments",
        y_max: None,
        log_y: false,
        legend: plotters::prelude::SeriesLabelPosition::UpperLeft,
    };
    line_chart(path, &chart, &series)
}

/// Threaded logging: one line per policy and mode (cost, or plugged fraction without `off`).
pub(crate) fn plot_threaded(
    path: &std::path::Path,
    results: &[GcResult],
    metric: Metric,
) -> Result<(), Box<dyn Error>> {
    let access = access_of(results);
    let r_cost = results
        .first()
        .map_or(RANDOM_WRITE_COST, |r| r.random_write_cost);
    // Without cleaning, `always` costs exactly R whatever the policy: one line says it.
    let always_is_r = results
        .iter()
        .filter(|r| r.threaded == ThreadedLogging::Always)
        .all(|r| (r.cost - r_cost).abs() < 1e-9);
    let mut series: Vec<Series> = Vec::new();
    for r in results {
        let y = match metric {
            Metric::Cost if always_is_r && r.threaded == ThreadedLogging::Always => continue,
            Metric::PluggedFraction if r.threaded == ThreadedLogging::Off => continue,
            Metric::PluggedFraction => r.plugged_fraction(),
            _ => r.cost,
        };
        let label = format!("{} {}", r.policy, r.threaded.name());
        match series.iter_mut().find(|s| s.label == label) {
            Some(s) => s.points.push((r.utilization, y)),
            None => series.push(Series {
                label,
                points: vec![(r.utilization, y)],
            }),
        }
    }
    for s in series.iter_mut() {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let (title, y_label, y_max) = match metric {
        Metric::PluggedFraction => (
            format!("Share of user writes plugged into holes ({access})"),
            "plugged / user writes",
            Some(1.0),
        ),
        _ => {
            let (x0, x1) = results
                .iter()
                .map(|r| r.utilization)
                .fold((f64::MAX, f64::MIN), |(a, b), u| (a.min(u), b.max(u)));
            series.push(Series {
                label: if always_is_r {
                    format!("always, every policy (= R = {r_cost:.1})")
                } else {
                    format!("R = {r_cost:.1}")
                },
                points: vec![(x0, r_cost), (x1, r_cost)],
            });
            (
                format!("Cost per user write with threaded logging ({access})"),
                "cost (sequential block writes)",
                Some(40.0),
            )
        }
    };
    let chart = Chart {
        title: &title,
        x_label: "disk utilization",
        y_label,
        y_max,
        log_y: false,
        legend: plotters::prelude::SeriesLabelPosition::UpperLeft,
    };
    line_chart(path, &chart, &series)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        gc: GcArgs,
    }

    #[test]
    fn threaded_modes_and_r_parse_and_bad_values_name_the_argument() {
        let cli = Cli::try_parse_from([
            "t",
            "--threaded",
            "off,adaptive",
            "--random-write-cost",
            "4",
        ])
        .expect("valid");
        assert_eq!(
            cli.gc.threaded,
            [ThreadedLogging::Off, ThreadedLogging::Adaptive]
        );
        assert_eq!(cli.gc.random_write_cost, 4.0);
        assert_eq!(cli.gc.jobs().expect("jobs").len(), 2 * 10 * 2);
        let default = Cli::try_parse_from(["t"]).expect("valid");
        assert_eq!(default.gc.threaded, [ThreadedLogging::Off]);
        assert_eq!(default.gc.random_write_cost, RANDOM_WRITE_COST);
        for (flag, value) in [
            ("--random-write-cost", "0.5"),
            ("--random-write-cost", "inf"),
            ("--threaded", "sometimes"),
        ] {
            let err = Cli::try_parse_from(["t", flag, value])
                .err()
                .expect("rejected")
                .to_string();
            assert!(err.contains(flag), "{err}");
        }
    }

    /// A utilization that leaves no room for the simulated cleaner's reserve
    /// is refused by name (it used to panic inside a worker thread).
    #[test]
    fn utilization_without_room_for_the_reserve_is_refused() {
        let args = |policies: &str, u: &str| {
            Cli::try_parse_from([
                "t",
                "--disk-blocks",
                "32768",
                "--segment-blocks",
                "256",
                "--policies",
                policies,
                "--utilizations",
                u,
            ])
            .expect("valid flags")
        };
        let err = args("balanced", "0.88").gc.jobs().expect_err("refused");
        assert!(err.to_string().contains("--utilizations"), "{err}");
        // Greedy keeps two streams, not four: 0.88 fits for it.
        assert_eq!(args("greedy", "0.88").gc.jobs().expect("fits").len(), 1);
        assert_eq!(args("balanced", "0.85").gc.jobs().expect("fits").len(), 1);
    }
}
