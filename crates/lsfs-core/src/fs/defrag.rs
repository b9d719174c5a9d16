//! Defragmentation (Janda's compaction, for one file at a time): a file
//! rewritten at random has its blocks scattered over the log, one physical
//! run per rewrite, and a sequential read of it seeks (or, on flash, makes
//! small requests) at every run. [`Lsfs::defrag_file`] lays it out again
//! in file order.
//!
//! It moves blocks the way the cleaner does (`gc/relocate.rs`): a block
//! keeps its virtual block number, only its DAT entry changes, so no file
//! map is rewritten, and every checkpoint and snapshot that sees the block
//! sees it at its new place (they keep sharing it; nothing is copied for
//! them). The moved blocks are dirty in the cache with their owner (file,
//! offset), and the segment constructor writes user data in (inode,
//! offset) order, so each batch lands as one run per stream. Their old
//! copies die in their segments, which the cleaner then frees cheaply.
//!
//! Each batch ends with a checkpoint under the same lock hold, so the new
//! places are durable before anything can reuse the old ones: a crash in
//! the middle leads back to a checkpoint whose DAT points at copies that
//! are still there.

use super::file;
use super::Lsfs;
use crate::cache::Owner;
use crate::log::record::BlockKind;
use lsfs_vfs::{Errno, FileKind, VfsResult};

/// Blocks moved per batch at most (16 MiB; a quarter of the cache if that
/// is less): each batch is one checkpoint.
pub const DEFRAG_BATCH_BLOCKS: usize = 4096;

/// What [`Lsfs::defrag_file`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Defrag {
    /// Blocks of data the file maps.
    pub blocks: u64,
    /// Physical runs of those blocks in file order, before and after (1 is
    /// perfectly contiguous; each hole in the file starts a run too).
    pub runs_before: u64,
    pub runs_after: u64,
    /// Blocks moved (0 if the file was contiguous enough already).
    pub moved: u64,
}

impl Lsfs {
    /// Lay regular file `ino` out again in file order if it is fragmented
    /// (in more than twice as many physical runs as the segments it would
    /// fill), or always with `force`. Directories and other files are left
    /// as they are.
    pub fn defrag_file(&mut self, ino: u64, force: bool) -> VfsResult<Defrag> {
        self.mutable()?;
        let i = self.get(ino)?;
        if i.kind() != FileKind::File {
            return Ok(Defrag::default());
        }
        // Pending atomic writes are not in the map yet; a commit would
        // race the batches' checkpoints.
        if self.atomic.contains(ino) {
            return Err(Errno::BUSY);
        }
        let mapped = file::mapped_blocks(&mut self.store, &i)?;
        let runs_before = self.physical_runs(&mapped)?;
        let mut rep = Defrag {
            blocks: mapped.len() as u64,
            runs_before,
            runs_after: runs_before,
            moved: 0,
        };
        // The best layout is a run per segment the file fills (each starts
        // with a summary); twice that is still good enough to leave.
        let best = rep.blocks / self.store.geo().segment_blocks as u64 + 1;
        let fragmented = runs_before > 2 * best;
        if mapped.is_empty() || !(force || fragmented) {
            return Ok(rep);
        }
        for batch in mapped.chunks(self.defrag_batch_blocks()) {
            rep.moved += self.move_in_file_order(ino, batch)?;
        }
        rep.runs_after = self.physical_runs(&mapped)?;
        Ok(rep)
    }

    /// Blocks moved per batch: a batch is dirty in the cache until its
    /// checkpoint, so a quarter of the cache at most, as writes keep to.
    pub(super) fn defrag_batch_blocks(&self) -> usize {
        let cache = self.store.cache().capacity_blocks();
        (cache / 4).clamp(64, DEFRAG_BATCH_BLOCKS)
    }

    /// Move `batch` (file block, virtual block of file `ino`, in file
    /// order, read under this lock hold) to new places in that order, then
    /// checkpoint. Returns the blocks moved.
    pub(super) fn move_in_file_order(&mut self, ino: u64, batch: &[(u64, u64)]) -> VfsResult<u64> {
        self.reserve(batch.len() as u64)?;
        let now = self.store.now();
        let mut moved = 0;
        for &(fb, v) in batch {
            // Read now, not with the caller's runs: `reserve` may have
            // cleaned, moving blocks of this very file.
            let e = self.store.dat_get(v)?;
            if e.pblock == 0 {
                // Not placed yet: the next checkpoint writes it in
                // order anyway.
                continue;
            }
            let Some(seg) = self.store.geo().segment_of(e.pblock) else {
                continue;
            };
            let owner = Owner {
                ino,
                offset: fb,
                kind: BlockKind::Data,
            };
            self.store.vmove(v, e, owner, e.pblock, None)?;
            self.store.kill_live(seg, false, now)?;
            moved += 1;
        }
        self.checkpoint_for("defrag")?;
        Ok(moved)
    }

    /// How many runs of consecutive physical blocks `mapped` (file block,
    /// virtual block, in file order) is laid out in.
    pub(super) fn physical_runs(&mut self, mapped: &[(u64, u64)]) -> VfsResult<u64> {
        let mut runs = 0;
        let mut prev: Option<(u64, u64)> = None;
        for &(fb, v) in mapped {
            let p = self.store.dat_get(v)?.pblock;
            let continues = prev.is_some_and(|(pfb, pp)| fb == pfb + 1 && p != 0 && p == pp + 1);
            runs += u64::from(!continues);
            prev = Some((fb, p));
        }
        Ok(runs)
    }
}
