//! Clones (`fs/clone.rs`): a clone shares the source's blocks, so the
//! free space barely drops; writing either file afterwards never changes
//! the other; deleting, truncating or punching one leaves the other whole;
//! snapshots, the cleaner and crashes keep both; and the segment counters
//! agree with fsck's recount, which counts a shared block once and checks
//! each block's user count against the files that map it.

mod common;
use common::*;
use lsfs_core::device::{CrashDevice, LoggedOp, MemDevice};
use lsfs_core::fs::{CheckpointChecks, Lsfs, MountConfig};
use lsfs_vfs::{Errno, Vfs, ROOT_INO};

const BLOCKS: u64 = 1024; // 4 MiB
const BYTES: u64 = BLOCKS * 4096 + 1000; // and a partial last block

/// No protection period (freed segments are freed), a cache big enough to
/// clone the whole file at once, and fsck's checks after every checkpoint.
fn clone_cfg() -> MountConfig {
    let mut c = MountConfig::default();
    c.store.protection_secs = 0;
    c.store.cache_blocks = 4096;
    c.check_checkpoints = CheckpointChecks::Every;
    c
}

fn file(fs: &mut Lsfs, name: &[u8]) -> u64 {
    fs.mknod(ROOT_INO, name, libc::S_IFREG | 0o644, 0, &ctx())
        .unwrap()
        .ino
}

/// File `a` with `BYTES` bytes of pattern, checkpointed; its inode and data.
fn source(fs: &mut Lsfs) -> (u64, Vec<u8>) {
    let a = file(fs, b"a");
    let data = pattern(7, BYTES as usize);
    fs.write(a, 0, &data).unwrap();
    fs.checkpoint().unwrap();
    (a, data)
}

fn read_all(fs: &mut Lsfs, ino: u64) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size;
    fs.read(ino, 0, size as u32).unwrap()
}

/// Write `data` at `off` of both the file and its expected contents.
fn write_both(fs: &mut Lsfs, ino: u64, want: &mut Vec<u8>, off: usize, data: &[u8]) {
    fs.write(ino, off as u64, data).unwrap();
    if want.len() < off + data.len() {
        want.resize(off + data.len(), 0);
    }
    want[off..off + data.len()].copy_from_slice(data);
}

fn fsck_clean(fs: &mut Lsfs, what: &str) -> Vec<u8> {
    fs.checkpoint().unwrap();
    let img = image(fs);
    assert_clean(&fsck_bytes(img.clone()), what);
    img
}

fn live_blocks(fs: &Lsfs) -> u64 {
    fs.store.segs().held().0
}

