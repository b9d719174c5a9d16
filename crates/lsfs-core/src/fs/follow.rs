//! A read-only view of a checkpoint that follows a writer elsewhere.
//!
//! Virtual block numbers, which the view's files and IFILE name, never
//! change while the checkpoint lives; where a block lies does, because
//! the writer's cleaner moves live blocks (a snapshot's too) and records
//! only the new place, in the DAT that every checkpoint shares. A view
//! opened before such a move holds the older DAT and, once the writer has
//! written the old segment again, the device refuses the read (an object
//! store's readers check the segment's first record, `BlockDevice::fix_view`).
//! The view then opens the storage again, with nothing cached, as of the
//! writer's newest checkpoint. If that checkpoint still lists the view's
//! (snapshots always; plain checkpoints until given up), its DAT maps
//! every block the view reads, and the read is tried again. Every DAT
//! block the view reads from then on is as of that same point: the device
//! refuses segments written after it, so a later move is followed the same
//! way, and a checkpoint given up since is found gone at that next open.
//!
//! Only views of a checkpoint (`MountConfig::checkpoint`) follow: the
//! newest state a read-only mount shows without one includes fsync
//! records that no checkpoint holds yet, which a later DAT need not map.

use super::Lsfs;
use crate::error::{Error, Result};
use crate::meta::store::Store;
use lsfs_vfs::{Errno, VfsResult};

/// Opens of the storage again per request before its error is returned:
/// the writer may write a segment again between the open and the read.
const FOLLOWS_PER_REQUEST: u32 = 3;

impl Lsfs {
    /// How many times this read-only view opened its storage again to
    /// follow the writer's moves.
    pub fn view_follows(&self) -> u64 {
        self.follows
    }

    /// Run the read `op`; in a view that follows a writer, when it fails
    /// with EIO, open the storage again and retry, a few times at most.
    pub(super) fn following<T>(
        &mut self,
        mut op: impl FnMut(&mut Lsfs) -> VfsResult<T>,
    ) -> VfsResult<T> {
        let mut follows = 0;
        loop {
            match op(self) {
                Err(e) if e == Errno::IO && follows < FOLLOWS_PER_REQUEST => {
                    let Some(cno) = self.followed_checkpoint() else {
                        return Err(e);
                    };
                    follows += 1;
                    match self.follow_writer(cno) {
                        Ok(true) => continue,
                        Ok(false) => return Err(e),
                        Err(err) => {
                            tracing::error!(
                                "checkpoint {cno}: following the writer's moves failed: {err}"
                            );
                            return Err(e);
                        }
                    }
                }
                r => return r,
            }
        }
    }

    /// The checkpoint this mount shows, if it is a read-only view of one
    /// (`lsfs stats`).
    pub fn shown_checkpoint(&self) -> Option<u64> {
        self.view?;
        self.config.checkpoint
    }

    /// The checkpoint this mount shows, if it is a read-only view that
    /// may follow a writer elsewhere.
    fn followed_checkpoint(&self) -> Option<u64> {
        self.shown_checkpoint()
            .filter(|_| self.store.opened_read_only())
    }

    /// Open the storage again and take the writer's newest DAT. `Ok(false)`
    /// when the device has no other writer (nothing to follow).
    fn follow_writer(&mut self, cno: u64) -> Result<bool> {
        let Some(dev) = self.store.reopen_device() else {
            return Ok(false);
        };
        let (dev, read_errors) = crate::device::ReadErrorLatch::new(dev?);
        let opened = Store::open(Box::new(dev), self.config.store.clone())?;
        let (was, is) = (
            self.store.superblock().fs_id,
            opened.store.superblock().fs_id,
        );
        if was != is {
            return Err(Error::corrupt(format!(
                "the store now holds file system {is:#x}, not {was:#x}: it was made again"
            )));
        }
        let cp = opened.store.cps().entries.get(&cno).copied();
        let gone = || {
            Error::io(
                format!("checkpoint {cno}"),
                std::io::Error::other(
                    "the writer has given it up (plain checkpoints are kept for \
                     protection_secs, less when space runs short; snapshots are never \
                     given up): unmount and mount a newer checkpoint",
                ),
            )
        };
        let cp = match cp {
            Some(cp) if !opened.store.given_up_at_next_checkpoint(cno) => cp,
            _ => return Err(gone()),
        };
        // A checkpoint's entry never changes.
        if Some(cp.ifile_root) != self.view {
            return Err(Error::corrupt(format!(
                "checkpoint {cno} now has IFILE root {}, this view {:?}",
                cp.ifile_root, self.view
            )));
        }
        let store = opened.store;
        store.fix_view();
        let mut old = std::mem::replace(&mut self.store, store);
        self.read_errors = read_errors;
        // Its cache, which may hold segments the writer has since written
        // again, is of no more use.
        if let Err(e) = old.release_device() {
            tracing::warn!("letting the earlier open of the store go: {e}");
        }
        drop(old);
        self.follows += 1;
        tracing::info!(
            "checkpoint {cno}: the writer moved blocks this view reads; following its newer \
             DAT ({} times since mount)",
            self.follows
        );
        Ok(true)
    }
}
