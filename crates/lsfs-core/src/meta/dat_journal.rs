//! The DAT journal: a checkpoint writes the DAT entries that changed in a
//! DAT block instead of the whole block, while few did.
//!
//! Every overwrite ends one DAT entry and starts another, and every block
//! the cleaner moves changes one; a checkpoint used to write each DAT block
//! any entry of which changed. Under random overwrites of a large file
//! nearly every one of the file's DAT blocks changed between two
//! checkpoints, most of them in one or two entries (measured on a 716 MiB
//! file rewritten at random, 90 % of the writes to a tenth of it: 45 % of
//! the DAT blocks written held one or two changed entries), so the DAT cost
//! about a fifth of a block per 4 KiB written.
//!
//! A DAT block whose copy on disk (its *base*) is still in the DAT's tree
//! can instead stay in memory, with the entries changed since the base was
//! written listed in the journal. The journal is rewritten whole by every
//! checkpoint (40 bytes an entry, 102 to a block) and named by the super
//! root; the previous one dies with the next checkpoint, so its blocks never
//! need the cleaner. Mounting reads the base and applies the journal.
//!
//! A journaled block stays in the cache, dirty, under its base address (so
//! every reader of the DAT, fsck included, sees the current entries, and the
//! tree still points at the base). A block is written whole again once
//! [`FLUSH_MIN_CHANGED`] of its entries changed, when the journal would
//! outgrow [`MAX_ENTRIES`] or [`Store::dat_journal_max_blocks`] blocks (the
//! ones with the most changes go first), or when the cleaner moves its base.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::cache::{pkey, Owner};
use crate::codec::{Reader, Writer};
use crate::error::{Error, Result};
use crate::layout::{BLOCK_BYTES, DAT_INO};
use crate::log::record::BlockKind;
use crate::meta::dat_entry::{DatEntry, DAT_PER_BLOCK};
use crate::meta::store::{check_phys, Store};

const MAGIC: u32 = 0x4A44_534C; // "LSDJ"
const HEAD_BYTES: usize = 16;
/// One entry: virtual block u64 and the 32-byte DAT entry.
pub const ENTRY_BYTES: usize = 40;
pub const ENTRIES_PER_BLOCK: usize = (BLOCK_BYTES - HEAD_BYTES) / ENTRY_BYTES;
/// A DAT block with at least this many changed entries is written whole:
/// journaled, they would cost a fifth of a block at every checkpoint.
pub const FLUSH_MIN_CHANGED: u32 = 32;
/// Entries the journal holds at most: 160 blocks a checkpoint.
pub const MAX_ENTRIES: usize = 160 * ENTRIES_PER_BLOCK;
/// Free segments beyond the reserve below which nothing is journaled.
const JOURNAL_ROOM_SEGMENTS: u64 = 4;
const _: () =
    assert!(MAX_ENTRIES.div_ceil(ENTRIES_PER_BLOCK) <= crate::log::super_root::SR_DAT_JOURNAL_MAX);

/// A DAT block whose base on disk is still in the DAT's tree.
#[derive(Clone, Copy, Debug)]
pub struct Tracked {
    /// Physical address of the block's copy on disk.
    pub base: u64,
    /// Entries changed since the base was written (a bit a slot).
    pub changed: u128,
    /// Kept dirty in the cache under `base` (journaled), rather than at a
    /// temporary address (copied on write in this checkpoint).
    pub at_base: bool,
}

#[derive(Debug, Default)]
pub struct DatJournal {
    pub tracked: BTreeMap<u64, Tracked>,
    /// Base addresses of the journaled blocks (those kept under their base).
    at_base: HashMap<u64, u64>,
    /// Journaled blocks changed since the last checkpoint.
    touched: HashSet<u64>,
    /// DAT blocks this checkpoint writes whole (decided, never undone).
    flushing: HashSet<u64>,
    /// Journal blocks the last checkpoint wrote: live until the next.
    pub written: Vec<u64>,
    /// What the coming checkpoint writes, once placed (encode_blocks).
    pub encoded: Vec<Vec<u8>>,
}