#[test]
fn a_clone_shares_blocks_and_writes_to_either_side_stay_apart() {
    let mut fs = mkfs(64 * MIB, clone_cfg());
    let (a, data) = source(&mut fs);
    let b = file(&mut fs, b"b");
    let (free, live) = (fs.statfs().unwrap().bfree, live_blocks(&fs));
    assert!(!fs.store.clones_enabled(), "mkfs sets no CLONES");
    assert_eq!(fs.clone_range(a, 0, b, 0, 0).unwrap(), BYTES);
    assert!(fs.store.clones_enabled());
    assert_eq!(read_all(&mut fs, b), data);
    // Metadata only: a few DAT blocks and map nodes, not 1,025 blocks.
    let used = free - fs.statfs().unwrap().bfree;
    assert!(used < 64, "the clone took {used} blocks of free space");
    assert!(live_blocks(&fs) < live + 64, "shared blocks counted twice");
    assert_eq!(fs.getattr(b).unwrap().size, BYTES);
    let r = fsck_bytes(image(&mut fs));
    assert_clean(&r, "after the clone");
    assert_eq!(
        r.stats.shared_blocks,
        BLOCKS + 1,
        "fsck's count of shared blocks"
    );

    let (mut wa, mut wb) = (data.clone(), data.clone());
    // Twice in one checkpoint: the second rewrite is in place, of the
    // block the first one made fresh, never of the shared one.
    write_both(&mut fs, a, &mut wa, 3 * 4096, &pattern(100, 4096));
    write_both(&mut fs, a, &mut wa, 3 * 4096 + 10, &pattern(101, 50));
    write_both(&mut fs, b, &mut wb, 5 * 4096 - 7, &pattern(102, 9000));
    write_both(&mut fs, b, &mut wb, BYTES as usize - 3, &pattern(103, 10));
    assert_eq!(read_all(&mut fs, a), wa, "a after writes");
    assert_eq!(read_all(&mut fs, b), wb, "b after writes");
    fs.checkpoint().unwrap();
    write_both(&mut fs, a, &mut wa, 0, &pattern(104, 8192));
    // Punch, zero and truncate the clone: the source keeps its blocks.
    fs.fallocate(b, 100 * 4096, 50 * 4096, 0x01 | 0x02).unwrap();
    wb[100 * 4096..150 * 4096].fill(0);
    fs.setattr(
        b,
        &lsfs_vfs::SetAttr {
            size: Some(600 * 4096 + 5),
            ..Default::default()
        },
    )
    .unwrap();
    wb.truncate(600 * 4096 + 5);
    assert_eq!(read_all(&mut fs, a), wa, "a after b's punch and truncate");
    assert_eq!(read_all(&mut fs, b), wb, "b after its punch and truncate");
    let img = fsck_clean(&mut fs, "after writes");
    fs.unmount().unwrap();
    let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(img)), clone_cfg()).unwrap();
    assert_eq!(read_all(&mut fs, a), wa, "a after remount");
    assert_eq!(read_all(&mut fs, b), wb, "b after remount");
}

#[test]
fn deleting_either_side_keeps_the_other_and_deleting_both_frees_the_space() {
    let mut fs = mkfs(64 * MIB, clone_cfg());
    fs.checkpoint().unwrap();
    let empty = fs.statfs().unwrap().bfree;
    let (a, data) = source(&mut fs);
    let b = file(&mut fs, b"b");
    let c = file(&mut fs, b"c");
    fs.clone_range(a, 0, b, 0, 0).unwrap();
    // A clone of a clone, into the middle of a longer file.
    fs.write(c, 0, &pattern(9, 2 * BYTES as usize)).unwrap();
    fs.clone_range(b, 4096, c, 8192, 100 * 4096).unwrap();
    let mut wc = pattern(9, 2 * BYTES as usize);
    wc[8192..8192 + 100 * 4096].copy_from_slice(&data[4096..101 * 4096]);
    for f in [a, b, c] {
        fs.forget(f, 1);
    }
    // The source goes first (a large file: deleted in the background).
    fs.unlink(ROOT_INO, b"a").unwrap();
    fs.reclaim_all().unwrap();
    assert_eq!(read_all(&mut fs, b), data, "b after a's delete");
    assert_eq!(read_all(&mut fs, c), wc, "c after a's delete");
    fsck_clean(&mut fs, "a deleted");
    fs.unlink(ROOT_INO, b"b").unwrap();
    fs.reclaim_all().unwrap();
    assert_eq!(read_all(&mut fs, c), wc, "c after b's delete");
    fsck_clean(&mut fs, "b deleted");
    fs.unlink(ROOT_INO, b"c").unwrap();
    fs.reclaim_all().unwrap();
    fsck_clean(&mut fs, "all deleted");
    fs.checkpoint().unwrap();
    let back = fs.statfs().unwrap().bfree;
    assert!(
        back + 256 >= empty,
        "space not freed: {back} free, {empty} when empty"
    );
}

