//! Deletes in the background (`fs/delete.rs`): unlinking a large file, or
//! the last close of an unlinked one, queues it in the orphan directory;
//! `reclaim_step` frees its blocks a bounded slice at a time. At every step
//! the segment counters, the queue and fsck agree; a crash or an unmount in
//! the middle loses nothing and leaks nothing, and the next mount goes on.

mod common;
use common::*;
use lsfs_core::device::{CrashDevice, MemDevice};
use lsfs_core::fs::{
    CheckpointChecks, Lsfs, MountConfig, ReclaimStatus, FOREGROUND_DELETE_MAX_BLOCKS,
};
use lsfs_vfs::{Errno, Vfs, ROOT_INO};
use std::time::Instant;

/// Big writes in few pieces, no protection period (freed segments are
/// really freed), invariant checks after every checkpoint.
fn del_cfg() -> MountConfig {
    let mut c = MountConfig::default();
    c.store.protection_secs = 0;
    c.store.cache_blocks = 4096;
    c
}

fn checked(mut fs: Lsfs) -> Lsfs {
    fs.config.check_checkpoints = CheckpointChecks::Every;
    fs
}

/// A file `name` of `bytes` bytes, its inode; the kernel's reference is
/// given back, as after a close.
fn big_file(fs: &mut Lsfs, name: &[u8], bytes: usize) -> u64 {
    let a = fs
        .mknod(ROOT_INO, name, libc::S_IFREG | 0o644, 0, &ctx())
        .unwrap();
    let chunk = pattern(a.ino, 1 << 20);
    for off in (0..bytes).step_by(chunk.len()) {
        let n = chunk.len().min(bytes - off);
        fs.write(a.ino, off as u64, &chunk[..n]).unwrap();
    }
    fs.forget(a.ino, 1);
    a.ino
}

fn live_blocks(fs: &Lsfs) -> u64 {
    fs.store.segs().held().0
}

/// fsck of the image as it is now: clean, with the orphans the queue says.
#[track_caller]
fn fsck_agrees(fs: &mut Lsfs, what: &str) {
    fsck_agrees_open(fs, what, ReclaimStatus::default());
}

/// [`fsck_agrees`] with `open` orphans besides: unlinked files still open.
#[track_caller]
fn fsck_agrees_open(fs: &mut Lsfs, what: &str, open: ReclaimStatus) {
    fs.checkpoint().unwrap();
    let r = fsck_bytes(image(fs));
    assert_clean(&r, what);
    let q = fs.reclaim_status();
    assert_eq!(r.stats.orphans, q.files + open.files, "{what}: orphans");
    assert_eq!(
        r.stats.orphan_blocks,
        q.blocks + open.blocks,
        "{what}: orphan blocks"
    );
}

/// Slack for what a run writes besides file data, in blocks: the free
/// space after a delete is back to what it was before within this (the
/// segments the log's heads hold open, directory and DAT growth).
const SLACK_BLOCKS: u64 = 2 * 512 + 64;

