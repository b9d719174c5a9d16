//! Durable kills: which blocks the latest checkpoint sees have died by a
//! write that is durable already.
//!
//! A block that died since the latest checkpoint is dead for the file
//! system, but the latest checkpoint, recovery's base, still sees it. If
//! what killed it (an overwrite, a truncate) reached the device in an fsync
//! record, recovery replays that record and never needs the block again:
//! only a mount of that checkpoint itself would, and a pass that frees such
//! blocks has every plain checkpoint up to the latest given up by the next
//! checkpoint (and by recovery's, through its move record). If the write
//! is still in memory, a crash would recover a file that needs the block,
//! so its victim must wait for the next checkpoint, or the pass must copy it.
//!
//! The file layer reports each block of a regular file it kills, with the
//! inode; an fsync record that covers the inode makes them durable; a
//! checkpoint forgets everything (all of it is then behind the new base).
//! Only blocks the latest checkpoint sees are kept. Blocks killed any other
//! way (tree nodes, directories, metadata files) are never listed: they
//! count as not durable, which is always safe.
//!
//! Memory: 8 to 24 bytes a block, at most [`MAX_BLOCKS`] blocks (about
//! 25 MiB, in the memory report of `lsfs stats`); past that, kills are not
//! listed (safe, as above) until the next checkpoint.

use crate::meta::store::Store;
use std::collections::{HashMap, HashSet};

/// Blocks listed at most, durable or not.
pub const MAX_BLOCKS: usize = 1 << 20;

#[derive(Debug, Default)]
pub struct DurableKills {
    /// Killed by writes not yet durable, by inode.
    pending: HashMap<u64, Vec<u64>>,
    npending: usize,
    /// Killed by writes an fsync record made durable.
    durable: HashSet<u64>,
    /// A block shared by a clone lost a user since the latest checkpoint:
    /// nothing is listed until the next one. The kill that ends such a
    /// block is durable only if every earlier user's kill is too, which one
    /// list per inode cannot tell, so none counts as durable (safe, above).
    stopped: bool,
}

impl DurableKills {
    /// Inode `ino` killed blocks `vs`, which the latest checkpoint sees.
    pub fn killed(&mut self, ino: u64, vs: impl IntoIterator<Item = u64>) {
        let mut vs = vs.into_iter().peekable();
        if self.stopped || vs.peek().is_none() {
            return;
        }
        let list = self.pending.entry(ino).or_default();
        for v in vs {
            if self.npending + self.durable.len() >= MAX_BLOCKS {
                return;
            }
            list.push(v);
            self.npending += 1;
        }
    }

    /// A shared block lost a user: forget every kill listed, this one's
    /// too (listed a moment before it turned out to leave the block alive),
    /// and list none until the next checkpoint.
    pub fn stop(&mut self) {
        *self = DurableKills {
            stopped: true,
            ..DurableKills::default()
        };
    }

    /// An fsync record covering `inos` is durable.
    pub fn synced(&mut self, inos: &[u64]) {
        for ino in inos {
            if let Some(vs) = self.pending.remove(ino) {
                self.npending -= vs.len();
                self.durable.extend(vs);
            }
        }
    }

    /// Whether `v` died by a write that is durable.
    pub fn is_durable(&self, v: u64) -> bool {
        self.durable.contains(&v)
    }

    /// A checkpoint is durable: everything before it is behind the base.
    pub fn checkpoint_done(&mut self) {
        *self = DurableKills::default();
    }

    /// Blocks listed, for `Lsfs::memory`.
    pub fn len(&self) -> usize {
        self.npending + self.durable.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Store {
    /// The file layer is about to kill blocks `vs` of regular file `ino`:
    /// list those the latest checkpoint sees (see the module's comment).
    pub fn note_kills(&mut self, ino: u64, vs: &[u64]) {
        if !self.sb.move_records() {
            return;
        }
        // `Store::is_fresh`, on the fields, beside the borrow of `kills`.
        let (floor, fresh) = (self.fresh_floor, &self.dat_reuse.fresh);
        let seen = vs
            .iter()
            .copied()
            .filter(|&v| v < floor && !fresh.contains(&v));
        self.kills.killed(ino, seen);
    }

    /// Whether block `v`, dead since the latest checkpoint, died by a write
    /// that is durable.
    pub(crate) fn killed_durably(&self, v: u64) -> bool {
        self.kills.is_durable(v)
    }

    /// Blocks the durable-kill lists hold, for `Lsfs::memory`.
    pub fn durable_kills_len(&self) -> usize {
        self.kills.len()
    }

    pub(crate) fn count_freed_giving_up_base(&mut self, n: u32) {
        self.stats.freed_giving_up_base += n as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kills_turn_durable_with_their_inodes_fsync_only() {
        let mut k = DurableKills::default();
        k.killed(10, [1, 2]);
        k.killed(11, [3]);
        assert!(!k.is_durable(1) && !k.is_durable(3));
        k.synced(&[10]);
        assert!(k.is_durable(1) && k.is_durable(2) && !k.is_durable(3));
        assert_eq!(k.len(), 3);
        k.checkpoint_done();
        assert!(!k.is_durable(1) && k.is_empty());
        k.killed(10, [1]);
        k.synced(&[10]);
        k.stop();
        assert!(!k.is_durable(1) && k.is_empty(), "stopping forgets all");
        k.killed(10, [1]);
        k.synced(&[10]);
        assert!(!k.is_durable(1), "nothing is listed once stopped");
        k.checkpoint_done();
        k.killed(10, [1]);
        k.synced(&[10]);
        assert!(k.is_durable(1), "a checkpoint starts listing again");
    }

    #[test]
    fn past_the_bound_kills_are_not_listed() {
        let mut k = DurableKills::default();
        k.killed(1, 0..MAX_BLOCKS as u64 + 10);
        k.synced(&[1]);
        assert_eq!(k.len(), MAX_BLOCKS);
        assert!(!k.is_durable(MAX_BLOCKS as u64 + 5));
    }
}
