//! The store's side of compressed records (docs/FORMAT.md §3.3): which
//! records the segment constructor compresses, the frames it has made and
//! not yet written, and reading a block back through its frame.
//!
//! A compressed record keeps every payload slot, so each block keeps its
//! own physical address and the segment counters stay exactly what they
//! were; only the frame's blocks are written. Reading block `k` of a frame
//! reads and decompresses the whole frame; the last few frames read are
//! kept, so a sequential read decompresses each frame once.

use crate::cache::vkey;
use crate::cache::Owner;
use crate::error::{Error, Result};
use crate::layout::BLOCK_BYTES;
use crate::log::frame;
use crate::log::record::holds_file_data;
use crate::meta::construct::{Item, Plan};
use crate::meta::dat_entry::DatEntry;
use crate::meta::store::Store;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Decompressed frames kept for reads: enough for a few files read at once.
const FRAMES_KEPT: usize = 4;

#[derive(Default)]
pub struct Frames {
    /// Frames made for records about to be written, by the record's first
    /// payload block: (payload slots, the frame's blocks).
    pending: BTreeMap<u64, (usize, Vec<u8>)>,
    /// Recently decompressed frames, by first block, newest last.
    read: Vec<(u64, Arc<Vec<u8>>)>,
}

impl Frames {
    /// Every record written may reuse blocks a kept frame came from.
    pub(super) fn forget_read(&mut self) {
        self.read.clear();
    }
}

impl Store {
    /// Whether new records of user data are compressed: the image
    /// carries the feature flag and the mount does not say no.
    pub fn compressing(&self) -> bool {
        self.config.compress != Some(false) && self.sb.compressed_records()
    }

    /// Compress the payload of each record of `plan` (`items`, in plan
    /// order) that starts with user file data, as far as it goes, if that
    /// shrinks; the frames wait in `pending` for `frame_of_place` and
    /// `take_frame`. (A checkpoint's records hold file data first, by
    /// inode, then tree nodes and the metadata files, which stay raw.)
    pub(super) fn compress_plan(&mut self, plan: &Plan, items: &[Item]) {
        if !self.compressing() {
            return;
        }
        let mut rest = items;
        for r in &plan.records {
            let (mine, more) = rest.split_at(r.npayload);
            rest = more;
            if let Some((k, f)) = self.compress_items(mine) {
                let first = self.geo.segment_start(r.seg) + (r.off as usize + r.nsum()) as u64;
                self.frames.pending.insert(first, (k, f));
            }
        }
    }

    /// The frame of the leading user data blocks of `items`, and how many
    /// it holds, if they shrink.
    fn compress_items(&mut self, items: &[Item]) -> Option<(usize, Vec<u8>)> {
        let mut buf = Vec::with_capacity(items.len() * BLOCK_BYTES);
        for it in items {
            let Item::Virtual(v) = *it else { break };
            let Some(o) = self.cache.owner(vkey(v)) else {
                break;
            };
            if !holds_file_data(o.kind, o.ino) || self.nocompress.contains(&o.ino) {
                break;
            }
            buf.extend_from_slice(self.cache.get(vkey(v))?);
        }
        if buf.is_empty() {
            return None;
        }
        Some((buf.len() / BLOCK_BYTES, frame::compress(&buf)?))
    }

    /// `DatEntry::frame` of a block placed at `pos`: its slot in a pending
    /// frame, plus one, or 0.
    pub(super) fn frame_of_place(&self, pos: u64) -> u16 {
        match self.frames.pending.range(..=pos).next_back() {
            Some((&first, &(n, _))) if pos < first + n as u64 => (pos - first + 1) as u16,
            _ => 0,
        }
    }

    /// The frame made for the record whose payload starts at `first`:
    /// (its blocks, how many, the payload slots it holds), taken out of
    /// `pending`.
    pub(super) fn take_frame(&mut self, first: u64) -> Option<(Vec<u8>, u32, u32)> {
        let (k, f) = self.frames.pending.remove(&first)?;
        let m = (f.len() / BLOCK_BYTES) as u32;
        Some((f, m, k as u32))
    }

