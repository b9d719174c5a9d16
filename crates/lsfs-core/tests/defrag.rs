//! Defragmentation (`fs/defrag.rs`): a file scattered by random rewrites
//! is laid out again in a few physical runs, reads back the same, and a
//! snapshot taken before still reads what it held; the segment counters
//! stay exact (fsck), and a crash at any flush of a defragmentation leaves
//! a clean image with the same contents.

mod common;
use common::*;
use lsfs_core::device::{CrashDevice, LoggedOp, MemDevice};
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_vfs::{Vfs, ROOT_INO};

/// The tests' usual settings with a cache of 64 MiB, so that the whole
/// file is one batch (a batch is at most a quarter of the cache).
fn big_cache() -> MountConfig {
    let mut c = cfg();
    c.store.cache_blocks = 16384;
    c
}

fn read_all(fs: &mut Lsfs, ino: u64) -> Vec<u8> {
    fs.read(ino, 0, (FILE_BLOCKS * 4096) as u32).unwrap()
}

#[test]
fn a_scattered_file_is_laid_out_again_and_reads_the_same() {
    let mut fs = mkfs(128 * MIB, big_cache());
    let (ino, data) = scattered_file(&mut fs);
    let snap = fs.snapshot_create().unwrap();

    let rep = fs.defrag_file(ino, false).unwrap();
    eprintln!("{rep:?}");
    assert_eq!(rep.blocks, FILE_BLOCKS);
    assert!(
        rep.runs_before > 500,
        "not scattered enough to test: {rep:?}"
    );
    assert_eq!(rep.moved, FILE_BLOCKS, "{rep:?}");
    // One batch of 4,096 blocks holds the whole file: a run per segment it
    // fills (each segment starts with its record's summary), and a few
    // more where a stream or a record ends.
    let per_segment = fs.store.geo().segment_blocks as u64;
    assert!(
        rep.runs_after <= FILE_BLOCKS / per_segment + 4,
        "still fragmented: {rep:?}, {per_segment}-block segments"
    );
    assert!(read_all(&mut fs, ino) == data, "contents changed");

    // Contiguous already: nothing moves unless forced.
    let again = fs.defrag_file(ino, false).unwrap();
    assert_eq!(again.moved, 0, "{again:?}");
    let forced = fs.defrag_file(ino, true).unwrap();
    assert_eq!(forced.moved, FILE_BLOCKS, "{forced:?}");

    // The snapshot still reads what the file held when it was taken: it
    // sees the same virtual blocks, now at their new places.
    let ctl = fs.lookup(ROOT_INO, b".lsfs").unwrap().ino;
    let dir = fs.lookup(ctl, b"snapshot").unwrap().ino;
    let root = fs.lookup(dir, snap.to_string().as_bytes()).unwrap().ino;
    let sf = fs.lookup(root, b"f").unwrap().ino;
    assert!(read_all(&mut fs, sf) == data, "the snapshot's file changed");

    fs.unmount().unwrap();
    let img = image(&mut fs);
    assert_clean(&fsck_bytes(img.clone()), "after defrag");
    let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(img)), big_cache()).unwrap();
    assert!(
        read_all(&mut fs, ino) == data,
        "contents changed after remount"
    );
}

#[test]
fn a_crash_during_defrag_leaves_a_clean_image_with_the_same_contents() {
    let base = {
        let mut fs = mkfs(96 * MIB, big_cache());
        fs.unmount().unwrap();
        image(&mut fs)
    };
    let (dev, log) = CrashDevice::new(MemDevice::from_bytes(base));
    let mut fs = Lsfs::open(Box::new(dev), big_cache()).unwrap();
    let (ino, data) = scattered_file(&mut fs);
    fs.sync().unwrap();
    let before = log.len();
    let rep = fs.defrag_file(ino, true).unwrap();
    assert_eq!(rep.moved, FILE_BLOCKS);
    drop(fs);

    let mut points = 0;
    for (at, op) in log.ops().iter().enumerate().skip(before) {
        if !matches!(op, LoggedOp::Flush) && at + 1 != log.len() {
            continue;
        }
        for seed in [0, 1] {
            let img = log.crash_image(at + 1, seed).bytes();
            let what = format!("crash at op {} seed {seed}", at + 1);
            assert_clean(&fsck_bytes(img.clone()), &what);
            let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(img)), big_cache()).unwrap();
            assert!(read_all(&mut fs, ino) == data, "{what}: contents changed");
            points += 1;
        }
    }
    eprintln!("crash images checked: {points}");
    assert!(points >= 4, "only {points} crash points");
}
