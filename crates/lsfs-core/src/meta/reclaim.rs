//! Reclaiming space without copying: delete plain checkpoints older than the
//! protection period, then free every segment whose blocks are all dead and
//! unprotected. Runs at the start of each checkpoint; the segments it frees
//! become usable only once that checkpoint is durable, so a crash can never
//! lead recovery to a checkpoint whose blocks were overwritten.
//! (The copying cleaner, which makes segments dead, is separate.)

use crate::error::Result;
use crate::log::record::BlockKind;
use crate::meta::dat_entry::CNO_MAX;
use crate::meta::store::Store;

/// Segments examined per checkpoint, to bound the work of one pass.
const SEGMENTS_PER_PASS_MAX: usize = 32;

impl Store {
    /// Delete every plain checkpoint but the latest, protection period or
    /// not (the last resort before ENOSPC). Returns how many went.
    pub fn expire_plain_checkpoints(&mut self) -> usize {
        let latest = self.cps.latest().map(|e| e.cno);
        let doomed: Vec<u64> = self
            .cps
            .entries
            .values()
            .filter(|e| !e.is_snapshot() && Some(e.cno) != latest)
            .map(|e| e.cno)
            .collect();
        for c in &doomed {
            self.cps.remove(*c);
            self.stats.checkpoints_deleted += 1;
        }
        doomed.len()
    }

    /// Give up the plain checkpoints numbered below `cno`, oldest first:
    /// never a snapshot, never the latest checkpoint (the recovery base).
    /// The cleaner does this under space pressure instead of copying dead
    /// blocks that only those checkpoints see. Returns how many went.
    pub fn give_up_checkpoints_below(&mut self, cno: u64) -> usize {
        let latest = self.latest_cno();
        let doomed: Vec<u64> = self
            .cps
            .entries
            .range(..cno.min(latest))
            .filter(|(_, e)| !e.is_snapshot())
            .map(|(&c, _)| c)
            .collect();
        for &c in &doomed {
            self.cps.remove(c);
            self.stats.checkpoints_deleted += 1;
        }
        debug_assert!(self.oldest_kept_cno() >= cno.min(latest));
        doomed.len()
    }

    /// Have the next checkpoint give up every plain checkpoint before it
    /// (never a snapshot). A cleaning pass under space pressure asks this
    /// when it frees dead blocks that died since the latest checkpoint:
    /// that checkpoint, the recovery base, cannot go before the next one is
    /// written, but the pass's victims are not reused before then either,
    /// so copying those blocks would save nothing a crash could need.
    pub fn give_up_at_next_checkpoint(&mut self) {
        self.give_up_plain_at_checkpoint = true;
    }

    /// Whether checkpoint `cno` is to be given up by the next checkpoint.
    pub fn given_up_at_next_checkpoint(&self, cno: u64) -> bool {
        self.give_up_plain_at_checkpoint
            && cno < self.cur_cno
            && self.cps.entries.get(&cno).is_some_and(|e| !e.is_snapshot())
    }

    /// How far back plain checkpoints are kept now: the age in seconds of
    /// the oldest one (0 when only the latest is left). The protection
    /// period is the most it can be; space pressure shrinks it.
    pub fn kept_window_secs(&self, now: u64) -> u64 {
        self.cps
            .entries
            .values()
            .find(|e| !e.is_snapshot())
            .map_or(0, |e| now.saturating_sub(e.created_secs))
    }

    /// Delete the plain checkpoints that have left the protection period
    /// (`created + protection <= now`). The checkpoint being built is not in
    /// the table yet, so with a protection period of 0 it is the only plain
    /// one left once it is written.
    pub fn expire_checkpoints(&mut self, now: u64) {
        let protection = self.config.protection_secs;
        let expired: Vec<u64> = self
            .cps
            .entries
            .values()
            .filter(|e| !e.is_snapshot() && e.created_secs.saturating_add(protection) <= now)
            .map(|e| e.cno)
            .collect();
        for c in expired {
            self.cps.remove(c);
            self.stats.checkpoints_deleted += 1;
        }
    }

    pub(crate) fn reclaim_prepare(&mut self, now: u64) -> Result<()> {
        self.expire_checkpoints(now);
        // Dead blocks with end > oldest_kept are still seen by a kept checkpoint.
        let oldest_kept = self
            .cps
            .entries
            .values()
            .filter(|e| !e.is_snapshot())
            .map(|e| e.cno)
            .min()
            .unwrap_or(self.cur_cno);
        let chain_from = self.sb_slot_seq.iter().copied().min().unwrap_or(0);
        // A block that died at time t is seen by no kept plain checkpoint if
        // the oldest kept one was made after t. Segments whose last death is
        // younger are skipped without reading them (they would only be read
        // and found protected, again at every checkpoint).
        let kept_since = self
            .cps
            .entries
            .get(&oldest_kept)
            .map(|e| e.created_secs)
            .unwrap_or(now.saturating_add(1));
        let candidates: Vec<u64> = (0..self.segs.nsegments())
            .filter(|&s| {
                let u = &self.segs.usage[s as usize];
                u.nblocks > 0
                    && u.nlive == 0
                    && u.nsnapshot == 0
                    && u.nlive_lastmod_secs < kept_since
                    && !self.segs.reserved.contains(&s)
                    && !self.segs.pending_free.contains(&s)
                    && self.segs.last_seq[s as usize] < chain_from
            })
            .take(SEGMENTS_PER_PASS_MAX)
            .collect();
        for seg in candidates {
            if let Some(dead) = self.dead_vblocks_if_reclaimable(seg, oldest_kept)? {
                self.dat_free_many(&dead)?;
                self.free_segment(seg, now)?;
                self.stats.segments_reclaimed += 1;
            }
        }
        Ok(())
    }

    /// If no block of `seg` is needed by the current file system, a snapshot
    /// or a kept checkpoint, the virtual blocks whose DAT entries point into
    /// it (to free with it).
    fn dead_vblocks_if_reclaimable(
        &mut self,
        seg: u64,
        oldest_kept: u64,
    ) -> Result<Option<Vec<u64>>> {
        let entries = self.segment_entries(seg, false)?;
        let mut dead = Vec::new();
        for &(pos, e) in &entries {
            if !matches!(e.kind, BlockKind::Data | BlockKind::Node) || e.vblock == 0 {
                // DAT blocks: nlive == 0 says the current DAT does not use them.
                continue;
            }
            let d = self.dat_get(e.vblock)?;
            if d.pblock != pos {
                continue; // a superseded copy
            }
            let needed =
                d.end == CNO_MAX || d.end > oldest_kept || self.snapshot_in(d.start, d.end);
            if needed {
                return Ok(None);
            }
            dead.push(e.vblock);
        }
        Ok(Some(dead))
    }
}
