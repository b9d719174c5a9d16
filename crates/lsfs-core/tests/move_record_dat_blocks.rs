//! Move records that carry the last checkpoint's DAT blocks: a victim
//! holding DAT blocks the DAT still uses is freed by its pass's move record,
//! not at the next checkpoint. The pass copies those blocks as they are on
//! disk into the cleaner's stream, and the record names the copies;
//! recovery reads the DAT there from the start (the victim may be written
//! over) and points the DAT's map at them. This drives the workload of
//! tests/move_records.rs (random overwrites of a large file on a nearly full
//! image, fsync every few writes, passes between them, checkpoints far
//! apart), checks that such victims were freed and written into before a
//! checkpoint, then crashes at every operation of the first passes that
//! moved DAT blocks, up to the next fsync after them, and right after every
//! such move record: fsck clean before and after recovery, and every block
//! as fsync left it or as a later write made it.

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
    /// Log lengths before and after each pass whose move record moved
    /// DAT blocks.
    dat_moves: Vec<(usize, usize)>,
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
    let mut dat_moves = Vec::new();
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
            let (at, before) = (log.len(), fs.store.stats().dat_blocks_moved_by_move_records);
            fs.clean(8, "low space").unwrap();
            if fs.store.stats().dat_blocks_moved_by_move_records > before {
                dat_moves.push((at, log.len()));
            }
        }
    }
    let st = fs.store.stats().clone();
    eprintln!(
        "{} move records freed {} victims and moved {} DAT blocks, {} victims written into before a checkpoint, {} dead blocks freed uncopied; {} checkpoints; waiting: {:?}",
        st.move_records_written,
        st.segments_freed_by_move_records,
        st.dat_blocks_moved_by_move_records,
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
        dat_moves.len() >= 3,
        "only {} passes moved DAT blocks with their move records",
        dat_moves.len()
    );
    assert!(
        !st.victims_waiting_for_checkpoint.contains_key("DAT blocks"),
        "victims holding DAT blocks still wait for a checkpoint: {:?}",
        st.victims_waiting_for_checkpoint
    );
    drop(fs); // no unmount: a power cut
    Run {
        log,
        ino,
        history,
        durable,
        dat_moves,
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
fn victims_holding_dat_blocks_freed_by_move_records_survive_every_crash() {
    let run = run(11);
    let flushes = flush_points(&run.log);
    let mut checked = 0;
    // Every operation of the first passes that moved DAT blocks, and of
    // the writes after them up to the next flush but one (the writer may
    // reuse the victims there).
    for &(from, to) in run.dat_moves.iter().take(3) {
        let end = flushes
            .iter()
            .copied()
            .filter(|&f| f > to)
            .nth(1)
            .unwrap_or(run.log.len());
        for nops in from..=end {
            check(&run, nops, nops as u64);
            checked += 1;
        }
    }
    // Right after every such move record, unflushed writes kept or lost.
    for (i, &(_, to)) in run.dat_moves.iter().enumerate() {
        check(&run, to, i as u64);
        check(&run, to, 1000 + i as u64);
        checked += 2;
    }
    check(&run, run.log.len(), 1);
    eprintln!(
        "crash states checked: {checked} ({} passes moved DAT blocks)",
        run.dat_moves.len()
    );
}
