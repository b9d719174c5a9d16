//! Layer 4: the file system users see. [`Lsfs`] implements [`Vfs`] on top of
//! the store: inodes, regular files, directories, symlinks, hard links,
//! xattrs, checkpoints, snapshots, fsync and recovery's roll-forward.
//!
//! Each namespace or metadata change is split in two: the operation checks
//! its arguments, then an `*_apply` function makes the change, and the
//! change is logged (`oplog.rs`). Recovery replays logged changes through
//! the same `*_apply` functions (`replay.rs`).

pub mod atomic;
pub mod clean;
pub mod clone;
pub mod compaction;
pub mod defrag;
mod delete;
pub mod dir;
mod fallocate;
pub mod file;
mod follow;
pub use follow::Reopened;
pub mod inode;
mod invariants;
pub mod locked;
pub mod map;
pub mod memory;
mod namespace;
pub mod nocompress;
pub mod oplog;
mod replay;
pub mod snapview;
mod tail;
mod trim;
pub mod write_amp;
pub mod xattr;

use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::layout::{MAX_INO, ORPHAN_INO, ROOT_INO};
use crate::log::items::{self, Item};
use crate::log::record::MAX_INLINE_BYTES;
use crate::meta::open::MkfsOptions;
use crate::meta::store::{Store, StoreConfig};
pub use delete::{DeleteStats, ReclaimProgress, ReclaimStatus};
pub use delete::{FOREGROUND_DELETE_MAX_BLOCKS, RECLAIM_BLOCKS_PER_STEP};
use inode::{Format, Inode};
pub use invariants::CheckpointChecks;
use lsfs_vfs::*;
use snapview::{is_virtual, Views, CTL_INO, CTL_NAME};
use std::collections::{BTreeSet, HashMap};

/// An inode in memory, with the references the kernel and open files hold.
struct Cached {
    inode: Inode,
    dirty: bool,
    lookups: u64,
    opens: u64,
}

/// Inodes kept in memory beyond those referenced or dirty.
const INODE_CACHE_MAX: usize = 65536;

/// Settings of a mount.
#[derive(Clone, Debug)]
pub struct MountConfig {
    pub store: StoreConfig,
    /// Seconds between automatic checkpoints.
    pub checkpoint_interval_secs: u64,
    /// Mount this checkpoint read-only instead of the live file system.
    pub checkpoint: Option<u64>,
    pub cleaner: crate::gc::CleanerConfig,
    /// Which checkpoints are followed by fsck's checks, which panic on a
    /// violation (`fs/invariants.rs`): by default sampled in debug builds,
    /// none in release, or as `LSFS_CHECK_CHECKPOINTS` says.
    pub check_checkpoints: CheckpointChecks,
}

impl Default for MountConfig {
    fn default() -> Self {
        MountConfig {
            store: StoreConfig::default(),
            checkpoint_interval_secs: 5,
            checkpoint: None,
            cleaner: Default::default(),
            check_checkpoints: invariants::by_default(),
        }
    }
}

/// The least bound on the I/O queue's bytes: a few records, so a small
/// cache does not run the queue at nearly every append.
const QUEUE_MIN_BYTES: usize = 8 << 20;

/// DAT blocks (128 entries each) reconciled per tick: about 1 MiB of DAT
/// read per tick, 16,384 virtual blocks.
pub const RECONCILE_DAT_BLOCKS_PER_TICK: u64 = 128;

pub struct Lsfs {
    pub store: Store,
    inodes: HashMap<u64, Cached>,
    /// The IFILE root inodes are read from: the live one, or a checkpoint's.
    view: Option<u64>,
    pub config: MountConfig,
    /// When the last checkpoint was written (a `Clock::mono` reading).
    last_checkpoint: std::time::Duration,
    /// fsync records recovery rolled forward when this mount opened.
    pub replayed_records: usize,
    /// Snapshots browsable under `/.lsfs/snapshot` (live mounts only).
    views: Views,
    pub cleaner: clean::Cleaner,
    /// A device read failed: the change it was part of may be half done in
    /// memory, so nothing more is written (see `device/latch.rs`).
    read_errors: crate::device::ReadErrors,
    /// Times this view opened its storage again to follow a writer
    /// elsewhere (`follow.rs`).
    follows: u64,
    /// Times this view moved on to a writer's newer checkpoint
    /// (`follow.rs`).
    moves: u64,
    /// Device bytes against application bytes (`write_amplification`).
    write_amp: write_amp::WriteAmpMeter,
    /// Namespace and metadata changes since the last checkpoint, for
    /// fsync records.
    pub oplog: oplog::OpLog,
    /// Sampled checks: no check before this (`fs/invariants.rs`).
    checks_resume_at: Option<std::time::Instant>,
    /// Writes held apart until their file's atomic commit (`atomic.rs`).
    pub atomic: atomic::AtomicWrites,
    /// Deleted files whose blocks are freed in the background (`delete.rs`).
    deletes: delete::Deletes,
    /// Files read in order, to lay out again when idle (`compaction.rs`).
    compaction: compaction::Compaction,
}

fn check_name(name: &[u8]) -> VfsResult<()> {
    if name.len() > NAME_MAX_BYTES {
        return Err(Errno::NAMETOOLONG);
    }
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(Errno::INVAL);
    }
    if name == b"." || name == b".." {
        return Err(Errno::EXIST);
    }
    Ok(())
}

impl Lsfs {
    /// Make a new file system on `dev` and return it mounted.
    pub fn mkfs(
        dev: Box<dyn BlockDevice>,
        opts: &MkfsOptions,
        config: MountConfig,
    ) -> Result<Lsfs> {
        clean::threaded_logging_suits(config.cleaner.threaded_logging, dev.fills_holes())
            .map_err(Error::invalid)?;
        let (dev, read_errors) = crate::device::ReadErrorLatch::new(dev);
        let store = Store::create(Box::new(dev), opts, config.store.clone())?;
        let mut fs = Lsfs::with_store(store, config, None);
        fs.read_errors = read_errors;
        fs.store.enable_compressed_records(true);
        let now = fs.store.clock().now();
        let root = Inode::new(ROOT_INO, libc::S_IFDIR | 0o755, 0, 0, now);
        let orphans = Inode::new(ORPHAN_INO, libc::S_IFDIR | 0o700, 0, 0, now);
        for i in [root, orphans] {
            fs.store.inode_created();
            fs.put(i);
        }
        fs.checkpoint_for("mount")?;
        fs.store.settle_superblocks()?;
        fs.start_write_amp();
        Ok(fs)
    }

