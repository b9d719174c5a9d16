//! What the fuzz targets share: the small base image the `image` target
//! mutates, how a fuzz input patches it, checksum resealing, and the read-only
//! walk a mutated image gets.
//!
//! The base image is checked in (`base-image.rle`, run-length encoded, made by
//! `cargo run --example gen_corpus`), so an input means the same image on
//! every machine and a crash replays. If the engine's format changed and it no
//! longer mounts clean, a fresh image is built in memory instead (with a
//! warning): fuzzing still works, but old inputs may no longer replay.

use lsfs_core::codec::crc_with_hole;
use lsfs_core::device::{BlockDevice, MemDevice};
use lsfs_core::fs::{CheckpointChecks, Lsfs, MountConfig};
use lsfs_core::layout::{Geometry, BLOCK_BYTES};
use lsfs_core::log::chain::segment_records;
use lsfs_core::log::superblock::Superblock;
use lsfs_core::meta::open::MkfsOptions;
use lsfs_vfs::{Ctx, FileKind, Vfs, ROOT_INO};
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashSet;
use std::sync::OnceLock;

/// Largest single allocation a target may make. Nothing lsfs decodes from a
/// 3 MiB image needs more; a size taken from damaged bytes usually asks for far more.
pub const ALLOC_MAX_BYTES: usize = 64 << 20;

/// The system allocator, but an allocation above [`ALLOC_MAX_BYTES`] aborts
/// (a crash libFuzzer reports with its input). The targets run without ASan
/// (lsfs-core is safe Rust, and ASan made the image target 8x slower), so
/// this stands in for libFuzzer's `-malloc_limit_mb`, which needs ASan's hooks.
/// Installed in each target by [`limit_allocations!`].
pub struct LimitedAlloc;

fn check_size(size: usize) {
    if size > ALLOC_MAX_BYTES {
        const MSG: &[u8] = b"lsfs-fuzz: allocation over ALLOC_MAX_BYTES (unbounded allocation)\n";
        // SAFETY: writing a static buffer to stderr; no allocation here.
        unsafe { libc::write(2, MSG.as_ptr().cast(), MSG.len()) };
        std::process::abort();
    }
}

// SAFETY: defers to `System` for everything; only refuses oversized requests.
unsafe impl GlobalAlloc for LimitedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        check_size(layout.size());
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        check_size(layout.size());
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        check_size(new_size);
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

/// Install [`LimitedAlloc`] as the target's global allocator.
#[macro_export]
macro_rules! limit_allocations {
    () => {
        #[global_allocator]
        static ALLOC: $crate::LimitedAlloc = $crate::LimitedAlloc;
    };
}

/// 256 KiB segments, the smallest lsfs allows.
pub const SEGMENT_BLOCKS: u32 = 64;
/// 12 segments and the two superblocks: about 3 MiB.
pub const IMAGE_BYTES: u64 = (12 * SEGMENT_BLOCKS as u64 + 2) * BLOCK_BYTES as u64;

const BASE_RLE: &[u8] = include_bytes!("../base-image.rle");

/// Offsets of the log record header fields the checksum fixes need.
const RECORD_CRC_AT: usize = 8;
const NODE_MAGIC: [u8; 2] = 0xB7EEu16.to_le_bytes();
const NODE_CRC_AT: usize = 8;
const SR_MAGIC: [u8; 4] = 0x5452_534Cu32.to_le_bytes();

/// A mount that reads little and caches little, so each run stays fast.
/// No invariant checks after checkpoints (on by default in debug builds):
/// a damaged image breaks them before any checkpoint, and a panic they
/// raise would be the damage, not a bug (as in `tests/bad_images.rs`).
pub fn mount_config(read_only: bool) -> MountConfig {
    let mut c = MountConfig::default();
    c.store.cache_blocks = 64;
    c.store.read_only = read_only;
    c.checkpoint_interval_secs = 1 << 30;
    c.check_checkpoints = CheckpointChecks::Off;
    c
}

fn ctx() -> Ctx {
    Ctx {
        uid: 0,
        gid: 0,
        pid: 1,
        umask: 0o022,
    }
}

/// Block `i` of a data file: a run of one byte value, so the image compresses.
fn data_block(i: u64) -> Vec<u8> {
    let mut b = vec![(i as u8) | 1; BLOCK_BYTES];
    b[..8].copy_from_slice(&i.to_le_bytes());
    b
}

