//! Cleaner victim selection behind one trait, [`SelectionPolicy`], shared by the engine's
//! cleaner and the GC simulator, plus the online temperature classifier used to route writes
//! into hot and cold streams.
//!
//! Time is whatever monotone clock the caller uses, in "seconds": the engine passes wall-clock
//! seconds, the simulator passes its virtual clock (one tick per user block write). Policies
//! only compare and divide ages, so the unit cancels out.

mod cost_benefit;
mod cost_hotness;
mod greedy;
mod plug_gate;
mod segment_usage;
mod stream_balanced;
mod temperature;
mod timestamp;
pub mod write_cost_model;

pub use cost_benefit::CostBenefit;
pub use cost_hotness::CostHotness;
pub use greedy::Greedy;
pub use plug_gate::{PlugGate, RANDOM_WRITE_COST};
pub use segment_usage::{SegmentUsage, Temperature, CACHED_READ_COST, READ_COST};
pub use stream_balanced::StreamBalanced;
pub use temperature::TemperatureClassifier;
pub use timestamp::Timestamp;

/// A victim-selection policy. The caller passes only segments that may be cleaned (full and
/// closed, not the ones being written, not free).
pub trait SelectionPolicy: Send {
    fn name(&self) -> &'static str;

    /// Cleaning priority of one segment at `now_secs`; higher is cleaned first. `None` means
    /// "not a candidate now" (e.g. changed too recently).
    fn score(&self, segment: &SegmentUsage, now_secs: u64) -> Option<f64>;

    /// Up to `max_victims` segment numbers, best first. The default ranks by [`Self::score`]
    /// and skips segments with nothing reclaimable (`nlive >= nblocks`), like NILFS's
    /// `min_reclaimable_blocks = 1`. Stateful policies override it.
    fn select_victims(
        &mut self,
        segments: &[SegmentUsage],
        now_secs: u64,
        max_victims: usize,
    ) -> Vec<u64> {
        top_by_score(segments, max_victims, |s| {
            if s.reclaimable_blocks() == 0 {
                None
            } else {
                self.score(s, now_secs)
            }
        })
    }

    /// Whether this policy wants writes split into hot and cold streams (the caller then tags
    /// segments with [`Temperature`] and routes writes through a [`TemperatureClassifier`]).
    fn wants_temperature_streams(&self) -> bool {
        false
    }
}

/// The `max_victims` highest-scoring segments, best first; ties go to the lower segment number
/// so runs are deterministic. O(n log k).
pub fn top_by_score(
    segments: &[SegmentUsage],
    max_victims: usize,
    mut score: impl FnMut(&SegmentUsage) -> Option<f64>,
) -> Vec<u64> {
    let mut scored: Vec<(f64, u64)> = segments
        .iter()
        .filter_map(|s| score(s).filter(|v| !v.is_nan()).map(|v| (v, s.segno)))
        .collect();
    let by_rank = |a: &(f64, u64), b: &(f64, u64)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
    if scored.len() > max_victims && max_victims > 0 {
        scored.select_nth_unstable_by(max_victims - 1, by_rank);
        scored.truncate(max_victims);
    }
    scored.sort_unstable_by(by_rank);
    scored.truncate(max_victims);
    scored.into_iter().map(|(_, segno)| segno).collect()
}

/// The policies by name, for configuration files and command lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PolicyKind {
    Timestamp,
    Greedy,
    CostBenefit,
    CostHotness,
    StreamBalanced,
}

impl PolicyKind {
    pub const ALL: [PolicyKind; 5] = [
        PolicyKind::Timestamp,
        PolicyKind::Greedy,
        PolicyKind::CostBenefit,
        PolicyKind::CostHotness,
        PolicyKind::StreamBalanced,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Timestamp => "timestamp",
            PolicyKind::Greedy => "greedy",
            PolicyKind::CostBenefit => "cost-benefit",
            PolicyKind::CostHotness => "cost-hotness",
            PolicyKind::StreamBalanced => "balanced",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Build with default parameters; `min_quiet_secs` is cost-benefit's protection against
    /// segments whose live count changed recently (NILFS: `nlive_lastmod`).
    pub fn build(self, min_quiet_secs: u64) -> Box<dyn SelectionPolicy> {
        match self {
            PolicyKind::Timestamp => Box::new(Timestamp),
            PolicyKind::Greedy => Box::new(Greedy),
            PolicyKind::CostBenefit => Box::new(CostBenefit::new(min_quiet_secs)),
            PolicyKind::CostHotness => Box::new(CostHotness),
            PolicyKind::StreamBalanced => Box::new(StreamBalanced::new()),
        }
    }
}

#[cfg(test)]
mod tests;
