//! Kang's synthetic traces for Fig. 2-1: "the synthetic trace with x % block utilization is
//! where we randomly select x % of pages in a randomly selected block and then issue write
//! operations for the selected pages by the sector number", within an I/O range.

use lsfs_policy::SplitMix64;

/// Logical pages written by one request sequence.
pub struct BlockUtilizationTrace {
    rng: SplitMix64,
    range_blocks: u64,
    pages_per_block: u32,
    pages_per_request: u32,
    offsets: Vec<u32>,
    pending: Vec<u64>,
}

impl BlockUtilizationTrace {
    /// `range_pages`: the I/O range (from page 0); `utilization` in (0, 1].
    pub fn new(range_pages: u64, pages_per_block: u32, utilization: f64, seed: u64) -> Self {
        assert!(utilization > 0.0 && utilization <= 1.0);
        let range_blocks = (range_pages / pages_per_block as u64).max(1);
        let pages_per_request = ((utilization * pages_per_block as f64).round() as u32).max(1);
        Self {
            rng: SplitMix64::new(seed),
            range_blocks,
            pages_per_block,
            pages_per_request,
            offsets: (0..pages_per_block).collect(),
            pending: Vec::new(),
        }
    }

    /// One request: the sorted pages of a random selection within one random block.
    fn refill(&mut self) {
        let block = self.rng.below(self.range_blocks);
        let k = self.pages_per_request as usize;
        for i in 0..k {
            let j = i + self.rng.below((self.offsets.len() - i) as u64) as usize;
            self.offsets.swap(i, j);
        }
        let mut chosen: Vec<u32> = self.offsets[..k].to_vec();
        chosen.sort_unstable();
        let base = block * self.pages_per_block as u64;
        // Stored reversed so `pop` yields ascending sector order.
        self.pending
            .extend(chosen.iter().rev().map(|&o| base + o as u64));
    }
}

impl Iterator for BlockUtilizationTrace {
    type Item = u64;
    fn next(&mut self) -> Option<u64> {
        if self.pending.is_empty() {
            self.refill();
        }
        self.pending.pop()
    }
}