#[test]
fn unlinking_a_large_file_defers_its_blocks_and_steps_free_them() {
    let mut fs = checked(mkfs(256 * MIB, del_cfg()));
    fs.checkpoint().unwrap();
    let empty = fs.statfs().unwrap().bfree;
    let ino = big_file(&mut fs, b"big", 64 << 20);
    fs.checkpoint().unwrap();
    let live_full = live_blocks(&fs);
    let file_blocks = 64 * 256;

    let t = Instant::now();
    fs.unlink(ROOT_INO, b"big").unwrap();
    eprintln!("unlink of a 64 MiB file: {:?}", t.elapsed());
    assert_eq!(
        fs.reclaim_status(),
        ReclaimStatus {
            files: 1,
            blocks: file_blocks
        }
    );
    // Gone for users at once; its blocks not yet free.
    assert_eq!(fs.lookup(ROOT_INO, b"big").unwrap_err(), Errno::NOENT);
    assert_eq!(fs.getattr(ino).unwrap_err(), Errno::NOENT);
    assert_eq!(live_blocks(&fs), live_full);
    fsck_agrees(&mut fs, "just unlinked");

    let mut steps = 0;
    let mut freed = 0;
    let t = Instant::now();
    loop {
        let before = live_blocks(&fs);
        let p = fs.reclaim_step(5000).unwrap();
        steps += 1;
        freed += p.freed_blocks;
        assert!(p.freed_blocks <= 5000, "{p:?}");
        assert_eq!(p.left, fs.reclaim_status());
        assert_eq!(p.left.blocks, file_blocks - freed, "step {steps}: {p:?}");
        // The segments' live counts drop with every step, before any
        // checkpoint (the counters change by deltas): by the data blocks
        // freed, and the map's tree nodes emptied.
        let dropped = before - live_blocks(&fs);
        assert!(
            (p.freed_blocks..p.freed_blocks + 16).contains(&dropped),
            "step {steps}: live blocks dropped by {dropped}, {} data blocks freed",
            p.freed_blocks
        );
        fsck_agrees(&mut fs, &format!("after reclaim step {steps}"));
        if p.left.files == 0 {
            assert_eq!(p.files_done, 1);
            break;
        }
        assert!(steps < 10, "reclaim does not end: {p:?}");
    }
    eprintln!(
        "freeing it in {steps} steps (fsck between them included): {:?}",
        t.elapsed()
    );
    assert_eq!(steps, 4);
    assert_eq!(freed, file_blocks);
    assert!(live_blocks(&fs) + file_blocks <= live_full, "{live_full}");
    let s = fs.delete_stats();
    assert_eq!((s.queued_files, s.reclaimed_files), (1, 1), "{s:?}");
    assert_eq!(s.reclaimed_blocks, file_blocks);
    fs.checkpoint().unwrap();
    let back = fs.statfs().unwrap().bfree;
    eprintln!("free blocks: empty {empty}, after the delete {back}");
    assert!(
        back + SLACK_BLOCKS >= empty,
        "free space not back: {back} of {empty} blocks"
    );
    fs.unmount().unwrap();
    assert_clean(&fsck_bytes(image(&mut fs)), "the final image");
}

#[test]
fn small_files_and_non_files_are_deleted_in_the_foreground() {
    let mut fs = checked(mkfs(64 * MIB, del_cfg()));
    let small = (FOREGROUND_DELETE_MAX_BLOCKS - 1) as usize * 4096;
    big_file(&mut fs, b"small", small);
    big_file(&mut fs, b"large", small + 4096);
    let s = fs.symlink(ROOT_INO, b"s", b"target", &ctx()).unwrap();
    fs.forget(s.ino, 1);
    fs.unlink(ROOT_INO, b"small").unwrap();
    fs.unlink(ROOT_INO, b"s").unwrap();
    assert_eq!(fs.reclaim_status(), ReclaimStatus::default());
    fs.unlink(ROOT_INO, b"large").unwrap();
    assert_eq!(
        fs.reclaim_status(),
        ReclaimStatus {
            files: 1,
            blocks: FOREGROUND_DELETE_MAX_BLOCKS
        }
    );
    assert_eq!(fs.delete_stats().foreground_files, 2);
    fsck_agrees(&mut fs, "one queued");
    fs.reclaim_all().unwrap();
    fsck_agrees(&mut fs, "none queued");
    assert_eq!(fs.reclaim_status(), ReclaimStatus::default());
}

#[test]
fn the_last_close_of_an_unlinked_file_queues_it() {
    let mut fs = checked(mkfs(64 * MIB, del_cfg()));
    let ino = big_file(&mut fs, b"f", 4 << 20);
    fs.lookup(ROOT_INO, b"f").unwrap();
    fs.open(ino, libc::O_RDWR).unwrap();
    fs.unlink(ROOT_INO, b"f").unwrap();
    // Open: still readable, not queued.
    assert_eq!(fs.reclaim_status(), ReclaimStatus::default());
    assert_eq!(fs.read(ino, 0, 10).unwrap().len(), 10);
    fs.reclaim_step(u64::MAX).unwrap();
    assert_eq!(fs.read(ino, 4 << 20, 10).unwrap().len(), 0);
    assert_eq!(fs.getattr(ino).unwrap().size, 4 << 20);
    let open = ReclaimStatus {
        files: 1,
        blocks: 1024,
    };
    fsck_agrees_open(&mut fs, "unlinked, open", open);
    fs.release(ino);
    assert_eq!(fs.reclaim_status().files, 0, "still looked up");
    fs.forget(ino, 1);
    assert_eq!(
        fs.reclaim_status(),
        ReclaimStatus {
            files: 1,
            blocks: 1024
        }
    );
    fsck_agrees(&mut fs, "closed");
    // `tick` frees a slice each time.
    tick_until_freed(&mut fs, 10);
    fsck_agrees(&mut fs, "freed by ticks");
    assert_eq!(fs.getattr(ino).unwrap_err(), Errno::NOENT);
}

