//! Damaged and foreign images: opening and fsck must fail with a message
//! that names what is wrong, and never panic. Damage that opening cannot
//! notice (inside the DAT, an old record) must be found by fsck.

mod common;
use common::*;
use lsfs_core::codec::crc_with_hole;
use lsfs_core::device::MemDevice;
use lsfs_core::fs::{CheckpointChecks, Lsfs, MountConfig};
use lsfs_core::inspect;
use lsfs_core::layout::BLOCK_BYTES;
use lsfs_vfs::{Vfs, ROOT_INO};
use rand::{Rng, SeedableRng};

const DEV_BYTES: u64 = 16 * MIB;

/// The mounts here are of damaged images, inconsistent before any
/// checkpoint: the checks after checkpoints (which presuppose a
/// consistent mount, `fs/invariants.rs`) would report the damage itself.
fn cfg() -> MountConfig {
    MountConfig {
        check_checkpoints: CheckpointChecks::Off,
        ..common::cfg()
    }
}

/// A small unmounted image with some files, directories and history.
fn good_image() -> Vec<u8> {
    let mut fs = mkfs(DEV_BYTES, cfg());
    let c = ctx();
    let d = fs.mkdir(ROOT_INO, b"dir", 0o755, &c).unwrap();
    for i in 0..20u64 {
        let f = fs
            .mknod(
                d.ino,
                format!("f{i}").as_bytes(),
                libc::S_IFREG | 0o644,
                0,
                &c,
            )
            .unwrap();
        fs.write(f.ino, 0, &pattern(i, 3000 + i as usize * 5000))
            .unwrap();
        if i % 5 == 0 {
            fs.checkpoint().unwrap();
        }
    }
    fs.unmount().unwrap();
    let b = image(&mut fs);
    assert_clean(&fsck_bytes(b.clone()), "the good image");
    b
}

/// The error opening `bytes` gives, as text (it must not open).
fn open_error(bytes: Vec<u8>) -> String {
    match Lsfs::open(Box::new(MemDevice::from_bytes(bytes)), cfg()) {
        Ok(_) => panic!("a damaged image opened"),
        Err(e) => e.to_string(),
    }
}

/// fsck's errors, joined; it must find some and must not have panicked.
#[track_caller]
fn fsck_errors(bytes: Vec<u8>) -> String {
    let r = fsck_bytes(bytes);
    assert!(!r.errors.is_empty(), "fsck found nothing wrong");
    let all = r.errors.join("\n");
    assert!(!all.contains("panicked"), "fsck hit a panic: {all}");
    all
}

fn last_block(b: &[u8]) -> usize {
    b.len() / BLOCK_BYTES - 1
}

fn reseal_superblock(b: &mut [u8], block: usize) {
    let s = &mut b[block * BLOCK_BYTES..(block + 1) * BLOCK_BYTES];
    let crc = crc_with_hole(s, BLOCK_BYTES - 4);
    s[BLOCK_BYTES - 4..].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn truncated_image_is_refused_as_truncated() {
    let mut b = good_image();
    b.truncate(b.len() / 2);
    let e = open_error(b.clone());
    assert!(e.contains("truncated"), "{e}");
    let f = fsck_errors(b);
    assert!(f.contains("truncated"), "{f}");
    // Too small to hold anything at all.
    let e = open_error(vec![0; 4096]);
    assert!(e.contains("too small"), "{e}");
}

#[test]
fn zeroed_or_random_images_are_not_lsfs() {
    let mut b = good_image();
    let last = last_block(&b);
    b[..BLOCK_BYTES].fill(0);
    b[last * BLOCK_BYTES..].fill(0);
    let e = open_error(b.clone());
    assert!(e.contains("not an lsfs image"), "{e}");
    assert!(fsck_errors(b).contains("not an lsfs image"));
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let garbage: Vec<u8> = (0..DEV_BYTES).map(|_| rng.gen()).collect();
    let e = open_error(garbage.clone());
    assert!(e.contains("not an lsfs image"), "{e}");
    assert!(fsck_errors(garbage).contains("not an lsfs image"));
}

#[test]
fn one_bad_superblock_copy_is_a_warning_two_are_an_error() {
    let good = good_image();
    let last = last_block(&good);
    let mut b = good.clone();
    b[100] ^= 0x04; // inside the first copy: its checksum no longer matches
                    // The other copy still opens the file system, with all its files.
    let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(b.clone())), cfg()).unwrap();
    let d = fs.lookup(ROOT_INO, b"dir").unwrap();
    assert_eq!(fs.readdir(d.ino, 0, 100).unwrap().len(), 22);
    drop(fs);
    let r = fsck_bytes(b.clone());
    assert_clean(&r, "an image with one bad superblock copy");
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("first superblock") && w.contains("checksum")),
        "{:?}",
        r.warnings
    );
    b[last * BLOCK_BYTES + 100] ^= 0x04;
    let e = open_error(b.clone());
    assert!(
        e.contains("checksum mismatch") && e.contains("superblock"),
        "{e}"
    );
    let f = fsck_errors(b);
    assert!(f.contains("checksum mismatch"), "{f}");
}

