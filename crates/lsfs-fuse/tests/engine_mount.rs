//! The POSIX cases of `common/cases.rs`, through a real mount of the lsfs
//! engine on an in-memory device.

mod common;

use common::engine;

posix_suite!(engine);

/// lseek's SEEK_DATA and SEEK_HOLE reach the engine through FUSE: a file
/// with data at 0 and at 1 MiB has a hole between them (`MemFs` would say
/// it is all data, which POSIX allows; the engine knows its holes). Without
/// the writeback cache only: with it the kernel answers itself
/// (engine_mount_writeback.rs).
#[test]
fn seek_data_and_hole_through_the_mount() {
    if !common::fuse_available() {
        return;
    }
    let mount = common::TestMount::with_options(
        engine(),
        &lsfs_fuse::MountOptions {
            writeback_cache: false,
            ..lsfs_fuse::MountOptions::default()
        },
    );
    let path = mount.root().join("sparse");
    let f = std::fs::File::create(&path).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(&[1; 4096], 0).unwrap();
    f.write_all_at(&[2; 4096], 1 << 20).unwrap();
    let size = (1 << 20) + 4096;
    let seek = |off: i64, whence: i32| common::seek(&f, off, whence);
    assert_eq!(seek(0, libc::SEEK_HOLE), Ok(4096));
    assert_eq!(seek(4096, libc::SEEK_DATA), Ok(1 << 20));
    assert_eq!(seek(1 << 20, libc::SEEK_HOLE), Ok(size));
    assert_eq!(seek(size, libc::SEEK_DATA), Err(libc::ENXIO));
    drop(f);
    mount.unmount();
}

/// A punched range is a hole to SEEK_HOLE and SEEK_DATA through the mount,
/// `du` (st_blocks) drops by the blocks freed, and after an unmount the
/// image is clean (fsck's recount of live blocks per segment agrees) and
/// still reads the same.
#[test]
fn punched_range_is_a_hole_through_the_mount() {
    use std::os::unix::fs::{FileExt, MetadataExt};
    use std::os::unix::io::AsRawFd;
    if !common::fuse_available() {
        return;
    }
    let mount = common::TestMount::with_options(
        engine(),
        &lsfs_fuse::MountOptions {
            writeback_cache: false,
            ..lsfs_fuse::MountOptions::default()
        },
    );
    let path = mount.root().join("f");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap();
    let mib = 1 << 20;
    let mut want: Vec<u8> = (0..mib).map(|i| (i % 251) as u8 + 1).collect();
    f.write_all_at(&want, 0).unwrap();
    let seek = |off: i64, whence: i32| common::seek(&f, off, whence);
    assert_eq!(seek(0, libc::SEEK_HOLE), Ok(mib as i64), "no hole yet");
    let before = f.metadata().unwrap().blocks();
    let (off, len) = (256 << 10, 512 << 10);
    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    // SAFETY: valid fd; fallocate reads only its integer arguments.
    let r = unsafe { libc::fallocate(f.as_raw_fd(), mode, off, len) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    want[off as usize..(off + len) as usize].fill(0);
    assert_eq!(seek(0, libc::SEEK_HOLE), Ok(off));
    assert_eq!(seek(off, libc::SEEK_DATA), Ok(off + len));
    assert_eq!(seek(off + 100, libc::SEEK_HOLE), Ok(off + 100));
    assert_eq!(seek(off + len, libc::SEEK_HOLE), Ok(mib as i64));
    let after = f.metadata().unwrap().blocks();
    assert_eq!(
        before - after,
        (len / 512) as u64,
        "st_blocks {before} -> {after}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), want);
    drop(f);
    let vfs = mount.vfs.clone();
    mount.unmount();
    let img = vfs.lock().unwrap().store.dev_bytes_for_test();
    let report = lsfs_core::fsck::fsck(Box::new(lsfs_core::device::MemDevice::from_bytes(
        img.clone(),
    )))
    .unwrap();
    assert!(report.errors.is_empty(), "fsck: {:?}", report.errors);
    let mut fs = lsfs_core::fs::Lsfs::open(
        Box::new(lsfs_core::device::MemDevice::from_bytes(img)),
        lsfs_core::fs::MountConfig::default(),
    )
    .unwrap();
    use lsfs_vfs::Vfs;
    let a = fs.lookup(lsfs_vfs::ROOT_INO, b"f").unwrap();
    assert_eq!(
        fs.read(a.ino, 0, mib as u32).unwrap(),
        want,
        "after a remount"
    );
    assert_eq!(
        fs.seek_data_or_hole(a.ino, 0, false).unwrap(),
        Some(off as u64)
    );
}

/// Threaded logging through a real mount: a nearly full 32 MiB image takes
/// random overwrites of 16 KiB files by write(2) and fsync(2); victims are
/// plugged rather than cleaned, the data written into their holes reads
/// back through the kernel, and the image is clean after the unmount.
#[test]
fn overwrites_into_holes_through_the_mount() {
    use lsfs_core::device::MemDevice;
    use lsfs_core::fs::{Lsfs, MountConfig};
    use lsfs_core::meta::open::MkfsOptions;
    use std::os::unix::fs::FileExt;
    if !common::fuse_available() {
        return;
    }
    let mut cfg = MountConfig::default();
    cfg.store.cache_blocks = 1024;
    cfg.store.protection_secs = 0;
    cfg.store.streams_min_segments = 0;
    cfg.cleaner.threaded_logging = lsfs_core::gc::ThreadedLogging::Always;
    let opts = MkfsOptions {
        segment_blocks: 256,
        label: "plug".into(),
    };
    let fs = Lsfs::mkfs(Box::new(MemDevice::new(32 << 20)), &opts, cfg).expect("mkfs");
    let nfiles = (fs.store.free_blocks() * 4096 * 80 / 100 / 16384) as usize;
    let mount = common::TestMount::new(fs);
    let data = |seed: usize| -> Vec<u8> {
        (0..16384)
            .map(|i| (i * 31 + seed * 7 + i / 4096) as u8)
            .collect()
    };
    let path = |i: usize| mount.root().join(format!("f{i}"));
    for i in 0..nfiles {
        std::fs::write(path(i), data(i)).unwrap();
    }
    let mut latest: Vec<usize> = (0..nfiles).collect();
    let mut x = 0x2545f4914f6cdd1du64;
    for w in 0..nfiles * 2 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let i = (x % nfiles as u64) as usize;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(path(i))
            .unwrap();
        f.write_all_at(&data(nfiles + w), 0)
            .unwrap_or_else(|e| panic!("overwrite {w}: {e}"));
        if w % 16 == 0 {
            f.sync_all().unwrap();
        }
        latest[i] = nfiles + w;
    }
    for (i, &seed) in latest.iter().enumerate() {
        assert!(std::fs::read(path(i)).unwrap() == data(seed), "file {i}");
    }
    let plugged = mount
        .vfs
        .lock()
        .unwrap()
        .store
        .plugs()
        .stats()
        .blocks_plugged;
    assert!(plugged > 0, "nothing was written into a hole");
    let vfs = mount.vfs.clone();
    mount.unmount();
    let bytes = vfs.lock().unwrap().store.dev_bytes_for_test();
    let report = lsfs_core::fsck::fsck(Box::new(MemDevice::from_bytes(bytes))).unwrap();
    assert!(
        report.is_clean(),
        "fsck after plugging through FUSE: {report:?}"
    );
}
