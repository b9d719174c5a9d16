//! Atomic writes (docs/ATOMIC.md) in the engine: pending writes reach the
//! device through nothing but their commit (not a checkpoint, another
//! file's fsync, or a snapshot); a crash at any point of the commit keeps
//! all of them or none; abort writes nothing; the bounds refuse clearly and
//! never commit a set in part; close, unlink, truncate and ENOSPC have the
//! outcomes the document names.

mod common;
use common::*;
use lsfs_core::device::{CrashDevice, MemDevice};
use lsfs_core::fs::atomic::{FILE_MAX_BLOCKS, MOUNT_MAX_BLOCKS};
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_vfs::{Errno, Ino, SetAttr, Vfs, ROOT_INO};

const BLOCK: usize = 4096;

fn create(fs: &mut Lsfs, name: &str) -> Ino {
    let a = fs
        .mknod(ROOT_INO, name.as_bytes(), libc::S_IFREG | 0o644, 0, &ctx())
        .unwrap();
    fs.forget(a.ino, 1);
    a.ino
}

fn contents(fs: &mut Lsfs, name: &str) -> Vec<u8> {
    let ino = fs.lookup(ROOT_INO, name.as_bytes()).unwrap().ino;
    fs.forget(ino, 1);
    let size = fs.getattr(ino).unwrap().size;
    fs.read(ino, 0, size as u32).unwrap()
}

/// `got == want`, reported by length and first difference (not by dumping both).
#[track_caller]
fn same(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        let at = got.iter().zip(want).position(|(a, b)| a != b);
        panic!(
            "{what}: {} bytes, expected {}; first difference at {at:?}",
            got.len(),
            want.len()
        );
    }
}

fn recover(img: MemDevice, config: MountConfig) -> Lsfs {
    assert_clean(&fsck_bytes(img.bytes()), "crash image");
    Lsfs::open(Box::new(img), config).expect("recovery")
}

/// The writes of one transaction, as SQLite makes them: whole pages here
/// and there, one partial, one past the end. Returns the contents after.
fn transaction(fs: &mut Lsfs, ino: Ino, old: &[u8]) -> Vec<u8> {
    let mut new = old.to_vec();
    let mut put = |fs: &mut Lsfs, off: usize, data: Vec<u8>| {
        assert_eq!(
            fs.write(ino, off as u64, &data).unwrap() as usize,
            data.len()
        );
        if new.len() < off + data.len() {
            new.resize(off + data.len(), 0);
        }
        new[off..off + data.len()].copy_from_slice(&data);
    };
    put(fs, 0, pattern(11, BLOCK));
    put(fs, 5 * BLOCK, pattern(12, 3 * BLOCK));
    put(fs, 2 * BLOCK + 100, pattern(13, 300));
    let end = old.len();
    put(fs, end + 1000, pattern(14, 2 * BLOCK));
    new
}

