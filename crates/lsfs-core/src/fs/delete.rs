//! Deleting files in the background (Space Maker's O(1) deletes).
//!
//! Freeing a file's blocks costs one DAT change per block, so a large file
//! deleted in the foreground held the engine for as long as its size
//! demanded. Now, when a regular file's last link and last reference go,
//! a file of [`FOREGROUND_DELETE_MAX_BLOCKS`] blocks or more is only put
//! (or left) in the orphan directory and queued: the unlink, or the last
//! close, returns in time independent of the size. [`Lsfs::reclaim_step`]
//! then frees the queued files' blocks from their ends, a bounded number at
//! a time (`tick` does one step; the mount's ticker does more while any are
//! queued), and deletes each inode and its orphan entry once it holds no
//! block.
//!
//! The orphan directory is the persisted work list: no format changes. An
//! orphan whose file is being freed is an inode with no links, exactly as
//! one unlinked while open, and a partly freed one is that file truncated
//! (its size drops with its blocks), so fsck and every older reader see an
//! ordinary orphan. Both kinds are freed the same way after a crash or an
//! unmount: the mount queues every orphan (after deleting small ones at
//! once) and returns; the steps go on afterwards. Steps are not logged for
//! fsync: a crash goes back to the last checkpoint's state of the file,
//! still in the orphan directory, and the steps after it are done again.
//!
//! Until a step frees them, the blocks stay counted live in their segments,
//! so `statfs` does not report them free (a snapshot may hold them, and
//! freeing them writes DAT blocks); `lsfs stats` shows them. A write short
//! of space frees every queued block first (`reserve`); below the
//! cleaner's low-water mark a write does a step instead of cleaning, and
//! background cleaning waits for the queue: a pass would copy blocks about
//! to die.
//!
//! Truncating a large file (an `O_TRUNC` open, `> file`, `truncate -s`)
//! is deleted the same way: the blocks past the new end and their part of
//! the map move to a new inode with no link, queued as above, and the file
//! is left at its new size at once ([`Lsfs::truncate_later`]). Only a
//! tail of fewer than [`FOREGROUND_DELETE_MAX_BLOCKS`] blocks is freed in
//! the foreground.
//!
//! A queued inode is gone for every caller but this module: it answers
//! ENOENT, as a deleted one does.

use super::inode::{Format, Inode};
use super::{dir, file, tail, Lsfs};
use crate::error::{Error, Result};
use crate::layout::{MAX_INO, ORPHAN_INO};
use lsfs_vfs::{Errno, FileKind};
use std::collections::BTreeMap;

/// Regular files with fewer blocks than this (256 KiB) are freed at once,
/// in the foreground: that costs about as much as queueing them (an orphan
/// entry in, later out) and keeps their space immediately free.
pub const FOREGROUND_DELETE_MAX_BLOCKS: u64 = 64;

/// Blocks one step frees at most: about 32 DAT blocks changed, a few
/// milliseconds under the engine's lock.
pub const RECLAIM_BLOCKS_PER_STEP: u64 = 4096;

/// Files queued for their blocks to be freed.
#[derive(Debug, Default)]
pub struct Deletes {
    /// Inode -> its data blocks still mapped.
    queue: BTreeMap<u64, u64>,
    /// The sum of `queue`'s values.
    blocks: u64,
    pub stats: DeleteStats,
}

/// What deletes did since mount.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct DeleteStats {
    /// Files deleted whole in the foreground (no blocks, or fewer than
    /// [`FOREGROUND_DELETE_MAX_BLOCKS`], or not regular files).
    pub foreground_files: u64,
    /// Files queued for the background (at mount too).
    pub queued_files: u64,
    /// Large files truncated to zero whose blocks went to the background
    /// (each queued as a file of its own).
    pub truncated_files: u64,
    /// Files the background steps finished.
    pub reclaimed_files: u64,
    /// Blocks the background steps freed.
    pub reclaimed_blocks: u64,
    /// Steps that freed something.
    pub steps: u64,
}

/// Files still being freed in the background, and their blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReclaimStatus {
    pub files: u64,
    pub blocks: u64,
}

/// What one [`Lsfs::reclaim_step`] did, and what is left.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReclaimProgress {
    pub freed_blocks: u64,
    pub files_done: u64,
    pub left: ReclaimStatus,
}

