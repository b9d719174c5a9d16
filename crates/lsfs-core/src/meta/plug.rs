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

use crate::cache::{key_addr, key_is_virtual, vkey};
use crate::error::Result;
use crate::log::record::{holds_file_data, BlockKind, SummaryEntry};
use crate::meta::store::Store;
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
    pub targets: BTreeMap<u64, PlugTarget>,
    /// Blocks the cleaner moved since the last checkpoint: copies always
    /// append (as in the simulator), only user writes plug.
    pub(crate) cleaner_moved: HashSet<u64>,
    /// This checkpoint's assignments: virtual block → physical block.
    pub(crate) assigned: HashMap<u64, u64>,
    pub stats: PlugStats,
}

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
}

impl Store {
    /// Hand holes usable in checkpoint `cno` to the dirty user data blocks,
    /// in (inode, offset) order, and set their SSA entries. Called before
    /// the checkpoint closes its dirty set (the SSA blocks join it).
    pub(crate) fn assign_plugs(&mut self, cno: u64) -> Result<()> {
        self.plugs.assigned.clear();
        if self.plugs.targets.values().all(|t| t.usable_from > cno) {
            return Ok(());
        }
        let mut blocks: Vec<(u64, u64, u64)> = self
            .cache
            .dirty_keys()
            .into_iter()
            .filter(|&k| key_is_virtual(k))
            .filter_map(|k| {
                let v = key_addr(k);
                let o = self.cache.owner(k)?;
                (holds_file_data(o.kind, o.ino)
                    && !self.plugs.cleaner_moved.contains(&v)
                    && !self.moved_dead.contains(&v))
                .then_some((o.ino, o.offset, v))
            })
            .collect();
        if blocks.is_empty() {
            return Ok(());
        }
        blocks.sort_unstable();
        let mut next = blocks.into_iter();
        let now = self.now();
        let segs: Vec<u64> = self
            .plugs
            .targets
            .iter()
            .filter(|(_, t)| t.usable_from <= cno)
            .map(|(&s, _)| s)
            .collect();
        for seg in segs {
            let start = self.geo.segment_start(seg);
            let mut changes = Vec::new();
            let t = self.plugs.targets.get_mut(&seg).expect("listed above");
            let mut used = 0;
            for &slot in &t.holes {
                let Some((ino, offset, v)) = next.next() else {
                    break;
                };
                self.plugs.assigned.insert(v, start + slot as u64);
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
                self.plugs.targets.remove(&seg);
            }
            if changes.is_empty() {
                break; // no blocks left
            }
            // The segment's age: the live-weighted mean of its old age and
            // now (F2FS's update_segment_mtime), so age-based policies do
            // not see a freshly plugged segment as old.
            let u = &mut self.segs.usage[seg as usize];
            let (old, n) = (u.nlive as u64, changes.len() as u64);
            u.lastmod_secs = (u.lastmod_secs * old + now * n) / (old + n);
            self.segs
                .dirty_blocks
                .insert(seg / crate::meta::sufile::SU_PER_BLOCK);
            self.ssa_set(seg, &changes)?;
        }
        Ok(())
    }

    /// Write the blocks placed in holes at `places` (virtual blocks `vs`),
    /// each run of adjacent places with one device write.
    pub(crate) fn write_plugged(&mut self, vs: &[u64], places: &[u64]) -> Result<()> {
        let mut order: Vec<(u64, u64)> = places.iter().copied().zip(vs.iter().copied()).collect();
        order.sort_unstable();
        let mut i = 0;
        while i < order.len() {
            let mut j = i + 1;
            while j < order.len() && order[j].0 == order[j - 1].0 + 1 {
                j += 1;
            }
            let mut buf = Vec::with_capacity((j - i) * self.geo.block_bytes);
            for &(_, v) in &order[i..j] {
                buf.extend_from_slice(self.cache.get(vkey(v)).expect("dirty block cached"));
            }
            self.dev.write_at(self.geo.byte_offset(order[i].0), &buf)?;
            self.plugs.stats.plug_writes += 1;
            i = j;
        }
        let n = order.len() as u64;
        self.plugs.stats.blocks_plugged += n;
        self.stats.blocks_written += n;
        self.stats.payload_blocks_written += n;
        *self
            .stats
            .blocks_by_class
            .entry(crate::log::record::FILE_DATA)
            .or_default() += n;
        Ok(())
    }
}
