//! Compressed records (meta/compress.rs, docs/FORMAT.md §3.3): files of
//! compressible data read back the same through overwrites, a snapshot,
//! cleaning and a remount, with fsck's recount of the segment counters
//! agreeing, with LZ4 frames and with zstd's; a crash at any flush while
//! writing them leaves a clean image; and a torn compressed record, over
//! stale blocks, is never rolled forward.

mod common;
use common::*;
use lsfs_core::device::{CrashDevice, CrashState, LoggedOp, MemDevice, PartialWrite, Sectors};
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_core::log::frame::{Codec, CODEC_LZ4, CODEC_ZSTD};
use lsfs_core::meta::store::Compress;
use lsfs_vfs::{Vfs, ROOT_INO};

fn ccfg() -> MountConfig {
    ccfg_with(Compress::Lz4)
}

fn ccfg_with(mode: Compress) -> MountConfig {
    let mut c = cfg();
    c.store.compress = Some(mode);
    c
}

/// Source-like text: compresses about 3:1 with LZ4, differs by `seed`.
fn text(seed: u64, len: usize) -> Vec<u8> {
    let words = [
        "fn ", "let ", "mut ", "self", ".store", "(&mut ", "Result<", "u64", ">", " {\n", "    ",
        "}\n", "match ", "Some(", "None", " => ", "return ", "Ok(())", ";\n", "// ",
    ];
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(words[(x % words.len() as u64) as usize].as_bytes());
    }
    out.truncate(len);
    out
}

/// Bytes LZ4 cannot shrink.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn file(fs: &mut Lsfs, name: &[u8]) -> u64 {
    fs.mknod(ROOT_INO, name, libc::S_IFREG | 0o644, 0, &ctx())
        .unwrap()
        .ino
}

fn read_back(fs: &mut Lsfs, ino: u64, len: usize) -> Vec<u8> {
    fs.read(ino, 0, len as u32).unwrap()
}

#[test]
fn compressible_files_survive_overwrites_snapshots_cleaning_and_remount() {
    survive_overwrites_snapshots_cleaning_and_remount(Compress::Lz4);
}

#[test]
fn zstd_files_survive_overwrites_snapshots_cleaning_and_remount() {
    survive_overwrites_snapshots_cleaning_and_remount(Compress::ZSTD);
}

fn survive_overwrites_snapshots_cleaning_and_remount(mode: Compress) {
    let mut c = ccfg_with(mode);
    c.store.protection_secs = 0;
    let mut fs = mkfs(48 * MIB, c.clone());
    assert_eq!(fs.store.compressing().map(|m| m.codec), mode.codec());
    let len = 600 * 4096;
    let mut files = Vec::new();
    for i in 0..6u64 {
        let ino = file(&mut fs, format!("f{i}").as_bytes());
        let data = if i == 5 {
            pattern(i, len) // barely compressible: written raw
        } else {
            text(i, len)
        };
        fs.write(ino, 0, &data).unwrap();
        files.push((ino, data));
    }
    fs.checkpoint().unwrap();
    let st = fs.store.stats().clone();
    assert!(st.compressed_records > 0, "{st:?}");
    assert!(st.compressed_slots_unwritten > 1000, "{st:?}");
    let snap = fs.snapshot_create().unwrap();
    let snapped = files.clone();
    // Overwrite parts of each file a few times: the old versions die,
    // some protected by the snapshot, and the cleaner must move live
    // blocks out of compressed records.
    for round in 0..4u64 {
        for (k, (ino, data)) in files.iter_mut().enumerate() {
            let at = ((round * 97 + k as u64 * 31) % 400) as usize * 4096;
            let new = text(100 + round * 10 + k as u64, 150 * 4096);
            data[at..at + new.len()].copy_from_slice(&new);
            fs.write(*ino, at as u64, &new).unwrap();
        }
        fs.checkpoint().unwrap();
        fs.clean(4, "test").unwrap();
    }
    fs.checkpoint().unwrap();
    let cleaned = fs.cleaner.stats.segments_cleaned;
    assert!(cleaned > 0, "the cleaner never ran");
    for (ino, data) in &files {
        assert!(read_back(&mut fs, *ino, len) == *data, "inode {ino}");
    }
    let ctl = fs.lookup(ROOT_INO, b".lsfs").unwrap().ino;
    let dir = fs.lookup(ctl, b"snapshot").unwrap().ino;
    let root = fs.lookup(dir, snap.to_string().as_bytes()).unwrap().ino;
    for (i, (_, data)) in snapped.iter().enumerate() {
        let sf = fs.lookup(root, format!("f{i}").as_bytes()).unwrap().ino;
        assert!(read_back(&mut fs, sf, len) == *data, "snapshot's f{i}");
    }
    fs.unmount().unwrap();
    let img = image(&mut fs);
    assert_clean(&fsck_bytes(img.clone()), "after cleaning");
    let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(img)), c).unwrap();
    assert_eq!(fs.store.compressing().map(|m| m.codec), mode.codec());
    for (ino, data) in &files {
        assert!(read_back(&mut fs, *ino, len) == *data, "remounted {ino}");
    }
}

