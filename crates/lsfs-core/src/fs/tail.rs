//! Handing a file's tail (its extents from a block on) to another inode
//! as it is: the map is cut along one path and no block's DAT entry
//! changes, so a truncate can leave the freeing to the background deleter
//! (fs/delete.rs) whatever the tail's size.

use crate::error::{Error, Result};
use crate::fs::file::{decode_ext_in, encode_ext, extent_at, Extent};
use crate::fs::inode::Inode;
use crate::fs::map;
use crate::meta::store::Store;

/// Items read per map lookup while counting.
const COUNT_RUN: usize = 256;

/// The blocks `ino` maps at file block `from` and beyond. Reads the map's
/// items from there on (a leaf holds a hundred or more extents), nothing
/// else.
pub fn blocks_from(s: &mut Store, ino: &Inode, from: u64) -> Result<u64> {
    let mut n = extent_at(s, ino, from)?
        .filter(|e| e.file_block < from)
        .map_or(0, |e| e.file_block + e.len - from);
    let mut key = from;
    loop {
        let run = map::get_ceil_run(s, ino, key, COUNT_RUN)?;
        let Some((last, _)) = run.last() else {
            return Ok(n);
        };
        key = last.saturating_add(1);
        for (k, v) in &run {
            n += decode_ext_in(s, *k, v)?.len;
        }
        if *last == u64::MAX {
            return Ok(n);
        }
    }
}

/// Move every block `from` maps at file block `at` and beyond, with its
/// extents, to `to` (an inode with an empty map), and move the block
/// counts with them. An extent across `at` is cut in two first. Returns
/// the blocks moved. Sizes are the caller's.
pub fn move_tail(s: &mut Store, from: &mut Inode, at: u64, to: &mut Inode) -> Result<u64> {
    if let Some(e) = extent_at(s, from, at)?.filter(|e| e.file_block < at) {
        let head = at - e.file_block;
        let left = Extent { len: head, ..e };
        let right = Extent {
            file_block: at,
            vstart: e.vstart + head,
            len: e.len - head,
        };
        map::insert(s, from, e.file_block, &encode_ext(&left))?;
        map::insert(s, from, at, &encode_ext(&right))?;
    }
    map::split_off(s, from, at, to)?;
    let moved = blocks_from(s, to, 0)?;
    from.blocks = from.blocks.checked_sub(moved).ok_or_else(|| {
        let err = Error::corrupt(format!(
            "inode {} counts {} blocks, fewer than the {moved} it maps from file block {at}",
            from.ino, from.blocks
        ));
        s.fail(&err);
        err
    })?;
    to.blocks = moved;
    Ok(moved)
}
