//! The object-store device under the engine: a file system made, written,
//! unmounted and mounted again from the store alone reads back the same
//! and passes fsck; a flush makes exactly what came before it durable; a
//! freed segment's object is deleted; one writer at a time.

mod common;

use common::*;
use lsfs_core::device::BlockDevice;
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_core::meta::open::MkfsOptions;
use lsfs_object::lease::Holder;
use lsfs_object::{ObjectDevice, Target};
use lsfs_vfs::{Vfs, ROOT_INO};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::ObjectStore;
use std::sync::Arc;

fn target() -> Target {
    Target::on(Arc::new(InMemory::new()), "fs/one")
}

fn open(t: &Target, writable: bool) -> ObjectDevice {
    ObjectDevice::open(t, writable, 8 << 20).unwrap()
}

fn objects(t: &Target) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let seg = t.path("seg");
    let list = rt
        .block_on(t.store.list_with_delimiter(Some(&seg)))
        .unwrap();
    let mut v: Vec<String> = list
        .objects
        .iter()
        .map(|o| o.location.to_string())
        .collect();
    v.sort();
    v
}

#[test]
fn a_file_system_lives_in_the_store_alone() {
    let t = target();
    ObjectDevice::create(&t, geo(), false).unwrap();
    let opts = MkfsOptions {
        segment_blocks: SEG_BLOCKS as u32,
        label: "objects".into(),
    };
    let mut fs = Lsfs::mkfs(Box::new(open(&t, true)), &opts, MountConfig::default()).unwrap();
    let mut files = Vec::new();
    for n in 0..20u8 {
        let a = fs
            .mknod(
                ROOT_INO,
                format!("f{n}").as_bytes(),
                libc::S_IFREG | 0o644,
                0,
                &ctx(),
            )
            .unwrap();
        let d = data(n, 50_000 * (n as usize % 5 + 1));
        fs.write(a.ino, 0, &d).unwrap();
        files.push((format!("f{n}"), d));
    }
    fs.unmount().unwrap();
    drop(fs);
    assert!(
        objects(&t).len() > 3,
        "segments are objects: {:?}",
        objects(&t)
    );

    let report = lsfs_core::fsck::fsck(Box::new(open(&t, false))).unwrap();
    assert!(report.errors.is_empty(), "fsck: {:?}", report.errors);
    let mut fs = Lsfs::open(Box::new(open(&t, true)), MountConfig::default()).unwrap();
    for (name, d) in &files {
        let e = fs.lookup(ROOT_INO, name.as_bytes()).unwrap();
        assert_eq!(&fs.read(e.ino, 0, d.len() as u32).unwrap(), d, "{name}");
    }
    fs.unmount().unwrap();
}

#[test]
fn a_flush_makes_exactly_what_came_before_it_durable() {
    let t = target();
    ObjectDevice::create(&t, geo(), false).unwrap();
    let dev = open(&t, true);
    let a = vec![0xaa; 8192];
    let b = vec![0xbb; 4096];
    dev.write_at(4096, &a).unwrap();
    dev.write_at(1 << 20, &a).unwrap();
    dev.flush().unwrap();
    dev.write_at(4096, &b).unwrap();
    // A crash: the process goes, with what it had not flushed.
    drop(dev);
    let dev = open(&t, false);
    let mut got = vec![0; 8192];
    dev.read_at(4096, &mut got).unwrap();
    assert_eq!(got, a, "the flushed write, not the later one");
    dev.read_at(1 << 20, &mut got).unwrap();
    assert_eq!(got, a);
    // Never written: zeros, and no object fetched for it.
    dev.read_at(20 << 20, &mut got).unwrap();
    assert!(got.iter().all(|&x| x == 0));
    assert_eq!(
        dev.object_counters().puts,
        0,
        "a read-only device writes nothing"
    );
}

#[test]
fn a_discarded_segment_is_deleted_and_partial_discards_are_not_taken() {
    let t = target();
    ObjectDevice::create(&t, geo(), false).unwrap();
    let dev = open(&t, true);
    let seg_bytes = SEG_BLOCKS * 4096;
    // Segment 2 starts at block 1 + 2·64.
    let at = (1 + 2 * SEG_BLOCKS) * 4096;
    dev.write_at(at, &vec![7; 4096]).unwrap();
    dev.flush().unwrap();
    assert_eq!(objects(&t), vec!["fs/one/seg/2".to_string()]);
    assert_eq!(dev.discard(at, seg_bytes - 4096).unwrap(), 0);
    assert_eq!(dev.discard(at, seg_bytes).unwrap(), seg_bytes);
    assert!(objects(&t).is_empty());
    let mut got = vec![1; 4096];
    dev.read_at(at, &mut got).unwrap();
    assert!(got.iter().all(|&x| x == 0));
}

