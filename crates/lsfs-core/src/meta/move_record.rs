//! Move records: a cleaning pass's victims free at once, not at the next
//! checkpoint.
//!
//! A pass copies what its victims still hold and points the copies' DAT
//! entries at the copies, in memory. Until something durable says so, the
//! DAT on disk (the last checkpoint's) still points into the victims, so
//! they used to wait, as `SegTable::pending_free`, for the next checkpoint.
//! The writer took that checkpoint whenever it needed their segments: under
//! sustained overwrites one every pass, and each rewrote most of the DAT and
//! of the file's map (about 1,300 blocks for a 716 MiB file), while the free
//! segments waiting for it held 5 to 10 % of the device back from the
//! cleaner.
//!
//! A move record makes the pass durable on its own. It is a record of the
//! log's chain (flag `FLAG_MOVES`, no payload) whose items name the
//! data-stream records holding the copies (`Item::StreamRecord`, as an
//! fsync record names its data) and say what else the pass did
//! (`Item::Moved`): its victims, the DAT entries of dead blocks it freed,
//! and the checkpoints given up or expired since the last checkpoint
//! (which no longer kept their blocks). Once it is flushed, its victims are
//! free. Recovery, reading the chain after the last checkpoint, applies
//! each move record where it lies ([`Store::apply_move_record`], from
//! `meta/open.rs`, before anything reads a block or counts a later record):
//! each copy whose DAT entry still points into one of the victims now
//! points at the copy, the freed entries go, the checkpoints go, and the
//! victims count as empty, so records written into them later are counted
//! from their start.
//!
//! A victim is freed this way only if nothing but the record is needed to
//! find its blocks elsewhere ([`Store::may_free_by_move_record`]):
//! - it was written before the recovery chain starts (every cleanable
//!   segment is, `gc/mod.rs`), so the last checkpoint's DAT describes all
//!   of it, and no record recovery follows lies in it;
//! - every block the pass kept was a virtually addressed block now written
//!   to a data stream (no DAT block, DAT node or journal block: those the
//!   checkpoint rewrites), and none is still waiting in the cache;
//! - no block the last checkpoint sees was freed without a copy
//!   (`freed_at_next_checkpoint`: that checkpoint is the recovery base);
//! - it was not plugged (threaded logging keeps an out-of-band summary);
//! - no checkpoint was promoted or demoted since the last checkpoint (the
//!   segment counters then follow a snapshot set recovery does not share).
//!
//! Any other victim waits for the next checkpoint, as before. Checkpoints
//! still come from the interval, the cache bound and the operation log; the
//! writer no longer needs one to reuse what a pass freed.

use crate::cache::vkey;
use crate::error::{Error, Result};
use crate::gc::relocate::Relocated;
use crate::log::chain::FoundRecord;
use crate::log::items::{self, Item};
use crate::log::record::{FLAG_MOVES, MAX_INLINE_BYTES};
use crate::meta::dat_entry::{DatEntry, CNO_MAX};
use crate::meta::store::Store;
use std::collections::BTreeSet;

/// Bytes of an `Item::Moved` besides its numbers: the item's head and the
/// three counts.
const MOVED_FIXED_BYTES: usize = 5 + 4 + 3 * 4;

impl Store {
    /// Whether the log written since the last checkpoint holds so many
    /// segments that the cleaner, which cannot take them before the next
    /// checkpoint, should get them back: 1/`log_checkpoint_share` of the
    /// segments (at least 8). Before move records the writer checkpointed
    /// each time it needed a pass's victims, about every 25 segments on a
    /// 1 GiB image; now passes need no checkpoint, and this bounds how much
    /// of the device waits for one.
    pub fn log_pins_too_much(&self) -> bool {
        let share = self.config.log_checkpoint_share;
        share > 0
            && self.sb.move_records()
            && self.segs.opened_since_checkpoint >= (self.geo.nsegments / share).max(8)
    }

    /// Whether passes may free victims with move records now.
    pub fn move_records_enabled(&self) -> bool {
        self.sb.move_records() && !self.cps.flags_changed_since_checkpoint
    }

    /// Whether relocated victim `r` may be freed by a move record (see the
    /// module's comment), once its copies were written ahead.
    pub fn may_free_by_move_record(&mut self, r: &Relocated) -> bool {
        if !r.move_record_ok {
            return false;
        }
        if r.moved.iter().any(|&v| self.cache.is_dirty(vkey(v))) {
            self.note_waiting_victim("copies not written ahead");
            return false;
        }
        true
    }