/// A file in atomic mode, then everything that might carry its pending
/// writes to the device (another file's fsync, a checkpoint, a snapshot,
/// the file's own fsync): a crash, at the end of that, keeps the old
/// contents, and so does the snapshot. The writer reads its own writes.
/// The commit is one record and one flush, and a crash after any
/// operation of it keeps either every write or none.
#[test]
fn a_crash_keeps_all_of_a_commit_or_none() {
    let mut fs = mkfs(64 * MIB, cfg());
    let base = image(&mut fs);
    drop(fs);
    let (dev, log) = CrashDevice::new(MemDevice::from_bytes(base));
    let mut fs = Lsfs::open(Box::new(dev), cfg()).unwrap();
    let ino = create(&mut fs, "db");
    let other = create(&mut fs, "other");
    let old = pattern(1, 10 * BLOCK + 123);
    fs.write(ino, 0, &old).unwrap();
    fs.fsync(ino, false).unwrap();

    fs.atomic_start(ino).unwrap();
    assert!(fs.atomic_pending(ino));
    let new = transaction(&mut fs, ino, &old);
    assert_eq!(fs.getattr(ino).unwrap().size, new.len() as u64);
    same(
        &contents(&mut fs, "db"),
        &new,
        "the writer reads its writes",
    );
    assert_eq!(
        fs.read(ino, 2 * BLOCK as u64, 500).unwrap(),
        new[2 * BLOCK..2 * BLOCK + 500]
    );

    fs.write(other, 0, &pattern(2, 5 * BLOCK)).unwrap();
    fs.fsync(other, false).unwrap();
    fs.fsync(ino, false).unwrap();
    fs.checkpoint().unwrap();
    let snap = fs.snapshot_create().unwrap();
    let cps = fs.store.stats().checkpoints_written;
    for c in 0..3 {
        // The timer's checkpoints too.
        fs.write(other, 5 * BLOCK as u64 + c * 4, b"more").unwrap();
        fs.clock().advance(std::time::Duration::from_secs(10));
        fs.tick().unwrap();
    }
    assert!(
        fs.store.stats().checkpoints_written >= cps + 3,
        "no timer checkpoints"
    );
    let pending = log.len();
    for seed in 0..4 {
        let mut r = recover(log.crash_image(pending, seed), cfg());
        same(
            &contents(&mut r, "db"),
            &old,
            "pending writes reached the device",
        );
        same(
            &contents(&mut r, "other")[..5 * BLOCK],
            &pattern(2, 5 * BLOCK),
            "the other file",
        );
    }
    let mut snapcfg = cfg();
    snapcfg.checkpoint = Some(snap);
    let mut view = Lsfs::open(Box::new(log.image_after(pending)), snapcfg).unwrap();
    same(
        &contents(&mut view, "db"),
        &old,
        "the snapshot holds pending writes",
    );

    let (flushes, records) = (log.flush_count(), fs.store.stats().dsync_records_written);
    fs.atomic_commit(ino).unwrap();
    assert!(!fs.atomic_pending(ino));
    assert_eq!(log.flush_count() - flushes, 1, "a commit is one flush");
    assert_eq!(
        fs.store.stats().dsync_records_written - records,
        1,
        "one fsync record"
    );
    assert_eq!(fs.atomic.stats.commits, 1);
    same(&contents(&mut fs, "db"), &new, "contents");
    let committed = log.len();
    assert!(committed > pending);

    // Every crash point inside the commit, several losses of unflushed writes each.
    for nops in pending..=committed {
        for seed in 0..6 {
            let mut r = recover(log.crash_image(nops, seed), cfg());
            let got = contents(&mut r, "db");
            if nops == committed {
                assert_eq!(got, new, "lost a commit that returned");
            } else {
                assert!(
                    got == old || got == new,
                    "a commit half kept at op {nops}, seed {seed}"
                );
            }
        }
    }
    // An fsync right after the commit (SQLite makes one) has nothing to write.
    let flushes = log.flush_count();
    fs.fsync(ino, false).unwrap();
    assert_eq!(
        log.flush_count(),
        flushes,
        "an fsync after the commit flushed"
    );
    assert_eq!(fs.atomic.stats.fsyncs_skipped, 1);
    // Later writes are ordinary again.
    fs.write(ino, 0, b"plain").unwrap();
    fs.fsync(ino, false).unwrap();
    let mut r = recover(log.crash_image(log.len(), 0), cfg());
    let mut want = new.clone();
    want[..5].copy_from_slice(b"plain");
    same(&contents(&mut r, "db"), &want, "contents");
}

/// Abort drops the set with no device I/O at all; the file reads as
/// before and takes ordinary writes again; a commit of a file not in
/// atomic mode is its fsync; abort without start does nothing.
#[test]
fn abort_drops_the_writes_without_device_io() {
    let mut fs = mkfs(64 * MIB, cfg());
    let base = image(&mut fs);
    drop(fs);
    let (dev, log) = CrashDevice::new(MemDevice::from_bytes(base));
    let mut fs = Lsfs::open(Box::new(dev), cfg()).unwrap();
    let ino = create(&mut fs, "db");
    let old = pattern(3, 3 * BLOCK);
    fs.write(ino, 0, &old).unwrap();
    fs.fsync(ino, false).unwrap();
    fs.atomic_start(ino).unwrap();
    fs.atomic_start(ino).unwrap(); // again: no change
    transaction(&mut fs, ino, &old);
    let ops = log.len();
    fs.atomic_abort(ino).unwrap();
    assert_eq!(log.len(), ops, "abort wrote to the device");
    assert!(!fs.atomic_pending(ino));
    assert_eq!(fs.getattr(ino).unwrap().size, old.len() as u64);
    same(&contents(&mut fs, "db"), &old, "contents");
    fs.atomic_abort(ino).unwrap();
    assert_eq!(fs.atomic.stats.aborts, 1);

    // Not in atomic mode: commit is fsync, one flush, and durable.
    fs.write(ino, 0, b"after").unwrap();
    let flushes = log.flush_count();
    fs.atomic_commit(ino).unwrap();
    assert_eq!(log.flush_count() - flushes, 1);
    let mut r = recover(log.crash_image(log.len(), 1), cfg());
    assert_eq!(&contents(&mut r, "db")[..5], b"after");
    // Only regular files.
    assert_eq!(fs.atomic_start(ROOT_INO), Err(Errno::INVAL));
}

