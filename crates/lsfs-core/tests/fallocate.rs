//! fallocate's modes on the engine: mode 0 with and without KEEP_SIZE,
//! PUNCH_HOLE | KEEP_SIZE and ZERO_RANGE (± KEEP_SIZE). A punched or zeroed
//! range reads as zeros; its whole blocks are unmapped and freed (the
//! inode's block count, the used-block count and, after a checkpoint,
//! fsck's recount of every segment's live blocks agree), its partial edge
//! blocks zeroed in place; SEEK_HOLE finds it. An fsync after a punch or
//! zero is durable: a crash right after it recovers the same bytes and
//! blocks.

mod common;
use common::*;
use lsfs_core::device::MemDevice;
use lsfs_core::fs::Lsfs;
use lsfs_vfs::{
    Errno, Ino, Vfs, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE, ROOT_INO,
};

const B: u64 = 4096;
const DEV_BYTES: u64 = 64 * MIB;
const PUNCH: i32 = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;

fn create(fs: &mut Lsfs, name: &str) -> Ino {
    let a = fs
        .mknod(ROOT_INO, name.as_bytes(), libc::S_IFREG | 0o644, 0, &ctx())
        .unwrap();
    fs.forget(a.ino, 1);
    a.ino
}

/// The whole file, as a user reads it.
fn contents(fs: &mut Lsfs, f: Ino) -> Vec<u8> {
    let size = fs.getattr(f).unwrap().size;
    fs.read(f, 0, size as u32).unwrap()
}

/// Blocks the file holds (st_blocks is in 512-byte units).
fn blocks(fs: &mut Lsfs, f: Ino) -> u64 {
    fs.getattr(f).unwrap().blocks / 8
}

/// `got` must be `want`; a difference is reported by its place, not by
/// printing megabytes.
#[track_caller]
fn same(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        panic!(
            "{what}: {} bytes read, {} expected, first difference at {:?}",
            got.len(),
            want.len(),
            got.iter().zip(want).position(|(a, b)| a != b)
        );
    }
}

/// What the file should read after zeroing `[off, off + len)` of `want`.
fn zero(want: &mut [u8], off: u64, len: u64) {
    let end = ((off + len) as usize).min(want.len());
    if (off as usize) < end {
        want[off as usize..end].fill(0);
    }
}

#[test]
fn punch_frees_whole_blocks_and_zeroes_the_edges() {
    let mut fs = mkfs(DEV_BYTES, cfg());
    let f = create(&mut fs, "f");
    let n = 64;
    let mut want = pattern(1, (n * B) as usize);
    // Bytes of zeros already in place: zeroing them writes nothing.
    want[(3 * B) as usize..(3 * B + 200) as usize].fill(0);
    fs.write(f, 0, &want).unwrap();
    // On disk first, so that the punch frees blocks a checkpoint saw.
    fs.checkpoint().unwrap();
    assert_eq!(blocks(&mut fs, f), n);
    let used = fs.store.roots().blocks_used;

    // Inside one block: nothing freed, the bytes zeroed.
    fs.fallocate(f, 100, 50, PUNCH).unwrap();
    zero(&mut want, 100, 50);
    same(&contents(&mut fs, f), &want, "contents");
    assert_eq!(blocks(&mut fs, f), n);
    // From inside block 3 to inside block 20: blocks 4..20 (16) go.
    let (off, len) = (3 * B + 100, 17 * B);
    fs.fallocate(f, off, len, PUNCH).unwrap();
    zero(&mut want, off, len);
    same(&contents(&mut fs, f), &want, "contents");
    assert_eq!(blocks(&mut fs, f), n - 16);
    assert_eq!(fs.store.roots().blocks_used, used - 16, "freed exactly");
    assert_eq!(fs.getattr(f).unwrap().size, n * B, "KEEP_SIZE");
    // SEEK_HOLE finds the unmapped blocks, SEEK_DATA the block after.
    assert_eq!(fs.seek_data_or_hole(f, 0, false).unwrap(), Some(4 * B));
    assert_eq!(fs.seek_data_or_hole(f, 4 * B, true).unwrap(), Some(20 * B));
    // Block-aligned, past the end: the tail blocks go, the size stays.
    fs.fallocate(f, 60 * B, 100 * B, PUNCH).unwrap();
    zero(&mut want, 60 * B, 100 * B);
    assert_eq!(blocks(&mut fs, f), n - 20);
    assert_eq!(fs.getattr(f).unwrap().size, n * B);
    assert_eq!(
        fs.seek_data_or_hole(f, 59 * B, false).unwrap(),
        Some(60 * B)
    );
    assert_eq!(fs.seek_data_or_hole(f, 60 * B, true).unwrap(), None);
    // Punching a hole again changes nothing.
    fs.fallocate(f, 5 * B, 10 * B, PUNCH).unwrap();
    assert_eq!(blocks(&mut fs, f), n - 20);
    same(&contents(&mut fs, f), &want, "contents");

    fs.checkpoint().unwrap();
    assert_clean(&fsck_bytes(image(&mut fs)), "after punches");
    fs.unmount().unwrap();
    let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(image(&mut fs))), cfg()).unwrap();
    same(&contents(&mut fs, f), &want, "after a remount");
    assert_eq!(blocks(&mut fs, f), n - 20);
    // Writing into the hole maps blocks again.
    fs.write(f, 8 * B, &[7; 10]).unwrap();
    want[(8 * B) as usize..(8 * B + 10) as usize].fill(7);
    same(&contents(&mut fs, f), &want, "contents");
    assert_eq!(blocks(&mut fs, f), n - 19);
}

