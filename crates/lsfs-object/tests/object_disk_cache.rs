//! The cache of segment objects on local disk: segments read after a
//! remount come from it, within its bound, least recently used first out;
//! an entry that does not verify is fetched again; another writer since,
//! or a mount that did not close, empties it.

mod common;

use common::*;
use lsfs_core::device::BlockDevice;
use lsfs_object::{DiskCacheConfig, ObjectDevice, Target};
use object_store::memory::InMemory;
use std::path::Path;
use std::sync::Arc;

/// Segment `n`'s first byte.
fn seg(n: u64) -> u64 {
    (1 + n * SEG_BLOCKS) * 4096
}

/// Room for three segments' entries.
fn cfg(d: &Path) -> DiskCacheConfig {
    DiskCacheConfig {
        dir: d.join("cache"),
        max_bytes: 3 * (SEG_BYTES + 6),
    }
}

fn open(t: &Target, c: &DiskCacheConfig) -> ObjectDevice {
    ObjectDevice::open_full(t, true, 8 << 20, None, Some(c)).unwrap()
}

fn fill(n: u64, round: u8) -> Vec<u8> {
    vec![n as u8 ^ round; SEG_BYTES as usize]
}

fn read_seg(dev: &ObjectDevice, n: u64) -> Vec<u8> {
    let mut b = vec![0; SEG_BYTES as usize];
    dev.read_at(seg(n), &mut b).unwrap();
    b
}

