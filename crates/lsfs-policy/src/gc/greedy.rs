use super::{SegmentUsage, SelectionPolicy};

/// Greedy: clean the segment with the most reclaimable blocks. score = nblocks − nlive. It
/// minimises the immediate copying cost but leaves cold segments at ~60 % utilization under
/// hot/cold writes (Rosenblum; Rohner §4).
pub struct Greedy;

impl SelectionPolicy for Greedy {
    fn name(&self) -> &'static str {
        "greedy"
    }
    fn score(&self, segment: &SegmentUsage, _now_secs: u64) -> Option<f64> {
        Some(segment.reclaimable_blocks() as f64)
    }
}
