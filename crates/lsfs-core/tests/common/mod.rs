//! Helpers shared by the integration tests: small images, a caller context,
//! deterministic data, and an fsck that must come back clean.
#![allow(dead_code)]

use lsfs_core::device::{BlockDevice, MemDevice};
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_core::fsck::{fsck, FsckReport};
use lsfs_core::meta::open::MkfsOptions;
use lsfs_vfs::{Ctx, Vfs, ROOT_INO};

pub const MIB: u64 = 1 << 20;

/// 256-block (1 MiB) segments: many segments on a small device, so the log
/// wraps and segments are reclaimed within a short test.
pub fn opts() -> MkfsOptions {
    MkfsOptions {
        segment_blocks: 256,
        label: "test".into(),
    }
}

/// A small cache, so that clean blocks are evicted and re-read from the device.
pub fn cfg() -> MountConfig {
    let mut c = MountConfig::default();
    c.store.cache_blocks = 256;
    c
}

/// Plain checkpoints expire at once, so reclaim really frees segments.
pub fn cfg_no_protection() -> MountConfig {
    let mut c = cfg();
    c.store.protection_secs = 0;
    c
}

pub fn ctx() -> Ctx {
    Ctx {
        uid: 0,
        gid: 0,
        pid: 1,
        umask: 0,
    }
}

pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            ((i as u64)
                .wrapping_mul(2654435761)
                .wrapping_add(seed.wrapping_mul(977))
                >> 7) as u8
        })
        .collect()
}

pub fn mkfs(size: u64, config: MountConfig) -> Lsfs {
    Lsfs::mkfs(Box::new(MemDevice::new(size)), &opts(), config).expect("mkfs")
}

/// The device bytes of a mounted file system, as they are now.
pub fn image(fs: &mut Lsfs) -> Vec<u8> {
    fs.store.dev_bytes_for_test()
}

/// The image of an unmounted file system whose metadata file rooted at
/// virtual block `root` (a one-leaf tree on a small image) has its leaf
/// items changed by `patch`, with the record holding the leaf resealed so
/// that only the damage itself is wrong (how the fuzz targets' patches look).
pub fn patch_root_leaf(
    fs: &mut Lsfs,
    root: u64,
    patch: impl FnOnce(&mut Vec<(u64, lsfs_core::btree::Value)>),
) -> Vec<u8> {
    use lsfs_core::btree::Node;
    use lsfs_core::layout::BLOCK_BYTES;
    use lsfs_core::log::chain::segment_records;

    let pblock = fs.store.dat_get(root).unwrap().pblock;
    let (geo, fs_id) = (fs.store.geo(), fs.store.superblock().fs_id);
    let mut img = image(fs);
    let seg = geo.segment_of(pblock).unwrap();
    let rec = segment_records(&mut MemDevice::from_bytes(img.clone()), &geo, fs_id, seg)
        .unwrap()
        .into_iter()
        .find(|r| r.block <= pblock && pblock < r.end_block())
        .expect("the record holding the root");
    let at = pblock as usize * BLOCK_BYTES;
    let Ok(Node::Leaf { mut items }) = Node::decode(&img[at..at + BLOCK_BYTES], BLOCK_BYTES) else {
        panic!("a small image's metadata root is a leaf");
    };
    patch(&mut items);
    img[at..at + BLOCK_BYTES].copy_from_slice(&Node::Leaf { items }.encode(BLOCK_BYTES));
    let r = &mut img[rec.block as usize * BLOCK_BYTES..rec.end_block() as usize * BLOCK_BYTES];
    lsfs_core::log::record::RecordHeader::reseal(r).unwrap();
    img
}

/// Like [`patch_root_leaf`], but `patch` changes data block `idx` of the
/// metadata file rooted at `root` (a one-leaf tree): the block's bytes, with
/// the record holding it resealed.
pub fn patch_meta_block(
    fs: &mut Lsfs,
    root: u64,
    idx: u64,
    patch: impl FnOnce(&mut [u8]),
) -> Vec<u8> {
    use lsfs_core::btree::Node;
    use lsfs_core::layout::BLOCK_BYTES;
    use lsfs_core::log::chain::segment_records;

    let leaf = fs.store.dat_get(root).unwrap().pblock;
    let (geo, fs_id) = (fs.store.geo(), fs.store.superblock().fs_id);
    let mut img = image(fs);
    let at = leaf as usize * BLOCK_BYTES;
    let Ok(Node::Leaf { items }) = Node::decode(&img[at..at + BLOCK_BYTES], BLOCK_BYTES) else {
        panic!("a small image's metadata root is a leaf");
    };
    let (_, v) = items
        .iter()
        .find(|(k, _)| *k == idx)
        .expect("the block is mapped");
    let v = u64::from_le_bytes(v[..8].try_into().unwrap());
    let pblock = fs.store.dat_get(v).unwrap().pblock;
    let seg = geo.segment_of(pblock).unwrap();
    let rec = segment_records(&mut MemDevice::from_bytes(img.clone()), &geo, fs_id, seg)
        .unwrap()
        .into_iter()
        .find(|r| r.block <= pblock && pblock < r.end_block())
        .expect("the record holding the block");
    let at = pblock as usize * BLOCK_BYTES;
    patch(&mut img[at..at + BLOCK_BYTES]);
    let r = &mut img[rec.block as usize * BLOCK_BYTES..rec.end_block() as usize * BLOCK_BYTES];
    lsfs_core::log::record::RecordHeader::reseal(r).unwrap();
    img
}