impl DatJournal {
    /// Journaled blocks (dirty in the cache, not written by checkpoints).
    pub fn journaled_blocks(&self) -> usize {
        self.at_base.len()
    }
    /// Whether `addr` is the base of a journaled block.
    pub fn is_journaled_addr(&self, addr: u64) -> bool {
        self.at_base.contains_key(&addr)
    }
    pub fn is_journaled(&self, idx: u64) -> bool {
        self.tracked.get(&idx).is_some_and(|t| t.at_base)
    }
    pub fn base_of(&self, idx: u64) -> Option<u64> {
        self.tracked.get(&idx).map(|t| t.base)
    }
    /// Entries the journal holds now.
    pub fn entries(&self) -> usize {
        self.tracked
            .values()
            .filter(|t| t.at_base)
            .map(|t| t.changed.count_ones() as usize)
            .sum()
    }
    /// A journaled block is changed: whether it is the first time since
    /// the last checkpoint (its contents are then what is durable).
    pub fn first_touch(&mut self, idx: u64) -> bool {
        self.is_journaled(idx) && self.touched.insert(idx)
    }
    fn set_at_base(&mut self, idx: u64, on: bool) {
        let t = self.tracked.get_mut(&idx).expect("tracked");
        t.at_base = on;
        if on {
            self.at_base.insert(t.base, idx);
        } else {
            self.at_base.remove(&t.base);
        }
    }
    fn untrack(&mut self, idx: u64) -> Option<Tracked> {
        let t = self.tracked.remove(&idx)?;
        self.at_base.remove(&t.base);
        self.touched.remove(&idx);
        self.flushing.remove(&idx);
        Some(t)
    }
    /// The checkpoint is written: its decisions are done with.
    pub fn checkpoint_done(&mut self, written: Vec<u64>) {
        self.touched.clear();
        self.flushing.clear();
        self.encoded.clear();
        self.written = written;
        debug_assert!(self.tracked.values().all(|t| t.at_base));
    }
}

/// Encode `entries` (virtual block, entry) into journal blocks.
pub fn encode_blocks(entries: &[(u64, DatEntry)]) -> Vec<Vec<u8>> {
    entries
        .chunks(ENTRIES_PER_BLOCK)
        .map(|chunk| {
            let mut w = Writer::with_capacity(BLOCK_BYTES);
            w.u32(MAGIC).u16(chunk.len() as u16).pad_to(HEAD_BYTES);
            for (v, e) in chunk {
                w.u64(*v);
                let mut b = [0u8; 32];
                e.write(&mut b, 0);
                w.bytes(&b);
            }
            w.pad_to(BLOCK_BYTES);
            w.finish()
        })
        .collect()
}

/// The entries of journal block `b` (at `where_`, for messages), checked:
/// the magic, the count, zero padding, no free entry.
pub fn decode_block(b: &[u8], where_: &str) -> Result<Vec<(u64, DatEntry)>> {
    let what = format!("DAT journal block at {where_}");
    let mut r = Reader::new(b, &what);
    if b.len() != BLOCK_BYTES || r.u32()? != MAGIC {
        return Err(Error::corrupt(format!("{what}: bad magic")));
    }
    let n = r.u16()? as usize;
    if n == 0 || n > ENTRIES_PER_BLOCK || b[6..HEAD_BYTES].iter().any(|&x| x != 0) {
        return Err(Error::corrupt(format!("{what}: {n} entries")));
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let at = HEAD_BYTES + i * ENTRY_BYTES;
        let v = u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
        let e = DatEntry::read(&b[at + 8..at + ENTRY_BYTES], 0)?;
        if v == 0 || v >= crate::layout::VBLOCK_LIMIT {
            return Err(Error::corrupt(format!(
                "{what}: entry {i} names virtual block {v:#x}"
            )));
        }
        out.push((v, e));
    }
    if b[HEAD_BYTES + n * ENTRY_BYTES..].iter().any(|&x| x != 0) {
        return Err(Error::corrupt(format!("{what}: bytes after entry {n}")));
    }
    Ok(out)
}

fn dat_owner(idx: u64) -> Owner {
    Owner {
        ino: DAT_INO,
        offset: idx,
        kind: BlockKind::DatBlock,
    }
}

impl Store {
    /// Journaled DAT blocks at most: an eighth of the cache (they stay in it).
    pub fn dat_journal_max_blocks(&self) -> usize {
        (self.cache.capacity_blocks() / 8).max(64)
    }

    /// Entries the journal holds at most: [`MAX_ENTRIES`], and on small
    /// segments an eighth of a segment of journal blocks, since every
    /// checkpoint writes it whole and a checkpoint must fit the reserve.
    pub fn dat_journal_max_entries(&self) -> usize {
        if self.segs.free_count() < self.reserve_segments() + JOURNAL_ROOM_SEGMENTS {
            // Nearly full: a journaled block keeps its old copy live, and
            // the last segments must be freed by cleaning; write it whole.
            return 0;
        }
        let blocks = (self.geo.segment_blocks as usize / 3).max(1);
        MAX_ENTRIES.min(blocks * ENTRIES_PER_BLOCK)
    }

    /// Dirty blocks the next checkpoint writes: the journaled DAT blocks
    /// stay dirty in the cache without being written.
    pub fn pending_blocks(&self) -> usize {
        self.cache.dirty_count() - self.dat_journal.journaled_blocks()
    }

