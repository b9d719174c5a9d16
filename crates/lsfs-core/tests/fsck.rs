//! fsck on images made by real workloads must be clean, and must find the
//! damage done to an image on purpose. Also the read-only inspect dumps.

mod common;
use common::*;
use lsfs_core::device::MemDevice;
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_core::inspect;
use lsfs_vfs::{SetAttr, Vfs, RENAME_EXCHANGE, ROOT_INO};

/// A workload touching every kind of tree: big and sparse files, many
/// directory entries (B-tree directories), xattrs, links, renames, deletes,
/// truncates, snapshots and plain checkpoints.
fn busy_fs(config: MountConfig) -> Lsfs {
    let mut fs = mkfs(64 * MIB, config);
    let c = ctx();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, &c).unwrap();
    let e = fs.mkdir(d.ino, b"e", 0o755, &c).unwrap();
    let big = fs
        .mknod(d.ino, b"big", libc::S_IFREG | 0o644, 0, &c)
        .unwrap();
    fs.write(big.ino, 0, &pattern(1, 2 * 1024 * 1024 + 17))
        .unwrap();
    let sparse = fs
        .mknod(e.ino, b"sparse", libc::S_IFREG | 0o644, 0, &c)
        .unwrap();
    for i in 0..40u64 {
        fs.write(sparse.ino, i * 1_000_003, &pattern(i, 5000))
            .unwrap();
    }
    fs.write(sparse.ino, 1 << 40, b"far away").unwrap();
    for i in 0..150 {
        let f = fs
            .mknod(
                e.ino,
                format!("f{i}").as_bytes(),
                libc::S_IFREG | 0o600,
                0,
                &c,
            )
            .unwrap();
        fs.write(f.ino, 0, &pattern(i, 100 + i as usize * 7))
            .unwrap();
        if i % 3 == 0 {
            fs.setxattr(f.ino, b"user.k", &pattern(i, 300), 0).unwrap();
        }
    }
    let snap = fs.snapshot_create().unwrap();
    for i in 0..150 {
        if i % 2 == 0 {
            fs.unlink(e.ino, format!("f{i}").as_bytes()).unwrap();
        }
    }
    fs.link(big.ino, ROOT_INO, b"big-link").unwrap();
    fs.symlink(ROOT_INO, b"long-link", &vec![b'x'; 1000], &c)
        .unwrap();
    fs.symlink(ROOT_INO, b"short-link", b"d/big", &c).unwrap();
    fs.rename(d.ino, b"e", ROOT_INO, b"e2", 0).unwrap();
    fs.rename(ROOT_INO, b"e2", ROOT_INO, b"d", RENAME_EXCHANGE)
        .unwrap();
    fs.setattr(
        big.ino,
        &SetAttr {
            size: Some(300_000),
            ..SetAttr::default()
        },
    )
    .unwrap();
    fs.checkpoint().unwrap();
    fs.write(big.ino, 4096 * 5, &pattern(7, 10_000)).unwrap();
    fs.checkpoint().unwrap();
    assert!(fs.store.cps().entries[&snap].is_snapshot());
    fs
}

#[test]
fn busy_image_is_clean_after_unmount() {
    let mut fs = busy_fs(cfg());
    fs.unmount().unwrap();
    let r = fsck_bytes(image(&mut fs));
    assert_clean(&r, "a busy image");
    assert!(
        r.stats.snapshots >= 1 && r.stats.checkpoints_walked >= 2,
        "{:?}",
        r.stats
    );
    assert!(r.stats.regular_files >= 75, "{:?}", r.stats);
    // `lsfs fsck --json` prints the report as JSON.
    let v: serde_json::Value = serde_json::to_value(&r).unwrap();
    assert_eq!(v["errors"].as_array().unwrap().len(), 0);
    assert_eq!(
        v["stats"]["snapshots"].as_u64(),
        Some(r.stats.snapshots as u64)
    );
}

#[test]
fn busy_image_is_clean_with_reclaim_and_open_files() {
    let mut fs = busy_fs(cfg_no_protection());
    // An unlinked file still open lives in the orphan directory.
    let c = ctx();
    let f = fs
        .mknod(ROOT_INO, b"open", libc::S_IFREG | 0o644, 0, &c)
        .unwrap();
    fs.open(f.ino, 0).unwrap();
    fs.write(f.ino, 0, &pattern(3, 50_000)).unwrap();
    fs.unlink(ROOT_INO, b"open").unwrap();
    // Overwrite a large file, so whole segments die.
    let churn = fs
        .mknod(ROOT_INO, b"churn", libc::S_IFREG | 0o644, 0, &c)
        .unwrap();
    fs.write(churn.ino, 0, &pattern(8, 3 * 1024 * 1024))
        .unwrap();
    fs.checkpoint().unwrap();
    fs.write(churn.ino, 0, &pattern(9, 3 * 1024 * 1024))
        .unwrap();
    // Let every plain checkpoint expire, so reclaim frees dead segments.
    fs.clock()
        .set_secs(lsfs_core::meta::store::wall_secs() + 100);
    fs.checkpoint().unwrap();
    fs.checkpoint().unwrap();
    let r = fsck_bytes(image(&mut fs));
    assert_clean(&r, "an image with an orphan");
    // Every unlinked file is an orphan here: the test never forgets the
    // lookup references that creating them took.
    assert!(r.stats.orphans >= 1, "{:?}", r.stats);
    assert!(fs.store.stats().segments_reclaimed > 0, "reclaim never ran");
}

