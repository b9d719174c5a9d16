//! Crash consistency. A workload runs on a device that records every write
//! and flush; then, for many crash points (every flush boundary, and random
//! points in between with unflushed writes kept or lost at random), the image
//! a crash would leave must open, pass fsck, and hold every fsync'd file with
//! exactly a content (and xattr) it had at or after its last completed
//! fsync. The workload also creates, links, renames and unlinks files and
//! makes and removes directories, punches holes and zeroes ranges in the
//! durable files, fsyncing new and renamed files and the
//! directory: the directory's names must be those after some operation
//! since the last completed fsync, sync or checkpoint, and every file
//! fsync'd before the crash holds its contents under each name it has.
//! Also: a failing device turns the mount read-only without losing what was
//! durable.

mod common;
use common::*;
use lsfs_core::device::{CrashDevice, CrashLog, MemDevice};
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_vfs::{
    Errno, SetAttr, Vfs, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE, ROOT_INO,
};
use rand::{Rng, SeedableRng};
use std::collections::{BTreeSet, HashMap};

const DEV_BYTES: u64 = 24 * MIB;

/// Plain checkpoints expire at once and the clock moves one second a step,
/// so reclaim frees segments while the workload runs (crashes hit it too).
/// Write streams are on (the image is below their default size), so
/// crashes hit data-stream records too.
fn crash_cfg() -> MountConfig {
    let mut c = cfg_no_protection();
    c.store.streams_min_segments = 0;
    c
}

/// What a durable file holds: its contents and its xattr `user.v`.
type Version = (Vec<u8>, Option<Vec<u8>>);

/// The contents one durable file went through.
struct Tracked {
    name: Vec<u8>,
    ino: u64,
    /// (log length before the operation that produced it, contents and xattr)
    versions: Vec<(usize, Version)>,
    /// (log length after fsync returned, index into `versions`)
    fsyncs: Vec<(usize, usize)>,
}

/// The root directory's names after one operation: (log length before and
/// after the operation, the names).
type Listing = (usize, usize, BTreeSet<Vec<u8>>);

struct Recorded {
    log: CrashLog,
    files: Vec<Tracked>,
    /// User blocks written into holes (threaded logging) while recording.
    plugged: u64,
    /// fsync'd blocks written to data streams (named by the fsync record).
    stream_fsynced: u64,
    /// DAT blocks checkpoints kept journaled instead of writing them.
    dat_journaled: u64,
    /// Bytes of freed segments discarded (logged as writes of zeros).
    discarded: u64,
    /// The root's names after each namespace operation, oldest first.
    listings: Vec<Listing>,
    /// Log lengths after each fsync, sync, checkpoint or snapshot returned,
    /// with the number of listings then: every namespace change before is
    /// durable from there.
    durable: Vec<(usize, usize)>,
    /// Scratch files by name (names are never reused): contents, and the
    /// log length after the first fsync of the file, if any.
    scratch: HashMap<Vec<u8>, Scratch>,
}

/// A scratch file's contents, and the log length after its first fsync.
type Scratch = (
    std::rc::Rc<Vec<u8>>,
    std::rc::Rc<std::cell::Cell<Option<usize>>>,
);

/// A nearly full image for threaded logging to plug: ballast files fill
/// most of the space, then half of them are overwritten, so full segments
/// hold dead blocks.
fn near_full_base(config: &MountConfig) -> Vec<u8> {
    let mut fs = mkfs(DEV_BYTES, config.clone());
    let n = (fs.store.free_blocks() * 4096 * 70 / 100 / 16384) as usize;
    let inos = make_files(&mut fs, n, |f| pattern(f as u64, 16384));
    for (i, &ino) in inos.iter().enumerate().step_by(2) {
        fs.write(ino, 0, &pattern(i as u64 + 7, 16384)).unwrap();
        fs.forget(ino, 1);
    }
    fs.sync().unwrap();
    image(&mut fs)
}

fn apply_write(content: &mut Vec<u8>, off: usize, data: &[u8]) {
    if content.len() < off + data.len() {
        content.resize(off + data.len(), 0);
    }
    content[off..off + data.len()].copy_from_slice(data);
}

/// Run a seeded workload on a fresh image and return the recording.
fn run_workload(seed: u64, steps: usize) -> Recorded {
    let mut fs = mkfs(DEV_BYTES, crash_cfg());
    let base = image(&mut fs);
    drop(fs);
    run_workload_on(base, crash_cfg(), seed, steps)
}