#[test]
fn future_format_version_is_refused_by_name() {
    let mut b = good_image();
    let last = last_block(&b);
    for blk in [0, last] {
        // The version follows the 8-byte magic; reseal so only the version is "wrong".
        b[blk * BLOCK_BYTES + 8..blk * BLOCK_BYTES + 12].copy_from_slice(&2u32.to_le_bytes());
        reseal_superblock(&mut b, blk);
    }
    let e = open_error(b.clone());
    assert!(
        e.contains("format version 2") && e.contains("unsupported"),
        "{e}"
    );
    assert!(fsck_errors(b).contains("format version 2"));
}

/// The record the superblocks point at, and its super root block.
fn checkpoint_record(b: &[u8]) -> (u64, u64) {
    let mut dev = MemDevice::from_bytes(b.to_vec());
    let sbs = inspect::superblock(&mut dev).unwrap();
    let sb = sbs[0].superblock.as_ref().unwrap();
    let seg = (sb.cp_record_block - 1) / sb.segment_blocks as u64;
    let dump = inspect::dump_segment(&mut dev, seg).unwrap();
    let rec = dump
        .records
        .iter()
        .find(|r| r.block == sb.cp_record_block)
        .expect("checkpoint record in its segment");
    let sr = rec.entries.last().unwrap();
    assert_eq!(sr.kind, "SuperRoot");
    (rec.block, sr.block)
}

#[test]
fn flipped_bit_in_super_root_or_record_header_is_found() {
    let good = good_image();
    let (rec, sr) = checkpoint_record(&good);
    let mut b = good.clone();
    b[sr as usize * BLOCK_BYTES + 20] ^= 0x01;
    let e = open_error(b.clone());
    assert!(
        e.contains("checkpoint") && e.contains(&format!("block {rec}")),
        "{e}"
    );
    assert!(fsck_errors(b).contains("no valid checkpoint record"));
    // The record header itself (its sequence number).
    let mut b = good.clone();
    b[rec as usize * BLOCK_BYTES + 25] ^= 0x80;
    let e = open_error(b.clone());
    assert!(e.contains("no valid checkpoint record"), "{e}");
    fsck_errors(b);
}

