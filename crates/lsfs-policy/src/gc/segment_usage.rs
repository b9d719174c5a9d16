/// One SUFILE entry as the cleaner sees it (docs/DESIGN.md §4.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SegmentUsage {
    pub segno: u64,
    /// Blocks written to the segment (its size once it is full).
    pub nblocks: u32,
    /// Blocks the cleaner would have to copy, snapshot-protected ones included.
    pub nlive: u32,
    /// Of `nlive`, blocks protected only by a snapshot.
    pub nsnapshot: u32,
    /// When the segment was last written (in effect its creation time).
    pub lastmod_secs: u64,
    /// When `nlive` last changed.
    pub nlive_lastmod_secs: u64,
    /// The temperature class of the stream that wrote the segment.
    pub temperature: Temperature,
}

/// Temperature class of a write stream. Segments of different classes are never mixed, so a
/// stream-aware policy can size each class's share of the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub enum Temperature {
    /// No classification (single-stream policies, metadata).
    #[default]
    Mixed,
    Hot,
    Cold,
}

impl Temperature {
    pub const COUNT: usize = 3;

    pub fn index(self) -> usize {
        self as usize
    }
}

impl SegmentUsage {
    /// Live fraction u = nlive / nblocks (1 for an empty entry, so it is never chosen).
    pub fn utilization(&self) -> f64 {
        if self.nblocks == 0 {
            1.0
        } else {
            self.nlive as f64 / self.nblocks as f64
        }
    }

    pub fn reclaimable_blocks(&self) -> u32 {
        self.nblocks.saturating_sub(self.nlive)
    }

    /// Seconds since the segment was written; 0 if the clock is behind.
    pub fn age_secs(&self, now_secs: u64) -> u64 {
        now_secs.saturating_sub(self.lastmod_secs)
    }
}
