//! Threaded logging (F2FS's slack space recycling, Janda's hole plugging):
//! near full, user data is written into the dead slots ("holes") of full,
//! partly valid segments instead of into free segments the cleaner must
//! first make by copying.
//!
//! The cleaner decides which segments to plug (gc/plug.rs, with the same
//! gate as the simulator) and prepares them: their unneeded dead blocks'
//! DAT entries are freed and their summary moves to the SSA (meta/ssa.rs).
//! The holes become usable one checkpoint later, once the checkpoint that
//! prepared them is durable: the dead blocks were needed by no checkpoint
//! in its CPFILE, but the previous durable checkpoint's CPFILE may still
//! list plain checkpoints that this one expired, and a crash before it would
//! lead back there (the same rule makes freed segments usable only after
//! the next checkpoint). Here, the segment constructor hands holes to dirty
//! user data blocks (never to the cleaner's copies or to metadata), sets
//! their SSA entries, and writes them, each run of adjacent holes with one
//! device write, with the data streams and under their flush. A checkpoint
//! that ends an fsync plugs nothing, so fsync keeps its single flush.
//!
//! Holes live in memory only: after a remount or crash a prepared segment
//! is simply a plugged segment with dead slots, prepared again if picked.
//!
//! [`Plugs`] owns the prepared holes and this checkpoint's assignments and
//! knows nothing of the store: the cleaner hands it prepared segments
//! (gc/plug.rs), and the constructor's side, which picks the blocks and
//! writes them, is meta/plug_write.rs.

use crate::log::record::{BlockKind, SummaryEntry};
use std::collections::{BTreeMap, HashMap, HashSet};

/// A prepared segment's holes.
#[derive(Clone, Debug)]
pub struct PlugTarget {
    /// Slot offsets not yet plugged, ascending.
    pub holes: Vec<u32>,
    /// The first checkpoint that may write into them.
    pub usable_from: u64,
}

/// Counters of `lsfs gc stats`.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct PlugStats {
    /// Segments prepared for plugging instead of being cleaned.
    pub segments_prepared: u64,
    /// Holes those segments offered.
    pub holes_prepared: u64,
    /// User blocks written into holes.
    pub blocks_plugged: u64,
    /// Device writes that wrote them (one per run of adjacent holes).
    pub plug_writes: u64,
    /// Holes given up because their segment was freed or cleaned first.
    pub holes_dropped: u64,
}

/// Prepared segments and this checkpoint's assignments.
#[derive(Debug, Default)]
pub struct Plugs {
    targets: BTreeMap<u64, PlugTarget>,
    /// Blocks the cleaner moved since the last checkpoint: copies always
    /// append (as in the simulator), only user writes plug.
    cleaner_moved: HashSet<u64>,
    /// This checkpoint's assignments: virtual block → physical block.
    assigned: HashMap<u64, u64>,
    stats: PlugStats,
}

/// The summary entries a checkpoint's assignments set in one segment's SSA.
pub(crate) type SsaChanges = Vec<(u32, Option<SummaryEntry>)>;

impl Plugs {
    /// Holes prepared and not yet plugged.
    pub fn holes(&self) -> u64 {
        self.targets.values().map(|t| t.holes.len() as u64).sum()
    }

    /// `seg` is being freed or cleaned: its holes go with it.
    pub(crate) fn forget(&mut self, seg: u64) {
        if let Some(t) = self.targets.remove(&seg) {
            self.stats.holes_dropped += t.holes.len() as u64;
        }
    }

    pub fn stats(&self) -> &PlugStats {
        &self.stats
    }

    /// Whether `seg` is prepared, with holes not yet plugged.
    pub fn is_target(&self, seg: u64) -> bool {
        self.targets.contains_key(&seg)
    }

    /// The cleaner prepared `seg` with `holes` (slot offsets, ascending),
    /// usable from checkpoint `usable_from`.
    pub(crate) fn prepare(&mut self, seg: u64, holes: Vec<u32>, usable_from: u64) {
        debug_assert!(holes.windows(2).all(|w| w[0] < w[1]), "holes ascending");
        self.stats.segments_prepared += 1;
        self.stats.holes_prepared += holes.len() as u64;
        if !holes.is_empty() {
            self.targets.insert(seg, PlugTarget { holes, usable_from });
        }
    }

    /// The cleaner moved virtual block `v`: it appends, never plugs.
    pub(crate) fn note_cleaner_moved(&mut self, v: u64) {
        self.cleaner_moved.insert(v);
    }

    pub(crate) fn is_cleaner_moved(&self, v: u64) -> bool {
        self.cleaner_moved.contains(&v)
    }

    /// The blocks the cleaner moved since the last checkpoint.
    pub(crate) fn cleaner_moved(&self) -> impl Iterator<Item = u64> + '_ {
        self.cleaner_moved.iter().copied()
    }

    /// Where this checkpoint writes virtual block `v`, if into a hole.
    pub(crate) fn assigned(&self, v: u64) -> Option<u64> {
        self.assigned.get(&v).copied()
    }

    /// Whether any prepared hole is usable in checkpoint `cno`.
    pub(crate) fn any_usable(&self, cno: u64) -> bool {
        self.targets.values().any(|t| t.usable_from <= cno)
    }

    /// Drop this checkpoint's assignments (a checkpoint that plugs nothing).
    pub(crate) fn clear_assigned(&mut self) {
        self.assigned.clear();
    }

    /// Hand holes usable in checkpoint `cno` to `blocks` (file data, as
    /// `(inode, offset, virtual block)` in that order), segment by segment
    /// in segment order; returns, per segment used, its SSA changes.
    pub(crate) fn assign(
        &mut self,
        cno: u64,
        segment_start: impl Fn(u64) -> u64,
        blocks: Vec<(u64, u64, u64)>,
    ) -> Vec<(u64, SsaChanges)> {
        self.assigned.clear();
        let mut next = blocks.into_iter();
        let segs: Vec<u64> = self
            .targets
            .iter()
            .filter(|(_, t)| t.usable_from <= cno)
            .map(|(&s, _)| s)
            .collect();
        let mut out = Vec::new();
        for seg in segs {
            let start = segment_start(seg);
            let mut changes = Vec::new();
            let t = self.targets.get_mut(&seg).expect("listed above");
            let mut used = 0;
            for &slot in &t.holes {
                let Some((ino, offset, v)) = next.next() else {
                    break;
                };
                self.assigned.insert(v, start + slot as u64);
                changes.push((
                    slot,
                    Some(SummaryEntry {
                        ino,
                        offset,
                        vblock: v,
                        cno,
                        kind: BlockKind::Data,
                    }),
                ));
                used += 1;
            }
            t.holes.drain(..used);
            if t.holes.is_empty() {
                self.targets.remove(&seg);
            }
            if changes.is_empty() {
                break; // no blocks left
            }
            out.push((seg, changes));
        }
        out
    }

    /// Count the blocks written into holes and the device writes that did.
    pub(crate) fn note_written(&mut self, blocks: u64, writes: u64) {
        self.stats.blocks_plugged += blocks;
        self.stats.plug_writes += writes;
    }

    /// The checkpoint is written: its assignments and the cleaner's moves
    /// are placed.
    pub(crate) fn checkpoint_done(&mut self) {
        self.assigned.clear();
        self.cleaner_moved.clear();
    }
}