    /// Open the file system on `dev`, recovering it after a crash.
    pub fn open(dev: Box<dyn BlockDevice>, config: MountConfig) -> Result<Lsfs> {
        if !config.store.read_only {
            clean::threaded_logging_suits(config.cleaner.threaded_logging, dev.fills_holes())
                .map_err(Error::invalid)?;
        }
        let (dev, read_errors) = crate::device::ReadErrorLatch::new(dev);
        let opened = Store::open(Box::new(dev), config.store.clone())?;
        let view = match config.checkpoint {
            Some(cno) => {
                if opened.store.given_up_at_next_checkpoint(cno) {
                    return Err(Error::invalid(format!(
                        "--checkpoint {cno}: given up to make space (a cleaning pass freed blocks only it saw)"
                    )));
                }
                let cp = opened.store.cps().entries.get(&cno).ok_or_else(|| {
                    Error::invalid(format!(
                        "--checkpoint {cno}: no such checkpoint (existing: {:?})",
                        opened.store.cps().entries.keys().collect::<Vec<_>>()
                    ))
                })?;
                Some(cp.ifile_root)
            }
            None => None,
        };
        let mut fs = Lsfs::with_store(opened.store, config, view);
        fs.read_errors = read_errors;
        // fsync records belong to the live file system; applied to an older
        // checkpoint's view they would change what that checkpoint shows.
        if fs.view.is_none() {
            fs.replay(&opened.replay)?;
            fs.store.finish_move_records()?;
            fs.replayed_records = opened.replay.len();
        }
        if fs.view.is_none() && !fs.store.opened_read_only() {
            // An older image gets the inline-items feature now: the mount's
            // checkpoint and both superblocks carry it before any fsync
            // record with items is written.
            fs.store.enable_inline_items();
            fs.store.enable_move_records();
            fs.store.enable_compressed_records(false);
            fs.delete_orphans()?;
            fs.checkpoint_for("mount")?;
            fs.store.settle_superblocks()?;
        }
        if fs.store.opened_read_only() {
            // A writer elsewhere may reuse what this view reads once its
            // checkpoint is given up: the device may then refuse such reads.
            fs.store.fix_view();
        }
        fs.start_write_amp();
        Ok(fs)
    }

    fn with_store(store: Store, config: MountConfig, view: Option<u64>) -> Lsfs {
        let (mono, now) = (store.clock().mono(), store.clock().now());
        Lsfs {
            store,
            inodes: HashMap::new(),
            view,
            cleaner: clean::Cleaner::new(config.cleaner.clone(), mono),
            config,
            last_checkpoint: mono,
            replayed_records: 0,
            views: Views::new(now),
            read_errors: Default::default(),
            follows: 0,
            moves: 0,
            write_amp: Default::default(),
            oplog: Default::default(),
            checks_resume_at: None,
            atomic: Default::default(),
            deletes: Default::default(),
            compaction: Default::default(),
        }
    }

    /// The mount's clock (`clock.rs`): tests and simulations set and move it.
    pub fn clock(&self) -> &crate::clock::Clock {
        self.store.clock()
    }

    /// Device bytes written so far, for the write-amplification meter.
    fn device_write_bytes(&self) -> u64 {
        self.store.device_counters().write_bytes
    }

    /// Start the write-amplification meter: what mkfs or recovery wrote
    /// before the mount serves anyone does not count.
    fn start_write_amp(&mut self) {
        self.write_amp = write_amp::WriteAmpMeter::start(self.device_write_bytes());
    }

    /// Bytes written to the device over bytes applications asked to store,
    /// since mount and over the last minutes (`fs/write_amp.rs`).
    pub fn write_amplification(&self) -> write_amp::WriteAmp {
        self.write_amp
            .report(self.store.now(), self.device_write_bytes())
    }

    /// After a device read error, stop writing: fail the store (logged once).
    fn stop_after_read_error(&mut self) {
        if let Some(first) = self.read_errors.first() {
            // Failing again keeps the first reason (`Store::fail`).
            let err = Error::io(
                format!("read failed earlier: {first}"),
                std::io::Error::from_raw_os_error(libc::EIO),
            );
            self.store.fail(&err);
        }
    }

    fn ifile_root(&self) -> u64 {
        self.view.unwrap_or(self.store.roots().ifile_root)
    }

    fn mutable(&self) -> VfsResult<()> {
        if self.view.is_some() || self.read_errors.tripped() {
            return Err(Errno::ROFS);
        }
        self.store.writable().map_err(Errno::from)
    }

    // ---- inode cache ----

    fn load(&mut self, ino: u64) -> Result<&mut Cached> {
        delete::queued_is_gone(&self.deletes, ino)?;
        self.load_any(ino)
    }

    /// [`Lsfs::load`], also of an inode queued for deletion.
    fn load_any(&mut self, ino: u64) -> Result<&mut Cached> {
        if !self.inodes.contains_key(&ino) {
            if is_virtual(ino) {
                // Snapshot views never change: callers that reach here mutate.
                return Err(Error::Errno(Errno::ROFS));
            }
            if ino == 0 {
                return Err(Error::Errno(Errno::NOENT));
            }
            let root = self.ifile_root();
            let img = self
                .store
                .inode_read(root, ino)?
                .ok_or(Error::Errno(Errno::NOENT))?;
            let inode = Inode::decode(&img, ino)?;
            self.load_nocompress(&inode)?;
            self.evict_inodes();
            self.inodes.insert(
                ino,
                Cached {
                    inode,
                    dirty: false,
                    lookups: 0,
                    opens: 0,
                },
            );
        }
        Ok(self.inodes.get_mut(&ino).expect("just loaded"))
    }

    fn get(&mut self, ino: u64) -> Result<Inode> {
        Ok(self.load(ino)?.inode.clone())
    }

    /// A regular file for read, write, seek or clone: a directory answers
    /// EISDIR and anything else EINVAL, as Linux does (a symlink's bytes
    /// are its target, reached through readlink; writing them would
    /// overwrite it).
    fn regular_file(&mut self, ino: u64) -> VfsResult<Inode> {
        let i = self.get(ino)?;
        match i.kind() {
            FileKind::File => Ok(i),
            FileKind::Dir => Err(Errno::ISDIR),
            _ => Err(Errno::INVAL),
        }
    }

    /// Store a changed inode (written to the IFILE at the next checkpoint).
    fn put(&mut self, inode: Inode) {
        if self.atomic.committed == Some(inode.ino) {
            self.atomic.committed = None;
        }
        let c = self.inodes.entry(inode.ino).or_insert(Cached {
            inode: inode.clone(),
            dirty: true,
            lookups: 0,
            opens: 0,
        });
        c.inode = inode;
        c.dirty = true;
    }

    fn evict_inodes(&mut self) {
        if self.inodes.len() < INODE_CACHE_MAX {
            return;
        }
        self.inodes
            .retain(|_, c| c.dirty || c.lookups > 0 || c.opens > 0);
    }

