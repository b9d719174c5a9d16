//! What the object device's tests share: a small geometry, the caller of
//! file system calls, data to write, fsynced files and their check.
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

/// Six files named PREFIX0 .. PREFIX5 in the root, of 5,000 to 20,000
/// bytes, each written and fsynced; their names and contents.
pub fn six_fsynced_files(fs: &mut lsfs_core::fs::Lsfs, prefix: &str) -> Vec<(String, Vec<u8>)> {
    use lsfs_vfs::{Vfs, ROOT_INO};
    let mut files = Vec::new();
    for n in 0..6u8 {
        let name = format!("{prefix}{n}");
        let a = fs
            .mknod(ROOT_INO, name.as_bytes(), libc::S_IFREG | 0o644, 0, &ctx())
            .unwrap();
        let b = data(n, 5000 + 3000 * n as usize);
        fs.write(a.ino, 0, &b).unwrap();
        fs.fsync(a.ino, false).unwrap();
        files.push((name, b));
    }
    files
}

/// Mount `dev`, read back every one of `files`, unmount; then fsck the
/// store at `t` read-only, which must be clean.
pub fn files_read_back_and_fsck_is_clean(
    dev: lsfs_object::ObjectDevice,
    t: &lsfs_object::Target,
    files: &[(String, Vec<u8>)],
) {
    use lsfs_core::fs::{Lsfs, MountConfig};
    use lsfs_vfs::{Vfs, ROOT_INO};
    let mut fs = Lsfs::open(Box::new(dev), MountConfig::default()).unwrap();
    for (name, b) in files {
        let e = fs.lookup(ROOT_INO, name.as_bytes()).unwrap();
        assert_eq!(&fs.read(e.ino, 0, b.len() as u32).unwrap(), b, "{name}");
    }
    fs.unmount().unwrap();
    drop(fs);
    let ro = lsfs_object::ObjectDevice::open(t, false, 8 << 20).unwrap();
    let report = lsfs_core::fsck::fsck(Box::new(ro)).unwrap();
    assert!(report.errors.is_empty(), "fsck: {:?}", report.errors);
}

/// A new file system named `label` on a fresh layout of [`geo`] in store
/// `t` (in segments of [`SEG_BLOCKS`]), mounted read-write with `cfg`.
pub fn mkfs_writer(
    t: &lsfs_object::Target,
    label: &str,
    cfg: lsfs_core::fs::MountConfig,
) -> lsfs_core::fs::Lsfs {
    lsfs_object::ObjectDevice::create(t, geo(), false).unwrap();
    mkfs_on_layout(t, label, cfg)
}

/// [`mkfs_writer`] on a layout already in the store (`ObjectDevice::create`
/// with `force`: a file system made again), with the default settings.
pub fn mkfs_writer_over(t: &lsfs_object::Target, label: &str) -> lsfs_core::fs::Lsfs {
    mkfs_on_layout(t, label, lsfs_core::fs::MountConfig::default())
}

fn mkfs_on_layout(
    t: &lsfs_object::Target,
    label: &str,
    cfg: lsfs_core::fs::MountConfig,
) -> lsfs_core::fs::Lsfs {
    let opts = lsfs_core::meta::open::MkfsOptions {
        segment_blocks: SEG_BLOCKS as u32,
        label: label.into(),
    };
    let dev = lsfs_object::ObjectDevice::open(t, true, 8 << 20).unwrap();
    lsfs_core::fs::Lsfs::mkfs(Box::new(dev), &opts, cfg).unwrap()
}

/// A regular file `name` (mode 0644) in the root; its inode number.
pub fn new_file(fs: &mut lsfs_core::fs::Lsfs, name: &[u8]) -> u64 {
    use lsfs_vfs::{Vfs, ROOT_INO};
    fs.mknod(ROOT_INO, name, libc::S_IFREG | 0o644, 0, &ctx())
        .unwrap()
        .ino
}
