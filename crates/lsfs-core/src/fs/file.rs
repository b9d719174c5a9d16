//! Regular file data: a small file's bytes live in its inode; larger files
//! map block offsets to *extents* of consecutive virtual blocks (key: first
//! file block; value: first virtual block and length), inline while the list
//! is short and in a B-tree after that.

use crate::cache::Owner;
use crate::error::{Error, Result};
use crate::fs::inode::{Format, Inode, AREA_BYTES};
use crate::fs::map;
use crate::log::record::BlockKind;
use crate::meta::store::Store;
use lsfs_vfs::Errno;

pub const BLOCK: u64 = 4096;
/// Blocks read ahead of a sequential read, within one extent.
const READ_AHEAD_BLOCKS: u64 = 32;
/// Largest single device read a file read issues (1 MiB).
const MAX_READ_RUN_BLOCKS: u64 = 256;
pub use crate::layout::MAX_FILE_BYTES;
/// Virtual block numbers are below 2^62 (the block cache's keys, `meta::store`).
const VBLOCK_END: u64 = 1 << 62;
/// Blocks a truncation frees per call into the DAT, so that freeing a huge
/// extent needs bounded memory.
const DROP_BATCH_BLOCKS: u64 = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub file_block: u64,
    pub vstart: u64,
    pub len: u64,
}

pub(crate) fn decode_ext(k: u64, v: &[u8]) -> Result<Extent> {
    if v.len() != 12 {
        return Err(Error::corrupt(format!(
            "extent at file block {k}: value of {} bytes",
            v.len()
        )));
    }
    let vstart = u64::from_le_bytes(v[..8].try_into().unwrap());
    let len = u32::from_le_bytes(v[8..].try_into().unwrap()) as u64;
    if len == 0 || vstart == 0 {
        return Err(Error::corrupt(format!(
            "extent at file block {k} is empty or unmapped"
        )));
    }
    // Past these, block arithmetic on the extent overflows, and a length
    // from damaged bytes would make truncation list billions of blocks.
    if k.checked_add(len)
        .is_none_or(|end| end > MAX_FILE_BYTES / BLOCK)
    {
        return Err(Error::corrupt(format!(
            "extent at file block {k} of {len} blocks ends past the largest file"
        )));
    }
    if vstart.checked_add(len).is_none_or(|end| end > VBLOCK_END) {
        return Err(Error::corrupt(format!(
            "extent at file block {k} names virtual blocks {vstart:#x} + {len}, out of range"
        )));
    }
    Ok(Extent {
        file_block: k,
        vstart,
        len,
    })
}

/// [`decode_ext`], and the extent's virtual blocks must have been handed
/// out: below the end of the DAT. A damaged extent naming blocks past it
/// (0x10ff_ffff_0000_0009, found by the `image` fuzz target) was taken for
/// blocks of the checkpoint being built, rewritten in place, and their DAT
/// entries made a DAT block no checkpoint could place (a panic).
pub(crate) fn decode_ext_in(s: &Store, k: u64, v: &[u8]) -> Result<Extent> {
    let e = decode_ext(k, v)?;
    if e.vstart + e.len > s.roots().next_vblock {
        return Err(Error::corrupt(format!(
            "extent at file block {k} names virtual blocks {:#x} + {}, past the end of the DAT ({:#x})",
            e.vstart, e.len, s.roots().next_vblock
        )));
    }
    Ok(e)
}

pub(crate) fn encode_ext(e: &Extent) -> Vec<u8> {
    let mut v = e.vstart.to_le_bytes().to_vec();
    v.extend_from_slice(&(e.len as u32).to_le_bytes());
    v
}

/// The extent covering file block `b`, if any.
pub fn extent_at(s: &mut Store, ino: &Inode, b: u64) -> Result<Option<Extent>> {
    match map::get_floor(s, ino, b)? {
        Some((k, v)) => {
            let e = decode_ext_in(s, k, &v)?;
            Ok((b < e.file_block + e.len).then_some(e))
        }
        None => Ok(None),
    }
}

fn owner(ino: u64, b: u64) -> Owner {
    Owner {
        ino,
        offset: b,
        kind: BlockKind::Data,
    }
}

