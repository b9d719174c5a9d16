//! Discarding freed segments: telling the device (a hole in an image file,
//! BLKDISCARD on a block device) that a segment holds nothing anyone will
//! read, so the host gets its space back and an SSD need not copy it.
//!
//! **When a segment may be discarded.** Exactly when the writer may reuse
//! it: once the checkpoint that records it free is durable. A segment is
//! freed (by the reclaimer, meta/reclaim.rs, or the cleaner, gc/) only if
//! no block of it is seen by the current file system, a snapshot or a
//! plain checkpoint still kept (the protection window, shrunk under space
//! pressure), and it holds no record of the recovery chain from either
//! superblock slot. It then waits in `SegTable::pending_free` until the
//! next checkpoint is flushed: before that, a crash recovers the previous
//! checkpoint, whose CPFILE may still list checkpoints (expired or given up
//! since) that see the segment, and whose roll-forward may read it. Once
//! the checkpoint is durable no checkpoint the user can mount needs it, and
//! roll-forward starts after that checkpoint, so the segment is as free as
//! one never written: the writer may overwrite it at any moment, and a
//! discard is no more than an overwrite with zeros. `end_checkpoint` hands
//! the segments over here at that very point (after the flush that makes
//! the checkpoint durable, in the I/O queue's order), and nothing else
//! discards a segment that is not free ([`SegTable::is_free`]: empty, not
//! reserved for a writer, not waiting for a checkpoint).
//!
//! **Modes** ([`DiscardMode`]): `off` discards nothing by itself (FITRIM
//! still does); `on` discards each checkpoint's freed segments right after
//! it; `batched` queues them and discards, as sorted runs of adjacent
//! segments, those that have waited [`DISCARD_BATCH_SECS`] since they were
//! freed, and the whole queue at unmount. A queued segment the writer took
//! meanwhile is not free any more and is skipped.
//!
//! **Why wait.** A discard of a segment the writer takes again soon buys
//! nothing and costs: the FTL of an SSD gains little from dropping pages
//! that are about to be written anyway, and the backing file of a loop
//! device gets a hole punched that the host must allocate again, with a
//! journal commit at the next flush into it. Under sustained overwrites
//! the cleaner frees segments that the writer takes again within seconds;
//! those are never discarded. Space freed and then left alone (deletes,
//! an idle mount) goes back to the device half a minute later.
//!
//! **FITRIM** ([`Store::trim`]) discards every free segment in a byte range,
//! whatever the mode, in runs of at least `minlen` bytes.

use crate::error::{Error, Result};
use crate::layout::BLOCK_BYTES;
use crate::meta::store::Store;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

/// What the file system discards by itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DiscardMode {
    /// Nothing; only FITRIM (`fstrim`, `lsfs trim`) discards.
    Off,
    /// Each checkpoint's freed segments, right after it.
    On,
    /// Freed segments in sorted runs, a batch at a time.
    #[default]
    Batched,
}

impl DiscardMode {
    pub const NAMES: &'static str = "off, on, batched";

    pub fn name(self) -> &'static str {
        match self {
            DiscardMode::Off => "off",
            DiscardMode::On => "on",
            DiscardMode::Batched => "batched",
        }
    }

    pub fn parse(s: &str) -> std::result::Result<DiscardMode, String> {
        match s {
            "off" => Ok(DiscardMode::Off),
            "on" => Ok(DiscardMode::On),
            "batched" => Ok(DiscardMode::Batched),
            _ => Err(format!(
                "unknown discard mode '{s}' (valid: {})",
                DiscardMode::NAMES
            )),
        }
    }
}

/// How long a freed segment must stay free before `batched` discards it,
/// in seconds.
pub const DISCARD_BATCH_SECS: u64 = 30;

/// Counters of the discards the file system asked for (`lsfs stats`).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct DiscardStats {
    pub mode: &'static str,
    /// Segments and bytes discarded (by the mode and by FITRIM), and the
    /// device requests they took (adjacent segments go as one).
    pub segments: u64,
    pub bytes: u64,
    pub requests: u64,
    /// Batches that discarded anything (`batched` mode).
    pub batches: u64,
    /// Segments freed and waiting for their batch.
    pub queued_segments: u64,
    /// Queued segments the writer took before their batch ran.
    pub skipped_reused: u64,
    /// FITRIM requests, and the bytes they discarded.
    pub trims: u64,
    pub trim_bytes: u64,
    /// Of the segments discarded, those the cleaner freed (on an object
    /// store, the DELETEs of its victims' objects).
    pub cleaned_segments: u64,
}

