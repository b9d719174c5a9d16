//! The operation log: the namespace and metadata changes made since the
//! last checkpoint (create, link, unlink, rmdir, rename, shrinking
//! truncate, hole punch and zero range, setxattr, removexattr), in the
//! order they were made, as the
//! inline items an fsync record carries (`log/items.rs`).
//!
//! An fsync writes the operations not yet in a record, with images of the
//! inodes they touched, so that recovery replays them in order after the
//! records before (docs/CRASH.md): the namespace after a crash is always
//! that after some prefix of the operations. A checkpoint makes all of them
//! durable and clears the log.
//!
//! Bounded, so that recovery stays short and memory small: past
//! [`MAX_OPS`] operations or [`MAX_BYTES`] encoded bytes since the last
//! checkpoint, the writer checkpoints. An fsync whose items do not fit one
//! record (`MAX_INLINE_BYTES`) writes a checkpoint instead; the writer does
//! not checkpoint for that ahead of time, since most changes are never
//! fsync'd (a tar extraction).

use crate::log::items::Item;
use std::collections::BTreeSet;

/// Operations since the last checkpoint before the writer checkpoints:
/// recovery replays at most this many (docs/CRASH.md, "Recovery time").
pub const MAX_OPS: u64 = 4096;
/// Encoded operation bytes since the last checkpoint before the writer checkpoints.
pub const MAX_BYTES: u64 = 1 << 20;

#[derive(Debug, Default)]
pub struct OpLog {
    /// Operations not yet in a record, oldest first.
    pending: Vec<Item>,
    /// Inodes the pending operations changed: the next record carries
    /// their images (and a regular file's dirty data).
    touched: BTreeSet<u64>,
    /// Operations and their encoded bytes since the last checkpoint,
    /// written or not.
    ops: u64,
    bytes: u64,
}

impl OpLog {
    /// Log `op`, which changed the inodes `touched`.
    pub fn push(&mut self, op: Item, touched: &[u64]) {
        assert!(op.is_operation(), "an inode image is not an operation");
        self.bytes += op.encoded_len() as u64;
        self.ops += 1;
        self.pending.push(op);
        self.touched.extend(touched.iter().copied());
    }

    /// Past a bound: the writer should checkpoint.
    pub fn over_bound(&self) -> bool {
        self.ops > MAX_OPS || self.bytes > MAX_BYTES
    }

    /// The operations the next fsync record must carry, oldest first.
    pub fn pending(&self) -> &[Item] {
        &self.pending
    }

    /// The inodes those operations changed.
    pub fn touched(&self) -> impl Iterator<Item = u64> + '_ {
        self.touched.iter().copied()
    }

    /// The pending operations are durable in a record.
    pub fn written(&mut self) {
        self.pending.clear();
        self.touched.clear();
    }

    /// A checkpoint made every operation durable.
    pub fn clear(&mut self) {
        *self = OpLog::default();
    }

    /// Operations since the last checkpoint.
    pub fn ops_since_checkpoint(&self) -> u64 {
        self.ops
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unlink(n: usize) -> Item {
        Item::Unlink {
            parent: 1,
            name: vec![b'x'; n],
        }
    }

    #[test]
    fn bounds_count_every_operation_since_the_checkpoint() {
        let mut l = OpLog::default();
        l.push(unlink(10), &[1, 20]);
        l.push(unlink(10), &[1, 21]);
        assert_eq!(l.pending().len(), 2);
        assert_eq!(l.touched().collect::<Vec<_>>(), vec![1, 20, 21]);
        l.written();
        assert!(l.pending().is_empty() && l.touched().next().is_none());
        assert_eq!(
            l.ops_since_checkpoint(),
            2,
            "written operations still count"
        );
        for _ in 0..MAX_OPS - 2 {
            l.push(unlink(1), &[1]);
            l.written();
        }
        assert!(!l.over_bound());
        l.push(unlink(1), &[1]);
        assert!(l.over_bound(), "past MAX_OPS");
        l.clear();
        assert!(!l.over_bound() && l.ops_since_checkpoint() == 0);
        // Bytes: long xattr values.
        let set = |n| Item::SetXattr {
            ino: 20,
            name: b"user.x".to_vec(),
            value: vec![0; n],
        };
        for _ in 0..15 {
            l.push(set(65536), &[20]);
            l.written();
        }
        assert!(!l.over_bound());
        l.push(set(65536), &[20]);
        assert!(l.over_bound(), "past MAX_BYTES");
    }
}
