//! One generic copy-on-write B-tree, used by file block maps, directories,
//! xattrs and every metadata file.
//!
//! Keys are `u64`; values are byte strings of at most [`MAX_VALUE_BYTES`].
//! Nodes are whole blocks, named by a `u64` pointer that a [`NodeStore`]
//! resolves: virtual block numbers for files and most metadata files, physical
//! (or not-yet-placed temporary) addresses for the DAT.

mod node;
mod tree;

pub use node::{Node, Value, NODE_MAGIC};
pub use tree::{BTree, NodeVisit};

use crate::error::{Error, Result};

/// Largest value a leaf item may hold, so that any two items fit in one node.
pub const MAX_VALUE_BYTES: usize = 1800;

/// Where a tree's nodes live. The tree never caches nodes itself.
pub trait NodeStore {
    /// The node block at `ptr` (exactly one block of bytes).
    fn read_node(&mut self, ptr: u64) -> Result<Vec<u8>>;
    /// Make `ptr` writable in the current checkpoint and return the pointer to
    /// use from now on: `ptr` itself if it is already writable, otherwise a new
    /// pointer holding a copy (copy-on-write; the old one is released).
    fn make_writable(&mut self, ptr: u64) -> Result<u64>;
    /// Replace the contents of `ptr`, which must be writable.
    fn write_node(&mut self, ptr: u64, block: Vec<u8>) -> Result<()>;
    /// A new, writable, empty node pointer.
    fn alloc_node(&mut self) -> Result<u64>;
    /// Release `ptr` (its node is no longer part of the tree).
    fn free_node(&mut self, ptr: u64) -> Result<()>;
    /// Whether the bytes `read_node(ptr)` returns passed a full node check
    /// since they were read or written (then the CRC, padding and key-order
    /// checks are skipped: they were a fifth of a random write's CPU). A
    /// store that cannot remember says no, and every read is checked.
    fn node_verified(&self, _ptr: u64) -> bool {
        false
    }
    /// The bytes at `ptr` passed a full node check.
    fn set_node_verified(&mut self, _ptr: u64) {}
}

/// A [`NodeStore`] that only reads, through `read`: for checkers and views
/// that must not change a tree. Every change is refused with EROFS.
pub struct ReadOnly<F>(pub F);

impl<F: FnMut(u64) -> Result<Vec<u8>>> NodeStore for ReadOnly<F> {
    fn read_node(&mut self, ptr: u64) -> Result<Vec<u8>> {
        (self.0)(ptr)
    }
    fn make_writable(&mut self, _: u64) -> Result<u64> {
        Err(Error::Errno(lsfs_vfs::Errno::ROFS))
    }
    fn write_node(&mut self, _: u64, _: Vec<u8>) -> Result<()> {
        Err(Error::Errno(lsfs_vfs::Errno::ROFS))
    }
    fn alloc_node(&mut self) -> Result<u64> {
        Err(Error::Errno(lsfs_vfs::Errno::ROFS))
    }
    fn free_node(&mut self, _: u64) -> Result<()> {
        Err(Error::Errno(lsfs_vfs::Errno::ROFS))
    }
}
