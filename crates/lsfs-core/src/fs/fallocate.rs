//! fallocate on a file: allocate, punch or zero a range, in pieces that
//! each dirty at most a quarter of the cache, as writes do.

use super::{file, Lsfs};
use crate::fs::inode::Inode;
use crate::log::items::Item;
use lsfs_vfs::{Errno, FallocMode, FileKind, Ino, VfsResult};

impl Lsfs {
    /// [`lsfs_vfs::Vfs::fallocate`] on file `ino`, as `how` says.
    pub(super) fn fallocate_file(
        &mut self,
        ino: Ino,
        offset: u64,
        length: u64,
        how: FallocMode,
    ) -> VfsResult<()> {
        let mut i = self.get(ino)?;
        check_target(&i, offset, length)?;
        self.reserve_for(how, &i, offset, length)?;
        let end = offset + length;
        // No block is mapped past the one holding the last byte, so a punch
        // or zero stops there: a range to the largest file is not millions
        // of empty steps.
        let stop = if how.zeroes() {
            end.min(i.size.div_ceil(file::BLOCK) * file::BLOCK)
        } else {
            end
        };
        // In pieces, like write: each piece dirties at most a quarter of the
        // cache (data blocks, or the DAT blocks a punch frees entries in).
        let chunk = self.chunk_bytes();
        let mut pos = offset;
        while pos < stop {
            let n = (chunk - pos % file::BLOCK).min(stop - pos);
            self.fallocate_piece(i, how, pos, n)?;
            pos += n;
            i = self.get(ino)?;
        }
        if how.grows() && end > i.size {
            // A zero range past the end: the rest only grows the file.
            file::allocate(&mut self.store, &mut i, offset, length)?;
            let now = self.store.clock().now();
            i.mtime = now;
            i.ctime = now;
            self.put(i);
            self.after_change()?;
        }
        Ok(())
    }

    /// Wait for the space `how` needs on `i` over `[offset, offset + length)`.
    fn reserve_for(
        &mut self,
        how: FallocMode,
        i: &Inode,
        offset: u64,
        length: u64,
    ) -> VfsResult<()> {
        match how {
            // Mode 0 reserves the space whether or not the size changes.
            FallocMode::Allocate { .. } => self.reserve(length / file::BLOCK + 2),
            // A punch or zero frees blocks and rewrites at most two; like a
            // shrinking truncate it does not wait for space, so that a full
            // file system can be emptied this way. Growing needs a block,
            // as for truncate.
            _ if how.grows() && offset + length > i.size => self.reserve(1),
            _ => Ok(()),
        }
    }

    /// One piece `[pos, pos + n)` of the range: punch it (logged for
    /// replay) or count it as written, allocate what grows the file, and
    /// store the inode.
    fn fallocate_piece(
        &mut self,
        mut i: Inode,
        how: FallocMode,
        pos: u64,
        n: u64,
    ) -> VfsResult<()> {
        let ino = i.ino;
        let now = self.store.clock().now();
        if how.zeroes() {
            file::punch(&mut self.store, &mut i, pos, n)?;
            // Replay must free the blocks too: the data blocks an fsync
            // carries cannot say that a block is gone.
            self.oplog.push(
                Item::Punch {
                    ino,
                    offset: pos,
                    length: n,
                },
                &[ino],
            );
            i.mtime = now;
        } else {
            self.write_amp.note_app(n);
        }
        if how.grows() && pos + n > i.size {
            // Growing needs no operation: the inode image says the size.
            file::allocate(&mut self.store, &mut i, pos, n)?;
            i.mtime = now;
        }
        i.ctime = now;
        self.put(i);
        self.after_change()
    }
}

/// fallocate applies to regular files only, and to ranges inside the
/// largest file.
fn check_target(i: &Inode, offset: u64, length: u64) -> VfsResult<()> {
    match i.kind() {
        FileKind::File => {}
        FileKind::Dir => return Err(Errno::ISDIR), // as Linux
        _ => return Err(Errno(libc::ENODEV)),
    }
    if offset
        .checked_add(length)
        .is_none_or(|end| end > file::MAX_FILE_BYTES)
    {
        return Err(Errno::FBIG);
    }
    Ok(())
}