/// Bytes of `ino` in `[off, off + len)`, clipped to the file size; holes read as zeros.
pub fn read(s: &mut Store, ino: &Inode, off: u64, len: u64) -> Result<Vec<u8>> {
    if off >= ino.size {
        return Ok(Vec::new());
    }
    let end = off.saturating_add(len).min(ino.size);
    if ino.format == Format::InlineData {
        // Bytes past the area read as zeros. Only `end - off` bytes are made:
        // `size` comes from the disk and may be anything.
        let mut out = vec![0; (end - off) as usize];
        if off < ino.area.len() as u64 {
            let stop = (end as usize).min(ino.area.len());
            out[..stop - off as usize].copy_from_slice(&ino.area[off as usize..stop]);
        }
        return Ok(out);
    }
    let mut out = Vec::with_capacity((end - off) as usize);
    let mut pos = off;
    // The extent (or hole) found last: sequential reads look up once per extent.
    let mut cur: Option<Extent> = None;
    while pos < end {
        let b = pos / BLOCK;
        let in_block = (pos % BLOCK) as usize;
        let n = ((BLOCK as usize - in_block) as u64).min(end - pos) as usize;
        if !cur.is_some_and(|e| b >= e.file_block && b < e.file_block + e.len) {
            cur = extent_at(s, ino, b)?;
        }
        match cur {
            Some(e) => {
                let v = e.vstart + (b - e.file_block);
                // Read ahead within the extent: up to the end of this request
                // plus READ_AHEAD_BLOCKS, in one device read.
                let want = (end.div_ceil(BLOCK) - b + READ_AHEAD_BLOCKS)
                    .min(e.file_block + e.len - b)
                    .min(MAX_READ_RUN_BLOCKS);
                let ino_no = ino.ino;
                s.vread_ahead(v, want, |i| owner(ino_no, b + i))?;
                let data = s.vread(v, owner(ino.ino, b))?;
                out.extend_from_slice(&data[in_block..in_block + n]);
            }
            None => out.resize(out.len() + n, 0),
        }
        pos += n as u64;
    }
    Ok(out)
}

/// The extents that overlap file blocks `[b, b + n)`, in order (whole, not
/// clipped): one floor lookup and, when the first does not cover the whole
/// range, one scan of the keys after it (a write used to look each of them up
/// several times, a descent of the tree each).
fn extents_over(s: &mut Store, ino: &Inode, b: u64, n: u64) -> Result<Vec<Extent>> {
    let end = b + n;
    let mut out = Vec::new();
    let mut next_key = b + 1;
    if let Some(e) = extent_at(s, ino, b)? {
        next_key = e.file_block + e.len;
        out.push(e);
        if next_key >= end {
            return Ok(out);
        }
    }
    loop {
        let items = map::get_ceil_run(s, ino, next_key, 64)?;
        if items.is_empty() {
            return Ok(out);
        }
        for (k, v) in items {
            if k >= end {
                return Ok(out);
            }
            let e = decode_ext_in(s, k, &v)?;
            next_key = e.file_block + e.len;
            out.push(e);
        }
        if next_key >= end {
            return Ok(out);
        }
    }
}

/// What file blocks `[b, b + n)` map to now, from `extents` (as
/// [`extents_over`] gives them): the virtual block of each, `None` for holes.
fn mapped_in(extents: &[Extent], b: u64, n: u64) -> Vec<Option<u64>> {
    let mut out = vec![None; n as usize];
    for e in extents {
        let lo = e.file_block.max(b);
        let hi = (e.file_block + e.len).min(b + n);
        for f in lo..hi {
            out[(f - b) as usize] = Some(e.vstart + (f - e.file_block));
        }
    }
    out
}

/// Map file blocks `[b, b + n)` to virtual blocks `[vs, vs + n)`, splitting
/// the `overlapping` extents (all those that overlap the range, whole) and
/// merging with contiguous neighbours. Returns the virtual blocks that were
/// mapped there before.
fn remap_run(
    s: &mut Store,
    ino: &mut Inode,
    b: u64,
    n: u64,
    vs: u64,
    overlapping: &[Extent],
) -> Result<Vec<u64>> {
    let end = b + n;
    let (replaced, right_piece) = cut_overlapping(s, ino, b, end, overlapping)?;
    let new = Extent {
        file_block: b,
        vstart: vs,
        len: n,
    };
    // An old extent that started before `b` left its own piece there, whose
    // numbers are in use, so nothing new can continue it.
    let starts_before = overlapping.first().is_some_and(|e| e.file_block < b);
    let new = if starts_before {
        new
    } else {
        merge_before(s, ino, new)?
    };
    let new = merge_after(s, ino, new, right_piece)?;
    if new.file_block != b {
        // Merged into the extent before: the old key `b`, if any, goes.
        if overlapping.iter().any(|e| e.file_block == b) {
            map::remove(s, ino, b)?;
        }
    }
    map::insert(s, ino, new.file_block, &encode_ext(&new))?;
    Ok(replaced)
}

/// Cut file blocks `[b, end)` out of the `overlapping` extents: the pieces
/// before and after stay mapped. Returns the virtual blocks cut out, and the
/// piece after `end` if one was left. The new extent takes key `b` itself
/// when an old one starts there, so that one is replaced by its insert
/// rather than removed here.
fn cut_overlapping(
    s: &mut Store,
    ino: &mut Inode,
    b: u64,
    end: u64,
    overlapping: &[Extent],
) -> Result<(Vec<u64>, Option<Extent>)> {
    let mut replaced = Vec::new();
    let mut right_piece = None;
    for e in overlapping {
        debug_assert!(e.file_block < end && e.file_block + e.len > b);
        let (lo, hi) = (b.max(e.file_block), end.min(e.file_block + e.len));
        replaced.extend((lo..hi).map(|f| e.vstart + (f - e.file_block)));
        if e.file_block < b {
            let left = Extent {
                file_block: e.file_block,
                vstart: e.vstart,
                len: b - e.file_block,
            };
            map::insert(s, ino, left.file_block, &encode_ext(&left))?;
        } else if e.file_block != b {
            map::remove(s, ino, e.file_block)?;
        }
        if e.file_block + e.len > end {
            let d = end - e.file_block;
            let right = Extent {
                file_block: end,
                vstart: e.vstart + d,
                len: e.len - d,
            };
            map::insert(s, ino, right.file_block, &encode_ext(&right))?;
            right_piece = Some(right);
        }
    }
    Ok((replaced, right_piece))
}