#[test]
fn damage_that_opening_misses_is_found_by_fsck() {
    let good = good_image();
    let mut dev = MemDevice::from_bytes(good.clone());
    let nseg = inspect::segments(Box::new(MemDevice::from_bytes(good.clone())))
        .unwrap()
        .len() as u64;
    // All records, by sequence number.
    let mut recs = Vec::new();
    for s in 0..nseg {
        recs.extend(inspect::dump_segment(&mut dev, s).unwrap().records);
    }
    recs.sort_by_key(|r| r.seq);
    // 1. The newest copy of DAT block 0 is the live one: move virtual block
    // 1's physical address by one block. Opening reads nothing there yet.
    let dat0 = recs
        .iter()
        .flat_map(|r| r.entries.iter())
        .rfind(|e| e.kind == "DatBlock" && e.offset == 0)
        .unwrap()
        .block as usize;
    let mut b = good.clone();
    b[dat0 * BLOCK_BYTES + 32] ^= 0x01;
    let f = fsck_errors(b);
    assert!(f.contains("virtual block 1"), "{f}");
    // ... or far outside the device.
    let mut b = good.clone();
    b[dat0 * BLOCK_BYTES + 32..dat0 * BLOCK_BYTES + 40]
        .copy_from_slice(&(1u64 << 40).to_le_bytes());
    let f = fsck_errors(b);
    assert!(
        f.contains("virtual block 1 points at block 1099511627776, outside the log area"),
        "{f}"
    );
    // 2. An old record's header: its segment's records no longer cover
    // what the SUFILE says was written there.
    let old = &recs[1];
    let mut b = good.clone();
    b[old.block as usize * BLOCK_BYTES + 40] ^= 0x01;
    let f = fsck_errors(b);
    assert!(f.contains("records cover"), "{f}");
    // 3. The SUFILE's live count of the first used segment, off by one: only
    // the brute-force recount can tell.
    let (rec, su0) = recs
        .iter()
        .flat_map(|r| r.entries.iter().map(move |e| (r, e)))
        .rfind(|(_, e)| e.kind == "Data" && e.ino == lsfs_core::layout::SUFILE_INO && e.offset == 0)
        .map(|(r, e)| (r, e.block as usize))
        .unwrap();
    let mut b = good.clone();
    // Entry 0 is segment 0: nblocks (u32), then nlive (u32).
    let at = su0 * BLOCK_BYTES + 4;
    let nlive = u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    assert!(nlive > 0, "segment 0 holds live blocks");
    b[at..at + 4].copy_from_slice(&(nlive - 1).to_le_bytes());
    // Reseal the record, as if the engine had written the wrong count.
    let r = &mut b
        [rec.block as usize * BLOCK_BYTES..(rec.block + rec.nblocks as u64) as usize * BLOCK_BYTES];
    lsfs_core::log::record::RecordHeader::reseal(r).unwrap();
    Lsfs::open(Box::new(MemDevice::from_bytes(b.clone())), cfg())
        .expect("a wrong counter does not stop a mount");
    let f = fsck_errors(b);
    assert!(
        f.contains(&format!("segment 0: SUFILE says nlive {}", nlive - 1)),
        "{f}"
    );
}

/// Random damage anywhere must never crash the checker or the mount.
#[test]
fn random_damage_never_panics() {
    let good = good_image();
    let used = {
        // Only blocks actually written are interesting.
        let nz: Vec<usize> = (0..good.len() / BLOCK_BYTES)
            .filter(|&i| {
                good[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES]
                    .iter()
                    .any(|&x| x != 0)
            })
            .collect();
        nz
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(99);
    for round in 0..150 {
        let mut b = good.clone();
        for _ in 0..rng.gen_range(1..6) {
            let blk = used[rng.gen_range(0..used.len())];
            let at = blk * BLOCK_BYTES + rng.gen_range(0..BLOCK_BYTES);
            b[at] ^= 1 << rng.gen_range(0..8);
        }
        let r = fsck_bytes(b.clone());
        let all = r.errors.join("\n");
        assert!(!all.contains("panicked"), "round {round}: {all}");
        // Opening may fail, but must not panic, and reading every file must
        // return data or an error.
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if let Ok(mut fs) = Lsfs::open(Box::new(MemDevice::from_bytes(b)), cfg()) {
                if let Ok(d) = fs.lookup(ROOT_INO, b"dir") {
                    if let Ok(ents) = fs.readdir(d.ino, 0, 100) {
                        for e in ents {
                            let _ = fs.read(e.ino, 0, 200_000);
                        }
                    }
                }
            }
        }));
        assert!(
            res.is_ok(),
            "round {round}: the engine panicked on a damaged image"
        );
    }
}

