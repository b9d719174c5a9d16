//! FITRIM on the mounted file system (`fstrim`, `lsfs trim`): first make
//! free what can be freed without copying, then discard the free segments
//! in the range (meta/discard.rs says which may be discarded, and when).

use super::Lsfs;
use crate::error::{Error, Result};
use lsfs_vfs::Errno;

/// Checkpoints a trim writes at most to free segments: each frees at most
/// 32 (meta/reclaim.rs), so 64 reach 2,048 segments, 4 GiB of 2 MiB ones.
/// What is left is freed by later checkpoints and found by the next trim.
const TRIM_CHECKPOINTS_MAX: usize = 64;

impl Lsfs {
    /// FITRIM: free what deleted files still hold (`delete.rs`: the
    /// background would, later), then checkpoint until the reclaimer frees
    /// nothing more (space held only by dead blocks becomes free segments;
    /// space a kept checkpoint or snapshot still sees stays, as it must),
    /// then discard every free segment lying wholly in the `len` bytes at
    /// `start`, in runs of at least `minlen` bytes. Returns the bytes.
    pub fn trim_free_space(&mut self, start: u64, len: u64, minlen: u64) -> Result<u64> {
        if self.view.is_some() || self.store.opened_read_only() {
            return Err(Error::Errno(Errno::ROFS));
        }
        self.store.writable()?;
        self.reclaim_all()?;
        for _ in 0..TRIM_CHECKPOINTS_MAX {
            let before = self.store.stats().segments_reclaimed;
            self.checkpoint_for("trim")?;
            if self.store.stats().segments_reclaimed == before {
                break;
            }
        }
        self.store.trim(start, len, minlen)
    }
}