#[test]
fn one_writer_at_a_time_and_readers_besides() {
    let t = target();
    ObjectDevice::create(&t, geo(), false).unwrap();
    let w = open(&t, true);
    let err = ObjectDevice::open(&t, true, 8 << 20).err().unwrap();
    assert!(err.contains("mounted read-write elsewhere"), "{err}");
    assert!(err.contains("fs/one/lease"), "names the object: {err}");
    let _r = open(&t, false);
    drop(w);
    let _w2 = open(&t, true);
}

#[test]
fn a_lease_left_by_a_process_that_is_gone_is_taken_over() {
    let t = target();
    ObjectDevice::create(&t, geo(), false).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let put_lease = |h: &Holder| {
        let body = serde_json::to_vec(h).unwrap();
        rt.block_on(t.store.put(&Path::from("fs/one/lease"), body.into()))
            .unwrap();
    };
    // A process of this machine and boot that has exited: its pid no
    // longer runs (or runs as another process, started later).
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = Holder {
        pid: child.id(),
        ..Holder::me()
    };
    child.wait().unwrap();
    assert!(dead.is_gone());
    put_lease(&dead);
    let w = open(&t, true);
    let err = ObjectDevice::open(&t, true, 8 << 20).err().unwrap();
    assert!(
        err.contains("mounted read-write elsewhere"),
        "the lease taken over is held: {err}"
    );
    drop(w);

    // Alive (this process), from another host, another boot, or without
    // what tells: refused, as before.
    let alive = Holder::me();
    let other_host = Holder {
        host: "elsewhere".into(),
        ..dead.clone()
    };
    let other_boot = Holder {
        boot: Some("another-boot".into()),
        ..dead.clone()
    };
    let untold = Holder {
        boot: None,
        start: None,
        ..dead.clone()
    };
    for h in [alive, other_host, other_boot, untold] {
        assert!(!h.is_gone(), "{h:?}");
        put_lease(&h);
        let err = ObjectDevice::open(&t, true, 8 << 20).err().unwrap();
        assert!(err.contains("mounted read-write elsewhere"), "{h:?}: {err}");
    }
}

#[test]
fn what_is_not_a_device_is_refused_clearly() {
    let t = target();
    let err = ObjectDevice::open(&t, false, 8 << 20).err().unwrap();
    assert!(err.contains("no lsfs file system there"), "{err}");
    ObjectDevice::create(&t, geo(), false).unwrap();
    let err = ObjectDevice::create(&t, geo(), false).unwrap_err();
    assert!(err.contains("already holds"), "{err}");
    // A geometry file that is not ours.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(t.store.put(
        &Path::from("fs/one/geometry.json"),
        b"{\"x\":1}".to_vec().into(),
    ))
    .unwrap();
    let err = ObjectDevice::open(&t, false, 8 << 20).err().unwrap();
    assert!(err.contains("damaged or not lsfs's"), "{err}");
    // A segment object of the wrong size is damage, not data.
    ObjectDevice::create(&t, geo(), true).unwrap();
    rt.block_on(
        t.store
            .put(&Path::from("fs/one/seg/0"), vec![1u8; 100].into()),
    )
    .unwrap();
    let dev = open(&t, false);
    let mut b = vec![0; 4096];
    let err = dev.read_at(4096, &mut b).unwrap_err().to_string();
    assert!(err.contains("holds 100 bytes"), "{err}");
}

/// Segment `n`'s first byte on the device (block 0 is a superblock).
fn seg_at(n: u64) -> u64 {
    (1 + n * SEG_BLOCKS) * 4096
}

#[test]
fn a_write_that_covers_an_object_whole_fetches_nothing() {
    let t = target();
    ObjectDevice::create(&t, geo(), false).unwrap();
    let dev = open(&t, true);
    dev.write_at(seg_at(2), &vec![1; 4096]).unwrap();
    dev.write_at(seg_at(3), &vec![1; 4096]).unwrap();
    dev.flush().unwrap();
    drop(dev);
    // A new open: nothing cached, both objects in the store.
    let dev = open(&t, true);
    let whole = data(9, SEG_BYTES as usize);
    dev.write_at(seg_at(2), &whole).unwrap();
    assert_eq!(
        dev.object_counters().gets,
        0,
        "segment 2 is replaced whole: nothing to fetch"
    );
    // Segment 4 whole and the first block of segment 5 (absent: zeros):
    // still nothing fetched.
    let mut span = data(5, SEG_BYTES as usize);
    span.extend_from_slice(&[5; 4096]);
    dev.write_at(seg_at(4), &span).unwrap();
    assert_eq!(dev.object_counters().gets, 0);
    // Part of segment 3: the rest of it must come from the store.
    dev.write_at(seg_at(3) + 4096, &[3; 4096]).unwrap();
    assert_eq!(dev.object_counters().gets, 1, "segment 3 fetched once");
    dev.flush().unwrap();
    drop(dev);
    let dev = open(&t, false);
    let mut got = vec![0; SEG_BYTES as usize];
    dev.read_at(seg_at(2), &mut got).unwrap();
    assert_eq!(got, whole);
    dev.read_at(seg_at(4), &mut got).unwrap();
    assert_eq!(got, span[..SEG_BYTES as usize]);
    let mut block = vec![0; 8192];
    dev.read_at(seg_at(3), &mut block).unwrap();
    assert_eq!(&block[..4096], &[1; 4096][..], "the block written before");
    assert_eq!(&block[4096..], &[3; 4096][..]);
    dev.read_at(seg_at(5), &mut block).unwrap();
    assert_eq!(&block[..4096], &[5; 4096][..]);
    assert!(block[4096..].iter().all(|&x| x == 0));
}