/// Unmount with a file half freed: the next mount returns with it still
/// queued, the steps finish it, and nothing leaks.
#[test]
fn an_unmount_in_the_middle_resumes_at_the_next_mount() {
    let mut fs = checked(mkfs(128 * MIB, del_cfg()));
    fs.checkpoint().unwrap();
    let empty = fs.statfs().unwrap().bfree;
    let live_empty = live_blocks(&fs);
    big_file(&mut fs, b"a", 20 << 20);
    big_file(&mut fs, b"b", 12 << 20);
    fs.unlink(ROOT_INO, b"a").unwrap();
    fs.unlink(ROOT_INO, b"b").unwrap();
    fs.reclaim_step(3000).unwrap();
    let left = fs.reclaim_status();
    assert_eq!(left.blocks, (32 << 8) - 3000);
    fs.unmount().unwrap();
    let bytes = image(&mut fs);
    drop(fs);
    let r = fsck_bytes(bytes.clone());
    assert_clean(&r, "unmounted in the middle");
    assert_eq!((r.stats.orphans, r.stats.orphan_blocks), (2, left.blocks));

    let mut fs = checked(Lsfs::open(Box::new(MemDevice::from_bytes(bytes)), del_cfg()).unwrap());
    assert_eq!(fs.reclaim_status(), left, "the mount freed them itself");
    tick_until_freed(&mut fs, 20);
    fsck_agrees(&mut fs, "after the steps");
    fs.checkpoint().unwrap();
    let back = fs.statfs().unwrap().bfree;
    let live = live_blocks(&fs);
    eprintln!(
        "free blocks: empty {empty}, after the deletes {back}; live {live_empty} then {live}"
    );
    assert!(
        back + SLACK_BLOCKS >= empty,
        "leaked: {back} of {empty} free"
    );
    assert!(
        live <= live_empty + 16,
        "leaked: {live} blocks live, {live_empty} before"
    );
    fs.unmount().unwrap();
    assert_clean(&fsck_bytes(image(&mut fs)), "the final image");
}

/// A crash anywhere while a file is being freed (at every flush, and
/// between flushes with unflushed writes lost at random): the image is
/// clean, the mount queues what is left, and freeing it leaks nothing.
#[test]
fn a_crash_while_freeing_loses_nothing_and_leaks_nothing() {
    let base = {
        let mut fs = mkfs(96 * MIB, del_cfg());
        fs.unmount().unwrap();
        image(&mut fs)
    };
    let (empty, live_empty) = {
        let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(base.clone())), del_cfg()).unwrap();
        (fs.statfs().unwrap().bfree, live_blocks(&fs))
    };
    let (dev, log) = CrashDevice::new(MemDevice::from_bytes(base));
    let mut fs = Lsfs::open(Box::new(dev), del_cfg()).unwrap();
    big_file(&mut fs, b"keep", 1 << 20);
    big_file(&mut fs, b"big", 24 << 20);
    fs.sync().unwrap();
    fs.unlink(ROOT_INO, b"big").unwrap();
    fs.fsync(ROOT_INO, false).unwrap();
    while fs.reclaim_status().files > 0 {
        fs.reclaim_step(1000).unwrap();
        fs.checkpoint().unwrap();
    }
    // A small write after: crashes past the end of the reclaim too.
    big_file(&mut fs, b"after", 64 << 10);
    fs.sync().unwrap();
    drop(fs);

    let flushes: Vec<usize> = log
        .ops()
        .iter()
        .enumerate()
        .filter(|(_, o)| matches!(o, lsfs_core::device::LoggedOp::Flush))
        .map(|(i, _)| i + 1)
        .collect();
    let first = log.len() - log.len() / 2;
    let mut points: Vec<(usize, u64)> = Vec::new();
    let mut prev = 0;
    for &f in &flushes {
        points.push((f, 0));
        if f > prev + 1 && f >= first {
            points.push(((prev + f) / 2, f as u64));
        }
        prev = f;
    }
    let mut resumed = 0;
    for (at, seed) in points {
        let img = log.crash_image(at, seed).bytes();
        let what = format!("crash at op {at} seed {seed}");
        let r = fsck_bytes(img.clone());
        assert_clean(&r, &what);
        let mut fs = checked(Lsfs::open(Box::new(MemDevice::from_bytes(img)), del_cfg()).unwrap());
        let q = fs.reclaim_status();
        if q.files > 0 {
            resumed += 1;
            assert!(q.blocks <= 24 << 8, "{what}: {q:?}");
        }
        fs.reclaim_all().unwrap();
        fsck_agrees(&mut fs, &what);
        let names: Vec<Vec<u8>> = fs
            .readdir(ROOT_INO, 0, usize::MAX)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert!(
            !names.contains(&b"big".to_vec()) || q.files == 0,
            "{what}: the file is both named and queued"
        );
        if !names.contains(&b"big".to_vec()) {
            // Whatever was written besides: at most the 1 MiB file, the
            // small one and metadata.
            let back = fs.statfs().unwrap().bfree;
            let live = live_blocks(&fs);
            assert!(
                back + 256 + 16 + SLACK_BLOCKS >= empty,
                "{what}: leaked: {back} of {empty} free"
            );
            assert!(
                live <= live_empty + 256 + 16 + 16,
                "{what}: leaked: {live} blocks live, {live_empty} before"
            );
        }
    }
    eprintln!("crash images checked: resumed a reclaim in {resumed}");
    assert!(
        resumed >= 5,
        "only {resumed} crash images had a reclaim to resume"
    );
}

