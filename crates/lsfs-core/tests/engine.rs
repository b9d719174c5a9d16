//! End-to-end tests of the engine through its Vfs interface on in-memory devices.

use lsfs_core::device::{CrashDevice, MemDevice};
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_core::meta::open::MkfsOptions;
use lsfs_vfs::{Ctx, Vfs, ROOT_INO};

const MIB: u64 = 1 << 20;

fn small_opts() -> MkfsOptions {
    MkfsOptions {
        segment_blocks: 256,
        label: "test".into(),
    }
}

fn cfg() -> MountConfig {
    let mut c = MountConfig::default();
    c.store.cache_blocks = 1024;
    c
}

fn ctx() -> Ctx {
    Ctx {
        uid: 0,
        gid: 0,
        pid: 1,
        umask: 0,
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u64).wrapping_mul(2654435761).wrapping_add(seed) >> 7) as u8)
        .collect()
}

#[test]
fn files_survive_checkpoint_and_reopen() {
    let dev = MemDevice::new(64 * MIB);
    let mut fs = Lsfs::mkfs(Box::new(dev), &small_opts(), cfg()).unwrap();
    let a = fs
        .mknod(ROOT_INO, b"a", libc::S_IFREG | 0o644, 0, &ctx())
        .unwrap();
    let big = pattern(1, 3 * 1024 * 1024 + 123);
    fs.write(a.ino, 0, &big).unwrap();
    let small = fs
        .mknod(ROOT_INO, b"small", libc::S_IFREG | 0o600, 0, &ctx())
        .unwrap();
    fs.write(small.ino, 0, b"tiny").unwrap();
    let d = fs.mkdir(ROOT_INO, b"dir", 0o755, &ctx()).unwrap();
    for i in 0..200 {
        fs.mknod(
            d.ino,
            format!("f{i}").as_bytes(),
            libc::S_IFREG | 0o644,
            0,
            &ctx(),
        )
        .unwrap();
    }
    fs.unmount().unwrap();
    let bytes = fs.store.dev_bytes_for_test();
    drop(fs);
    let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(bytes)), cfg()).unwrap();
    let a2 = fs.lookup(ROOT_INO, b"a").unwrap();
    assert_eq!(a2.size, big.len() as u64);
    assert_eq!(fs.read(a2.ino, 0, big.len() as u32).unwrap(), big);
    let s2 = fs.lookup(ROOT_INO, b"small").unwrap();
    assert_eq!(fs.read(s2.ino, 0, 100).unwrap(), b"tiny");
    let d2 = fs.lookup(ROOT_INO, b"dir").unwrap();
    let names = fs.readdir(d2.ino, 0, 1000).unwrap();
    assert_eq!(names.len(), 202, "200 entries plus . and ..");
}

#[test]
fn fsync_survives_a_crash_with_one_flush() {
    let dev = MemDevice::new(64 * MIB);
    let mut fs = Lsfs::mkfs(Box::new(dev), &small_opts(), cfg()).unwrap();
    let f = fs
        .mknod(ROOT_INO, b"f", libc::S_IFREG | 0o644, 0, &ctx())
        .unwrap();
    fs.fsync(f.ino, false).unwrap(); // the name becomes durable
    let base = fs.store.dev_bytes_for_test();
    drop(fs);
    let (cdev, log) = CrashDevice::new(MemDevice::from_bytes(base));
    let mut fs = Lsfs::open(Box::new(cdev), cfg()).unwrap();
    let f = fs.lookup(ROOT_INO, b"f").unwrap();
    let data = pattern(9, 40_000);
    fs.write(f.ino, 0, &data).unwrap();
    let flushes = log.flush_count();
    fs.fsync(f.ino, false).unwrap();
    assert_eq!(
        log.flush_count() - flushes,
        1,
        "fsync used more than one flush"
    );
    let n = log.len();
    fs.write(f.ino, 0, b"not synced").unwrap();
    drop(fs);
    for seed in 0..4 {
        let img = log.crash_image(n, seed);
        let mut fs = Lsfs::open(Box::new(img), cfg()).unwrap();
        let f = fs.lookup(ROOT_INO, b"f").unwrap();
        assert_eq!(f.size, data.len() as u64);
        assert_eq!(fs.read(f.ino, 0, 50_000).unwrap(), data, "seed {seed}");
    }
}