#[test]
fn adjacent_segments_discarded_as_one_range_are_all_deleted() {
    let t = target();
    ObjectDevice::create(&t, geo(), false).unwrap();
    let dev = open(&t, true);
    for n in 2..5 {
        dev.write_at(seg_at(n), &vec![7; 4096]).unwrap();
    }
    dev.flush().unwrap();
    assert_eq!(objects(&t).len(), 3);
    // Segments 2 and 3 whole, and the first block of 4 (not taken).
    assert_eq!(
        dev.discard(seg_at(2), 2 * SEG_BYTES + 4096).unwrap(),
        2 * SEG_BYTES
    );
    assert_eq!(objects(&t), vec!["fs/one/seg/4".to_string()]);
    assert_eq!(dev.object_counters().deletes, 2);
}

#[test]
fn the_device_says_what_is_cached_and_counts_the_cleaners_gets() {
    let t = target();
    ObjectDevice::create(&t, geo(), false).unwrap();
    let dev = open(&t, true);
    for n in 2..6 {
        dev.write_at(seg_at(n), &vec![7; 4096]).unwrap();
    }
    dev.flush().unwrap();
    drop(dev);
    let dev = open(&t, false);
    // Counted one by one: no segments fetched ahead of the reads in order.
    dev.set_readahead(0);
    assert_eq!(dev.is_cached(seg_at(2), SEG_BYTES), Some(false));
    let mut got = vec![0; 4096];
    dev.read_at(seg_at(2), &mut got).unwrap();
    assert_eq!(dev.is_cached(seg_at(2), SEG_BYTES), Some(true));
    assert_eq!(dev.is_cached(seg_at(3), SEG_BYTES), Some(false));
    assert_eq!(
        dev.is_cached(seg_at(2), 2 * SEG_BYTES),
        Some(false),
        "a range is cached only if all of it is"
    );
    let c = dev.object_counters();
    assert_eq!((c.gets, c.cleaner_gets), (1, 0), "{c:?}");
    {
        let _cleaner = lsfs_core::device::CleanerReads::start();
        dev.read_at(seg_at(3), &mut got).unwrap();
        // Cached: no request, so nothing to count.
        dev.read_at(seg_at(2), &mut got).unwrap();
    }
    let c = dev.object_counters();
    assert_eq!((c.gets, c.cleaner_gets), (2, 1), "{c:?}");
    assert_eq!(c.cleaner_get_bytes, SEG_BYTES);
    // Another thread's reads are not the cleaner's, nor are this one's after.
    let _cleaner = lsfs_core::device::CleanerReads::start();
    std::thread::scope(|s| {
        s.spawn(|| dev.read_at(seg_at(4), &mut vec![0; 4096]).unwrap());
    });
    drop(_cleaner);
    dev.read_at(seg_at(5), &mut got).unwrap();
    let c = dev.object_counters();
    assert_eq!((c.gets, c.cleaner_gets), (4, 1), "{c:?}");
}

#[test]
fn an_object_known_absent_is_not_fetched_again() {
    let t = target();
    ObjectDevice::create(&t, geo(), false).unwrap();
    let dev = open(&t, true);
    let counts = |d: &ObjectDevice| {
        let c = d.object_counters();
        (c.gets, c.get_misses)
    };
    // A fresh store holds no segment: the first write into one asks, and
    // is answered "not found".
    dev.write_at(seg_at(2), &[2; 4096]).unwrap();
    assert_eq!(counts(&dev), (0, 1));
    dev.flush().unwrap();
    assert_eq!(dev.discard(seg_at(2), SEG_BYTES).unwrap(), SEG_BYTES);
    assert!(objects(&t).is_empty());
    // Deleted by this writer: the log starting the segment again, a
    // record at a time, asks nothing.
    dev.write_at(seg_at(2) + 4096, &[3; 4096]).unwrap();
    assert_eq!(counts(&dev), (0, 1), "the deleted object is not asked for");
    assert_eq!(dev.is_cached(seg_at(2), SEG_BYTES), Some(true));
    dev.flush().unwrap();
    drop(dev);
    let dev = open(&t, false);
    let mut got = vec![9; 8192];
    dev.read_at(seg_at(2), &mut got).unwrap();
    assert!(got[..4096].iter().all(|&x| x == 0), "the old block is gone");
    assert_eq!(&got[4096..], &[3; 4096][..]);
    assert_eq!(counts(&dev), (1, 0));
}