fn truncate(fs: &mut Lsfs, ino: u64, size: u64) {
    let set = lsfs_vfs::SetAttr {
        size: Some(size),
        ..Default::default()
    };
    fs.setattr(ino, &set).unwrap();
}

/// Truncating a large file to zero leaves it empty at once and queues its
/// blocks; the file is usable meanwhile, and what it held never shows
/// again (a later extension reads zeros).
#[test]
fn truncating_a_large_file_to_zero_defers_its_blocks() {
    let mut fs = checked(mkfs(256 * MIB, del_cfg()));
    fs.checkpoint().unwrap();
    let empty = fs.statfs().unwrap().bfree;
    let ino = big_file(&mut fs, b"big", 16 << 20);
    fs.checkpoint().unwrap();
    let live_full = live_blocks(&fs);
    let file_blocks = 16 * 256;

    truncate(&mut fs, ino, 0);
    assert_eq!(
        fs.reclaim_status(),
        ReclaimStatus {
            files: 1,
            blocks: file_blocks
        }
    );
    let a = fs.getattr(ino).unwrap();
    assert_eq!((a.size, a.blocks), (0, 0), "{a:?}");
    assert!(fs.read(ino, 0, 4096).unwrap().is_empty());
    assert_eq!(live_blocks(&fs), live_full, "freed before a step");
    fsck_agrees(&mut fs, "just truncated");

    // Usable at once; the old blocks never show through.
    fs.write(ino, 0, &[7u8; 4096]).unwrap();
    truncate(&mut fs, ino, 8 << 20);
    let back = fs.read(ino, 0, 8 << 20).unwrap();
    assert_eq!(back.len(), 8 << 20);
    assert!(back[..4096].iter().all(|&b| b == 7));
    assert!(
        back[4096..].iter().all(|&b| b == 0),
        "old data after the new end"
    );
    fsck_agrees(&mut fs, "written after the truncate");

    tick_until_freed(&mut fs, 20);
    assert_eq!(fs.reclaim_status(), ReclaimStatus::default());
    let s = fs.delete_stats();
    assert_eq!((s.truncated_files, s.reclaimed_files), (1, 1), "{s:?}");
    assert!(
        live_blocks(&fs) + file_blocks <= live_full + 1,
        "{live_full}"
    );
    fsck_agrees(&mut fs, "after the reclaim");
    let free = fs.statfs().unwrap().bfree;
    assert!(
        free + SLACK_BLOCKS + 1 >= empty,
        "free space not back: {free} of {empty} blocks"
    );
    // A small file, or a truncate that frees a few blocks, stays in the
    // foreground.
    let small = big_file(&mut fs, b"small", 128 << 10);
    truncate(&mut fs, small, 0);
    truncate(&mut fs, ino, 4096);
    assert_eq!(fs.reclaim_status(), ReclaimStatus::default());
    fs.unmount().unwrap();
    assert_clean(&fsck_bytes(image(&mut fs)), "the final image");
}

