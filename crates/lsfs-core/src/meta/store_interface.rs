//! What the rest of the engine sees of the store, and the few changes it
//! asks of it by name.
//!
//! The store's fields are private to `meta/` (`pub(super)` in
//! meta/store.rs): its modules are the store's own code, split by concept,
//! and keep its state consistent between them. Everyone else (the file
//! system, the cleaner, fsck, the tools and the tests) reads through the
//! shared views below (the geometry, the segment and checkpoint tables,
//! the counters, [`StoreRoots`]) and changes the store only through its
//! methods, so that an invariant the store keeps cannot be broken from
//! outside it.

use crate::cache::BlockCache;
use crate::device::{DeviceCounters, IoQueue};
use crate::error::{Error, Result};
use crate::layout::Geometry;
use crate::log::chain::{segment_records, FoundRecord};
use crate::log::superblock::{
    Superblock, FEATURE_INCOMPAT_COMPRESSED_RECORDS, FEATURE_INCOMPAT_INLINE_ITEMS,
    FEATURE_INCOMPAT_MOVE_RECORDS, FEATURE_INCOMPAT_ZSTD_FRAMES,
};
use crate::meta::cpfile::CpTable;
use crate::meta::dat_journal::DatJournal;
use crate::meta::store::{Store, StoreConfig, StoreStats};
use crate::meta::stream::Streams;
use crate::meta::sufile::{SegTable, SU_PER_BLOCK};

/// The roots of the metadata files and the counters a super root carries
/// (log/super_root.rs), as they are in the checkpoint being built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreRoots {
    /// The checkpoint being built: one more than the last one written.
    pub cur_cno: u64,
    /// End of the DAT: virtual block numbers from here on were never handed out.
    pub next_vblock: u64,
    /// Next inode number to hand out.
    pub next_ino: u64,
    /// Root of the DAT's block map (physical).
    pub dat_root: u64,
    pub ifile_root: u64,
    pub cpfile_root: u64,
    pub sufile_root: u64,
    /// Root of the SSA's block map, 0 = no segment plugged.
    pub ssa_root: u64,
    pub inodes_used: u64,
    pub blocks_used: u64,
}

impl Store {
    /// The layout of the device, fixed at mkfs.
    pub fn geo(&self) -> Geometry {
        self.geo
    }

    /// The superblock as the store last wrote or read it.
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    /// The settings the store was opened with.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// Whether the store was opened read-only (not: turned read-only
    /// after an error, see [`Store::failure`]).
    pub fn opened_read_only(&self) -> bool {
        self.config.read_only
    }

    /// Whether the device suits threaded logging
    /// (`BlockDevice::fills_holes`).
    pub fn device_fills_holes(&self) -> bool {
        self.dev.fills_holes()
    }

    /// Tell the device this read-only view: the file system as of the
    /// newest log record found (`BlockDevice::fix_view`). Not `self.seq`,
    /// which an open sets past the records that may follow the chain's
    /// end; every record written after the newest one found, by a writer
    /// elsewhere, has a higher number.
    pub fn fix_view(&self) {
        let newest = self.segs.last_seq.iter().copied().max().unwrap_or(0);
        self.dev.fix_view(self.sb.fs_id, newest);
    }

    /// Make everything written so far durable and visible to readers
    /// elsewhere (`BlockDevice::publish`).
    pub fn publish(&self) -> Result<()> {
        self.dev.publish()
    }

    /// Change how long plain checkpoints are kept (`protection_secs`) on a
    /// mounted store: from the next checkpoint on.
    pub fn set_protection_secs(&mut self, secs: u64) {
        self.config.protection_secs = secs;
    }

    /// A new read-only handle on this store's storage, if a writer
    /// elsewhere may change it (`BlockDevice::reopen_read_only`).
    pub fn reopen_device(&self) -> Option<Result<Box<dyn crate::device::BlockDevice>>> {
        self.dev.reopen_read_only()
    }

