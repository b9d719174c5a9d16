//! Reuse of free DAT entries, as NILFS2's DAT allocator does.
//!
//! Virtual block numbers used to be handed out only at the end of the DAT.
//! Every overwrite then moved a file's entry to the end and left a hole
//! behind, and a DAT block is punched only when all of its 128 entries are
//! free: under random overwrites the survivors of old blocks (cold files)
//! kept ever more DAT blocks alive, up to one block per live entry. The DAT
//! grew without bound relative to the data, and every one of those blocks
//! had to be copied by the cleaner and rewritten when one entry changed.
//!
//! Now a single new virtual block goes into a free slot of an existing DAT
//! block when there is one. Only slots that were free in the last durable
//! checkpoint are reused, so that a crash before the next checkpoint can
//! never find an entry that the durable checkpoint still needs overwritten,
//! and no code reading that checkpoint's segments (cleaner, reclaim, fsck)
//! meets a virtual block number that means two things in one checkpoint.
//! Such slots are learnt two ways:
//!
//! - entries freed since the last checkpoint become reusable once the
//!   checkpoint that frees them is written (`pending` → `ready`);
//! - a DAT block that is clean (as on disk) when it is first changed after a
//!   checkpoint shows its free slots as they are in the durable checkpoint;
//!   this also finds the holes left before the mount.
//!
//! Allocation drains one block before it moves on, to the block with the
//! most reusable slots, so that a checkpoint's new entries dirty few DAT
//! blocks. Extents
//! (runs of more than one block) still take fresh numbers at the end: they
//! need consecutive numbers, and sequential writes leave no holes.
//! Memory: 16 bytes of bitmap per tracked DAT block, at most
//! [`TRACKED_BLOCKS_MAX`] blocks in each of two maps (about 6 MiB with the
//! indexes; `Lsfs::memory`).

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::meta::dat_entry::DAT_PER_BLOCK;

/// DAT blocks with reusable slots tracked at most, in each of `ready` and
/// `pending` (others are not reused until they are seen again below the
/// bound): 65,536 blocks cover 8M entries, and holes are found again.
pub const TRACKED_BLOCKS_MAX: usize = 1 << 16;

/// Free slots of one DAT block, one bit per slot.
type Slots = u128;
const _: () = assert!(DAT_PER_BLOCK == Slots::BITS as u64);

#[derive(Default, Debug)]
pub struct DatReuse {
    /// Slots free in the last durable checkpoint and not handed out since.
    ready: HashMap<u64, Slots>,
    /// `(DAT_PER_BLOCK - free slots, block)` of `ready`, most free first,
    /// for cold blocks (`[0]`) and hot ones (`[1]`).
    by_free: [BTreeSet<(u32, u64)>; 2],
    /// DAT blocks last drained for hot blocks. Their entries die soon, all
    /// of them: keeping them apart from cold entries keeps the DAT blocks a
    /// checkpoint dirties few.
    hot: HashSet<u64>,
    /// Slots freed since the last checkpoint.
    pending: HashMap<u64, Slots>,
    /// The block being drained, per temperature: allocation stays in it
    /// while it has ready slots, so that one checkpoint's allocations dirty
    /// few DAT blocks.
    current: [Option<u64>; 2],
    /// Virtual blocks handed out from `ready` since the last checkpoint:
    /// fresh (no checkpoint has seen them) although below the fresh floor.
    pub(crate) fresh: HashSet<u64>,
    /// DAT blocks changed since the last checkpoint. Only a block's first
    /// change shows its slots as the durable checkpoint has them: a block
    /// changed and then written before the checkpoint (the cleaner writes
    /// its copies ahead) has a placed address again, and its contents are
    /// not the durable ones.
    touched: HashSet<u64>,
}

impl DatReuse {
    fn set_ready(&mut self, idx: u64, slots: Slots) {
        let class = self.hot.contains(&idx) as usize;
        if let Some(old) = self.ready.remove(&idx) {
            self.by_free[class].remove(&(DAT_PER_BLOCK as u32 - old.count_ones(), idx));
        }
        if slots != 0 && (self.ready.len() < TRACKED_BLOCKS_MAX) {
            self.ready.insert(idx, slots);
            self.by_free[class].insert((DAT_PER_BLOCK as u32 - slots.count_ones(), idx));
        }
    }

