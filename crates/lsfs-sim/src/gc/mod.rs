//! The cleaning simulator, in Rosenblum and Ousterhout's setup: a disk of fixed-size segments
//! holding one-block files, filled to a given utilization, then overwritten according to an
//! access pattern while a cleaner keeps free segments available. It runs the same
//! [`SelectionPolicy`] implementations as the engine's cleaner, plus an [`oracle`] that knows
//! every block's next overwrite and serves as a lower bound.
//!
//! Metrics (Rosenblum's definitions):
//! * write amplification WA = (user + copied blocks) / user blocks;
//! * write cost = (user + copied + blocks read by the cleaner) / user blocks, where a cleaned
//!   segment is read whole unless it is empty (then 2 / (1 − u) for victims at utilization u);
//! * cleaner efficiency E = 1 − copied / blocks in cleaned segments (Rohner);
//! * the distribution of segment utilizations, sampled over all closed segments at every
//!   cleaning pass of the measured phase (Rosenblum Fig. 5/6, Rohner's 512-bin histograms).

mod log;
pub mod oracle;
mod placement;
mod sweep;

use lsfs_policy::gc::PolicyKind;
use serde::{Deserialize, Serialize};

use crate::access::AccessSpec;
pub use sweep::{run_sweep, SweepJob};

/// A policy for the simulator: one of the shared policies, the oracle, or an ablation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GcPolicy {
    Shared(PolicyKind),
    Oracle,
    /// Ablation for issue 3: hot and cold streams exactly as `balanced` routes them, but a
    /// class-blind shared policy selects victims, so nothing divides the space on purpose.
    Streams(PolicyKind),
}

impl GcPolicy {
    pub fn name(self) -> &'static str {
        match self {
            GcPolicy::Shared(k) => k.name(),
            GcPolicy::Oracle => "oracle",
            GcPolicy::Streams(PolicyKind::Greedy) => "streams-greedy",
            GcPolicy::Streams(PolicyKind::CostBenefit) => "streams-cb",
            GcPolicy::Streams(_) => "streams-other",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "oracle" => return Some(GcPolicy::Oracle),
            "streams-greedy" => return Some(GcPolicy::Streams(PolicyKind::Greedy)),
            "streams-cb" => return Some(GcPolicy::Streams(PolicyKind::CostBenefit)),
            _ => {}
        }
        PolicyKind::from_name(name).map(GcPolicy::Shared)
    }

    pub fn all() -> Vec<GcPolicy> {
        let mut v: Vec<GcPolicy> = PolicyKind::ALL.into_iter().map(GcPolicy::Shared).collect();
        v.push(GcPolicy::Streams(PolicyKind::Greedy));
        v.push(GcPolicy::Streams(PolicyKind::CostBenefit));
        v.push(GcPolicy::Oracle);
        v
    }
}

#[derive(Clone, Debug)]
pub struct GcConfig {
    /// Physical blocks on the simulated disk (rounded down to whole segments).
    pub disk_blocks: u64,
    pub segment_blocks: u32,
    /// Live blocks / disk blocks.
    pub utilization: f64,
    pub policy: GcPolicy,
    pub access: AccessSpec,
    /// User overwrites before measuring, in multiples of the live block count (at least two
    /// disk-fulls are written whatever this says).
    pub warmup_writes_per_block: f64,
    /// Measured user overwrites, in multiples of the live block count (at least one disk-full).
    pub measure_writes_per_block: f64,
    /// Segments the cleaner tries to free per pass (it also selects that many victims at once).
    pub clean_batch_segments: usize,
    /// Cost-benefit's protection against recently changed segments, in user writes.
    pub min_quiet_writes: u64,
    pub histogram_bins: usize,
    pub seed: u64,
}

impl GcConfig {
    /// Defaults matching the reference setup: 128-block segments, 90/10 hot/cold.
    pub fn new(disk_blocks: u64, utilization: f64, policy: GcPolicy) -> Self {
        Self {
            disk_blocks,
            segment_blocks: 128,
            utilization,
            policy,
            access: AccessSpec::HotCold {
                hot_fraction: 0.1,
                hot_write_fraction: 0.9,
            },
            warmup_writes_per_block: 4.0,
            measure_writes_per_block: 4.0,
            clean_batch_segments: 8,
            min_quiet_writes: 0,
            histogram_bins: 100,
            seed: 1,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GcResult {
    pub policy: String,
    pub access: String,
    pub utilization: f64,
    pub disk_blocks: u64,
    pub segment_blocks: u32,
    pub user_writes: u64,
    pub copied_blocks: u64,
    pub read_blocks: u64,
    pub segments_cleaned: u64,
    pub write_amplification: f64,
    pub write_cost: f64,
    pub cleaner_efficiency: f64,
    /// Mean utilization of the segments the cleaner chose.
    pub mean_victim_utilization: f64,
    /// Counts of closed-segment utilizations in `histogram_bins` equal bins over [0, 1].
    pub segment_histogram: Vec<u64>,
    /// Counts of victim utilizations, same bins.
    pub victim_histogram: Vec<u64>,
}

/// Run one simulation; deterministic for a given config.
pub fn simulate(config: &GcConfig) -> GcResult {
    log::SegmentLog::run(config)
}

#[cfg(test)]
mod tests;