/// Merge `new` into the extent right before it when contiguous in both
/// spaces (removing that one's key: the caller inserts the result).
fn merge_before(s: &mut Store, ino: &mut Inode, new: Extent) -> Result<Extent> {
    let (b, vs, n) = (new.file_block, new.vstart, new.len);
    if b == 0 {
        return Ok(new);
    }
    if let Some(p) = extent_at(s, ino, b - 1)? {
        if p.file_block + p.len == b && p.vstart + p.len == vs && p.len + n <= u32::MAX as u64 {
            map::remove(s, ino, p.file_block)?;
            return Ok(Extent {
                file_block: p.file_block,
                vstart: p.vstart,
                len: p.len + n,
            });
        }
    }
    Ok(new)
}

/// Merge the extent right after `new` (the piece `cut_overlapping` left,
/// else the one at the next key) into it, only when that one is fresh:
/// along an extent, the blocks after a fresh one must be fresh too
/// (`write_blocks` rewrites them in place). New numbers at the end of the
/// DAT always were; a reused number can sit right before the older extent
/// of the next file block.
fn merge_after(
    s: &mut Store,
    ino: &mut Inode,
    mut new: Extent,
    right_piece: Option<Extent>,
) -> Result<Extent> {
    // The run being mapped ends where `new` does.
    let end = new.file_block + new.len;
    let vend = new.vstart + new.len;
    let after = match right_piece {
        Some(r) => Some(r),
        None => match map::get_ceil(s, ino, end)? {
            Some((k, val)) if k == end => Some(decode_ext_in(s, k, &val)?),
            _ => None,
        },
    };
    if let Some(next) = after {
        if next.vstart == vend && s.is_fresh(next.vstart) && new.len + next.len <= u32::MAX as u64 {
            map::remove(s, ino, next.file_block)?;
            new.len += next.len;
        }
    }
    Ok(new)
}

/// Give file blocks `[b0, b0 + data.len() / BLOCK)` the contents `data`:
/// blocks already fresh in this checkpoint are rewritten in place, the others
/// get one new run of consecutive virtual blocks (one extent).
fn write_blocks(s: &mut Store, ino: &mut Inode, b0: u64, data: &[u8]) -> Result<()> {
    let n = data.len() as u64 / BLOCK;
    let chunk = |i: u64| data[(i * BLOCK) as usize..((i + 1) * BLOCK) as usize].to_vec();
    let extents = extents_over(s, ino, b0, n)?;
    let mapped = mapped_in(&extents, b0, n);
    // Whether file block `b0 + i` starts a fresh stretch: mapped to a block
    // no checkpoint has seen (along an extent, the blocks after a fresh one
    // are fresh too, `remap_run` keeps it so).
    let fresh_at = |s: &Store, i: u64| mapped[i as usize].is_some_and(|v| s.is_fresh(v));
    let extent_end = |i: u64| {
        let f = b0 + i;
        extents
            .iter()
            .find(|e| f >= e.file_block && f < e.file_block + e.len)
            .map(|e| e.file_block + e.len - b0)
    };
    let mut i = 0;
    while i < n {
        let b = b0 + i;
        if fresh_at(s, i) {
            let m = extent_end(i).expect("mapped").min(n) - i;
            for j in 0..m {
                let v = mapped[(i + j) as usize].expect("mapped");
                s.vwrite(v, chunk(i + j), owner(ino.ino, b + j))?;
            }
            i += m;
            continue;
        }
        // How far the blocks needing new virtual blocks go: through mapped
        // old extents and holes, up to the first block where a fresh
        // stretch of an extent starts.
        let mut m = 1;
        while i + m < n {
            let at = i + m;
            let starts_extent = extents.iter().any(|e| e.file_block == b0 + at);
            if starts_extent && fresh_at(s, at) {
                break;
            }
            m += 1;
        }
        let olds = &mapped[i as usize..(i + m) as usize];
        let vs = s.valloc_overwrite_run(ino.ino, olds)?;
        for j in 0..m {
            s.vfill(vs + j, chunk(i + j), owner(ino.ino, b + j));
        }
        let overlapping: Vec<Extent> = extents
            .iter()
            .filter(|e| e.file_block < b + m && e.file_block + e.len > b)
            .copied()
            .collect();
        let replaced = remap_run(s, ino, b, m, vs, &overlapping)?;
        ino.blocks += m - replaced.len() as u64;
        s.note_kills(ino.ino, &replaced);
        s.vkill_many(&replaced)?;
        i += m;
    }
    Ok(())
}

