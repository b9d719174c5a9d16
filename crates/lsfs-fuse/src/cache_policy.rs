//! How long the kernel may keep the names and attributes it is told.
//!
//! lsfs is the only writer of its image and every change goes through the
//! kernel, which updates or drops what the change makes stale; so the
//! kernel may keep entries (negative ones too) and attributes for a long
//! time, and never has to ask again whether they still hold. What changes
//! behind its back (the snapshot directory, when the control socket takes or
//! drops a snapshot) is invalidated explicitly (`KernelCache`). What cannot
//! change at all (snapshots, a read-only mount of a checkpoint) is kept
//! without expiry. A read-only mount that moves on to a writer's newer
//! checkpoints is the exception: at each move the inodes the kernel holds
//! are invalidated, but the names it knows cannot all be (the kernel does
//! not say which it keeps), so they are kept only briefly.

use std::time::Duration;

/// Entries and attributes of the live file system. Long, but finite: should
/// a change ever slip past the kernel, it heals within a day.
pub(crate) const LIVE: Duration = Duration::from_secs(24 * 3600);
/// What never changes. The kernel caps timeouts at its largest jiffies
/// offset; this stays clear of sign trouble in its 64-bit arithmetic.
pub(crate) const FOREVER: Duration = Duration::from_secs(u32::MAX as u64);
/// Names and attributes on a mount that moves on to newer checkpoints: how
/// long after a move a name may still lead where it led before.
pub(crate) const BRIEF: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug)]
pub(crate) struct CachePolicy {
    /// Nothing on this mount can change (mounted read-only).
    frozen: bool,
    /// The mount moves on to newer checkpoints (`MountOptions::moves_on`):
    /// nothing is kept long, frozen or not.
    moves_on: bool,
    /// Inodes that never change while the mount lives (snapshots).
    forever: Option<fn(u64) -> bool>,
}

impl CachePolicy {
    pub(crate) fn new(frozen: bool, moves_on: bool, forever: Option<fn(u64) -> bool>) -> Self {
        CachePolicy {
            frozen,
            moves_on,
            forever,
        }
    }

    /// How long the kernel may keep the attributes of `ino`, or the names
    /// in directory `ino` (found or not).
    pub(crate) fn ttl(&self, ino: u64) -> Duration {
        if self.moves_on {
            BRIEF
        } else if self.frozen || self.forever.is_some_and(|f| f(ino)) {
            FOREVER
        } else {
            LIVE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_and_frozen_mounts_are_kept_forever() {
        let snap = |ino: u64| ino >= 1 << 48;
        let p = CachePolicy::new(false, false, Some(snap));
        assert_eq!(p.ttl(5), LIVE);
        assert_eq!(p.ttl(1 << 48), FOREVER);
        assert_eq!(CachePolicy::new(true, false, None).ttl(5), FOREVER);
        assert_eq!(CachePolicy::new(false, false, None).ttl(1 << 50), LIVE);
    }

    #[test]
    fn a_mount_that_moves_on_keeps_nothing_for_long() {
        let snap = |ino: u64| ino >= 1 << 48;
        let p = CachePolicy::new(true, true, Some(snap));
        assert_eq!(p.ttl(5), BRIEF);
        assert_eq!(p.ttl(1 << 48), BRIEF);
    }
}