#[test]
fn image_with_unreplayed_fsync_records_is_clean() {
    let mut fs = busy_fs(cfg());
    let c = ctx();
    let f = fs
        .mknod(ROOT_INO, b"synced", libc::S_IFREG | 0o644, 0, &c)
        .unwrap();
    fs.fsync(f.ino, false).unwrap(); // a record with the create
    fs.write(f.ino, 0, &pattern(5, 30_000)).unwrap();
    fs.fsync(f.ino, false).unwrap(); // a record with data
    fs.write(f.ino, 8192, &pattern(6, 100)).unwrap();
    fs.fsync(f.ino, false).unwrap();
    let bytes = image(&mut fs);
    drop(fs);
    let r = fsck_bytes(bytes.clone());
    assert_clean(&r, "an image needing roll-forward");
    assert_eq!(r.stats.replayed_records, 3);
    // And the image fsck checked is what a mount gives.
    let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(bytes)), cfg()).unwrap();
    let a = fs.lookup(ROOT_INO, b"synced").unwrap();
    let mut want = pattern(5, 30_000);
    want[8192..8292].copy_from_slice(&pattern(6, 100));
    assert_eq!(fs.read(a.ino, 0, 40_000).unwrap(), want);
    let r = fsck_bytes(image(&mut fs));
    assert_clean(&r, "the image after recovery");
}

#[test]
fn inspect_dumps_agree_with_the_image() {
    let mut fs = busy_fs(cfg());
    fs.unmount().unwrap();
    let cps_live: Vec<u64> = fs.checkpoints().iter().map(|c| c.cno).collect();
    let bytes = image(&mut fs);
    let mut dev = MemDevice::from_bytes(bytes.clone());
    let sbs = inspect::superblock(&mut dev).unwrap();
    assert_eq!(sbs.len(), 2);
    assert!(sbs.iter().all(|c| c.error.is_none()), "{sbs:?}");
    assert_eq!(sbs[0].superblock.as_ref().unwrap().label, "test");
    let cps = inspect::checkpoints(Box::new(MemDevice::from_bytes(bytes.clone()))).unwrap();
    assert_eq!(cps.iter().map(|c| c.cno).collect::<Vec<_>>(), cps_live);
    assert!(cps.iter().any(|c| c.snapshot));
    let segs = inspect::segments(Box::new(MemDevice::from_bytes(bytes.clone()))).unwrap();
    assert_eq!(segs.len() as u64, fs.store.geo().nsegments);
    assert!(segs.iter().any(|s| s.state == "active"));
    let used = segs.iter().find(|s| s.nblocks > 0).unwrap();
    let dump = inspect::dump_segment(&mut dev, used.segno).unwrap();
    // The records of a segment cover exactly the blocks its usage says were written.
    let covered: u32 = dump.records.iter().map(|r| r.nblocks).sum();
    assert_eq!(covered, used.nblocks);
    assert!(dump
        .records
        .iter()
        .all(|r| r.entries.len() as u32 + r.nsum_blocks == r.nblocks));
    let json = serde_json::to_string(&dump).unwrap();
    assert!(json.contains("\"seq\""));
    assert!(inspect::dump_segment(&mut dev, 1 << 40).is_err());
}

/// Regression: moving a directory to another parent used to drop its size by
/// one (the ".." entry was uncounted twice), after which rmdir removed a
/// directory that still held a file, leaking the file.
#[test]
fn moved_directory_is_still_not_empty() {
    let mut fs = mkfs(64 * MIB, cfg());
    let c = ctx();
    let a = fs.mkdir(ROOT_INO, b"a", 0o755, &c).unwrap();
    let b = fs.mkdir(ROOT_INO, b"b", 0o755, &c).unwrap();
    fs.mknod(a.ino, b"x", libc::S_IFREG | 0o644, 0, &c).unwrap();
    fs.rename(ROOT_INO, b"a", b.ino, b"a", 0).unwrap();
    assert_eq!(fs.getattr(a.ino).unwrap().size, 1);
    assert_eq!(fs.rmdir(b.ino, b"a"), Err(lsfs_vfs::Errno::NOTEMPTY));
    fs.rename(b.ino, b"a", ROOT_INO, b"a2", 0).unwrap();
    assert_eq!(fs.rmdir(ROOT_INO, b"a2"), Err(lsfs_vfs::Errno::NOTEMPTY));
    fs.unmount().unwrap();
    assert_clean(
        &fsck_bytes(image(&mut fs)),
        "after moving a directory twice",
    );
}

/// Found by the `image` fuzz target (a patch setting a key of the IFILE's
/// block map to 0x4600_0000_0000_00da, checksums resealed): fsck computed
/// the inode numbers of that IFILE block with an overflow and panicked.
#[test]
fn ifile_block_beyond_every_inode_number_is_reported() {
    let mut fs = mkfs(16 * MIB, cfg());
    fs.mknod(ROOT_INO, b"f", libc::S_IFREG | 0o644, 0, &ctx())
        .unwrap();
    fs.unmount().unwrap();
    let root = fs.store.roots().ifile_root;
    let img = patch_root_leaf(&mut fs, root, |items| {
        items.last_mut().unwrap().0 = 0x4600_0000_0000_00da;
    });

    let all = fsck_bytes(img).errors.join("\n");
    assert!(!all.contains("panicked"), "{all}");
    assert!(all.contains("beyond every inode number"), "{all}");
}