    /// DAT block `idx` is copied on write from its base at `base`: the base
    /// stays live (the journal may keep it) until the checkpoint decides.
    pub(crate) fn dat_track(&mut self, idx: u64, base: u64) {
        let old = self.dat_journal.tracked.insert(
            idx,
            Tracked {
                base,
                changed: 0,
                at_base: false,
            },
        );
        debug_assert!(old.is_none(), "DAT block {idx} tracked twice");
    }

    /// Entries `slots` of DAT block `idx` changed.
    pub(crate) fn dat_mark_changed(&mut self, idx: u64, slots: u128) {
        if let Some(t) = self.dat_journal.tracked.get_mut(&idx) {
            t.changed |= slots;
        }
    }

    /// DAT block `idx` is written whole (or removed): its base dies.
    pub(crate) fn dat_release_base(&mut self, idx: u64) -> Result<()> {
        if let Some(t) = self.dat_journal.untrack(idx) {
            let seg = self
                .geo
                .segment_of(t.base)
                .expect("a DAT block's base is inside the log");
            let now = self.now();
            self.kill_live(seg, false, now)?;
        }
        Ok(())
    }

    /// Move a journaled DAT block from its base to a temporary address, so
    /// that the next checkpoint writes it whole; its base dies. Used when
    /// the cleaner moves the base, or the journal lets the block go.
    pub(crate) fn dat_unjournal(&mut self, idx: u64) -> Result<()> {
        let Some(t) = self.dat_journal.tracked.get(&idx).copied() else {
            return Ok(());
        };
        if t.at_base {
            let data = self
                .cache
                .get(pkey(t.base))
                .expect("a journaled DAT block is cached")
                .to_vec();
            let temp = self.next_temp;
            self.next_temp += 1;
            self.cache.put_dirty(pkey(temp), data, dat_owner(idx));
            self.dat_journal.set_at_base(idx, false);
            self.cache.remove(pkey(t.base));
            self.dat_map_point(idx, temp)?;
            self.stats.dat_blocks_unjournaled += 1;
        }
        self.dat_release_base(idx)
    }

    /// Keep a DAT block copied on write this checkpoint under its base
    /// instead (journaled): the tree points back at the base.
    fn dat_journal_block(&mut self, idx: u64) -> Result<()> {
        let t = self.dat_journal.tracked[&idx];
        debug_assert!(!t.at_base);
        let temp = self
            .dat_block_addr(idx)?
            .expect("a tracked DAT block is in the tree");
        let data = self
            .cache
            .get(pkey(temp))
            .expect("a copied DAT block is cached")
            .to_vec();
        self.cache.put_dirty(pkey(t.base), data, dat_owner(idx));
        self.cache.remove(pkey(temp));
        self.dat_journal.set_at_base(idx, true);
        self.stats.dat_blocks_journaled += 1;
        self.dat_map_point(idx, t.base)
    }

    /// Before a checkpoint places anything: decide which tracked DAT blocks
    /// it writes whole and which it journals, given the entries placing
    /// `placing` (the dirty virtual blocks) will change. Returns whether the
    /// DAT's tree changed (the dirty set is then not closed yet) and the
    /// journal blocks the checkpoint will write.
    pub(crate) fn dat_journal_settle(&mut self, placing: &[u64]) -> Result<(bool, usize)> {
        let mut bits: HashMap<u64, u128> = HashMap::new();
        for &v in placing {
            let idx = v / DAT_PER_BLOCK;
            if self.dat_journal.tracked.contains_key(&idx) {
                *bits.entry(idx).or_default() |= 1u128 << (v % DAT_PER_BLOCK);
            }
        }
        for (&idx, &b) in &bits {
            self.dat_mark_changed(idx, b);
        }
        let mut cand: Vec<(u32, u64)> = Vec::new();
        for (&idx, t) in &self.dat_journal.tracked {
            let n = t.changed.count_ones();
            if n >= FLUSH_MIN_CHANGED || self.dat_journal.flushing.contains(&idx) {
                self.dat_journal.flushing.insert(idx);
            } else {
                cand.push((n, idx));
            }
        }
        // The fewest changes stay journaled; past the bounds the most go.
        cand.sort_unstable();
        let max_blocks = self.dat_journal_max_blocks();
        let max_entries = self.dat_journal_max_entries();
        let mut total: usize = cand.iter().map(|&(n, _)| n as usize).sum();
        while total > max_entries || cand.len() > max_blocks {
            let (n, idx) = cand.pop().expect("over a bound, so not empty");
            total -= n as usize;
            self.dat_journal.flushing.insert(idx);
        }
        let mut changed = false;
        let flushing: Vec<u64> = self.dat_journal.flushing.iter().copied().collect();
        for idx in flushing {
            if self.dat_journal.tracked.contains_key(&idx) {
                self.dat_unjournal(idx)?;
                changed = true;
            }
        }
        for &(_, idx) in &cand {
            if !self.dat_journal.tracked[&idx].at_base {
                self.dat_journal_block(idx)?;
                changed = true;
            }
        }
        debug_assert_eq!(total, self.dat_journal.entries());
        Ok((changed, total.div_ceil(ENTRIES_PER_BLOCK)))
    }

