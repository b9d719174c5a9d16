//! The POSIX cases of `common/cases.rs` through a real mount of the lsfs
//! engine with the kernel's writeback cache (`-o writeback_cache`): written
//! pages reach the engine later and in batches, the kernel keeps size and
//! times until it sends them, and reads may come on write-only handles.

mod common;

use common::engine;
use lsfs_core::fs::Lsfs;

posix_suite!(engine, writeback_cache);

/// The option takes effect: a write() returns before its data reaches the
/// engine (the kernel keeps the page), the kernel reports the new size
/// meanwhile, and fsync delivers the data. Without the writeback cache the
/// engine has the data as soon as write() returns, and this fails.
#[test]
fn writes_reach_the_engine_at_fsync() {
    use lsfs_vfs::Vfs;
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;
    if !common::fuse_available() {
        return;
    }
    let mount = common::TestMount::with_options(
        engine(),
        &lsfs_fuse::MountOptions {
            writeback_cache: true,
            ..lsfs_fuse::MountOptions::default()
        },
    );
    let path = mount.root().join("f");
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(&[7u8; 4096]).unwrap();
    let ino = std::fs::metadata(&path).unwrap().ino();
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        4096,
        "the kernel's size"
    );
    let engine_size =
        |m: &common::TestMount<Lsfs>| m.vfs.lock().unwrap().getattr(ino).unwrap().size;
    assert_eq!(
        engine_size(&mount),
        0,
        "the write reached the engine before fsync: no writeback cache"
    );
    f.sync_all().unwrap();
    assert_eq!(engine_size(&mount), 4096, "fsync did not deliver the write");
    drop(f);
    assert_eq!(std::fs::read(&path).unwrap(), vec![7u8; 4096]);
    mount.unmount();
}
