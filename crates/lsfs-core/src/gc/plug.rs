//! Preparing a victim for plugging instead of cleaning it (threaded
//! logging; the writing side is meta/plug.rs).
//!
//! Nothing moves: the dead blocks nothing needs have their DAT entries freed
//! (as cleaning would), the segment's summary moves to the SSA with an entry
//! for every block that stays, and every other slot becomes a hole, headers
//! and summaries of the old records included (the SSA replaces them).

use crate::error::{Error, Result};
use crate::gc::relocate::RelocationPlan;
use crate::log::record::{BlockKind, SummaryEntry};
use crate::meta::dat_entry::CNO_MAX;
use crate::meta::store::Store;

impl Store {
    /// Whether `seg` can have its holes plugged: full (a partly written
    /// segment belongs to a stream or is a crash's leftover), not held for a
    /// writer, not being freed, not prepared already.
    pub fn plug_eligible(&self, seg: u64) -> bool {
        let u = &self.segs().usage[seg as usize];
        u.nblocks == self.geo().segment_blocks
            && !self.segs().reserved.contains(&seg)
            && !self.segs().pending_free.contains(&seg)
            && !self.plugs().is_target(seg)
    }

    /// Prepare the victim `plan` was made for: free what nothing needs, move
    /// its summary to the SSA and offer its holes from the next checkpoint
    /// on. Returns the number of holes.
    pub fn prepare_plug(&mut self, plan: RelocationPlan) -> Result<u32> {
        let seg = plan.segno;
        assert!(self.plug_eligible(seg), "segment {seg} cannot be plugged");
        assert!(!plan.holds_frames, "segment {seg} holds frames still read");
        for (v, e) in plan.frees() {
            self.free_dead(seg, v, e)?;
        }
        let slots = self.blocks_that_stay(seg)?;
        let changes: Vec<_> = slots
            .iter()
            .enumerate()
            .map(|(i, e)| (i as u32, *e))
            .collect();
        self.ssa_set(seg, &changes)?;
        self.mark_plugged(seg);
        let holes: Vec<u32> = changes
            .iter()
            .filter(|(_, e)| e.is_none())
            .map(|&(i, _)| i)
            .collect();
        let n = holes.len() as u32;
        self.offer_holes(seg, holes);
        Ok(n)
    }

    /// The summary entry of every block of `seg` that stays when it is
    /// plugged, by slot (`None`: a hole): every block the DAT still places
    /// here (live, or dead and needed), and the DAT's own blocks and nodes
    /// in use. The plan read the records and checked their CRCs; their
    /// summaries suffice. The live ones must be what the SUFILE counts.
    fn blocks_that_stay(&mut self, seg: u64) -> Result<Vec<Option<SummaryEntry>>> {
        let start = self.geo().segment_start(seg);
        let entries = self.segment_entries(seg, false)?;
        let mut node_firsts = None;
        let mut slots = vec![None; self.geo().segment_blocks as usize];
        let mut live = 0u32;
        for (pos, ent) in entries {
            let (keep, is_live) = match ent.kind {
                BlockKind::Data | BlockKind::Node if ent.vblock != 0 => {
                    let d = self.dat_get(ent.vblock)?;
                    (d.pblock == pos, d.pblock == pos && d.end == CNO_MAX)
                }
                BlockKind::DatBlock => {
                    let k = self.dat_block_in_use_at(ent.offset, pos)?;
                    (k, k)
                }
                BlockKind::DatJournal => {
                    let k = self.dat_journal().written.contains(&pos);
                    (k, k)
                }
                BlockKind::DatNode => {
                    if node_firsts.is_none() {
                        node_firsts = Some(self.dat_node_first_keys()?);
                    }
                    let k = node_firsts.as_ref().is_some_and(|f| f.contains_key(&pos));
                    (k, k)
                }
                _ => (false, false),
            };
            if keep {
                slots[(pos - start) as usize] = Some(ent);
                live += is_live as u32;
            }
        }
        let u = self.segs().usage[seg as usize];
        if live != u.nlive {
            // As in relocation: the walk and the counters must agree, or
            // a hole could be a live block.
            let err = Error::corrupt(format!(
                "segment {seg}: its summaries name {live} live blocks, its SUFILE entry counts {}",
                u.nlive
            ));
            self.fail(&err);
            return Err(err);
        }
        Ok(slots)
    }
}