/// Past the per-file bound a write fails with EFBIG, past the mount's
/// with ENOSPC; the set is then broken: later writes and the commit fail
/// the same way, the commit drops it, and nothing of it is ever applied.
#[test]
fn the_bounds_refuse_and_never_commit_in_part() {
    // Default cache: the constants themselves are the bounds.
    let mut fs = mkfs(128 * MIB, MountConfig::default());
    assert_eq!(fs.atomic_mount_max_blocks(), MOUNT_MAX_BLOCKS);
    let a = create(&mut fs, "a");
    fs.write(a, 0, b"old").unwrap();
    fs.atomic_start(a).unwrap();
    let full = vec![7u8; FILE_MAX_BLOCKS as usize * BLOCK];
    fs.write(a, 0, &full).unwrap();
    assert_eq!(fs.atomic.blocks(), FILE_MAX_BLOCKS);
    // Rewriting held blocks costs nothing more.
    fs.write(a, 4096, &[8u8; 8192]).unwrap();
    assert_eq!(fs.write(a, full.len() as u64, b"x"), Err(Errno::FBIG));
    assert_eq!(
        fs.write(a, 0, b"y"),
        Err(Errno::FBIG),
        "a broken set takes no writes"
    );
    assert_eq!(fs.atomic_commit(a), Err(Errno::FBIG));
    assert!(!fs.atomic_pending(a), "the broken set is dropped");
    same(&contents(&mut fs, "a"), b"old", "contents");

    // The mount's bound over several files.
    let per = FILE_MAX_BLOCKS as usize;
    let files: Vec<Ino> = (0..MOUNT_MAX_BLOCKS as usize / per + 1)
        .map(|i| create(&mut fs, &format!("f{i}")))
        .collect();
    let (last, full_ones) = files.split_last().unwrap();
    for &f in full_ones {
        fs.atomic_start(f).unwrap();
        fs.write(f, 0, &vec![1u8; per * BLOCK]).unwrap();
    }
    assert_eq!(fs.atomic.blocks(), MOUNT_MAX_BLOCKS);
    fs.atomic_start(*last).unwrap();
    assert_eq!(fs.write(*last, 0, b"z"), Err(Errno::NOSPC));
    assert_eq!(fs.atomic_commit(*last), Err(Errno::NOSPC));
    // The others still commit whole.
    for &f in full_ones {
        fs.atomic_commit(f).unwrap();
        assert_eq!(fs.getattr(f).unwrap().size, (per * BLOCK) as u64);
    }
    assert_eq!(fs.atomic.blocks(), 0);
    let img = MemDevice::from_bytes(image(&mut fs));
    let mut r = recover(img, MountConfig::default());
    same(&contents(&mut r, "f0"), &vec![1u8; per * BLOCK], "f0");
    same(&contents(&mut r, "a"), b"old", "contents");
    assert_eq!(contents(&mut r, &format!("f{}", files.len() - 1)), b"");

    // A small cache lowers the mount's bound to a quarter of it.
    let mut small = mkfs(16 * MIB, cfg());
    assert_eq!(small.atomic_mount_max_blocks(), 64);
    let s = create(&mut small, "s");
    small.atomic_start(s).unwrap();
    small.write(s, 0, &vec![2u8; 64 * BLOCK]).unwrap();
    assert_eq!(small.write(s, 64 * BLOCK as u64, b"!"), Err(Errno::FBIG));
}

/// A commit that fills the cache's dirty half checkpoints first, then
/// still writes one record: a set as large as the bound on a small cache.
#[test]
fn a_large_commit_on_a_small_cache_stays_whole() {
    let mut fs = mkfs(16 * MIB, cfg());
    let base = image(&mut fs);
    drop(fs);
    let (dev, log) = CrashDevice::new(MemDevice::from_bytes(base));
    let mut fs = Lsfs::open(Box::new(dev), cfg()).unwrap();
    let ino = create(&mut fs, "big");
    let other = create(&mut fs, "other");
    fs.write(ino, 0, &pattern(5, 64 * BLOCK)).unwrap();
    fs.fsync(ino, false).unwrap();
    fs.atomic_start(ino).unwrap();
    fs.write(ino, 0, &pattern(6, 64 * BLOCK)).unwrap();
    // Dirty blocks of another file fill the cache's dirty half.
    fs.write(other, 0, &pattern(7, 100 * BLOCK)).unwrap();
    let before = log.len();
    fs.atomic_commit(ino).unwrap();
    for nops in before..=log.len() {
        let mut r = recover(log.crash_image(nops, nops as u64), cfg());
        let got = contents(&mut r, "big");
        assert!(
            got == pattern(5, 64 * BLOCK) || got == pattern(6, 64 * BLOCK),
            "half a commit at op {nops}"
        );
    }
    let mut r = recover(log.crash_image(log.len(), 3), cfg());
    same(
        &contents(&mut r, "big"),
        &pattern(6, 64 * BLOCK),
        "contents",
    );
}

