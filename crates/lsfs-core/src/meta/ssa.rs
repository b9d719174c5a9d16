//! The segment summary area (SSA): out-of-band summaries of plugged segments.
//!
//! A segment's summaries are normally in-band: each record's header names
//! the record's payload blocks. Threaded logging (meta/plug.rs) writes new
//! blocks into the dead slots of a full segment; no record would name them,
//! and the record they land in would fail its CRC. So before a segment is
//! plugged its summary moves out of band, into the SSA: a block-mapped
//! metadata file (inode 7, like the SUFILE) with one 32-byte summary entry
//! per block of each plugged segment (F2FS's SSA, but only for the segments
//! that need it). The segment's SUFILE entry is flagged [`SU_PLUGGED`], and
//! from then on every walk of the segment (cleaner, reclaimer, fsck) reads
//! the SSA instead of its records. Freeing the segment drops its entries and
//! the flag. The SSA is part of each checkpoint like every metadata file, so
//! a checkpoint's SSA and DAT always agree.

use crate::cache::Owner;
use crate::codec::{Reader, Writer};
use crate::error::Result;
use crate::gc::victim_reads::VictimReads;
use crate::layout::{BLOCK_BYTES, SSA_INO};
use crate::log::chain::{segment_record_spans, segment_summaries, FoundRecord};
use crate::log::record::{BlockKind, SummaryEntry, ENTRY_BYTES};
use crate::meta::store::Store;
use crate::meta::sufile::SU_PLUGGED;

/// Summary entries per SSA block.
pub const SSA_PER_BLOCK: u64 = (BLOCK_BYTES / ENTRY_BYTES) as u64;

fn owner(idx: u64) -> Owner {
    Owner {
        ino: SSA_INO,
        offset: idx,
        kind: BlockKind::Data,
    }
}

/// An all-zero entry is a slot that holds nothing (a hole).
fn is_hole(b: &[u8]) -> bool {
    b.iter().all(|&x| x == 0)
}

impl Store {
    pub fn segment_is_plugged(&self, seg: u64) -> bool {
        self.segs.usage[seg as usize].flags & SU_PLUGGED != 0
    }

    /// Entry index of slot `slot` of segment `seg` in the SSA.
    fn ssa_index(&self, seg: u64, slot: u32) -> u64 {
        seg * self.geo.segment_blocks as u64 + slot as u64
    }

    /// The blocks of `seg` and what each holds, as (physical block, summary
    /// entry): from the SSA for a plugged segment, else from its records
    /// (with `verify`, each record's payload is read and its CRC checked;
    /// without, only headers and summaries are read, for callers that check
    /// every entry against the DAT before acting on it). Entries may be
    /// stale (a block superseded since); callers ask the DAT.
    pub fn segment_entries(&mut self, seg: u64, verify: bool) -> Result<Vec<(u64, SummaryEntry)>> {
        if verify || self.segment_is_plugged(seg) {
            return Ok(self.segment_entries_read(seg)?.0);
        }
        let fs_id = self.sb.fs_id;
        let records = segment_summaries(&mut *self.dev, &self.geo, fs_id, seg)?;
        Ok(entries_of(records.iter()))
    }

    /// [`Store::segment_entries`] verified, with the bytes of the records
    /// read to verify them (none for a plugged segment, whose entries come
    /// from the SSA): a relocation copies blocks from them
    /// (`gc/victim_reads.rs`).
    pub fn segment_entries_read(
        &mut self,
        seg: u64,
    ) -> Result<(Vec<(u64, SummaryEntry)>, VictimReads)> {
        if self.segment_is_plugged(seg) {
            let start = self.geo.segment_start(seg);
            let entries = self
                .ssa_read(seg)?
                .into_iter()
                .enumerate()
                .filter_map(|(i, e)| e.map(|e| (start + i as u64, e)))
                .collect();
            return Ok((entries, VictimReads::default()));
        }
        let fs_id = self.sb.fs_id;
        let spans = segment_record_spans(&mut *self.dev, &self.geo, fs_id, seg)?;
        let entries = entries_of(spans.iter().map(|(r, _)| r));
        let runs = spans.into_iter().map(|(r, span)| (r.block, span)).collect();
        Ok((entries, VictimReads::from_runs(runs)))
    }