    /// Write every dirty inode into the IFILE.
    pub(crate) fn flush_inodes(&mut self) -> Result<()> {
        let mut dirty: Vec<u64> = self
            .inodes
            .iter()
            .filter(|(_, c)| c.dirty)
            .map(|(&i, _)| i)
            .collect();
        // In inode order, not the map's (which differs from run to run), so
        // that a run writes the IFILE the same way each time.
        dirty.sort_unstable();
        for ino in dirty {
            let img = self.inodes[&ino].inode.encode();
            self.store.inode_write(ino, Some(&img))?;
            self.inodes.get_mut(&ino).unwrap().dirty = false;
        }
        Ok(())
    }

    // ---- checkpoints ----

    /// Write a checkpoint now; returns its number.
    /// Readers elsewhere (an object store's) can mount it once this returns.
    pub fn checkpoint(&mut self) -> Result<u64> {
        let cno = self.checkpoint_for("requested")?;
        self.store.publish()?;
        Ok(cno)
    }

    /// [`Lsfs::checkpoint`], counted under `cause` in
    /// `StoreStats::checkpoints_by_cause` (what makes checkpoints frequent
    /// is what makes metadata expensive).
    pub(crate) fn checkpoint_for(&mut self, cause: &'static str) -> Result<u64> {
        self.store.count_checkpoint_cause(cause);
        self.checkpoint_inner()
    }

    fn checkpoint_inner(&mut self) -> Result<u64> {
        if self.view.is_some() {
            return Err(Error::Errno(Errno::ROFS));
        }
        self.stop_after_read_error();
        self.store.writable()?;
        self.flush_inodes()?;
        let cno = self.store.checkpoint()?;
        self.oplog.clear();
        self.last_checkpoint = self.store.clock().mono();
        self.check_after_checkpoint(cno);
        Ok(cno)
    }

    /// Apply queued snapshot changes to the segment counters until they are
    /// exact (what `tick` does a slice at a time), and checkpoint.
    pub fn reconcile_all(&mut self) -> Result<()> {
        self.mutable().map_err(Error::Errno)?;
        self.store.reconcile_step(u64::MAX)?;
        self.checkpoint_for("snapshot")?;
        Ok(())
    }

    /// Periodic work: a checkpoint when the interval has passed and something changed.
    pub fn tick(&mut self) -> Result<()> {
        let (now, dev) = (self.store.now(), self.device_write_bytes());
        self.write_amp.sample(now, dev);
        self.stop_after_read_error();
        if self.view.is_some() || self.store.writable().is_err() {
            return Ok(());
        }
        let due = self.store.clock().secs_since(self.last_checkpoint)
            >= self.config.checkpoint_interval_secs;
        let dirty = self.store.has_dirty() || self.inodes.values().any(|c| c.dirty);
        if due && dirty {
            self.checkpoint_for("interval")?;
        }
        if !self.store.reconcile().is_settled() {
            // Snapshot changes reach the counters a bounded slice at a time
            // (the next checkpoint records how far).
            self.store.reconcile_step(RECONCILE_DAT_BLOCKS_PER_TICK)?;
        }
        if !self.deletes.is_empty() {
            // Deleted files' blocks, a bounded slice (the mount's ticker
            // calls `reclaim_step` more often while any are left).
            self.reclaim_step(RECLAIM_BLOCKS_PER_STEP)?;
        }
        self.store.discard_batch_if_due()?;
        self.clean_in_background()
    }

    /// After a change: keep dirty blocks under half the cache, and the
    /// operation log within its bounds (`oplog.rs`).
    fn after_change(&mut self) -> VfsResult<()> {
        self.cleaner.last_activity = self.store.clock().mono();
        if self.store.pending_blocks() * 2 > self.store.cache().capacity_blocks() {
            self.checkpoint_for("cache")?;
        } else if self.oplog.over_bound() {
            self.checkpoint_for("oplog")?;
        } else if self.store.log_pins_too_much() {
            self.checkpoint_for("log")?;
        }
        Ok(())
    }

    /// The largest piece of a write or fallocate done at once: a quarter of
    /// the cache, so that the blocks it dirties always fit (see after_change).
    fn chunk_bytes(&self) -> u64 {
        (self.store.cache().capacity_blocks() as u64 / 4).max(1) * file::BLOCK
    }

    /// Refuse a change that needs `blocks` new blocks when they are not
    /// there, after trying a checkpoint to free what can be freed.
    fn reserve(&mut self, blocks: u64) -> VfsResult<()> {
        let need = blocks + 64;
        if self.store.needs_freed_segments(need) {
            // Cleaner passes free segments without a checkpoint of their
            // own; the writer is about to need them.
            self.checkpoint_for("space: freed segments")?;
        }
        if self.store.free_blocks() >= need {
            // Below the cleaner's low-water mark, clean in the foreground
            // back above it.
            if self.cleaner.enabled && self.free_segments() < self.low_water_segments() {
                if self.deletes.is_empty() {
                    self.clean_to_low_water()?;
                } else {
                    // Deleted files' blocks first: cleaning would copy
                    // them. A step per write, bounded as the background's;
                    // the checkpoint that frees their segments comes when
                    // the writer needs them, as after a cleaner pass.
                    self.reclaim_step(RECLAIM_BLOCKS_PER_STEP)?;
                }
            }
            return Ok(());
        }
        if !self.deletes.is_empty() {
            // Deleted files' blocks the background has not freed yet: the
            // space is wanted now (the checkpoints below free the segments).
            self.reclaim_all()?;
        }
        if self.store.has_dirty() {
            self.checkpoint_for("space: short")?;
        }
        // Freed segments become usable after the checkpoint that freed them.
        self.checkpoint_for("space: short")?;
        if self.store.free_blocks() >= need || self.clean_for_space(need)? {
            Ok(())
        } else {
            Err(Errno::NOSPC)
        }
    }

    /// Unmount: write everything and both superblocks. Device work still
    /// queued runs first, and the final checkpoint runs at once (nobody
    /// else calls in any more). Deleted files not yet freed stay in the
    /// orphan directory, as far as freed; the next mount goes on
    /// (`delete.rs`; `reclaim_all` first to finish them now).
    pub fn unmount(&mut self) -> Result<()> {
        let written = self.write_for_unmount();
        // The device's hold (an object store's lease) goes even when the
        // last writes failed: this mount writes nothing more, and a lease
        // left behind would refuse every later writer.
        let released = self.store.release_device();
        written.and(released)
    }

