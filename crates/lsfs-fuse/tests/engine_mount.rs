//! The POSIX cases of `common/cases.rs`, through a real mount of the lsfs
//! engine on an in-memory device.

mod common;

use lsfs_core::device::MemDevice;
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_core::meta::open::MkfsOptions;

/// 256 MiB with 1 MiB segments: room for every case, small enough to be quick.
fn engine() -> Lsfs {
    let opts = MkfsOptions {
        segment_blocks: 256,
        label: "fuse-test".into(),
    };
    Lsfs::mkfs(
        Box::new(MemDevice::new(256 << 20)),
        &opts,
        MountConfig::default(),
    )
    .expect("mkfs")
}

posix_suite!(engine);