    /// The counters `lsfs stats` shows (a copy: records compressed after
    /// the engine's lock count what their frames saved once made).
    pub fn stats(&self) -> StoreStats {
        self.stats_with_later()
    }

    /// The segment counters (the SUFILE in memory).
    pub fn segs(&self) -> &SegTable {
        &self.segs
    }

    /// The checkpoints and snapshots (the CPFILE in memory).
    pub fn cps(&self) -> &CpTable {
        &self.cps
    }

    /// The block cache, for its size and counters.
    pub fn cache(&self) -> &BlockCache {
        &self.cache
    }

    /// The I/O queue in front of the device (device/io_queue.rs): shared,
    /// so that a caller may run or defer its writes outside the store.
    pub fn io(&self) -> &std::sync::Arc<IoQueue> {
        &self.io
    }

    /// Run `f` on this store leaving no trace of its reads: the cache holds
    /// the same blocks with the same replacement state and counters, the
    /// mirror of the DAT's block map learns nothing, and the device's read
    /// counters do not count them. For checks that must not change what
    /// the engine does next (fs/invariants.rs); `f` must only read.
    pub(crate) fn observe<T>(&mut self, f: impl FnOnce(&mut Store) -> T) -> T {
        let before = self.dev.stats().snapshot();
        self.cache.set_observing(true);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(self)));
        self.cache.set_observing(false);
        self.dev.stats().forget_reads_since(&before);
        r.unwrap_or_else(|p| std::panic::resume_unwind(p))
    }

    /// What the device has done so far (reads, writes, flushes, discards).
    pub fn device_counters(&self) -> DeviceCounters {
        self.dev.stats().snapshot()
    }

    /// Whether the device would serve a read of segment `seg` from a
    /// cache (`BlockDevice::is_cached`; `None`: every read costs the same).
    pub fn segment_cached(&self, seg: u64) -> Option<bool> {
        let at = self.geo().byte_offset(self.geo().segment_start(seg));
        let len = self.geo().segment_blocks as u64 * crate::layout::BLOCK_BYTES as u64;
        self.dev.is_cached(at, len)
    }

    /// The device's own counters, by name (`BlockDevice::extra_counters`).
    pub fn device_extra_counters(&self) -> Vec<(&'static str, u64)> {
        self.dev.extra_counters()
    }

    /// The write streams and their counters.
    pub fn streams(&self) -> &Streams {
        &self.streams
    }

    /// The records of segment `seg` as the device holds them, in order
    /// (log/chain.rs, `segment_records`).
    pub fn segment_records(&mut self, seg: u64) -> Result<Vec<FoundRecord>> {
        let fs_id = self.sb.fs_id;
        segment_records(&mut *self.dev, &self.geo, fs_id, seg)
    }

    /// The DAT journal's blocks and the DAT blocks it tracks (fsck).
    pub(crate) fn dat_journal(&self) -> &DatJournal {
        &self.dat_journal
    }

    /// The snapshots' checkpoint numbers, sorted, as the store keeps them
    /// beside the CPFILE's flags (fsck compares the two).
    pub(crate) fn snapshot_cnos(&self) -> &[u64] {
        &self.snapshots
    }

    /// Entries in the memory mirror of the DAT's block map (`lsfs memory`).
    pub(crate) fn dat_mirror_len(&self) -> usize {
        self.dat_map.len()
    }

    /// DAT blocks the reuse of DAT entries tracks, and its bound (`lsfs memory`).
    pub(crate) fn dat_reuse_tracked_blocks(&self) -> (u64, u64) {
        self.dat_reuse.tracked_blocks()
    }

    /// The roots of the metadata files and the counters, now.
    pub fn roots(&self) -> StoreRoots {
        StoreRoots {
            cur_cno: self.cur_cno,
            next_vblock: self.next_vblock,
            next_ino: self.next_ino,
            dat_root: self.dat_root,
            ifile_root: self.ifile_root,
            cpfile_root: self.cpfile_root,
            sufile_root: self.sufile_root,
            ssa_root: self.ssa_root,
            inodes_used: self.inodes_used,
            blocks_used: self.blocks_used,
        }
    }

    /// The segment the log appends to now, and its next block.
    pub fn log_head(&self) -> (u64, u32) {
        (self.cur_seg, self.cur_off)
    }

    /// Whether `seg` is open for appending: the log's current segment or
    /// the one reserved to follow it.
    pub fn is_log_head_segment(&self, seg: u64) -> bool {
        seg == self.cur_seg || seg == self.next_seg
    }

    /// The oldest record sequence number the superblocks' recovery chain
    /// may start from: segments with records from it on are not to be
    /// cleaned (recovery reads them).
    pub(crate) fn recovery_chain_from(&self) -> u64 {
        self.sb_slot_seq.iter().copied().min().unwrap_or(0)
    }

    // ---- inode numbers and the inode count ----

    /// Hand out the next inode number, unless it would reach `limit`.
    /// The file system unmounted: the device gives back what it holds
    /// for it (an object store's lease, `BlockDevice::release`).
    pub fn release_device(&mut self) -> Result<()> {
        self.dev.release()
    }

    pub fn take_ino(&mut self, limit: u64) -> Option<u64> {
        let ino = self.next_ino;
        if ino >= limit {
            return None;
        }
        self.next_ino += 1;
        Some(ino)
    }

    /// Recovery met inode `ino` in an fsync record: numbers up to it are
    /// handed out.
    pub fn ino_handed_out(&mut self, ino: u64) {
        self.next_ino = self.next_ino.max(ino + 1);
    }

    /// An inode was created (counted in statfs and the super root).
    pub fn inode_created(&mut self) {
        self.inodes_used += 1;
    }

    /// An inode was deleted. Saturating, as `blocks_used`: the count comes
    /// from the super root and a damaged one may say 0; fsck reports the
    /// difference.
    pub fn inode_deleted(&mut self) {
        self.inodes_used = self.inodes_used.saturating_sub(1);
    }

    // ---- what the file system asks of checkpoints ----

    /// Count a checkpoint about to be written under what asked for it
    /// (`StoreStats::checkpoints_by_cause`).
    pub fn count_checkpoint_cause(&mut self, cause: &'static str) {
        *self.stats.checkpoints_by_cause.entry(cause).or_default() += 1;
    }

    /// The namespace and metadata operations an fsync record just written
    /// carried (`StoreStats::dsync_ops_written`).
    pub fn count_dsync_ops(&mut self, nops: u64) {
        self.stats.dsync_ops_written += nops;
    }

    /// The next checkpoint is an fsync's: written with one flush, without
    /// data-stream records (see `Store::checkpoint`).
    pub fn next_checkpoint_one_flush(&mut self) {
        self.streams.one_flush_next = true;
    }

    /// From the next checkpoint on, fsync records may carry items: the
    /// superblocks and the checkpoint say so before any such record is
    /// written (an older image gets the feature at its first read-write mount).
    pub fn enable_inline_items(&mut self) {
        self.sb.features_incompat |= FEATURE_INCOMPAT_INLINE_ITEMS;
    }

    /// Let cleaning passes write move records from now on (an older image,
    /// mounted read-write: its checkpoint and superblocks carry the flag
    /// before any move record is written).
    pub fn enable_move_records(&mut self) {
        self.sb.features_incompat |= FEATURE_INCOMPAT_MOVE_RECORDS;
    }

    /// Whether the image may hold shared blocks (feature CLONES).
    pub fn clones_enabled(&self) -> bool {
        self.sb.clones()
    }

    /// Let DAT entries count extra users from now on: the caller writes a
    /// checkpoint and settles both superblocks before the first clone, so
    /// that no build without the feature reads an image holding one.
    pub fn enable_clones(&mut self) {
        self.sb.features_incompat |= crate::log::superblock::FEATURE_INCOMPAT_CLONES;
    }

    /// A mount that compresses marks the image before its first compressed
    /// record: the mount's checkpoint and both superblocks carry the flag,
    /// and ZSTD_FRAMES too when it compresses with zstd. `mkfs`: a new
    /// image, which compresses as [`crate::meta::store::MKFS_COMPRESS`]
    /// says unless told.
    pub fn enable_compressed_records(&mut self, mkfs: bool) {
        use crate::meta::store::{Compress, MKFS_COMPRESS};
        let default = if mkfs { MKFS_COMPRESS } else { Compress::Off };
        match self.config.compress.unwrap_or(default) {
            Compress::Off => {}
            Compress::Lz4 => self.sb.features_incompat |= FEATURE_INCOMPAT_COMPRESSED_RECORDS,
            Compress::Zstd(_) => {
                self.sb.features_incompat |=
                    FEATURE_INCOMPAT_COMPRESSED_RECORDS | FEATURE_INCOMPAT_ZSTD_FRAMES
            }
        }
    }

    /// Whether file `ino`'s data is written raw from now on (its
    /// `nocompress` attribute; already compressed data gains nothing).
    pub fn set_nocompress(&mut self, ino: u64, on: bool) {
        if on {
            self.nocompress.insert(ino);
        } else {
            self.nocompress.remove(&ino);
        }
    }

    /// Delete plain checkpoint `cno` (written by the next checkpoint): not
    /// a snapshot, and not the latest one, which recovery starts from.
    pub fn delete_checkpoint(&mut self, cno: u64) -> Result<()> {
        let entry = *self
            .cps
            .entries
            .get(&cno)
            .ok_or_else(|| Error::invalid(format!("checkpoint {cno} does not exist")))?;
        if entry.is_snapshot() {
            return Err(Error::invalid(format!(
                "checkpoint {cno} is a snapshot: demote it first"
            )));
        }
        if Some(cno) == self.cps.latest().map(|c| c.cno) {
            return Err(Error::invalid(format!(
                "checkpoint {cno} is the latest one and cannot be deleted"
            )));
        }
        self.cps.remove(cno);
        Ok(())
    }

    /// Drop the clean blocks of the cache (the next reads go to the device).
    pub fn drop_clean_cache(&mut self) {
        self.cache.drop_clean();
    }

    // ---- segment flags the cleaner changes ----

    /// Re-age a segment (late abort): it looks freshly written, so it is
    /// not picked again soon.
    pub fn reage_segment(&mut self, seg: u64) {
        let now = self.now();
        self.segs.usage[seg as usize].lastmod_secs = now;
        self.segs.dirty_blocks.insert(seg / SU_PER_BLOCK);
    }

    // ---- what the cleaner asks (gc/) ----

    /// The cleaner prepared `seg` for plugging with `holes` (slot offsets,
    /// ascending): the next checkpoint may fill them.
    pub(crate) fn offer_holes(&mut self, seg: u64, holes: Vec<u32>) {
        self.plugs.prepare(seg, holes, self.cur_cno + 1);
    }

    /// Relocated block `v` is dead but still needed (by a snapshot or a
    /// kept checkpoint): it is placed without counting as live.
    pub(crate) fn place_moved_dead(&mut self, v: u64) {
        self.moved_dead.insert(v);
    }

    /// The DAT journal's block at `pos` is in a victim: the next checkpoint
    /// writes the journal elsewhere, and no longer names this one.
    pub(crate) fn drop_journal_block(&mut self, pos: u64) {
        self.dat_journal.written.retain(|&a| a != pos);
    }

    /// Mark `seg` plugged in the SUFILE: its summary is the SSA's now.
    pub(crate) fn mark_plugged(&mut self, seg: u64) {
        self.segs.usage[seg as usize].flags |= crate::meta::sufile::SU_PLUGGED;
        self.segs.dirty_blocks.insert(seg / SU_PER_BLOCK);
    }
}