/// Run a seeded workload on image `base`, mounted with `config`.
fn run_workload_on(base: Vec<u8>, config: MountConfig, seed: u64, steps: usize) -> Recorded {
    let (dev, log) = CrashDevice::new(MemDevice::from_bytes(base));
    let mut fs = Lsfs::open(Box::new(dev), config).unwrap();
    let clock0 = lsfs_core::meta::store::wall_secs();
    let c = ctx();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    // The names the base image holds.
    let mut names: BTreeSet<Vec<u8>> = fs
        .readdir(ROOT_INO, 0, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .filter(|n| n != b"." && n != b"..")
        .collect();
    let base_names = names.clone();
    let mut listings: Vec<Listing> = vec![(0, 0, names.clone())];
    let mut files: Vec<Tracked> = (0..4)
        .map(|i| {
            let name = format!("durable{i}").into_bytes();
            let before = log.len();
            let a = fs
                .mknod(ROOT_INO, &name, libc::S_IFREG | 0o644, 0, &c)
                .unwrap();
            names.insert(name.clone());
            // Each create on its own: a checkpoint may come between them
            // (the writer takes one when it needs segments the cleaner freed).
            listings.push((before, log.len(), names.clone()));
            Tracked {
                name,
                ino: a.ino,
                versions: vec![(log.len(), (Vec::new(), None))],
                fsyncs: Vec::new(),
            }
        })
        .collect();
    let mut durable = Vec::new();
    type Scratch = (
        std::rc::Rc<Vec<u8>>,
        std::rc::Rc<std::cell::Cell<Option<usize>>>,
    );
    let mut scratch_files: HashMap<Vec<u8>, Scratch> = HashMap::new();
    // Names of scratch files (several may name one inode) and of empty directories.
    let mut scratch: Vec<Vec<u8>> = Vec::new();
    let mut dirs: Vec<Vec<u8>> = Vec::new();
    let mut next_scratch = 0;
    let mut fresh = |prefix: &str| {
        next_scratch += 1;
        format!("{prefix}{next_scratch}").into_bytes()
    };
    for step in 0..steps {
        fs.clock().set_secs(clock0 + step as u64);
        let before = log.len();
        let mut changed_names = false;
        // fsync of a scratch file by name, or of the root (after the change).
        let mut fsync_after: Option<Option<Vec<u8>>> = None;
        match rng.gen_range(0..100) {
            0..=26 => {
                let f = &mut files[rng.gen_range(0..4)];
                let (mut content, x) = f.versions.last().unwrap().1.clone();
                let off = rng.gen_range(0..200_000usize);
                let len = rng.gen_range(1..40_000usize);
                let data = pattern(rng.gen(), len);
                fs.write(f.ino, off as u64, &data).unwrap();
                apply_write(&mut content, off, &data);
                f.versions.push((before, (content, x)));
            }
            27..=29 => {
                // A punch or a zero range: fsync must keep the hole.
                let f = &mut files[rng.gen_range(0..4)];
                let (mut content, x) = f.versions.last().unwrap().1.clone();
                let off = rng.gen_range(0..150_000usize);
                let len = rng.gen_range(1..60_000usize);
                let mode = [
                    FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                    FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
                    FALLOC_FL_ZERO_RANGE,
                ][rng.gen_range(0..3)];
                fs.fallocate(f.ino, off as u64, len as u64, mode).unwrap();
                let end = off + len;
                if mode & FALLOC_FL_KEEP_SIZE == 0 && end > content.len() {
                    content.resize(end, 0);
                }
                let stop = end.min(content.len());
                if off < stop {
                    content[off..stop].fill(0);
                }
                f.versions.push((before, (content, x)));
            }
            30..=34 => {
                let f = &mut files[rng.gen_range(0..4)];
                let (mut content, x) = f.versions.last().unwrap().1.clone();
                let size = rng.gen_range(0..150_000usize);
                fs.setattr(
                    f.ino,
                    &SetAttr {
                        size: Some(size as u64),
                        ..SetAttr::default()
                    },
                )
                .unwrap();
                content.resize(size, 0);
                f.versions.push((before, (content, x)));
            }
            35..=37 => {
                let f = &mut files[rng.gen_range(0..4)];
                let (content, _) = f.versions.last().unwrap().1.clone();
                let v = pattern(rng.gen(), rng.gen_range(1..3000));
                fs.setxattr(f.ino, b"user.v", &v, 0).unwrap();
                f.versions.push((before, (content, Some(v))));
            }
            38..=54 => {
                let i = rng.gen_range(0..4);
                fs.fsync(files[i].ino, false).unwrap();
                let v = files[i].versions.len() - 1;
                files[i].fsyncs.push((log.len(), v));
                durable.push((log.len(), listings.len()));
            }
            55..=66 => {
                let name = fresh("s");
                let a = fs
                    .mknod(ROOT_INO, &name, libc::S_IFREG | 0o644, 0, &c)
                    .unwrap();
                let data = pattern(rng.gen(), rng.gen_range(1..30_000));
                fs.write(a.ino, 0, &data).unwrap();
                fs.forget(a.ino, 1);
                let synced = std::rc::Rc::new(std::cell::Cell::new(None));
                scratch_files.insert(name.clone(), (std::rc::Rc::new(data), synced));
                scratch.push(name.clone());
                changed_names = true;
                if rng.gen_bool(0.5) {
                    fsync_after = Some(Some(name));
                }
            }
            67..=72 if !scratch.is_empty() => {
                let i = rng.gen_range(0..scratch.len());
                let name = scratch.swap_remove(i);
                fs.unlink(ROOT_INO, &name).unwrap();
                changed_names = true;
                if rng.gen_bool(0.3) {
                    fsync_after = Some(None);
                }
            }
            73..=79 if !scratch.is_empty() => {
                let i = rng.gen_range(0..scratch.len());
                let new = fresh("s");
                fs.rename(ROOT_INO, &scratch[i], ROOT_INO, &new, 0).unwrap();
                let moved = scratch_files[&scratch[i]].clone();
                scratch_files.insert(new.clone(), moved);
                scratch[i] = new.clone();
                changed_names = true;
                match rng.gen_range(0..3) {
                    0 => fsync_after = Some(Some(new)),
                    1 => fsync_after = Some(None),
                    _ => {}
                }
            }
            80..=82 if !scratch.is_empty() => {
                let old = scratch[rng.gen_range(0..scratch.len())].clone();
                let new = fresh("s");
                let a = fs.lookup(ROOT_INO, &old).unwrap();
                fs.link(a.ino, ROOT_INO, &new).unwrap();
                fs.forget(a.ino, 2);
                let same = scratch_files[&old].clone();
                scratch_files.insert(new.clone(), same);
                scratch.push(new.clone());
                changed_names = true;
                if rng.gen_bool(0.5) {
                    fsync_after = Some(Some(new));
                }
            }
            83..=85 => {
                if dirs.is_empty() || rng.gen_bool(0.5) {
                    let d = fresh("d");
                    let a = fs.mkdir(ROOT_INO, &d, 0o755, &c).unwrap();
                    fs.forget(a.ino, 1);
                    dirs.push(d);
                } else {
                    let d = dirs.swap_remove(rng.gen_range(0..dirs.len()));
                    fs.rmdir(ROOT_INO, &d).unwrap();
                }
                changed_names = true;
                if rng.gen_bool(0.5) {
                    fsync_after = Some(None);
                }
            }
            86..=89 => {
                fs.checkpoint().unwrap();
                durable.push((log.len(), listings.len()));
            }
            90 => {
                // Snapshots pin dead blocks: crashes meet nsnapshot accounting.
                fs.snapshot_create().unwrap();
                durable.push((log.len(), listings.len()));
            }
            91 => {
                let snaps: Vec<u64> = fs
                    .checkpoints()
                    .iter()
                    .filter(|c| c.is_snapshot())
                    .map(|c| c.cno)
                    .collect();
                if !snaps.is_empty() {
                    let cno = snaps[rng.gen_range(0..snaps.len())];
                    fs.snapshot_set(cno, false).unwrap();
                    durable.push((log.len(), listings.len()));
                }
            }
            92..=93 => {
                // The cleaner moves live blocks: crashes meet relocation.
                fs.clean(
                    3,
                    if step % 2 == 0 {
                        "foreground"
                    } else {
                        "background"
                    },
                )
                .unwrap();
            }
            _ => {
                fs.sync().unwrap();
                durable.push((log.len(), listings.len()));
            }
        }
        if changed_names {
            names = scratch
                .iter()
                .chain(&dirs)
                .chain(files.iter().map(|f| &f.name))
                .chain(&base_names)
                .cloned()
                .collect();
            listings.push((before, log.len(), names.clone()));
        }
        if let Some(target) = fsync_after {
            let ino = match &target {
                Some(name) => fs.lookup(ROOT_INO, name).unwrap().ino,
                None => ROOT_INO,
            };
            fs.fsync(ino, false).unwrap();
            if let Some(name) = target {
                fs.forget(ino, 1);
                let synced = &scratch_files[&name].1;
                if synced.get().is_none() {
                    synced.set(Some(log.len()));
                }
            }
            durable.push((log.len(), listings.len()));
        }
    }
    let plugged = fs.store.plugs().stats().blocks_plugged;
    let stream_fsynced = fs.store.stats().dsync_stream_blocks;
    let dat_journaled = fs.store.stats().dat_blocks_journaled;
    let discarded = fs.store.discard_stats().bytes;
    eprintln!(
        "workload {seed}: {} move records freed {} victims; {} checkpoints",
        fs.store.stats().move_records_written,
        fs.store.stats().segments_freed_by_move_records,
        fs.store.stats().checkpoints_written
    );
    drop(fs); // no unmount: the tail stays unflushed, like a power cut
    Recorded {
        log,
        files,
        plugged,
        stream_fsynced,
        dat_journaled,
        discarded,
        listings,
        durable,
        scratch: scratch_files,
    }
}

/// Open the crash image at `nops` (seed picks which unflushed writes
/// survived), check it with fsck, and check every fsync'd file.
fn check_crash_point(rec: &Recorded, nops: usize, seed: u64, reopen_fsck: bool) {
    let img = rec.log.crash_image(nops, seed);
    if std::env::var("CRASH_DEBUG").is_ok() {
        debug_dump(rec, nops, seed);
    }
    check_image(rec, img.bytes().to_vec(), nops, seed, reopen_fsck);
}

/// `bytes` is what a crash at op `nops` of the workload left (possibly
/// after more crashes during recovery): it must be clean and hold every file
/// fsync'd before `nops`.
fn check_image(rec: &Recorded, bytes: Vec<u8>, nops: usize, seed: u64, reopen_fsck: bool) {
    let report = fsck_bytes(bytes.clone());
    assert_clean(&report, &format!("crash image at op {nops} seed {seed}"));
    let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(bytes)), cfg())
        .unwrap_or_else(|e| panic!("crash image at op {nops} seed {seed} does not open: {e}"));
    for f in &rec.files {
        let Some(&(_, k)) = f.fsyncs.iter().rev().find(|(at, _)| *at <= nops) else {
            continue; // never fsync'd before the crash: anything goes
        };
        let a = fs.lookup(ROOT_INO, &f.name).unwrap_or_else(|e| {
            panic!(
                "op {nops} seed {seed}: fsync'd file {:?} is gone: {e}",
                String::from_utf8_lossy(&f.name)
            )
        });
        let got = fs.read(a.ino, 0, 1 << 20).unwrap();
        let xattr = fs.getxattr(a.ino, b"user.v").ok();
        // Allowed: the fsync'd version or any later one the crash may have caught.
        let ok = f.versions[k..]
            .iter()
            .filter(|(start, _)| *start <= nops)
            .any(|(_, (v, x))| *v == got && *x == xattr);
        if !ok {
            let any = f.versions.iter().position(|(_, (v, _))| *v == got);
            let diff = got
                .iter()
                .zip(&f.versions[k].1 .0)
                .position(|(a, b)| a != b);
            panic!(
                "op {nops} seed {seed}: {:?} has {} bytes (xattr {} bytes) matching none of versions {k}.. \
                 (fsync'd version has {} bytes, first difference at {diff:?}; contents match version {any:?}; \
                 versions start at {:?}; fsyncs {:?})",
                String::from_utf8_lossy(&f.name),
                got.len(),
                xattr.map_or(0, |x| x.len()),
                f.versions[k].1 .0.len(),
                f.versions.iter().map(|v| v.0).collect::<Vec<_>>(),
                f.fsyncs
            );
        }
    }
    // The root's names: as after some operation since the last completed
    // fsync, sync or checkpoint, up to the last one begun before the crash.
    let (last_durable, listed) = rec
        .durable
        .iter()
        .rev()
        .find(|d| d.0 <= nops)
        .copied()
        .unwrap_or((0, 1));
    let lower = listed - 1;
    let upper = rec
        .listings
        .iter()
        .rposition(|l| l.0 < nops)
        .unwrap_or(0)
        .max(lower);
    let got: BTreeSet<Vec<u8>> = fs
        .readdir(ROOT_INO, 0, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .filter(|n| n != b"." && n != b"..")
        .collect();
    if !rec.listings[lower..=upper].iter().any(|l| l.2 == got) {
        let show = |n: &BTreeSet<Vec<u8>>| {
            n.iter()
                .map(|x| String::from_utf8_lossy(x).into_owned())
                .collect::<Vec<_>>()
        };
        panic!(
            "op {nops} seed {seed}: the root holds {:?}, the names after no operation in {lower}..={upper} (last durable at {last_durable}): {:?}",
            show(&got),
            rec.listings[lower..=upper].iter().map(|l| show(&l.2)).collect::<Vec<_>>()
        );
    }
    // Scratch files fsync'd before the crash hold their contents under each name.
    for name in &got {
        let Some((data, synced)) = rec.scratch.get(name) else {
            continue;
        };
        if synced.get().is_some_and(|at| at <= nops) {
            let a = fs.lookup(ROOT_INO, name).unwrap();
            assert_eq!(
                fs.read(a.ino, 0, 1 << 20).unwrap(),
                **data,
                "op {nops} seed {seed}: fsync'd file {:?}",
                String::from_utf8_lossy(name)
            );
        }
    }
    if reopen_fsck {
        // Recovery wrote a checkpoint; that image must be clean too.
        fs.unmount().unwrap();
        assert_clean(
            &fsck_bytes(image(&mut fs)),
            &format!("recovered image of op {nops} seed {seed}"),
        );
    }
}