/// Give file block `b` the contents `data` (a whole block).
fn write_block(s: &mut Store, ino: &mut Inode, b: u64, data: Vec<u8>) -> Result<()> {
    write_blocks(s, ino, b, &data)
}

/// Move inline bytes into block 0 so that the file can grow past the inode.
fn uninline(s: &mut Store, ino: &mut Inode) -> Result<()> {
    if ino.format != Format::InlineData {
        return Ok(());
    }
    let data = std::mem::take(&mut ino.area);
    ino.format = Format::InlineMap;
    ino.area = 0u16.to_le_bytes().to_vec();
    if data.iter().any(|&x| x != 0) {
        let mut block = data;
        block.resize(BLOCK as usize, 0);
        write_block(s, ino, 0, block)?;
    }
    Ok(())
}

/// Write `data` at `off`, growing the file as needed.
pub fn write(s: &mut Store, ino: &mut Inode, off: u64, data: &[u8]) -> Result<()> {
    let end = off
        .checked_add(data.len() as u64)
        .filter(|&e| e <= MAX_FILE_BYTES)
        .ok_or(Error::Errno(Errno::FBIG))?;
    if data.is_empty() {
        return Ok(());
    }
    if ino.format == Format::InlineData && end <= AREA_BYTES as u64 {
        let mut area = std::mem::take(&mut ino.area);
        area.resize((ino.size.max(end)) as usize, 0);
        area[off as usize..end as usize].copy_from_slice(data);
        ino.area = area;
        ino.size = ino.size.max(end);
        return Ok(());
    }
    uninline(s, ino)?;
    let mut pos = off;
    let mut src = data;
    while !src.is_empty() {
        let b = pos / BLOCK;
        let in_block = (pos % BLOCK) as usize;
        if in_block == 0 && src.len() >= BLOCK as usize {
            // Whole blocks: one run.
            let full = src.len() / BLOCK as usize * BLOCK as usize;
            write_blocks(s, ino, b, &src[..full])?;
            pos += full as u64;
            src = &src[full..];
            continue;
        }
        let n = (BLOCK as usize - in_block).min(src.len());
        let mut cur = match extent_at(s, ino, b)? {
            Some(e) => s.vread(e.vstart + (b - e.file_block), owner(ino.ino, b))?,
            None => vec![0; BLOCK as usize],
        };
        cur[in_block..in_block + n].copy_from_slice(&src[..n]);
        write_block(s, ino, b, cur)?;
        pos += n as u64;
        src = &src[n..];
    }
    ino.size = ino.size.max(end);
    Ok(())
}

/// Recovery (fs/replay.rs): file block `b` is virtual block `v`, whose
/// contents an fsync record holds at physical block `pblock`. Mapped as a
/// write of the block would map it (replacing what was there, the file at
/// least that long), but nothing is written: the record's copy is adopted
/// (`Store::vplace_replayed`), compressed or not (`frame`, as in
/// `DatEntry::frame`).
pub fn adopt_block(
    s: &mut Store,
    ino: &mut Inode,
    b: u64,
    v: u64,
    (pblock, frame): (u64, u16),
) -> Result<()> {
    let end = b
        .checked_add(1)
        .and_then(|n| n.checked_mul(BLOCK))
        .filter(|&e| e <= MAX_FILE_BYTES)
        .ok_or(Error::Errno(Errno::FBIG))?;
    uninline(s, ino)?;
    let extents = extents_over(s, ino, b, 1)?;
    let old = mapped_in(&extents, b, 1)[0];
    if old == Some(v) {
        // Rewritten in place by a later fsync: its earlier copy dies.
        s.vplace_replayed(v, pblock, frame, 0)?;
    } else {
        // A record's block is mapped once, where it was written; a second
        // place would be two files (or offsets) sharing it.
        if s.dat_get(v)?.pblock != 0 {
            return Err(Error::corrupt(format!(
                "virtual block {v} of an fsync record is mapped at two places (inode {}, block {b})",
                ino.ino
            )));
        }
        let prev = match old {
            Some(o) => s.dat_get(o)?.start,
            None => 0,
        };
        let replaced = remap_run(s, ino, b, 1, v, &extents)?;
        debug_assert!(replaced.len() <= 1);
        ino.blocks += 1 - replaced.len() as u64;
        s.vkill_many(&replaced)?;
        s.vplace_replayed(v, pblock, frame, prev)?;
    }
    ino.size = ino.size.max(end);
    Ok(())
}