    /// The SSA's entries for every slot of `seg` (`None`: a hole).
    pub fn ssa_read(&mut self, seg: u64) -> Result<Vec<Option<SummaryEntry>>> {
        let n = self.geo.segment_blocks;
        let mut out = Vec::with_capacity(n as usize);
        let mut block: Option<(u64, Option<Vec<u8>>)> = None;
        for slot in 0..n {
            let i = self.ssa_index(seg, slot);
            let idx = i / SSA_PER_BLOCK;
            if block.as_ref().map(|b| b.0) != Some(idx) {
                let data = match self.mfile_get(self.ssa_root, idx)? {
                    Some(v) => Some(self.vread(v, owner(idx))?),
                    None => None,
                };
                block = Some((idx, data));
            }
            let Some((_, Some(b))) = &block else {
                out.push(None);
                continue;
            };
            let at = (i % SSA_PER_BLOCK) as usize * ENTRY_BYTES;
            let raw = &b[at..at + ENTRY_BYTES];
            out.push(if is_hole(raw) {
                None
            } else {
                let what = format!("SSA block {idx}");
                Some(SummaryEntry::decode(
                    &mut Reader::new(raw, &what),
                    &what,
                    slot as usize,
                )?)
            });
        }
        Ok(out)
    }

    /// Set the SSA entries of slots of `seg` (`None`: a hole). SSA blocks
    /// left all holes are dropped.
    pub fn ssa_set(&mut self, seg: u64, changes: &[(u32, Option<SummaryEntry>)]) -> Result<()> {
        let mut by_block: std::collections::BTreeMap<u64, Vec<(usize, Option<SummaryEntry>)>> =
            Default::default();
        for &(slot, e) in changes {
            let i = self.ssa_index(seg, slot);
            by_block
                .entry(i / SSA_PER_BLOCK)
                .or_default()
                .push(((i % SSA_PER_BLOCK) as usize, e));
        }
        for (idx, sets) in by_block {
            let mut root = self.ssa_root;
            let r = (|| {
                let v = self.mfile_fresh(SSA_INO, &mut root, idx)?;
                let mut b = self.vread(v, owner(idx))?;
                for (k, e) in sets {
                    let at = k * ENTRY_BYTES;
                    let mut w = Writer::with_capacity(ENTRY_BYTES);
                    match e {
                        Some(e) => e.encode(&mut w),
                        None => {
                            w.pad_to(ENTRY_BYTES);
                        }
                    }
                    b[at..at + ENTRY_BYTES].copy_from_slice(&w.finish());
                }
                if is_hole(&b) {
                    self.ssa_root = root;
                    self.mfile_punch(SSA_INO, &mut root, idx)
                } else {
                    self.vwrite(v, b, owner(idx))
                }
            })();
            self.ssa_root = root;
            r?;
        }
        Ok(())
    }

    /// Free `seg` (no block of it is needed any more): its SSA entries,
    /// plugging holes and SUFILE entry (flags included) go.
    pub(crate) fn free_segment(&mut self, seg: u64, now: u64) -> Result<()> {
        self.ssa_clear(seg)?;
        self.plugs.forget(seg);
        self.segs.mark_freed(seg, now);
        Ok(())
    }

    /// Drop the SSA entries of `seg`.
    fn ssa_clear(&mut self, seg: u64) -> Result<()> {
        if !self.segment_is_plugged(seg) {
            return Ok(());
        }
        let all: Vec<(u32, Option<SummaryEntry>)> =
            (0..self.geo.segment_blocks).map(|s| (s, None)).collect();
        self.ssa_set(seg, &all)
    }
}

/// Each summary entry of `records`, with the block it describes.
fn entries_of<'a>(records: impl Iterator<Item = &'a FoundRecord>) -> Vec<(u64, SummaryEntry)> {
    records
        .flat_map(|r| {
            r.header
                .entries
                .iter()
                .enumerate()
                .map(move |(i, e)| (r.payload_block(i), *e))
        })
        .collect()
}