fn flush_positions(log: &CrashLog) -> Vec<usize> {
    log.ops()
        .iter()
        .enumerate()
        .filter(|(_, o)| matches!(o, lsfs_core::device::LoggedOp::Flush))
        .map(|(i, _)| i + 1)
        .collect()
}

#[test]
fn every_crash_point_recovers_to_a_clean_image_with_fsyncs_kept() {
    let mut checked = 0;
    // One workload by default (about half a minute); CRASH_WORKLOADS=n runs n.
    let workloads: u64 = std::env::var("CRASH_WORKLOADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    for wseed in 1..=workloads {
        let rec = run_workload(wseed, 260);
        assert!(
            rec.stream_fsynced > 0,
            "no fsync wrote to a data stream: the workload did not exercise them"
        );
        assert!(
            rec.dat_journaled > 0,
            "no checkpoint journaled a DAT block: the workload did not exercise the journal"
        );
        checked += check_recording(&rec, wseed, 1);
    }
    eprintln!("crash states checked: {checked}");
}

/// Threaded logging writes user data into the holes of full segments, in
/// place: a crash there must never cost a block any checkpoint on disk
/// still sees. The same workload and checks as above, on a nearly full
/// image with every victim plugged rather than cleaned.
#[test]
fn crashes_while_plugging_holes_recover_to_a_clean_image() {
    let mut config = crash_cfg();
    config.cleaner.threaded_logging = lsfs_core::gc::ThreadedLogging::Always;
    let base = near_full_base(&config);
    let rec = run_workload_on(base, config, 11, 200);
    assert!(
        rec.plugged > 50,
        "only {} blocks plugged: the workload did not exercise threaded logging",
        rec.plugged
    );
    let checked = check_recording(&rec, 11, 2);
    eprintln!(
        "crash states checked: {checked} ({} blocks plugged)",
        rec.plugged
    );
}

