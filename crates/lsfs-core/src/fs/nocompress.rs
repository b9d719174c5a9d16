//! The per-file switch off compression: the `user.lsfs.nocompress`
//! extended attribute (any value). Data that is compressed already (media,
//! archives) gains nothing from another pass and only costs CPU time on
//! the way in and out; the attribute, kept like any other xattr, tells the
//! segment constructor to write the file's records raw
//! (`Store::set_nocompress`, meta/compress.rs).

use super::inode::Inode;
use super::Lsfs;
use crate::error::Result;

/// The attribute's name.
pub const NOCOMPRESS_XATTR: &[u8] = b"user.lsfs.nocompress";

impl Lsfs {
    /// After an xattr of `ino` named `name` was set (`on`) or removed:
    /// the store learns whether the file is to be written raw.
    pub(super) fn note_nocompress(&mut self, ino: u64, name: &[u8], on: bool) {
        if name == NOCOMPRESS_XATTR {
            self.store.set_nocompress(ino, on);
        }
    }

    /// An inode read from the IFILE: whether it carries the attribute (a
    /// file without xattrs costs nothing).
    pub(super) fn load_nocompress(&mut self, inode: &Inode) -> Result<()> {
        if inode.xattr_root != 0
            && super::xattr::get(&mut self.store, inode, NOCOMPRESS_XATTR)?.is_some()
        {
            self.store.set_nocompress(inode.ino, true);
        }
        Ok(())
    }
}
