//! A device error under a mount whose device writes run outside the
//! requests (the engine's deferred I/O, as `lsfs mount` sets it, with the
//! kernel's writeback cache, where a background thread finishes them): the
//! error is not lost. The next fsync fails with EIO, the file system is
//! read-only from then on, and later changes fail too.

mod common;

use std::io::Write;

use common::{fuse_available, TestMount};
use lsfs_core::device::{FaultDevice, MemDevice};
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_core::meta::open::MkfsOptions;
use lsfs_vfs::Vfs;

#[test]
fn a_failed_background_write_fails_the_next_fsync_and_the_mount_turns_read_only() {
    if !fuse_available() {
        return;
    }
    let (dev, plan) = FaultDevice::new(Box::new(MemDevice::new(256 << 20)));
    let opts = MkfsOptions {
        segment_blocks: 256,
        label: "device-errors".into(),
    };
    let mut fs = Lsfs::mkfs(Box::new(dev), &opts, MountConfig::default()).unwrap();
    fs.defer_io(true).unwrap();
    let mount = TestMount::with_options(
        fs,
        &lsfs_fuse::MountOptions {
            writeback_cache: true,
            ..lsfs_fuse::MountOptions::default()
        },
    );
    let path = mount.root().join("f");
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(&vec![1u8; 1 << 20]).unwrap();
    f.sync_all().unwrap();

    // From now on the device refuses every write. Several segments' worth
    // of data, written back at fsync: the segments filled on the way are
    // written by the background writer, and fail there.
    plan.fail_writes_from(plan.writes_seen());
    f.write_all(&vec![2u8; 8 << 20]).unwrap();
    let e = f.sync_all().expect_err("fsync after a failed device write");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");

    // Read-only from then on: a new file cannot be made.
    let e = std::fs::write(mount.root().join("g"), b"x").expect_err("a change after EIO");
    assert!(
        matches!(e.raw_os_error(), Some(libc::EIO) | Some(libc::EROFS)),
        "{e}"
    );
    drop(f);
    assert!(
        mount.vfs.lock().unwrap().read_only(),
        "the engine is not read-only"
    );
    mount.unmount();
}