    fn write_for_unmount(&mut self) -> Result<()> {
        if self.store.io().is_deferred() {
            self.store.io().set_deferred(false)?;
        }
        self.stop_after_read_error();
        if self.view.is_none() && self.store.writable().is_ok() {
            self.checkpoint_for("unmount")?;
            // What the last batch would have discarded, now: nothing is
            // left to tick once unmounted. (After the checkpoint, which is
            // durable; before the superblocks, so the device's last
            // operation stays their flush.)
            self.store.discard_batch()?;
            self.store.settle_superblocks()?;
        }
        Ok(())
    }

    /// Queue device writes and flushes from now on instead of doing them
    /// inside each call (`true`), for whoever serialises the calls to
    /// finish outside its lock (`Vfs::deferred_io`, `locked.rs`); or do
    /// them at once again (`false`, after finishing what is queued).
    pub fn defer_io(&mut self, on: bool) -> Result<()> {
        // Queued writes are blocks the cache has let go of, or copies of
        // blocks it holds: bound them by the cache's size.
        let cache_bytes = self.store.cache().capacity_blocks() * self.store.geo().block_bytes;
        self.store
            .io()
            .set_limit(cache_bytes.clamp(QUEUE_MIN_BYTES, crate::device::PENDING_BYTES_MAX));
        self.store.io().set_deferred(on)
    }

    /// The virtual block file block `block` of `ino` maps to (tests, tools).
    pub fn file_vblock_for_test(&mut self, ino: u64, block: u64) -> Result<Option<u64>> {
        let i = self.get(ino)?;
        Ok(file::extent_at(&mut self.store, &i, block)?.map(|e| e.vstart + (block - e.file_block)))
    }

    pub fn checkpoints(&self) -> Vec<crate::meta::cpfile::CpEntry> {
        self.store.cps().entries.values().copied().collect()
    }

    /// The regular files the kernel holds a reference to (looked up and not
    /// yet forgotten): the only ones that can have dirty pages in its page
    /// cache under the writeback cache. The control socket has the kernel
    /// write them back, and waits for it, before a checkpoint.
    pub fn kernel_held_files(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .inodes
            .iter()
            .filter(|(_, c)| c.lookups > 0 && c.inode.kind() == FileKind::File)
            .map(|(&ino, _)| ino)
            .collect();
        v.sort_unstable();
        v
    }

    /// Take a snapshot of the current state: a checkpoint, flagged permanent.
    pub fn snapshot_create(&mut self) -> Result<u64> {
        let cno = self.checkpoint_for("snapshot")?;
        self.store.set_snapshot(cno, true)?;
        self.checkpoint_for("snapshot")?;
        // Readers elsewhere can mount it once this returns.
        self.store.publish()?;
        Ok(cno)
    }

    /// Promote (`true`) or demote (`false`) checkpoint `cno`.
    pub fn snapshot_set(&mut self, cno: u64, on: bool) -> Result<()> {
        self.mutable().map_err(Error::Errno)?;
        self.store.set_snapshot(cno, on)?;
        self.checkpoint_for("snapshot")?;
        self.store.publish()?;
        Ok(())
    }

    /// Delete a plain checkpoint.
    pub fn checkpoint_delete(&mut self, cno: u64) -> Result<()> {
        self.mutable().map_err(Error::Errno)?;
        self.store.delete_checkpoint(cno)?;
        self.checkpoint_for("requested")?;
        Ok(())
    }

    // ---- recovery (roll-forward: replay.rs) ----

    /// Free an inode and everything it holds.
    fn destroy_inode(&mut self, ino: u64) -> Result<()> {
        self.compaction.forget(ino);
        let mut i = self.load_any(ino)?.inode.clone();
        if i.kind() == FileKind::Dir {
            map::destroy_tree(
                &mut self.store,
                if i.format == Format::BTree {
                    i.map_root
                } else {
                    0
                },
                ino,
            )?;
        } else {
            file::destroy(&mut self.store, &mut i)?;
        }
        if i.xattr_root != 0 {
            map::destroy_tree(&mut self.store, i.xattr_root, ino)?;
        }
        let mut orphans = self.get(ORPHAN_INO)?;
        if dir::remove(&mut self.store, &mut orphans, &ino.to_le_bytes())?.is_some() {
            self.put(orphans);
        }
        self.inodes.remove(&ino);
        self.dequeue_delete(ino);
        // Deleted with atomic writes pending: they had nowhere to go.
        self.atomic.drop_file(ino);
        self.store.inode_write(ino, None)?;
        self.store.inode_deleted();
        Ok(())
    }

    /// An inode whose last link went: delete it (`delete.rs`), or park it
    /// in the orphan directory until the last reference goes.
    fn drop_link(&mut self, ino: u64) -> Result<()> {
        let c = self.load(ino)?;
        if c.inode.nlink > 0 {
            return Ok(());
        }
        if c.lookups == 0 && c.opens == 0 {
            return self.delete_inode(ino);
        }
        self.add_orphan(ino)
    }

    /// Name `ino` in the orphan directory (by its number), if not yet.
    pub(super) fn add_orphan(&mut self, ino: u64) -> Result<()> {
        let mut orphans = self.get(ORPHAN_INO)?;
        let name = ino.to_le_bytes();
        if dir::lookup(&mut self.store, &orphans, &name)?.is_none() {
            dir::insert(&mut self.store, &mut orphans, &name, ino, FileKind::File)?;
            self.put(orphans);
        }
        Ok(())
    }

    fn maybe_destroy(&mut self, ino: u64) -> Result<()> {
        if self.view.is_some() {
            return Ok(());
        }
        if let Some(c) = self.inodes.get(&ino) {
            if c.inode.nlink == 0 && c.lookups == 0 && c.opens == 0 {
                self.delete_inode(ino)?;
            }
        }
        Ok(())
    }

    // ---- namespace helpers ----

    fn dir_inode(&mut self, ino: u64) -> VfsResult<Inode> {
        let d = self.get(ino)?;
        if d.kind() != FileKind::Dir {
            return Err(Errno::NOTDIR);
        }
        Ok(d)
    }

    /// A directory that may take new entries: not removed (while still
    /// open, a removed directory is in the orphan directory and its entries
    /// would be lost with it). Linux says ENOENT.
    fn live_dir(&mut self, ino: u64) -> VfsResult<Inode> {
        let d = self.dir_inode(ino)?;
        if d.nlink == 0 {
            return Err(Errno::NOENT);
        }
        Ok(d)
    }

    fn lookup_entry(&mut self, parent: u64, name: &[u8]) -> VfsResult<Option<dir::Entry>> {
        if name.len() > NAME_MAX_BYTES {
            return Err(Errno::NAMETOOLONG);
        }
        let d = self.dir_inode(parent)?;
        dir::lookup(&mut self.store, &d, name).map_err(Errno::from)
    }