#[test]
fn compression_writes_fewer_device_bytes_and_can_be_turned_off() {
    let mut written = Vec::new();
    for mode in [Compress::Lz4, Compress::Off, Compress::ZSTD] {
        let on = mode != Compress::Off;
        let mut fs = mkfs(32 * MIB, ccfg_with(mode));
        let before = fs.store.device_counters().write_bytes;
        let ino = file(&mut fs, b"src.tar");
        let data = text(7, 1000 * 4096);
        fs.write(ino, 0, &data).unwrap();
        fs.checkpoint().unwrap();
        written.push(fs.store.device_counters().write_bytes - before);
        assert_eq!(fs.store.stats().compressed_records > 0, on);
        assert!(read_back(&mut fs, ino, data.len()) == data);
    }
    assert!(
        written[0] * 2 < written[1],
        "compressed {} bytes, raw {}",
        written[0],
        written[1]
    );
    // zstd shrinks this text further than LZ4 does.
    assert!(
        written[2] < written[0],
        "zstd {} bytes, lz4 {}",
        written[2],
        written[0]
    );
}

/// The image before `before`'s writes and after: a file `f` holding
/// `old`, then overwritten with `new` and fsynced (one compressed record
/// in the log, rolled forward by recovery).
fn fsynced_overwrite(old: &[u8], new: &[u8]) -> (lsfs_core::device::CrashLog, usize, u64) {
    let base = {
        let mut fs = mkfs(32 * MIB, ccfg());
        fs.unmount().unwrap();
        image(&mut fs)
    };
    let (dev, log) = CrashDevice::new(MemDevice::from_bytes(base));
    let mut fs = Lsfs::open(Box::new(dev), ccfg()).unwrap();
    let ino = file(&mut fs, b"f");
    fs.write(ino, 0, old).unwrap();
    fs.sync().unwrap();
    let before = log.len();
    let records = fs.store.stats().compressed_records;
    fs.write(ino, 0, new).unwrap();
    fs.fsync(ino, false).unwrap();
    assert!(
        fs.store.stats().compressed_records > records,
        "the fsync wrote no compressed record"
    );
    drop(fs);
    (log, before, ino)
}

#[test]
fn a_crash_at_any_flush_while_compressing_leaves_a_clean_image() {
    let old = text(1, 64 * 4096);
    let new = text(2, 64 * 4096);
    let (log, before, ino) = fsynced_overwrite(&old, &new);
    let mut points = 0;
    for (at, op) in log.ops().iter().enumerate().skip(before) {
        if !matches!(op, LoggedOp::Flush) && at + 1 != log.len() {
            continue;
        }
        for seed in [0, 1, 2] {
            let img = log.crash_image(at + 1, seed).bytes();
            let what = format!("crash at op {} seed {seed}", at + 1);
            assert_clean(&fsck_bytes(img.clone()), &what);
            let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(img)), ccfg()).unwrap();
            let got = read_back(&mut fs, ino, old.len());
            assert!(got == old || got == new, "{what}: neither version");
            points += 1;
        }
    }
    assert!(points >= 3, "only {points} crash points");
}