#[test]
fn zero_range_and_keep_size() {
    let mut fs = mkfs(DEV_BYTES, cfg());
    let f = create(&mut fs, "f");
    let mut want = pattern(2, (10 * B) as usize);
    fs.write(f, 0, &want).unwrap();
    // KEEP_SIZE, mode 0: the size stays, nothing changes.
    fs.fallocate(f, 5 * B, 100 * B, FALLOC_FL_KEEP_SIZE)
        .unwrap();
    assert_eq!(fs.getattr(f).unwrap().size, 10 * B);
    same(&contents(&mut fs, f), &want, "contents");
    // Zero range inside the file: as a punch.
    fs.fallocate(f, B / 2, 3 * B, FALLOC_FL_ZERO_RANGE).unwrap();
    zero(&mut want, B / 2, 3 * B);
    same(&contents(&mut fs, f), &want, "contents");
    assert_eq!(blocks(&mut fs, f), 8);
    // Over the end with KEEP_SIZE: the size stays.
    fs.fallocate(
        f,
        9 * B + 1,
        5 * B,
        FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
    )
    .unwrap();
    zero(&mut want, 9 * B + 1, 5 * B);
    assert_eq!(fs.getattr(f).unwrap().size, 10 * B);
    same(&contents(&mut fs, f), &want, "contents");
    // Without it the file grows, and the new bytes read as zeros.
    fs.fallocate(f, 9 * B, 3 * B + 5, FALLOC_FL_ZERO_RANGE)
        .unwrap();
    zero(&mut want, 9 * B, B);
    want.resize((12 * B + 5) as usize, 0);
    assert_eq!(fs.getattr(f).unwrap().size, 12 * B + 5);
    same(&contents(&mut fs, f), &want, "contents");
    assert_eq!(blocks(&mut fs, f), 7, "block 9, zeroed whole, is unmapped");

    // Inline data (a small file lives in its inode): zeroed in place.
    let g = create(&mut fs, "small");
    fs.write(g, 0, b"hello, world").unwrap();
    fs.fallocate(g, 2, 3, PUNCH).unwrap();
    assert_eq!(contents(&mut fs, g), b"he\0\0\0, world");
    fs.fallocate(g, 10, 10, FALLOC_FL_ZERO_RANGE).unwrap();
    assert_eq!(contents(&mut fs, g), b"he\0\0\0, wor\0\0\0\0\0\0\0\0\0\0");

    fs.checkpoint().unwrap();
    assert_clean(&fsck_bytes(image(&mut fs)), "after zero ranges");
}

/// A punch or zero range reaching far past the end stops at the last
/// block that can be mapped: one operation, not one per cache-sized piece
/// up to 16 TiB. A zero range growing the file that far maps nothing.
#[test]
fn ranges_to_the_largest_file_are_one_step() {
    let mut fs = mkfs(DEV_BYTES, cfg());
    let f = create(&mut fs, "f");
    fs.write(f, 0, &pattern(5, (10 * B) as usize)).unwrap();
    fs.fsync(f, false).unwrap();
    let max = lsfs_core::layout::MAX_FILE_BYTES;
    fs.fallocate(f, B, max - B, PUNCH).unwrap();
    assert_eq!(fs.oplog.pending().len(), 1, "{:?}", fs.oplog.pending());
    assert_eq!(blocks(&mut fs, f), 1);
    assert_eq!(fs.getattr(f).unwrap().size, 10 * B);
    fs.fallocate(f, 5, max - 5, FALLOC_FL_ZERO_RANGE).unwrap();
    assert_eq!(fs.oplog.pending().len(), 2);
    assert_eq!(fs.getattr(f).unwrap().size, max);
    assert_eq!(blocks(&mut fs, f), 1, "block 0 keeps its first 5 bytes");
    let mut want = pattern(5, 5);
    want.resize(100, 0);
    assert_eq!(fs.read(f, 0, 100).unwrap(), want);
    assert_eq!(fs.seek_data_or_hole(f, 0, false).unwrap(), Some(B));
    assert_eq!(fs.seek_data_or_hole(f, B, true).unwrap(), None);
    fs.checkpoint().unwrap();
    assert_clean(&fsck_bytes(image(&mut fs)), "a 16 TiB sparse file");
}

