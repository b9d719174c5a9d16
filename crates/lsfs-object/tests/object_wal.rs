//! The write-ahead file of the object-store device: a flush goes to the
//! file, not the store; what a crash leaves there is stored at the next
//! open with it, a torn tail is ignored, another file system's file is
//! refused, the bound starts uploads, and superblocks never reach the
//! store before the segments.

mod common;

use common::*;
use lsfs_core::device::BlockDevice;
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_core::meta::open::MkfsOptions;
use lsfs_object::{ObjectDevice, Target, WalConfig, WalPlace};
use lsfs_vfs::{Vfs, ROOT_INO};
use object_store::memory::InMemory;
use std::path::Path;
use std::sync::Arc;

fn wal(dir: &Path, max_bytes: u64) -> WalConfig {
    WalConfig {
        place: WalPlace::File(dir.join("fs.wal")),
        max_bytes,
    }
}

/// The file of a write-ahead file's configuration.
/// Where the write-ahead file's whole records end.
fn wal_end(path: &Path, bytes: &[u8]) -> usize {
    let found = lsfs_object::wal::parse(path, bytes).unwrap();
    assert_eq!(found.torn_bytes, 0, "{}", path.display());
    found.end as usize
}

fn file_of(w: &WalConfig) -> &Path {
    match &w.place {
        WalPlace::File(p) => p,
        WalPlace::Store => panic!("not a file"),
    }
}

fn open(t: &Target, w: &WalConfig) -> Result<ObjectDevice, String> {
    ObjectDevice::open_with(t, true, 8 << 20, Some(w))
}

/// A file system made at `t` without a write-ahead file, unmounted.
fn mkfs(t: &Target) {
    ObjectDevice::create(t, geo(), true).unwrap();
    let opts = MkfsOptions {
        segment_blocks: SEG_BLOCKS as u32,
        label: "wal".into(),
    };
    let dev = ObjectDevice::open(t, true, 8 << 20).unwrap();
    let mut fs = Lsfs::mkfs(Box::new(dev), &opts, MountConfig::default()).unwrap();
    fs.unmount().unwrap();
}

fn read(dev: &ObjectDevice, at: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0; len];
    dev.read_at(at, &mut b).unwrap();
    b
}

/// Segment 2's first byte, segment 3's.
const SEG2: u64 = (1 + 2 * SEG_BLOCKS) * 4096;

#[test]
fn fsynced_files_survive_a_crash_in_the_write_ahead_file_alone() {
    let d = tempfile::tempdir().unwrap();
    let t = Target::on(Arc::new(InMemory::new()), "fs/wal");
    mkfs(&t);
    let w = wal(d.path(), 64 << 20);
    let dev = open(&t, &w).unwrap();
    let kill = dev.kill_switch();
    let mut fs = Lsfs::open(Box::new(dev), MountConfig::default()).unwrap();
    let files = six_fsynced_files(&mut fs, "f");
    // The process dies: nothing more reaches the store.
    kill.store(true, std::sync::atomic::Ordering::Relaxed);
    drop(fs);
    assert!(std::fs::metadata(file_of(&w)).unwrap().len() > 5000);

    // Without the file, the store alone does not have them.
    {
        let ro = ObjectDevice::open(&t, false, 8 << 20).unwrap();
        let mut cfg = MountConfig::default();
        cfg.store.read_only = true;
        let mut fs = Lsfs::open(Box::new(ro), cfg).unwrap();
        assert!(
            fs.lookup(ROOT_INO, b"f5").is_err(),
            "f5 is only in the file"
        );
    }
    // A writer without it is refused, naming it.
    let err = ObjectDevice::open(&t, true, 8 << 20).err().unwrap();
    assert!(err.contains("fs.wal"), "{err}");

    // With it, everything is back, stored, and fsck is clean.
    let dev = open(&t, &w).unwrap();
    assert!(dev.object_counters().puts > 0, "the replay uploaded");
    files_read_back_and_fsck_is_clean(dev, &t, &files);
    // The unmount stored everything and gave the lease back: a mount
    // without the file may follow.
    drop(ObjectDevice::open(&t, true, 8 << 20).unwrap());
}