/// A torn compressed record: its write reached the medium only in part,
/// the rest of its blocks still hold what was there (stale data of the
/// records written before). Recovery must never roll it forward: the file
/// reads its old contents, whole, and fsck finds the image clean.
#[test]
fn a_torn_compressed_record_is_never_rolled_forward() {
    let old = text(3, 64 * 4096);
    let new = text(4, 64 * 4096);
    let (log, before, ino) = fsynced_overwrite(&old, &new);
    let mut torn = 0;
    for epoch in log.epochs() {
        if epoch.writes.last().is_none_or(|&w| w < before) {
            continue;
        }
        torn += tear_each_write(&log, &epoch, ino, (&old, &new));
    }
    eprintln!("torn images checked: {torn}");
    assert!(torn > 16, "only {torn} torn images");
}

/// Whether op `w` writes a compressed record (its header's magic and
/// FLAG_COMPRESSED, docs/FORMAT.md §3).
fn writes_compressed_record(ops: &[LoggedOp], w: usize) -> Option<(u64, Vec<u8>)> {
    let LoggedOp::Write { offset, data } = &ops[w] else {
        return None;
    };
    let word = |at: usize| u32::from_le_bytes(data[at..at + 4].try_into().unwrap());
    (word(0) == 0x3152_534C && word(12) & 32 != 0).then(|| (*offset, data.clone()))
}

/// Each compressed record written in `epoch` torn in turn (every prefix
/// of its sectors, and two sparse subsets), the epoch's other writes
/// landed whole. Stale bytes under the missing sectors never pass for
/// the record: `f` reads `old`, unless they equal what the write held
/// (then nothing was torn). Returns how many images were checked.
fn tear_each_write(
    log: &lsfs_core::device::CrashLog,
    epoch: &lsfs_core::device::Epoch,
    ino: u64,
    (old, new): (&[u8], &[u8]),
) -> usize {
    let writes = &epoch.writes;
    let ops = log.ops();
    let mut torn = 0;
    for &w in writes {
        let Some((offset, data)) = writes_compressed_record(&ops, w) else {
            continue;
        };
        let sectors = (log.write_len(w) / 512) as u32;
        // Every prefix and a few sparse subsets of the write's sectors.
        let mut choices: Vec<Vec<u32>> = (0..sectors).map(|k| (0..k).collect()).collect();
        choices.push((0..sectors).filter(|s| s % 8 != 7).collect());
        choices.push((1..sectors).collect());
        for keep in choices {
            let mut state = CrashState::at_flush(epoch.durable_ops);
            // The other writes of the epoch all landed: only this one tore.
            for &o in writes {
                let sectors = if o == w {
                    Sectors::Only(keep.clone())
                } else {
                    Sectors::All
                };
                state.writes.push(PartialWrite { op: o, sectors });
            }
            let img = log.materialize(&state).unwrap().bytes().to_vec();
            let what = format!("write {w} torn to {} of {sectors} sectors", keep.len());
            let whole = img[offset as usize..offset as usize + data.len()] == data[..];
            assert_clean(&fsck_bytes(img.clone()), &what);
            let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(img)), ccfg()).unwrap();
            let got = read_back(&mut fs, ino, old.len());
            if whole {
                assert!(
                    got == new,
                    "{what}: stale bytes equal to the write's, yet not rolled forward"
                );
                continue;
            }
            assert!(got == old, "{what}: a torn record was rolled forward");
            torn += 1;
        }
    }
    torn
}

/// A file with the `user.lsfs.nocompress` attribute is written raw, also
/// after a remount (the attribute is read with the inode); without it the
/// same data is compressed.
#[test]
fn the_nocompress_attribute_keeps_a_file_raw() {
    use lsfs_core::fs::nocompress::NOCOMPRESS_XATTR;
    let mut fs = mkfs(32 * MIB, ccfg());
    let ino = file(&mut fs, b"media");
    fs.setxattr(ino, NOCOMPRESS_XATTR, b"1", 0).unwrap();
    let records = |fs: &Lsfs| fs.store.stats().compressed_records;
    let n0 = records(&fs);
    fs.write(ino, 0, &text(5, 200 * 4096)).unwrap();
    fs.checkpoint().unwrap();
    assert_eq!(records(&fs), n0, "compressed despite the attribute");
    fs.unmount().unwrap();
    let img = image(&mut fs);
    let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(img)), ccfg()).unwrap();
    let n1 = records(&fs);
    fs.write(ino, 4096 * 200, &text(6, 200 * 4096)).unwrap();
    fs.checkpoint().unwrap();
    assert_eq!(records(&fs), n1, "compressed after a remount");
    fs.removexattr(ino, NOCOMPRESS_XATTR).unwrap();
    fs.write(ino, 0, &text(7, 200 * 4096)).unwrap();
    fs.checkpoint().unwrap();
    assert!(records(&fs) > n1, "the attribute's removal did not count");
}