#[test]
fn refused_modes_and_ranges() {
    let mut fs = mkfs(DEV_BYTES, cfg());
    let f = create(&mut fs, "f");
    fs.write(f, 0, &pattern(3, 9000)).unwrap();
    let before = contents(&mut fs, f);
    let cases = [
        (FALLOC_FL_PUNCH_HOLE, 10, Errno::OPNOTSUPP),
        (
            FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
            10,
            Errno::OPNOTSUPP,
        ),
        (libc::FALLOC_FL_COLLAPSE_RANGE, B, Errno::OPNOTSUPP),
        (libc::FALLOC_FL_INSERT_RANGE, B, Errno::OPNOTSUPP),
        (0x4000, 10, Errno::OPNOTSUPP),
        (PUNCH, 0, Errno::INVAL),
    ];
    for (mode, len, err) in cases {
        assert_eq!(fs.fallocate(f, 0, len, mode), Err(err), "mode {mode:#x}");
    }
    assert_eq!(fs.fallocate(f, u64::MAX - 5, 10, PUNCH), Err(Errno::FBIG));
    assert_eq!(fs.fallocate(ROOT_INO, 0, 10, PUNCH), Err(Errno::ISDIR));
    same(&contents(&mut fs, f), &before, "nothing changed");
}

/// A crash right after an fsync that follows punches and zero ranges:
/// recovery replays them (the data blocks of the record alone cannot say
/// a block is gone), and the file reads and counts as it did.
#[test]
fn an_fsync_after_a_punch_survives_a_crash() {
    let mut fs = mkfs(DEV_BYTES, cfg());
    let f = create(&mut fs, "f");
    let other = create(&mut fs, "other");
    let n = 200;
    let mut want = pattern(4, (n * B) as usize);
    fs.write(f, 0, &want).unwrap();
    fs.checkpoint().unwrap();
    type Step = Box<dyn Fn(&mut Lsfs, &mut Vec<u8>) -> Ino>;
    let steps: Vec<(&str, Step)> = vec![
        (
            "punch, fsync the file",
            Box::new(move |fs, want| {
                fs.fallocate(f, 10 * B + 7, 30 * B, PUNCH).unwrap();
                zero(want, 10 * B + 7, 30 * B);
                f
            }),
        ),
        (
            "write, punch over it, fsync another file",
            Box::new(move |fs, want| {
                fs.write(f, 50 * B, &[9; 3 * B as usize]).unwrap();
                want[(50 * B) as usize..(53 * B) as usize].fill(9);
                fs.fallocate(f, 49 * B, 6 * B, PUNCH).unwrap();
                zero(want, 49 * B, 6 * B);
                other
            }),
        ),
        (
            "punch, write into the hole, fsync",
            Box::new(move |fs, want| {
                fs.fallocate(f, 100 * B, 20 * B, PUNCH).unwrap();
                zero(want, 100 * B, 20 * B);
                fs.write(f, 105 * B + 3, b"back").unwrap();
                want[(105 * B + 3) as usize..(105 * B + 7) as usize].copy_from_slice(b"back");
                f
            }),
        ),
        (
            "zero range growing the file",
            Box::new(move |fs, want| {
                let end = want.len() as u64;
                fs.fallocate(f, end - 3 * B - 1, 5 * B, FALLOC_FL_ZERO_RANGE)
                    .unwrap();
                zero(want, end - 3 * B - 1, 5 * B);
                want.resize((end + 2 * B - 1) as usize, 0);
                f
            }),
        ),
        (
            "zero range, KEEP_SIZE",
            Box::new(move |fs, want| {
                fs.fallocate(
                    f,
                    150 * B,
                    9 * B + 9,
                    FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
                )
                .unwrap();
                zero(want, 150 * B, 9 * B + 9);
                f
            }),
        ),
    ];
    for (what, step) in steps {
        let target = step(&mut fs, &mut want);
        fs.fsync(target, false).unwrap();
        same(
            &contents(&mut fs, f),
            &want,
            &format!("{what}: before the crash"),
        );
        let held = blocks(&mut fs, f);
        let img = image(&mut fs);
        assert_clean(&fsck_bytes(img.clone()), what);
        let mut back = Lsfs::open(Box::new(MemDevice::from_bytes(img)), cfg()).unwrap();
        assert!(back.replayed_records > 0, "{what}: nothing rolled forward");
        same(
            &contents(&mut back, f),
            &want,
            &format!("{what}: after a crash"),
        );
        assert_eq!(blocks(&mut back, f), held, "{what}: blocks after a crash");
        back.checkpoint().unwrap();
        assert_clean(&fsck_bytes(image(&mut back)), what);
    }
    assert_eq!(
        fs.store.stats().checkpoints_by_cause.get("fsync"),
        None,
        "an fsync wrote a checkpoint instead of a record"
    );
}