/// SEEK_DATA and SEEK_HOLE against the blocks actually written, on random
/// sparse files (enough extents for a B-tree map, some continuing each
/// other), before and after a checkpoint and a remount, and after a
/// truncate; inline files are all data; past the end is ENXIO (`None`).
#[test]
fn seek_data_and_hole_find_the_written_blocks() {
    use rand::{Rng, SeedableRng};
    const B: u64 = 4096;
    let dev = MemDevice::new(64 * MIB);
    let mut fs = Lsfs::mkfs(Box::new(dev), &small_opts(), cfg()).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let f = fs
        .mknod(ROOT_INO, b"sparse", libc::S_IFREG | 0o644, 0, &ctx())
        .unwrap()
        .ino;
    let nblocks = 2048u64;
    let mut written = vec![false; nblocks as usize];
    for _ in 0..120 {
        let start = rng.gen_range(0..nblocks - 8);
        let len = rng.gen_range(1..8);
        fs.write(f, start * B, &pattern(start, (len * B) as usize))
            .unwrap();
        for b in start..start + len {
            written[b as usize] = true;
        }
    }
    // The last block is written, so the size is a whole number of blocks
    // but for 100 bytes.
    fs.write(f, (nblocks - 1) * B, &[1; 100]).unwrap();
    written[nblocks as usize - 1] = true;
    let size = (nblocks - 1) * B + 100;
    let expect = |written: &[bool], size: u64, off: u64, data: bool| -> Option<u64> {
        if off >= size {
            return None;
        }
        let first = (off / B..written.len() as u64)
            .find(|&b| written[b as usize] == data)
            .map(|b| (b * B).max(off));
        match (data, first) {
            (true, Some(at)) => (at < size).then_some(at),
            (true, None) => None,
            (false, Some(at)) => Some(at.min(size)),
            (false, None) => Some(size),
        }
    };
    let check = |fs: &mut Lsfs, written: &[bool], size: u64, what: &str| {
        for off in (0..size + 2 * B).step_by(1531).chain([0, size - 1, size]) {
            for data in [true, false] {
                assert_eq!(
                    fs.seek_data_or_hole(f, off, data).unwrap(),
                    expect(written, size, off, data),
                    "{what}: {} from {off}",
                    if data { "SEEK_DATA" } else { "SEEK_HOLE" }
                );
            }
        }
    };
    assert!(
        written.iter().filter(|&&w| !w).count() > 100,
        "the file has holes"
    );
    check(&mut fs, &written, size, "before a checkpoint");
    fs.checkpoint().unwrap();
    fs.unmount().unwrap();
    let img = fs.store.dev_bytes_for_test();
    let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(img)), cfg()).unwrap();
    check(&mut fs, &written, size, "after a remount");
    let cut = 700 * B + 10;
    fs.setattr(
        f,
        &lsfs_vfs::SetAttr {
            size: Some(cut),
            ..Default::default()
        },
    )
    .unwrap();
    check(&mut fs, &written[..701], cut, "after a truncate");
    // A small file is inline data: all data.
    let g = fs
        .mknod(ROOT_INO, b"small", libc::S_IFREG | 0o644, 0, &ctx())
        .unwrap()
        .ino;
    fs.write(g, 0, b"hello").unwrap();
    assert_eq!(fs.seek_data_or_hole(g, 0, true).unwrap(), Some(0));
    assert_eq!(fs.seek_data_or_hole(g, 1, false).unwrap(), Some(5));
    assert_eq!(fs.seek_data_or_hole(g, 5, true).unwrap(), None);
}