/// Continuous discard drops each checkpoint's freed segments right after
/// it; the crash device logs a discard as zeros, kept or lost and ordered
/// like any write of its epoch. A discard of anything a crash image still
/// needs (the recovered checkpoint's blocks, a record roll-forward reads)
/// would fail recovery, fsck or the fsync checks.
#[test]
fn crashes_with_continuous_discard_recover_to_a_clean_image() {
    let mut config = crash_cfg();
    config.store.discard = lsfs_core::meta::discard::DiscardMode::On;
    // Ballast written and deleted just before, within one second, so that
    // its segments are reclaimed (and discarded) only by the workload's
    // checkpoints, a second later.
    let mut fs = mkfs(DEV_BYTES, config.clone());
    fs.clock()
        .set_secs(lsfs_core::meta::store::wall_secs() - 100);
    let n = 32;
    let inos = make_files(&mut fs, n, |f| pattern(f as u64, 256 << 10));
    fs.sync().unwrap();
    for (f, ino) in inos.into_iter().enumerate() {
        fs.forget(ino, 1);
        fs.unlink(ROOT_INO, format!("f{f}").as_bytes()).unwrap();
    }
    fs.sync().unwrap();
    let base = image(&mut fs);
    drop(fs);
    let rec = run_workload_on(base, config, 5, 260);
    assert!(
        rec.discarded >= 4 * MIB,
        "only {} bytes discarded: the workload did not exercise discard",
        rec.discarded
    );
    let checked = check_recording(&rec, 5, 2);
    eprintln!(
        "crash states checked: {checked} ({} MiB discarded)",
        rec.discarded >> 20
    );
}

/// Check crash states of a recording: after every `every`-th flush, between
/// flushes with unflushed writes lost at random, during recovery, and at the
/// end. Returns how many.
fn check_recording(rec: &Recorded, wseed: u64, every: usize) -> usize {
    let mut checked = 0;
    let flushes = flush_positions(&rec.log);
    assert!(
        flushes.len() > 30,
        "workload made only {} flushes",
        flushes.len()
    );
    let mut rng = rand::rngs::StdRng::seed_from_u64(wseed * 1000);
    let mut prev = 0;
    for (i, &f) in flushes.iter().enumerate() {
        if i % every != 0 {
            continue;
        }
        // Right after a flush: nothing unflushed to lose.
        check_crash_point(rec, f, 0, i % 8 == 0);
        checked += 1;
        // Somewhere between the previous flush and this one, losing a
        // random subset of the writes since the last flush.
        if f > prev + 1 {
            let at = rng.gen_range(prev + 1..f);
            for seed in 0..2 {
                check_crash_point(rec, at, seed + i as u64, false);
                checked += 1;
            }
        }
        prev = f;
    }
    // Crashes during recovery itself: recovery must be idempotent.
    for (i, &f) in flushes.iter().enumerate().step_by(9) {
        checked += crash_during_recovery(rec, f, i as u64);
    }
    // The very end, with the unflushed tail lost or partly kept.
    for seed in 0..3 {
        check_crash_point(rec, rec.log.len(), seed, seed == 0);
        checked += 1;
    }
    checked
}

/// Recover the crash image at `nops` on a recording device, then crash
/// that recovery at each of its flushes and between them. Returns the number
/// of states checked.
fn crash_during_recovery(rec: &Recorded, nops: usize, seed: u64) -> usize {
    let img = rec.log.crash_image(nops, seed);
    let (dev, log) = CrashDevice::new(img);
    let fs = Lsfs::open(Box::new(dev), cfg()).expect("recovery");
    drop(fs);
    let mut n = 0;
    let mut prev = 0;
    for f in flush_positions(&log).into_iter().chain([log.len()]) {
        for at in [(prev + f) / 2, f] {
            let again = log.crash_image(at, seed + at as u64);
            check_image(rec, again.bytes().to_vec(), nops, seed, false);
            n += 1;
        }
        prev = f;
    }
    n
}