/// A directory entry whose key no name can hash to (a crafted or damaged
/// node with a valid checksum) is reported, not an overflow or endless loop.
#[test]
fn out_of_range_directory_key_is_an_error() {
    use lsfs_core::fs::{dir, inode::Inode, map};
    let mut fs = mkfs(DEV_BYTES, cfg());
    let mut d = Inode::new(100, libc::S_IFDIR | 0o755, 0, 0, lsfs_vfs::Timespec::now());
    let mut entry = 5u64.to_le_bytes().to_vec();
    entry.push(1); // a regular file
    entry.extend_from_slice(b"x");
    map::insert(&mut fs.store, &mut d, u64::MAX, &entry).unwrap();
    let e = dir::list_after(&mut fs.store, &d, 0, usize::MAX).unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
}

/// Found by the `image` fuzz target: seven bytes changed in the summary of
/// segment 0's second record (its checksum left failing), then a read-write
/// mount and a cleaning pass. Relocation saw only the records before the
/// damaged one, the SUFILE still counted the rest as live, and the
/// cleaner's accounting assertion panicked. Now it is an error and the
/// mount stops writing.
#[test]
fn cleaning_a_segment_with_a_damaged_record_is_an_error() {
    use lsfs_core::log::chain::segment_records;
    use lsfs_core::log::superblock::Superblock;

    let mut b = good_image();
    let sb = Superblock::decode(&b[..BLOCK_BYTES], "test", b.len() as u64).unwrap();
    let recs = segment_records(
        &mut MemDevice::from_bytes(b.clone()),
        &sb.geometry(),
        sb.fs_id,
        0,
    )
    .unwrap();
    assert!(recs.len() >= 2, "segment 0 holds several records");
    let at = recs[1].block as usize * BLOCK_BYTES + 335;
    b[at..at + 7].copy_from_slice(&[136, 115, 113, 35, 17, 35, 17]);
    let mut c = cfg();
    c.store.protection_secs = 0;
    let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(b)), c).unwrap();
    let e = match fs.store.relocate_segment(0) {
        Ok(_) => panic!("relocating a segment with a damaged record succeeded"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("still counts"), "{e}");
    assert!(fs.store.writable().is_err(), "the mount keeps writing");
}

