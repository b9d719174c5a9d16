//! fsck's check of compressed records (docs/FORMAT.md §3.3): every frame
//! a record holds decompresses to the slots its header says, and every DAT
//! entry names its block's frame slot exactly as the record lays it out
//! (slot `j` of a record's frame run: `j + 1`; any other block: 0).

use super::{Checker, Dat};
use crate::layout::BLOCK_BYTES;
use crate::meta::store::Store;
use std::collections::HashMap;

/// What the records' headers say of their frames.
#[derive(Default)]
pub(super) struct FrameSlots {
    /// Physical block → its slot in a frame, plus one.
    pub slot: HashMap<u64, u16>,
    /// Each frame's first block and the slots it holds.
    pub frames: Vec<(u64, u32)>,
}

impl FrameSlots {
    /// Record a compressed record's frame run: `k` slots from `first`.
    pub fn add(&mut self, first: u64, k: u32) {
        self.frames.push((first, k));
        for j in 0..k {
            self.slot.insert(first + j as u64, j as u16 + 1);
        }
    }
}

impl Checker {
    /// The frames decode, and the DAT agrees with the records on which
    /// blocks lie in frames, and where.
    pub(super) fn check_frames(&mut self, s: &mut Store, dat: &Dat) {
        let seen = std::mem::take(&mut self.frame_slots);
        for &(first, k) in &seen.frames {
            match s.decompress_frame(first, "fsck") {
                Ok(b) if b.len() == k as usize * BLOCK_BYTES => {}
                Ok(b) => self.err(format!(
                    "frame at block {first}: {} blocks, its record says {k}",
                    b.len() / BLOCK_BYTES
                )),
                Err(e) => self.err(format!("frame at block {first}: {e}")),
            }
        }
        for (&v, e) in &dat.entries {
            if e.pblock == 0 {
                continue;
            }
            let want = seen.slot.get(&e.pblock).copied().unwrap_or(0);
            if e.frame != want {
                self.err(format!(
                    "DAT entry of virtual block {v} (block {}) names frame slot {}, its record {}",
                    e.pblock, e.frame, want
                ));
            }
        }
        self.stats.frames_checked += seen.frames.len() as u64;
    }
}