#[test]
fn write_failure_turns_read_only_and_keeps_durable_data() {
    for fail_after in [0u64, 1, 2, 5] {
        let mut fs = mkfs(DEV_BYTES, cfg());
        let c = ctx();
        let a = fs
            .mknod(ROOT_INO, b"a", libc::S_IFREG | 0o644, 0, &c)
            .unwrap();
        let durable = pattern(1, 70_000);
        fs.write(a.ino, 0, &durable).unwrap();
        fs.fsync(a.ino, false).unwrap();
        let base = image(&mut fs);
        drop(fs);
        let (dev, log) = CrashDevice::new(MemDevice::from_bytes(base));
        let mut fs = Lsfs::open(Box::new(dev), cfg()).unwrap();
        let a = fs.lookup(ROOT_INO, b"a").unwrap();
        log.fail_writes_after(fail_after);
        let b = fs
            .mknod(ROOT_INO, b"b", libc::S_IFREG | 0o644, 0, &c)
            .unwrap();
        fs.write(b.ino, 0, &pattern(2, 50_000)).unwrap();
        // fsync of b writes a checkpoint (its name is new); some device
        // write in it fails. The caller must see EIO, not success.
        let mut errs = Vec::new();
        for _ in 0..20 {
            match fs.fsync(b.ino, false) {
                Ok(()) => {}
                Err(e) => errs.push(e),
            }
            fs.write(b.ino, 0, b"more").ok();
        }
        assert_eq!(
            errs.first(),
            Some(&Errno::IO),
            "fail_after {fail_after}: first error must be EIO, got {errs:?}"
        );
        assert!(
            fs.read_only(),
            "fail_after {fail_after}: not read-only after EIO"
        );
        assert_eq!(fs.write(a.ino, 0, b"x"), Err(Errno::ROFS));
        assert_eq!(
            fs.mknod(ROOT_INO, b"c", libc::S_IFREG | 0o644, 0, &c)
                .map(|_| ()),
            Err(Errno::ROFS)
        );
        // Reads still work.
        assert!(fs.read(a.ino, 0, 100_000).unwrap() == durable);
        drop(fs);
        for seed in 0..3 {
            let img = log.crash_image(log.len(), seed);
            let bytes = img.bytes().to_vec();
            assert_clean(
                &fsck_bytes(bytes.clone()),
                &format!("image after write failure {fail_after} seed {seed}"),
            );
            let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(bytes)), cfg()).unwrap();
            let a = fs.lookup(ROOT_INO, b"a").unwrap();
            assert!(
                fs.read(a.ino, 0, 100_000).unwrap() == durable,
                "fail_after {fail_after} seed {seed}: durable file changed"
            );
        }
    }
}

fn debug_dump(rec: &Recorded, nops: usize, seed: u64) {
    use lsfs_core::device::LoggedOp;
    let ops = rec.log.ops();
    let last_flush = ops[..nops]
        .iter()
        .rposition(|o| matches!(o, LoggedOp::Flush));
    eprintln!("== crash at {nops} seed {seed}, last flush {last_flush:?}");
    for (i, o) in ops
        .iter()
        .enumerate()
        .take(nops + 3)
        .skip(nops.saturating_sub(30))
    {
        match o {
            LoggedOp::Flush => eprintln!("{i}: flush"),
            LoggedOp::Write { offset, data } => {
                let blk = offset / 4096;
                let h = lsfs_core::log::record::RecordHeader::decode(data, "dbg");
                match h {
                    Ok(h) => eprintln!(
                        "{i}: record at {blk} seq {} cno {} flags {} n {} entries {:?}",
                        h.seq,
                        h.cno,
                        h.flags,
                        h.nblocks,
                        h.entries
                            .iter()
                            .filter(|e| e.ino >= 16)
                            .map(|e| (e.ino, e.offset, e.vblock, e.kind))
                            .collect::<Vec<_>>()
                    ),
                    Err(_) => eprintln!("{i}: write at block {blk} ({} bytes)", data.len()),
                }
            }
        }
    }
}

/// Names, sizes and contents of the root directory (the crash workload is flat).
fn flat_dump(fs: &mut Lsfs) -> Vec<(Vec<u8>, u64, Vec<u8>)> {
    let mut out = Vec::new();
    for e in fs.readdir(ROOT_INO, 0, usize::MAX).unwrap() {
        if e.name == b"." || e.name == b".." {
            continue;
        }
        let a = fs.lookup(ROOT_INO, &e.name).unwrap();
        let data = match a.kind {
            lsfs_vfs::FileKind::File => fs.read(a.ino, 0, 1 << 21).unwrap(),
            _ => Vec::new(),
        };
        out.push((e.name, a.size, data));
    }
    out.sort();
    out
}

/// The superblocks are written alternately, so a torn write of the newer
/// one leaves the older one, which names an older checkpoint. Recovery from
/// there must roll forward to exactly the same file system.
#[test]
fn losing_the_newer_superblock_loses_nothing() {
    let rec = run_workload(3, 160);
    let flushes = flush_positions(&rec.log);
    let mut compared = 0;
    for &f in flushes.iter().step_by(3) {
        let bytes = rec.log.crash_image(f, 0).bytes().to_vec();
        let mut dev = MemDevice::from_bytes(bytes.clone());
        let sbs = lsfs_core::inspect::superblock(&mut dev).unwrap();
        let seqs: Vec<u64> = sbs
            .iter()
            .map(|c| c.superblock.as_ref().map_or(0, |s| s.sb_seq))
            .collect();
        let (a, b) = (&sbs[0], &sbs[1]);
        let (Some(sa), Some(sb)) = (&a.superblock, &b.superblock) else {
            continue;
        };
        if sa.cp_cno == sb.cp_cno {
            continue; // both name the same checkpoint: nothing to compare
        }
        let newer = if seqs[0] > seqs[1] { a.block } else { b.block } as usize;
        let mut torn = bytes.clone();
        torn[newer * 4096 + 200..newer * 4096 + 400].fill(0xAB);
        let mut whole = Lsfs::open(Box::new(MemDevice::from_bytes(bytes)), cfg()).unwrap();
        let mut older = Lsfs::open(Box::new(MemDevice::from_bytes(torn.clone())), cfg())
            .unwrap_or_else(|e| panic!("flush {f}: the older superblock does not open: {e}"));
        assert!(
            flat_dump(&mut whole) == flat_dump(&mut older),
            "flush {f}: recovery from the older superblock differs"
        );
        drop(older);
        assert_clean(
            &fsck_bytes(torn),
            &format!("flush {f} with a torn superblock"),
        );
        compared += 1;
    }
    assert!(compared >= 5, "only {compared} points compared");
}