impl Deletes {
    pub fn contains(&self, ino: u64) -> bool {
        self.queue.contains_key(&ino)
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    pub fn status(&self) -> ReclaimStatus {
        ReclaimStatus {
            files: self.queue.len() as u64,
            blocks: self.blocks,
        }
    }

    /// Queued inodes, lowest first.
    pub fn inodes(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.queue.iter().map(|(&i, &b)| (i, b))
    }

    /// Set `ino`'s blocks left (queueing it if it was not).
    fn set(&mut self, ino: u64, blocks: u64) {
        let old = self.queue.insert(ino, blocks).unwrap_or(0);
        self.blocks = self.blocks - old + blocks;
    }

    fn remove(&mut self, ino: u64) -> bool {
        match self.queue.remove(&ino) {
            Some(b) => {
                self.blocks -= b;
                true
            }
            None => false,
        }
    }

    fn first(&self) -> Option<u64> {
        self.queue.keys().next().copied()
    }
}

impl Lsfs {
    /// An inode with no link and no reference left: delete it now if that
    /// is cheap, else queue it, in the orphan directory, for the background.
    pub(super) fn delete_inode(&mut self, ino: u64) -> Result<()> {
        if self.deletes.contains(ino) {
            return Ok(());
        }
        let i = self.get(ino)?;
        if i.kind() != FileKind::File || i.blocks < FOREGROUND_DELETE_MAX_BLOCKS {
            self.deletes.stats.foreground_files += 1;
            return self.destroy_inode(ino);
        }
        self.add_orphan(ino)?;
        // Nobody can commit them any more.
        self.atomic.drop_file(ino);
        self.deletes.set(ino, i.blocks);
        self.deletes.stats.queued_files += 1;
        Ok(())
    }

    /// Whether truncating `i` to `size` may go to the background
    /// ([`Lsfs::truncate_later`]): a shrinking regular file with a map, of
    /// [`FOREGROUND_DELETE_MAX_BLOCKS`] blocks or more, on a writable mount.
    pub(super) fn truncates_later(&self, i: &Inode, size: u64) -> bool {
        self.view.is_none()
            && i.kind() == FileKind::File
            && i.format != Format::InlineData
            && size < i.size
            && i.blocks >= FOREGROUND_DELETE_MAX_BLOCKS
    }

    /// Truncate file `i` to `size` in time independent of what it frees
    /// (an `O_TRUNC` open, `> file`, `truncate -s`): the blocks past the
    /// new end, with their part of the map, move as they are to a new
    /// inode with no link, which is queued in the orphan directory as a
    /// deleted file is ([`super::tail::move_tail`]: the map is cut along
    /// one path; the tail's map items are read once to count its blocks,
    /// and no DAT entry changes). The caller then truncates `i` as usual,
    /// which only zeroes the rest of the new last block.
    ///
    /// The caller logs the truncate as any other: after a crash before the
    /// next checkpoint, recovery replays it on the checkpoint's file, which
    /// still holds the blocks, and frees them there (the new inode was never
    /// durable); after a checkpoint, the new inode is an orphan like any
    /// other and the next mount queues it. Blocks are owned by virtual
    /// block, so moving the map moves nothing on the device.
    ///
    /// Returns false, having changed nothing, when the tail holds fewer
    /// than [`FOREGROUND_DELETE_MAX_BLOCKS`] blocks or no inode number is
    /// left for the new inode (the caller truncates in the foreground).
    pub(super) fn truncate_later(&mut self, i: &mut Inode, size: u64) -> Result<bool> {
        debug_assert!(self.truncates_later(i, size));
        let at = size.div_ceil(file::BLOCK);
        if size > 0 && tail::blocks_from(&mut self.store, i, at)? < FOREGROUND_DELETE_MAX_BLOCKS {
            return Ok(false);
        }
        let Some(ino) = self.store.take_ino(MAX_INO) else {
            return Ok(false);
        };
        let now = self.store.clock().now();
        let mut o = Inode::new(ino, libc::S_IFREG | 0o600, i.uid, i.gid, now);
        o.nlink = 0;
        o.size = i.size;
        if size == 0 {
            // The whole map goes: no need to cut it.
            o.blocks = std::mem::take(&mut i.blocks);
            o.format = i.format;
            o.map_root = std::mem::take(&mut i.map_root);
            o.area = std::mem::take(&mut i.area);
            i.size = 0;
            i.format = Format::InlineData;
        } else {
            tail::move_tail(&mut self.store, i, at, &mut o)?;
        }
        self.store.inode_created();
        let blocks = o.blocks;
        self.put(o);
        self.add_orphan(ino)?;
        self.deletes.set(ino, blocks);
        self.deletes.stats.queued_files += 1;
        self.deletes.stats.truncated_files += 1;
        Ok(true)
    }

    /// At mount: every orphan is deleted, now or in the background (nothing
    /// holds any of them open any more).
    pub(super) fn delete_orphans(&mut self) -> Result<()> {
        let orphans = self.get(ORPHAN_INO)?;
        let list = dir::list_after(&mut self.store, &orphans, 0, usize::MAX)?;
        for (_, ent) in list {
            self.delete_inode(ent.ino)?;
        }
        Ok(())
    }

    /// Files whose blocks are still being freed in the background.
    pub fn reclaim_status(&self) -> ReclaimStatus {
        self.deletes.status()
    }

    /// Whether [`Lsfs::reclaim_step`] has work it can do: files queued,
    /// and the mount still writable (after a device error nothing more is
    /// freed; the next mount goes on).
    pub fn reclaim_pending(&self) -> bool {
        !self.deletes.is_empty()
            && self.view.is_none()
            && !self.read_errors.tripped()
            && self.store.writable().is_ok()
    }

