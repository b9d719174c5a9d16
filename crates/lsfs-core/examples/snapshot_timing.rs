//! How long snapshot changes take on a large image, foreground and background.
//!
//! `cargo run --release -p lsfs-core --example snapshot_timing -- IMAGE [BLOCKS]`
//! writes BLOCKS data blocks (default 2,000,000: 7.6 GiB) into a new image
//! at IMAGE, overwrites a quarter of them so that an old checkpoint holds
//! dead blocks, then times: a snapshot of the newest checkpoint, promoting
//! and demoting the old checkpoint (both O(1): queued), and the background
//! reconciliation that applies the queued changes (a DAT scan). Prints JSON.
//! The image is removed at the end.

use lsfs_core::device::FileDevice;
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_core::meta::open::MkfsOptions;
use lsfs_vfs::{Ctx, Vfs, ROOT_INO};
use std::path::PathBuf;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let path = PathBuf::from(args.next().expect("usage: snapshot_timing IMAGE [BLOCKS]"));
    let blocks: u64 = args
        .next()
        .map(|s| s.parse().expect("BLOCKS: a number"))
        .unwrap_or(2_000_000);
    let size = (blocks * 4096 * 3 / 2).max(64 << 20);
    FileDevice::create_image(&path, size).expect("create image");
    let dev = FileDevice::open(&path, true).expect("open image");
    let mut config = MountConfig::default();
    config.store.protection_secs = 1 << 30; // keep the old checkpoint
    let mut fs = Lsfs::mkfs(Box::new(dev), &MkfsOptions::default(), config).expect("mkfs");
    let ctx = Ctx::default();
    let a = fs
        .mknod(ROOT_INO, b"big", libc::S_IFREG | 0o644, 0, &ctx)
        .expect("create");
    let chunk = vec![0x5a; 4 << 20];
    let t = Instant::now();
    let mut off = 0u64;
    while off < blocks * 4096 {
        fs.write(a.ino, off, &chunk).expect("write");
        off += chunk.len() as u64;
    }
    let old = fs.checkpoint().expect("checkpoint");
    // Overwrite a quarter: those blocks die, seen by the old checkpoint.
    let mut off = 0u64;
    while off < blocks * 4096 / 4 {
        fs.write(a.ino, off, &chunk).expect("overwrite");
        off += chunk.len() as u64;
    }
    fs.checkpoint().expect("checkpoint");
    let fill_secs = t.elapsed().as_secs_f64();
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1000.0;
    let t = Instant::now();
    let snap = fs.snapshot_create().expect("snapshot");
    let create_ms = ms(t);
    let t = Instant::now();
    fs.store.set_snapshot(old, true).expect("promote");
    let promote_ms = ms(t);
    let t = Instant::now();
    fs.store.set_snapshot(snap, false).expect("demote");
    let demote_ms = ms(t);
    let queued = fs.store.reconcile().queue().len();
    let t = Instant::now();
    fs.reconcile_all().expect("reconcile");
    let reconcile_ms = ms(t);
    let held: u64 = fs
        .store
        .segs()
        .usage
        .iter()
        .map(|u| u.nsnapshot as u64)
        .sum();
    fs.unmount().expect("unmount");
    drop(fs);
    std::fs::remove_file(&path).ok();
    println!(
        "{}",
        serde_json::json!({
            "data_blocks": blocks,
            "fill_secs": fill_secs,
            "snapshot_create_newest_ms": create_ms,
            "promote_old_checkpoint_ms": promote_ms,
            "demote_snapshot_ms": demote_ms,
            "changes_queued": queued,
            "background_reconcile_ms": reconcile_ms,
            "nsnapshot_after": held,
        })
    );
}
