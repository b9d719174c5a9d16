use std::error::Error;
use std::path::PathBuf;

use serde::Serialize;

use crate::cache::parse_trace;
use crate::ftl::block_trace::{self, BlockTraceFormat, PageOp};
use crate::ftl::synthetic::BlockUtilizationTrace;
use crate::ftl::{build, FtlGeometry, FtlKind};
use crate::plot::{line_chart, Chart, Series};
use crate::progress::progress_bar;

use super::{parse_list, CommonArgs};

/// FTL simulator. Without --trace it runs Kang's Fig. 2-1: synthetic traces of a given block
/// utilization over an I/O range, after filling the range sequentially.
#[derive(clap::Args, Debug, Clone)]
pub struct FtlArgs {
    /// Comma-separated: page-level, fast.
    #[arg(long, default_value = "page-level,fast")]
    pub ftl: String,
    #[arg(long, default_value_t = 16)]
    pub capacity_gib: u64,
    /// Capacity in MiB instead of --capacity-gib (e.g. the size of a traced device).
    #[arg(long, conflicts_with = "capacity_gib")]
    pub capacity_mib: Option<u64>,
    /// Over-provisioning as a fraction of the capacity.
    #[arg(long, default_value_t = 0.15)]
    pub over_provisioning: f64,
    #[arg(long, default_value_t = 4096)]
    pub page_bytes: u32,
    #[arg(long, default_value_t = 128)]
    pub pages_per_block: u32,
    /// FAST log blocks (default: all over-provisioned blocks).
    #[arg(long)]
    pub log_blocks: Option<u64>,
    /// Comma-separated block utilizations (fraction of a block's pages per request).
    #[arg(long, default_value = "0.25,0.5,0.75,1.0")]
    pub block_utilizations: String,
    /// Comma-separated I/O ranges in MiB; 0 means the whole device.
    #[arg(long, default_value = "0,1024")]
    pub ranges_mib: String,
    /// GiB written after the fill and before measuring (reach steady state).
    #[arg(long, default_value_t = 32.0)]
    pub warmup_gib: f64,
    /// GiB written while measuring.
    #[arg(long, default_value_t = 16.0)]
    pub measure_gib: f64,
    /// Replay the writes of a trace instead (e.g. a cache simulator after-trace), on a device
    /// first filled sequentially.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// The trace's format: pages (lines `R|W PAGE [COUNT]`, in --page-bytes pages), blkparse
    /// (blkparse's default output of a blktrace capture) or ftrace (the kernel's
    /// block_rq_complete events as tracefs prints them). For the last two, completed write
    /// requests count, rounded out to whole pages, and completed discards drop the whole
    /// pages they cover; reads and flushes do not count.
    #[arg(long, value_enum, default_value = "pages")]
    pub trace_format: TraceFormat,
    /// Replay a blkparse or ftrace trace's writes only, as if the device ignored its
    /// discards (to see what they spare the FTL).
    #[arg(long)]
    pub ignore_discards: bool,
    /// WAF against block utilization, as SVG.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormat {
    Pages,
    Blkparse,
    Ftrace,
}

#[derive(Serialize, Debug, Clone)]
pub struct FtlRow {
    pub ftl: String,
    pub range_mib: u64,
    pub block_utilization: f64,
    pub host_pages: u64,
    pub copied_pages: u64,
    pub erases: u64,
    /// Pages the trace's discards dropped while valid (0 for other traces).
    pub trimmed_pages: u64,
    pub waf: f64,
}

impl FtlArgs {
    fn geometry(&self) -> FtlGeometry {
        FtlGeometry {
            logical_bytes: self
                .capacity_mib
                .map_or(self.capacity_gib << 30, |m| m << 20),
            over_provisioning: self.over_provisioning,
            page_bytes: self.page_bytes,
            pages_per_block: self.pages_per_block,
            fast_log_blocks: self.log_blocks,
        }
    }