/// One damaged byte in a frame makes fsck fail (the record's CRC, which
/// fsck checks as it reads the summaries, or the frame's own), whichever
/// codec made it; undamaged, the frame carries that codec's byte.
#[test]
fn fsck_finds_a_damaged_frame() {
    for (mode, byte) in [(Compress::Lz4, CODEC_LZ4), (Compress::ZSTD, CODEC_ZSTD)] {
        let mut fs = mkfs(32 * MIB, ccfg_with(mode));
        let ino = file(&mut fs, b"f");
        fs.write(ino, 0, &text(8, 300 * 4096)).unwrap();
        fs.unmount().unwrap();
        let mut img = image(&mut fs);
        assert_clean(&fsck_bytes(img.clone()), "before the damage");
        let at = img
            .chunks(4096)
            .position(|b| b[..4] == 0x315A_534Cu32.to_le_bytes())
            .expect("a frame on the image");
        assert_eq!(img[at * 4096 + 4], byte, "{mode:?}: codec byte");
        img[at * 4096 + 100] ^= 0x10;
        let report = fsck_bytes(img);
        assert!(
            !report.is_clean(),
            "{mode:?}: frame at block {at} damaged, fsck clean"
        );
    }
}

/// zstd is chosen at mkfs or by a read-write mount, and the image then
/// carries ZSTD_FRAMES (so a build that knows only LZ4 frames refuses
/// it): a mount that says nothing keeps compressing with zstd, one told
/// lz4 writes LZ4 frames beside the zstd ones and both read back, and a
/// read-only mount told zstd on an LZ4 image neither marks nor writes.
#[test]
fn zstd_is_remembered_by_the_image_and_mixes_with_lz4() {
    let mount = |img: Vec<u8>, compress: Option<Compress>, ro: bool| {
        let mut c = cfg();
        c.store.compress = compress;
        c.store.read_only = ro;
        Lsfs::open(Box::new(MemDevice::from_bytes(img)), c).unwrap()
    };
    let mut fs = mkfs(32 * MIB, ccfg_with(Compress::ZSTD));
    let sb = fs.store.superblock();
    assert!(sb.compressed_records() && sb.zstd_frames());
    let a = file(&mut fs, b"a");
    let da = text(21, 200 * 4096);
    fs.write(a, 0, &da).unwrap();
    fs.unmount().unwrap();
    let img = image(&mut fs);
    let mut fs = mount(img, None, false);
    assert_eq!(fs.store.compressing().map(|m| m.codec), Some(Codec::Zstd));
    fs.unmount().unwrap();
    let img = image(&mut fs);
    let mut fs = mount(img, Some(Compress::Lz4), false);
    assert_eq!(fs.store.compressing().map(|m| m.codec), Some(Codec::Lz4));
    assert!(
        fs.store.superblock().zstd_frames(),
        "the bit is never cleared"
    );
    let before = fs.store.stats().compressed_records;
    let b = file(&mut fs, b"b");
    let db = text(22, 200 * 4096);
    fs.write(b, 0, &db).unwrap();
    fs.checkpoint().unwrap();
    assert!(fs.store.stats().compressed_records > before);
    fs.unmount().unwrap();
    let img = image(&mut fs);
    let codecs: std::collections::BTreeSet<u8> = img
        .chunks(4096)
        .filter(|b| b[..4] == 0x315A_534Cu32.to_le_bytes())
        .map(|b| b[4])
        .collect();
    assert_eq!(
        codecs,
        [CODEC_LZ4, CODEC_ZSTD].into(),
        "both codecs' frames"
    );
    assert_clean(&fsck_bytes(img.clone()), "frames of both codecs");
    let mut fs = mount(img, Some(Compress::Off), true);
    assert!(read_back(&mut fs, a, da.len()) == da, "the zstd file");
    assert!(read_back(&mut fs, b, db.len()) == db, "the lz4 file");
    // An LZ4 image mounted read-only and told zstd: no ZSTD_FRAMES, and
    // so no zstd frames.
    let mut fs = mkfs(32 * MIB, ccfg());
    fs.unmount().unwrap();
    let fs = mount(image(&mut fs), Some(Compress::ZSTD), true);
    assert!(!fs.store.superblock().zstd_frames());
    assert_eq!(fs.store.compressing(), None);
}

