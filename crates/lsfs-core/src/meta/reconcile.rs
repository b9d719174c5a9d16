//! O(1) snapshot changes with background reconciliation.
//!
//! A segment's `nsnapshot` counts its dead blocks that some snapshot still
//! sees. Promoting or demoting a checkpoint changes which dead blocks that
//! is, anywhere on the device; finding them means scanning the DAT. Rather
//! than scan in the foreground (Rohner's algorithms all do, in some form),
//! the change is queued and applied to the counters by a background scan of
//! the DAT in virtual-block order, a bounded number of DAT blocks at a time.
//!
//! The counters stay exact *relative to a known snapshot set per entry*:
//! an entry below the cursor is counted with the head change applied, an
//! entry at or above it without it, and no later queued change is applied
//! to any entry. Every place that adjusts `nsnapshot` (deaths, moves,
//! placement, reclaim, fsck) asks [`Reconcile::counted`] (through
//! `Store::snapshot_counted`), so the counters agree with a recount
//! whatever the progress. When the queue is empty, the counted set is the
//! snapshot set and the counts are exact.
//!
//! The queue and the cursor are written in every super root, with the
//! counters of the same checkpoint, so progress survives remount and crash.
//! Reclaiming stays safe meanwhile: it decides from the real snapshot set,
//! and an overcount only delays it.
//!
//! [`Reconcile`] owns the queue, the cursor and the counted sets; the store
//! drives it (meta/snapshots.rs) and this module knows nothing of the store:
//! it is told the snapshot set and the DAT entries, and says what to count.

use crate::meta::dat_entry::{DatEntry, CNO_MAX, DAT_PER_BLOCK};

/// Queued snapshot changes at most; one more drains the oldest in the
/// foreground first (it bounds the super root's size, see FORMAT.md).
pub const RECONCILE_QUEUE_MAX: usize = 128;

/// A queued snapshot change (its format is the super root's).
pub use crate::log::super_root::SnapChange;

/// The reconciliation queue, its cursor and the two counted sets it implies.
#[derive(Clone, Debug, Default)]
pub struct Reconcile {
    queue: Vec<SnapChange>,
    /// Entries below this virtual block have the head change applied.
    cursor: u64,
    /// Snapshot set counted below the cursor, and at or above it (sorted).
    counted_lo: Vec<u64>,
    counted_hi: Vec<u64>,
}

/// Whether a snapshot of the sorted set `snaps` lies in `[start, end)`.
pub(crate) fn covered(snaps: &[u64], start: u64, end: u64) -> bool {
    let i = snaps.partition_point(|&s| s < start);
    snaps.get(i).is_some_and(|&s| s < end)
}

fn set(snaps: &mut Vec<u64>, cno: u64, on: bool) {
    match (snaps.binary_search(&cno), on) {
        (Err(i), true) => snaps.insert(i, cno),
        (Ok(i), false) => {
            snaps.remove(i);
        }
        _ => {}
    }
}

impl Reconcile {
    /// The state a super root recorded (the counted sets follow with
    /// [`Reconcile::refresh`], once the snapshot set is known).
    pub(crate) fn restore(queue: Vec<SnapChange>, cursor: u64) -> Reconcile {
        Reconcile {
            queue,
            cursor,
            ..Default::default()
        }
    }

    /// Recompute the counted sets from the current snapshot set: undo the
    /// queued changes newest first, then apply the head below the cursor.
    pub(crate) fn refresh(&mut self, snapshots: &[u64]) {
        let mut base = snapshots.to_vec();
        for c in self.queue.iter().rev() {
            set(&mut base, c.cno, !c.on);
        }
        self.counted_hi = base.clone();
        if let Some(h) = self.queue.first() {
            set(&mut base, h.cno, h.on);
        }
        self.counted_lo = base;
    }

    pub fn is_settled(&self) -> bool {
        self.queue.is_empty()
    }

    /// The changes not yet applied everywhere, oldest first.
    pub fn queue(&self) -> &[SnapChange] {
        &self.queue
    }

    /// How far the head change has been applied (a virtual block number).
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// Whether the counters count dead block `v` (alive in `[start, end)`)
    /// in `nsnapshot`, `snapshots` being the current snapshot set.
    pub fn counted(&self, snapshots: &[u64], v: u64, start: u64, end: u64) -> bool {
        if self.queue.is_empty() {
            return covered(snapshots, start, end);
        }
        let set = if v < self.cursor {
            &self.counted_lo
        } else {
            &self.counted_hi
        };
        covered(set, start, end)
    }

    /// Whether one more change must first drain the oldest.
    pub(crate) fn is_full(&self) -> bool {
        self.queue.len() >= RECONCILE_QUEUE_MAX
    }

    /// Queue a change; `snapshots` already includes it.
    pub(crate) fn push(&mut self, change: SnapChange, snapshots: &[u64]) {
        self.queue.push(change);
        self.refresh(snapshots);
    }

    /// The DAT block the head change is to be applied from next, if a
    /// change is queued.
    pub(crate) fn next_dat_block(&self) -> Option<u64> {
        (!self.queue.is_empty()).then_some(self.cursor / DAT_PER_BLOCK)
    }

    /// The head change is applied everywhere: the next one starts at 0.
    pub(crate) fn finish_head(&mut self, snapshots: &[u64]) {
        assert!(!self.queue.is_empty(), "no snapshot change to finish");
        self.queue.remove(0);
        self.cursor = 0;
        self.refresh(snapshots);
    }

    /// How the head change moves the count of entry `v` (`e`) of the DAT
    /// block being scanned: +1, -1 or 0 to its segment's `nsnapshot`, or
    /// `None` when the entry is not counted (below the cursor already,
    /// free, live, or moved and not placed yet: placement counts it by the
    /// set in force then).
    pub(crate) fn head_delta(&self, v: u64, e: &DatEntry) -> Option<i64> {
        if v < self.cursor || e.is_free() || e.end == CNO_MAX || e.pblock == 0 {
            return None;
        }
        Some(
            covered(&self.counted_lo, e.start, e.end) as i64
                - covered(&self.counted_hi, e.start, e.end) as i64,
        )
    }

    /// The head change is applied up to DAT block `idx` included.
    pub(crate) fn advance_past(&mut self, idx: u64) {
        let next = (idx + 1) * DAT_PER_BLOCK;
        debug_assert!(next > self.cursor, "the reconcile cursor moves forward");
        self.cursor = next;
    }
}
