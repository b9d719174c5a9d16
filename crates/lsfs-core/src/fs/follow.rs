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
use crate::device::{BlockDevice, ReadErrors};
use crate::error::{Error, Result};
use crate::layout::ROOT_INO;
use crate::meta::store::{Store, StoreConfig};
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
        let opened = Reopened::open(dev?, self.config.store.clone())?;
        let root = self.checkpoint_in(&opened, cno)?;
        // A checkpoint's entry never changes.
        if Some(root) != self.view {
            return Err(Error::corrupt(format!(
                "checkpoint {cno} now has IFILE root {root}, this view {:?}",
                self.view
            )));
        }
        self.take_store(opened);
        self.follows += 1;
        tracing::info!(
            "checkpoint {cno}: the writer moved blocks this view reads; following its newer \
             DAT ({} times since mount)",
            self.follows
        );
        Ok(true)
    }

    /// A new read-only handle on the storage, for [`Reopened::open`], if
    /// this mount is a view of a checkpoint that a writer elsewhere may
    /// leave behind. Taken under the engine's lock; the open, which reads
    /// the store, is done outside it.
    pub fn reopen_for_view(&self) -> Option<Result<Box<dyn BlockDevice>>> {
        self.followed_checkpoint()?;
        self.store.reopen_device()
    }

    /// Show checkpoint `cno` of the storage `opened` from now on, instead of
    /// the checkpoint shown so far: a view that moves on to the writer's
    /// newer checkpoints. Every later request sees `cno` whole; none sees a
    /// mix. Returns the inodes the kernel holds (looked up or open, and the
    /// root): what it cached of them (attributes, pages, listings) is of the
    /// older checkpoint, and the caller tells it to drop that, outside the
    /// engine's lock. An inode the new checkpoint no longer has is left out
    /// of the engine's cache, so the kernel's next request about it fails.
    /// Fails only before the view moves (another file system, `cno` gone).
    pub fn move_view(&mut self, opened: Reopened, cno: u64) -> Result<Vec<u64>> {
        let was = self
            .followed_checkpoint()
            .ok_or_else(|| Error::invalid("only a read-only view of a checkpoint moves on"))?;
        let root = self.checkpoint_in(&opened, cno)?;
        self.take_store(opened);
        self.view = Some(root);
        self.config.checkpoint = Some(cno);
        // Every cached inode is as of the older checkpoint; those the
        // kernel holds are read again, keeping its references.
        let held: Vec<(u64, u64, u64)> = self
            .inodes
            .iter()
            .filter(|(_, c)| c.lookups > 0 || c.opens > 0)
            .map(|(&ino, c)| (ino, c.lookups, c.opens))
            .collect();
        self.inodes.clear();
        let mut stale = vec![ROOT_INO];
        for (ino, lookups, opens) in held {
            // The view has moved: a failure here must not undo it. An
            // inode left out is read again by the next request about it.
            match self.load_any(ino) {
                Ok(c) => {
                    c.lookups = lookups;
                    c.opens = opens;
                }
                Err(Error::Errno(Errno::NOENT)) => {}
                Err(e) => tracing::warn!(
                    "checkpoint {cno}: reading inode {ino}, which the kernel holds: {e}"
                ),
            }
            if ino != ROOT_INO {
                stale.push(ino);
            }
        }
        self.moves += 1;
        tracing::info!("moved on from checkpoint {was} to the writer's newer checkpoint {cno}");
        Ok(stale)
    }

    /// Times this view moved on to a newer checkpoint ([`Lsfs::move_view`]).
    pub fn view_moves(&self) -> u64 {
        self.moves
    }

    /// The IFILE root of checkpoint `cno` in `opened`, which must be the
    /// same file system as this mount's and still hold `cno`.
    fn checkpoint_in(&self, opened: &Reopened, cno: u64) -> Result<u64> {
        let (was, is) = (
            self.store.superblock().fs_id,
            opened.store.superblock().fs_id,
        );
        if was != is {
            return Err(Error::corrupt(format!(
                "the store now holds file system {is:#x}, not {was:#x}: it was made again"
            )));
        }
        match opened.store.cps().entries.get(&cno) {
            Some(cp) if !opened.store.given_up_at_next_checkpoint(cno) => Ok(cp.ifile_root),
            _ => Err(Error::io(
                format!("checkpoint {cno}"),
                std::io::Error::other(
                    "the writer has given it up (plain checkpoints are kept for \
                     protection_secs, less when space runs short; snapshots are never \
                     given up): unmount and mount a newer checkpoint",
                ),
            )),
        }
    }

    /// Read through `opened` from now on, with nothing cached from before.
    fn take_store(&mut self, opened: Reopened) {
        let Reopened { store, read_errors } = opened;
        store.fix_view();
        let mut old = std::mem::replace(&mut self.store, store);
        self.read_errors = read_errors;
        // Its cache, which may hold segments the writer has since written
        // again, is of no more use.
        if let Err(e) = old.release_device() {
            tracing::warn!("letting the earlier open of the store go: {e}");
        }
    }
}

/// The storage opened again, read-only, as the writer left it last: for a
/// view that follows the writer's moves or moves on to a newer checkpoint.
pub struct Reopened {
    store: Store,
    read_errors: ReadErrors,
}

impl Reopened {
    /// Open the storage through `dev` (from [`Lsfs::reopen_for_view`]).
    pub fn open(dev: Box<dyn BlockDevice>, config: StoreConfig) -> Result<Reopened> {
        let (dev, read_errors) = crate::device::ReadErrorLatch::new(dev);
        let opened = Store::open(Box::new(dev), config)?;
        Ok(Reopened {
            store: opened.store,
            read_errors,
        })
    }

    /// The newest checkpoint the storage names.
    pub fn newest_checkpoint(&self) -> u64 {
        self.store.superblock().cp_cno
    }
}