/// Drop every block at or after file block `from`.
fn drop_blocks_from(s: &mut Store, ino: &mut Inode, from: u64) -> Result<()> {
    // The last extent, while it reaches past `from`.
    while let Some((k, v)) = map::get_floor(s, ino, u64::MAX)? {
        let e = decode_ext_in(s, k, &v)?;
        if e.file_block + e.len <= from {
            break;
        }
        let cut = from.max(e.file_block);
        let first = cut - e.file_block;
        let mut i = first;
        while i < e.len {
            let n = (e.len - i).min(DROP_BATCH_BLOCKS);
            let dead: Vec<u64> = (i..i + n).map(|j| e.vstart + j).collect();
            s.note_kills(ino.ino, &dead);
            if let Err(err) = s.vkill_many(&dead) {
                if i > first {
                    // Blocks are freed that the extent still names: stop writes.
                    s.fail(&err);
                }
                return Err(err);
            }
            i += n;
        }
        ino.blocks = ino.blocks.checked_sub(e.len - first).ok_or_else(|| {
            let err = Error::corrupt(format!(
                "inode {} counts {} blocks, fewer than its extent at file block {k} frees",
                ino.ino, ino.blocks
            ));
            s.fail(&err);
            err
        })?;
        map::remove(s, ino, k)?;
        if cut > e.file_block {
            let left = Extent {
                file_block: e.file_block,
                vstart: e.vstart,
                len: cut - e.file_block,
            };
            map::insert(s, ino, k, &encode_ext(&left))?;
        }
    }
    Ok(())
}

/// Free at most `max` of the file's last mapped blocks, for a file deleted
/// in the background (`fs/delete.rs`). The size drops to the first block
/// freed, so what is left is an ordinary shorter file that fsck checks like
/// any other. Returns the blocks freed: fewer than `max` only when none is
/// left.
pub fn drop_tail(s: &mut Store, ino: &mut Inode, max: u64) -> Result<u64> {
    if ino.format == Format::InlineData {
        return Ok(0);
    }
    let mut freed = 0;
    while freed < max {
        let Some((k, v)) = map::get_floor(s, ino, u64::MAX)? else {
            break;
        };
        let e = decode_ext_in(s, k, &v)?;
        let n = e.len.min(max - freed);
        let cut = e.file_block + e.len - n;
        let before = ino.blocks;
        drop_blocks_from(s, ino, cut)?;
        // Only the last extent reaches past `cut`: exactly its tail went.
        assert_eq!(
            before - ino.blocks,
            n,
            "inode {}: dropping from file block {cut}",
            ino.ino
        );
        freed += n;
        ino.size = ino.size.min(cut * BLOCK);
    }
    Ok(freed)
}

/// Set the file size, dropping blocks past the new end and zeroing the
/// tail of the last block so that a later extension reads zeros.
pub fn truncate(s: &mut Store, ino: &mut Inode, size: u64) -> Result<()> {
    if size > MAX_FILE_BYTES {
        return Err(Error::Errno(Errno::FBIG));
    }
    if ino.format == Format::InlineData {
        if size <= AREA_BYTES as u64 {
            ino.area.resize((size.min(ino.size)) as usize, 0);
            ino.size = size;
            return Ok(());
        }
        uninline(s, ino)?;
    }
    if size < ino.size {
        drop_blocks_from(s, ino, size.div_ceil(BLOCK))?;
        let tail = (size % BLOCK) as usize;
        if tail != 0 {
            let b = size / BLOCK;
            if let Some(e) = extent_at(s, ino, b)? {
                let mut cur = s.vread(e.vstart + (b - e.file_block), owner(ino.ino, b))?;
                if cur[tail..].iter().any(|&x| x != 0) {
                    cur[tail..].fill(0);
                    write_block(s, ino, b, cur)?;
                }
            }
        }
    }
    ino.size = size;
    if size == 0 && ino.blocks == 0 && ino.format == Format::InlineMap {
        ino.format = Format::InlineData;
        ino.area.clear();
    }
    Ok(())
}

/// Free all data and the map of a file being deleted.
pub fn destroy(s: &mut Store, ino: &mut Inode) -> Result<()> {
    if ino.format != Format::InlineData {
        drop_blocks_from(s, ino, 0)?;
        if ino.format == Format::BTree {
            map::destroy_tree(s, ino.map_root, ino.ino)?;
            ino.map_root = 0;
        }
    }
    ino.format = Format::InlineData;
    ino.area.clear();
    ino.size = 0;
    Ok(())
}

/// fallocate mode 0: extend the size to cover `[off, off + len)`. Holes in
/// the range keep reading as zeros and are not written: a log-structured
/// file system writes every block anew anyway, so writing zeros now would
/// only double the writes. The caller checks that the space exists.
pub fn allocate(s: &mut Store, ino: &mut Inode, off: u64, len: u64) -> Result<()> {
    let end = off
        .checked_add(len)
        .filter(|&e| e <= MAX_FILE_BYTES)
        .ok_or(Error::Errno(Errno::FBIG))?;
    if end > ino.size {
        truncate(s, ino, end)?;
    }
    Ok(())
}

