//! `lsfs sim cleaner-report`: turns the raw output of `scripts/cleaner-bench.sh` (one directory
//! per run, holding `meta.env` and the `lsfs gc stats --json` snapshots `stats-NNN.json`, the
//! first taken after the fill, the last at the end) into a table (markdown and JSON) and SVG
//! plots: the segment-utilization histogram per policy, write amplification per policy and
//! workload, and write amplification over time.
//!
//! Steady-state figures are differences between the first and the last snapshot, so the fill
//! (written once, never cleaned) does not dilute them. Three write amplifications:
//!
//! * `wa_engine` = (Δuser + Δcleaner) / Δuser: the engine's own definition (`lsfs gc stats`),
//!   the closest to the simulator's WA; its "user" blocks include metadata and the
//!   checkpoints that end cleaning passes, so more frequent passes lower it a little;
//! * `wa_data` = Δfile data written / (Δfile data written − Δfile data copied): file data
//!   alone, Rohner's and the simulator's definition (engines before commit 487f717 do not
//!   report it);
//! * `wa_device` = (Δuser + Δcleaner) / data, where data is the 4 KiB blocks the workload
//!   wrote (its own count): blocks the log wrote per block the application wrote. It can be
//!   below 1: overwrites of a hot file that meet in the cache reach the log once.
//!
//! E = 1 − Δcopied / (Δsegments cleaned × segment blocks), which treats every victim as a full
//! segment (victims are closed segments). Passes are counted by reason from the server's log
//! (`server.log`, lines `cleaner (REASON): …`): "interval" and "idle" passes run the policy
//! under test; "low space" and "foreground" passes use greedy whatever the policy.

use std::collections::BTreeMap;
use std::error::Error;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use plotters::prelude::SeriesLabelPosition;
use serde_json::Value;

use crate::plot::{bar_chart, line_chart, Chart, Series};

#[derive(clap::Args, Debug, Clone)]
pub struct CleanerReportArgs {
    /// The directory holding one sub-directory per run.
    #[arg(long)]
    pub runs: PathBuf,
    /// Where results.{md,json} and the SVGs go.
    #[arg(long)]
    pub out_dir: PathBuf,
}

#[derive(Debug, Default, serde::Serialize)]
pub struct RunSummary {
    pub workload: String,
    pub policy: String,
    pub status: String,
    pub error: String,
    pub image_bytes: u64,
    pub segment_bytes: u64,
    /// `df` used blocks / total blocks after the fill.
    pub used_percent_after_fill: f64,
    /// The engine's live blocks / blocks in all segments after the fill.
    pub live_percent_after_fill: f64,
    pub data_blocks_measured: u64,
    pub user_blocks_measured: u64,
    pub cleaner_blocks_measured: u64,
    pub wa_device: Option<f64>,
    pub wa_engine: Option<f64>,
    pub wa_data: Option<f64>,
    /// Since mount, fill included (what `lsfs gc stats` prints).
    pub write_amplification_since_mount: f64,
    pub cleaner_efficiency: Option<f64>,
    pub mean_victim_utilization: Option<f64>,
    pub passes: u64,
    /// Passes by reason (interval, idle, low space, foreground), from the server's log.
    pub passes_by_reason: BTreeMap<String, u64>,
    pub late_aborts: u64,
    pub elapsed_secs: f64,
    /// Workload steps after the fill that completed (the measured phase ends with the last).
    pub steps_completed: usize,
    /// Calls the NFS replay skipped because lsfs answered ENOSPC (the replay goes on).
    pub enospc_calls: u64,
    pub fsck: String,
    /// (data blocks written since the fill / live blocks, `wa_engine` of the interval ending
    /// there).
    pub wa_by_step: Vec<(f64, f64)>,
    /// The engine's per-pass (seconds since mount, WA since mount), thinned to ≤ 200 points.
    pub wa_history: Vec<(f64, f64)>,
    /// The final 512-bin segment-utilization histogram.
    pub histogram: Vec<u64>,
}

fn read_meta(dir: &Path) -> Result<BTreeMap<String, String>, Box<dyn Error>> {
    let text = fs::read_to_string(dir.join("meta.env"))?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect())
}

/// The report the workload printed after step `n`, if the step completed.
fn workload_report(dir: &Path, n: usize) -> Option<Value> {
    let text = fs::read_to_string(dir.join(format!("workload-{n}.json"))).ok()?;
    serde_json::from_str::<Value>(&text).ok()
}