    fn kinds(&self) -> Result<Vec<FtlKind>, Box<dyn Error>> {
        self.ftl
            .split(',')
            .map(|n| {
                FtlKind::from_name(n.trim()).ok_or_else(|| format!("unknown FTL {n:?}").into())
            })
            .collect()
    }
}

pub(super) fn run(args: FtlArgs) -> Result<(), Box<dyn Error>> {
    let rows = match &args.trace {
        Some(path) => replay(&args, path)?,
        None => figure_2_1(&args)?,
    };
    if args.common.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!(
            "{:<11} {:>9} {:>6} {:>12} {:>12} {:>9} {:>7}",
            "ftl", "range MiB", "util", "host pages", "copied", "erases", "WAF"
        );
        for r in &rows {
            println!(
                "{:<11} {:>9} {:>6.2} {:>12} {:>12} {:>9} {:>7.3}",
                r.ftl,
                r.range_mib,
                r.block_utilization,
                r.host_pages,
                r.copied_pages,
                r.erases,
                r.waf
            );
        }
    }
    if let Some(path) = &args.plot {
        let mut series: Vec<Series> = Vec::new();
        for r in &rows {
            let label = format!("{} range {} MiB", r.ftl, r.range_mib);
            match series.iter_mut().find(|s| s.label == label) {
                Some(s) => s.points.push((r.block_utilization, r.waf)),
                None => series.push(Series {
                    label,
                    points: vec![(r.block_utilization, r.waf)],
                }),
            }
        }
        let chart = Chart {
            title: "WAF vs block utilization (Kang Fig. 2-1)",
            x_label: "block utilization",
            y_label: "write amplification",
            y_max: None,
            log_y: false,
            legend: plotters::prelude::SeriesLabelPosition::UpperRight,
        };
        line_chart(path, &chart, &series)?;
    }
    Ok(())
}

/// Run one configuration of Fig. 2-1 and return its row. The whole device is filled
/// sequentially first (an aged device), then `warmup_pages` and `measure_pages` of the
/// synthetic trace are written; only the latter are counted.
pub fn figure_2_1_point(
    kind: FtlKind,
    geometry: &FtlGeometry,
    range_pages: u64,
    utilization: f64,
    (warmup_pages, measure_pages): (u64, u64),
    seed: u64,
) -> FtlRow {
    let mut ftl = build(kind, geometry);
    for lpn in 0..geometry.logical_pages() {
        ftl.write(lpn);
    }
    let mut trace =
        BlockUtilizationTrace::new(range_pages, geometry.pages_per_block, utilization, seed);
    for lpn in trace.by_ref().take(warmup_pages as usize) {
        ftl.write(lpn);
    }
    ftl.reset_stats();
    for lpn in trace.take(measure_pages as usize) {
        ftl.write(lpn);
    }
    let s = ftl.stats();
    FtlRow {
        ftl: kind.name().into(),
        range_mib: (range_pages * geometry.page_bytes as u64) >> 20,
        block_utilization: utilization,
        host_pages: s.host_pages,
        copied_pages: s.copied_pages,
        erases: s.erases,
        trimmed_pages: s.trimmed_pages,
        waf: s.write_amplification(),
    }
}

