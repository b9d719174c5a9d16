use super::{SegmentUsage, SelectionPolicy};

/// Stock NILFS2: clean the oldest segment first. score = age = now − lastmod. It ignores live
/// counts, so under skewed writes it copies much cold data (Rohner: 45.6 % of all writes on a
/// hard disk were GC writes). Under uniform writes it is FIFO cleaning, which has the closed
/// form of [`super::write_cost_model`].
pub struct Timestamp;

impl SelectionPolicy for Timestamp {
    fn name(&self) -> &'static str {
        "timestamp"
    }
    fn score(&self, segment: &SegmentUsage, now_secs: u64) -> Option<f64> {
        Some(segment.age_secs(now_secs) as f64)
    }
}
