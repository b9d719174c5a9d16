//! Clones (reflinks): one file's block map is made to name another's
//! virtual blocks, so both share them until either is written. The data is
//! neither read nor written; the cost is the map entries and one DAT entry
//! change per block (docs/DESIGN.md §6, "Clones").
//!
//! Liveness: a shared block's DAT entry counts its users beyond the first
//! (`DatEntry::refs`). Every path that drops a block of a file (overwrite,
//! truncate, punch, delete, background delete, recovery) goes through
//! `Store::vkill_many`, which takes a user off the count and ends the block
//! only when none is left; so segment counters count a shared block once,
//! and the cleaner and defragmentation, which move a block by its DAT
//! entry, move it once for all its users.
//!
//! Copy-on-write: only a *fresh* block (handed out since the last
//! checkpoint) is rewritten in place; every other overwrite takes a new
//! virtual block. A clone therefore writes a checkpoint first, after which
//! no block of either file is fresh, and cloned blocks never are again.
//!
//! Durability: a clone ends with a checkpoint, so it is durable and whole
//! when it returns, and no fsync record (which roll-forward replays) ever
//! holds part of one. It is bounded (`clone_max_blocks`) so that the DAT
//! blocks it dirties fit the cache; a longer request is done in part, as
//! copy_file_range(2) allows.

use super::{file, Lsfs};
use crate::fs::inode::{Format, Inode};
use crate::meta::dat_entry::DAT_PER_BLOCK;
use lsfs_vfs::{Errno, VfsResult};

/// Most blocks one clone takes (1 GiB), less on a small cache.
pub const CLONE_MAX_BLOCKS: u64 = 1 << 18;
/// copy_file_range shares blocks from this many on (256 KiB): a clone costs
/// two checkpoints, which copying a few blocks does not (a `cp -r` of small
/// files would otherwise flush twice per file).
pub const COPY_CLONE_MIN_BLOCKS: u64 = 64;

impl Lsfs {
    /// Share bytes `[src_off, src_off + len)` of regular file `src` with
    /// `dst` at `dst_off`, FICLONERANGE's way: offsets on block boundaries,
    /// `len` whole blocks, or reaching the source's end (then the range must
    /// reach at least the destination's end too, since the source's last
    /// block is zeros past its end); `len` 0 means to the source's end.
    /// The destination grows to cover the range. Returns the bytes cloned:
    /// 0 from at or past the source's end, fewer than asked past
    /// `CLONE_MAX_BLOCKS`. Errors: as XFS gives them, EISDIR for a
    /// directory, EINVAL for another kind, unaligned offsets or overlapping
    /// ranges of one file, EFBIG past the largest file; and EBUSY while
    /// either file has atomic writes pending (fs/atomic.rs), EMLINK if a
    /// block already has 65,536 users, EXDEV for a snapshot's file.
    pub fn clone_range(
        &mut self,
        src: u64,
        src_off: u64,
        dst: u64,
        dst_off: u64,
        len: u64,
    ) -> VfsResult<u64> {
        self.mutable()?;
        let si = self.clone_file(src)?;
        let di = self.clone_file(dst)?;
        let bs = file::BLOCK;
        if src_off % bs != 0 || dst_off % bs != 0 {
            return Err(Errno::INVAL);
        }
        if src_off >= si.size {
            return Ok(0);
        }
        let avail = si.size - src_off;
        let mut len = if len == 0 { avail } else { len.min(avail) };
        let to_eof = len == avail;
        if !to_eof && len % bs != 0 {
            return Err(Errno::INVAL);
        }
        if src == dst && src_off < dst_off + len && dst_off < src_off + len {
            return Err(Errno::INVAL);
        }
        if si.format == Format::InlineData {
            // A few hundred bytes in the inode: copied, nothing to share.
            let data = file::read(&mut self.store, &si, src_off, len)?;
            return lsfs_vfs::Vfs::write(self, dst, dst_off, &data).map(u64::from);
        }
        let max_bytes = self.clone_max_blocks() * bs;
        let mut tail_ok = to_eof;
        if len > max_bytes {
            len = max_bytes;
            tail_ok = false;
        }
        if len % bs != 0 && !(tail_ok && dst_off + len >= di.size) {
            // The source's last block would bring zeros over bytes of the
            // destination past the range.
            return Err(Errno::INVAL);
        }
        if dst_off
            .checked_add(len)
            .is_none_or(|e| e > file::MAX_FILE_BYTES)
        {
            return Err(Errno::FBIG);
        }
        self.share_blocks(src, src_off, dst, dst_off, len)?;
        Ok(len)
    }