fn cache_bytes(c: &DiskCacheConfig) -> u64 {
    std::fs::read_dir(&c.dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().starts_with("seg-"))
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

/// Five segments written; three come back from disk after a remount.
fn five_segments(t: &Target, c: &DiskCacheConfig, round: u8) {
    let dev = open(t, c);
    for n in 2..7 {
        dev.write_at(seg(n), &fill(n, round)).unwrap();
        dev.flush().unwrap();
    }
    assert!(cache_bytes(c) <= c.max_bytes);
    dev.release().unwrap();
}

#[test]
fn segments_come_back_from_disk_within_the_bound() {
    let d = tempfile::tempdir().unwrap();
    let t = Target::on(Arc::new(InMemory::new()), "fs");
    ObjectDevice::create(&t, geo(), false).unwrap();
    let c = cfg(d.path());
    five_segments(&t, &c, 0);
    let dev = open(&t, &c);
    // One mount per cache.
    let other = Target::on(Arc::new(InMemory::new()), "other");
    ObjectDevice::create(&other, geo(), false).unwrap();
    let err = ObjectDevice::open_full(&other, true, 8 << 20, None, Some(&c))
        .err()
        .unwrap();
    assert!(err.contains("in use by another mount"), "{err}");
    let gets = dev.object_counters().gets;
    // What the cleaner asks: held on disk costs no GET (asking fetches
    // nothing).
    assert_eq!(dev.is_cached(seg(4), SEG_BYTES), Some(true));
    assert_eq!(dev.is_cached(seg(2), SEG_BYTES), Some(false));
    assert_eq!(dev.object_counters().gets, gets);
    for n in 4..7 {
        assert_eq!(read_seg(&dev, n), fill(n, 0), "segment {n}");
    }
    assert_eq!(dev.object_counters().gets, gets, "the last three from disk");
    // Segment 2 is fetched, and segment 4, the least recently used,
    // leaves the disk for it.
    assert_eq!(read_seg(&dev, 2), fill(2, 0));
    assert_eq!(dev.object_counters().gets, gets + 1);
    assert!(cache_bytes(&c) <= c.max_bytes);
    assert!(!c.dir.join("seg-4").exists() && c.dir.join("seg-2").exists());
    let counters: std::collections::HashMap<_, _> = dev.extra_counters().into_iter().collect();
    assert_eq!(counters["disk_cache_hits"], 3);
    dev.release().unwrap();
    drop(dev);

    // A damaged entry is fetched again, and right.
    let f = c.dir.join("seg-5");
    let mut b = std::fs::read(&f).unwrap();
    b[100] ^= 1;
    std::fs::write(&f, &b).unwrap();
    let dev = open(&t, &c);
    let gets = dev.object_counters().gets;
    assert_eq!(read_seg(&dev, 5), fill(5, 0));
    assert_eq!(dev.object_counters().gets, gets + 1);
    assert_eq!(read_seg(&dev, 6), fill(6, 0));
    assert_eq!(dev.object_counters().gets, gets + 1, "segment 6 from disk");
    dev.release().unwrap();
}

#[test]
fn another_writer_or_a_crash_empties_it() {
    let d = tempfile::tempdir().unwrap();
    let t = Target::on(Arc::new(InMemory::new()), "fs");
    ObjectDevice::create(&t, geo(), false).unwrap();
    let c = cfg(d.path());
    five_segments(&t, &c, 0);
    // Another writer, without the cache, changes segment 6.
    let other = ObjectDevice::open(&t, true, 8 << 20).unwrap();
    other.write_at(seg(6), &fill(6, 0x55)).unwrap();
    other.flush().unwrap();
    other.release().unwrap();
    let dev = open(&t, &c);
    assert_eq!(cache_bytes(&c), 0, "emptied");
    assert_eq!(read_seg(&dev, 6), fill(6, 0x55));
    dev.write_at(seg(5), &fill(5, 1)).unwrap();
    dev.flush().unwrap();
    // The mount dies: the next one does not trust the cache.
    dev.kill_switch()
        .store(true, std::sync::atomic::Ordering::Relaxed);
    drop(dev);
    assert!(cache_bytes(&c) > 0);
    // Its lease names this (live) test process: given up by hand.
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(t.store.delete(&t.path("lease")))
        .unwrap();
    let dev = open(&t, &c);
    assert_eq!(cache_bytes(&c), 0, "emptied after a crash");
    assert_eq!(read_seg(&dev, 5), fill(5, 1));
    dev.release().unwrap();
}

/// A read-only open keeps segments on disk too, each with its object's
/// ETag: after a remount, a segment the store holds unchanged comes from
/// disk once a GET conditional on that ETag returns no bytes (counted as
/// revalidated, not as a GET); one the writer changed since is fetched
/// again and its entry replaced. A writer empties a cache a reader used.
#[test]
fn a_reader_keeps_segments_on_disk_checked_by_their_etags() {
    let d = tempfile::tempdir().unwrap();
    let t = Target::on(Arc::new(InMemory::new()), "fs");
    ObjectDevice::create(&t, geo(), false).unwrap();
    let w = ObjectDevice::open(&t, true, 8 << 20).unwrap();
    for n in 2..7 {
        w.write_at(seg(n), &fill(n, 0)).unwrap();
        w.flush().unwrap();
    }
    w.release().unwrap();
    drop(w);
    let rc = DiskCacheConfig {
        dir: d.path().join("reader"),
        max_bytes: 3 * (SEG_BYTES + 64),
    };
    let reader = || {
        let r = ObjectDevice::open_full(&t, false, 8 << 20, None, Some(&rc)).unwrap();
        r.set_readahead(0);
        r
    };
    let revalidated = |r: &ObjectDevice| {
        let c: std::collections::HashMap<_, _> = r.extra_counters().into_iter().collect();
        c["disk_cache_revalidated"]
    };
    let r = reader();
    let gets = r.object_counters().gets;
    for n in 4..7 {
        assert_eq!(read_seg(&r, n), fill(n, 0));
    }
    assert_eq!(r.object_counters().gets, gets + 3, "fetched");
    r.release().unwrap();
    drop(r);

    let r = reader();
    let gets = r.object_counters().gets;
    for n in 4..7 {
        assert_eq!(read_seg(&r, n), fill(n, 0), "segment {n} from disk");
    }
    assert_eq!(r.object_counters().gets, gets, "no object fetched again");
    assert_eq!(revalidated(&r), 3);
    r.release().unwrap();
    drop(r);

    // The writer changes segment 5.
    let w = ObjectDevice::open(&t, true, 8 << 20).unwrap();
    w.write_at(seg(5), &fill(5, 9)).unwrap();
    w.flush().unwrap();
    w.release().unwrap();
    drop(w);
    let r = reader();
    let gets = r.object_counters().gets;
    assert_eq!(
        read_seg(&r, 5),
        fill(5, 9),
        "the changed segment, not the entry"
    );
    assert_eq!(r.object_counters().gets, gets + 1);
    assert_eq!(read_seg(&r, 6), fill(6, 0));
    assert_eq!((r.object_counters().gets, revalidated(&r)), (gets + 1, 1));
    r.release().unwrap();
    drop(r);
    let r = reader();
    assert_eq!(read_seg(&r, 5), fill(5, 9), "its new entry");
    assert_eq!(revalidated(&r), 1);
    r.release().unwrap();
    drop(r);

    // A writer does not trust what a reader kept.
    let w = ObjectDevice::open_full(&t, true, 8 << 20, None, Some(&rc)).unwrap();
    assert_eq!(cache_bytes(&rc), 0, "emptied");
    w.release().unwrap();
}