/// The image remembers: a mount that says nothing compresses if the image
/// has the COMPRESSED_RECORDS feature (set here at mkfs), and `Some(Off)`
/// turns it off; a fresh image by default has neither.
#[test]
fn a_mount_follows_the_image_unless_told() {
    let write = |img: Vec<u8>, compress: Option<Compress>| {
        let mut c = cfg();
        c.store.compress = compress;
        let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(img)), c).unwrap();
        let ino = file(&mut fs, b"g");
        fs.write(ino, 0, &text(9, 64 * 4096)).unwrap();
        fs.checkpoint().unwrap();
        fs.store.stats().compressed_records
    };
    let mut fs = mkfs(32 * MIB, ccfg());
    fs.unmount().unwrap();
    let img = image(&mut fs);
    assert!(fs.store.superblock().compressed_records());
    assert!(
        write(img.clone(), None) > 0,
        "the image's feature was not followed"
    );
    assert_eq!(write(img, Some(Compress::Off)), 0, "compress=off was not");
    let mut fs = mkfs(32 * MIB, cfg());
    assert!(!fs.store.superblock().compressed_records());
    fs.unmount().unwrap();
    assert_eq!(write(image(&mut fs), None), 0, "a default image compressed");
}

/// Threaded logging near full with compressed records: a victim whose kept
/// blocks lie in a frame is never plugged (a hole among its dead slots may
/// be the frame itself), so every file reads its last write, before and
/// after a remount, and fsck agrees.
#[test]
fn plugging_never_writes_over_a_frame() {
    const FILE: usize = 16 * 1024;
    let mut c = cfg_no_protection();
    c.store.cache_blocks = 1024;
    c.store.streams_min_segments = 0;
    c.store.compress = Some(Compress::Lz4);
    c.cleaner.threaded_logging = "always".parse().unwrap();
    let mut fs = mkfs(32 * MIB, c.clone());
    // A simulated clock, a second per 16 writes, as in tests/threaded.rs:
    // the cleaner ranks victims by age, and with the wall clock each run
    // chose others, and now and then left nothing to plug.
    const T0: u64 = 1_800_000_000;
    fs.clock().set_secs(T0);
    let nfiles = (fs.store.free_blocks() * 4096 * 3 / 4) as usize / FILE;
    // Every other file barely compresses: its records are written raw, so
    // their segments can be plugged, next to segments holding frames.
    let content = |f: usize, seed: u64| {
        if f % 2 == 0 {
            text(seed, FILE)
        } else {
            noise(seed, FILE)
        }
    };
    let inos = make_files(&mut fs, nfiles, |f| content(f, f as u64));
    let mut latest: Vec<u64> = (0..nfiles as u64).collect();
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    for w in 0..nfiles as u64 * 6 {
        fs.clock().set_secs(T0 + w / 16);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let i = (x % nfiles as u64) as usize;
        latest[i] = 1_000_000 + w;
        fs.write(inos[i], 0, &content(i, latest[i])).unwrap();
        if w % 64 == 63 {
            fs.sync().unwrap();
        }
    }
    fs.sync().unwrap();
    let st = fs.store.stats().clone();
    eprintln!(
        "compressed records {}, plug stats {:?}",
        st.compressed_records,
        fs.store.plugs().stats()
    );
    assert!(st.compressed_records > 0);
    assert!(
        fs.store.plugs().stats().blocks_plugged > 0,
        "nothing plugged"
    );
    let check = |fs: &mut Lsfs, what: &str| {
        for (i, &ino) in inos.iter().enumerate() {
            let got = fs.read(ino, 0, FILE as u32).unwrap();
            assert!(got == content(i, latest[i]), "{what}: file {i}");
        }
    };
    check(&mut fs, "mounted");
    fs.unmount().unwrap();
    let img = image(&mut fs);
    assert_clean(&fsck_bytes(img.clone()), "after plugging");
    let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(img)), c).unwrap();
    check(&mut fs, "remounted");
}