    /// copy_file_range(2) (`Vfs::copy_file_range`): the whole blocks of the
    /// range are shared when both offsets sit at the same place in their
    /// blocks and there are at least [`COPY_CLONE_MIN_BLOCKS`] of them; the
    /// bytes before and after them, and any other range, are read and
    /// written (`lsfs_vfs::copy_range_by_bytes`, a bounded piece per call).
    /// A file with atomic writes pending is copied too, through its pending
    /// set, as a read and a write would (a clone refuses it, EBUSY).
    pub fn copy_range(
        &mut self,
        src: u64,
        src_off: u64,
        dst: u64,
        dst_off: u64,
        len: u64,
    ) -> VfsResult<u64> {
        let len = lsfs_vfs::copy_range_checks(self, src, src_off, dst, dst_off, len)?;
        let bs = file::BLOCK;
        let head = (bs - src_off % bs) % bs;
        let whole = len.saturating_sub(head) / bs;
        let shareable = src_off % bs == dst_off % bs
            && whole >= COPY_CLONE_MIN_BLOCKS
            && self
                .clone_file(src)
                .is_ok_and(|i| i.format != Format::InlineData)
            && self.clone_file(dst).is_ok()
            && self.mutable().is_ok();
        if !shareable {
            return lsfs_vfs::copy_range_by_bytes(self, src, src_off, dst, dst_off, len);
        }
        let by_bytes = lsfs_vfs::copy_range_by_bytes::<Lsfs>;
        let mut done = 0;
        if head > 0 {
            done = by_bytes(self, src, src_off, dst, dst_off, head)?;
            if done < head {
                return Ok(done);
            }
        }
        let cloned = match self.clone_range(src, src_off + done, dst, dst_off + done, whole * bs) {
            Err(Errno::MLINK) => {
                // Blocks with 65,536 users already: their bytes are copied
                // instead (over what the clone shared before it stopped).
                let n = by_bytes(self, src, src_off + done, dst, dst_off + done, len - done)?;
                return Ok(done + n);
            }
            r => r?,
        };
        done += cloned;
        if cloned < whole * bs || done == len {
            return Ok(done);
        }
        let tail = by_bytes(self, src, src_off + done, dst, dst_off + done, len - done)?;
        Ok(done + tail)
    }

    /// A regular file that a clone may take from or change.
    fn clone_file(&mut self, ino: u64) -> VfsResult<Inode> {
        if super::snapview::is_virtual(ino) {
            return Err(Errno::XDEV);
        }
        let i = self.regular_file(ino)?;
        if self.atomic.contains(ino) {
            // Its pending writes are not in its map: sharing it now would
            // share what the commit is about to replace.
            return Err(Errno::BUSY);
        }
        Ok(i)
    }

    /// Blocks one clone takes at most: each dirties 1/128 of a DAT block
    /// and a little of the destination's map, and all of it must fit the
    /// cache's dirty half until the clone's checkpoint.
    fn clone_max_blocks(&self) -> u64 {
        let cache = self.store.cache().capacity_blocks() as u64;
        (cache / 4 * DAT_PER_BLOCK / 2).clamp(DAT_PER_BLOCK, CLONE_MAX_BLOCKS)
    }

    /// The checked clone: checkpoint, share, checkpoint. Returns EMLINK
    /// (`Store::vshare_many`) after cloning the part before it.
    fn share_blocks(
        &mut self,
        src: u64,
        src_off: u64,
        dst: u64,
        dst_off: u64,
        len: u64,
    ) -> VfsResult<()> {
        let n = len.div_ceil(file::BLOCK);
        // The DAT blocks and map nodes it dirties.
        self.reserve(n / DAT_PER_BLOCK + 2)?;
        if !self.store.clones_enabled() {
            // No DAT entry counts users before every superblock says so:
            // a build without the feature then refuses the image.
            self.store.enable_clones();
            self.checkpoint_for("clone")?;
            self.store.settle_superblocks()?;
        } else {
            self.checkpoint_for("clone")?;
        }
        let si = self.get(src)?;
        let mut di = if src == dst {
            si.clone()
        } else {
            self.get(dst)?
        };
        let r = file::clone_blocks(
            &mut self.store,
            &si,
            src_off / file::BLOCK,
            &mut di,
            dst_off / file::BLOCK,
            n,
        );
        match &r {
            Ok(()) | Err(crate::error::Error::Errno(_)) => {}
            Err(e) => {
                // A damaged map or DAT halfway: nothing more is written.
                self.store.fail(e);
                return Err(Errno::from(r.unwrap_err()));
            }
        }
        // EMLINK stops at a batch whose blocks have too many users, with
        // the batches before it cloned and counted: a consistent file,
        // cloned in part (XFS too stops at the extent it cannot share).
        di.size = di.size.max(dst_off + len);
        let now = self.store.clock().now();
        di.mtime = now;
        di.ctime = now;
        self.put(di);
        self.checkpoint_for("clone")?;
        r.map_err(Errno::from)
    }
}