#[test]
fn a_flush_appends_to_the_file_and_a_torn_tail_is_ignored() {
    let d = tempfile::tempdir().unwrap();
    let t = Target::on(Arc::new(InMemory::new()), "fs/torn");
    mkfs(&t);
    let w = wal(d.path(), 64 << 20);
    for cut in [1u64, 7] {
        let dev = open(&t, &w).unwrap();
        let (a, b) = (vec![0xa0 + cut as u8; 8192], vec![0xbb; 4096]);
        let before = read(&dev, SEG2 + 65536, 4096);
        dev.write_at(SEG2 + 4096, &a).unwrap();
        dev.flush().unwrap();
        let puts = dev.object_counters().puts;
        dev.write_at(SEG2 + 65536, &b).unwrap();
        dev.flush().unwrap();
        let c = dev.object_counters();
        assert_eq!(c.puts, puts, "a flush uploads nothing");
        assert_eq!(c.wal_records, 2);
        dev.kill_switch()
            .store(true, std::sync::atomic::Ordering::Relaxed);
        drop(dev);
        // The second record torn: cut short, or a byte changed (the file
        // goes on past its records, in zeros).
        let mut f = std::fs::read(file_of(&w)).unwrap();
        let n = wal_end(file_of(&w), &f);
        if cut == 1 {
            f.truncate(n - 1);
        } else {
            f[n - 100] ^= 0x40;
        }
        std::fs::write(file_of(&w), &f).unwrap();
        let dev = open(&t, &w).unwrap();
        assert_eq!(
            read(&dev, SEG2 + 4096, 8192),
            a,
            "the whole record replayed"
        );
        assert_eq!(
            read(&dev, SEG2 + 65536, 4096),
            before,
            "the torn one is not"
        );
        dev.release().unwrap();
    }
}

#[test]
fn another_file_systems_write_ahead_file_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let store = Arc::new(InMemory::new());
    let (t1, t2) = (Target::on(store.clone(), "one"), Target::on(store, "two"));
    mkfs(&t1);
    mkfs(&t2);
    let w = wal(d.path(), 64 << 20);
    let dev = open(&t1, &w).unwrap();
    dev.write_at(SEG2, &[1; 4096]).unwrap();
    dev.flush().unwrap();
    dev.kill_switch()
        .store(true, std::sync::atomic::Ordering::Relaxed);
    drop(dev);
    let err = open(&t2, &w).err().unwrap();
    assert!(
        err.contains("flushes of the file system at (store)/one, not (store)/two"),
        "{err}"
    );
    // The same place, made again (which deletes the lease too): another
    // file system id.
    mkfs(&t1);
    let err = open(&t1, &w).err().unwrap();
    assert!(err.contains("flushes of file system id"), "{err}");
    // Not a write-ahead file at all: refused, and left as it is.
    let other = d.path().join("notes.txt");
    std::fs::write(&other, "my notes").unwrap();
    let err = open(
        &t2,
        &WalConfig {
            place: WalPlace::File(other.clone()),
            max_bytes: 1 << 20,
        },
    )
    .err()
    .unwrap();
    assert!(err.contains("not an lsfs write-ahead file"), "{err}");
    assert_eq!(std::fs::read_to_string(&other).unwrap(), "my notes");
    // One mount per file.
    let a = open(&t2, &w);
    assert!(a.is_err(), "still t1's file");
    std::fs::remove_file(file_of(&w)).unwrap();
    let a = open(&t2, &w).unwrap();
    let err = open(&t2, &w).err().unwrap();
    assert!(err.contains("in use by another mount"), "{err}");
    // Emptied by the unmount, the file may serve another file system.
    a.release().unwrap();
    drop(a);
    mkfs(&t1);
    open(&t1, &w).unwrap().release().unwrap();
}