    /// mknod, mkdir and symlink (with `target`): a new inode named `name`.
    fn new_inode(
        &mut self,
        parent: u64,
        name: &[u8],
        mode: u32,
        rdev: u32,
        target: &[u8],
        ctx: &Ctx,
    ) -> VfsResult<Inode> {
        self.mutable()?;
        check_name(name)?;
        self.check_reserved(parent, name)?;
        self.reserve(8)?;
        let d = self.live_dir(parent)?;
        if dir::lookup(&mut self.store, &d, name)?.is_some() {
            return Err(Errno::EXIST);
        }
        let ino = self.store.take_ino(MAX_INO).ok_or(Errno::NOSPC)?;
        // BSD group semantics when the parent is setgid, as Linux does.
        let (gid, mode) = if d.mode & libc::S_ISGID != 0 {
            let m = if mode & libc::S_IFMT == libc::S_IFDIR {
                mode | libc::S_ISGID
            } else {
                mode
            };
            (d.gid, m)
        } else {
            (ctx.gid, mode)
        };
        let ids = (ctx.uid, gid, rdev);
        let inode = self.create_apply(
            parent,
            name,
            ino,
            mode,
            ids,
            target,
            self.store.clock().now(),
        )?;
        self.write_amp.note_app((name.len() + target.len()) as u64);
        self.oplog.push(
            Item::Create {
                parent,
                ino,
                mode,
                uid: ctx.uid,
                gid,
                rdev,
                name: name.to_vec(),
                target: target.to_vec(),
            },
            &[parent, ino],
        );
        self.inodes.get_mut(&ino).expect("just put").lookups += 1;
        Ok(inode)
    }

    /// `/.lsfs` belongs to the snapshot views.
    fn check_reserved(&self, parent: u64, name: &[u8]) -> VfsResult<()> {
        if parent == ROOT_INO && name == CTL_NAME {
            return Err(Errno::EXIST);
        }
        if is_virtual(parent) {
            return Err(Errno::ROFS);
        }
        Ok(())
    }

    /// Write fsync's record for `ino` (see `fsync`); `false` if its items
    /// do not fit one record, or the image cannot take items.
    fn fsync_record(&mut self, ino: u64) -> Result<bool> {
        self.fsync_record_of(&[ino])
    }

    /// [`Lsfs::fsync_record`] for several inodes at once: one record (one
    /// group, replayed whole or not at all) with all of them.
    fn fsync_record_of(&mut self, of: &[u64]) -> Result<bool> {
        if !self.store.superblock().inline_items() {
            return Ok(false);
        }
        let mut inos: BTreeSet<u64> = self.oplog.touched().collect();
        inos.extend(of.iter().copied());
        let mut items = self.oplog.pending().to_vec();
        let nops = items.len() as u64;
        let mut files = Vec::new();
        for i in inos {
            let node = match self.get(i) {
                Ok(n) => n,
                // Deleted since: replaying the operations deletes it too.
                Err(Error::Errno(_)) => continue,
                Err(err) => return Err(err),
            };
            // Unlinked but open: deleted at the next mount whatever happens.
            if node.nlink == 0 && !of.contains(&i) {
                continue;
            }
            if node.kind() == FileKind::File {
                files.push(i);
            }
            let mut image = node.encode();
            image.truncate(items::INODE_HEAD_BYTES + node.area.len());
            items.push(Item::Inode { ino: i, image });
        }
        let bytes = items::encode(&items);
        if bytes.len() > MAX_INLINE_BYTES {
            return Ok(false);
        }
        self.store.dsync(&files, &bytes)?;
        self.store.count_dsync_ops(nops);
        self.oplog.written();
        Ok(true)
    }
}

// Directories record their parent as a ".." entry (never listed by readdir,
// which synthesises "." and ".."), so rename can check for cycles and
// readdir can report the parent's inode.
impl Lsfs {
    fn set_dotdot(&mut self, dir_ino: u64, parent: u64) -> VfsResult<()> {
        let mut d = self.dir_inode(dir_ino)?;
        // ".." is not counted in the size (the number of entries rmdir and
        // fsck look at): keep it as it was, whether ".." existed or not.
        let size = d.size;
        let _ = dir::remove(&mut self.store, &mut d, b"..")?;
        dir::insert(&mut self.store, &mut d, b"..", parent, FileKind::Dir)?;
        d.size = size;
        self.put(d);
        Ok(())
    }

    fn parent_of(&mut self, d: &Inode) -> VfsResult<u64> {
        if d.ino == ROOT_INO {
            return Ok(ROOT_INO);
        }
        Ok(dir::lookup(&mut self.store, d, b"..")?
            .map(|p| p.ino)
            .unwrap_or(ROOT_INO))
    }
}

/// `statfs` keeps back 1/32 of the space nothing holds: what filling
/// writes besides file data, and what cleaning cannot gain back at the end.
const FILL_OVERHEAD_DIVISOR: u64 = 32;

/// The reads a view that follows a writer elsewhere retries (`follow.rs`).
impl Lsfs {
    fn lookup_once(&mut self, parent: Ino, name: &[u8]) -> VfsResult<Attr> {
        if is_virtual(parent) {
            return self
                .views
                .lookup(&mut self.store, parent, name)
                .map_err(Errno::from);
        }
        if parent == ROOT_INO && name == CTL_NAME && self.view.is_none() {
            return self
                .views
                .getattr(&mut self.store, CTL_INO)
                .map_err(Errno::from);
        }
        if name == b".." {
            let d = self.dir_inode(parent)?;
            let p = self.parent_of(&d)?;
            let c = self.load(p)?;
            c.lookups += 1;
            return Ok(c.inode.attr());
        }
        if name == b"." {
            let c = self.load(parent)?;
            c.lookups += 1;
            return Ok(c.inode.attr());
        }
        let ent = self.lookup_entry(parent, name)?.ok_or(Errno::NOENT)?;
        let c = self.load(ent.ino)?;
        c.lookups += 1;
        let mut a = c.inode.attr();
        self.atomic.patch_attr(&mut a);
        Ok(a)
    }

    fn getattr_once(&mut self, ino: Ino) -> VfsResult<Attr> {
        if is_virtual(ino) {
            return self
                .views
                .getattr(&mut self.store, ino)
                .map_err(Errno::from);
        }
        let mut a = self.load(ino)?.inode.attr();
        self.atomic.patch_attr(&mut a);
        Ok(a)
    }

    fn readlink_once(&mut self, ino: Ino) -> VfsResult<Vec<u8>> {
        let i = if is_virtual(ino) {
            self.views.inode(&mut self.store, ino)?.0
        } else {
            self.get(ino)?
        };
        if i.kind() != FileKind::Symlink {
            return Err(Errno::INVAL);
        }
        file::read(&mut self.store, &i, 0, i.size).map_err(Errno::from)
    }