#[test]
fn a_snapshot_and_the_cleaner_keep_what_both_files_held() {
    let mut fs = mkfs(64 * MIB, clone_cfg());
    let (a, data) = source(&mut fs);
    let b = file(&mut fs, b"b");
    fs.clone_range(a, 0, b, 0, 0).unwrap();
    let snap = fs.snapshot_create().unwrap();
    let mut wa = data.clone();
    for i in 0..BLOCKS / 2 {
        write_both(
            &mut fs,
            a,
            &mut wa,
            (i * 2 * 4096) as usize,
            &pattern(i, 4096),
        );
    }
    fs.unlink(ROOT_INO, b"b").unwrap();
    fsck_clean(&mut fs, "after a snapshot");
    // Garbage for the cleaner: a file written and rewritten.
    let g = file(&mut fs, b"g");
    for round in 0..6 {
        fs.write(g, 0, &pattern(round, 4 << 20)).unwrap();
        fs.checkpoint().unwrap();
    }
    let b2 = file(&mut fs, b"b2");
    fs.clone_range(a, 0, b2, 0, 0).unwrap();
    let ctl = fs.lookup(ROOT_INO, b".lsfs").unwrap().ino;
    let dir = fs.lookup(ctl, b"snapshot").unwrap().ino;
    let root = fs.lookup(dir, snap.to_string().as_bytes()).unwrap().ino;
    for name in [b"a", b"b"] {
        let f = fs.lookup(root, name).unwrap().ino;
        assert!(read_all(&mut fs, f) == data, "the snapshot's file changed");
    }
    // Without the snapshot, the segments of the first write are half dead
    // (a's even blocks were rewritten): victims, whose odd blocks a and b2
    // share.
    fs.snapshot_set(snap, false).unwrap();
    fs.reconcile_all().unwrap();
    let v1 = fs.file_vblock_for_test(a, 1).unwrap().unwrap();
    let place = |fs: &mut Lsfs| fs.store.dat_get(v1).unwrap().pblock;
    let before = place(&mut fs);
    for _ in 0..20 {
        fs.clean(16, "low space").unwrap();
        fs.checkpoint().unwrap();
        if place(&mut fs) != before {
            break;
        }
    }
    assert_ne!(
        place(&mut fs),
        before,
        "the cleaner never moved the shared block"
    );
    // Still one virtual block for both files: moved once, for both.
    assert_eq!(fs.file_vblock_for_test(b2, 1).unwrap(), Some(v1));
    assert_eq!(read_all(&mut fs, a), wa, "a after cleaning");
    assert_eq!(read_all(&mut fs, b2), wa, "b2 after cleaning");
    fsck_clean(&mut fs, "after cleaning");
    // Defragmentation moves shared blocks the same way.
    let before = place(&mut fs);
    let rep = fs.defrag_file(b2, true).unwrap();
    assert!(rep.moved > 0, "{rep:?}");
    assert_ne!(
        place(&mut fs),
        before,
        "defrag did not move the shared block"
    );
    assert_eq!(read_all(&mut fs, a), wa, "a after defrag of b2");
    assert_eq!(read_all(&mut fs, b2), wa, "b2 after its defrag");
    fsck_clean(&mut fs, "after defrag");
}

#[test]
fn bad_requests_get_xfs_answers() {
    let mut fs = mkfs(64 * MIB, clone_cfg());
    let (a, data) = source(&mut fs);
    let b = file(&mut fs, b"b");
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, &ctx()).unwrap().ino;
    assert_eq!(fs.clone_range(a, 1, b, 0, 4096), Err(Errno::INVAL));
    assert_eq!(fs.clone_range(a, 0, b, 0, 4095), Err(Errno::INVAL));
    assert_eq!(fs.clone_range(a, 0, d, 0, 4096), Err(Errno::ISDIR));
    assert_eq!(fs.clone_range(a, 0, a, 4096, 8192), Err(Errno::INVAL));
    assert_eq!(fs.clone_range(a, (BLOCKS + 2) * 4096, b, 0, 4096), Ok(0));
    fs.atomic_start(b).unwrap();
    assert_eq!(fs.clone_range(a, 0, b, 0, 4096), Err(Errno::BUSY));
    fs.atomic_abort(b).unwrap();
    // Apart in one file: the tail of `a` again past its end.
    let end = (BLOCKS + 1) * 4096;
    assert_eq!(fs.clone_range(a, 0, a, end, 8192), Ok(8192));
    let mut want = data.clone();
    want.resize(end as usize, 0);
    want.extend_from_slice(&data[..8192]);
    assert_eq!(read_all(&mut fs, a), want);
    // The source's last, partial block onto a longer file is refused;
    // onto its end it is fine.
    let t = file(&mut fs, b"t");
    fs.write(t, 0, &pattern(4, 5000)).unwrap();
    fs.write(b, 0, &pattern(3, 5 * 4096)).unwrap();
    assert_eq!(
        fs.clone_range(t, 0, b, 0, 0),
        Err(Errno::INVAL),
        "a short last block would zero b's bytes after it"
    );
    assert_eq!(fs.clone_range(t, 0, b, 4 * 4096, 0), Ok(5000));
    let mut want = pattern(3, 4 * 4096);
    want.extend_from_slice(&pattern(4, 5000));
    assert_eq!(read_all(&mut fs, b), want);
    // A small file in its inode is copied.
    let s = file(&mut fs, b"s");
    fs.write(s, 0, b"tiny").unwrap();
    assert_eq!(fs.clone_range(s, 0, b, 8192, 0), Ok(4));
    assert_eq!(fs.read(b, 8192, 4).unwrap(), b"tiny");
    fsck_clean(&mut fs, "after bad requests");
}