/// The last close drops the set (as F2FS at the last writer's release); a
/// file unlinked while pending keeps its set until it is deleted, and a
/// commit in between is harmless; truncating a pending file is EBUSY.
#[test]
fn close_unlink_and_truncate_of_a_pending_file() {
    let mut fs = mkfs(64 * MIB, cfg());
    let ino = create(&mut fs, "db");
    fs.write(ino, 0, b"old").unwrap();
    fs.open(ino, libc::O_RDWR).unwrap();
    fs.open(ino, libc::O_RDONLY).unwrap();
    fs.atomic_start(ino).unwrap();
    fs.write(ino, 0, b"new").unwrap();
    let trunc = SetAttr {
        size: Some(1),
        ..Default::default()
    };
    assert_eq!(fs.setattr(ino, &trunc).map(|_| ()), Err(Errno::BUSY));
    fs.release(ino);
    assert!(fs.atomic_pending(ino), "dropped while still open");
    fs.release(ino);
    assert!(!fs.atomic_pending(ino));
    assert_eq!(fs.atomic.stats.dropped, 1);
    same(&contents(&mut fs, "db"), b"old", "contents");
    fs.setattr(ino, &trunc).unwrap();

    // Unlinked while open and pending.
    fs.open(ino, libc::O_RDWR).unwrap();
    fs.atomic_start(ino).unwrap();
    fs.write(ino, 0, b"gone").unwrap();
    fs.unlink(ROOT_INO, b"db").unwrap();
    assert!(fs.atomic_pending(ino));
    assert_eq!(fs.read(ino, 0, 10).unwrap(), b"gone");
    fs.atomic_commit(ino).unwrap();
    fs.atomic_start(ino).unwrap();
    fs.write(ino, 0, b"again").unwrap();
    fs.forget(ino, 1);
    fs.release(ino);
    assert!(!fs.atomic_pending(ino));
    assert!(fs.getattr(ino).is_err(), "deleted at its last close");
    let img = MemDevice::from_bytes(image(&mut fs));
    let mut r = recover(img, cfg());
    assert!(r.lookup(ROOT_INO, b"db").is_err());
}

/// ENOSPC at commit is found before anything is applied: the set stays
/// pending, a crash keeps none of it, and once space is freed the same
/// set commits.
#[test]
fn enospc_at_commit_keeps_the_set_pending() {
    let mut fs = mkfs(24 * MIB, cfg_no_protection());
    let ino = create(&mut fs, "db");
    fs.write(ino, 0, &pattern(8, 4 * BLOCK)).unwrap();
    fs.fsync(ino, false).unwrap();
    fs.atomic_start(ino).unwrap();
    fs.write(ino, 0, &pattern(9, 60 * BLOCK)).unwrap();
    // Fill the device.
    let fill = create(&mut fs, "fill");
    let chunk = vec![3u8; 32 * BLOCK];
    let mut off = 0u64;
    loop {
        match fs.write(fill, off, &chunk) {
            Ok(_) => off += chunk.len() as u64,
            Err(e) => {
                assert_eq!(e, Errno::NOSPC);
                break;
            }
        }
    }
    assert_eq!(fs.atomic_commit(ino), Err(Errno::NOSPC));
    assert!(fs.atomic_pending(ino), "ENOSPC dropped the set");
    same(
        &contents(&mut fs, "db"),
        &pattern(9, 60 * BLOCK),
        "still the writer's view",
    );
    fs.checkpoint().unwrap();
    let mut r = recover(MemDevice::from_bytes(image(&mut fs)), cfg_no_protection());
    same(&contents(&mut r, "db"), &pattern(8, 4 * BLOCK), "contents");
    drop(r);
    fs.unlink(ROOT_INO, b"fill").unwrap();
    fs.checkpoint().unwrap();
    fs.atomic_commit(ino).unwrap();
    let mut r = recover(MemDevice::from_bytes(image(&mut fs)), cfg_no_protection());
    same(&contents(&mut r, "db"), &pattern(9, 60 * BLOCK), "contents");
}