/// The other direction of the same check: the cleaner's walk of a victim
/// finds more live blocks than its SUFILE entry counts (an undercount, from
/// a damaged entry or an accounting bug). Copying them would drive the
/// count below zero; relocation stops with an error naming the segment, and
/// the mount stops writing, instead of freeing a segment that holds data.
#[test]
fn cleaning_a_segment_counted_short_is_an_error() {
    let mut c = cfg();
    c.store.protection_secs = 0;
    let mut fs = mkfs(DEV_BYTES, c);
    let f = fs
        .mknod(ROOT_INO, b"f", libc::S_IFREG | 0o644, 0, &ctx())
        .unwrap();
    fs.write(f.ino, 0, &[7u8; 8 * 4096]).unwrap();
    fs.checkpoint().unwrap();
    let seg = (0..fs.store.segs().nsegments())
        .find(|&s| fs.store.segs().usage[s as usize].nlive > 1)
        .expect("a segment with live blocks");
    fs.store.undercount_live_for_test(seg);
    let e = match fs.store.relocate_segment(seg) {
        Ok(r) => panic!("relocating an undercounted segment succeeded: {r:?}"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains(&format!("segment {seg}")) && e.contains("counts none live"),
        "{e}"
    );
    assert!(fs.store.writable().is_err(), "the mount keeps writing");
}

/// Found by the `image` fuzz target (input `01 11 00 65 10 00 08 81 00 86
/// f6 01`: the key of the SUFILE's block map changed from 0 to
/// 0x1_f686_0081, checksums resealed): the SUFILE's only block went missing,
/// so every segment read as free, and rolling forward killed a DAT block in
/// a segment counted empty (a panic). Opening now refuses the SUFILE.
#[test]
fn sufile_block_missing_from_its_map_is_refused() {
    let mut fs = mkfs(DEV_BYTES, cfg());
    fs.mknod(ROOT_INO, b"f", libc::S_IFREG | 0o644, 0, &ctx())
        .unwrap();
    fs.unmount().unwrap();
    let root = fs.store.roots().sufile_root;
    let img = patch_root_leaf(&mut fs, root, |items| {
        assert_eq!(items.len(), 1, "a small image's SUFILE is one block");
        items[0].0 = 0x1_f686_0081;
    });

    let e = open_error(img.clone());
    assert!(
        e.contains("SUFILE entry of segment") && e.contains("counts no"),
        "{e}"
    );
    let f = fsck_errors(img);
    assert!(f.contains("SUFILE"), "{f}");
}

/// The SUFILE entry of the segment the writer fills next, damaged to count
/// it nearly full, every block live (opening accepts that: the count fits
/// the segment, and the mount's first checkpoint kills as many blocks as it
/// places). An fsync then placed more live blocks there than the segment
/// holds, and `SegTable::add_live` asserted. Now it is a corruption error
/// naming the segment, and writes stop.
#[test]
fn sufile_counting_the_writers_segment_all_live_stops_writes() {
    let mut fs = mkfs(DEV_BYTES, cfg());
    fs.mknod(ROOT_INO, b"f", libc::S_IFREG | 0o644, 0, &ctx())
        .unwrap();
    fs.unmount().unwrap();
    let (root, seg) = (fs.store.roots().sufile_root, fs.store.log_head().0);
    let nearly_full = (opts().segment_blocks - 16).to_le_bytes();
    let img = patch_meta_block(&mut fs, root, 0, |b| {
        let at = seg as usize * 32;
        b[at..at + 4].copy_from_slice(&nearly_full);
        b[at + 4..at + 8].copy_from_slice(&nearly_full);
    });

    let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(img.clone())), cfg()).unwrap();
    let f = fs
        .mknod(ROOT_INO, b"g", libc::S_IFREG | 0o644, 0, &ctx())
        .unwrap();
    fs.write(f.ino, 0, &pattern(1, 20 * BLOCK_BYTES)).unwrap();
    assert!(fs.fsync(f.ino, false).is_err(), "the fsync succeeded");
    assert!(fs.store.writable().is_err(), "the mount keeps writing");
    let e = fs.store.failure().unwrap();
    assert!(
        e.contains(&format!("segment {seg}")) && e.contains("live blocks"),
        "{e}"
    );
    let f = fsck_errors(img);
    assert!(f.contains(&format!("segment {seg}")), "{f}");
}

/// The SUFILE entry of the segment holding the last checkpoint, damaged to
/// count fewer blocks written than that checkpoint's records take: the
/// writer would have placed new records over them. Opening refuses it,
/// naming the record and the segment.
#[test]
fn sufile_counting_fewer_blocks_than_the_checkpoint_wrote_is_refused() {
    let mut fs = mkfs(DEV_BYTES, cfg());
    fs.mknod(ROOT_INO, b"f", libc::S_IFREG | 0o644, 0, &ctx())
        .unwrap();
    fs.unmount().unwrap();
    let (root, seg, off) = (
        fs.store.roots().sufile_root,
        fs.store.log_head().0,
        fs.store.log_head().1,
    );
    assert!(off > 2, "the last checkpoint is in the writer's segment");
    let img = patch_meta_block(&mut fs, root, 0, |b| {
        let at = seg as usize * 32;
        b[at..at + 4].copy_from_slice(&(off - 1).to_le_bytes());
        let nlive = u32::from_le_bytes(b[at + 4..at + 8].try_into().unwrap());
        b[at + 4..at + 8].copy_from_slice(&nlive.min(off - 1).to_le_bytes());
    });
    let e = open_error(img.clone());
    assert!(
        e.contains(&format!("of segment {seg}"))
            && e.contains(&format!("counts {} blocks written", off - 1)),
        "{e}"
    );
    let f = fsck_errors(img);
    assert!(f.contains(&format!("segment {seg}")), "{f}");
}

