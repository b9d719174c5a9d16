//! How long recovery takes after the longest roll-forward the operation
//! log's bound allows (docs/CRASH.md, "Recovery time"), on an image of the
//! default size and layout (`lsfs run`: 4 GiB, 2 MiB segments, the default
//! 64 MiB cache), in an image file read with direct I/O as a mount reads it.
//!
//! The log holds at most `oplog::MAX_OPS` operations since the last
//! checkpoint; the most records recovery can meet for them is one fsync per
//! operation. Here each operation creates a file that is then given 8
//! blocks and fsynced, so each fsync writes two records (its 8 blocks go to
//! a data-stream record, `DSYNC_STREAM_MIN_BLOCKS`). The same runs with
//! compressed records on and data that compresses, since recovery then
//! decompresses what it reads back (docs/FORMAT.md §3.3).

mod common;
use common::*;
use lsfs_core::device::FileDevice;
use lsfs_core::fs::oplog::MAX_OPS;
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_core::meta::open::MkfsOptions;
use lsfs_core::meta::store::Compress;
use lsfs_vfs::{Vfs, ROOT_INO};

const IMAGE_BYTES: u64 = 4 << 30;
const FILE_BYTES: usize = 8 * 4096;

#[test]
fn the_longest_roll_forward_on_a_default_image_recovers_everything() {
    longest_roll_forward(None, pattern);
}

#[test]
fn the_longest_roll_forward_of_compressed_records_recovers_everything() {
    longest_roll_forward(Some(Compress::Lz4), text);
}

/// Text that lz4 shrinks to about a quarter, different for each `seed`.
fn text(seed: u64, len: usize) -> Vec<u8> {
    let line = format!("file {seed:05}: the quick brown fox jumps over the lazy dog\n");
    line.bytes().cycle().take(len).collect()
}

/// Fill the operation log with create + write + fsync, crash, and time the
/// mount that recovers it; `compress` as `StoreConfig::compress`, each
/// file's data `data(n, FILE_BYTES)`.
fn longest_roll_forward(compress: Option<Compress>, data: fn(u64, usize) -> Vec<u8>) {
    let mut config = MountConfig::default();
    config.store.compress = compress;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lsfs.img");
    FileDevice::create_image(&path, IMAGE_BYTES).unwrap();
    let dev = FileDevice::open(&path, true).unwrap();
    let mut fs = Lsfs::mkfs(Box::new(dev), &MkfsOptions::default(), config.clone()).unwrap();
    let mut n = 0u64;
    let live = std::time::Instant::now();
    while fs.oplog.ops_since_checkpoint() < MAX_OPS {
        let name = format!("f{n:05}");
        let a = fs
            .mknod(ROOT_INO, name.as_bytes(), libc::S_IFREG | 0o644, 0, &ctx())
            .unwrap();
        fs.write(a.ino, 0, &data(n, FILE_BYTES)).unwrap();
        fs.fsync(a.ino, false).unwrap();
        fs.forget(a.ino, 1);
        n += 1;
    }
    let live = live.elapsed();
    let causes = &fs.store.stats().checkpoints_by_cause;
    assert_eq!(
        causes.keys().copied().collect::<Vec<_>>(),
        ["mount"],
        "a checkpoint came between the fsyncs: {causes:?}"
    );
    assert!(
        fs.store.stats().dsync_stream_blocks >= n * 8,
        "the fsyncs did not write data-stream records"
    );
    let compressed = fs.store.stats().compressed_records;
    if compress == Some(Compress::Lz4) {
        assert!(
            compressed >= n,
            "{compressed} records compressed for {n} fsyncs"
        );
    } else {
        assert_eq!(compressed, 0, "records compressed with compression off");
    }
    // The crash: the mount goes away without a checkpoint (every fsync
    // has flushed).
    drop(fs);

    let t = std::time::Instant::now();
    let dev = FileDevice::open(&path, true).unwrap();
    let mut fs = Lsfs::open(Box::new(dev), config).unwrap();
    let took = t.elapsed();
    eprintln!(
        "compress {compress:?}: {n} fsyncs took {:.1} s; recovery of {n} operations, {} records, {} MiB of data: {:.0} ms",
        live.as_secs_f64(),
        fs.replayed_records,
        (n * FILE_BYTES as u64) >> 20,
        took.as_secs_f64() * 1000.0
    );
    // Two a fsync, and a third where a stream record met a segment's end.
    assert!(fs.replayed_records as u64 >= 2 * n, "records replayed");
    for i in (0..n).step_by(97).chain([n - 1]) {
        let a = fs.lookup(ROOT_INO, format!("f{i:05}").as_bytes()).unwrap();
        assert!(fs.read(a.ino, 0, FILE_BYTES as u32 + 1).unwrap() == data(i, FILE_BYTES));
        fs.forget(a.ino, 1);
    }
    fs.unmount().unwrap();
    drop(fs);
    let dev = FileDevice::open(&path, false).unwrap();
    let report = lsfs_core::fsck::fsck(Box::new(dev)).unwrap();
    assert_clean(&report, "the recovered image");
}