/// A crash anywhere around a truncate to zero, its fsync and the reclaim:
/// the image is clean, the file has its old contents or none, and nothing
/// leaks once the queue is done.
#[test]
fn a_crash_around_a_truncate_to_zero_loses_nothing_and_leaks_nothing() {
    crash_around_a_truncate(0);
}

/// The same for a truncate inside the file, off a block boundary: the
/// tail's map is cut and handed over, the head stays.
#[test]
fn a_crash_around_a_truncate_to_a_smaller_size_loses_nothing_and_leaks_nothing() {
    crash_around_a_truncate((5 << 20) + 1234);
}

fn crash_around_a_truncate(size: usize) {
    let base = {
        let mut fs = mkfs(96 * MIB, del_cfg());
        fs.unmount().unwrap();
        image(&mut fs)
    };
    let live_empty = {
        let fs = Lsfs::open(Box::new(MemDevice::from_bytes(base.clone())), del_cfg()).unwrap();
        live_blocks(&fs)
    };
    let (dev, log) = CrashDevice::new(MemDevice::from_bytes(base));
    let mut fs = Lsfs::open(Box::new(dev), del_cfg()).unwrap();
    let ino = big_file(&mut fs, b"big", 16 << 20);
    fs.sync().unwrap();
    let synced = log.len();
    let old = fs.read(ino, 0, 16 << 20).unwrap();
    truncate(&mut fs, ino, size as u64);
    assert_eq!(
        fs.reclaim_status().files,
        1,
        "the truncate went to the background"
    );
    fs.write(ino, 0, &[9u8; 4096]).unwrap();
    fs.fsync(ino, false).unwrap();
    let mut after = vec![9u8; 4096];
    if size > 4096 {
        after.extend_from_slice(&old[4096..size]);
    }
    while fs.reclaim_status().files > 0 {
        fs.reclaim_step(500).unwrap();
        fs.checkpoint().unwrap();
    }
    drop(fs);

    let (mut checked_images, mut resumed) = (0, 0);
    for (at, op) in log.ops().iter().enumerate().skip(synced - 1) {
        if !matches!(op, lsfs_core::device::LoggedOp::Flush) {
            continue;
        }
        let img = log.crash_image(at + 1, 0).bytes();
        let what = format!("crash after op {}", at + 1);
        assert_clean(&fsck_bytes(img.clone()), &what);
        let mut fs = checked(Lsfs::open(Box::new(MemDevice::from_bytes(img)), del_cfg()).unwrap());
        resumed += (fs.reclaim_status().files > 0) as u32;
        if let Ok(e) = fs.lookup(ROOT_INO, b"big") {
            let data = fs.read(e.ino, 0, 16 << 20).unwrap();
            assert!(
                data == old || data == after,
                "{what}: the file holds {} bytes, neither before nor after",
                data.len()
            );
        }
        fs.reclaim_all().unwrap();
        fsck_agrees(&mut fs, &what);
        if fs
            .lookup(ROOT_INO, b"big")
            .is_ok_and(|e| e.size == after.len() as u64)
        {
            let live = live_blocks(&fs);
            let kept = after.len().div_ceil(4096) as u64;
            assert!(
                live <= live_empty + kept + 16 + 16,
                "{what}: leaked: {live} blocks live, {live_empty} before"
            );
        }
        checked_images += 1;
    }
    eprintln!("crash images checked: {checked_images}, a reclaim resumed in {resumed}");
    assert!(checked_images >= 5, "only {checked_images} crash points");
    assert!(
        resumed >= 2,
        "only {resumed} crash images had a reclaim to resume"
    );
}

