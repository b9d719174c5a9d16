//! Device bytes written for one file, with records compressed by lz4, by
//! zstd or not at all, in process (no FUSE), and the time a sequential
//! write and read of it take through the engine.
//!
//! `cargo run --release -p lsfs-core --example compress_bytes -- FILE [off|lz4|zstd]`
//! (default lz4; `on` is lz4)
//!
//! Writes FILE (e.g. a tar of source text) into a new in-memory image in
//! 1 MiB writes, checkpoints, unmounts, mounts again, and reads it back in
//! 1 MiB reads with a cold cache. Prints one JSON line: the file's bytes,
//! the device bytes written from after mkfs to the end of the write (data
//! and metadata), the records written compressed and the slots they left
//! unwritten, and the wall time of the write and of the read.

use lsfs_core::device::MemDevice;
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_core::meta::open::MkfsOptions;
use lsfs_core::meta::store::Compress;
use lsfs_vfs::{Ctx, Vfs, ROOT_INO};
use std::time::Instant;

const CHUNK: usize = 1 << 20;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: compress_bytes FILE [off|lz4|zstd]";
    let path = args.first().expect(usage);
    let mode: Compress = args.get(1).map_or("lz4", |a| a).parse().expect(usage);
    let data = std::fs::read(path).expect("read FILE");
    let mut cfg = MountConfig::default();
    cfg.store.compress = Some(mode);
    let size = ((data.len() as u64 * 3).max(256 << 20)).next_multiple_of(1 << 20);
    let mut fs = Lsfs::mkfs(
        Box::new(MemDevice::new(size)),
        &MkfsOptions::default(),
        cfg.clone(),
    )
    .expect("mkfs");
    let ctx = Ctx {
        uid: 0,
        gid: 0,
        pid: 1,
        umask: 0,
    };
    let before = fs.store.device_counters().write_bytes;
    let t = Instant::now();
    let ino = fs
        .mknod(ROOT_INO, b"file", libc::S_IFREG | 0o644, 0, &ctx)
        .expect("create")
        .ino;
    for (i, c) in data.chunks(CHUNK).enumerate() {
        fs.write(ino, (i * CHUNK) as u64, c).expect("write");
    }
    fs.checkpoint().expect("checkpoint");
    let write_secs = t.elapsed().as_secs_f64();
    let written = fs.store.device_counters().write_bytes - before;
    let st = fs.store.stats().clone();
    fs.unmount().expect("unmount");
    let img = fs.store.dev_bytes_for_test();
    let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(img)), cfg).expect("mount");
    let t = Instant::now();
    let mut back = Vec::with_capacity(data.len());
    while back.len() < data.len() {
        let got = fs.read(ino, back.len() as u64, CHUNK as u32).expect("read");
        assert!(!got.is_empty(), "short read");
        back.extend_from_slice(&got);
    }
    let read_secs = t.elapsed().as_secs_f64();
    assert!(back == data, "read back differs");
    println!(
        "{{\"compress\": \"{}\", \"file_bytes\": {}, \"device_bytes_written\": {written}, \"compressed_records\": {}, \"slots_unwritten\": {}, \"frames_decompressed\": {}, \"write_secs\": {write_secs:.3}, \"read_secs\": {read_secs:.3}}}",
        mode.name(),
        data.len(),
        st.compressed_records,
        st.compressed_slots_unwritten,
        fs.store.stats().frames_decompressed,
    );
}