/// Make bytes `[off, off + len)` read as zeros without changing the size
/// (fallocate's PUNCH_HOLE, and ZERO_RANGE): the partial blocks at the edges
/// are zeroed in place, the whole blocks between them are unmapped and
/// their virtual blocks freed (their segments' live counts drop). Blocks
/// past the end of the file are left as they are: there are none.
pub fn punch(s: &mut Store, ino: &mut Inode, off: u64, len: u64) -> Result<()> {
    let end = off
        .checked_add(len)
        .filter(|&e| e <= MAX_FILE_BYTES)
        .ok_or(Error::Errno(Errno::FBIG))?;
    if len == 0 {
        return Ok(());
    }
    if ino.format == Format::InlineData {
        // Bytes past the area already read as zeros.
        let n = ino.area.len() as u64;
        if off < n {
            ino.area[off as usize..end.min(n) as usize].fill(0);
        }
        return Ok(());
    }
    let head = off / BLOCK;
    if off % BLOCK != 0 {
        let to = end.min((head + 1) * BLOCK) - head * BLOCK;
        zero_in_block(s, ino, head, (off % BLOCK) as usize, to as usize)?;
    }
    let tail = end / BLOCK;
    // A range inside one block was zeroed above, unless it starts at the
    // block's first byte.
    if end % BLOCK != 0 && (tail > head || off % BLOCK == 0) {
        zero_in_block(s, ino, tail, 0, (end % BLOCK) as usize)?;
    }
    let (first, last) = (off.div_ceil(BLOCK), end / BLOCK);
    if first < last {
        unmap(s, ino, first, last)?;
    }
    Ok(())
}

/// Zero bytes `[from, to)` of file block `b`, if it is mapped and they are
/// not zeros already (a hole reads as zeros).
fn zero_in_block(s: &mut Store, ino: &mut Inode, b: u64, from: usize, to: usize) -> Result<()> {
    assert!(
        from < to && to <= BLOCK as usize,
        "zero {from}..{to} of a block"
    );
    let Some(e) = extent_at(s, ino, b)? else {
        return Ok(());
    };
    let mut cur = s.vread(e.vstart + (b - e.file_block), owner(ino.ino, b))?;
    if cur[from..to].iter().any(|&x| x != 0) {
        cur[from..to].fill(0);
        write_block(s, ino, b, cur)?;
    }
    Ok(())
}

/// Unmap file blocks `[from, to)`, freeing their virtual blocks: the
/// extents that overlap keep their pieces outside the range.
fn unmap(s: &mut Store, ino: &mut Inode, from: u64, to: u64) -> Result<()> {
    for e in extents_over(s, ino, from, to - from)? {
        let (lo, hi) = (from.max(e.file_block), to.min(e.file_block + e.len));
        debug_assert!(lo < hi, "extents_over gave {e:?} outside {from}..{to}");
        let mut i = lo;
        while i < hi {
            let n = (hi - i).min(DROP_BATCH_BLOCKS);
            let dead: Vec<u64> = (i..i + n).map(|f| e.vstart + (f - e.file_block)).collect();
            s.note_kills(ino.ino, &dead);
            if let Err(err) = s.vkill_many(&dead) {
                if i > lo {
                    // Blocks are freed that the extent still names: stop writes.
                    s.fail(&err);
                }
                return Err(err);
            }
            i += n;
        }
        ino.blocks = ino.blocks.checked_sub(hi - lo).ok_or_else(|| {
            let err = Error::corrupt(format!(
                "inode {} counts {} blocks, fewer than a punch frees from its extent at file block {}",
                ino.ino, ino.blocks, e.file_block
            ));
            s.fail(&err);
            err
        })?;
        map::remove(s, ino, e.file_block)?;
        if e.file_block < lo {
            let left = Extent {
                file_block: e.file_block,
                vstart: e.vstart,
                len: lo - e.file_block,
            };
            map::insert(s, ino, left.file_block, &encode_ext(&left))?;
        }
        let e_end = e.file_block + e.len;
        if hi < e_end {
            let right = Extent {
                file_block: hi,
                vstart: e.vstart + (hi - e.file_block),
                len: e_end - hi,
            };
            map::insert(s, ino, right.file_block, &encode_ext(&right))?;
        }
    }
    Ok(())
}

