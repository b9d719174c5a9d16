//! `lsfs sim …`: the simulators' command line. The `lsfs` binary embeds [`SimCommand`] as a
//! subcommand and calls [`run`]; `lsfs-sim` wraps the same code stand-alone.

mod cache;
mod cleaner_report;
mod ftl;
mod gc;
mod workload;

use std::error::Error;

pub use cache::{CacheArgs, CacheRow};
pub use cleaner_report::CleanerReportArgs;
pub use ftl::{figure_2_1_point, replay_ops, replay_writes, FtlArgs, FtlRow};
pub use gc::GcArgs;
pub use workload::{WorkloadArgs, WorkloadKind};

#[derive(clap::Subcommand, Debug)]
pub enum SimCommand {
    /// Cleaning simulator: write cost / WA vs utilization per policy (Rosenblum, Rohner).
    Gc(GcArgs),
    /// Page-cache simulator: hit ratio, after-cache writes, FTL erases (Kang Table 2-2).
    Cache(CacheArgs),
    /// Workload generators and external benchmark runners (drive any directory).
    Workload(WorkloadArgs),
    /// FTL simulator: WAF and erases, Kang's Fig. 2-1 or a trace replay.
    Ftl(FtlArgs),
    /// Tables and plots from the raw runs of scripts/cleaner-bench.sh.
    CleanerReport(CleanerReportArgs),
}

pub fn run(cmd: SimCommand) -> Result<(), Box<dyn Error>> {
    match cmd {
        SimCommand::Gc(args) => gc::run(args),
        SimCommand::Ftl(args) => ftl::run(args),
        SimCommand::Cache(args) => cache::run(args),
        SimCommand::Workload(args) => workload::run(args),
        SimCommand::CleanerReport(args) => cleaner_report::run(args),
    }
}

/// Options every simulator shares.
#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    /// Seed of every random choice; the same seed reproduces the same run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print results as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Hide progress bars.
    #[arg(long, short)]
    pub quiet: bool,
}

pub(crate) fn parse_list<T: std::str::FromStr>(s: &str) -> Result<Vec<T>, String>
where
    T::Err: std::fmt::Display,
{
    s.split(',')
        .map(|w| w.trim().parse::<T>().map_err(|e| format!("{w:?}: {e}")))
        .collect()
}