/// Truncating a large, scattered file (a B-tree map of many extents) to a
/// size inside it, off a block boundary: the file keeps exactly its head,
/// the rest of the new last block reads zeros, and the tail's blocks are
/// queued, then freed by the steps.
#[test]
fn truncating_a_large_file_to_a_smaller_size_defers_its_tail() {
    let mut fs = checked(mkfs(256 * MIB, del_cfg()));
    let ino = big_file(&mut fs, b"big", 16 << 20);
    for k in 0..3000u64 {
        let b = (k * 7919) % 4096;
        fs.write(ino, b * 4096, &pattern(b + 1, 4096)).unwrap();
    }
    fs.checkpoint().unwrap();
    let old = fs.read(ino, 0, 16 << 20).unwrap();
    let live_full = live_blocks(&fs);
    let size = (5 << 20) + 1234;
    let kept = (size as u64).div_ceil(4096);

    truncate(&mut fs, ino, size as u64);
    assert_eq!(
        fs.reclaim_status(),
        ReclaimStatus {
            files: 1,
            blocks: 4096 - kept
        }
    );
    assert_eq!(fs.getattr(ino).unwrap().size, size as u64);
    assert_eq!(fs.read(ino, 0, 16 << 20).unwrap(), old[..size]);
    // Only the map nodes on the cut's path were copied on write.
    assert!(
        live_blocks(&fs) + 16 >= live_full,
        "freed before a step: {} of {live_full} blocks live",
        live_blocks(&fs)
    );
    fsck_agrees(&mut fs, "just truncated");

    truncate(&mut fs, ino, 8 << 20);
    let back = fs.read(ino, 0, 8 << 20).unwrap();
    assert_eq!(back[..size], old[..size]);
    assert!(
        back[size..].iter().all(|&b| b == 0),
        "old data past the new end"
    );
    fsck_agrees(&mut fs, "extended after the truncate");

    tick_until_freed(&mut fs, 20);
    assert_eq!(fs.reclaim_status(), ReclaimStatus::default());
    assert!(
        live_blocks(&fs) + (4096 - kept) <= live_full + 1,
        "{live_full}"
    );
    fsck_agrees(&mut fs, "after the reclaim");
    // A tail of a few blocks is cut in the foreground.
    truncate(&mut fs, ino, (size - 40 * 4096) as u64);
    assert_eq!(fs.reclaim_status(), ReclaimStatus::default());
    assert_eq!(fs.read(ino, 0, 16 << 20).unwrap(), old[..size - 40 * 4096]);
    fs.unmount().unwrap();
    assert_clean(&fsck_bytes(image(&mut fs)), "the final image");
}

/// A write short of space frees the queued blocks first instead of ENOSPC.
#[test]
fn a_write_short_of_space_frees_queued_blocks_first() {
    let mut fs = checked(mkfs(64 * MIB, del_cfg()));
    let avail = fs.statfs().unwrap().bavail * 4096;
    let size = (avail * 3 / 4) as usize & !0xfffff;
    big_file(&mut fs, b"a", size);
    fs.unlink(ROOT_INO, b"a").unwrap();
    assert!(fs.reclaim_status().blocks > 0);
    big_file(&mut fs, b"b", size);
    assert_eq!(fs.reclaim_status(), ReclaimStatus::default());
    fsck_agrees(&mut fs, "after the second file");
}

/// Measured, not asserted: an unlink of a 1 GiB file, and the work the
/// background does after it (what the unlink itself did before deletes
/// were deferred). `cargo test --release -p lsfs-core --test delete
/// -- --ignored --nocapture unlink_time`.
#[test]
#[ignore]
fn unlink_time_of_a_1_gib_file() {
    let mut c = MountConfig::default();
    c.store.protection_secs = 0;
    let mut fs = mkfs(1280 * MIB, c);
    big_file(&mut fs, b"big", 1 << 30);
    fs.checkpoint().unwrap();
    let t = Instant::now();
    fs.unlink(ROOT_INO, b"big").unwrap();
    let unlink = t.elapsed();
    let t = Instant::now();
    let mut steps = 0;
    let mut longest = std::time::Duration::ZERO;
    while fs.reclaim_status().files > 0 {
        let s = Instant::now();
        fs.reclaim_step(lsfs_core::fs::RECLAIM_BLOCKS_PER_STEP)
            .unwrap();
        longest = longest.max(s.elapsed());
        steps += 1;
    }
    let all = t.elapsed();
    let t = Instant::now();
    fs.checkpoint().unwrap();
    eprintln!(
        "1 GiB: unlink {unlink:?}; then {steps} steps in {all:?} (longest {longest:?}), checkpoint {:?}",
        t.elapsed()
    );
}

/// `tick` until no file is queued, at most `max` times (each frees a slice).
fn tick_until_freed(fs: &mut Lsfs, max: u32) {
    let mut ticks = 0;
    while fs.reclaim_status().files > 0 {
        fs.tick().unwrap();
        ticks += 1;
        assert!(ticks < max, "still queued after {ticks} ticks");
    }
}