    fn set_hot(&mut self, idx: u64, hot: bool) {
        if self.hot.contains(&idx) == hot {
            return;
        }
        let slots = self.ready.get(&idx).copied().unwrap_or(0);
        self.set_ready(idx, 0);
        if hot {
            if self.hot.len() < TRACKED_BLOCKS_MAX {
                self.hot.insert(idx);
            }
        } else {
            self.hot.remove(&idx);
        }
        self.set_ready(idx, slots);
    }

    /// Slot `slot` of DAT block `idx` was freed in the checkpoint being built.
    pub(crate) fn note_freed(&mut self, idx: u64, slot: usize) {
        if self.pending.len() < TRACKED_BLOCKS_MAX || self.pending.contains_key(&idx) {
            *self.pending.entry(idx).or_default() |= 1 << slot;
        }
    }

    /// DAT block `idx` is about to change: whether it is the first change
    /// since the last checkpoint.
    pub(crate) fn touch(&mut self, idx: u64) -> bool {
        self.touched.insert(idx)
    }

    /// DAT block `idx` is about to change for the first time since the last
    /// checkpoint ([`DatReuse::touch`]), and it is as on disk; `free` has a
    /// bit set for each of its free slots, which are therefore free in the
    /// durable checkpoint.
    pub(crate) fn note_durable_block(&mut self, idx: u64, free: Slots) {
        let known = self.ready.get(&idx).copied().unwrap_or(0);
        if free & !known != 0 {
            self.set_ready(idx, known | free);
        }
    }

    /// DAT block `idx` was punched out (all of it free): its slots are not
    /// reused, which would only bring the block back.
    pub(crate) fn forget_block(&mut self, idx: u64) {
        self.set_ready(idx, 0);
        self.pending.remove(&idx);
        self.hot.remove(&idx);
    }

    /// A reusable virtual block for a block of the given temperature, if
    /// there is one; it is fresh until the next checkpoint. A block of the
    /// other temperature's DAT blocks is taken only when its own have none.
    pub(crate) fn take(&mut self, hot: bool) -> Option<u64> {
        let class = hot as usize;
        let idx = match self.current[class].filter(|i| self.ready.contains_key(i)) {
            Some(i) => i,
            None => {
                self.by_free[class]
                    .first()
                    .or_else(|| self.by_free[1 - class].first())?
                    .1
            }
        };
        self.current[class] = Some(idx);
        self.set_hot(idx, hot);
        let slots = self.ready[&idx];
        let slot = slots.trailing_zeros() as u64;
        self.set_ready(idx, slots & !(1 << slot));
        let v = idx * DAT_PER_BLOCK + slot;
        self.fresh.insert(v);
        Some(v)
    }

    /// Recovery hands out `v` itself (`Store::vclaim_replayed`): it is
    /// never to be taken from `ready`, and it is fresh until the next
    /// checkpoint; `below_floor` says whether only this set can tell.
    pub(crate) fn claim(&mut self, v: u64, below_floor: bool) {
        let (idx, slot) = (v / DAT_PER_BLOCK, v % DAT_PER_BLOCK);
        if let Some(&slots) = self.ready.get(&idx) {
            self.set_ready(idx, slots & !(1 << slot));
        }
        if below_floor {
            self.fresh.insert(v);
        }
    }

    /// A checkpoint is durable: what it freed may be reused, and what was
    /// handed out is no longer fresh.
    pub(crate) fn checkpoint_done(&mut self) {
        for (idx, slots) in std::mem::take(&mut self.pending) {
            let known = self.ready.get(&idx).copied().unwrap_or(0);
            self.set_ready(idx, known | slots);
        }
        self.fresh.clear();
        self.touched.clear();
    }