    fn read_once(&mut self, ino: Ino, offset: u64, size: u32) -> VfsResult<Vec<u8>> {
        if is_virtual(ino) {
            return self
                .views
                .read(&mut self.store, ino, offset, size as u64)
                .map_err(Errno::from);
        }
        let i = self.regular_file(ino)?;
        if self.atomic.contains(ino) {
            return self.atomic_read(ino, offset, size as u64);
        }
        let data = file::read(&mut self.store, &i, offset, size as u64).map_err(Errno::from)?;
        let now = self.store.clock().mono();
        self.compaction
            .note_read(ino, offset, data.len() as u64, now);
        Ok(data)
    }

    fn seek_data_or_hole_once(
        &mut self,
        ino: Ino,
        offset: u64,
        data: bool,
    ) -> VfsResult<Option<u64>> {
        if is_virtual(ino) {
            // A checkpoint's files: all data (holes read as zeros).
            let size = self.getattr(ino)?.size;
            return Ok(lsfs_vfs::seek_in_all_data(size, offset, data));
        }
        let i = self.regular_file(ino)?;
        if self.atomic.contains(ino) {
            // Pending blocks are not in the block map: all data, which POSIX allows.
            let size = self.getattr(ino)?.size;
            return Ok(lsfs_vfs::seek_in_all_data(size, offset, data));
        }
        file::seek_data_or_hole(&mut self.store, &i, offset, data).map_err(Errno::from)
    }

    fn readdir_once(
        &mut self,
        ino: Ino,
        offset: u64,
        max_entries: usize,
    ) -> VfsResult<Vec<DirEntry>> {
        if is_virtual(ino) {
            return self
                .views
                .readdir(&mut self.store, ino, offset, max_entries)
                .map_err(Errno::from);
        }
        let d = self.dir_inode(ino)?;
        let mut out = Vec::new();
        if offset < dir::COOKIE_DOT && out.len() < max_entries {
            out.push(DirEntry {
                ino,
                offset: dir::COOKIE_DOT,
                kind: FileKind::Dir,
                name: b".".to_vec(),
            });
        }
        if offset < dir::COOKIE_DOTDOT && out.len() < max_entries {
            let p = self.parent_of(&d)?;
            out.push(DirEntry {
                ino: p,
                offset: dir::COOKIE_DOTDOT,
                kind: FileKind::Dir,
                name: b"..".to_vec(),
            });
        }
        let want = max_entries.saturating_sub(out.len());
        let mut cookie = offset;
        while out.len() < max_entries {
            let batch = dir::list_after(&mut self.store, &d, cookie, want + 1)?;
            if batch.is_empty() {
                break;
            }
            for (c, ent) in batch {
                cookie = c;
                if ent.name == b".." {
                    continue;
                }
                if out.len() < max_entries {
                    out.push(DirEntry {
                        ino: ent.ino,
                        offset: c,
                        kind: ent.kind,
                        name: ent.name,
                    });
                }
            }
        }
        Ok(out)
    }

    fn getxattr_once(&mut self, ino: Ino, name: &[u8]) -> VfsResult<Vec<u8>> {
        if is_virtual(ino) {
            return self
                .views
                .getxattr(&mut self.store, ino, name)
                .map_err(Errno::from);
        }
        let i = self.get(ino)?;
        xattr::get(&mut self.store, &i, name)?.ok_or(Errno::NODATA)
    }

    fn listxattr_once(&mut self, ino: Ino) -> VfsResult<Vec<Vec<u8>>> {
        if is_virtual(ino) {
            return self
                .views
                .listxattr(&mut self.store, ino)
                .map_err(Errno::from);
        }
        let i = self.get(ino)?;
        xattr::list(&mut self.store, &i).map_err(Errno::from)
    }
}

impl Vfs for Lsfs {
    fn lookup(&mut self, parent: Ino, name: &[u8]) -> VfsResult<Attr> {
        self.following(|fs| fs.lookup_once(parent, name))
    }

    fn forget(&mut self, ino: Ino, nlookup: u64) {
        if let Some(c) = self.inodes.get_mut(&ino) {
            c.lookups = c.lookups.saturating_sub(nlookup);
        }
        if let Err(err) = self.maybe_destroy(ino) {
            tracing::warn!("deleting inode {ino} after its last reference: {err}");
        }
    }

    fn getattr(&mut self, ino: Ino) -> VfsResult<Attr> {
        self.following(|fs| fs.getattr_once(ino))
    }

    fn setattr(&mut self, ino: Ino, set: &SetAttr) -> VfsResult<Attr> {
        self.mutable()?;
        let mut i = self.get(ino)?;
        let now = self.store.clock().now();
        if let Some(size) = set.size {
            if i.kind() == FileKind::Dir {
                return Err(Errno::ISDIR);
            }
            if i.kind() != FileKind::File {
                return Err(Errno::INVAL);
            }
            // The pending set holds whole blocks over the old size: a
            // truncate would have to reach into it (docs/ATOMIC.md).
            if self.atomic.contains(ino) {
                return Err(Errno::BUSY);
            }
            if size > i.size {
                self.reserve(1)?;
            }
            let shrinks = size < i.size;
            self.compaction.note_change(ino);
            if self.truncates_later(&i, size) {
                self.truncate_later(&mut i, size)?;
            }
            // What is left past `size` after a background truncate is at
            // most the rest of the new last block, to zero.
            file::truncate(&mut self.store, &mut i, size)?;
            i.mtime = now;
            i.ctime = now;
            if shrinks {
                // Growing needs no operation: the size in the inode image
                // says it. Shrinking drops blocks, which replay must do.
                self.oplog.push(Item::Truncate { ino, size }, &[ino]);
            }
        }
        if let Some(mode) = set.mode {
            i.mode = (i.mode & libc::S_IFMT) | (mode & 0o7777);
            i.ctime = now;
        }
        if set.uid.is_some() || set.gid.is_some() {
            if let Some(u) = set.uid {
                i.uid = u;
            }
            if let Some(g) = set.gid {
                i.gid = g;
            }
            i.ctime = now;
        }
        let resolve = |t: TimeSet| match t {
            TimeSet::Now => now,
            TimeSet::At(ts) => ts,
        };
        if let Some(t) = set.atime {
            i.atime = resolve(t);
            i.ctime = now;
        }
        if let Some(t) = set.mtime {
            i.mtime = resolve(t);
            i.ctime = now;
        }
        if let Some(c) = set.ctime {
            i.ctime = c;
        }
        let mut attr = i.attr();
        self.atomic.patch_attr(&mut attr);
        self.put(i);
        self.after_change()?;
        Ok(attr)
    }