/// The discard queue of a store.
#[derive(Debug, Default)]
pub struct Discards {
    /// Segments durable as free and not yet discarded (`batched`), with
    /// when each was freed (`Clock::mono`).
    queued: BTreeMap<u64, Duration>,
    /// The same, in the order they were freed, so that a tick looks only
    /// at those due (a large device may queue many). An entry whose time
    /// is not `queued`'s is stale: its segment was trimmed, or taken and
    /// freed again since.
    order: VecDeque<(Duration, u64)>,
    /// Segments the cleaner freed that are not discarded yet (nor taken
    /// by the writer, nor left alone with discard off).
    cleaned: BTreeSet<u64>,
    stats: DiscardStats,
}

/// Sorted segment numbers as runs of adjacent ones: (first, count).
pub(crate) fn runs(segs: impl IntoIterator<Item = u64>) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for s in segs {
        match out.last_mut() {
            Some((first, n)) if *first + *n == s => *n += 1,
            Some((first, n)) => {
                assert!(
                    s > *first + *n,
                    "segments to discard are sorted and distinct"
                );
                out.push((s, 1));
            }
            None => out.push((s, 1)),
        }
    }
    out
}

impl Store {
    pub fn discard_stats(&self) -> DiscardStats {
        DiscardStats {
            mode: self.config.discard.name(),
            queued_segments: self.discards.queued.len() as u64,
            ..self.discards.stats.clone()
        }
    }

    /// The segments waiting to be discarded (`batched`), in order.
    pub fn discard_queue(&self) -> BTreeSet<u64> {
        self.discards.queued.keys().copied().collect()
    }

    /// The cleaner freed segment `seg` (it becomes free at a checkpoint):
    /// its discard is counted as the cleaner's.
    pub(crate) fn note_cleaned(&mut self, seg: u64) {
        self.discards.cleaned.insert(seg);
    }

    /// The segments `freed` became free with a checkpoint that is now
    /// durable (see the module's docs): discard them or queue them. A
    /// discard that cannot be queued (the device failed) is only logged:
    /// the checkpoint is done, and the next write will meet the failure.
    pub(crate) fn segments_freed_durably(&mut self, freed: BTreeSet<u64>) {
        if let Err(e) = self.discard_freed(freed) {
            tracing::warn!("discarding freed segments: {e}");
        }
    }

    fn discard_freed(&mut self, freed: BTreeSet<u64>) -> Result<()> {
        for &s in &freed {
            assert!(
                self.segs.is_free(s),
                "segment {s} freed by a durable checkpoint is not free: {:?}",
                self.segs.usage[s as usize]
            );
        }
        if freed.is_empty() || self.config.read_only {
            return Ok(());
        }
        match self.config.discard {
            DiscardMode::Off => {
                // Never discarded: the writer may take them at once.
                for s in &freed {
                    self.discards.cleaned.remove(s);
                }
                Ok(())
            }
            DiscardMode::On => self.discard_segments(freed).map(|_| ()),
            DiscardMode::Batched => {
                let now = self.clock().mono();
                for s in freed {
                    self.discards.queued.insert(s, now);
                    self.discards.order.push_back((now, s));
                }
                Ok(())
            }
        }
    }

    /// Discard the queued segments that have stayed free for
    /// [`DISCARD_BATCH_SECS`], and forget those the writer took meanwhile
    /// (the mount's periodic work calls this).
    pub fn discard_batch_if_due(&mut self) -> Result<()> {
        self.discard_queued(false).map(|_| ())
    }

    /// Discard every queued segment still free (at unmount). Returns the
    /// bytes.
    pub fn discard_batch(&mut self) -> Result<u64> {
        self.discard_queued(true)
    }