#[test]
fn the_bound_and_a_new_segment_start_uploads_superblocks_last() {
    let d = tempfile::tempdir().unwrap();
    let t = Target::on(Arc::new(InMemory::new()), "fs/bound");
    mkfs(&t);
    let w = wal(d.path(), 1 << 20);
    let dev = open(&t, &w).unwrap();
    let base = dev.object_counters();
    // 4 KiB flushes inside segment 2: the file grows, the store does not,
    // until the bound.
    let mut syncs_at = None;
    for i in 0..300u64 {
        dev.write_at(SEG2 + 4096 + (i % 60) * 4096, &[i as u8; 4096])
            .unwrap();
        dev.flush().unwrap();
        let c = dev.object_counters();
        if c.wal_syncs > base.wal_syncs {
            syncs_at = Some(i);
            break;
        }
        assert_eq!(c.puts, base.puts, "no upload before the bound ({i})");
    }
    let i = syncs_at.expect("the bound started an upload");
    assert!(
        (250..=260).contains(&i),
        "after 1 MiB of 4 KiB records: {i}"
    );
    let f = std::fs::read(file_of(&w)).unwrap();
    assert!(wal_end(file_of(&w), &f) < 4096, "restarted");
    assert_eq!(dev.object_counters().puts, base.puts + 1, "segment 2");

    // A superblock written, then a segment not written since the upload:
    // everything goes up first, the superblock after the segment.
    let sb = vec![0x5b; 4096];
    let old_super = read(&dev, 0, 4096);
    let old_seg3 = read(&dev, SEG2 + SEG_BYTES + 4096, 4096);
    dev.write_at(SEG2 + 8192, &[9; 4096]).unwrap();
    dev.write_at(0, &sb).unwrap();
    dev.flush().unwrap();
    let puts = dev.object_counters().puts;
    // Nothing in the store yet: a reader sees the old superblock.
    let ro = ObjectDevice::open(&t, false, 8 << 20).unwrap();
    assert_eq!(read(&ro, 0, 4096), old_super);
    dev.write_at(SEG2 + SEG_BYTES + 4096, &[3; 4096]).unwrap();
    assert_eq!(dev.object_counters().puts, puts + 2, "segment 2, super-a");
    let ro = ObjectDevice::open(&t, false, 8 << 20).unwrap();
    assert_eq!(read(&ro, 0, 4096), sb);
    assert_eq!(read(&ro, SEG2 + 8192, 4096), vec![9; 4096]);
    // Segment 3's write is not stored yet; the log moving on to segment 4
    // stores it.
    assert_eq!(read(&ro, SEG2 + SEG_BYTES + 4096, 4096), old_seg3);
    dev.write_at(SEG2 + 2 * SEG_BYTES, &[4; 4096]).unwrap();
    let ro = ObjectDevice::open(&t, false, 8 << 20).unwrap();
    assert_eq!(read(&ro, SEG2 + SEG_BYTES + 4096, 4096), vec![3; 4096]);

    // With a superblock changed, the log's end may grow without an
    // upload, but a hole below it is filled only after one.
    let seg4 = SEG2 + 2 * SEG_BYTES;
    dev.write_at(seg4 + 40 * 4096, &[5; 4096]).unwrap();
    dev.write_at(0, &[0x5c; 4096]).unwrap();
    dev.flush().unwrap();
    let puts = dev.object_counters().puts;
    dev.write_at(seg4 + 41 * 4096, &[6; 4096]).unwrap();
    assert_eq!(dev.object_counters().puts, puts, "an append waits");
    dev.write_at(seg4 + 8 * 4096, &[7; 4096]).unwrap();
    assert_eq!(dev.object_counters().puts, puts + 2, "segment 4, super-a");
    let ro = ObjectDevice::open(&t, false, 8 << 20).unwrap();
    assert_eq!(read(&ro, 0, 4096), vec![0x5c; 4096]);
    assert_eq!(read(&ro, seg4 + 41 * 4096, 4096), vec![6; 4096]);
}

/// Superblocks go up only once the segments did, in either mode: with
/// segment uploads failing (a file where the store's `seg` directory
/// belongs), the superblock written with them never reaches the store.
#[test]
fn a_superblock_waits_for_its_segments_in_both_modes() {
    for with_wal in [false, true] {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("store");
        std::fs::create_dir_all(&root).unwrap();
        let t = Target::parse(&format!("file://{}", root.display())).unwrap();
        ObjectDevice::create(&t, geo(), false).unwrap();
        let w = wal(d.path(), 64 << 20);
        let dev = ObjectDevice::open_with(&t, true, 8 << 20, with_wal.then_some(&w)).unwrap();
        dev.write_at(SEG2, &[1; 4096]).unwrap();
        dev.write_at(0, &[2; 4096]).unwrap();
        std::fs::write(root.join("seg"), "in the way").unwrap();
        let r = if with_wal {
            dev.flush().unwrap();
            dev.release()
        } else {
            dev.flush()
        };
        assert!(r.is_err(), "the segment's upload fails");
        assert!(!root.join("super-a").exists(), "no superblock before it");
        std::fs::remove_file(root.join("seg")).unwrap();
        if with_wal {
            // The failed unmount kept the lease; trying again stores
            // everything.
            dev.release().unwrap();
        } else {
            dev.flush().unwrap();
        }
        assert!(root.join("super-a").exists() && root.join("seg/2").exists());
    }
}