    /// Count a victim left for the next checkpoint, by why (`lsfs stats`).
    pub(crate) fn note_waiting_victim(&mut self, why: &'static str) {
        *self
            .stats
            .victims_waiting_for_checkpoint
            .entry(why)
            .or_default() += 1;
    }

    /// Of `victims` (relocated, each freeing `freed` entries), those one
    /// move record naming `refs` can carry: the items must fit one record.
    pub fn move_record_fits<'a>(
        &mut self,
        refs: &[Item],
        victims: impl IntoIterator<Item = &'a Relocated>,
    ) -> Vec<&'a Relocated> {
        let refs_bytes: usize = refs.iter().map(Item::encoded_len).sum();
        let dropped = self.cps.removed_since_checkpoint.len();
        let mut bytes = refs_bytes + MOVED_FIXED_BYTES + 8 * dropped;
        let mut out = Vec::new();
        for r in victims {
            let more = 8 * (1 + r.freed.len());
            if bytes + more > MAX_INLINE_BYTES {
                self.note_waiting_victim("move record full");
                continue;
            }
            bytes += more;
            out.push(r);
        }
        out
    }

    /// Write the move record for `victims` (relocated by this pass, their
    /// copies in the data-stream records `refs` names), flush, and free the
    /// victims now. Returns how many it freed.
    pub fn write_move_record(&mut self, refs: Vec<Item>, victims: &[&Relocated]) -> Result<usize> {
        self.writable()?;
        let r = self.write_move_record_inner(refs, victims);
        if let Err(e @ Error::Io { .. }) = &r {
            self.fail(e);
        }
        r
    }

    fn write_move_record_inner(
        &mut self,
        mut refs: Vec<Item>,
        victims: &[&Relocated],
    ) -> Result<usize> {
        if victims.is_empty() {
            return Ok(0);
        }
        for r in victims {
            assert!(
                self.segs.pending_free.contains(&r.segno)
                    && self.segs.usage[r.segno as usize].nblocks == 0,
                "victim {} of a move record is not a freed segment waiting for a checkpoint",
                r.segno
            );
        }
        let segs: Vec<u64> = victims.iter().map(|r| r.segno).collect();
        refs.push(Item::Moved {
            give_up_base: victims.iter().any(|r| r.gives_up_base),
            victims: segs.clone(),
            dropped: self.cps.removed_since_checkpoint.iter().copied().collect(),
            freed: victims
                .iter()
                .flat_map(|r| r.freed.iter().copied())
                .collect(),
        });
        let inline = items::encode(&refs);
        // The copies' records were flushed when they were written ahead;
        // this flush makes the record naming them durable. Only then may
        // the writer overwrite a victim, and only then may it be discarded
        // (in the I/O queue's order, after this flush: meta/discard.rs).
        self.write_items_record(FLAG_MOVES, &inline)?;
        for s in &segs {
            self.segs.pending_free.remove(s);
            self.segs.freed_by_move_records.insert(*s);
        }
        self.stats.move_records_written += 1;
        self.stats.segments_freed_by_move_records += segs.len() as u64;
        self.segments_freed_durably(segs.iter().copied().collect());
        Ok(segs.len())
    }

    /// Recovery: apply move record `rec` (see the module's comment), whose
    /// named data-stream records are `copies`. Called by `open` in chain
    /// order, before the records after it are counted and before any
    /// fsync is replayed.
    pub(crate) fn apply_move_record(
        &mut self,
        rec: &FoundRecord,
        copies: &[&FoundRecord],
    ) -> Result<()> {
        let what = format!(
            "move record at block {} (sequence {})",
            rec.block, rec.header.seq
        );
        let m = Moved::of(rec, &what, self.geo.nsegments)?;
        let latest = self.latest_cno();
        for &cno in &m.dropped {
            if cno != latest {
                self.cps.remove(cno);
            }
        }
        self.snapshots = self.cps.snapshots();
        self.apply_copies(&m, copies, &what)?;
        self.apply_frees(&m, &what)?;
        let now = self.now();
        for &s in &m.victims {
            let u = self.segs.usage[s as usize];
            if u.nlive != 0 || u.nsnapshot != 0 {
                return Err(Error::corrupt(format!(
                    "{what}: segment {s} still counts {} live and {} snapshot blocks after its moves",
                    u.nlive, u.nsnapshot
                )));
            }
            self.segs.mark_freed(s, now);
            self.segs.pending_free.remove(&s);
        }
        if m.give_up_base {
            self.give_up_at_next_checkpoint();
        }
        Ok(())
    }

    /// Point each copy in `copies` whose DAT entry is still in one of the
    /// victims at the copy, its count moving with it. Copies of victims the
    /// record does not free (they wait for the next checkpoint) stay out.
    fn apply_copies(&mut self, m: &Moved, copies: &[&FoundRecord], what: &str) -> Result<()> {
        let now = self.now();
        for c in copies {
            for (i, ent) in c.header.entries.iter().enumerate() {
                if ent.vblock == 0 {
                    continue;
                }
                let mut e = self.dat_get(ent.vblock)?;
                let Some(from) = m.victim_of(self, &e) else {
                    continue;
                };
                let to = self
                    .geo
                    .segment_of(c.payload_block(i))
                    .ok_or_else(|| Error::corrupt(format!("{what}: a copy outside the log")))?;
                if e.end == CNO_MAX {
                    self.segs.kill_live(from, false, now)?;
                    self.segs.add_live(to, now)?;
                } else if self.snapshot_counted(ent.vblock, e.start, e.end) {
                    self.segs.add_snapshot(from, -1)?;
                    self.segs.add_snapshot(to, 1)?;
                }
                // Copies are written raw (the cleaner never compresses).
                e = e.placed(c.payload_block(i));
                self.dat_set(ent.vblock, e)?;
            }
        }
        Ok(())
    }

    /// Free the DAT entries the pass freed. One the base still holds live
    /// was killed by a write of an fsync record before this one, which the
    /// roll-forward replays: until then it reads as zeros (its block may
    /// be written over), and it is freed after (`finish_move_records`).
    fn apply_frees(&mut self, m: &Moved, what: &str) -> Result<()> {
        let now = self.now();
        for &v in &m.freed {
            let e = self.dat_get(v)?;
            let Some(seg) = m.victim_of(self, &e) else {
                return Err(Error::corrupt(format!(
                    "{what} frees virtual block {v}, whose DAT entry is not in its victims"
                )));
            };
            if e.end == CNO_MAX {
                if !m.give_up_base {
                    return Err(Error::corrupt(format!(
                        "{what} frees virtual block {v}, which is live"
                    )));
                }
                self.segs.kill_live(seg, false, now)?;
                self.dat_set(v, e.unplaced())?;
                self.freed_after_replay.insert(v);
                continue;
            }
            if self.snapshot_counted(v, e.start, e.end) {
                self.segs.add_snapshot(seg, -1)?;
            }
            self.dat_set(v, DatEntry::default())?;
        }
        Ok(())
    }

    /// Recovery, after the roll-forward: free the DAT entries move records
    /// freed whose deaths the roll-forward brought.
    pub(crate) fn finish_move_records(&mut self) -> Result<()> {
        for v in std::mem::take(&mut self.freed_after_replay) {
            let e = self.dat_get(v)?;
            if e.end == CNO_MAX || e.pblock != 0 {
                return Err(Error::corrupt(format!(
                    "a move record freed virtual block {v}, but no fsync record killed it"
                )));
            }
            self.dat_set(v, DatEntry::default())?;
        }
        Ok(())
    }

    /// Recovery: whether `v` is a block a move record freed, read as zeros
    /// until the roll-forward kills it.
    pub(crate) fn freed_before_replay(&self, v: u64) -> bool {
        self.freed_after_replay.contains(&v)
    }
}

