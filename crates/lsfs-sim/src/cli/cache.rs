use std::error::Error;
use std::path::PathBuf;

use lsfs_policy::cache::CachePolicyKind;
use serde::Serialize;

use crate::cache::{parse_trace, simulate_cache, write_trace, CacheConfig, Request};
use crate::ftl::{preconditioned, Ftl, FtlGeometry, FtlKind};
use crate::plot::{line_chart, Chart, Series};
use crate::progress::progress_bar;
use crate::workload::kang::KangWorkload;

use super::{parse_list, CommonArgs};

/// Cache simulator: hit ratio and after-cache writes per policy and cache size, optionally
/// replayed on FTLs for erase counts (Kang §2.4, Table 2-2 workloads).
#[derive(clap::Args, Debug, Clone)]
pub struct CacheArgs {
    /// R/W page trace (4 KiB pages); otherwise --workload.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Synthetic Table 2-2 workloads: video, mixed, fileserver, tpcc, or all.
    #[arg(long, default_value = "all")]
    pub workload: String,
    /// Volume scale of the synthetic workloads (1 = the published volumes).
    #[arg(long, default_value_t = 0.25)]
    pub scale: f64,
    /// Comma-separated cache sizes in MiB.
    #[arg(long, default_value = "4,8,16,32,64")]
    pub cache_mib: String,
    /// Flash block size in MiB (the block-aware policies' unit; Kang: 4 MiB on microSD).
    #[arg(long, default_value_t = 4)]
    pub block_mib: u32,
    /// Comma-separated policies or "all".
    #[arg(long, default_value = "all")]
    pub policies: String,
    /// Replay after-cache writes on these FTLs (page-level, fast, none): 16 GiB, 15 % OP.
    #[arg(long, default_value = "page-level,fast")]
    pub ftl: String,
    /// Do not write the dirty pages left at the end.
    #[arg(long)]
    pub no_final_flush: bool,
    /// Write each after-cache trace into this directory.
    #[arg(long)]
    pub after_trace_dir: Option<PathBuf>,
    /// Hit ratio against cache size, as SVG (one chart per workload: NAME-hit.svg; and
    /// NAME-erases.svg when an FTL is replayed).
    #[arg(long)]
    pub plot_dir: Option<PathBuf>,
    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(Serialize, Debug, Clone)]
pub struct CacheRow {
    pub workload: String,
    pub policy: String,
    pub cache_mib: u64,
    pub hit_ratio: f64,
    pub device_reads: u64,
    pub device_writes: u64,
    pub mean_pages_per_block_run: f64,
    pub page_level_erases: Option<u64>,
    pub page_level_waf: Option<f64>,
    pub fast_erases: Option<u64>,
    pub fast_waf: Option<f64>,
}

const PAGE_BYTES: u64 = 4096;

pub(super) fn run(args: CacheArgs) -> Result<(), Box<dyn Error>> {
    let traces: Vec<(String, Vec<Request>)> = match &args.trace {
        Some(p) => vec![(
            p.display().to_string(),
            parse_trace(&std::fs::read_to_string(p)?)?,
        )],
        None => workloads(&args.workload)?
            .into_iter()
            .map(|w| {
                (
                    w.name().to_string(),
                    w.generate(args.scale, args.common.seed),
                )
            })
            .collect(),
    };
    let policies: Vec<CachePolicyKind> = if args.policies == "all" {
        CachePolicyKind::ALL.to_vec()
    } else {
        args.policies
            .split(',')
            .map(|n| {
                CachePolicyKind::from_name(n.trim()).ok_or_else(|| format!("unknown policy {n:?}"))
            })
            .collect::<Result<_, _>>()?
    };
    let sizes: Vec<u64> = parse_list(&args.cache_mib)?;
    let ftls: Vec<FtlKind> = if args.ftl == "none" {
        Vec::new()
    } else {
        args.ftl
            .split(',')
            .map(|n| FtlKind::from_name(n.trim()).ok_or_else(|| format!("unknown FTL {n:?}")))
            .collect::<Result<_, _>>()?
    };
    let pages_per_block = (args.block_mib as u64 * (1 << 20) / PAGE_BYTES) as u32;
    let geometry = FtlGeometry {
        pages_per_block,
        ..FtlGeometry::kang()
    };
    let devices: Vec<(FtlKind, Box<dyn Ftl + Send + Sync>)> = ftls
        .iter()
        .map(|&k| (k, preconditioned(k, &geometry)))
        .collect();
    let mut jobs = Vec::new();
    for (t, _) in traces.iter().enumerate() {
        for &size in &sizes {
            for &p in &policies {
                jobs.push((t, size, p));
            }
        }
    }
    let bar = progress_bar(jobs.len() as u64, "cache", !args.common.quiet);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let rows = std::sync::Mutex::new(vec![None; jobs.len()]);
    let failure = std::sync::Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&(t, size, policy)) = jobs.get(i) else {
                    break;
                };
                match run_one(&args, &traces[t], size, policy, pages_per_block, &devices) {
                    Ok(row) => rows.lock().expect("lock")[i] = Some(row),
                    Err(e) => *failure.lock().expect("lock") = Some(e.to_string()),
                }
                bar.inc(1);
            });
        }
    });
    bar.finish_and_clear();
    if let Some(e) = failure.into_inner().expect("lock") {
        return Err(e.into());
    }
    let rows: Vec<CacheRow> = rows
        .into_inner()
        .expect("lock")
        .into_iter()
        .flatten()
        .collect();
    if args.common.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print_rows(&rows);
        print_ranking(&rows);
    }
    if let Some(dir) = &args.plot_dir {
        plot(dir, &rows)?;
    }
    Ok(())
}