/// Clones of a compressed file share its frames' slots: both copies read
/// back through the frame, writes to either stay apart, the cleaner moves
/// the shared blocks once (raw), and fsck agrees on counts and users.
#[test]
fn clones_of_compressed_files_share_their_frames() {
    let mut fs = mkfs(64 * MIB, ccfg());
    let a = file(&mut fs, b"a");
    let b = file(&mut fs, b"b");
    let data = text(7, 2 << 20);
    let w0 = fs.store.device_counters().write_bytes;
    fs.write(a, 0, &data).unwrap();
    fs.fsync(a, false).unwrap();
    let written = fs.store.device_counters().write_bytes - w0;
    assert!(
        written < data.len() as u64 * 3 / 4,
        "the data went into frames: {written} bytes written for {}",
        data.len()
    );
    fs.checkpoint().unwrap();
    let before = fs.statfs().unwrap().bfree;
    fs.clone_range(a, 0, b, 0, 0).unwrap();
    assert!(
        fs.statfs().unwrap().bfree + 16 >= before,
        "a clone takes no data blocks"
    );
    assert_eq!(read_back(&mut fs, b, data.len()), data);
    let mut a_data = data.clone();
    let patch = text(8, 64 << 10);
    a_data[1 << 20..(1 << 20) + patch.len()].copy_from_slice(&patch);
    fs.write(a, 1 << 20, &patch).unwrap();
    fs.checkpoint().unwrap();
    for _ in 0..4 {
        fs.clean(8, "test").unwrap();
    }
    fs.checkpoint().unwrap();
    assert_eq!(read_back(&mut fs, a, data.len()), a_data);
    assert_eq!(read_back(&mut fs, b, data.len()), data);
    assert_clean(&fsck_bytes(image(&mut fs)), "compressed clones");
}

/// A mount's setting: device work queued under the lock and finished
/// after it (`Lsfs::defer_io`), with a cache big enough that a few MiB
/// stay queued rather than drained by the queue's bound.
fn deferred_cfg() -> MountConfig {
    deferred_cfg_with(Compress::Lz4)
}

fn deferred_cfg_with(mode: Compress) -> MountConfig {
    let mut c = ccfg_with(mode);
    c.store.cache_blocks = 4096;
    c
}

/// Records whose frames are compressed when the queue writes them
/// (meta/compress.rs, `RecordLater`): while they are still queued, raw, a
/// read of their blocks, through the DAT's frame slots, gets the file's
/// data (the read makes the frame the queue will write, and writes
/// nothing); once written, the same; and the image is clean. With zstd
/// (here at a level of the mount's own) the frames made after the lock
/// are zstd's, like those made under it.
#[test]
fn blocks_of_records_not_yet_compressed_and_written_read_back() {
    deferred_records_read_back(Compress::Lz4, CODEC_LZ4);
}

#[test]
fn zstd_records_compressed_after_the_lock_read_back() {
    deferred_records_read_back(Compress::Zstd(9), CODEC_ZSTD);
}