    /// Discard the queued segments still free that have waited
    /// [`DISCARD_BATCH_SECS`] (`all`: every one); drop those the writer
    /// took. Returns the bytes.
    fn discard_queued(&mut self, all: bool) -> Result<u64> {
        let now = self.clock().mono();
        let settled = Duration::from_secs(DISCARD_BATCH_SECS);
        let mut ripe = BTreeSet::new();
        while let Some(&(at, s)) = self.discards.order.front() {
            if !all && now.saturating_sub(at) < settled {
                break;
            }
            self.discards.order.pop_front();
            if self.discards.queued.get(&s) != Some(&at) {
                continue;
            }
            self.discards.queued.remove(&s);
            if self.segs.is_free(s) {
                ripe.insert(s);
            } else {
                self.discards.stats.skipped_reused += 1;
                self.discards.cleaned.remove(&s);
            }
        }
        assert!(
            !all || self.discards.queued.is_empty(),
            "queued segments missing from the order of freeing"
        );
        if ripe.is_empty() {
            return Ok(0);
        }
        self.discards.stats.batches += 1;
        self.discard_segments(ripe)
    }

    /// Discard the whole segments `segs` (each free), adjacent ones as one
    /// request. Returns the bytes.
    fn discard_segments(&mut self, segs: BTreeSet<u64>) -> Result<u64> {
        let seg_bytes = self.geo.segment_blocks as u64 * BLOCK_BYTES as u64;
        let mut bytes = 0;
        for (first, n) in runs(segs) {
            assert!(
                (first..first + n).all(|s| self.segs.is_free(s)),
                "discarding segments {first}..{} of which one is not free",
                first + n
            );
            let at = self.geo.byte_offset(self.geo.segment_start(first));
            self.dev.discard(at, n * seg_bytes)?;
            bytes += n * seg_bytes;
            for s in first..first + n {
                if self.discards.cleaned.remove(&s) {
                    self.discards.stats.cleaned_segments += 1;
                }
            }
            self.discards.stats.segments += n;
            self.discards.stats.requests += 1;
        }
        self.discards.stats.bytes += bytes;
        Ok(bytes)
    }

    /// FITRIM: discard every free segment that lies in the `len` bytes at
    /// byte `start` of the device, in runs of adjacent free segments of at
    /// least `minlen` bytes (`struct fstrim_range`). Returns the bytes
    /// discarded, which `fstrim -v` reports. Segments are discarded whole:
    /// a segment partly in the range is left alone.
    pub fn trim(&mut self, start: u64, len: u64, minlen: u64) -> Result<u64> {
        if self.config.read_only {
            return Err(Error::Errno(lsfs_vfs::Errno::ROFS));
        }
        let seg_bytes = self.geo.segment_blocks as u64 * BLOCK_BYTES as u64;
        let first_byte = self.geo.byte_offset(self.geo.segment_start(0));
        let end = start.saturating_add(len);
        // Segments wholly inside [start, end).
        let lo = start.saturating_sub(first_byte).div_ceil(seg_bytes);
        let hi = (end.saturating_sub(first_byte) / seg_bytes).min(self.segs.nsegments());
        let free = (lo..hi).filter(|&s| self.segs.is_free(s));
        let mut bytes = 0;
        for (first, n) in runs(free) {
            if n * seg_bytes < minlen {
                continue;
            }
            let run: BTreeSet<u64> = (first..first + n).collect();
            for s in &run {
                self.discards.queued.remove(s);
            }
            bytes += self.discard_segments(run)?;
        }
        self.discards.stats.trims += 1;
        self.discards.stats.trim_bytes += bytes;
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjacent_segments_make_one_run() {
        assert_eq!(runs([]), vec![]);
        assert_eq!(runs([4]), vec![(4, 1)]);
        assert_eq!(
            runs([0, 1, 2, 5, 7, 8, 100]),
            vec![(0, 3), (5, 1), (7, 2), (100, 1)]
        );
    }

    #[test]
    fn modes_are_read_by_name() {
        for m in [DiscardMode::Off, DiscardMode::On, DiscardMode::Batched] {
            assert_eq!(DiscardMode::parse(m.name()), Ok(m));
        }
        let e = DiscardMode::parse("always").unwrap_err();
        assert!(e.contains("off, on, batched"), "{e}");
    }
}