/// Data blocks the workload wrote in step `n` (its `bytes_written` / 4 KiB).
fn data_blocks(dir: &Path, n: usize) -> f64 {
    workload_report(dir, n)
        .and_then(|v| v["bytes_written"].as_f64())
        .map_or(0.0, |b| (b / 4096.0).ceil())
}

/// Passes per reason in the server's log.
fn passes_by_reason(dir: &Path) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let Ok(text) = fs::read_to_string(dir.join("server.log")) else {
        return out;
    };
    for line in text.lines() {
        if let Some(rest) = line.split("cleaner (").nth(1) {
            if let Some((reason, _)) = rest.split_once("):") {
                *out.entry(reason.to_string()).or_default() += 1;
            }
        }
    }
    out
}

fn num(v: &Value, key: &str) -> f64 {
    v["stats"][key].as_f64().unwrap_or(0.0)
}

pub fn summarize(dir: &Path) -> Result<RunSummary, Box<dyn Error>> {
    let meta = read_meta(dir)?;
    let get = |k: &str| meta.get(k).cloned().unwrap_or_default();
    let getn = |k: &str| get(k).parse::<f64>().unwrap_or(0.0);
    let mut snapshots: Vec<PathBuf> = fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("stats-") && n.ends_with(".json"))
        })
        .collect();
    snapshots.sort();
    let mut stats: Vec<Value> = snapshots
        .iter()
        .filter_map(|p| serde_json::from_str(&fs::read_to_string(p).ok()?).ok())
        .collect();
    // Measure up to the last step that completed: a failed step wrote no report, so its data
    // blocks are unknown (its snapshot, if any, is left out).
    let completed = (1..stats.len())
        .take_while(|&n| workload_report(dir, n).is_some())
        .count();
    stats.truncate(completed + 1);
    let mut s = RunSummary {
        workload: get("workload"),
        policy: get("policy"),
        status: get("status"),
        error: get("error"),
        image_bytes: getn("image_bytes") as u64,
        segment_bytes: getn("segment_bytes") as u64,
        used_percent_after_fill: getn("used_percent_after_fill"),
        live_percent_after_fill: getn("live_percent_after_fill"),
        elapsed_secs: getn("elapsed_secs"),
        fsck: get("fsck"),
        ..RunSummary::default()
    };
    let (Some(first), Some(last)) = (stats.first(), stats.last()) else {
        return Ok(s);
    };
    s.steps_completed = completed;
    s.enospc_calls = (1..=completed)
        .filter_map(|n| workload_report(dir, n))
        .flat_map(|v| {
            let ops: Vec<Value> = v["by_op"]
                .as_object()
                .map(|m| m.values().cloned().collect())
                .unwrap_or_default();
            ops
        })
        .filter_map(|op| op["skipped"]["io: StorageFull"].as_u64())
        .sum();
    let segment_blocks = (s.segment_bytes / 4096).max(1) as f64;
    let live_blocks = getn("live_blocks_after_fill").max(1.0);
    let du = num(last, "user_blocks_written") - num(first, "user_blocks_written");
    let dc = num(last, "cleaner_blocks_written") - num(first, "cleaner_blocks_written");
    let dseg = num(last, "segments_cleaned") - num(first, "segments_cleaned");
    let dcopied = num(last, "blocks_copied") - num(first, "blocks_copied");
    // Snapshot i (i ≥ 1) follows workload step i.
    let data_by_step: Vec<f64> = (1..stats.len()).map(|n| data_blocks(dir, n)).collect();
    let data: f64 = data_by_step.iter().sum();
    s.data_blocks_measured = data as u64;
    s.user_blocks_measured = du as u64;
    s.cleaner_blocks_measured = dc as u64;
    if du > 0.0 {
        s.wa_engine = Some((du + dc) / du);
    }
    if data > 0.0 {
        s.wa_device = Some((du + dc) / data);
    }
    let dfw = num(last, "file_data_written") - num(first, "file_data_written");
    let dfc = num(last, "file_data_copied") - num(first, "file_data_copied");
    if dfw > dfc && dfw > 0.0 {
        s.wa_data = Some(dfw / (dfw - dfc));
    }
    if dseg > 0.0 {
        let u = dcopied / (dseg * segment_blocks);
        s.mean_victim_utilization = Some(u);
        s.cleaner_efficiency = Some(1.0 - u);
    }
    s.write_amplification_since_mount = num(last, "write_amplification");
    s.passes = (num(last, "passes") - num(first, "passes")) as u64;
    s.passes_by_reason = passes_by_reason(dir);
    s.late_aborts = (num(last, "late_aborts") - num(first, "late_aborts")) as u64;
    let mut data_so_far = 0.0;
    for (i, w) in stats.windows(2).enumerate() {
        let du = num(&w[1], "user_blocks_written") - num(&w[0], "user_blocks_written");
        let dc = num(&w[1], "cleaner_blocks_written") - num(&w[0], "cleaner_blocks_written");
        data_so_far += data_by_step[i];
        if du > 0.0 {
            s.wa_by_step
                .push((data_so_far / live_blocks, (du + dc) / du));
        }
    }
    let history: Vec<(f64, f64)> = last["stats"]["wa_history"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p[0].as_f64()?, p[1].as_f64()?)))
        .collect();
    let stride = history.len().div_ceil(200).max(1);
    s.wa_history = history.into_iter().step_by(stride).collect();
    s.histogram = last["histogram"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_u64)
        .collect();
    Ok(s)
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".into(), |x| format!("{x:.digits$}"))
}

