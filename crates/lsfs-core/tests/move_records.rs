//! Move records: a cleaning pass frees its victims before the next
//! checkpoint, and the writer may overwrite them at once. A crash then
//! finds the last checkpoint's DAT pointing into segments written over
//! since; recovery must apply every move record before it reads or counts
//! anything. This drives exactly that (random overwrites of a large file
//! on a nearly full image, fsync every few writes, cleaning passes between
//! them, no checkpoint for long stretches), checks that victims were
//! really reused before a checkpoint, then crashes at every flush and
//! between flushes: fsck must find the crash image clean (it opens the
//! image as recovery does) and the recovered one too, and every block must
//! read as fsync left it or as a later write made it.

mod common;

use common::*;
use lsfs_core::device::{CrashDevice, CrashLog, MemDevice};
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_vfs::{Vfs, ROOT_INO};
use rand::{Rng, SeedableRng};

const DEV_BYTES: u64 = 128 * MIB;
const BLOCK: usize = 4096;
/// The file: 58 % of the device (the data streams need free segments; at
/// half of it too few victims were reused before a checkpoint once fsync's
/// hot blocks went to the log's record).
const FILE_BLOCKS: u64 = 19_000;
const WRITES: usize = 8_000;
const FSYNC_EVERY: usize = 16;
// Not a multiple of FSYNC_EVERY: passes meet blocks killed by writes not yet durable.
const CLEAN_EVERY: usize = 61;

/// The bytes of block `b` after write `w` (w = 0: the first fill).
fn contents(b: u64, w: usize) -> Vec<u8> {
    pattern(b * 1_000_003 + w as u64, BLOCK)
}

struct Run {
    log: CrashLog,
    ino: u64,
    /// For each block, its writes in order: (log length before the write,
    /// write number).
    history: Vec<Vec<(usize, usize)>>,
    /// Log lengths after each fsync returned.
    durable: Vec<usize>,
    /// Log lengths after each pass that wrote a move record.
    moves: Vec<usize>,
}

fn config() -> MountConfig {
    // Checkpoints only when the writer needs one: passes are many between
    // them, and so are victims freed by move records.
    let mut c = MountConfig {
        checkpoint_interval_secs: 3600,
        ..MountConfig::default()
    };
    c.store.cache_blocks = 4096;
    c
}

fn run(seed: u64) -> Run {
    let mut fs = mkfs(DEV_BYTES, config());
    let ino = fs
        .mknod(ROOT_INO, b"big", libc::S_IFREG | 0o644, 0, &ctx())
        .unwrap()
        .ino;
    for b in 0..FILE_BLOCKS {
        fs.write(ino, b * BLOCK as u64, &contents(b, 0)).unwrap();
    }
    fs.fsync(ino, false).unwrap();
    fs.sync().unwrap();
    let base = image(&mut fs);
    drop(fs);

    let (dev, log) = CrashDevice::new(MemDevice::from_bytes(base));
    let mut fs = Lsfs::open(Box::new(dev), config()).unwrap();
    let mut history: Vec<Vec<(usize, usize)>> = (0..FILE_BLOCKS).map(|_| vec![(0, 0)]).collect();
    let mut durable = vec![0];
    let mut moves = Vec::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let hot = FILE_BLOCKS / 10;
    for w in 1..=WRITES {
        // 90 % of the writes to the first tenth of the file.
        let b = if rng.gen_bool(0.9) {
            rng.gen_range(0..hot)
        } else {
            rng.gen_range(hot..FILE_BLOCKS)
        };
        history[b as usize].push((log.len(), w));
        fs.write(ino, b * BLOCK as u64, &contents(b, w)).unwrap();
        if w % FSYNC_EVERY == 0 {
            fs.fsync(ino, false).unwrap();
            durable.push(log.len());
        }
        if w % CLEAN_EVERY == 0 {
            let before = fs.store.stats().move_records_written;
            fs.clean(8, "low space").unwrap();
            if fs.store.stats().move_records_written > before {
                moves.push(log.len());
            }
        }
    }
    let st = fs.store.stats().clone();
    eprintln!(
        "{} move records freed {} victims, {} of them written into before a checkpoint, {} dead blocks freed uncopied; {} checkpoints; waiting: {:?}",
        st.move_records_written,
        st.segments_freed_by_move_records,
        st.victims_reused_before_checkpoint,
        st.freed_giving_up_base,
        st.checkpoints_written,
        st.victims_waiting_for_checkpoint
    );
    assert!(
        st.victims_reused_before_checkpoint >= 5,
        "only {} victims freed by move records were reused before a checkpoint: \
         the workload does not exercise what recovery must get right",
        st.victims_reused_before_checkpoint
    );
    assert!(
        st.freed_giving_up_base > 0,
        "no pass freed a block the latest checkpoint saw: recovery's deferred frees are not exercised"
    );
    drop(fs); // no unmount: a power cut
    Run {
        log,
        ino,
        history,
        durable,
        moves,
    }
}

/// Open the crash image at `nops` (unflushed writes kept or lost by
/// `seed`): fsck clean before and after recovery, and every block as the
/// last durable fsync left it or as a later write made it.
fn check(run: &Run, nops: usize, seed: u64) {
    let what = format!("crash at op {nops} (seed {seed})");
    let img = run.log.crash_image(nops, seed);
    assert_clean(&fsck_bytes(img.bytes().to_vec()), &what);
    let synced = *run.durable.iter().rev().find(|&&d| d <= nops).unwrap();
    let mut fs = Lsfs::open(Box::new(img), config()).unwrap_or_else(|e| panic!("{what}: {e}"));
    for (b, writes) in run.history.iter().enumerate() {
        let got = fs.read(run.ino, (b * BLOCK) as u64, BLOCK as u32).unwrap();
        // The last write before the fsync, and any after it.
        let first = writes.iter().rposition(|&(at, _)| at < synced).unwrap_or(0);
        let ok = writes[first..]
            .iter()
            .take_while(|&&(at, _)| at < nops)
            .any(|&(_, w)| got == contents(b as u64, w));
        assert!(ok, "{what}: block {b} holds none of the contents it may");
    }
    fs.unmount().unwrap();
    let after = fs.store.dev_bytes_for_test();
    drop(fs);
    assert_clean(&fsck_bytes(after), &format!("{what}, recovered"));
}

#[test]
fn victims_reused_before_a_checkpoint_survive_every_crash() {
    let run = run(7);
    let flushes = flush_points(&run.log);
    let mut rng = rand::rngs::StdRng::seed_from_u64(70);
    let mut prev = 0;
    let mut points = Vec::new();
    // About 25 flushes, spread over the run, and a point between each and
    // the one before it.
    let every = (flushes.len() / 25).max(1);
    for (i, &f) in flushes.iter().enumerate() {
        if i % every == 0 {
            points.push((f, 0));
            if f > prev + 1 {
                points.push((rng.gen_range(prev + 1..f), i as u64));
            }
        }
        prev = f;
    }
    // Right after each move record: the blocks its pass freed uncopied
    // must have died by writes already durable.
    for (i, &m) in run.moves.iter().enumerate() {
        points.push((m, i as u64));
    }
    points.push((run.log.len(), 1));
    check_points_in_parallel(&points, |&(nops, seed)| check(&run, nops, seed));
    eprintln!(
        "crash states checked: {} ({} flushes)",
        points.len(),
        flushes.len()
    );
}