/// Several files committed as one unit (`atomic_commit_files`, docs/ATOMIC.md):
/// one flush, and a crash after any device operation of the commit keeps
/// every file's set or none, never one without the other. A listed file
/// not in atomic mode is made durable with them.
#[test]
fn several_files_commit_as_one_unit() {
    // Data streams from the start: the larger set goes to a data-stream
    // record that the log's record names.
    let mut config = cfg();
    config.store.streams_min_segments = 0;
    let cfg = || config.clone();
    let mut fs = mkfs(64 * MIB, cfg());
    let base = image(&mut fs);
    drop(fs);
    let (dev, log) = CrashDevice::new(MemDevice::from_bytes(base));
    let mut fs = Lsfs::open(Box::new(dev), cfg()).unwrap();
    let (a, b, c) = (
        create(&mut fs, "a"),
        create(&mut fs, "b"),
        create(&mut fs, "c"),
    );
    let (a_old, b_old) = (pattern(20, 12 * BLOCK), pattern(21, 3 * BLOCK));
    fs.write(a, 0, &a_old).unwrap();
    fs.write(b, 0, &b_old).unwrap();
    fs.fsync(a, false).unwrap();
    fs.fsync(b, false).unwrap();
    fs.atomic_start(a).unwrap();
    fs.atomic_start(b).unwrap();
    // Ten blocks: the commit puts them in a data-stream record of their own.
    let a_new = transaction(&mut fs, a, &a_old);
    fs.write(a, 0, &pattern(22, 10 * BLOCK)).unwrap();
    let mut a_new = a_new;
    a_new[..10 * BLOCK].copy_from_slice(&pattern(22, 10 * BLOCK));
    let b_new = transaction(&mut fs, b, &b_old);
    fs.write(c, 0, b"plain, not fsynced").unwrap();
    let (before, flushes) = (log.len(), log.flush_count());
    let streamed = fs.store.stats().dsync_stream_blocks;
    fs.atomic_commit_files(&[b, a, c]).unwrap();
    assert_eq!(log.flush_count() - flushes, 1, "one flush for the unit");
    assert!(
        fs.store.stats().dsync_stream_blocks > streamed,
        "no data-stream record in the commit"
    );
    assert!(!fs.atomic_pending(a) && !fs.atomic_pending(b));
    let after = log.len();
    for nops in before..=after {
        for seed in 0..6 {
            let mut r = recover(log.crash_image(nops, seed), cfg());
            let (ga, gb) = (contents(&mut r, "a"), contents(&mut r, "b"));
            let old = ga == a_old && gb == b_old;
            let new = ga == a_new && gb == b_new;
            assert!(
                old || new,
                "one set without the other at op {nops}, seed {seed}"
            );
            if nops == after {
                assert!(new, "lost a unit that was committed");
                same(
                    &contents(&mut r, "c"),
                    b"plain, not fsynced",
                    "the plain file",
                );
            }
        }
    }

    // The unit's errors.
    assert_eq!(fs.atomic_commit_files(&[]), Err(Errno::INVAL));
    assert_eq!(
        fs.atomic_commit_files(&vec![a; 65]),
        Ok(()),
        "duplicates count once"
    );
    let many: Vec<Ino> = (0..65).map(|i| create(&mut fs, &format!("m{i}"))).collect();
    assert_eq!(fs.atomic_commit_files(&many), Err(Errno::E2BIG));
    assert_eq!(fs.atomic_commit_files(&[ROOT_INO]), Err(Errno::INVAL));
    // A broken set fails the unit: it is dropped, the other stays pending.
    fs.atomic_start(a).unwrap();
    fs.atomic_start(b).unwrap();
    fs.write(b, 0, b"kept pending").unwrap();
    let max = fs.atomic_mount_max_blocks() as usize;
    assert_eq!(
        fs.write(a, 0, &vec![1u8; (max + 1) * BLOCK]),
        Err(Errno::FBIG)
    );
    assert_eq!(fs.atomic_commit_files(&[a, b]), Err(Errno::FBIG));
    assert!(!fs.atomic_pending(a) && fs.atomic_pending(b));
    same(&contents(&mut fs, "a"), &a_new, "a after its broken set");
    fs.atomic_abort_files(&[a, b]).unwrap();
    same(&contents(&mut fs, "b"), &b_new, "b after the abort");
}
