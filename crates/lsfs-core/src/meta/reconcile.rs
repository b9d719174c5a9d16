//! O(1) snapshot changes with background reconciliation.
//!
//! A segment's `nsnapshot` counts its dead blocks that some snapshot still
//! sees. Promoting or demoting a checkpoint changes which dead blocks that
//! is, anywhere on the device; finding them means scanning the DAT. Rather
//! than scan in the foreground (Rohner's algorithms all do, in some form),
//! the change is queued and applied to the counters by a background scan of
//! the DAT in virtual-block order, a bounded number of DAT blocks at a time.
//!
//! The counters stay exact *relative to a known snapshot set per entry*:
//! an entry below the cursor is counted with the head change applied, an
//! entry at or above it without it, and no later queued change is applied
//! to any entry. Every place that adjusts `nsnapshot` (deaths, moves,
//! placement, reclaim, fsck) asks [`Store::snapshot_counted`], so the
//! counters agree with a recount whatever the progress. When the queue is
//! empty, the counted set is the snapshot set and the counts are exact.
//!
//! The queue and the cursor are written in every super root, with the
//! counters of the same checkpoint, so progress survives remount and crash.
//! Reclaiming stays safe meanwhile: it decides from the real snapshot set,
//! and an overcount only delays it.

use crate::error::{Error, Result};
use crate::meta::dat_entry::{DatEntry, CNO_MAX, DAT_PER_BLOCK};
use crate::meta::store::{decode_u64, Store};

/// Queued snapshot changes at most; one more drains the oldest in the
/// foreground first (it bounds the super root's size, see FORMAT.md).
pub const RECONCILE_QUEUE_MAX: usize = 128;

/// A queued snapshot change (its format is the super root's).
pub use crate::log::super_root::SnapChange;

/// The reconciliation queue, its cursor and the two counted sets it implies.
#[derive(Clone, Debug, Default)]
pub struct Reconcile {
    pub queue: Vec<SnapChange>,
    /// Entries below this virtual block have the head change applied.
    pub cursor: u64,
    /// Snapshot set counted below the cursor, and at or above it (sorted).
    counted_lo: Vec<u64>,
    counted_hi: Vec<u64>,
}

/// Whether a snapshot of the sorted set `snaps` lies in `[start, end)`.
pub(crate) fn covered(snaps: &[u64], start: u64, end: u64) -> bool {
    let i = snaps.partition_point(|&s| s < start);
    snaps.get(i).is_some_and(|&s| s < end)
}

fn set(snaps: &mut Vec<u64>, cno: u64, on: bool) {
    match (snaps.binary_search(&cno), on) {
        (Err(i), true) => snaps.insert(i, cno),
        (Ok(i), false) => {
            snaps.remove(i);
        }
        _ => {}
    }
}

impl Reconcile {
    /// Recompute the counted sets from the current snapshot set: undo the
    /// queued changes newest first, then apply the head below the cursor.
    pub(crate) fn refresh(&mut self, snapshots: &[u64]) {
        let mut base = snapshots.to_vec();
        for c in self.queue.iter().rev() {
            set(&mut base, c.cno, !c.on);
        }
        self.counted_hi = base.clone();
        if let Some(h) = self.queue.first() {
            set(&mut base, h.cno, h.on);
        }
        self.counted_lo = base;
    }

    pub fn is_settled(&self) -> bool {
        self.queue.is_empty()
    }
}

impl Store {
    /// Whether the segment counters count dead block `v` (alive in
    /// `[start, end)`) in `nsnapshot`.
    pub fn snapshot_counted(&self, v: u64, start: u64, end: u64) -> bool {
        if self.recon.queue.is_empty() {
            return self.snapshot_in(start, end);
        }
        let set = if v < self.recon.cursor {
            &self.recon.counted_lo
        } else {
            &self.recon.counted_hi
        };
        covered(set, start, end)
    }

    /// Promote (`on`) or demote checkpoint `cno` in O(1): the counters
    /// follow in the background ([`Store::reconcile_step`]).
    pub fn set_snapshot(&mut self, cno: u64, on: bool) -> Result<()> {
        self.writable()?;
        let was = self
            .cps
            .entries
            .get(&cno)
            .ok_or_else(|| Error::invalid(format!("checkpoint {cno} does not exist")))?
            .is_snapshot();
        if was == on {
            return Ok(());
        }
        // Snapshotting the checkpoint just written, with nothing dead since
        // and nothing queued, changes no counter: nothing to reconcile.
        // (The checkpoint written last, not the newest left in the table:
        // with plain checkpoints expiring, an older snapshot can be that.)
        let latest = cno + 1 == self.cur_cno;
        let quiet = latest && self.deaths_since_checkpoint == 0 && self.recon.queue.is_empty();
        if !quiet && self.recon.queue.len() >= RECONCILE_QUEUE_MAX {
            // Bounded queue: finish the oldest change now.
            while self.recon.queue.len() >= RECONCILE_QUEUE_MAX {
                self.reconcile_step(u64::MAX)?;
            }
        }
        self.cps.set_snapshot(cno, on)?;
        self.snapshots = self.cps.snapshots();
        if !quiet {
            self.recon.queue.push(SnapChange { cno, on });
        }
        self.recon.refresh(&self.snapshots);
        Ok(())
    }

    /// Apply the head of the queue to the entries of up to `max_dat_blocks`
    /// DAT blocks from the cursor. Returns whether the queue is empty.
    pub fn reconcile_step(&mut self, max_dat_blocks: u64) -> Result<bool> {
        let mut budget = max_dat_blocks;
        while !self.recon.queue.is_empty() && budget > 0 {
            let tree = self.tree;
            let root = self.dat_root;
            let from = self.recon.cursor / DAT_PER_BLOCK;
            let Some((idx, val)) = tree.ceil(&mut self.dat_nodes(), root, from)? else {
                // Past the end of the DAT: the head change is everywhere.
                self.recon.queue.remove(0);
                self.recon.cursor = 0;
                self.recon.refresh(&self.snapshots);
                self.stats.snapshot_changes_reconciled += 1;
                continue;
            };
            decode_u64(&val, "DAT block map")?;
            let block = self.dat_block(idx)?;
            let first = idx * DAT_PER_BLOCK;
            for slot in 0..DAT_PER_BLOCK as usize {
                let v = first + slot as u64;
                if v < self.recon.cursor {
                    continue;
                }
                let e = DatEntry::read(&block, slot)?;
                if e.is_free() || e.end == CNO_MAX || e.pblock == 0 {
                    // Live, or moved and not placed yet: placement counts it
                    // by the set in force then.
                    continue;
                }
                let delta = covered(&self.recon.counted_lo, e.start, e.end) as i64
                    - covered(&self.recon.counted_hi, e.start, e.end) as i64;
                if delta != 0 {
                    let seg = self.geo.segment_of(e.pblock).ok_or_else(|| {
                        Error::corrupt(format!("DAT entry {v} points outside the log"))
                    })?;
                    self.add_snapshot(seg, delta)?;
                }
            }
            self.recon.cursor = first + DAT_PER_BLOCK;
            budget -= 1;
        }
        Ok(self.recon.queue.is_empty())
    }
}
