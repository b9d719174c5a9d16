use super::{SegmentUsage, SelectionPolicy};

/// Cost-benefit (Rosenblum and Ousterhout 1992), NILFS2 variant (Rohner §3):
///
/// score = (1 − u) · age / (1 + u), with u = nlive / nblocks and age = now − lastmod,
///
/// where 1 − u is the space freed, 1 + u the cost (read the segment, write its live part) and
/// age stands in for how long the freed space will stay free. On an object store the 1 is the
/// segment's [`SegmentUsage::read_cost`]: less for a segment a cache holds (no GET). Segments whose live count
/// changed less than `min_quiet_secs` ago are skipped: their dead blocks may still be inside
/// the protection period, and they are still decaying.
pub struct CostBenefit {
    min_quiet_secs: u64,
}

impl CostBenefit {
    pub fn new(min_quiet_secs: u64) -> Self {
        Self { min_quiet_secs }
    }
}

impl SelectionPolicy for CostBenefit {
    fn name(&self) -> &'static str {
        "cost-benefit"
    }
    fn score(&self, segment: &SegmentUsage, now_secs: u64) -> Option<f64> {
        if now_secs.saturating_sub(segment.nlive_lastmod_secs) < self.min_quiet_secs {
            return None;
        }
        Some(segment.cost_benefit(now_secs))
    }
}
