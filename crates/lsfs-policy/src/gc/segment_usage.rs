/// One SUFILE entry as the cleaner sees it (docs/DESIGN.md §4.4).
#[derive(Clone, Copy, Debug, PartialEq)]
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
    /// What reading the segment costs next to writing a segment's worth
    /// of copies: 1 where every read costs the same (a disk: the segment
    /// read once, [`READ_COST`]); on an object store 1 when the read
    /// fetches the whole object, less when a cache holds it
    /// ([`CACHED_READ_COST`]). The cost-benefit scores divide by
    /// `read_cost + u`.
    pub read_cost: f64,
}

/// [`SegmentUsage::read_cost`] of a segment whose read costs what the
/// classic cost-benefit formula counts: reading the whole segment.
pub const READ_COST: f64 = 1.0;

/// [`SegmentUsage::read_cost`] of a segment an object store's device holds
/// in a cache: no GET, no bytes from the store, only the copies to write.
/// Not 0: an empty cached segment would score infinity at any age, and
/// a cached read still takes memory bandwidth or a local disk read.
pub const CACHED_READ_COST: f64 = 0.1;

impl Default for SegmentUsage {
    fn default() -> Self {
        SegmentUsage {
            segno: 0,
            nblocks: 0,
            nlive: 0,
            nsnapshot: 0,
            lastmod_secs: 0,
            nlive_lastmod_secs: 0,
            temperature: Temperature::Mixed,
            read_cost: READ_COST,
        }
    }
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

    /// The cost-benefit score (Rosenblum and Ousterhout, NILFS2's
    /// variant): (1 − u) · age / (read_cost + u), space freed times how
    /// long it stays free over what cleaning costs (read the segment,
    /// write its live part). With `read_cost` 1 it is the classic
    /// (1 − u) · age / (1 + u).
    pub fn cost_benefit(&self, now_secs: u64) -> f64 {
        let u = self.utilization();
        (1.0 - u) * self.age_secs(now_secs) as f64 / (self.read_cost + u)
    }

    pub fn reclaimable_blocks(&self) -> u32 {
        self.nblocks.saturating_sub(self.nlive)
    }

    /// Seconds since the segment was written; 0 if the clock is behind.
    pub fn age_secs(&self, now_secs: u64) -> u64 {
        now_secs.saturating_sub(self.lastmod_secs)
    }
}