/// A small image with every kind of on-disk structure: inline and B-tree
/// directories, inline data, inline and B-tree extent maps, symlinks, hard
/// links, small and multi-chunk xattrs, a snapshot, several checkpoints, and
/// fsync records after the last checkpoint (so mounting rolls forward): one
/// with every kind of inline item, then one with data and an image.
pub fn build_image() -> Vec<u8> {
    let dev = Box::new(MemDevice::new(IMAGE_BYTES));
    let opts = MkfsOptions {
        segment_blocks: SEGMENT_BLOCKS,
        label: "fuzz".into(),
    };
    let mut fs = Lsfs::mkfs(dev, &opts, mount_config(false)).expect("mkfs");
    let c = ctx();
    let reg = libc::S_IFREG | 0o644;
    let d = fs.mkdir(ROOT_INO, b"dir", 0o755, &c).unwrap().ino;
    for i in 0..40 {
        fs.mknod(d, format!("entry-{i:02}").as_bytes(), reg, 0, &c)
            .unwrap();
    }
    let small = fs.mknod(ROOT_INO, b"small", reg, 0, &c).unwrap().ino;
    fs.write(small, 0, b"inline file data").unwrap();
    fs.setxattr(small, b"user.a", b"xyz", 0).unwrap();
    fs.setxattr(small, b"user.big", &vec![7u8; 3000], 0).unwrap();
    let extents = fs.mknod(ROOT_INO, b"extents", reg, 0, &c).unwrap().ino;
    for i in [0u64, 1, 2, 5, 9] {
        fs.write(extents, i * BLOCK_BYTES as u64, &data_block(i))
            .unwrap();
    }
    let sub = fs.mkdir(d, b"sub", 0o700, &c).unwrap().ino;
    fs.symlink(sub, b"up", b"../entry-01", &c).unwrap();
    fs.link(small, sub, b"small-link").unwrap();
    fs.mknod(sub, b"fifo", libc::S_IFIFO | 0o600, 0, &c).unwrap();
    fs.checkpoint().unwrap();
    fs.snapshot_create().unwrap();
    // Many short extents: the file's map becomes a B-tree.
    let tree = fs.mknod(ROOT_INO, b"tree", reg, 0, &c).unwrap().ino;
    for i in (0..80u64).step_by(2) {
        fs.write(tree, i * BLOCK_BYTES as u64, &data_block(i)).unwrap();
    }
    fs.unlink(d, b"entry-07").unwrap();
    fs.rename(d, b"entry-08", ROOT_INO, b"moved", 0).unwrap();
    fs.checkpoint().unwrap();
    // Only fsync'd, not checkpointed: mounting rolls these records forward.
    // First every operation an fsync record carries.
    let nd = fs.mkdir(ROOT_INO, b"new-dir", 0o750, &c).unwrap().ino;
    let nf = fs.mknod(nd, b"new-file", reg, 0, &c).unwrap().ino;
    fs.write(nf, 0, &data_block(7)).unwrap();
    fs.symlink(nd, b"new-link", b"new-file", &c).unwrap();
    fs.link(nf, ROOT_INO, b"new-hard").unwrap();
    fs.rename(ROOT_INO, b"moved", nd, b"moved-again", 0).unwrap();
    fs.rename(nd, b"new-file", nd, b"new-link", lsfs_vfs::RENAME_EXCHANGE)
        .unwrap();
    fs.unlink(d, b"entry-09").unwrap();
    fs.mkdir(nd, b"gone", 0o700, &c).unwrap();
    fs.rmdir(nd, b"gone").unwrap();
    fs.setxattr(nf, b"user.new", b"value", 0).unwrap();
    fs.removexattr(small, b"user.a").unwrap();
    let shrink = lsfs_vfs::SetAttr {
        size: Some(3),
        ..Default::default()
    };
    fs.setattr(small, &shrink).unwrap();
    fs.fsync(nd, false).unwrap();
    fs.write(extents, 3 * BLOCK_BYTES as u64, &data_block(3))
        .unwrap();
    fs.fsync(extents, false).unwrap();
    // No unmount: the image is as a power cut would leave it.
    fs.store.dev_bytes_for_test()
}