    /// After placing: the journal's entries, encoded into `nblocks` blocks
    /// (kept in `dat_journal.encoded` for the records).
    pub(crate) fn dat_journal_encode(&mut self, nblocks: usize) -> Result<()> {
        let mut entries = Vec::new();
        for (&idx, t) in &self.dat_journal.tracked {
            let b = self
                .cache
                .get(pkey(t.base))
                .expect("a journaled DAT block is cached");
            for slot in 0..DAT_PER_BLOCK as usize {
                if t.changed & (1u128 << slot) != 0 {
                    entries.push((idx * DAT_PER_BLOCK + slot as u64, DatEntry::read(b, slot)?));
                }
            }
        }
        let blocks = encode_blocks(&entries);
        assert_eq!(
            blocks.len(),
            nblocks,
            "the DAT journal's {} entries do not fill the blocks planned",
            entries.len()
        );
        self.dat_journal.encoded = blocks;
        Ok(())
    }

    /// Mounting: apply the journal at `addrs` (the super root's) to the
    /// DAT's blocks, which stay journaled (dirty under their bases).
    pub(crate) fn dat_journal_load(&mut self, addrs: &[u64]) -> Result<()> {
        let mut by_block: BTreeMap<u64, Vec<(usize, DatEntry)>> = BTreeMap::new();
        for (i, &a) in addrs.iter().enumerate() {
            check_phys(&self.geo, a, &format!("DAT journal block {i}"))?;
            let mut b = vec![0; self.geo.block_bytes];
            self.dev.read_at(self.geo.byte_offset(a), &mut b)?;
            for (v, e) in decode_block(&b, &format!("block {a}"))? {
                by_block
                    .entry(v / DAT_PER_BLOCK)
                    .or_default()
                    .push(((v % DAT_PER_BLOCK) as usize, e));
            }
        }
        for (idx, changes) in by_block {
            let base = self.dat_block_addr(idx)?.ok_or_else(|| {
                Error::corrupt(format!(
                    "the DAT journal changes DAT block {idx}, which the DAT does not have"
                ))
            })?;
            if crate::meta::store::is_temp(base) || self.dat_journal.tracked.contains_key(&idx) {
                return Err(Error::corrupt(format!(
                    "the DAT journal names DAT block {idx} twice"
                )));
            }
            let mut block = self.read_dat_phys(base)?;
            let mut changed = 0u128;
            for (slot, e) in changes {
                e.write(&mut block, slot);
                changed |= 1u128 << slot;
            }
            self.cache.put_dirty(pkey(base), block, dat_owner(idx));
            self.dat_journal.tracked.insert(
                idx,
                Tracked {
                    base,
                    changed,
                    at_base: false,
                },
            );
            self.dat_journal.set_at_base(idx, true);
        }
        self.dat_journal.written = addrs.to_vec();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::dat_entry::CNO_MAX;

    #[test]
    fn blocks_round_trip_and_refuse_damage() {
        let entries: Vec<(u64, DatEntry)> = (1..=250u64)
            .map(|v| {
                (
                    v * 3,
                    DatEntry {
                        pblock: v + 1000,
                        start: v,
                        end: if v % 2 == 0 { CNO_MAX } else { v + 5 },
                        prev_start: v / 2,
                        refs: (v % 3) as u16,
                        frame: (v % 5) as u16,
                    },
                )
            })
            .collect();
        let blocks = encode_blocks(&entries);
        assert_eq!(blocks.len(), 250usize.div_ceil(ENTRIES_PER_BLOCK));
        let back: Vec<_> = blocks
            .iter()
            .flat_map(|b| decode_block(b, "test").unwrap())
            .collect();
        assert_eq!(back, entries);
        let mut bad = blocks[0].clone();
        bad[4] = 0xff; // count past the block
        assert!(decode_block(&bad, "test").is_err());
        let mut bad = blocks[2].clone();
        bad[BLOCK_BYTES - 1] = 1; // past the last entry
        assert!(decode_block(&bad, "test").is_err());
        let mut bad = blocks[0].clone();
        bad[HEAD_BYTES..HEAD_BYTES + 8].copy_from_slice(&0u64.to_le_bytes());
        assert!(decode_block(&bad, "test").is_err());
    }
}
