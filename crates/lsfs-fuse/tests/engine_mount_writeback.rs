//! The POSIX cases of `common/cases.rs` through a real mount of the lsfs
//! engine with the kernel's writeback cache (the default): written pages
//! reach the engine later and in batches, the kernel keeps size and times
//! until it sends them, and reads may come on write-only handles. Also what
//! must hold although the engine learns of writes late: SEEK_HOLE never
//! reports a hole over written data, and an unmount delivers everything.

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

/// SEEK_DATA and SEEK_HOLE on a file whose data is still in the kernel's
/// page cache: the engine has not seen it, so it must not be asked (it
/// would call the written range a hole, or the offset past the end, and
/// cp or tar would skip the data). The kernel answers from its own size:
/// all data, which POSIX allows.
#[test]
fn seek_hole_does_not_hide_unwritten_back_data() {
    use std::os::unix::fs::FileExt;
    if !common::fuse_available() {
        return;
    }
    let mount = common::TestMount::new(engine());
    let f = std::fs::File::create(mount.root().join("sparse")).unwrap();
    f.write_all_at(&[1; 4096], 0).unwrap();
    f.write_all_at(&[2; 4096], 1 << 20).unwrap();
    let size = (1 << 20) + 4096;
    let seek = |off: i64, whence: i32| common::seek(&f, off, whence);
    assert_eq!(
        seek(0, libc::SEEK_HOLE),
        Ok(size),
        "a hole over cached data"
    );
    assert_eq!(seek(1 << 20, libc::SEEK_DATA), Ok(1 << 20));
    assert_eq!(seek(4096, libc::SEEK_DATA), Ok(4096));
    assert_eq!(seek(size, libc::SEEK_DATA), Err(libc::ENXIO));
    drop(f);
    mount.unmount();
}

/// A read-only mount has nothing to write back, so it does not take the
/// writeback cache even when asked, and SEEK_HOLE finds the engine's holes.
#[test]
fn a_read_only_mount_still_finds_holes() {
    use lsfs_vfs::{Ctx, Vfs, ROOT_INO};
    if !common::fuse_available() {
        return;
    }
    let mut fs = engine();
    let a = fs
        .mknod(
            ROOT_INO,
            b"sparse",
            libc::S_IFREG | 0o644,
            0,
            &Ctx::default(),
        )
        .unwrap();
    fs.write(a.ino, 0, &[1; 4096]).unwrap();
    fs.write(a.ino, 1 << 20, &[2; 4096]).unwrap();
    fs.forget(a.ino, 1);
    let mount = common::TestMount::with_options(
        fs,
        &lsfs_fuse::MountOptions {
            read_only: true,
            writeback_cache: true,
            ..lsfs_fuse::MountOptions::default()
        },
    );
    let f = std::fs::File::open(mount.root().join("sparse")).unwrap();
    assert_eq!(common::seek(&f, 0, libc::SEEK_HOLE), Ok(4096));
    drop(f);
    mount.unmount();
}

/// Data written and never fsynced is on the image once the mount is gone:
/// the kernel writes its dirty pages (and the times it kept) back at the
/// last close and at unmount, and the unmount ends with a checkpoint. Read
/// back by mounting the image bytes afresh, as after a restart.
#[test]
fn unmount_writes_back_everything() {
    use lsfs_core::device::MemDevice;
    use lsfs_core::fs::{Lsfs, MountConfig};
    use lsfs_vfs::{Vfs, ROOT_INO};
    use std::io::Write;
    if !common::fuse_available() {
        return;
    }
    let mount = common::TestMount::new(engine());
    let data = |i: usize| -> Vec<u8> { (0..10_000 + i * 977).map(|b| (b * 7 + i) as u8).collect() };
    for i in 0..50 {
        let mut f = std::fs::File::create(mount.root().join(format!("f{i}"))).unwrap();
        f.write_all(&data(i)).unwrap();
    }
    let vfs = mount.vfs.clone();
    mount.unmount();
    let bytes = vfs.lock().unwrap().store.dev_bytes_for_test();
    let report = lsfs_core::fsck::fsck(Box::new(MemDevice::from_bytes(bytes.clone()))).unwrap();
    assert!(report.is_clean(), "fsck after unmount: {report:?}");
    let mut fs = Lsfs::open(
        Box::new(MemDevice::from_bytes(bytes)),
        MountConfig::default(),
    )
    .unwrap();
    for i in 0..50 {
        let a = fs.lookup(ROOT_INO, format!("f{i}").as_bytes()).unwrap();
        assert_eq!(a.size, data(i).len() as u64, "f{i}");
        assert!(
            fs.read(a.ino, 0, 1 << 20).unwrap() == data(i),
            "f{i} lost data at unmount"
        );
    }
}