    fn readlink(&mut self, ino: Ino) -> VfsResult<Vec<u8>> {
        self.following(|fs| fs.readlink_once(ino))
    }

    fn mknod(
        &mut self,
        parent: Ino,
        name: &[u8],
        mode: u32,
        rdev: u32,
        ctx: &Ctx,
    ) -> VfsResult<Attr> {
        let kind = FileKind::from_mode(mode).ok_or(Errno::INVAL)?;
        if kind == FileKind::Dir || kind == FileKind::Symlink {
            return Err(Errno::INVAL);
        }
        let i = self.new_inode(parent, name, mode, rdev, &[], ctx)?;
        self.after_change()?;
        Ok(i.attr())
    }

    fn mkdir(&mut self, parent: Ino, name: &[u8], mode: u32, ctx: &Ctx) -> VfsResult<Attr> {
        let i = self.new_inode(parent, name, libc::S_IFDIR | (mode & 0o7777), 0, &[], ctx)?;
        self.after_change()?;
        Ok(i.attr())
    }

    fn unlink(&mut self, parent: Ino, name: &[u8]) -> VfsResult<()> {
        self.mutable()?;
        check_name(name).map_err(|x| if x == Errno::EXIST { Errno::ISDIR } else { x })?;
        let ent = self.unlink_checks(parent, name)?;
        self.unlink_apply(parent, name, &ent, self.store.clock().now())?;
        self.oplog.push(
            Item::Unlink {
                parent,
                name: name.to_vec(),
            },
            &[parent, ent.ino],
        );
        self.after_change()
    }

    fn rmdir(&mut self, parent: Ino, name: &[u8]) -> VfsResult<()> {
        self.mutable()?;
        if name == b"." {
            return Err(Errno::INVAL);
        }
        if name == b".." {
            return Err(Errno::NOTEMPTY);
        }
        check_name(name)?;
        let ent = self.rmdir_checks(parent, name)?;
        self.rmdir_apply(parent, name, &ent, self.store.clock().now())?;
        self.oplog.push(
            Item::Rmdir {
                parent,
                name: name.to_vec(),
            },
            &[parent, ent.ino],
        );
        self.after_change()
    }

    fn symlink(&mut self, parent: Ino, name: &[u8], target: &[u8], ctx: &Ctx) -> VfsResult<Attr> {
        if target.len() > SYMLINK_MAX_BYTES {
            return Err(Errno::NAMETOOLONG);
        }
        if target.is_empty() {
            return Err(Errno::NOENT);
        }
        let i = self.new_inode(parent, name, libc::S_IFLNK | 0o777, 0, target, ctx)?;
        self.after_change()?;
        Ok(i.attr())
    }

    fn rename(
        &mut self,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        flags: u32,
    ) -> VfsResult<()> {
        self.mutable()?;
        let Some(plan) = self.rename_checks(parent, name, newparent, newname, flags)? else {
            return Ok(());
        };
        self.reserve(8)?;
        let touched = self.rename_apply(
            (parent, name),
            (newparent, newname),
            flags,
            plan,
            self.store.clock().now(),
        )?;
        self.oplog.push(
            Item::Rename {
                parent,
                name: name.to_vec(),
                newparent,
                newname: newname.to_vec(),
                flags,
            },
            &touched,
        );
        let exchange = flags & RENAME_EXCHANGE != 0;
        let app = newname.len() + if exchange { name.len() } else { 0 };
        self.write_amp.note_app(app as u64);
        self.after_change()
    }

    fn link(&mut self, ino: Ino, newparent: Ino, newname: &[u8]) -> VfsResult<Attr> {
        self.mutable()?;
        check_name(newname)?;
        self.check_reserved(newparent, newname)?;
        self.link_checks(ino, newparent, newname)?;
        self.reserve(4)?;
        let i = self.link_apply(ino, newparent, newname, self.store.clock().now())?;
        self.write_amp.note_app(newname.len() as u64);
        self.oplog.push(
            Item::Link {
                ino,
                parent: newparent,
                name: newname.to_vec(),
            },
            &[newparent, ino],
        );
        self.inodes.get_mut(&ino).expect("put").lookups += 1;
        self.after_change()?;
        Ok(i.attr())
    }

    fn open(&mut self, ino: Ino, _flags: i32) -> VfsResult<()> {
        if is_virtual(ino) {
            return self
                .views
                .getattr(&mut self.store, ino)
                .map(|_| ())
                .map_err(Errno::from);
        }
        self.load(ino)?.opens += 1;
        Ok(())
    }

    fn release(&mut self, ino: Ino) {
        if let Some(c) = self.inodes.get_mut(&ino) {
            c.opens = c.opens.saturating_sub(1);
            // The last close drops pending atomic writes, as F2FS does at
            // the last writer's release.
            if c.opens == 0 {
                self.atomic.drop_file(ino);
            }
        }
        if let Err(err) = self.maybe_destroy(ino) {
            tracing::warn!("deleting inode {ino} after its last close: {err}");
        }
    }

    fn read(&mut self, ino: Ino, offset: u64, size: u32) -> VfsResult<Vec<u8>> {
        self.following(|fs| fs.read_once(ino, offset, size))
    }

    fn seek_data_or_hole(&mut self, ino: Ino, offset: u64, data: bool) -> VfsResult<Option<u64>> {
        self.following(|fs| fs.seek_data_or_hole_once(ino, offset, data))
    }

    fn write(&mut self, ino: Ino, offset: u64, data: &[u8]) -> VfsResult<u32> {
        self.mutable()?;
        let mut i = self.regular_file(ino)?;
        if self.atomic.contains(ino) {
            self.atomic_write(ino, offset, data)?;
            self.cleaner.last_activity = self.store.clock().mono();
            return Ok(data.len() as u32);
        }
        self.reserve(data.len() as u64 / file::BLOCK + 2)?;
        self.compaction.note_change(ino);
        if offset
            .checked_add(data.len() as u64)
            .is_none_or(|end| end > file::MAX_FILE_BYTES)
        {
            return Err(Errno::FBIG);
        }
        // In pieces of at most a quarter of the cache, with a checkpoint in
        // between when needed: one large write must not fill the cache with
        // more dirty blocks than it can hold.
        let chunk = self.chunk_bytes();
        let mut done = 0usize;
        loop {
            let pos = offset + done as u64;
            let n = ((chunk - pos % file::BLOCK) as usize).min(data.len() - done);
            self.store
                .note_user_write(ino, (n as u64).div_ceil(file::BLOCK));
            file::write(&mut self.store, &mut i, pos, &data[done..done + n])?;
            self.write_amp.note_app(n as u64);
            let now = self.store.clock().now();
            i.mtime = now;
            i.ctime = now;
            self.put(i);
            self.after_change()?;
            done += n;
            if done >= data.len() {
                break;
            }
            i = self.get(ino)?;
        }
        Ok(data.len() as u32)
    }