pub fn fsck_bytes(bytes: Vec<u8>) -> FsckReport {
    fsck(Box::new(MemDevice::from_bytes(bytes)) as Box<dyn BlockDevice>).expect("fsck runs")
}

/// fsck of the image must find no error; the message lists what it found.
#[track_caller]
pub fn assert_clean(report: &FsckReport, what: &str) {
    assert!(
        report.errors.is_empty(),
        "fsck of {what} found {} errors:\n  {}\nwarnings: {:?}",
        report.errors.len(),
        report.errors.join("\n  "),
        report.warnings
    );
}

/// `n` files `f0`, `f1`, … in the root, file `f` holding `contents(f)`;
/// their inode numbers.
pub fn make_files(fs: &mut Lsfs, n: usize, contents: impl Fn(usize) -> Vec<u8>) -> Vec<u64> {
    use lsfs_vfs::{Vfs, ROOT_INO};
    (0..n)
        .map(|f| {
            let a = fs
                .mknod(
                    ROOT_INO,
                    format!("f{f}").as_bytes(),
                    libc::S_IFREG | 0o644,
                    0,
                    &ctx(),
                )
                .unwrap();
            fs.write(a.ino, 0, &contents(f)).unwrap();
            a.ino
        })
        .collect()
}

/// Blocks of [`scattered_file`]'s file (8 MiB).
pub const FILE_BLOCKS: u64 = 2048;

/// A file "f" of [`FILE_BLOCKS`] blocks written in order, then 1,500 of its
/// blocks rewritten at random, each rewrite between writes to another
/// file and with checkpoints now and then, so that its blocks end up
/// scattered. Returns its inode and contents.
pub fn scattered_file(fs: &mut Lsfs) -> (u64, Vec<u8>) {
    let f = fs
        .mknod(ROOT_INO, b"f", libc::S_IFREG | 0o644, 0, &ctx())
        .unwrap();
    let g = fs
        .mknod(ROOT_INO, b"g", libc::S_IFREG | 0o644, 0, &ctx())
        .unwrap();
    let mut data = pattern(1, (FILE_BLOCKS * 4096) as usize);
    fs.write(f.ino, 0, &data).unwrap();
    fs.checkpoint().unwrap();
    let mut x: u64 = 12345;
    for n in 0..1500u64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let b = (x >> 33) % FILE_BLOCKS;
        let block = pattern(1000 + n, 4096);
        let at = (b * 4096) as usize;
        data[at..at + 4096].copy_from_slice(&block);
        fs.write(f.ino, b * 4096, &block).unwrap();
        fs.write(g.ino, n * 4096, &pattern(5000 + n, 4096)).unwrap();
        if n % 100 == 99 {
            fs.checkpoint().unwrap();
        }
    }
    fs.checkpoint().unwrap();
    (f.ino, data)
}

/// The crash points just after each flush of `log`: the number of logged
/// operations that a crash there keeps.
pub fn flush_points(log: &lsfs_core::device::CrashLog) -> Vec<usize> {
    log.ops()
        .iter()
        .enumerate()
        .filter(|(_, op)| matches!(op, lsfs_core::device::LoggedOp::Flush))
        .map(|(i, _)| i + 1)
        .collect()
}

/// Run `check(point)` for every crash point, on as many threads as there
/// are CPUs: each check opens its own copy of the image, and a test of one
/// long run with hundreds of points would otherwise leave all but one CPU
/// idle. A failing check fails the test, naming its point.
#[allow(dead_code)]
pub fn check_points_in_parallel<P: Sync>(points: &[P], check: impl Fn(&P) + Sync) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|s| {
        for t in 0..threads {
            let check = &check;
            s.spawn(move || points.iter().skip(t).step_by(threads).for_each(check));
        }
    });
}
