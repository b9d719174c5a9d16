//! The engine's own cost of one operation, without FUSE: for A/B comparisons
//! of CPU work that the shared machine's timing noise would hide.
//!
//! `op_cost IMAGE OP N` makes a 1 GiB image at IMAGE, writes a 32 MiB file
//! and overwrites 8,192 random 4 KiB blocks of it (so its block map is a
//! fragmented B-tree of a few levels), then runs N operations OP:
//! `write-fsync` (a 4 KiB overwrite at a random block, then fsync), `read`
//! (a 4 KiB read of a random block, all cached) or `append` (1 MiB appended
//! to a second file, with a checkpoint every 64 MiB as the cache would force).
//! Prints the wall-clock time per operation on stderr and removes the image.
//!
//! Instructions per operation, exactly and independent of load: run it
//! under `valgrind --tool=callgrind` with two values of N and divide the
//! difference of the totals by the difference of N (docs/PERFORMANCE.md).

use lsfs_core::device::FileDevice;
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_core::meta::open::MkfsOptions;
use lsfs_vfs::{Ctx, Vfs, ROOT_INO};

const FILE_BLOCKS: u64 = 8192;

/// xorshift64: the same block sequence in every run and every build.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x % FILE_BLOCKS * 4096
}

fn main() {
    let usage = "usage: op_cost IMAGE write-fsync|read|append N";
    let mut args = std::env::args().skip(1);
    let path = std::path::PathBuf::from(args.next().expect(usage));
    let op = args.next().expect(usage);
    let n: u64 = args.next().and_then(|s| s.parse().ok()).expect(usage);
    assert!(
        ["write-fsync", "read", "append"].contains(&op.as_str()),
        "{usage}"
    );
    FileDevice::create_image(&path, 1 << 30).expect("create image");
    let dev = FileDevice::open(&path, true).expect("open image");
    let mut fs = Lsfs::mkfs(
        Box::new(dev),
        &MkfsOptions::default(),
        MountConfig::default(),
    )
    .expect("mkfs");
    let f = fs
        .mknod(ROOT_INO, b"f", libc::S_IFREG | 0o644, 0, &Ctx::default())
        .expect("create");
    let chunk = vec![0x5a; 1 << 20];
    for i in 0..FILE_BLOCKS / 256 {
        fs.write(f.ino, i << 20, &chunk).expect("fill");
    }
    let block = vec![0xa5u8; 4096];
    let mut x = 12345u64;
    for _ in 0..FILE_BLOCKS {
        fs.write(f.ino, next(&mut x), &block).expect("fragment");
    }
    fs.checkpoint().expect("checkpoint");
    let g = fs
        .mknod(ROOT_INO, b"g", libc::S_IFREG | 0o644, 0, &Ctx::default())
        .expect("create");
    let t = std::time::Instant::now();
    for i in 0..n {
        let off = next(&mut x);
        if op == "append" {
            fs.write(g.ino, i << 20, &chunk).expect("append");
            if i % 64 == 63 {
                fs.checkpoint().expect("checkpoint");
            }
        } else if op == "read" {
            assert_eq!(fs.read(f.ino, off, 4096).expect("read").len(), 4096);
        } else {
            fs.write(f.ino, off, &block).expect("write");
            fs.fsync(f.ino, false).expect("fsync");
        }
    }
    eprintln!(
        "{op}: {:.1} µs per operation",
        t.elapsed().as_secs_f64() * 1e6 / n.max(1) as f64
    );
    fs.unmount().expect("unmount");
    drop(fs);
    std::fs::remove_file(&path).ok();
}