/// Run-length encoding: `0, len u16, bytes` is a literal, `1, len u32, b` a run.
pub fn rle_encode(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut lit_start = 0;
    let mut i = 0;
    let flush_lit = |out: &mut Vec<u8>, lit: &[u8]| {
        for chunk in lit.chunks(u16::MAX as usize) {
            out.push(0);
            out.extend_from_slice(&(chunk.len() as u16).to_le_bytes());
            out.extend_from_slice(chunk);
        }
    };
    while i < data.len() {
        let b = data[i];
        let run = data[i..].iter().take_while(|&&x| x == b).count();
        if run >= 8 {
            flush_lit(&mut out, &data[lit_start..i]);
            out.push(1);
            out.extend_from_slice(&(run as u32).to_le_bytes());
            out.push(b);
            i += run;
            lit_start = i;
        } else {
            i += run;
        }
    }
    flush_lit(&mut out, &data[lit_start..]);
    out
}

pub fn rle_decode(mut rle: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    while let Some((&tag, rest)) = rle.split_first() {
        match tag {
            0 => {
                let n = u16::from_le_bytes(rest.get(..2)?.try_into().ok()?) as usize;
                out.extend_from_slice(rest.get(2..2 + n)?);
                rle = &rest[2 + n..];
            }
            1 => {
                let n = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
                out.resize(out.len() + n, *rest.get(4)?);
                rle = &rest[5..];
            }
            _ => return None,
        }
    }
    Some(out)
}

/// The image the `image` target mutates, with what the patching needs to know.
pub struct Base {
    pub image: Vec<u8>,
    /// Blocks that are not all zero: where patches land by default.
    pub used_blocks: Vec<u64>,
    /// Every log record as (first block, blocks), for resealing checksums.
    pub records: Vec<(u64, u64)>,
    pub device_blocks: u64,
}

/// Whether `image` mounts read-only and fsck finds nothing wrong.
fn mounts_clean(image: &[u8]) -> bool {
    let dev = Box::new(MemDevice::from_bytes(image.to_vec()));
    if Lsfs::open(dev, mount_config(true)).is_err() {
        return false;
    }
    let dev = Box::new(MemDevice::from_bytes(image.to_vec()));
    matches!(lsfs_core::fsck::fsck(dev), Ok(r) if r.is_clean())
}

pub fn base() -> &'static Base {
    static BASE: OnceLock<Base> = OnceLock::new();
    BASE.get_or_init(|| {
        let image = match rle_decode(BASE_RLE) {
            Some(img) if img.len() as u64 == IMAGE_BYTES && mounts_clean(&img) => img,
            _ => {
                eprintln!(
                    "lsfs-fuzz: base-image.rle does not mount clean with this build; \
                     using a fresh image (regenerate: cd fuzz && cargo run --example gen_corpus)"
                );
                build_image()
            }
        };
        Base::new(image)
    })
}

impl Base {
    pub fn new(image: Vec<u8>) -> Base {
        let device_blocks = image.len() as u64 / BLOCK_BYTES as u64;
        let used_blocks = (0..device_blocks)
            .filter(|&b| block(&image, b).iter().any(|&x| x != 0))
            .collect();
        let sb = Superblock::decode(block(&image, 0), "base image", image.len() as u64)
            .expect("base image superblock");
        let geo = Geometry::for_device(image.len() as u64, sb.segment_blocks).unwrap();
        let mut dev = MemDevice::from_bytes(image.clone());
        let mut records = Vec::new();
        for seg in 0..geo.nsegments {
            for r in segment_records(&mut dev, &geo, sb.fs_id, seg).expect("read base records") {
                records.push((r.block, r.header.nblocks as u64));
            }
        }
        Base {
            image,
            used_blocks,
            records,
            device_blocks,
        }
    }

    /// Apply the patches an `image` input describes (see [`ImageInput`]).
    pub fn patched(&self, input: &ImageInput) -> Vec<u8> {
        let mut img = self.image.clone();
        let mut touched = Vec::new();
        for p in &input.patches {
            let blk = if p.block_sel & 0x8000 == 0 {
                self.used_blocks[p.block_sel as usize % self.used_blocks.len()]
            } else {
                (p.block_sel & 0x7fff) as u64 % self.device_blocks
            };
            let start = blk as usize * BLOCK_BYTES + p.offset as usize % BLOCK_BYTES;
            let end = (start + p.bytes.len()).min((blk as usize + 1) * BLOCK_BYTES);
            img[start..end].copy_from_slice(&p.bytes[..end - start]);
            touched.push(blk);
        }
        if input.reseal {
            self.reseal(&mut img, &touched);
        }
        img
    }