/// Every superblock write of one epoch torn (only its first sector lands):
/// the other copy must still name a checkpoint. Found by tests/ace.rs: the
/// checkpoint at mount left its superblock write unflushed, and
/// settle_superblocks wrote the other copy in the same epoch.
#[test]
fn tearing_every_superblock_write_of_an_epoch_leaves_a_mountable_image() {
    use lsfs_core::device::{CrashState, LoggedOp, PartialWrite, Sectors};
    let mut fs = mkfs(DEV_BYTES, cfg());
    let c = ctx();
    let a = fs
        .mknod(ROOT_INO, b"a", libc::S_IFREG | 0o644, 0, &c)
        .unwrap();
    fs.write(a.ino, 0, &pattern(1, 9000)).unwrap();
    fs.unmount().unwrap();
    let base = image(&mut fs);
    drop(fs);
    let (dev, log) = CrashDevice::new(MemDevice::from_bytes(base));
    let mut fs = Lsfs::open(Box::new(dev), cfg()).unwrap();
    fs.write(a.ino, 0, b"new").unwrap();
    fs.sync().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let last_block = DEV_BYTES / 4096 - 1;
    let ops = log.ops();
    let mut torn_epochs = 0;
    for epoch in log.epochs() {
        let writes: Vec<PartialWrite> = epoch
            .writes
            .iter()
            .map(|&op| {
                let LoggedOp::Write { offset, .. } = &ops[op] else {
                    unreachable!()
                };
                let sb = [0, last_block].contains(&(offset / 4096));
                PartialWrite {
                    op,
                    sectors: if sb {
                        Sectors::Only(vec![0])
                    } else {
                        Sectors::All
                    },
                }
            })
            .collect();
        torn_epochs += writes.iter().any(|w| w.sectors != Sectors::All) as usize;
        let st = CrashState {
            durable_ops: epoch.durable_ops,
            writes,
            flip_bits: vec![],
        };
        let img = log.materialize(&st).unwrap();
        let bytes = img.bytes().to_vec();
        assert_clean(&fsck_bytes(bytes.clone()), &format!("crash state {st}"));
        let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(bytes)), cfg())
            .unwrap_or_else(|e| panic!("crash state {st} does not open: {e}"));
        assert!(fs.lookup(ROOT_INO, b"a").is_ok());
    }
    assert!(
        torn_epochs >= 3,
        "only {torn_epochs} epochs wrote a superblock"
    );
}

/// fsync of a file whose name is durable must keep the xattrs it set (the
/// record carries them as operations; before operations were logged, an
/// xattr change needed a checkpoint). Found by tests/ace.rs.
#[test]
fn fsync_keeps_a_files_xattrs() {
    for datasync in [false, true] {
        let mut fs = mkfs(DEV_BYTES, cfg());
        let c = ctx();
        let a = fs
            .mknod(ROOT_INO, b"a", libc::S_IFREG | 0o644, 0, &c)
            .unwrap();
        fs.write(a.ino, 0, &pattern(1, 5000)).unwrap();
        fs.setxattr(a.ino, b"user.gone", b"old", 0).unwrap();
        fs.unmount().unwrap();
        let base = image(&mut fs);
        drop(fs);
        let (dev, log) = CrashDevice::new(MemDevice::from_bytes(base));
        let mut fs = Lsfs::open(Box::new(dev), cfg()).unwrap();
        fs.setxattr(a.ino, b"user.new", b"value", 0).unwrap();
        fs.removexattr(a.ino, b"user.gone").unwrap();
        fs.fsync(a.ino, datasync).unwrap();
        drop(fs);
        // Right after the fsync's last flush; nothing written since survives.
        let at = log.epochs().last().unwrap().durable_ops;
        let img = log
            .materialize(&lsfs_core::device::CrashState::at_flush(at))
            .unwrap();
        let mut fs =
            Lsfs::open(Box::new(MemDevice::from_bytes(img.bytes().to_vec())), cfg()).unwrap();
        let a = fs.lookup(ROOT_INO, b"a").unwrap();
        assert_eq!(
            fs.listxattr(a.ino).unwrap(),
            vec![b"user.new".to_vec()],
            "datasync {datasync}"
        );
        assert_eq!(fs.getxattr(a.ino, b"user.new").unwrap(), b"value");
    }
}

/// A checkpoint spanning segments lost its first record but not the
/// others. Recovery writes its own checkpoint where that first record was;
/// the lost checkpoint's next record, at the start of the segment the log
/// had reserved next, must not become the chain's next record (it did when
/// recovery reused the sequence numbers the crashed run had used: the
/// chain then ended at a super root whose blocks recovery had overwritten).
/// Found by tests/ace.rs (crashing recoveries); checked after a complete
/// recovery and at every flush of it.
#[test]
fn records_after_a_lost_one_never_join_the_recovered_chain() {
    let opts = lsfs_core::meta::open::MkfsOptions {
        segment_blocks: 64,
        label: "stale".into(),
    };
    let mut config = cfg();
    config.store.streams = false;
    let dev = MemDevice::new((32 * 64 + 2) * 4096);
    let mut fs = Lsfs::mkfs(Box::new(dev), &opts, config.clone()).unwrap();
    let a = fs
        .mknod(ROOT_INO, b"a", libc::S_IFREG | 0o644, 0, &ctx())
        .unwrap();
    fs.write(a.ino, 0, &pattern(1, 20_000)).unwrap();
    fs.unmount().unwrap();
    let base = image(&mut fs);
    drop(fs);
    let (dev, log) = CrashDevice::new(MemDevice::from_bytes(base));
    let mut fs = Lsfs::open(Box::new(dev), config.clone()).unwrap();
    let start = log.len();
    fs.write(a.ino, 0, &pattern(2, 150 * 4096)).unwrap();
    fs.sync().unwrap();
    drop(fs);
    // The sync's records: one write each, then its flush.
    let ops = log.ops();
    let writes: Vec<usize> = (start..ops.len())
        .take_while(|&i| !matches!(ops[i], lsfs_core::device::LoggedOp::Flush))
        .collect();
    assert!(
        writes.len() >= 3,
        "the checkpoint spans {} records",
        writes.len()
    );
    let lost_first = lsfs_core::device::CrashState {
        durable_ops: start,
        writes: writes[1..]
            .iter()
            .map(|&op| lsfs_core::device::PartialWrite {
                op,
                sectors: lsfs_core::device::Sectors::All,
            })
            .collect(),
        flip_bits: Vec::new(),
    };
    let img = log.materialize(&lost_first).unwrap();
    let want = pattern(1, 20_000);
    let check = |bytes: Vec<u8>, what: &str| {
        assert_clean(&fsck_bytes(bytes.clone()), what);
        let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(bytes)), cfg()).unwrap();
        let a = fs.lookup(ROOT_INO, b"a").unwrap();
        assert_eq!(fs.read(a.ino, 0, 1 << 20).unwrap(), want, "{what}");
    };
    let (dev, rlog) = CrashDevice::new(img);
    let mut fs = Lsfs::open(Box::new(dev), config).unwrap();
    let done = image(&mut fs);
    drop(fs);
    check(done, "after recovery");
    for f in flush_positions(&rlog) {
        let img = rlog
            .materialize(&lsfs_core::device::CrashState::at_flush(f))
            .unwrap();
        check(
            img.bytes().to_vec(),
            &format!("recovery crashed at its flush {f}"),
        );
    }
}