/// Make file blocks `[db, db + n)` of `dst` map the virtual blocks that
/// blocks `[sb, sb + n)` of `src` map now, sharing them (each gains a user
/// in its DAT entry, `Store::vshare_many`), and holes where `src` has
/// holes; what `dst` mapped there loses a user. Only map entries and DAT
/// entries change: no data is read or written. The caller has written a
/// checkpoint first, so no block of either file is fresh (rewritten in
/// place), and `src` is a mapped file (not inline data). `dst` may be
/// `src` itself with ranges apart; the source's extents are read before
/// anything changes. The size is the caller's.
pub fn clone_blocks(
    s: &mut Store,
    src: &Inode,
    sb: u64,
    dst: &mut Inode,
    db: u64,
    n: u64,
) -> Result<()> {
    debug_assert!(src.format != Format::InlineData);
    if n == 0 {
        return Ok(());
    }
    uninline(s, dst)?;
    // (offset in the range, first virtual block or 0 for a hole, length),
    // in pieces of at most DROP_BATCH_BLOCKS so that each list is bounded.
    let mut pieces = Vec::new();
    let mut at = 0;
    for e in extents_over(s, src, sb, n)? {
        let (lo, hi) = (sb.max(e.file_block), (sb + n).min(e.file_block + e.len));
        if lo - sb > at {
            pieces.push((at, 0, lo - sb - at));
        }
        pieces.push((lo - sb, e.vstart + (lo - e.file_block), hi - lo));
        at = hi - sb;
    }
    if at < n {
        pieces.push((at, 0, n - at));
    }
    for (off, v0, len) in pieces {
        let mut i = 0;
        while i < len {
            let m = (len - i).min(DROP_BATCH_BLOCKS);
            let b = db + off + i;
            if v0 == 0 {
                if !extents_over(s, dst, b, m)?.is_empty() {
                    unmap(s, dst, b, b + m)?;
                }
            } else {
                let vs: Vec<u64> = (v0 + i..v0 + i + m).collect();
                // Counted first: a block `dst` already maps there (cloned
                // twice) loses its user below and must not end meanwhile.
                s.vshare_many(&vs)?;
                let overlapping = extents_over(s, dst, b, m)?;
                let replaced =
                    remap_run(s, dst, b, m, v0 + i, &overlapping).inspect_err(|err| s.fail(err))?;
                dst.blocks += m - replaced.len() as u64;
                s.note_kills(dst.ino, &replaced);
                s.vkill_many(&replaced).inspect_err(|err| s.fail(err))?;
            }
            i += m;
        }
    }
    Ok(())
}

/// lseek(2)'s SEEK_DATA (`data`) or SEEK_HOLE from byte `off`: the first
/// byte at or after `off` in data, or in a hole. Blocks no extent maps are
/// holes (also those fallocate reserved or punched: they read as zeros); the end of the
/// file counts as a hole; inline data is all data. `None` is ENXIO: `off` is
/// at or past the end, or no data follows it.
pub fn seek_data_or_hole(s: &mut Store, ino: &Inode, off: u64, data: bool) -> Result<Option<u64>> {
    let size = ino.size;
    if off >= size || ino.format == Format::InlineData {
        return Ok(lsfs_vfs::seek_in_all_data(size, off, data));
    }
    let b = off / BLOCK;
    let here = extent_at(s, ino, b)?;
    if data {
        if here.is_some() {
            return Ok(Some(off));
        }
        return match map::get_ceil(s, ino, b)? {
            Some((k, v)) => {
                let at = decode_ext_in(s, k, &v)?.file_block * BLOCK;
                Ok((at < size).then_some(at))
            }
            None => Ok(None),
        };
    }
    let Some(mut e) = here else {
        return Ok(Some(off));
    };
    // Extents that continue one another are one run of data.
    loop {
        let end = e.file_block + e.len;
        match map::get_ceil(s, ino, end)? {
            Some((k, v)) if k == end => e = decode_ext_in(s, k, &v)?,
            _ => return Ok(Some((end * BLOCK).min(size))),
        }
    }
}

/// File blocks `[from, to)` that hold data, with their virtual blocks (fsck, dsync).
pub fn mapped_blocks(s: &mut Store, ino: &Inode) -> Result<Vec<(u64, u64)>> {
    let mut out = Vec::new();
    let mut key = 0;
    while let Some((k, v)) = map::get_ceil(s, ino, key)? {
        let e = decode_ext_in(s, k, &v)?;
        out.extend((0..e.len).map(|i| (e.file_block + i, e.vstart + i)));
        key = k + 1;
    }
    Ok(out)
}

