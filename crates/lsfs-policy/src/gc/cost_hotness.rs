use super::{SegmentUsage, SelectionPolicy};

/// Cost-hotness (SFS, Min et al. 2012): score = (1 − u) / (2u · H), where 2u is the cleaning
/// cost (read and write the live part) and H the segment's hotness. SFS measures H from
/// per-block write counts; the SUFILE has none, so we take the hotness of data written once
/// and still alive, H = 1 / age, which gives
///
/// score = (1 − u) · age / (2u)   (and +∞ for an empty segment).
pub struct CostHotness;

impl SelectionPolicy for CostHotness {
    fn name(&self) -> &'static str {
        "cost-hotness"
    }
    fn score(&self, segment: &SegmentUsage, now_secs: u64) -> Option<f64> {
        let u = segment.utilization();
        if u == 0.0 {
            return Some(f64::INFINITY);
        }
        Some((1.0 - u) * segment.age_secs(now_secs) as f64 / (2.0 * u))
    }
}
