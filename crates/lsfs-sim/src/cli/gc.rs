use std::error::Error;
use std::path::PathBuf;

use crate::access::{parse_block_trace, AccessSpec};
use crate::gc::{run_sweep, GcConfig, GcPolicy, GcResult};
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
            for &u in &utilizations {
                if !(0.0..1.0).contains(&u) {
                    return Err(format!("utilization {u} outside (0, 1)").into());
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
                jobs.push(c);
            }
        }
        Ok(jobs)
    }
}

pub(super) fn run(args: GcArgs) -> Result<(), Box<dyn Error>> {
    let started = std::time::Instant::now();
    let results: Vec<GcResult> = match &args.from_json {
        Some(path) => serde_json::from_str(&std::fs::read_to_string(path)?)?,
        None => run_sweep(&args.jobs()?, args.threads, !args.common.quiet),
    };
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
    Ok(())
}

fn print_table(results: &[GcResult]) {
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
}

pub(crate) fn plot_curves(
    path: &std::path::Path,
    results: &[GcResult],
    metric: Metric,
) -> Result<(), Box<dyn Error>> {
    let access = results
        .first()
        .map(|r| r.access.clone())
        .unwrap_or_default();
    let (series, name) = match metric {
        Metric::WriteCost => (by_policy(results, |r| r.write_cost), "Write cost"),
        Metric::WriteAmplification => (
            by_policy(results, |r| r.write_amplification),
            "Write amplification",
        ),
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