fn workloads(name: &str) -> Result<Vec<KangWorkload>, Box<dyn Error>> {
    if name == "all" {
        return Ok(KangWorkload::ALL.to_vec());
    }
    name.split(',')
        .map(|n| {
            KangWorkload::from_name(n.trim())
                .ok_or_else(|| format!("unknown workload {n:?}").into())
        })
        .collect()
}

fn run_one(
    args: &CacheArgs,
    (name, trace): &(String, Vec<Request>),
    cache_mib: u64,
    policy: CachePolicyKind,
    pages_per_block: u32,
    devices: &[(FtlKind, Box<dyn Ftl + Send + Sync>)],
) -> Result<CacheRow, Box<dyn Error>> {
    let config = CacheConfig {
        capacity_pages: (cache_mib * (1 << 20) / PAGE_BYTES) as usize,
        pages_per_block,
        policy,
        flush_at_end: !args.no_final_flush,
    };
    let r = simulate_cache(trace, &config);
    if let Some(dir) = &args.after_trace_dir {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!(
            "{}-{}-{}MiB.trace",
            name.replace('/', "_"),
            r.policy,
            cache_mib
        ));
        let reqs: Vec<Request> = r
            .after_cache_writes
            .iter()
            .map(|&page| Request { page, write: true })
            .collect();
        write_trace(
            &mut std::io::BufWriter::new(std::fs::File::create(path)?),
            &reqs,
        )?;
    }
    let mut row = CacheRow {
        workload: name.clone(),
        policy: r.policy.clone(),
        cache_mib,
        hit_ratio: r.hit_ratio,
        device_reads: r.device_reads,
        device_writes: r.device_writes,
        mean_pages_per_block_run: r.mean_pages_per_block_run,
        page_level_erases: None,
        page_level_waf: None,
        fast_erases: None,
        fast_waf: None,
    };
    for (kind, device) in devices {
        let mut ftl = device.boxed_clone();
        for &lpn in &r.after_cache_writes {
            ftl.write(lpn);
        }
        let s = ftl.stats();
        match kind {
            FtlKind::PageLevel => {
                row.page_level_erases = Some(s.erases);
                row.page_level_waf = Some(s.write_amplification());
            }
            FtlKind::Fast => {
                row.fast_erases = Some(s.erases);
                row.fast_waf = Some(s.write_amplification());
            }
        }
    }
    Ok(row)
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or("-".into(), |v| v.to_string())
}

fn print_rows(rows: &[CacheRow]) {
    println!(
        "{:<11} {:<9} {:>5} {:>7} {:>10} {:>8} {:>10} {:>10}",
        "workload", "policy", "MiB", "hit %", "writes", "pg/blk", "erase pl", "erase fast"
    );
    for r in rows {
        println!(
            "{:<11} {:<9} {:>5} {:>7.2} {:>10} {:>8.2} {:>10} {:>10}",
            r.workload,
            r.policy,
            r.cache_mib,
            r.hit_ratio * 100.0,
            r.device_writes,
            r.mean_pages_per_block_run,
            opt(r.page_level_erases),
            opt(r.fast_erases)
        );
    }
}