pub fn markdown(runs: &[RunSummary]) -> String {
    let mut md = String::new();
    md.push_str(
        "| workload | policy | live after fill | WA | data WA | log blocks per app block | E | mean victim u | data GiB | passes: policy / low-space greedy | late aborts | time s | fsck | status |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in runs {
        let reason = |k: &str| r.passes_by_reason.get(k).copied().unwrap_or(0);
        let status = if r.error.is_empty() && r.enospc_calls > 0 {
            format!("{} ({} calls failed with ENOSPC)", r.status, r.enospc_calls)
        } else if r.error.is_empty() {
            r.status.clone()
        } else {
            format!(
                "{} after {} steps: {}",
                r.status,
                r.steps_completed,
                r.error.replace('|', "/")
            )
        };
        let _ = writeln!(
            md,
            "| {} | {} | {:.1} % | {} | {} | {} | {} | {} | {:.2} | {} / {} | {} | {:.0} | {} | {} |",
            r.workload,
            r.policy,
            r.live_percent_after_fill,
            opt(r.wa_engine, 3),
            opt(r.wa_data, 3),
            opt(r.wa_device, 3),
            opt(r.cleaner_efficiency, 3),
            opt(r.mean_victim_utilization, 3),
            r.data_blocks_measured as f64 * 4096.0 / (1u64 << 30) as f64,
            reason("interval") + reason("idle"),
            reason("low space") + reason("foreground"),
            r.late_aborts,
            r.elapsed_secs,
            r.fsck,
            status
        );
    }
    md
}

/// Sum 512 bins into `bins` and normalise to fractions of the used segments.
fn coarse_histogram(h: &[u64], bins: usize) -> Vec<(f64, f64)> {
    let total: u64 = h.iter().sum();
    if h.is_empty() || total == 0 {
        return Vec::new();
    }
    let per = h.len().div_ceil(bins);
    h.chunks(per)
        .enumerate()
        .map(|(i, c)| {
            let x = (i as f64 + 0.5) * per as f64 / h.len() as f64;
            (x, c.iter().sum::<u64>() as f64 / total as f64)
        })
        .collect()
}