// ---- device errors ----

/// A file system with a hashed directory, an extent file, an inline file,
/// a symlink and an xattr, unmounted; and what each holds.
fn error_image() -> (Vec<u8>, Vec<u8>) {
    let mut fs = mkfs(DEV_BYTES, cfg());
    let c = ctx();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, &c).unwrap();
    for i in 0..300 {
        fs.mknod(
            d.ino,
            format!("entry{i}").as_bytes(),
            libc::S_IFREG | 0o644,
            0,
            &c,
        )
        .unwrap();
    }
    let big = fs
        .mknod(ROOT_INO, b"big", libc::S_IFREG | 0o644, 0, &c)
        .unwrap();
    let data = pattern(9, 400_000);
    fs.write(big.ino, 0, &data).unwrap();
    fs.setxattr(big.ino, b"user.x", b"xv", 0).unwrap();
    fs.symlink(ROOT_INO, b"link", b"big", &c).unwrap();
    fs.unmount().unwrap();
    (image(&mut fs), data)
}

/// Read-only calls over the whole tree: each result is either what the
/// image holds or EIO. Returns how many calls saw EIO.
fn read_everything(fs: &mut Lsfs, data: &[u8]) -> usize {
    let mut eio = 0;
    let mut check = |r: Result<bool, Errno>, what: &str| match r {
        Ok(true) => {}
        Ok(false) => panic!("{what}: wrong result under read errors"),
        Err(e) => {
            assert_eq!(e, Errno::IO, "{what}: a read error must surface as EIO");
            eio += 1;
        }
    };
    check(
        fs.lookup(ROOT_INO, b"d").and_then(|d| {
            let n = fs.readdir(d.ino, 0, usize::MAX)?.len();
            let e = fs.lookup(d.ino, b"entry217")?;
            Ok(n == 302 && e.size == 0)
        }),
        "directory",
    );
    check(
        fs.lookup(ROOT_INO, b"big").and_then(|b| {
            let mid = fs.read(b.ino, 200_000, 70_000)?;
            let all = fs.read(b.ino, 0, 1 << 20)?;
            let x = fs.getxattr(b.ino, b"user.x")?;
            Ok(mid == data[200_000..270_000] && all == data && x == b"xv")
        }),
        "big file",
    );
    check(
        fs.lookup(ROOT_INO, b"link")
            .and_then(|l| Ok(fs.readlink(l.ino)? == b"big")),
        "symlink",
    );
    eio
}

fn faulty_mount(img: &[u8], cache_blocks: usize) -> (Lsfs, lsfs_core::device::FaultPlan) {
    let (dev, plan) =
        lsfs_core::device::FaultDevice::new(Box::new(MemDevice::from_bytes(img.to_vec())));
    let mut c = cfg();
    c.store.cache_blocks = cache_blocks;
    (Lsfs::open(Box::new(dev), c).unwrap(), plan)
}

/// EIO from any one device read, or from every read of a block range,
/// reaches the caller as EIO: no panic, no wrong data, and once the device
/// reads again everything is there.
#[test]
fn read_errors_surface_as_eio() {
    let (img, data) = error_image();
    let mut saw = 0;
    for n in 0..120 {
        let (mut fs, plan) = faulty_mount(&img, 64);
        plan.fail_read_op(plan.reads_seen() + n);
        let (errs, events) = logged(|| read_everything(&mut fs, &data));
        saw += errs;
        plan.clear();
        assert_eq!(
            read_everything(&mut fs, &data),
            0,
            "read {n}: not readable after the error"
        );
        // Any read error stops writes (a change may have been half done), with a reason logged.
        assert_eq!(fs.read_only(), errs > 0, "read {n}");
        if errs > 0 {
            assert!(
                events
                    .iter()
                    .any(|e| e.starts_with("ERROR") && e.contains("injected read error")),
                "{events:?}"
            );
            assert_eq!(
                fs.mknod(ROOT_INO, b"x", libc::S_IFREG | 0o644, 0, &ctx())
                    .map(|_| ()),
                Err(Errno::ROFS)
            );
        }
    }
    assert!(saw > 10, "only {saw} calls saw an injected error");
    // A bad range: every block between the two superblocks.
    let (mut fs, plan) = faulty_mount(&img, 64);
    plan.fail_reads_in(4096..DEV_BYTES - 4096);
    assert!(read_everything(&mut fs, &data) > 0);
    assert!(!plan.injected().is_empty());
    plan.clear();
    assert_eq!(read_everything(&mut fs, &data), 0);
}