    /// fsync and fdatasync of any inode: one record with every operation
    /// not yet in one, the images of the inodes they changed and of `ino`,
    /// and the dirty data of those that are regular files; then one flush.
    /// A checkpoint instead if that does not fit a record.
    fn fsync(&mut self, ino: Ino, _datasync: bool) -> VfsResult<()> {
        if self.view.is_some() || is_virtual(ino) {
            return Ok(());
        }
        self.mutable()?;
        self.load(ino)?;
        if self.atomic.committed == Some(ino) && self.oplog.pending().is_empty() {
            // Its atomic commit made it durable, and nothing changed since.
            self.atomic.stats.fsyncs_skipped += 1;
            return Ok(());
        }
        if !self.fsync_record(ino)? {
            // One flush: no data-stream records (see Store::checkpoint).
            self.store.next_checkpoint_one_flush();
            self.checkpoint_for("fsync")?;
        }
        Ok(())
    }

    fn readdir(&mut self, ino: Ino, offset: u64, max_entries: usize) -> VfsResult<Vec<DirEntry>> {
        self.following(|fs| fs.readdir_once(ino, offset, max_entries))
    }

    fn statfs(&mut self) -> VfsResult<StatFs> {
        let s = &self.store;
        let seg = s.geo().segment_blocks as u64;
        let total = s.geo().total_segment_blocks();
        let free_segs = s.segs().free_count() * seg;
        // Free is what the current tree and the snapshots do not hold: dead
        // blocks that only plain checkpoints keep are given up before ENOSPC
        // (the cleaner presses and drops the oldest checkpoints), so `df`
        // drops as soon as removed files' blocks are freed. Blocks of
        // deleted files still queued (`delete.rs`) are live until then and
        // not offered: a snapshot may hold them, and freeing them writes
        // DAT blocks. Blocks not yet placed count as held, with their
        // metadata.
        let (live, snap) = s.segs().held();
        let pending = s.pending_blocks() as u64 * 2;
        let unheld = total.saturating_sub(live + snap + pending);
        // What filling writes besides file data (the DAT, B-tree nodes,
        // summaries, checkpoints), and the dead blocks left scattered where
        // cleaning would gain nothing: filling a fresh image writes 97-98 %
        // of the rest (1 GiB, 2 MiB segments), 93 % on a 48 MiB image of
        // 1 MiB segments (tests/statfs.rs).
        let bfree = (unheld - unheld / FILL_OVERHEAD_DIVISOR).max(free_segs);
        let reserve = s.reserve_segments() * seg;
        Ok(StatFs {
            blocks: total,
            bfree,
            bavail: bfree.saturating_sub(reserve),
            files: MAX_INO,
            // Saturating: `next_ino` comes from the disk.
            ffree: MAX_INO.saturating_sub(s.roots().next_ino),
            bsize: 4096,
            namelen: NAME_MAX_BYTES as u32,
            frsize: 4096,
        })
    }

    fn setxattr(&mut self, ino: Ino, name: &[u8], value: &[u8], flags: i32) -> VfsResult<()> {
        self.mutable()?;
        self.reserve(4)?;
        self.setxattr_apply(ino, name, value, flags, self.store.clock().now())?;
        self.write_amp.note_app((name.len() + value.len()) as u64);
        self.oplog.push(
            Item::SetXattr {
                ino,
                name: name.to_vec(),
                value: value.to_vec(),
            },
            &[ino],
        );
        self.after_change()
    }

    fn getxattr(&mut self, ino: Ino, name: &[u8]) -> VfsResult<Vec<u8>> {
        self.following(|fs| fs.getxattr_once(ino, name))
    }

    fn listxattr(&mut self, ino: Ino) -> VfsResult<Vec<Vec<u8>>> {
        self.following(|fs| fs.listxattr_once(ino))
    }

    fn removexattr(&mut self, ino: Ino, name: &[u8]) -> VfsResult<()> {
        self.mutable()?;
        self.removexattr_apply(ino, name, self.store.clock().now())?;
        self.oplog.push(
            Item::RemoveXattr {
                ino,
                name: name.to_vec(),
            },
            &[ino],
        );
        self.after_change()
    }

    fn fallocate(&mut self, ino: Ino, offset: u64, length: u64, mode: i32) -> VfsResult<()> {
        self.mutable()?;
        let how = FallocMode::parse(mode, length)?;
        self.fallocate_file(ino, offset, length, how)
    }

    fn copy_file_range(
        &mut self,
        ino_in: Ino,
        off_in: u64,
        ino_out: Ino,
        off_out: u64,
        len: u64,
    ) -> VfsResult<u64> {
        self.copy_range(ino_in, off_in, ino_out, off_out, len)
    }

    fn sync(&mut self) -> VfsResult<()> {
        // Mounted read-only: nothing can be unwritten (a mount that turned
        // read-only after an error still says so).
        if self.view.is_some() || self.store.opened_read_only() {
            return Ok(());
        }
        self.checkpoint_for("sync").map(|_| ()).map_err(Errno::from)
    }

    fn trim(&mut self, start: u64, len: u64, minlen: u64) -> VfsResult<u64> {
        self.trim_free_space(start, len, minlen)
            .map_err(Errno::from)
    }

    fn read_only(&self) -> bool {
        self.view.is_some()
            || self.store.opened_read_only()
            || self.store.failure().is_some()
            || self.read_errors.tripped()
    }

    fn deferred_io(&self) -> Option<std::sync::Arc<dyn DeferredIo>> {
        Some(self.store.io().clone())
    }

    fn atomic_writes(&self) -> bool {
        true
    }

    fn atomic_start(&mut self, ino: Ino) -> VfsResult<()> {
        Lsfs::atomic_start(self, ino)
    }

    fn atomic_commit(&mut self, ino: Ino) -> VfsResult<()> {
        Lsfs::atomic_commit(self, ino)
    }

    fn atomic_abort(&mut self, ino: Ino) -> VfsResult<()> {
        Lsfs::atomic_abort(self, ino)
    }

    fn atomic_pending(&self, ino: Ino) -> bool {
        self.atomic.contains(ino)
    }

    fn atomic_commit_files(&mut self, inos: &[Ino]) -> VfsResult<()> {
        Lsfs::atomic_commit_files(self, inos)
    }

    fn atomic_abort_files(&mut self, inos: &[Ino]) -> VfsResult<()> {
        Lsfs::atomic_abort_files(self, inos)
    }
}