/// Up to about `max` (file block, virtual block) pairs of `ino` from file
/// block `from` on, in file order: whole extents, the first cut at `from`;
/// it stops after the extent that reaches `max`.
pub fn mapped_blocks_from(
    s: &mut Store,
    ino: &Inode,
    from: u64,
    max: usize,
) -> Result<Vec<(u64, u64)>> {
    let mut out = Vec::new();
    if let Some(e) = extent_at(s, ino, from)?.filter(|e| e.file_block < from) {
        out.extend((from..e.file_block + e.len).map(|b| (b, e.vstart + b - e.file_block)));
    }
    let mut key = from;
    while out.len() < max {
        let Some((k, v)) = map::get_ceil(s, ino, key)? else {
            break;
        };
        let e = decode_ext_in(s, k, &v)?;
        out.extend((0..e.len).map(|i| (e.file_block + i, e.vstart + i)));
        key = k + 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lsfs_vfs::Timespec;

    /// Found by the `image` fuzz target: a damaged IFILE block gave an
    /// empty inline-data file the size 0x1_f628_ed86, and reading it
    /// allocated the whole size (8 GiB) instead of the bytes asked for.
    #[test]
    fn inline_read_makes_only_the_bytes_asked_for() {
        let mut s = Store::small_for_test();
        let now = Timespec { sec: 0, nsec: 0 };
        let mut i = Inode::new(16, libc::S_IFREG | 0o644, 0, 0, now);
        assert_eq!(i.format, Format::InlineData);
        i.area = b"inline file data".to_vec();
        for size in [1u64 << 62, 0x1_f628_ed86] {
            i.size = size;
            let b = read(&mut s, &i, 0, 65536).unwrap();
            assert_eq!(b.len(), 65536);
            assert_eq!(&b[..16], b"inline file data");
            assert!(b[16..].iter().all(|&x| x == 0));
            assert_eq!(read(&mut s, &i, 4, 3).unwrap(), b"ne ");
            assert_eq!(read(&mut s, &i, size - 6, 65536).unwrap(), vec![0; 6]);
            assert_eq!(read(&mut s, &i, size, 1).unwrap(), Vec::<u8>::new());
        }
    }

    /// Extents whose block arithmetic would overflow are refused where decoded.
    #[test]
    fn extent_past_the_largest_file_or_virtual_range_is_corrupt() {
        let ext = |vstart: u64, len: u32| {
            let mut v = vstart.to_le_bytes().to_vec();
            v.extend_from_slice(&len.to_le_bytes());
            v
        };
        let e = decode_ext(u64::MAX, &ext(5, 1)).unwrap_err().to_string();
        assert!(e.contains("past the largest file"), "{e}");
        let e = decode_ext(1 << 32, &ext(5, 1)).unwrap_err().to_string();
        assert!(e.contains("past the largest file"), "{e}");
        let e = decode_ext(0, &ext(u64::MAX, 2)).unwrap_err().to_string();
        assert!(e.contains("out of range"), "{e}");
        let last = decode_ext((1 << 32) - 1, &ext((1 << 62) - 1, 1)).unwrap();
        assert_eq!(last.len, 1);
    }

    /// Found by the `image` fuzz target (a resealed patch over an inline
    /// extent list; read-write mount, whose roll-forward wrote the file):
    /// an extent at virtual block 0x10ff_ffff_0000_0009, far past the end
    /// of the DAT, counted as fresh and was rewritten in place; the first
    /// checkpoint then panicked placing a DAT block for it.
    #[test]
    fn extent_past_the_end_of_the_dat_is_corrupt() {
        let mut s = Store::small_for_test();
        let mut i = two_block_file(&mut s);
        let e = extent_at(&mut s, &i, 0)
            .unwrap()
            .expect("the file's extent");
        assert_eq!(
            e.vstart + e.len,
            s.roots().next_vblock,
            "the last blocks handed out"
        );
        let past = Extent {
            vstart: 0x10ff_ffff_0000_0009,
            ..e
        };
        map::insert(&mut s, &mut i, 0, &encode_ext(&past)).unwrap();
        let err = write(&mut s, &mut i, 0, &[1; BLOCK as usize])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("extent at file block 0 names virtual blocks 0x10ffffff00000009 + 2, past the end of the DAT"),
            "{err}"
        );
        let err = read(&mut s, &i, 0, 10).unwrap_err().to_string();
        assert!(err.contains("past the end of the DAT"), "{err}");
    }

    /// A regular file of two blocks, in one extent.
    fn two_block_file(s: &mut Store) -> Inode {
        let now = Timespec { sec: 0, nsec: 0 };
        let mut i = Inode::new(16, libc::S_IFREG | 0o644, 0, 0, now);
        write(s, &mut i, 0, &vec![7u8; 2 * BLOCK as usize]).unwrap();
        i
    }

    /// Found by the `image` fuzz target (a patch setting an extent's length
    /// to 0x23fd_2000 blocks, checksums resealed, then a truncation on a
    /// read-write mount): truncating listed every block of the extent at
    /// once (4.8 GiB). It now frees them in batches, and the first block the
    /// DAT does not hold live stops it with an error.
    #[test]
    fn truncating_a_huge_damaged_extent_is_an_error_in_bounded_memory() {
        let mut s = Store::small_for_test();
        let mut i = two_block_file(&mut s);
        let e = extent_at(&mut s, &i, 0)
            .unwrap()
            .expect("the file's extent");
        assert_eq!(e.len, 2);
        // 2^32 - 1 blocks: listing them at once is 32 GiB.
        let huge = Extent {
            len: u32::MAX as u64,
            ..e
        };
        map::insert(&mut s, &mut i, 0, &encode_ext(&huge)).unwrap();
        // Past the end of the DAT it is refused where decoded.
        let err = truncate(&mut s, &mut i, 0).unwrap_err().to_string();
        assert!(err.contains("past the end of the DAT"), "{err}");
        // With a DAT that ends after it, freeing goes in batches.
        s.set_dat_end_for_test(huge.vstart + huge.len);
        let err = truncate(&mut s, &mut i, 0).unwrap_err().to_string();
        assert!(err.contains("not live"), "{err}");
        assert!(s.writable().is_err(), "writes must stop");
    }

    /// An inode counting fewer blocks than its extents hold (damaged) is an
    /// error when they are freed, not an underflow.
    #[test]
    fn freeing_more_blocks_than_the_inode_counts_is_corrupt() {
        let mut s = Store::small_for_test();
        let mut i = two_block_file(&mut s);
        i.blocks = 1;
        let err = truncate(&mut s, &mut i, 0).unwrap_err().to_string();
        assert!(err.contains("counts 1 blocks"), "{err}");
    }
}