fn figure_2_1(args: &FtlArgs) -> Result<Vec<FtlRow>, Box<dyn Error>> {
    let g = args.geometry();
    let utilizations: Vec<f64> = parse_list(&args.block_utilizations)?;
    let ranges: Vec<u64> = parse_list(&args.ranges_mib)?;
    let mut jobs = Vec::new();
    for kind in args.kinds()? {
        for &range in &ranges {
            let range_pages = if range == 0 {
                g.logical_pages()
            } else {
                (range << 20) / g.page_bytes as u64
            };
            if range_pages > g.logical_pages() {
                return Err(format!("range {range} MiB exceeds the device").into());
            }
            for &u in &utilizations {
                jobs.push((kind, range_pages, u));
            }
        }
    }
    let bar = progress_bar(jobs.len() as u64, "ftl", !args.common.quiet);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let rows = std::sync::Mutex::new(vec![None; jobs.len()]);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&(kind, range_pages, u)) = jobs.get(i) else {
                    break;
                };
                let gib_pages = |gib: f64| (gib * (1u64 << 30) as f64) as u64 / g.page_bytes as u64;
                let volume = (gib_pages(args.warmup_gib), gib_pages(args.measure_gib));
                let row = figure_2_1_point(kind, &g, range_pages, u, volume, args.common.seed);
                rows.lock().expect("lock")[i] = Some(row);
                bar.inc(1);
            });
        }
    });
    bar.finish_and_clear();
    Ok(rows
        .into_inner()
        .expect("lock")
        .into_iter()
        .map(|r| r.expect("ran"))
        .collect())
}

/// Replay a trace's writes on a device that was first filled sequentially.
fn replay(args: &FtlArgs, path: &PathBuf) -> Result<Vec<FtlRow>, Box<dyn Error>> {
    let g = args.geometry();
    let open = || -> Result<_, Box<dyn Error>> {
        let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(std::io::BufReader::new(file))
    };
    let block = |format| -> Result<Vec<PageOp>, Box<dyn Error>> {
        let requests = block_trace::read_requests(open()?, format)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let mut ops = block_trace::page_ops(&requests, g.page_bytes);
        if args.ignore_discards {
            ops.retain(|op| matches!(op, PageOp::Write(_)));
        }
        Ok(ops)
    };
    let ops: Vec<PageOp> = match args.trace_format {
        TraceFormat::Pages => parse_trace(&std::fs::read_to_string(path)?)?
            .into_iter()
            .filter(|r| r.write)
            .map(|r| PageOp::Write(r.page))
            .collect(),
        TraceFormat::Blkparse => block(BlockTraceFormat::Blkparse)?,
        TraceFormat::Ftrace => block(BlockTraceFormat::Ftrace)?,
    };
    let mut rows = Vec::new();
    for kind in args.kinds()? {
        let stats = replay_ops(kind, &g, &ops)?;
        rows.push(FtlRow {
            ftl: kind.name().into(),
            range_mib: 0,
            block_utilization: 0.0,
            host_pages: stats.host_pages,
            copied_pages: stats.copied_pages,
            erases: stats.erases,
            trimmed_pages: stats.trimmed_pages,
            waf: stats.write_amplification(),
        });
    }
    Ok(rows)
}

/// Fill the device sequentially (an aged device), then write `writes`; counters cover only
/// the replay.
pub fn replay_writes(
    kind: FtlKind,
    g: &FtlGeometry,
    writes: &[u64],
) -> Result<crate::ftl::FtlStats, Box<dyn Error>> {
    let ops: Vec<PageOp> = writes.iter().map(|&p| PageOp::Write(p)).collect();
    replay_ops(kind, g, &ops)
}

/// Fill the device sequentially (an aged device), then write and trim as `ops` say; counters
/// cover only the replay.
pub fn replay_ops(
    kind: FtlKind,
    g: &FtlGeometry,
    ops: &[PageOp],
) -> Result<crate::ftl::FtlStats, Box<dyn Error>> {
    let pages = g.logical_pages();
    let page = |op: &PageOp| match *op {
        PageOp::Write(p) | PageOp::Trim(p) => p,
    };
    if let Some(max) = ops.iter().map(page).max() {
        if max >= pages {
            return Err(format!("trace page {max} beyond the {pages}-page device").into());
        }
    }
    let mut ftl = build(kind, g);
    for lpn in 0..pages {
        ftl.write(lpn);
    }
    ftl.reset_stats();
    for op in ops {
        match *op {
            PageOp::Write(lpn) => ftl.write(lpn),
            PageOp::Trim(lpn) => ftl.trim(lpn),
        }
    }
    Ok(ftl.stats().clone())
}
