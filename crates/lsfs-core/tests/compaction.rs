//! Compaction when idle (`fs/compaction.rs`): a scattered file that is
//! read in order is laid out again by the background step once the file
//! system is idle, a batch per tick, and reads back the same; a file that
//! is not read in order, a file system that is not idle, and the setting
//! turned off leave it as it is.

mod common;
use common::*;
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_vfs::Vfs;
use std::time::Duration;

/// The tests' usual settings with a 64 MiB cache (the whole file is one
/// batch) and a clock the test moves.
fn idle_cfg(on: bool) -> MountConfig {
    let mut c = cfg();
    c.store.cache_blocks = 16384;
    c.cleaner.compact_when_idle = on;
    c
}

/// Read the whole file in order, 1 MiB at a time, as `cat` would.
fn read_in_order(fs: &mut Lsfs, ino: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for off in (0..FILE_BLOCKS * 4096).step_by(1 << 20) {
        out.extend(fs.read(ino, off, 1 << 20).unwrap());
    }
    out
}

/// Physical runs of the file now, as `defrag_file` reports them before it
/// lays the file out again (if it is fragmented: call it last).
fn runs(fs: &mut Lsfs, ino: u64) -> u64 {
    let rep = fs.defrag_file(ino, false).unwrap();
    rep.runs_before
}

/// Let the file system be idle for 3 s (the default `idle_secs` is 2),
/// then tick `n` times.
fn idle_ticks(fs: &mut Lsfs, n: usize) {
    fs.clock().advance(Duration::from_secs(3));
    for _ in 0..n {
        fs.tick().unwrap();
    }
}

#[test]
fn a_file_read_in_order_is_laid_out_again_when_idle() {
    let mut fs = mkfs(128 * MIB, idle_cfg(true));
    fs.clock().set_secs(1_700_000_000);
    let (ino, data) = scattered_file(&mut fs);
    let snap = fs.snapshot_create().unwrap();
    assert_eq!(read_in_order(&mut fs, ino), data);
    let s = fs.compaction_stats();
    assert_eq!(s.candidates, 1, "{s:?}");

    idle_ticks(&mut fs, 4);
    let s = fs.compaction_stats();
    eprintln!("{s:?}");
    assert_eq!((s.batches_moved, s.blocks_moved), (1, FILE_BLOCKS), "{s:?}");
    assert_eq!(s.files_done, 1, "{s:?}");
    let per_segment = fs.store.geo().segment_blocks as u64;
    let after = runs(&mut fs, ino);
    assert!(
        after <= FILE_BLOCKS / per_segment + 4,
        "still fragmented: {after} runs"
    );
    assert_eq!(read_in_order(&mut fs, ino), data);
    // Settled: read again, it is not looked at again until it changes.
    idle_ticks(&mut fs, 2);
    assert_eq!(fs.compaction_stats().candidates, 1);
    fs.checkpoint().unwrap();
    assert_clean(&fsck_bytes(image(&mut fs)), "after compaction");
    let _ = snap;
}

#[test]
fn files_not_read_in_order_or_not_idle_are_left_alone() {
    for case in ["not read", "read at random", "busy", "turned off"] {
        let mut fs = mkfs(128 * MIB, idle_cfg(case != "turned off"));
        fs.clock().set_secs(1_700_000_000);
        let (ino, data) = scattered_file(&mut fs);
        match case {
            "not read" => {}
            "read at random" => {
                for n in 0..4096u64 {
                    let b = (n * 1021) % FILE_BLOCKS;
                    fs.read(ino, b * 4096, 4096).unwrap();
                }
            }
            _ => assert_eq!(read_in_order(&mut fs, ino), data),
        }
        if case == "busy" {
            // Ticks without the idle time.
            for _ in 0..4 {
                fs.tick().unwrap();
            }
        } else {
            idle_ticks(&mut fs, 4);
        }
        let s = fs.compaction_stats();
        assert_eq!(s.blocks_moved, 0, "{case}: {s:?}");
        let left = runs(&mut fs, ino);
        assert!(left > 500, "{case}: {left} runs: not scattered any more");
    }
}
