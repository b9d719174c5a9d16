//! The IFILE: inode `ino` is the 512-byte slot `ino % 8` of IFILE block `ino / 8`.
//! An all-zero slot is free. Inode numbers are never reused (they come from a
//! counter in the super root), so a stale handle can never reach a new file.

use crate::layout::BLOCK_BYTES;

pub use crate::layout::INODE_BYTES;
pub const INODES_PER_BLOCK: u64 = (BLOCK_BYTES / INODE_BYTES) as u64;

pub fn block_of(ino: u64) -> u64 {
    ino / INODES_PER_BLOCK
}
pub fn slot_range(ino: u64) -> std::ops::Range<usize> {
    let s = (ino % INODES_PER_BLOCK) as usize * INODE_BYTES;
    s..s + INODE_BYTES
}