/// `Lsfs::write_amplification` (what `lsfs stats` prints first): every byte
/// the device was asked to write since mount, over the bytes applications
/// asked to store (data, fallocated bytes, names, symlink targets, xattrs).
#[test]
fn write_amplification_counts_device_and_application_bytes() {
    let dev = MemDevice::new(64 * MIB);
    let mut fs = Lsfs::mkfs(Box::new(dev), &small_opts(), cfg()).unwrap();
    let wa = fs.write_amplification();
    assert_eq!((wa.device_bytes, wa.app_bytes, wa.ratio), (0, 0, None));
    let c = ctx();
    let a = fs
        .mknod(ROOT_INO, b"file", libc::S_IFREG | 0o644, 0, &c)
        .unwrap();
    fs.write(a.ino, 0, &pattern(1, 1 << 20)).unwrap();
    fs.fallocate(a.ino, 1 << 20, 8192, 0).unwrap();
    fs.setxattr(a.ino, b"user.k", b"value", 0).unwrap();
    fs.symlink(ROOT_INO, b"ln", b"file", &c).unwrap();
    let app = (1u64 << 20) + 8192 + 4 + 11 + 2 + 4;
    let before = fs.write_amplification();
    assert_eq!(before.app_bytes, app);
    fs.sync().unwrap();
    let wa = fs.write_amplification();
    assert_eq!(wa.app_bytes, app, "sync stores nothing for applications");
    // The checkpoint wrote the data, its metadata, record headers and a
    // superblock: more than the data, all of it counted.
    assert!(wa.device_bytes > 1 << 20, "{wa:?}");
    assert!(wa.device_bytes > before.device_bytes);
    let r = wa.ratio.unwrap();
    assert!((1.0..2.0).contains(&r), "{wa:?}");
    assert_eq!(r, wa.device_bytes as f64 / app as f64);
    // Unlinking stores nothing: the device side grows, the application side not.
    fs.unlink(ROOT_INO, b"ln").unwrap();
    fs.sync().unwrap();
    let after = fs.write_amplification();
    assert_eq!(after.app_bytes, app);
    assert!(after.device_bytes > wa.device_bytes);
}

/// `ls -l` asks every entry for its ACL and security label: the control
/// directory, the snapshot directory and a snapshot's files answer ENODATA
/// (no such attribute), never ENOENT, and list no xattrs.
#[test]
fn snapshot_directories_have_no_xattrs() {
    let dev = MemDevice::new(64 * MIB);
    let mut fs = Lsfs::mkfs(Box::new(dev), &small_opts(), cfg()).unwrap();
    let f = fs
        .mknod(ROOT_INO, b"f", libc::S_IFREG | 0o644, 0, &ctx())
        .unwrap();
    fs.setxattr(f.ino, b"user.k", b"v", 0).unwrap();
    fs.checkpoint().unwrap();
    let snap = fs.snapshot_create().unwrap();
    let ctl = fs.lookup(ROOT_INO, b".lsfs").unwrap();
    let sd = fs.lookup(ctl.ino, b"snapshot").unwrap();
    let root = fs.lookup(sd.ino, snap.to_string().as_bytes()).unwrap();
    for (what, ino) in [
        (".lsfs", ctl.ino),
        (".lsfs/snapshot", sd.ino),
        ("the snapshot's root", root.ino),
    ] {
        assert_eq!(
            fs.getxattr(ino, b"system.posix_acl_access").unwrap_err(),
            lsfs_vfs::Errno::NODATA,
            "getxattr on {what}"
        );
        assert!(fs.listxattr(ino).unwrap().is_empty(), "listxattr on {what}");
    }
    let sf = fs.lookup(root.ino, b"f").unwrap();
    assert_eq!(fs.getxattr(sf.ino, b"user.k").unwrap(), b"v");
    assert_eq!(
        fs.getxattr(sf.ino, b"user.none").unwrap_err(),
        lsfs_vfs::Errno::NODATA
    );
}
