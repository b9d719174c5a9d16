//! Where the device's segments are: free, freed but waiting for a
//! checkpoint, held for the writer, in the recovery chain, or written by
//! one of the streams with so many live blocks. The cleaner can only turn
//! dead blocks of written segments into free space, so this says how much
//! of the slack (the space not holding live data) the cleaner can work
//! with, and how the streams share it (docs/CLEANER.md, "Where things stand").

use crate::meta::store::Store;
use crate::meta::stream::Stream;
use serde::Serialize;
use std::collections::BTreeMap;

/// The segments written by one stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StreamCensus {
    pub segments: u64,
    /// Blocks written into them (headers and summaries included).
    pub blocks: u64,
    /// Live blocks, and dead blocks a snapshot still needs.
    pub live: u64,
}

/// A snapshot of every segment's state, in segments unless named.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SegmentCensus {
    pub total: u64,
    pub segment_blocks: u64,
    /// Empty and usable now.
    pub free: u64,
    /// Freed by a cleaning pass, usable after the next checkpoint.
    pub pending_free: u64,
    /// Held for the writer (its current and next segment).
    pub reserved: u64,
    /// Written segments the cleaner may not take yet: in the recovery
    /// chain (written since the oldest superblock's checkpoint).
    pub in_recovery_chain: u64,
    /// Written segments not full yet (the streams' open segments, and
    /// segments a remount left partly filled).
    pub partly_filled: u64,
    /// Written segments by the stream that wrote them.
    pub by_stream: BTreeMap<&'static str, StreamCensus>,
}

impl SegmentCensus {
    /// Live blocks over all written segments.
    pub fn live_blocks(&self) -> u64 {
        self.by_stream.values().map(|s| s.live).sum()
    }

    /// Dead blocks in written segments: what cleaning can turn into free space.
    pub fn dead_blocks(&self) -> u64 {
        self.by_stream.values().map(|s| s.blocks - s.live).sum()
    }
}

impl Store {
    /// Count every segment by state and stream.
    pub fn segment_census(&self) -> SegmentCensus {
        let segs = self.segs();
        let seg_blocks = self.geo().segment_blocks as u64;
        let chain_from = self.recovery_chain_from();
        let mut c = SegmentCensus {
            total: segs.nsegments(),
            segment_blocks: seg_blocks,
            free: segs.free_count(),
            pending_free: segs.pending_free.len() as u64,
            reserved: segs.reserved.len() as u64,
            ..Default::default()
        };
        for s in 0..segs.nsegments() {
            let u = &segs.usage[s as usize];
            if u.nblocks == 0 || segs.pending_free.contains(&s) {
                continue;
            }
            assert!(
                u.nlive + u.nsnapshot <= u.nblocks,
                "segment {s}: {} live and {} snapshot blocks of {} written",
                u.nlive,
                u.nsnapshot,
                u.nblocks
            );
            if segs.last_seq[s as usize] >= chain_from {
                c.in_recovery_chain += 1;
            }
            if (u.nblocks as u64) < seg_blocks {
                c.partly_filled += 1;
            }
            let e = c
                .by_stream
                .entry(Stream::from_flags(u.flags).name())
                .or_default();
            e.segments += 1;
            e.blocks += u.nblocks as u64;
            e.live += (u.nlive + u.nsnapshot) as u64;
        }
        c
    }
}
