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
//!   cleaning pass of the measured phase (Rosenblum Fig. 5/6, Rohner's 512-bin histograms);
//! * with threaded logging ([`ThreadedLogging`]), the cost per user write in sequential-write
//!   units: appended user blocks 1, plugged (random) user blocks R, copies 1, blocks read 1.

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

pub use lsfs_policy::gc::RANDOM_WRITE_COST;

/// Threaded logging (F2FS's slack space recycling, Janda's hole plugging): near full, a user
/// write may go into a dead slot of a closed, partly valid segment instead of the log head.
///
/// `always` targets like F2FS's SSR: the closed segment with the fewest live blocks of the
/// stream's temperature (any temperature if none has a hole), whose holes are filled in slot
/// order; it stays the stream's target until the cursor reaches its end. `adaptive` and
/// `per-victim` plug the holes of the victims the policy picked, in the order picked,
/// whatever the stream. Only
/// user writes plug; the cleaner's copies always append.
///
/// Cost, in sequential block writes: an appended block costs 1, a plugged block R
/// ([`GcConfig::random_write_cost`]). Getting a free slot by cleaning victims that hold
/// `live` of `written` blocks costs reading them (`written`, as in the write cost) plus copying
/// `live`, for `written − live` freed slots, so one appended user block costs
///
/// ```text
/// C_clean = 1 + (written + live) / (written − live) = 2 / (1 − u)    (u = live / written)
/// ```
///
/// and plugging pays when R < 2 / (1 − u), i.e. for victims above u = 1 − 2/R (0.81 for
/// R = 10.6).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum ThreadedLogging {
    /// Never plug: every write appends, the cleaner keeps segments free (the old behaviour).
    #[default]
    Off,
    /// Plug every user write while free segments are below the cleaner's low-water mark;
    /// clean only when no closed segment has a hole.
    Always,
    /// Below the low-water mark, let the policy pick its victims, then for each one plug its
    /// holes instead of cleaning it when R < C_clean = 2 / (1 − u) at its utilization u and
    /// R is also below the measured cost of the victims recently cleaned.
    Adaptive,
    /// `adaptive` without the measured gate: the per-victim comparison alone (it can lock
    /// itself into plugging under skewed writes; kept for comparison).
    PerVictim,
}

impl ThreadedLogging {
    pub fn name(self) -> &'static str {
        match self {
            ThreadedLogging::Off => "off",
            ThreadedLogging::Always => "always",
            ThreadedLogging::Adaptive => "adaptive",
            ThreadedLogging::PerVictim => "per-victim",
        }
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
    /// Threaded logging mode (off: append only).
    pub threaded: ThreadedLogging,
    /// R: cost of one plugged (random) block write in sequential block writes.
    pub random_write_cost: f64,
}

impl GcConfig {
    /// Defaults matching the issue's reference setup: 128-block segments, 90/10 hot/cold.
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
            threaded: ThreadedLogging::Off,
            random_write_cost: RANDOM_WRITE_COST,
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
    /// Threaded logging mode of the run.
    #[serde(default)]
    pub threaded: ThreadedLogging,
    /// R used for `cost` (cost of a plugged block in sequential block writes).
    #[serde(default = "default_random_write_cost")]
    pub random_write_cost: f64,
    /// Measured user writes that went into holes of closed segments.
    #[serde(default)]
    pub plugged_blocks: u64,
    /// Cost per user write in sequential block writes: (appended user blocks + R · plugged
    /// blocks + copied + read) / user blocks. Equals `write_cost` when nothing is plugged.
    #[serde(default)]
    pub cost: f64,
}

fn default_random_write_cost() -> f64 {
    RANDOM_WRITE_COST
}

impl GcResult {
    /// Share of the measured user writes that were plugged into holes.
    pub fn plugged_fraction(&self) -> f64 {
        self.plugged_blocks as f64 / self.user_writes.max(1) as f64
    }
}

/// Run one simulation; deterministic for a given config.
pub fn simulate(config: &GcConfig) -> GcResult {
    log::SegmentLog::run(config)
}

#[cfg(test)]
mod tests;