    /// Recompute the checksums that cover the touched blocks, so mutations
    /// reach the decoders behind them instead of stopping at a crc mismatch.
    fn reseal(&self, img: &mut [u8], touched: &[u64]) {
        for &blk in touched {
            let b = block_mut(img, blk);
            if blk == 0 || blk == self.device_blocks - 1 {
                let crc = crc_with_hole(b, BLOCK_BYTES - 4);
                b[BLOCK_BYTES - 4..].copy_from_slice(&crc.to_le_bytes());
            } else if b[..2] == NODE_MAGIC {
                let crc = crc_with_hole(b, NODE_CRC_AT);
                b[NODE_CRC_AT..NODE_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
            } else if b[..4] == SR_MAGIC {
                let crc = crc_with_hole(b, BLOCK_BYTES - 4);
                b[BLOCK_BYTES - 4..].copy_from_slice(&crc.to_le_bytes());
            }
        }
        for &(first, n) in &self.records {
            if touched.iter().any(|&t| t >= first && t < first + n) {
                let r = &mut img[first as usize * BLOCK_BYTES..(first + n) as usize * BLOCK_BYTES];
                let crc = crc_with_hole(r, RECORD_CRC_AT);
                r[RECORD_CRC_AT..RECORD_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
            }
        }
    }
}

fn block(img: &[u8], b: u64) -> &[u8] {
    &img[b as usize * BLOCK_BYTES..(b as usize + 1) * BLOCK_BYTES]
}

fn block_mut(img: &mut [u8], b: u64) -> &mut [u8] {
    &mut img[b as usize * BLOCK_BYTES..(b as usize + 1) * BLOCK_BYTES]
}

pub struct Patch {
    /// Below 0x8000: the n-th non-zero block of the base image (modulo their
    /// count); otherwise block `sel & 0x7fff` (modulo the device's blocks).
    pub block_sel: u16,
    /// Byte offset in the block (modulo the block size); patches stop at the block's end.
    pub offset: u16,
    pub bytes: Vec<u8>,
}

/// An `image` input: `flags u8`, `checkpoint u8`, then patches, each
/// `block_sel u16, offset u16, len u8, len bytes` (little-endian).
/// Flag 1: reseal checksums; flag 2: mount checkpoint `checkpoint` read-only;
/// flag 4: mount read-write (recovery writes), change things, clean, remount.
pub struct ImageInput {
    pub reseal: bool,
    pub checkpoint: Option<u64>,
    pub writable: bool,
    pub patches: Vec<Patch>,
}

/// At most this many patches per input: enough for any structure, and
/// keeps one run short.
const MAX_PATCHES: usize = 64;

impl ImageInput {
    pub fn parse(data: &[u8]) -> ImageInput {
        let flags = data.first().copied().unwrap_or(1);
        let cp = data.get(1).copied().unwrap_or(0);
        let mut patches = Vec::new();
        let mut rest = data.get(2..).unwrap_or(&[]);
        while rest.len() >= 5 && patches.len() < MAX_PATCHES {
            let block_sel = u16::from_le_bytes([rest[0], rest[1]]);
            let offset = u16::from_le_bytes([rest[2], rest[3]]);
            let len = (rest[4] as usize).min(rest.len() - 5);
            patches.push(Patch {
                block_sel,
                offset,
                bytes: rest[5..5 + len].to_vec(),
            });
            rest = &rest[5 + len..];
        }
        ImageInput {
            reseal: flags & 1 != 0,
            checkpoint: (flags & 2 != 0).then_some(cp as u64),
            writable: flags & 4 != 0,
            patches,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let flags = self.reseal as u8
            | (self.checkpoint.is_some() as u8) << 1
            | (self.writable as u8) << 2;
        let mut out = vec![flags, self.checkpoint.unwrap_or(0) as u8];
        for p in &self.patches {
            out.extend_from_slice(&p.block_sel.to_le_bytes());
            out.extend_from_slice(&p.offset.to_le_bytes());
            out.push(p.bytes.len() as u8);
            out.extend_from_slice(&p.bytes);
        }
        out
    }
}

/// Bounds of the read-only walk, so a damaged image cannot make one run long.
const WALK_MAX_INODES: usize = 512;
const WALK_MAX_ENTRIES: usize = 4096;
const WALK_READ_BYTES_MAX: u64 = 256 * 1024;

/// Mount `img` read-only (at `checkpoint` if given), walk every directory,
/// read every file, link and xattr; then run fsck on it. Errors are fine;
/// a panic, hang or runaway allocation is what the fuzzer looks for.
pub fn exercise_image(img: Vec<u8>, checkpoint: Option<u64>) {
    let mut cfg = mount_config(true);
    cfg.checkpoint = checkpoint;
    exercise_mount(img, cfg)
}

/// Mount `img` read-write: recovery, orphan deletion and a checkpoint write
/// to the damaged image; then a few changes, an fsync, a cleaning pass and an
/// unmount; then the result gets the read-only mount, walk and fsck.
pub fn exercise_writable(img: Vec<u8>) {
    let mut cfg = mount_config(false);
    cfg.store.protection_secs = 0;
    let Ok(mut fs) = Lsfs::open(Box::new(MemDevice::from_bytes(img)), cfg) else {
        return;
    };
    let c = ctx();
    let _ = (|| -> Result<(), lsfs_vfs::Errno> {
        let f = fs.mknod(ROOT_INO, b"new", libc::S_IFREG | 0o644, 0, &c)?.ino;
        fs.write(f, 0, &data_block(1))?;
        fs.write(f, 2 * BLOCK_BYTES as u64, &data_block(2))?;
        fs.fsync(f, false)?;
        let small = fs.lookup(ROOT_INO, b"small")?.ino;
        fs.write(small, 4, b"changed")?;
        fs.setxattr(small, b"user.new", b"v", 0)?;
        fs.rename(ROOT_INO, b"small", ROOT_INO, b"small-renamed", 0)?;
        let d = fs.lookup(ROOT_INO, b"dir")?.ino;
        fs.unlink(d, b"entry-03")?;
        fs.mkdir(d, b"newdir", 0o755, &c)?;
        let t = fs.lookup(ROOT_INO, b"tree")?.ino;
        fs.setattr(t, &lsfs_vfs::SetAttr { size: Some(3 * BLOCK_BYTES as u64), ..Default::default() })?;
        fs.sync()
    })();
    let _ = fs.checkpoint();
    let _ = fs.clean(2, "fuzz");
    let _ = fs.unmount();
    let img = fs.store.dev_bytes_for_test();
    exercise_mount(img, mount_config(true));
}

fn exercise_mount(img: Vec<u8>, cfg: MountConfig) {
    if let Ok(mut fs) = Lsfs::open(Box::new(MemDevice::from_bytes(img.clone())), cfg) {
        walk(&mut fs);
    }
    let dev: Box<dyn BlockDevice> = Box::new(MemDevice::from_bytes(img));
    let _ = lsfs_core::fsck::fsck(dev);
}

fn walk(fs: &mut Lsfs) {
    let _ = fs.statfs();
    let mut seen = HashSet::new();
    let mut queue = vec![ROOT_INO];
    // Snapshots are browsable under the hidden `/.lsfs/snapshot`.
    if let Ok(ctl) = fs.lookup(ROOT_INO, lsfs_core::fs::snapview::CTL_NAME) {
        if let Ok(snaps) = fs.lookup(ctl.ino, lsfs_core::fs::snapview::SNAPSHOT_DIR_NAME) {
            queue.push(snaps.ino);
        }
    }
    let mut entries = 0;
    while let Some(dir) = queue.pop() {
        if !seen.insert(dir) || seen.len() > WALK_MAX_INODES {
            continue;
        }
        visit(fs, dir);
        let mut cookie = 0;
        while entries < WALK_MAX_ENTRIES {
            let Ok(batch) = fs.readdir(dir, cookie, 64) else {
                break;
            };
            let Some(last) = batch.last() else { break };
            cookie = last.offset;
            entries += batch.len();
            for e in batch {
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                if fs.lookup(dir, &e.name).is_err() {
                    continue;
                }
                if e.kind == FileKind::Dir {
                    queue.push(e.ino);
                } else if seen.insert(e.ino) && seen.len() <= WALK_MAX_INODES {
                    visit(fs, e.ino);
                }
            }
        }
    }
}

fn visit(fs: &mut Lsfs, ino: u64) {
    let Ok(attr) = fs.getattr(ino) else { return };
    match attr.kind {
        FileKind::File => {
            if fs.open(ino, libc::O_RDONLY).is_ok() {
                let mut off = 0;
                while off < attr.size.min(WALK_READ_BYTES_MAX) {
                    match fs.read(ino, off, 64 * 1024) {
                        Ok(b) if !b.is_empty() => off += b.len() as u64,
                        _ => break,
                    }
                }
                fs.release(ino);
            }
        }
        FileKind::Symlink => {
            let _ = fs.readlink(ino);
        }
        _ => {}
    }
    if let Ok(names) = fs.listxattr(ino) {
        for n in names.iter().take(16) {
            let _ = fs.getxattr(ino, n);
        }
    }
}