    /// DAT blocks tracked now, and at most (`touched` is bounded by the DAT
    /// blocks one checkpoint changes, which the cache holds dirty).
    pub fn tracked_blocks(&self) -> (u64, u64) {
        (
            (self.ready.len() + self.pending.len()) as u64,
            2 * TRACKED_BLOCKS_MAX as u64,
        )
    }

    /// Reusable slots now (for tests and statistics).
    pub fn ready_slots(&self) -> u64 {
        self.ready.values().map(|s| s.count_ones() as u64).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_slots_wait_for_the_checkpoint() {
        let mut r = DatReuse::default();
        r.note_freed(3, 5);
        assert_eq!(r.take(false), None, "freed in the checkpoint being built");
        r.checkpoint_done();
        assert_eq!(r.take(false), Some(3 * DAT_PER_BLOCK + 5));
        assert!(r.fresh.contains(&(3 * DAT_PER_BLOCK + 5)));
        assert_eq!(r.take(false), None);
        r.checkpoint_done();
        assert!(r.fresh.is_empty());
    }

    #[test]
    fn blocks_are_drained_one_at_a_time_most_free_first() {
        let mut r = DatReuse::default();
        r.note_durable_block(1, 0b1);
        r.note_durable_block(7, 0b1110);
        let got: Vec<u64> = std::iter::from_fn(|| r.take(false)).collect();
        let b = DAT_PER_BLOCK;
        assert_eq!(got, vec![7 * b + 1, 7 * b + 2, 7 * b + 3, b]);
    }

    #[test]
    fn hot_and_cold_blocks_drain_different_dat_blocks() {
        let mut r = DatReuse::default();
        let b = DAT_PER_BLOCK;
        r.note_durable_block(1, 0b1111);
        r.note_durable_block(2, 0b111);
        assert_eq!(r.take(true), Some(b));
        // Cold goes elsewhere while there is elsewhere.
        assert_eq!(r.take(false), Some(2 * b));
        assert_eq!(r.take(true), Some(b + 1));
        // Freed hot entries come back to the hot block.
        r.note_freed(1, 0);
        r.checkpoint_done();
        assert_eq!(r.take(true), Some(b), "block 1 stays hot");
        assert_eq!(r.take(true), Some(b + 2));
        assert_eq!(r.take(true), Some(b + 3));
        // With no hot block left, hot takes a cold one.
        assert_eq!(r.take(true), Some(2 * b + 1));
    }

    /// A block changed, written ahead and changed again before the
    /// checkpoint: only its first change is as on disk. The slot freed in
    /// between waits for the checkpoint, and is handed out once.
    #[test]
    fn only_the_first_change_since_a_checkpoint_shows_durable_slots() {
        let mut r = DatReuse::default();
        assert!(r.touch(4), "first change");
        r.note_durable_block(4, 0b10);
        assert_eq!(r.take(false), Some(4 * DAT_PER_BLOCK + 1));
        r.note_freed(4, 0);
        assert!(
            !r.touch(4),
            "changed already: its free slot 0 is not durable"
        );
        assert_eq!(r.take(false), None);
        r.checkpoint_done();
        assert!(r.touch(4), "a new checkpoint, a first change again");
        assert_eq!(r.take(false), Some(4 * DAT_PER_BLOCK));
        assert_eq!(r.take(false), None);
    }

    #[test]
    fn claimed_slots_are_not_handed_out() {
        let mut r = DatReuse::default();
        let b = DAT_PER_BLOCK;
        r.note_durable_block(2, 0b111);
        r.claim(2 * b + 1, true);
        r.claim(9 * b, false);
        assert!(r.fresh.contains(&(2 * b + 1)));
        assert!(!r.fresh.contains(&(9 * b)), "above the floor: fresh anyway");
        let got: Vec<u64> = std::iter::from_fn(|| r.take(false)).collect();
        assert_eq!(got, vec![2 * b, 2 * b + 2]);
    }

    #[test]
    fn punched_blocks_are_not_reused() {
        let mut r = DatReuse::default();
        r.note_durable_block(2, 0b11);
        r.note_freed(2, 4);
        r.forget_block(2);
        r.checkpoint_done();
        assert_eq!(r.take(false), None);
    }
}