/// fsync after a clone, then a crash at every flush of clone, writes and
/// fsyncs: each recovered image is clean and holds, for each file, what
/// it held at some point (before or after the clone, before or after the
/// fsynced writes).
#[test]
fn a_crash_at_any_flush_of_a_clone_leaves_a_clean_image() {
    let base = {
        let mut fs = mkfs(48 * MIB, clone_cfg());
        fs.unmount().unwrap();
        image(&mut fs)
    };
    let (dev, log) = CrashDevice::new(MemDevice::from_bytes(base));
    let mut fs = Lsfs::open(Box::new(dev), clone_cfg()).unwrap();
    let (a, data) = source(&mut fs);
    let b = file(&mut fs, b"b");
    fs.write(b, 0, &pattern(5, 3 * 4096)).unwrap();
    fs.sync().unwrap();
    let before = log.len();
    fs.clone_range(a, 0, b, 0, 0).unwrap();
    let mut wb = data.clone();
    write_both(&mut fs, b, &mut wb, 4096, &pattern(6, 4096));
    fs.fsync(b, false).unwrap();
    let mut wa = data.clone();
    write_both(&mut fs, a, &mut wa, 4096, &pattern(8, 4096));
    fs.fsync(a, false).unwrap();
    fs.unlink(ROOT_INO, b"a").unwrap();
    fs.fsync(ROOT_INO, false).unwrap();
    drop(fs);

    let old_b = pattern(5, 3 * 4096);
    let mut points = 0;
    for (at, op) in log.ops().iter().enumerate().skip(before) {
        if !matches!(op, LoggedOp::Flush) && at + 1 != log.len() {
            continue;
        }
        for seed in [0, 1] {
            let img = log.crash_image(at + 1, seed).bytes();
            let what = format!("crash at op {} seed {seed}", at + 1);
            assert_clean(&fsck_bytes(img.clone()), &what);
            let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(img)), clone_cfg()).unwrap();
            let got_b = read_all(&mut fs, b);
            assert!(
                got_b == old_b || got_b == data || got_b == wb,
                "{what}: b holds something else"
            );
            if let Ok(a) = fs.lookup(ROOT_INO, b"a") {
                let got_a = read_all(&mut fs, a.ino);
                assert!(got_a == data || got_a == wa, "{what}: a changed");
            }
            fs.unmount().unwrap();
            assert_clean(&fsck_bytes(image(&mut fs)), &format!("{what}, recovered"));
            points += 1;
        }
    }
    eprintln!("crash images checked: {points}");
    assert!(points >= 8, "only {points} crash points");
}