/// xorshift64*, for seeded random operations without a crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Random writes (anywhere, superblocks included, of any length),
/// discards of whole segments and flushes, with a small bound so that uploads come often, then a crash
/// at a random point: after the replay, every byte is what the last
/// flush covered, or for a byte written after it, that or a value written
/// since (the disk model of docs/CRASH.md: writes after the last flush
/// may land in any subset).
#[test]
fn random_writes_and_a_crash_keep_every_flush() {
    let d = tempfile::tempdir().unwrap();
    random_writes_and_a_crash(wal(d.path(), 1 << 20));
}

/// The same with the records kept in the store (`store_log.rs`): the
/// reopen, as from another machine, has nothing local; the dead writer's
/// lease is given up first, as its refusal says to.
#[test]
fn random_writes_and_a_crash_keep_every_flush_in_records_in_the_store() {
    random_writes_and_a_crash(WalConfig {
        place: WalPlace::Store,
        max_bytes: 1 << 20,
    });
}

fn random_writes_and_a_crash(w: WalConfig) {
    for seed in 1..=6u64 {
        let t = Target::on(Arc::new(InMemory::new()), "fs/random");
        ObjectDevice::create(&t, geo(), false).unwrap();
        if let WalPlace::File(p) = &w.place {
            let _ = std::fs::remove_file(p);
        }
        let size = geo().device_bytes as usize;
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let mut flushed = vec![0u8; size];
        let mut now = vec![0u8; size];
        let mut since: Vec<(usize, Vec<u8>)> = Vec::new();
        // Segments discarded: what they hold is anything from then on.
        let mut discarded = std::collections::HashSet::new();
        let dev = open(&t, &w).unwrap();
        let ops = 100 + rng.below(300);
        for op in 0..ops {
            if rng.below(4) == 0 {
                dev.flush().unwrap();
                flushed.copy_from_slice(&now);
                since.clear();
                continue;
            }
            if rng.below(20) == 0 {
                let n = rng.below(geo().nsegments());
                let off = (1 + n * SEG_BLOCKS) * 4096;
                assert_eq!(dev.discard(off, SEG_BYTES).unwrap(), SEG_BYTES);
                discarded.insert(n);
                continue;
            }
            let max = if rng.below(8) == 0 { 600_000 } else { 9000 };
            let len = 1 + rng.below(max) as usize;
            let at = match rng.below(10) {
                0 => 0,
                1 => size - 4096,
                _ => rng.below((size - len) as u64) as usize,
            }
            .min(size - len);
            let b: Vec<u8> = (0..len)
                .map(|i| (op as u8) ^ (i as u8) ^ seed as u8)
                .collect();
            dev.write_at(at as u64, &b).unwrap();
            now[at..at + len].copy_from_slice(&b);
            since.push((at, b));
        }
        dev.kill_switch()
            .store(true, std::sync::atomic::Ordering::Relaxed);
        drop(dev);
        if w.place == WalPlace::Store {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(t.store.delete(&t.path("lease"))).unwrap();
        }
        let dev = open(&t, &w).unwrap();
        let got = read(&dev, 0, size);
        let in_discarded = |i: usize| {
            let b = i as u64 / 4096;
            b >= 1 && discarded.contains(&((b - 1) / SEG_BLOCKS))
        };
        for i in (0..size).filter(|&i| got[i] != flushed[i] && !in_discarded(i)) {
            let ok = since
                .iter()
                .any(|(at, b)| (*at..at + b.len()).contains(&i) && b[i - at] == got[i]);
            assert!(
                ok,
                "seed {seed}: byte {i}: {} (flushed {}, last {})",
                got[i], flushed[i], now[i]
            );
        }
        dev.release().unwrap();
    }
}
