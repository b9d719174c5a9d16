//! One DAT entry: where a virtual block lives and which checkpoints see it.

use crate::codec::{Reader, Writer};
use crate::error::Result;
use crate::layout::BLOCK_BYTES;

pub const DAT_ENTRY_BYTES: usize = 32;
pub const DAT_PER_BLOCK: u64 = (BLOCK_BYTES / DAT_ENTRY_BYTES) as u64;
/// `end` of a block the current file system still uses.
pub const CNO_MAX: u64 = u64::MAX;
/// The physical block takes the low 48 bits of the entry's first word; the
/// high 16 hold [`DatEntry::refs`] (docs/FORMAT.md §6). A device of 2^48
/// blocks is 1 EiB, far past any geometry `layout.rs` accepts.
const PBLOCK_BITS: u32 = 48;
const PBLOCK_MASK: u64 = (1 << PBLOCK_BITS) - 1;
/// Most extra users one virtual block can have.
pub const MAX_REFS: u16 = u16::MAX;

/// A virtual block is visible in checkpoints `start <= c < end`. An all-zero
/// entry is unused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DatEntry {
    /// Physical block, or 0 while the block has not been written yet.
    pub pblock: u64,
    pub start: u64,
    pub end: u64,
    /// `start` of the version of the same file block that this one
    /// replaced (0: none, or not known): how long that version lived is the
    /// block's temperature when the cleaner moves it (meta/stream.rs).
    /// Images written before it have 0 here, and older binaries ignore it.
    pub prev_start: u64,
    /// Users of the block in the current file system besides the first:
    /// file blocks that clones made share it (fs/clone.rs). 0 for a block
    /// only one file maps, which is every block of an image without the
    /// CLONES feature. The block dies only when it drops to 0 and its last
    /// user lets go.
    pub refs: u16,
    /// 0: `pblock` holds the block as it is. `k + 1`: `pblock` is slot `k`
    /// of a compressed record, whose frame (log/frame.rs) starts at
    /// `pblock - k`. Stored in bits 48..59 of `prev_start` on disk
    /// (FORMAT.md §6; the physical block's high bits hold `refs`), so every
    /// user of `pblock` sees a plain address.
    pub frame: u16,
}

/// Bits of the stored `prev_start` word that hold `DatEntry::frame`; the
/// others hold `prev_start` itself (a checkpoint number, below 2^48 in any
/// image: that is nine million years at one a second, and it is only a
/// hint). Bits above the frame's stay in `prev_start`, so an entry
/// re-encodes to the bytes it was decoded from.
const FRAME_SHIFT: u32 = 48;
const FRAME_MASK: u64 = 0x7ff << FRAME_SHIFT;

impl DatEntry {
    /// The entry of a block handed out in checkpoint `cno` and not placed yet.
    pub fn fresh(cno: u64) -> DatEntry {
        DatEntry {
            pblock: 0,
            start: cno,
            end: CNO_MAX,
            prev_start: 0,
            refs: 0,
            frame: 0,
        }
    }
    /// The entry with its block placed at `pblock`, stored raw there.
    pub fn placed(self, pblock: u64) -> DatEntry {
        DatEntry {
            pblock,
            frame: 0,
            ..self
        }
    }
    /// The entry without a place (the block must be written again).
    pub fn unplaced(self) -> DatEntry {
        self.placed(0)
    }
    /// Where the compressed frame holding this block starts, and the
    /// block's slot in it; `None` for a block stored raw.
    pub fn frame_slot(&self) -> Option<(u64, usize)> {
        let k = (self.frame as u64).checked_sub(1)?;
        Some((self.pblock.checked_sub(k)?, k as usize))
    }
    /// Whether slot `slot` of DAT block `block` is unused (all zero), without
    /// decoding it.
    pub fn slot_is_free(block: &[u8], slot: usize) -> bool {
        block[slot * DAT_ENTRY_BYTES..(slot + 1) * DAT_ENTRY_BYTES]
            .iter()
            .all(|&x| x == 0)
    }
    pub fn is_free(&self) -> bool {
        *self == DatEntry::default()
    }
    pub fn is_current(&self) -> bool {
        self.end == CNO_MAX && self.start != 0
    }
    pub fn read(block: &[u8], slot: usize) -> Result<DatEntry> {
        let mut r = Reader::at(block, slot * DAT_ENTRY_BYTES, "DAT entry");
        let first = r.u64()?;
        let start = r.u64()?;
        let end = r.u64()?;
        let fourth = r.u64()?;
        let e = DatEntry {
            pblock: first & PBLOCK_MASK,
            start,
            end,
            prev_start: fourth & !FRAME_MASK,
            refs: (first >> PBLOCK_BITS) as u16,
            frame: ((fourth & FRAME_MASK) >> FRAME_SHIFT) as u16,
        };
        Ok(e)
    }
    pub fn write(&self, block: &mut [u8], slot: usize) {
        let mut w = Writer::with_capacity(DAT_ENTRY_BYTES);
        debug_assert!(self.pblock <= PBLOCK_MASK, "physical block {}", self.pblock);
        debug_assert!(self.frame <= 0x7ff, "frame slot {}", self.frame);
        w.u64(self.pblock | (self.refs as u64) << PBLOCK_BITS)
            .u64(self.start)
            .u64(self.end)
            .u64((self.prev_start & !FRAME_MASK) | ((self.frame as u64) << FRAME_SHIFT));
        block[slot * DAT_ENTRY_BYTES..(slot + 1) * DAT_ENTRY_BYTES].copy_from_slice(&w.buf);
    }
}