/// Records written after the last checkpoint (an fsync's) lie past what its
/// SUFILE counts, legitimately, and roll forward; but the log appends, so
/// the first must start where the count ends. A SUFILE entry counting more
/// blocks than the log holds (so recovery would count the fsync record's
/// blocks twice over) is refused.
#[test]
fn record_after_the_checkpoint_must_start_where_the_sufile_count_ends() {
    let mut fs = mkfs(DEV_BYTES, cfg());
    let f = fs
        .mknod(ROOT_INO, b"f", libc::S_IFREG | 0o644, 0, &ctx())
        .unwrap();
    fs.checkpoint().unwrap();
    let (root, seg, off) = (
        fs.store.roots().sufile_root,
        fs.store.log_head().0,
        fs.store.log_head().1,
    );
    fs.write(f.ino, 0, &pattern(3, 9000)).unwrap();
    fs.fsync(f.ino, false).unwrap();
    assert_eq!(
        fs.store.log_head().0,
        seg,
        "the fsync record follows the checkpoint"
    );

    // A crash now: the fsync record is rolled forward.
    let crashed = image(&mut fs);
    let mut back = Lsfs::open(Box::new(MemDevice::from_bytes(crashed)), cfg()).unwrap();
    assert_eq!(back.read(f.ino, 0, 9000).unwrap(), pattern(3, 9000));
    assert_eq!(
        back.store.segs().usage[seg as usize].nblocks,
        back.store.log_head().1
    );

    // The same crash, the checkpoint's SUFILE counting one block more.
    let img = patch_meta_block(&mut fs, root, 0, |b| {
        let at = seg as usize * 32;
        b[at..at + 4].copy_from_slice(&(off + 1).to_le_bytes());
    });
    let e = open_error(img);
    assert!(
        e.contains("after the checkpoint")
            && e.contains(&format!("blocks {off}.."))
            && e.contains(&format!("counts {} blocks written", off + 1)),
        "{e}"
    );
}

/// A SUFILE entry damaged to flag a segment plugged when the SSA holds no
/// summary for it: its live blocks are then named by nothing. fsck says so,
/// naming the blocks, and cleaning the segment is a corruption error that
/// stops writes, not a panic or a silent loss of the blocks.
#[test]
fn a_segment_flagged_plugged_without_its_summary_is_an_error() {
    let mut fs = mkfs(DEV_BYTES, cfg());
    let f = fs
        .mknod(ROOT_INO, b"f", libc::S_IFREG | 0o644, 0, &ctx())
        .unwrap();
    fs.write(f.ino, 0, &pattern(3, 3 << 20)).unwrap();
    fs.unmount().unwrap();
    let full = opts().segment_blocks;
    let seg = (0..fs.store.segs().nsegments())
        .find(|&g| {
            let u = fs.store.segs().usage[g as usize];
            u.nblocks == full && u.nlive > 0 && g != fs.store.log_head().0
        })
        .expect("a full segment with live blocks");
    let root = fs.store.roots().sufile_root;
    let img = patch_meta_block(&mut fs, root, 0, |b| {
        let at = seg as usize * 32 + 12;
        let flags = u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) | 2;
        b[at..at + 4].copy_from_slice(&flags.to_le_bytes());
    });
    let f = fsck_errors(img.clone());
    assert!(f.contains("nothing (no record covers it)"), "{f}");

    let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(img)), cfg()).unwrap();
    assert!(fs.store.segment_is_plugged(seg));
    assert!(
        fs.store.relocate_segment(seg).is_err(),
        "cleaning it succeeded"
    );
    assert!(fs.store.writable().is_err(), "the mount keeps writing");
    let e = fs.store.failure().unwrap();
    assert!(e.contains(&format!("segment {seg}")), "{e}");
}

