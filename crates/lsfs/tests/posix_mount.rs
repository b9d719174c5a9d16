//! The POSIX cases the FUSE adapter is tested with (crates/lsfs-fuse/tests),
//! run against the real engine through a real mount.

#[path = "../../lsfs-fuse/tests/common/mod.rs"]
#[macro_use]
mod common;

use lsfs_core::device::MemDevice;
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_core::meta::open::MkfsOptions;

fn lsfs() -> Lsfs {
    let mut cfg = MountConfig::default();
    // A small cache, so that tests run through eviction and many checkpoints.
    cfg.store.cache_blocks = 2048;
    let opts = MkfsOptions {
        segment_blocks: 512,
        label: "posix".into(),
    };
    Lsfs::mkfs(Box::new(MemDevice::new(512 << 20)), &opts, cfg).expect("mkfs")
}

posix_suite!(lsfs);
