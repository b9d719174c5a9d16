//! Where things are on the device: block and segment geometry, and the
//! reserved inode numbers. See docs/FORMAT.md.

use crate::error::{Error, Result};

/// The only block size format v1 uses.
pub const BLOCK_BYTES: usize = 4096;

/// Bytes of one inode in the IFILE (docs/FORMAT.md §7). Here, not in
/// `meta/ifile.rs`, because the log's inline items carry inode images.
pub const INODE_BYTES: usize = 512;

/// Largest file size: 2^44 bytes (16 TiB), far above the 1 TiB required.
/// Here, not in `fs/`, because the log's decoders bound sizes by it.
pub const MAX_FILE_BYTES: u64 = 1 << 44;
/// Default segment size: 2 MiB (F2FS's). The cleaner works a segment at a
/// time and keeps a few free: on a 1 GiB device, 8 MiB segments left 8.6 %
/// of it free for the cleaner's marks and cleaned coarser (simulator,
/// hot/cold 90/10 at 70 %: write amplification 1.40 against 1.27 with
/// 2 MiB; docs/CLEANER.md).
pub const DEFAULT_SEGMENT_BLOCKS: u32 = 512;
/// Segments are at least 64 blocks so that a record header, a checkpoint's
/// metadata and some data fit in one.
pub const MIN_SEGMENT_BLOCKS: u32 = 64;
pub const MAX_SEGMENT_BLOCKS: u32 = 65536;
/// The smallest image mkfs accepts: room for the reserve and some data.
pub const MIN_SEGMENTS: u64 = 8;

/// Reserved inode numbers. User inodes start at [`FIRST_USER_INO`].
pub const ROOT_INO: u64 = 1;
/// A hidden directory holding inodes that are unlinked but still open, so a
/// crash cannot leak them: they are deleted at the next mount.
pub const ORPHAN_INO: u64 = 2;
pub const IFILE_INO: u64 = 3;
pub const CPFILE_INO: u64 = 4;
pub const SUFILE_INO: u64 = 5;
pub const DAT_INO: u64 = 6;
/// The segment summary area of plugged segments (meta/ssa.rs).
pub const SSA_INO: u64 = 7;
pub const FIRST_USER_INO: u64 = 16;
/// Inode numbers at or above this are never allocated: the high bits name
/// snapshot views in the live mount.
pub const MAX_INO: u64 = 1 << 48;

/// Virtual block numbers are below this: the block cache keys them in 63
/// bits beside physical addresses. A super root whose DAT ends past it is
/// corrupt.
pub const VBLOCK_LIMIT: u64 = 1 << 62;

/// Sequence numbers (superblocks, records) and checkpoint numbers stay
/// below this; one at or above it on disk is damage, and refused where it
/// is decoded, since the engine adds to them (a million a second would take
/// 146,000 years to get here).
pub const COUNTER_LIMIT: u64 = 1 << 62;

/// The geometry fixed at mkfs time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub block_bytes: usize,
    pub segment_blocks: u32,
    pub nsegments: u64,
    /// Block 0 is the first superblock; segment 0 starts here.
    pub first_segment_block: u64,
    /// Total blocks of the device (the last one is the second superblock).
    pub device_blocks: u64,
}

impl Geometry {
    /// The geometry for a device of `device_bytes` with `segment_blocks`-block segments.
    pub fn for_device(device_bytes: u64, segment_blocks: u32) -> Result<Geometry> {
        if !(MIN_SEGMENT_BLOCKS..=MAX_SEGMENT_BLOCKS).contains(&segment_blocks)
            || !segment_blocks.is_power_of_two()
        {
            return Err(Error::invalid(format!(
                "segment size {} blocks: must be a power of two in {}..={} blocks ({}..={} KiB)",
                segment_blocks,
                MIN_SEGMENT_BLOCKS,
                MAX_SEGMENT_BLOCKS,
                MIN_SEGMENT_BLOCKS as usize * BLOCK_BYTES / 1024,
                MAX_SEGMENT_BLOCKS as usize * BLOCK_BYTES / 1024
            )));
        }
        let device_blocks = device_bytes / BLOCK_BYTES as u64;
        let usable = device_blocks.saturating_sub(2);
        let nsegments = usable / segment_blocks as u64;
        if nsegments < MIN_SEGMENTS {
            return Err(Error::invalid(format!(
                "device of {} bytes holds {} segments of {} KiB; at least {} are needed ({} bytes)",
                device_bytes,
                nsegments,
                segment_blocks as usize * BLOCK_BYTES / 1024,
                MIN_SEGMENTS,
                (MIN_SEGMENTS * segment_blocks as u64 + 2) * BLOCK_BYTES as u64
            )));
        }
        Ok(Geometry {
            block_bytes: BLOCK_BYTES,
            segment_blocks,
            nsegments,
            first_segment_block: 1,
            device_blocks,
        })
    }

    pub fn segment_start(&self, segno: u64) -> u64 {
        debug_assert!(segno < self.nsegments);
        self.first_segment_block + segno * self.segment_blocks as u64
    }

    /// The segment holding physical block `pblock`, if it is in a segment.
    pub fn segment_of(&self, pblock: u64) -> Option<u64> {
        let rel = pblock.checked_sub(self.first_segment_block)?;
        let seg = rel / self.segment_blocks as u64;
        (seg < self.nsegments).then_some(seg)
    }

    pub fn second_superblock(&self) -> u64 {
        self.device_blocks - 1
    }

    pub fn byte_offset(&self, pblock: u64) -> u64 {
        pblock * self.block_bytes as u64
    }

    pub fn total_segment_blocks(&self) -> u64 {
        self.nsegments * self.segment_blocks as u64
    }
}