/// A read error in the middle of a change (read-modify-write of a block, a
/// directory insert, a truncate) fails that call with EIO and leaves a file
/// system that still syncs to a clean image.
#[test]
fn read_errors_during_changes_leave_a_consistent_file_system() {
    let (img, _) = error_image();
    let c = ctx();
    for n in 0..60 {
        let (mut fs, plan) = faulty_mount(&img, 16);
        let d = fs.lookup(ROOT_INO, b"d").unwrap().ino;
        let big = fs.lookup(ROOT_INO, b"big").unwrap().ino;
        plan.fail_read_op(plan.reads_seen() + n);
        let results = [
            fs.write(big, 123_456, b"hello").map(|_| ()),
            fs.mknod(d, b"new", libc::S_IFREG | 0o644, 0, &c)
                .map(|_| ()),
            fs.unlink(d, b"entry5"),
            fs.setattr(
                big,
                &SetAttr {
                    size: Some(250_000),
                    ..SetAttr::default()
                },
            )
            .map(|_| ()),
            fs.rename(d, b"entry7", ROOT_INO, b"moved", 0),
        ];
        for r in &results {
            assert!(
                matches!(r, Ok(()) | Err(Errno::IO) | Err(Errno::ROFS)),
                "read {n}: {r:?}"
            );
        }
        plan.clear();
        if results.contains(&Err(Errno::IO)) {
            // Stopped on the error: nothing more is written, and what the
            // device holds is the last checkpoint, clean.
            assert!(fs.read_only(), "read {n}: writable after a read error");
            assert_eq!(fs.sync(), Err(Errno::ROFS));
            let bytes = image(&mut fs);
            assert_clean(
                &fsck_bytes(bytes.clone()),
                &format!("read error at read {n}"),
            );
            Lsfs::open(Box::new(MemDevice::from_bytes(bytes)), cfg()).unwrap();
            continue;
        }
        fs.sync().unwrap();
        fs.unmount().unwrap();
        assert_clean(
            &fsck_bytes(image(&mut fs)),
            &format!("after a read error at read {n} during changes"),
        );
    }
}

/// Events the engine logs, captured for one closure.
fn logged<R>(f: impl FnOnce() -> R) -> (R, Vec<String>) {
    use std::sync::{Arc, Mutex};
    struct Capture(Arc<Mutex<Vec<String>>>);
    struct Msg<'a>(&'a mut String);
    impl tracing::field::Visit for Msg<'_> {
        fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
            use std::fmt::Write;
            let _ = write!(self.0, "{}={:?} ", field.name(), value);
        }
    }
    impl tracing::Subscriber for Capture {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, e: &tracing::Event<'_>) {
            let mut s = format!("{} ", e.metadata().level());
            e.record(&mut Msg(&mut s));
            self.0.lock().unwrap().push(s);
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }
    let events = Arc::new(Mutex::new(Vec::new()));
    let r = tracing::subscriber::with_default(Capture(events.clone()), f);
    let v = events.lock().unwrap().clone();
    (r, v)
}

/// A write error anywhere on the write path (an fsync record, a checkpoint,
/// a superblock) turns the mount read-only with an error logged that names
/// the failure; what was acknowledged stays readable, and the image the
/// device holds opens clean with it.
#[test]
fn write_errors_stop_the_mount_with_a_logged_reason() {
    let (img, data) = error_image();
    let c = ctx();
    for (n, by_range) in (0..14u64).map(|n| (n, false)).chain([(0, true), (1, true)]) {
        let (cdev, log) = CrashDevice::new(MemDevice::from_bytes(img.clone()));
        let (dev, plan) = lsfs_core::device::FaultDevice::new(Box::new(cdev));
        let mut fs = Lsfs::open(Box::new(dev), cfg()).unwrap();
        let big = fs.lookup(ROOT_INO, b"big").unwrap().ino;
        let ack = pattern(77, 20_000);
        fs.write(big, 0, &ack).unwrap();
        fs.fsync(big, false).unwrap();
        if by_range {
            // The superblocks (first block / last block), or the whole log.
            let r = if n == 0 { 0..4096 } else { 4096..DEV_BYTES };
            plan.fail_writes_in(r);
        } else {
            plan.fail_write_op(plan.writes_seen() + n);
        }
        let (results, events) = logged(|| {
            let mut v = Vec::new();
            for i in 0..6 {
                v.push(fs.write(big, 50_000, &pattern(i, 9000)).map(|_| ()));
                v.push(
                    fs.mknod(
                        ROOT_INO,
                        format!("f{i}").as_bytes(),
                        libc::S_IFREG | 0o644,
                        0,
                        &c,
                    )
                    .map(|_| ()),
                );
                v.push(fs.fsync(big, false));
                v.push(fs.sync());
            }
            v
        });
        let first_err = results.iter().find_map(|r| r.err());
        if plan.injected().is_empty() {
            assert_eq!(
                first_err, None,
                "case {n}/{by_range}: an error without a fault"
            );
            continue;
        }
        assert_eq!(
            first_err,
            Some(Errno::IO),
            "case {n}/{by_range}: {results:?}"
        );
        assert!(fs.read_only(), "case {n}/{by_range}: still writable");
        assert!(
            results
                .iter()
                .skip_while(|r| r.is_ok())
                .skip(1)
                .all(|r| *r == Err(Errno::ROFS)),
            "case {n}/{by_range}: after the error every change must be EROFS: {results:?}"
        );
        assert!(
            events.iter().any(|e| e.starts_with("ERROR")
                && e.contains("read-only")
                && e.contains("injected write error")),
            "case {n}/{by_range}: no logged reason in {events:?}"
        );
        let reason = fs.store.failure().unwrap();
        assert!(reason.contains("injected write error"), "{reason}");
        // Acknowledged data reads back from the failed mount and after a crash.
        let got = fs.read(big, 0, 1 << 20).unwrap();
        assert_eq!(&got[..20_000], &ack[..]);
        drop(fs);
        let bytes = log.image_after(log.len()).bytes().to_vec();
        assert_clean(&fsck_bytes(bytes.clone()), &format!("case {n}/{by_range}"));
        let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(bytes)), cfg()).unwrap();
        let b = fs.lookup(ROOT_INO, b"big").unwrap();
        let got = fs.read(b.ino, 0, 1 << 20).unwrap();
        assert_eq!(&got[..20_000], &ack[..], "case {n}/{by_range}");
        assert_eq!(&got[60_000..], &data[60_000..]);
    }
}