fn deferred_records_read_back(mode: Compress, byte: u8) {
    let mut fs = mkfs(64 * MIB, deferred_cfg_with(mode));
    fs.defer_io(true).unwrap();
    let io = fs.store.io().clone();
    let ino = file(&mut fs, b"f");
    let data = text(5, 2 * MIB as usize);
    fs.write(ino, 0, &data).unwrap();
    fs.checkpoint().unwrap();
    let queued = io.pending_bytes();
    assert!(queued >= MIB as usize, "{queued} bytes queued");
    let writes = fs.store.device_counters().writes;
    // Frames made under the lock (a short record's, at a segment's end).
    let before = fs.store.stats().compressed_records;
    fs.store.drop_clean_cache();
    assert_eq!(
        read_back(&mut fs, ino, data.len()),
        data,
        "read while queued"
    );
    assert_eq!(io.pending_bytes(), queued, "the read completed the queue");
    assert_eq!(fs.store.device_counters().writes, writes, "the read wrote");
    let st = fs.store.stats();
    assert!(
        st.compressed_records >= before + 2,
        "{} frames made by the read, {before} before",
        st.compressed_records - before
    );
    assert!(
        st.frames_decompressed >= 2,
        "the read went around the frames"
    );
    io.complete(io.last_ticket()).unwrap();
    assert_eq!(io.pending_bytes(), 0);
    let made = fs.store.stats().compressed_records;
    fs.store.drop_clean_cache();
    assert_eq!(
        read_back(&mut fs, ino, data.len()),
        data,
        "read once written"
    );
    assert_eq!(
        fs.store.stats().compressed_records,
        made,
        "frames made twice"
    );
    fs.unmount().unwrap();
    let img = image(&mut fs);
    assert_clean(&fsck_bytes(img.clone()), "after the deferred records");
    let codecs: std::collections::BTreeSet<u8> = img
        .chunks(4096)
        .filter(|b| b[..4] == 0x315A_534Cu32.to_le_bytes())
        .map(|b| b[4])
        .collect();
    assert_eq!(codecs, [byte].into(), "{mode:?}: the frames' codecs");
    let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(img)), ccfg()).unwrap();
    assert_eq!(read_back(&mut fs, ino, data.len()), data, "after a remount");
}

/// An fsync whose record is compressed after the engine's lock is let go
/// (`locked::call`): a crash before the queue writes it loses only what
/// was not acknowledged (the file reads its fsynced old contents), a
/// crash at any flush on the way reads old or new, and once the call
/// returns, every crash reads the new contents. fsck finds each image clean.
#[test]
fn a_crash_before_a_record_compressed_after_the_lock_is_written_loses_nothing_acknowledged() {
    use lsfs_core::fs::locked::call;
    let base = {
        let mut fs = mkfs(64 * MIB, ccfg());
        fs.unmount().unwrap();
        image(&mut fs)
    };
    let (dev, log) = CrashDevice::new(MemDevice::from_bytes(base));
    let mut fs = Lsfs::open(Box::new(dev), deferred_cfg()).unwrap();
    fs.defer_io(true).unwrap();
    let io = fs.store.io().clone();
    let fs = std::sync::Mutex::new(fs);
    let old = text(6, 256 * 4096);
    let new = text(7, 256 * 4096);
    let (ino, done) = call(&fs, true, |fs| {
        let ino = file(fs, b"f");
        fs.write(ino, 0, &old).unwrap();
        fs.fsync(ino, false).unwrap();
        ino
    });
    done.unwrap();
    let acked_old = log.len();
    // The new contents' fsync, under the lock; its device work not yet run.
    // (Frames made under the lock are counted at once: a short record's.)
    let under_lock = {
        let mut g = fs.lock().unwrap();
        g.write(ino, 0, &new).unwrap();
        g.fsync(ino, false).unwrap();
        g.store.stats().compressed_records
    };
    assert!(io.pending_bytes() > 0, "nothing queued");
    assert_eq!(log.len(), acked_old, "written under the lock");
    let recover = |nops: usize, seed: u64, what: &str| {
        let img = log.crash_image(nops, seed).bytes();
        assert_clean(&fsck_bytes(img.clone()), what);
        let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(img)), ccfg()).unwrap();
        read_back(&mut fs, ino, old.len())
    };
    for seed in [0, 1] {
        let got = recover(log.len(), seed, "crash with the record queued");
        assert!(got == old, "the acknowledged contents lost");
    }
    // What a request's call does after letting go of the lock.
    let (_, done) = call(&fs, true, |_| ());
    done.unwrap();
    assert!(
        fs.lock().unwrap().store.stats().compressed_records > under_lock,
        "the fsync left no record to compress after the lock"
    );
    let acked_new = log.len();
    let mut points = 0;
    for (at, op) in log.ops().iter().enumerate().take(acked_new).skip(acked_old) {
        if matches!(op, LoggedOp::Flush) {
            let got = recover(at + 1, 2, &format!("crash at op {}", at + 1));
            assert!(got == old || got == new, "crash at op {}: neither", at + 1);
            points += 1;
        }
    }
    assert!(points >= 1, "no flush on the way");
    for seed in [0, 1, 2] {
        let got = recover(acked_new, seed, "crash after the fsync returned");
        assert!(got == new, "seed {seed}: the acknowledged contents lost");
    }
}
