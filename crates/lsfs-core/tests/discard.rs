//! Discarding freed segments (meta/discard.rs): what is discarded is only
//! ever a free segment that no checkpoint the user can still mount needs.
//! The memory device reads a discarded range as zeros, so a wrong discard
//! shows as a checkpoint or snapshot that no longer reads back.

mod common;
use common::*;
use lsfs_core::device::{BlockDevice, DeviceStats, MemDevice};
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_core::meta::discard::{DiscardMode, DISCARD_BATCH_SECS};
use lsfs_vfs::{Vfs, ROOT_INO};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

/// Discarded ranges, (byte offset, length), in order.
type Discarded = Arc<Mutex<Vec<(u64, u64)>>>;

/// A memory device that remembers every discard, and whose bytes outlive
/// the mount (to open each kept checkpoint afterwards).
struct Recorder {
    dev: Arc<MemDevice>,
    discarded: Discarded,
}

impl BlockDevice for Recorder {
    fn size_bytes(&self) -> u64 {
        self.dev.size_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> lsfs_core::Result<()> {
        self.dev.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> lsfs_core::Result<()> {
        self.dev.write_at(offset, buf)
    }
    fn flush(&self) -> lsfs_core::Result<()> {
        self.dev.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> lsfs_core::Result<u64> {
        self.discarded.lock().unwrap().push((offset, len));
        self.dev.discard(offset, len)
    }
    fn stats(&self) -> &DeviceStats {
        self.dev.stats()
    }
}

const DEV_BYTES: u64 = 48 * MIB;
const FILE_BYTES: usize = 1 << 20;

fn config(mode: DiscardMode, protection_secs: u64) -> MountConfig {
    let mut c = cfg();
    // Large enough that no checkpoint comes between a test's own.
    c.store.cache_blocks = 8192;
    c.store.protection_secs = protection_secs;
    c.store.discard = mode;
    c
}

fn mkfs_recorded(config: MountConfig) -> (Lsfs, Arc<MemDevice>, Discarded) {
    let dev = Arc::new(MemDevice::new(DEV_BYTES));
    let discarded = Discarded::default();
    let rec = Recorder {
        dev: dev.clone(),
        discarded: discarded.clone(),
    };
    let mut fs = Lsfs::mkfs(Box::new(rec), &opts(), config).unwrap();
    // Only the tests' own checkpoints free segments.
    fs.cleaner.enabled = false;
    (fs, dev, discarded)
}

/// The files of the root directory and their contents.
type Tree = BTreeMap<Vec<u8>, Vec<u8>>;

fn read_tree(fs: &mut Lsfs) -> Tree {
    let names: Vec<Vec<u8>> = fs
        .readdir(ROOT_INO, 0, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .filter(|n| n.starts_with(b"f"))
        .collect();
    names
        .into_iter()
        .map(|n| {
            let a = fs.lookup(ROOT_INO, &n).unwrap();
            let mut data = Vec::new();
            while (data.len() as u64) < a.size {
                let part = fs.read(a.ino, data.len() as u64, 1 << 20).unwrap();
                assert!(!part.is_empty());
                data.extend(part);
            }
            fs.forget(a.ino, 1);
            (n, data)
        })
        .collect()
}

fn create(fs: &mut Lsfs, tree: &mut Tree, name: &str, seed: u64) {
    let a = fs
        .mknod(ROOT_INO, name.as_bytes(), libc::S_IFREG | 0o644, 0, &ctx())
        .unwrap();
    let data = pattern(seed, FILE_BYTES);
    fs.write(a.ino, 0, &data).unwrap();
    fs.forget(a.ino, 1);
    tree.insert(name.as_bytes().to_vec(), data);
}

fn overwrite(fs: &mut Lsfs, tree: &mut Tree, name: &str, seed: u64) {
    let a = fs.lookup(ROOT_INO, name.as_bytes()).unwrap();
    let data = pattern(seed, FILE_BYTES);
    fs.write(a.ino, 0, &data).unwrap();
    fs.forget(a.ino, 1);
    tree.insert(name.as_bytes().to_vec(), data);
}

fn remove(fs: &mut Lsfs, tree: &mut Tree, name: &str) {
    fs.unlink(ROOT_INO, name.as_bytes()).unwrap();
    // The blocks of a large file are freed in the background: here at once,
    // so that the checkpoints after this free its segments.
    fs.reclaim_all().unwrap();
    tree.remove(name.as_bytes());
}

/// Every kept checkpoint and snapshot of the image in `dev`, opened
/// read-only, reads back as the tree it was taken of (`states`: the tree
/// as of each checkpoint written, by number). Returns how many were read.
fn every_kept_checkpoint_reads_back(dev: &MemDevice, states: &BTreeMap<u64, Tree>) -> usize {
    let bytes = dev.bytes();
    let mut ro = cfg();
    ro.store.read_only = true;
    let live = Lsfs::open(Box::new(MemDevice::from_bytes(bytes.clone())), ro).unwrap();
    let kept: Vec<u64> = live.checkpoints().iter().map(|e| e.cno).collect();
    drop(live);
    for &cno in &kept {
        let mut c = cfg();
        c.checkpoint = Some(cno);
        c.store.read_only = true;
        let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(bytes.clone())), c)
            .unwrap_or_else(|e| panic!("checkpoint {cno} does not open: {e}"));
        // The tree of the newest checkpoint written at or before it.
        let (at, want) = states
            .range(..=cno)
            .next_back()
            .unwrap_or_else(|| panic!("no state recorded at or before checkpoint {cno}"));
        let got = read_tree(&mut fs);
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "checkpoint {cno} (as of {at}): names"
        );
        for (name, data) in want {
            assert!(
                got[name] == *data,
                "checkpoint {cno} (as of {at}): {} differs",
                String::from_utf8_lossy(name)
            );
        }
    }
    kept.len()
}

/// Segment numbers a list of discarded ranges covers, checking that each
/// range is whole segments.
fn discarded_segments(fs: &Lsfs, ranges: &[(u64, u64)]) -> BTreeSet<u64> {
    let geo = &fs.store.geo();
    let seg_bytes = geo.segment_blocks as u64 * 4096;
    let first = geo.byte_offset(geo.segment_start(0));
    let mut out = BTreeSet::new();
    for &(off, len) in ranges {
        assert!(
            (off - first) % seg_bytes == 0 && len % seg_bytes == 0 && len > 0,
            "discard of {len} bytes at {off} is not whole segments"
        );
        let s = (off - first) / seg_bytes;
        out.extend(s..s + len / seg_bytes);
    }
    out
}

/// Files seen only by a snapshot, only by a kept plain checkpoint, only by
/// an expired one, and by nothing: continuous discard drops the segments
/// of the last two, never those of the first two, and every checkpoint
/// kept reads back whole afterwards.
#[test]
fn discards_only_what_no_kept_checkpoint_needs() {
    let (mut fs, dev, discarded) = mkfs_recorded(config(DiscardMode::On, 100));
    let t0 = fs.store.now();
    fs.clock().set_secs(t0);
    let mut tree = Tree::new();
    let mut states = BTreeMap::new();
    let mut cp = |fs: &mut Lsfs, tree: &Tree| {
        let cno = fs.checkpoint().unwrap();
        states.insert(cno, tree.clone());
    };
    // a*: kept by a snapshot, then deleted.
    for i in 0..6 {
        create(&mut fs, &mut tree, &format!("fa{i}"), 100 + i);
    }
    cp(&mut fs, &tree);
    let snap = fs.store.roots().cur_cno - 1;
    fs.snapshot_set(snap, true).unwrap();
    // b*: seen by checkpoints that will expire, then deleted.
    for i in 0..6 {
        create(&mut fs, &mut tree, &format!("fb{i}"), 200 + i);
    }
    cp(&mut fs, &tree);
    for i in 0..6 {
        remove(&mut fs, &mut tree, &format!("fa{i}"));
        remove(&mut fs, &mut tree, &format!("fb{i}"));
    }
    cp(&mut fs, &tree);
    // c*: its first version is seen by a checkpoint still kept at the end.
    fs.clock().set_secs(t0 + 60);
    for i in 0..6 {
        create(&mut fs, &mut tree, &format!("fc{i}"), 300 + i);
    }
    cp(&mut fs, &tree);
    let kept_c = fs.store.roots().cur_cno - 1;
    for i in 0..6 {
        overwrite(&mut fs, &mut tree, &format!("fc{i}"), 400 + i);
    }
    cp(&mut fs, &tree);
    assert!(
        discarded.lock().unwrap().is_empty(),
        "discarded while every checkpoint is in its protection window"
    );
    // The checkpoints of t0 leave the window; those of t0 + 60 stay.
    fs.clock().set_secs(t0 + 120);
    for _ in 0..8 {
        cp(&mut fs, &tree);
    }
    let kept: BTreeSet<u64> = fs.checkpoints().iter().map(|e| e.cno).collect();
    assert!(kept.contains(&snap) && kept.contains(&kept_c), "{kept:?}");
    let ranges = discarded.lock().unwrap().clone();
    let segs = discarded_segments(&fs, &ranges);
    // b's 6 MiB are half the segments or more; a's stay.
    let seg_bytes = fs.store.geo().segment_blocks as u64 * 4096;
    assert!(
        segs.len() as u64 * seg_bytes >= 3 * MIB,
        "only {} segments discarded",
        segs.len()
    );
    let st = fs.store.discard_stats();
    assert_eq!(st.bytes, segs.len() as u64 * seg_bytes, "{st:?}");
    assert_eq!(st.requests, ranges.len() as u64);
    assert_eq!(
        fs.store.device_counters().discard_bytes,
        st.bytes,
        "the device counts what the store asked for"
    );
    // Discarded segments are free now, or were written again since.
    for &s in &segs {
        let u = fs.store.segs().usage[s as usize];
        assert!(
            fs.store.segs().is_free(s) || u.nblocks > 0,
            "segment {s}: {u:?}"
        );
    }
    let now = read_tree(&mut fs);
    assert!(now == tree, "the live tree differs");
    fs.unmount().unwrap();
    drop(fs);
    let n = every_kept_checkpoint_reads_back(&dev, &states);
    assert!(n >= 3, "only {n} checkpoints kept");
    assert_clean(&fsck_bytes(dev.bytes()), "after discards");
}

/// With discard off nothing is discarded by itself; FITRIM then discards
/// exactly the free segments wholly in its range, in runs of at least
/// `minlen`, and the file system reads back whole.
#[test]
fn trim_discards_exactly_the_free_segments_in_its_range() {
    let (mut fs, dev, discarded) = mkfs_recorded(config(DiscardMode::Off, 0));
    let mut tree = Tree::new();
    for i in 0..16 {
        create(&mut fs, &mut tree, &format!("f{i}"), i);
    }
    fs.checkpoint().unwrap();
    for i in (0..16).step_by(2) {
        remove(&mut fs, &mut tree, &format!("f{i}"));
    }
    for _ in 0..4 {
        fs.checkpoint().unwrap();
    }
    assert!(discarded.lock().unwrap().is_empty(), "discard is off");

    let geo = fs.store.geo();
    let seg_bytes = geo.segment_blocks as u64 * 4096;
    let seg_at = |s: u64| geo.byte_offset(geo.segment_start(s));
    // A minimum longer than the device: nothing qualifies.
    assert_eq!(fs.trim_free_space(0, u64::MAX, DEV_BYTES).unwrap(), 0);
    assert!(discarded.lock().unwrap().is_empty());
    // Segments 10..20, starting a byte into segment 10: 11..20.
    let got = fs
        .trim_free_space(seg_at(10) + 1, seg_at(20) - seg_at(10) - 1, 0)
        .unwrap();
    let free_in = |lo: u64, hi: u64, fs: &Lsfs| -> BTreeSet<u64> {
        (lo..hi).filter(|&s| fs.store.segs().is_free(s)).collect()
    };
    let want = free_in(11, 20, &fs);
    let ranges = std::mem::take(&mut *discarded.lock().unwrap());
    assert_eq!(discarded_segments(&fs, &ranges), want);
    assert_eq!(got, want.len() as u64 * seg_bytes);
    // The whole device: every free segment, and nothing else.
    let got = fs.trim_free_space(0, u64::MAX, 0).unwrap();
    let want = free_in(0, geo.nsegments, &fs);
    assert!(want.len() > 10, "only {} free segments", want.len());
    let ranges = std::mem::take(&mut *discarded.lock().unwrap());
    assert_eq!(discarded_segments(&fs, &ranges), want);
    assert_eq!(got, want.len() as u64 * seg_bytes);
    let st = fs.store.discard_stats();
    assert_eq!(st.trims, 3);
    assert!(
        read_tree(&mut fs) == tree,
        "the live tree differs after trim"
    );
    fs.unmount().unwrap();
    drop(fs);
    assert_clean(&fsck_bytes(dev.bytes()), "after trim");
    // A checkpoint mounted read-only cannot trim.
    let mut c = cfg();
    c.store.read_only = true;
    let mut ro = Lsfs::open(Box::new(MemDevice::from_bytes(dev.bytes())), c).unwrap();
    assert!(ro.trim_free_space(0, u64::MAX, 0).is_err());
}

/// Batched: freed segments wait for the batch (its size, its age, or the
/// unmount), then go as sorted runs; a queued segment the writer took
/// meanwhile is skipped.
#[test]
fn batched_discard_waits_for_its_batch() {
    let (mut fs, dev, discarded) = mkfs_recorded(config(DiscardMode::Batched, 0));
    let t0 = fs.store.now();
    fs.clock().set_secs(t0);
    let mut tree = Tree::new();
    for i in 0..10 {
        create(&mut fs, &mut tree, &format!("f{i}"), i);
    }
    fs.checkpoint().unwrap();
    for i in 0..10 {
        remove(&mut fs, &mut tree, &format!("f{i}"));
    }
    for _ in 0..3 {
        fs.checkpoint().unwrap();
    }
    let queued = fs.store.discard_stats().queued_segments;
    assert!(queued >= 3, "only {queued} segments queued");
    assert!(
        discarded.lock().unwrap().is_empty(),
        "discarded before the batch"
    );
    fs.tick().unwrap();
    assert!(
        discarded.lock().unwrap().is_empty(),
        "discarded before its time"
    );
    fs.clock().set_secs(t0 + DISCARD_BATCH_SECS + 1);
    fs.tick().unwrap();
    let st = fs.store.discard_stats();
    assert_eq!(st.batches, 1, "{st:?}");
    assert_eq!(st.queued_segments, 0);
    assert_eq!(st.segments + st.skipped_reused, queued, "{st:?}");
    let ranges = discarded.lock().unwrap().clone();
    assert_eq!(discarded_segments(&fs, &ranges).len() as u64, st.segments);
    // Sorted runs: each request starts past the previous one's end.
    for w in ranges.windows(2) {
        assert!(
            w[0].0 + w[0].1 < w[1].0,
            "runs not merged or sorted: {ranges:?}"
        );
    }
    // More freed, then the unmount discards them.
    for i in 10..16 {
        create(&mut fs, &mut tree, &format!("f{i}"), i);
    }
    fs.checkpoint().unwrap();
    for i in 10..16 {
        remove(&mut fs, &mut tree, &format!("f{i}"));
    }
    fs.checkpoint().unwrap();
    fs.checkpoint().unwrap();
    assert!(fs.store.discard_stats().queued_segments > 0);
    fs.unmount().unwrap();
    assert_eq!(fs.store.discard_stats().queued_segments, 0);
    assert!(fs.store.discard_stats().batches >= 2);
    drop(fs);
    assert_clean(&fsck_bytes(dev.bytes()), "after batches");
}

/// Batched: each freed segment is discarded only once it has stayed free
/// for `DISCARD_BATCH_SECS` of its own, and a segment the writer took
/// before then is not discarded at all (under sustained overwrites the log
/// takes freed segments back within seconds, and a discard would only
/// cost the device).
#[test]
fn batched_discard_spares_segments_the_writer_takes_back() {
    let (mut fs, dev, discarded) = mkfs_recorded(config(DiscardMode::Batched, 0));
    let t0 = fs.store.now();
    fs.clock().set_secs(t0);
    let mut tree = Tree::new();
    let geo = fs.store.geo();
    let free = (0..geo.nsegments)
        .filter(|&s| fs.store.segs().is_free(s))
        .count() as u64;
    // Two thirds of the free space, written and deleted: its segments
    // queued at t0.
    let files = free * 2 / 3 * geo.segment_blocks as u64 * 4096 / FILE_BYTES as u64;
    for i in 0..files {
        create(&mut fs, &mut tree, &format!("a{i}"), i);
    }
    fs.checkpoint().unwrap();
    for i in 0..files {
        remove(&mut fs, &mut tree, &format!("a{i}"));
    }
    for _ in 0..3 {
        fs.checkpoint().unwrap();
    }
    let first = fs.store.discard_queue();
    assert!(first.len() >= 8, "only {} segments queued", first.len());
    // Half a wait later, new files take some of them back.
    fs.clock().set_secs(t0 + DISCARD_BATCH_SECS / 2);
    for i in 0..files {
        create(&mut fs, &mut tree, &format!("b{i}"), 100 + i);
    }
    fs.checkpoint().unwrap();
    let taken: BTreeSet<u64> = (first.iter().copied())
        .filter(|&s| !fs.store.segs().is_free(s))
        .collect();
    assert!(!taken.is_empty(), "the writer took none of {first:?}");
    fs.tick().unwrap();
    assert!(discarded.lock().unwrap().is_empty(), "discarded early");
    // The first wait is over: the rest of the first segments go, the
    // taken ones never.
    fs.clock().set_secs(t0 + DISCARD_BATCH_SECS);
    fs.tick().unwrap();
    let ranges = std::mem::take(&mut *discarded.lock().unwrap());
    let got = discarded_segments(&fs, &ranges);
    let want: BTreeSet<u64> = first.difference(&taken).copied().collect();
    assert_eq!(got, want);
    let st = fs.store.discard_stats();
    assert_eq!(st.skipped_reused, taken.len() as u64, "{st:?}");
    assert_eq!(st.queued_segments, 0, "{st:?}");
    // Freed again: a wait of their own, from now.
    for i in 0..files {
        remove(&mut fs, &mut tree, &format!("b{i}"));
    }
    for _ in 0..3 {
        fs.checkpoint().unwrap();
    }
    let second = fs.store.discard_queue();
    let taken_and_free: BTreeSet<u64> = (taken.iter().copied())
        .filter(|&s| fs.store.segs().is_free(s))
        .collect();
    assert!(!taken_and_free.is_empty());
    assert!(
        second.is_superset(&taken_and_free),
        "{second:?} lacks some of {taken_and_free:?}"
    );
    fs.clock().set_secs(t0 + 2 * DISCARD_BATCH_SECS - 1);
    fs.tick().unwrap();
    assert!(discarded.lock().unwrap().is_empty(), "discarded early");
    fs.clock().set_secs(t0 + 2 * DISCARD_BATCH_SECS);
    fs.tick().unwrap();
    let ranges = std::mem::take(&mut *discarded.lock().unwrap());
    assert_eq!(discarded_segments(&fs, &ranges), second);
    assert!(read_tree(&mut fs) == tree, "the live tree differs");
    fs.unmount().unwrap();
    drop(fs);
    assert_clean(&fsck_bytes(dev.bytes()), "after discards");
}

/// The discards of segments the cleaner freed are counted as its
/// (`DiscardStats::cleaned_segments`, the DELETEs `lsfs gc stats` gives
/// the cleaner on an object store); those of segments that emptied by
/// themselves (files deleted) are not.
#[test]
fn discards_of_the_cleaners_victims_are_counted_as_its() {
    let (mut fs, _dev, discarded) = mkfs_recorded(config(DiscardMode::On, 0));
    let mut tree = Tree::new();
    for i in 0..8 {
        create(&mut fs, &mut tree, &format!("f{i}"), i);
    }
    fs.checkpoint().unwrap();
    // Half of every other file overwritten: segments partly dead.
    for i in (0..8).step_by(2) {
        let a = fs.lookup(ROOT_INO, format!("f{i}").as_bytes()).unwrap();
        fs.write(a.ino, 0, &pattern(100 + i, FILE_BYTES / 2))
            .unwrap();
        fs.forget(a.ino, 1);
    }
    fs.checkpoint().unwrap();
    let rep = fs.clean(8, "manual").unwrap();
    let victims: BTreeSet<u64> = rep.victims.iter().map(|v| v.segno).collect();
    assert!(!victims.is_empty(), "the pass cleaned nothing");
    fs.checkpoint().unwrap();
    fs.checkpoint().unwrap();
    // Every file deleted: their segments empty without the cleaner.
    for i in 0..8 {
        remove(&mut fs, &mut tree, &format!("f{i}"));
    }
    fs.checkpoint().unwrap();
    fs.checkpoint().unwrap();
    let all = discarded_segments(&fs, &discarded.lock().unwrap());
    let st = fs.store.discard_stats();
    let of_victims = all.intersection(&victims).count() as u64;
    assert!(of_victims > 0, "no victim discarded: {victims:?} {all:?}");
    assert_eq!(st.cleaned_segments, of_victims, "{st:?}");
    assert!(
        st.segments > st.cleaned_segments,
        "the deleted files' segments were discarded too, not as the cleaner's: {st:?}"
    );
}