/// copy_file_range shares the whole blocks when both offsets sit at the
/// same place in their blocks, copies the bytes around them, and copies
/// everything otherwise (in pieces: the caller goes on from the count).
#[test]
fn copy_file_range_shares_whole_blocks_and_copies_the_edges() {
    let mut fs = mkfs(64 * MIB, clone_cfg());
    let (a, data) = source(&mut fs);
    let b = file(&mut fs, b"b");
    let free = fs.statfs().unwrap().bfree;
    let (off, len) = (100u64, BYTES - 300);
    assert_eq!(fs.copy_file_range(a, off, b, 4096 + off, len), Ok(len));
    let used = free - fs.statfs().unwrap().bfree;
    assert!(used < 64, "the copy took {used} blocks of free space");
    let mut want = vec![0u8; (4096 + off) as usize];
    want.extend_from_slice(&data[off as usize..(off + len) as usize]);
    assert_eq!(read_all(&mut fs, b), want);
    // Past the source's end: nothing; onto a directory: EISDIR.
    assert_eq!(fs.copy_file_range(a, BYTES, b, 0, 10), Ok(0));
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, &ctx()).unwrap().ino;
    assert_eq!(fs.copy_file_range(a, 0, d, 0, 10), Err(Errno::ISDIR));
    assert_eq!(fs.copy_file_range(a, 0, a, 10, 4096), Err(Errno::INVAL));
    // Offsets at different places in their blocks: copied, in pieces.
    let c = file(&mut fs, b"c");
    let mut at = 0;
    while at < BYTES {
        let n = fs.copy_file_range(a, at, c, at + 1, BYTES - at).unwrap();
        assert!(n > 0);
        at += n;
    }
    let mut want = vec![0u8];
    want.extend_from_slice(&data);
    assert_eq!(read_all(&mut fs, c), want);
    fsck_clean(&mut fs, "after copies");
}

/// A file that maps the same blocks twice (cloned within itself), and a
/// clone made twice over the same range: each later write, truncate or
/// delete takes the right number of users off, in one call or several.
#[test]
fn blocks_mapped_twice_by_one_file_lose_both_users() {
    let mut fs = mkfs(64 * MIB, clone_cfg());
    fs.checkpoint().unwrap();
    let empty = fs.statfs().unwrap().bfree;
    let (a, data) = source(&mut fs);
    let b = file(&mut fs, b"b");
    let half = BLOCKS / 2 * 4096;
    // Blocks 0..512 again at 1024..1536 (past the partial last block).
    let end = (BLOCKS + 1) * 4096;
    assert_eq!(fs.clone_range(a, 0, a, end, half), Ok(half));
    // Twice onto the same range of b: the second replaces the first.
    fs.clone_range(a, 0, b, 0, half).unwrap();
    fs.clone_range(a, 0, b, 0, half).unwrap();
    fsck_clean(&mut fs, "cloned within a file and twice");
    // One write over both copies of a few blocks: several extents of one
    // call name the same blocks.
    fs.checkpoint().unwrap();
    let mut wa = data.clone();
    wa.resize(end as usize, 0);
    wa.extend_from_slice(&data[..half as usize]);
    let big = pattern(77, (end + 4096) as usize);
    write_both(&mut fs, a, &mut wa, 0, &big);
    assert_eq!(read_all(&mut fs, a), wa);
    assert_eq!(read_all(&mut fs, b), data[..half as usize].to_vec());
    fsck_clean(&mut fs, "after writing over both copies");
    // Both copies within one write's piece: one call kills each twice.
    let c = file(&mut fs, b"c");
    fs.write(c, 0, &pattern(8, 32 * 4096)).unwrap();
    fs.clone_range(c, 0, c, 16 * 4096, 8 * 4096).unwrap();
    fs.write(c, 0, &pattern(9, 32 * 4096)).unwrap();
    assert_eq!(read_all(&mut fs, c), pattern(9, 32 * 4096));
    fsck_clean(&mut fs, "after one write over both copies");
    fs.clone_range(b, 0, b, half, half).unwrap();
    fs.setattr(
        b,
        &lsfs_vfs::SetAttr {
            size: Some(0),
            ..Default::default()
        },
    )
    .unwrap();
    fs.unlink(ROOT_INO, b"a").unwrap();
    fs.forget(a, 1);
    fs.reclaim_all().unwrap();
    fsck_clean(&mut fs, "all gone");
    fs.checkpoint().unwrap();
    let back = fs.statfs().unwrap().bfree;
    assert!(back + 256 >= empty, "space not freed: {back}, {empty}");
}
