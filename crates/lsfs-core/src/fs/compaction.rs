//! Compaction when idle (Janda): the cleaner's third choice, beside
//! cleaning and threading. A file rewritten at random lies scattered over
//! the log, and reading it in order costs a request (a seek, on a disk) per
//! run; `lsfs defrag` lays it out again on demand (fs/defrag.rs). This
//! does the same by itself, for the files that would gain from it, when
//! nothing else wants the device:
//!
//! * **which files**: those read in order for [`SEQ_READ_BYTES`] in a row
//!   since they last changed (a file nobody reads in order gains nothing
//!   from order, and rewriting it would only add writes);
//! * **when**: idle (no request that changed anything, and no read, for
//!   the cleaner's `idle_secs`), on AC power, with free space above the
//!   cleaner's high-water mark (else cleaning comes first, and compaction
//!   would take the space cleaning needs), and `compact_when_idle` on;
//! * **how much**: one batch of up to [`super::defrag::DEFRAG_BATCH_BLOCKS`]
//!   blocks in file order per tick (500 ms on a mount), moved only if that
//!   part of the file is fragmented (more than twice as many physical runs
//!   as segments it would fill), then a checkpoint, so a request that comes
//!   waits for one batch at most. The mapping is read afresh for each batch:
//!   the file may change between ticks.
//!
//! Nothing of this is persisted: after a remount, files qualify again by
//! being read.

use super::Lsfs;
use crate::error::Result;
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

/// Bytes a file must be read in order, in a row, to become a candidate.
pub const SEQ_READ_BYTES: u64 = 8 << 20;

/// Files whose reads are followed at once; more start the tally afresh.
const TRACKED_READS: usize = 256;

/// Candidates kept at most; more are dropped until some are done.
const MAX_CANDIDATES: usize = 1024;

/// Files remembered as looked at; past this the memory starts afresh (a
/// file forgotten is looked at again, a batch a tick, and left).
const MAX_SETTLED: usize = 65_536;

/// Inode numbers the state holds at most (`lsfs stats`' memory table).
pub const MAX_TRACKED: usize = TRACKED_READS + MAX_CANDIDATES + MAX_SETTLED;

/// Compaction's state (see the module comment).
#[derive(Debug, Default)]
pub struct Compaction {
    /// Inode -> (end of its last read, bytes read in order up to there).
    reads: HashMap<u64, (u64, u64)>,
    /// Files read in order enough since they last changed.
    candidates: BTreeSet<u64>,
    /// Files looked at since they last changed: not candidates again until
    /// a write.
    settled: BTreeSet<u64>,
    /// The file being compacted, and its next file block to look at.
    job: Option<(u64, u64)>,
    /// When the last read came (a `Clock::mono` reading).
    last_read: Duration,
    pub stats: CompactionStats,
}

/// What compaction did since mount (`lsfs stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CompactionStats {
    /// Files that became candidates by being read in order.
    pub candidates: u64,
    /// Files looked at through to their end.
    pub files_done: u64,
    /// Batches that were fragmented and moved, and their blocks.
    pub batches_moved: u64,
    pub blocks_moved: u64,
    /// Batches looked at and left as they were.
    pub batches_left: u64,
}

impl Compaction {
    /// A read of `len` bytes at `off` of file `ino` came at `now`.
    pub fn note_read(&mut self, ino: u64, off: u64, len: u64, now: Duration) {
        self.last_read = now;
        if len == 0 || self.settled.contains(&ino) || self.candidates.contains(&ino) {
            return;
        }
        if self.reads.len() >= TRACKED_READS && !self.reads.contains_key(&ino) {
            self.reads.clear();
        }
        let (end, run) = self.reads.get(&ino).copied().unwrap_or((0, 0));
        let run = if off == end { run + len } else { len };
        if run >= SEQ_READ_BYTES && self.candidates.len() < MAX_CANDIDATES {
            self.reads.remove(&ino);
            self.candidates.insert(ino);
            self.stats.candidates += 1;
        } else {
            self.reads.insert(ino, (off + len, run));
        }
    }

    /// File `ino` changed: it may be worth looking at again.
    pub fn note_change(&mut self, ino: u64) {
        if self.settled.remove(&ino) {
            self.reads.remove(&ino);
        }
    }

    /// File `ino` is gone.
    pub fn forget(&mut self, ino: u64) {
        self.reads.remove(&ino);
        self.candidates.remove(&ino);
        self.settled.remove(&ino);
        if self.job.is_some_and(|(i, _)| i == ino) {
            self.job = None;
        }
    }

    /// Inode numbers held now.
    pub fn tracked(&self) -> u64 {
        (self.reads.len() + self.candidates.len() + self.settled.len()) as u64
    }

    pub fn last_read(&self) -> Duration {
        self.last_read
    }

    /// The file and block to go on from: the current job, or the next
    /// candidate from its start.
    fn next(&mut self) -> Option<(u64, u64)> {
        if self.job.is_none() {
            let ino = self.candidates.pop_first()?;
            self.job = Some((ino, 0));
        }
        self.job
    }

    /// The job's file is done to its end (or gone).
    fn finish(&mut self, ino: u64) {
        self.job = None;
        self.stats.files_done += 1;
        if self.settled.len() >= MAX_SETTLED {
            self.settled.clear();
        }
        self.settled.insert(ino);
    }
}

impl Lsfs {
    /// What compaction did since mount.
    pub fn compaction_stats(&self) -> CompactionStats {
        self.compaction.stats
    }

    /// When the last read of a file came (a `Clock::mono` reading): reads
    /// do not count as activity for cleaning, but compaction waits for
    /// them too.
    pub(crate) fn compaction_last_read(&self) -> Duration {
        self.compaction.last_read()
    }

    /// One batch of compaction, if it has work (called by the cleaner's
    /// background step when idle with space to spare). Returns whether a
    /// batch was looked at.
    pub(crate) fn compact_step(&mut self) -> Result<bool> {
        let Some((ino, from)) = self.compaction.next() else {
            return Ok(false);
        };
        let Ok(i) = self.get(ino) else {
            self.compaction.forget(ino);
            return Ok(true);
        };
        let per_batch = self.defrag_batch_blocks();
        let batch = super::file::mapped_blocks_from(&mut self.store, &i, from, per_batch)?;
        let Some(&(last, _)) = batch.last() else {
            self.compaction.finish(ino);
            return Ok(true);
        };
        let runs = self.physical_runs(&batch)?;
        let best = batch.len() as u64 / self.store.geo().segment_blocks as u64 + 1;
        if runs > 2 * best && !self.atomic.contains(ino) {
            let moved = self.move_in_file_order(ino, &batch)?;
            self.compaction.stats.batches_moved += 1;
            self.compaction.stats.blocks_moved += moved;
        } else {
            self.compaction.stats.batches_left += 1;
        }
        self.compaction.job = Some((ino, last + 1));
        Ok(true)
    }
}