/// Per workload: TS-CLOCK's rank among the policies (1 = best) on each metric, summed over
/// cache sizes — the shape of Kang's claims.
fn print_ranking(rows: &[CacheRow]) {
    let mut workloads: Vec<&str> = rows.iter().map(|r| r.workload.as_str()).collect();
    workloads.dedup();
    println!(
        "\nTS-CLOCK's rank among {} policies per cache size (1 = best):",
        {
            let mut p: Vec<&str> = rows.iter().map(|r| r.policy.as_str()).collect();
            p.sort();
            p.dedup();
            p.len()
        }
    );
    println!(
        "{:<11} {:>5} {:>6} {:>7} {:>7} {:>9} {:>10}",
        "workload", "MiB", "hit", "writes", "pg/blk", "erase pl", "erase fast"
    );
    for w in workloads {
        let mut sizes: Vec<u64> = rows
            .iter()
            .filter(|r| r.workload == w)
            .map(|r| r.cache_mib)
            .collect();
        sizes.sort();
        sizes.dedup();
        for s in sizes {
            let group: Vec<&CacheRow> = rows
                .iter()
                .filter(|r| r.workload == w && r.cache_mib == s)
                .collect();
            let Some(ts) = group.iter().find(|r| r.policy == "ts-clock") else {
                continue;
            };
            let rank =
                |better: &dyn Fn(&CacheRow) -> bool| 1 + group.iter().filter(|r| better(r)).count();
            let hit = rank(&|r| r.hit_ratio > ts.hit_ratio + 1e-12);
            let writes = rank(&|r| r.device_writes < ts.device_writes);
            let run = rank(&|r| r.mean_pages_per_block_run > ts.mean_pages_per_block_run + 1e-12);
            let pl = ts
                .page_level_erases
                .map(|e| rank(&|r| r.page_level_erases.is_some_and(|x| x < e)));
            let fast = ts
                .fast_erases
                .map(|e| rank(&|r| r.fast_erases.is_some_and(|x| x < e)));
            println!(
                "{:<11} {:>5} {:>6} {:>7} {:>7} {:>9} {:>10}",
                w,
                s,
                hit,
                writes,
                run,
                opt(pl),
                opt(fast)
            );
        }
    }
}

fn plot(dir: &std::path::Path, rows: &[CacheRow]) -> Result<(), Box<dyn Error>> {
    std::fs::create_dir_all(dir)?;
    let mut workloads: Vec<&str> = rows.iter().map(|r| r.workload.as_str()).collect();
    workloads.dedup();
    for w in workloads {
        let series_of = |value: &dyn Fn(&CacheRow) -> Option<f64>| {
            let mut series: Vec<Series> = Vec::new();
            for r in rows.iter().filter(|r| r.workload == w) {
                let Some(v) = value(r) else { continue };
                match series.iter_mut().find(|s| s.label == r.policy) {
                    Some(s) => s.points.push((r.cache_mib as f64, v)),
                    None => series.push(Series {
                        label: r.policy.clone(),
                        points: vec![(r.cache_mib as f64, v)],
                    }),
                }
            }
            series
        };
        let title = format!("{w}: hit ratio vs cache size");
        let chart = Chart {
            title: &title,
            x_label: "cache MiB",
            y_label: "hit ratio",
            y_max: None,
            log_y: false,
            legend: plotters::prelude::SeriesLabelPosition::LowerRight,
        };
        line_chart(
            &dir.join(format!("{w}-hit.svg")),
            &chart,
            &series_of(&|r| Some(r.hit_ratio)),
        )?;
        let erases = series_of(&|r| r.fast_erases.map(|e| e as f64));
        if !erases.is_empty() {
            let title = format!("{w}: FAST erases vs cache size");
            let chart = Chart {
                title: &title,
                x_label: "cache MiB",
                y_label: "erases",
                y_max: None,
                log_y: false,
                legend: plotters::prelude::SeriesLabelPosition::LowerRight,
            };
            line_chart(&dir.join(format!("{w}-erases.svg")), &chart, &erases)?;
        }
    }
    Ok(())
}