    /// What deletes did since mount.
    pub fn delete_stats(&self) -> DeleteStats {
        self.deletes.stats
    }

    /// Free up to `max_blocks` blocks of files deleted in the background
    /// (at least one file's worth of work when a file has none left),
    /// deleting each file once it is empty. The changes reach the disk with
    /// the next checkpoint, as any others; until then a crash only undoes
    /// them, the files staying queued. A checkpoint is written in between
    /// when half the cache is dirty, so any `max_blocks` is safe.
    pub fn reclaim_step(&mut self, max_blocks: u64) -> Result<ReclaimProgress> {
        let mut p = ReclaimProgress::default();
        if self.deletes.is_empty() || self.view.is_some() {
            p.left = self.deletes.status();
            return Ok(p);
        }
        self.stop_after_read_error();
        self.store.writable()?;
        let mut budget = max_blocks.max(1);
        while budget > 0 {
            let Some(ino) = self.deletes.first() else {
                break;
            };
            let mut i = self.get_queued(ino)?;
            let chunk = budget.min(RECLAIM_BLOCKS_PER_STEP);
            let freed = file::drop_tail(&mut self.store, &mut i, chunk)?;
            p.freed_blocks += freed;
            self.deletes.stats.reclaimed_blocks += freed;
            // An empty file costs a unit too: a step stays bounded however
            // many there are.
            budget = budget.saturating_sub(freed.max(1));
            if freed < chunk {
                if i.blocks != 0 {
                    let err = Error::corrupt(format!(
                        "inode {ino} counts {} blocks but maps none",
                        i.blocks
                    ));
                    self.store.fail(&err);
                    return Err(err);
                }
                self.put(i);
                self.destroy_inode(ino)?;
                p.files_done += 1;
                self.deletes.stats.reclaimed_files += 1;
            } else {
                self.deletes.set(ino, i.blocks);
                self.put(i);
            }
            if self.store.pending_blocks() * 2 > self.store.cache().capacity_blocks() {
                self.checkpoint_for("cache")?;
            }
        }
        if p.freed_blocks > 0 || p.files_done > 0 {
            self.deletes.stats.steps += 1;
        }
        p.left = self.deletes.status();
        Ok(p)
    }

    /// Free every queued file's blocks now.
    pub fn reclaim_all(&mut self) -> Result<()> {
        while !self.deletes.is_empty() {
            self.reclaim_step(u64::MAX)?;
        }
        Ok(())
    }

    /// A queued inode, which [`Lsfs::get`] no longer gives.
    fn get_queued(&mut self, ino: u64) -> Result<super::inode::Inode> {
        debug_assert!(self.deletes.contains(ino));
        Ok(self.load_any(ino)?.inode.clone())
    }

    /// Forget `ino` as queued (it is being destroyed).
    pub(super) fn dequeue_delete(&mut self, ino: u64) {
        self.deletes.remove(ino);
    }

    /// The queue agrees with the inodes: each queued one is an orphan with
    /// no links and the blocks the queue says. Panics if not (invariant
    /// checks after checkpoints, tests). Changes nothing, caches included:
    /// inodes not in the inode cache are read past it, blocks as
    /// [`crate::meta::store::Store::observe`] reads them.
    pub fn check_delete_queue(&mut self) {
        let queued: Vec<(u64, u64)> = self.deletes.inodes().collect();
        let orphans = self.inode_as_is(ORPHAN_INO).expect("orphan directory");
        let mut sum = 0;
        for (ino, blocks) in queued {
            let i = self.inode_as_is(ino).expect("queued inode");
            assert_eq!(i.nlink, 0, "queued inode {ino} has links");
            assert_eq!(
                i.blocks, blocks,
                "queued inode {ino}: the queue counts {blocks} blocks, the inode {}",
                i.blocks
            );
            let ent = self
                .store
                .observe(|s| dir::lookup(s, &orphans, &ino.to_le_bytes()))
                .expect("orphan directory lookup");
            assert!(
                ent.is_some_and(|e| e.ino == ino),
                "queued inode {ino} is no orphan"
            );
            sum += blocks;
        }
        assert_eq!(
            sum,
            self.deletes.status().blocks,
            "blocks queued for deletion"
        );
    }

    /// Inode `ino` as the inode cache has it, or else as the IFILE does,
    /// without loading it into either cache.
    fn inode_as_is(&mut self, ino: u64) -> Result<super::inode::Inode> {
        if let Some(c) = self.inodes.get(&ino) {
            return Ok(c.inode.clone());
        }
        let root = self.ifile_root();
        let img = self
            .store
            .observe(|s| s.inode_read(root, ino))?
            .ok_or(Error::Errno(Errno::NOENT))?;
        super::inode::Inode::decode(&img, ino)
    }
}

/// ENOENT for a queued inode (see the module comment).
pub(super) fn queued_is_gone(d: &Deletes, ino: u64) -> Result<()> {
    if d.contains(ino) {
        return Err(Error::Errno(Errno::NOENT));
    }
    Ok(())
}