pub fn run(args: CleanerReportArgs) -> Result<(), Box<dyn Error>> {
    let mut dirs: Vec<PathBuf> = fs::read_dir(&args.runs)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("meta.env").exists())
        .collect();
    dirs.sort();
    let runs: Vec<RunSummary> = dirs
        .iter()
        .map(|d| summarize(d))
        .collect::<Result<_, _>>()?;
    fs::create_dir_all(&args.out_dir)?;
    fs::write(args.out_dir.join("results.md"), markdown(&runs))?;
    fs::write(
        args.out_dir.join("results.json"),
        serde_json::to_string_pretty(&runs)?,
    )?;
    let mut workloads: Vec<String> = runs.iter().map(|r| r.workload.clone()).collect();
    workloads.dedup();
    let mut policies: Vec<String> = Vec::new();
    for r in &runs {
        if !policies.contains(&r.policy) {
            policies.push(r.policy.clone());
        }
    }
    for w in &workloads {
        let of_w: Vec<&RunSummary> = runs.iter().filter(|r| &r.workload == w).collect();
        let hist: Vec<Series> = of_w
            .iter()
            .filter(|r| !r.histogram.is_empty())
            .map(|r| Series {
                label: r.policy.clone(),
                points: coarse_histogram(&r.histogram, 64),
            })
            .collect();
        if !hist.is_empty() {
            line_chart(
                &args.out_dir.join(format!("histogram-{w}.svg")),
                &Chart {
                    title: &format!("{w}: segment utilization at the end (64 of 512 bins)"),
                    x_label: "live blocks / segment blocks",
                    y_label: "fraction of used segments",
                    y_max: None,
                    log_y: false,
                    legend: SeriesLabelPosition::UpperLeft,
                },
                &hist,
            )?;
        }
        let steps: Vec<Series> = of_w
            .iter()
            .filter(|r| !r.wa_by_step.is_empty())
            .map(|r| Series {
                label: r.policy.clone(),
                points: r.wa_by_step.clone(),
            })
            .collect();
        if !steps.is_empty() {
            line_chart(
                &args.out_dir.join(format!("wa-over-time-{w}.svg")),
                &Chart {
                    title: &format!("{w}: write amplification of each interval"),
                    x_label: "data blocks written since the fill / live blocks",
                    y_label: "(user + cleaner) / user",
                    y_max: None,
                    log_y: false,
                    legend: SeriesLabelPosition::UpperLeft,
                },
                &steps,
            )?;
        }
    }
    let bars: Vec<(String, Vec<f64>)> = policies
        .iter()
        .map(|p| {
            let v = workloads
                .iter()
                .map(|w| {
                    runs.iter()
                        .find(|r| &r.workload == w && &r.policy == p)
                        .and_then(|r| r.wa_engine)
                        .unwrap_or(0.0)
                })
                .collect();
            (p.clone(), v)
        })
        .collect();
    if !workloads.is_empty() {
        bar_chart(
            &args.out_dir.join("wa.svg"),
            "write amplification after the fill, per workload and policy",
            "(user + cleaner) / user blocks",
            &workloads,
            &bars,
        )?;
    }
    eprintln!(
        "{} runs → {}",
        runs.len(),
        args.out_dir.join("results.md").display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(user: u64, cleaner: u64, segs: u64, copied: u64) -> String {
        serde_json::json!({
            "stats": {
                "user_blocks_written": user, "cleaner_blocks_written": cleaner,
                "segments_cleaned": segs, "blocks_copied": copied, "passes": segs,
                "late_aborts": 0, "write_amplification": (user + cleaner) as f64 / user as f64,
                "wa_history": [[1, 1.0], [2, 1.5]]
            },
            "histogram": [0, 3, 1, 0]
        })
        .to_string()
    }

    /// Measured figures are differences between the fill snapshot and the last one.
    #[test]
    fn steady_state_excludes_the_fill() {
        let dir = std::env::temp_dir().join(format!("lsfs-cleaner-report-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        fs::write(
            dir.join("meta.env"),
            "workload=hot-cold\npolicy=greedy\nstatus=ok\nsegment_bytes=1048576\nlive_blocks_after_fill=1000\n",
        )
        .unwrap();
        fs::write(dir.join("stats-000.json"), snapshot(1000, 0, 0, 0)).unwrap();
        fs::write(dir.join("workload-1.json"), r#"{"bytes_written": 3276800}"#).unwrap();
        fs::write(dir.join("workload-2.json"), r#"{"bytes_written": 3276800}"#).unwrap();
        fs::write(
            dir.join("server.log"),
            "x cleaner (interval): 2 victims\ny cleaner (low space): 8 victims\nz cleaner (interval): 1\n",
        )
        .unwrap();
        fs::write(dir.join("stats-001.json"), snapshot(2000, 500, 4, 500)).unwrap();
        fs::write(dir.join("stats-002.json"), snapshot(3000, 1500, 10, 1500)).unwrap();
        let s = summarize(&dir).unwrap();
        assert_eq!(s.wa_engine, Some(1.75));
        assert_eq!(
            (s.user_blocks_measured, s.cleaner_blocks_measured),
            (2000, 1500)
        );
        // 1600 data blocks written by the workload: the rest of "user" is metadata.
        assert_eq!(s.data_blocks_measured, 1600);
        assert_eq!(s.wa_device, Some(3500.0 / 1600.0));
        assert_eq!(s.passes_by_reason.get("interval"), Some(&2));
        assert_eq!(s.passes_by_reason.get("low space"), Some(&1));
        // 1500 copied out of 10 segments × 256 blocks.
        assert!((s.cleaner_efficiency.unwrap() - (1.0 - 1500.0 / 2560.0)).abs() < 1e-12);
        assert_eq!(s.wa_by_step, vec![(0.8, 1.5), (1.6, 2.0)]);
        assert_eq!(s.histogram, vec![0, 3, 1, 0]);
        assert!(markdown(&[s]).contains("| hot-cold | greedy |"));
        fs::remove_dir_all(&dir).unwrap();
    }
}