/// Found by the `image` fuzz target (a patch over the super root's end of
/// the DAT, checksums resealed, read-write mount): with the end below
/// entries in use, recovery handed out virtual blocks that were in use, and
/// the checkpoint after it tripped an assertion. Opening now refuses it.
#[test]
fn a_dat_end_below_entries_in_use_is_refused() {
    let good = good_image();
    let (rec, sr) = checkpoint_record(&good);
    let nblocks = {
        let mut dev = MemDevice::from_bytes(good.clone());
        let seg = (rec - 1) / opts().segment_blocks as u64;
        let dump = inspect::dump_segment(&mut dev, seg).unwrap();
        dump.records
            .iter()
            .find(|r| r.block == rec)
            .unwrap()
            .nblocks as u64
    };
    for end in [0u64, 1, 130] {
        let mut b = good.clone();
        let s = sr as usize * BLOCK_BYTES;
        b[s + 24..s + 32].copy_from_slice(&end.to_le_bytes());
        let crc = crc_with_hole(&b[s..s + BLOCK_BYTES], BLOCK_BYTES - 4);
        b[s + BLOCK_BYTES - 4..s + BLOCK_BYTES].copy_from_slice(&crc.to_le_bytes());
        let r = &mut b[rec as usize * BLOCK_BYTES..(rec + nblocks) as usize * BLOCK_BYTES];
        lsfs_core::log::record::RecordHeader::reseal(r).unwrap();
        let e = open_error(b.clone());
        assert!(
            e.contains(&format!("the DAT ends at virtual block {end}")),
            "end {end}: {e}"
        );
        assert!(
            fsck_errors(b).contains("the DAT ends at virtual block"),
            "end {end}"
        );
    }
}

/// A resealed super root counting 0 inodes in use: deleting a file took 1
/// from 0 (a debug panic), and the checkpoint then wrote a count near 2^64
/// that the next mount refuses as past the limit. The count now stays at 0
/// and fsck names the difference.
#[test]
fn deleting_with_a_super_root_counting_no_inodes_keeps_the_image_mountable() {
    let good = good_image();
    let (rec, sr) = checkpoint_record(&good);
    let nblocks = {
        let mut dev = MemDevice::from_bytes(good.clone());
        let seg = (rec - 1) / opts().segment_blocks as u64;
        let dump = inspect::dump_segment(&mut dev, seg).unwrap();
        dump.records
            .iter()
            .find(|r| r.block == rec)
            .unwrap()
            .nblocks as u64
    };
    let mut b = good;
    let s = sr as usize * BLOCK_BYTES;
    // `inodes_used`, after ten u64 fields and the magic and version.
    b[s + 80..s + 88].copy_from_slice(&0u64.to_le_bytes());
    let crc = crc_with_hole(&b[s..s + BLOCK_BYTES], BLOCK_BYTES - 4);
    b[s + BLOCK_BYTES - 4..s + BLOCK_BYTES].copy_from_slice(&crc.to_le_bytes());
    let r = &mut b[rec as usize * BLOCK_BYTES..(rec + nblocks) as usize * BLOCK_BYTES];
    lsfs_core::log::record::RecordHeader::reseal(r).unwrap();

    let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(b)), cfg()).unwrap();
    assert_eq!(
        fs.store.roots().inodes_used,
        0,
        "the patch missed the count"
    );
    let d = fs.lookup(ROOT_INO, b"dir").unwrap().ino;
    fs.unlink(d, b"f3").unwrap();
    fs.unmount().unwrap();
    let after = image(&mut fs);
    let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(after.clone())), cfg())
        .expect("the image stays mountable");
    assert_eq!(fs.store.roots().inodes_used, 0);
    fs.unmount().unwrap();
    assert!(
        fsck_errors(after).contains("super root counts 0 inodes"),
        "fsck missed the count"
    );
}
