//! The oracle: it knows the whole future write sequence, so it knows when every live block
//! will be overwritten. It places each block (on a user write and on relocation) into a
//! stream by the octave of its remaining lifetime, so blocks that die together share
//! segments, and cleans greedily. Blocks that are never overwritten get their own stream.
//! No online policy has this information, so its write amplification bounds theirs from below
//! (tested, not proved: it is a heuristic with perfect knowledge, not an optimal algorithm).

pub(super) const NEVER: u64 = u64::MAX;

pub struct Oracle {
    /// The user overwrites after the initial fill, in order.
    pub sequence: Vec<u32>,
    /// For each position of `sequence`, the next position writing the same block.
    next_position: Vec<u32>,
    /// Per block: the time of its next write (NEVER if none).
    block_next_write: Vec<u64>,
    fill_writes: u64,
    streams: usize,
}

impl Oracle {
    /// `sequence` follows a fill that writes blocks 0..live_blocks at times 0..live_blocks.
    pub fn new(sequence: Vec<u32>, live_blocks: u64) -> Self {
        assert!(sequence.len() < u32::MAX as usize);
        let mut next_position = vec![u32::MAX; sequence.len()];
        let mut seen = vec![u32::MAX; live_blocks as usize];
        for (i, &b) in sequence.iter().enumerate().rev() {
            next_position[i] = seen[b as usize];
            seen[b as usize] = i as u32;
        }
        let block_next_write = seen
            .iter()
            .map(|&p| {
                if p == u32::MAX {
                    NEVER
                } else {
                    live_blocks + p as u64
                }
            })
            .collect();
        let horizon = live_blocks + sequence.len() as u64;
        let streams = (64 - horizon.leading_zeros()) as usize + 2;
        Self {
            sequence,
            next_position,
            block_next_write,
            fill_writes: live_blocks,
            streams,
        }
    }

    pub fn stream_count(&self) -> usize {
        self.streams
    }

    /// Called for the user write at time `now` of `block` (fill or sequence); updates the
    /// block's next write and returns its stream.
    pub fn user_write(&mut self, block: u64, now: u64) -> usize {
        if now >= self.fill_writes {
            let i = (now - self.fill_writes) as usize;
            debug_assert_eq!(self.sequence[i] as u64, block, "oracle out of step");
            let p = self.next_position[i];
            self.block_next_write[block as usize] = if p == u32::MAX {
                NEVER
            } else {
                self.fill_writes + p as u64
            };
        }
        self.stream_of(block, now)
    }

    /// The stream for `block` at `now`: the octave of its remaining lifetime.
    pub fn stream_of(&self, block: u64, now: u64) -> usize {
        let next = self.block_next_write[block as usize];
        if next == NEVER {
            return self.streams - 1;
        }
        let remaining = next.saturating_sub(now).max(1);
        ((63 - remaining.leading_zeros()) as usize).min(self.streams - 2)
    }
}
