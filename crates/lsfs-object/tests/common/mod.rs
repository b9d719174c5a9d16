//! What the object device's tests share: a small geometry, the caller of
//! file system calls, and data to write.
#![allow(dead_code)]

use lsfs_object::layout::Geometry;
use lsfs_vfs::Ctx;

pub const SEG_BLOCKS: u64 = 64;
pub const SEG_BYTES: u64 = SEG_BLOCKS * 4096;

/// 24 MiB: 95 segments of 256 KiB.
pub fn geo() -> Geometry {
    Geometry {
        device_bytes: 24 << 20,
        segment_blocks: SEG_BLOCKS,
    }
}

pub fn ctx() -> Ctx {
    Ctx {
        uid: 0,
        gid: 0,
        pid: 1,
        umask: 0,
    }
}

pub fn data(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}