/// A move record's `Item::Moved`, decoded.
struct Moved {
    give_up_base: bool,
    victims: BTreeSet<u64>,
    dropped: Vec<u64>,
    freed: Vec<u64>,
}

impl Moved {
    /// The `Item::Moved` of record `rec` (`what` names it), its victims
    /// checked against the device's `nsegments`.
    fn of(rec: &FoundRecord, what: &str, nsegments: u64) -> Result<Moved> {
        let m = items::decode(&rec.header.inline, what)?
            .into_iter()
            .find_map(|it| match it {
                Item::Moved {
                    give_up_base,
                    victims,
                    dropped,
                    freed,
                } => Some(Moved {
                    give_up_base,
                    victims: victims.into_iter().collect(),
                    dropped,
                    freed,
                }),
                _ => None,
            })
            .ok_or_else(|| Error::corrupt(format!("{what} names no victims")))?;
        if let Some(&bad) = m.victims.iter().find(|&&s| s >= nsegments) {
            return Err(Error::corrupt(format!(
                "{what} names segment {bad}, past the last"
            )));
        }
        Ok(m)
    }

    /// The victim DAT entry `e` points into, if it is in use and does.
    fn victim_of(&self, s: &Store, e: &DatEntry) -> Option<u64> {
        if e.is_free() {
            return None;
        }
        s.geo
            .segment_of(e.pblock)
            .filter(|seg| self.victims.contains(seg))
    }
}
