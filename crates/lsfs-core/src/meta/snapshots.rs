//! Promoting and demoting checkpoints on the store, and the background step
//! that brings the segment counters up to date ([`Reconcile`] holds the
//! queue and decides what to count; the store supplies the DAT, the CPFILE
//! and the counters).

use crate::error::{Error, Result};
use crate::meta::dat_entry::{DatEntry, DAT_PER_BLOCK};
use crate::meta::reconcile::{Reconcile, SnapChange};
use crate::meta::store::{decode_u64, Store};

impl Store {
    /// The snapshot changes still being applied to the counters.
    pub fn reconcile(&self) -> &Reconcile {
        &self.recon
    }

    /// Whether the segment counters count dead block `v` (alive in
    /// `[start, end)`) in `nsnapshot`.
    pub fn snapshot_counted(&self, v: u64, start: u64, end: u64) -> bool {
        self.recon.counted(&self.snapshots, v, start, end)
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
        if on && self.given_up_at_next_checkpoint(cno) {
            // Blocks only it sees are already freed in victims that the
            // next checkpoint lets the writer reuse.
            return Err(Error::invalid(format!(
                "checkpoint {cno} was given up to make space"
            )));
        }
        // Snapshotting the checkpoint just written, with nothing dead since
        // and nothing queued, changes no counter: nothing to reconcile.
        // (The checkpoint written last, not the newest left in the table:
        // with plain checkpoints expiring, an older snapshot can be that.)
        let latest = cno + 1 == self.cur_cno;
        let quiet = latest && self.deaths_since_checkpoint == 0 && self.recon.is_settled();
        if !quiet {
            // Bounded queue: finish the oldest change now.
            while self.recon.is_full() {
                self.reconcile_step(u64::MAX)?;
            }
        }
        self.cps.set_snapshot(cno, on)?;
        self.snapshots = self.cps.snapshots();
        if quiet {
            self.recon.refresh(&self.snapshots);
        } else {
            self.recon.push(SnapChange { cno, on }, &self.snapshots);
        }
        Ok(())
    }

    /// Apply the head of the queue to the entries of up to `max_dat_blocks`
    /// DAT blocks from the cursor. Returns whether the queue is empty.
    pub fn reconcile_step(&mut self, max_dat_blocks: u64) -> Result<bool> {
        let mut budget = max_dat_blocks;
        while budget > 0 {
            let Some(from) = self.recon.next_dat_block() else {
                break;
            };
            let tree = self.tree;
            let root = self.dat_root;
            let Some((idx, val)) = tree.ceil(&mut self.dat_nodes(), root, from)? else {
                // Past the end of the DAT: the head change is everywhere.
                self.recon.finish_head(&self.snapshots);
                self.stats.snapshot_changes_reconciled += 1;
                continue;
            };
            decode_u64(&val, "DAT block map")?;
            let block = self.dat_block(idx)?;
            let first = idx * DAT_PER_BLOCK;
            for slot in 0..DAT_PER_BLOCK as usize {
                let v = first + slot as u64;
                if v < self.recon.cursor() {
                    continue;
                }
                let e = DatEntry::read(&block, slot)?;
                let Some(delta) = self.recon.head_delta(v, &e) else {
                    continue;
                };
                if delta != 0 {
                    let seg = self.geo.segment_of(e.pblock).ok_or_else(|| {
                        Error::corrupt(format!("DAT entry {v} points outside the log"))
                    })?;
                    self.add_snapshot(seg, delta)?;
                }
            }
            self.recon.advance_past(idx);
            budget -= 1;
        }
        Ok(self.recon.is_settled())
    }
}