    /// Frames not written (a failed construction): forgotten.
    pub(super) fn drop_pending_frames(&mut self) {
        self.frames.pending.clear();
    }

    /// The block stored at `pblock`, raw or slot `frame - 1` of a frame
    /// (`DatEntry::frame`).
    pub(crate) fn read_stored(&mut self, pblock: u64, frame: u16, what: &str) -> Result<Vec<u8>> {
        if frame == 0 {
            let mut b = vec![0; BLOCK_BYTES];
            self.dev.read_at(self.geo.byte_offset(pblock), &mut b)?;
            return Ok(b);
        }
        let k = frame as usize - 1;
        let Some(start) = pblock.checked_sub(k as u64) else {
            return Err(Error::corrupt(format!(
                "{what}: slot {k} of a frame before block 0"
            )));
        };
        let blocks = self.read_frame(start, what)?;
        Ok(frame_slot(&blocks, start, k, what)?.to_vec())
    }

    /// [`Store::vread_ahead`] of a block in a frame: `v0` and the blocks
    /// after it that are the next slots of the same frame, cached clean from
    /// one decompression. Returns how many.
    pub(crate) fn vread_ahead_framed(
        &mut self,
        v0: u64,
        first: DatEntry,
        n: u64,
        owner: impl Fn(u64) -> Owner,
    ) -> Result<u64> {
        let what = format!("virtual block {v0}");
        let Some((start, k0)) = first.frame_slot() else {
            return Err(Error::corrupt(format!("{what}: frame before block 0")));
        };
        let blocks = self.read_frame(start, &what)?;
        let mut run = 0;
        while run < n {
            let v = v0 + run;
            if run > 0
                && (self.cache.contains(vkey(v))
                    || self.dat_get(v)?.frame_slot() != Some((start, k0 + run as usize)))
            {
                break;
            }
            let b = frame_slot(&blocks, start, k0 + run as usize, &what)?;
            self.cache.insert_clean(vkey(v), b, owner(run));
            run += 1;
        }
        Ok(run)
    }

    /// The frame at block `start` read and decompressed, not kept (fsck).
    pub(crate) fn decompress_frame(&mut self, start: u64, what: &str) -> Result<Vec<u8>> {
        let what = format!("{what}: frame at block {start}");
        crate::meta::store::check_phys(&self.geo, start, &what)?;
        let mut first = vec![0; BLOCK_BYTES];
        self.dev.read_at(self.geo.byte_offset(start), &mut first)?;
        let (_, m, _) = frame::frame_size(&first, &what)?;
        crate::meta::store::check_phys(&self.geo, start + m as u64 - 1, &what)?;
        let mut all = vec![0; m * BLOCK_BYTES];
        self.dev.read_at(self.geo.byte_offset(start), &mut all)?;
        frame::decompress(&all, &what)
    }

    /// The decompressed blocks of the frame starting at block `start`
    /// (checked: a frame the DAT names must verify and decompress).
    pub(crate) fn read_frame(&mut self, start: u64, what: &str) -> Result<Arc<Vec<u8>>> {
        if let Some(i) = self.frames.read.iter().position(|f| f.0 == start) {
            let f = self.frames.read.remove(i);
            self.frames.read.push(f.clone());
            return Ok(f.1);
        }
        let blocks = Arc::new(self.decompress_frame(start, what)?);
        self.stats.frames_decompressed += 1;
        if self.frames.read.len() == FRAMES_KEPT {
            self.frames.read.remove(0);
        }
        self.frames.read.push((start, blocks.clone()));
        Ok(blocks)
    }
}

/// Slot `k` of the decompressed frame `blocks` (at block `start`).
fn frame_slot<'a>(blocks: &'a [u8], start: u64, k: usize, what: &str) -> Result<&'a [u8]> {
    blocks
        .get(k * BLOCK_BYTES..(k + 1) * BLOCK_BYTES)
        .ok_or_else(|| {
            Error::corrupt(format!(
                "{what}: slot {k} of the frame at block {start}, which has {}",
                blocks.len() / BLOCK_BYTES
            ))
        })
}
