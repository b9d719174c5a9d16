//! Atomic writes, F2FS's interface (docs/ATOMIC.md): after
//! [`Lsfs::atomic_start`] a file's writes wait here, in memory, block by
//! block, until [`Lsfs::atomic_commit`] applies all of them and makes them
//! durable with one fsync record and one flush, or [`Lsfs::atomic_abort`]
//! drops them.
//!
//! They are kept out of the block cache on purpose: whatever is dirty there
//! may reach the device at any moment (a checkpoint for cache pressure or
//! the timer, another file's fsync, a snapshot), and a crash would then keep
//! part of the set. Here nothing writes them but the commit, which applies
//! the whole set and writes its record under the same `&mut Lsfs`, so no
//! checkpoint can come between; the record (with any data-stream records it
//! names) is replayed whole or not at all (`replay.rs`, `log/chain.rs`).
//!
//! Bounded, since they live in memory and the commit must fit the cache's
//! dirty half: [`FILE_MAX_BLOCKS`] per file and [`MOUNT_MAX_BLOCKS`] per
//! mount (less on a small cache). A write past a bound fails, and so does
//! every later write and the commit of that file: the set is never
//! committed in part.

use super::{file, Lsfs};
use lsfs_vfs::{Attr, Errno, FileKind, Ino, VfsResult};
use std::collections::{BTreeMap, HashMap};

/// Most pending blocks of one file (4 MiB): one record's payload
/// (`MAX_RECORD_PAYLOAD`). Past it a write fails with EFBIG.
pub const FILE_MAX_BLOCKS: u64 = 1024;
/// Most files one [`Lsfs::atomic_commit_files`] takes.
pub const COMMIT_MAX_FILES: usize = 64;
/// Most pending blocks of all files of a mount (16 MiB), and at most a
/// quarter of the block cache (so that a commit's blocks fit its dirty
/// half). Past it a write fails with ENOSPC.
pub const MOUNT_MAX_BLOCKS: u64 = 4096;

const BLOCK: usize = file::BLOCK as usize;

/// One file's pending writes.
#[derive(Debug)]
struct PendingFile {
    /// Whole blocks, by file block number: each starts as the file's block
    /// (or zeros) and takes the writes that fall on it.
    blocks: BTreeMap<u64, Box<[u8]>>,
    /// The file's size with the pending writes.
    size: u64,
    /// A write failed (past a bound): the set cannot be committed whole.
    failed: Option<Errno>,
}

/// Every file's pending atomic writes, and what became of them.
#[derive(Debug, Default)]
pub struct AtomicWrites {
    files: HashMap<u64, PendingFile>,
    /// Blocks held over all files.
    blocks: u64,
    /// The file whose commit came last, unchanged since (`put` forgets
    /// it): its fsync has nothing to add, as SQLite's fsync right after
    /// each commit finds.
    pub(super) committed: Option<u64>,
    pub stats: AtomicStats,
}

/// Counts since mount, for tests and `lsfs stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AtomicStats {
    pub commits: u64,
    pub aborts: u64,
    /// Sets dropped because their file was closed, or deleted, pending.
    pub dropped: u64,
    pub blocks_committed: u64,
    /// fsyncs with nothing to write after their file's commit.
    pub fsyncs_skipped: u64,
}

impl AtomicWrites {
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    pub fn contains(&self, ino: u64) -> bool {
        self.files.contains_key(&ino)
    }

    /// Blocks pending over all files.
    pub fn blocks(&self) -> u64 {
        debug_assert_eq!(
            self.blocks,
            self.files
                .values()
                .map(|f| f.blocks.len() as u64)
                .sum::<u64>()
        );
        self.blocks
    }

    /// Blocks pending for `ino`.
    pub fn file_blocks(&self, ino: u64) -> u64 {
        self.files.get(&ino).map_or(0, |f| f.blocks.len() as u64)
    }

    fn take(&mut self, ino: u64) -> Option<PendingFile> {
        let f = self.files.remove(&ino)?;
        self.blocks -= f.blocks.len() as u64;
        Some(f)
    }

    /// `attr` as the writer sees it: the size with the pending writes.
    pub(super) fn patch_attr(&self, attr: &mut Attr) {
        if let Some(f) = self.files.get(&attr.ino) {
            attr.size = attr.size.max(f.size);
        }
    }

    /// Forget `ino`'s set: its file was closed or deleted with it pending.
    pub(super) fn drop_file(&mut self, ino: u64) {
        if self.take(ino).is_some() {
            self.stats.dropped += 1;
        }
    }
}

impl Lsfs {
    /// The mount-wide bound in blocks: [`MOUNT_MAX_BLOCKS`], or a quarter
    /// of the cache if that is less.
    pub fn atomic_mount_max_blocks(&self) -> u64 {
        MOUNT_MAX_BLOCKS.min((self.store.cache().capacity_blocks() as u64 / 4).max(1))
    }

    /// Start holding `ino`'s writes (see the module). Already started: no
    /// change, as F2FS.
    pub fn atomic_start(&mut self, ino: Ino) -> VfsResult<()> {
        self.mutable()?;
        let i = self.get(ino)?;
        if i.kind() != FileKind::File {
            return Err(Errno::INVAL);
        }
        self.atomic.files.entry(ino).or_insert(PendingFile {
            blocks: BTreeMap::new(),
            size: i.size,
            failed: None,
        });
        Ok(())
    }

    /// Drop `ino`'s pending writes, with no device I/O. Not started: no
    /// change, as F2FS.
    pub fn atomic_abort(&mut self, ino: Ino) -> VfsResult<()> {
        if self.atomic.take(ino).is_some() {
            self.atomic.stats.aborts += 1;
        }
        Ok(())
    }

    /// Apply `ino`'s pending writes and make them durable as one unit: one
    /// fsync record (a checkpoint if its items do not fit one) and one
    /// flush. Not started: an fsync, as F2FS.
    ///
    /// On ENOSPC, found before anything is applied, the set stays pending
    /// (the writer may free space and commit again, or abort). A set that a
    /// write past a bound broke is dropped, with that write's error. A
    /// failure while applying stops the mount (read-only): the half-applied
    /// set must never reach the device.
    pub fn atomic_commit(&mut self, ino: Ino) -> VfsResult<()> {
        self.mutable()?;
        if !self.atomic.contains(ino) {
            return lsfs_vfs::Vfs::fsync(self, ino, false);
        }
        self.atomic_commit_files(&[ino])
    }

    /// Commit the pending writes of every file of `inos` as one unit: one
    /// fsync record group and one flush holds all of them, so a crash keeps
    /// all of the sets or none. Listed files not in atomic mode are made
    /// durable in the same record, as by fsync. At most
    /// [`COMMIT_MAX_FILES`] files (E2BIG), at least one (EINVAL).
    ///
    /// The errors of [`Lsfs::atomic_commit`], for the whole unit: if one
    /// set is broken, the broken ones are dropped, the others stay pending
    /// and none is applied; on ENOSPC all stay pending.
    pub fn atomic_commit_files(&mut self, inos: &[Ino]) -> VfsResult<()> {
        self.mutable()?;
        let mut inos = inos.to_vec();
        inos.sort_unstable();
        inos.dedup();
        if inos.is_empty() {
            return Err(Errno::INVAL);
        }
        if inos.len() > COMMIT_MAX_FILES {
            return Err(Errno::E2BIG);
        }
        for &ino in &inos {
            if self.get(ino)?.kind() != FileKind::File {
                return Err(Errno::INVAL);
            }
        }
        let broken: Vec<(u64, Errno)> = inos
            .iter()
            .filter_map(|i| Some((*i, self.atomic.files.get(i)?.failed?)))
            .collect();
        if let Some(&(_, err)) = broken.first() {
            for (ino, _) in broken {
                self.atomic.take(ino);
                self.atomic.stats.aborts += 1;
            }
            return Err(err);
        }
        let n: u64 = inos.iter().map(|&i| self.atomic.file_blocks(i)).sum();
        // Room on the device for the blocks and their metadata, before
        // anything changes (this may checkpoint or clean: the sets are not
        // in the cache, so neither sees them).
        self.reserve(n + 2 * inos.len() as u64)?;
        // Room in the cache's dirty half for the blocks and the tree nodes
        // they dirty, so that applying them needs no checkpoint midway.
        let cache = self.store.cache().capacity_blocks() as u64;
        if (self.store.pending_blocks() as u64 + 2 * n) * 2 > cache {
            self.checkpoint_for("atomic commit: cache")?;
        }
        let sets: Vec<(u64, PendingFile)> = inos
            .iter()
            .filter_map(|&i| Some((i, self.atomic.take(i)?)))
            .collect();
        for (ino, f) in &sets {
            if let Err(err) = self.atomic_apply(*ino, f) {
                self.store.fail(&err);
                return Err(Errno::from(err));
            }
        }
        if !self.fsync_record_of(&inos)? {
            // One flush: no data-stream records (see Store::checkpoint).
            self.store.next_checkpoint_one_flush();
            self.checkpoint_for("atomic commit")?;
        }
        self.atomic.stats.commits += sets.len() as u64;
        self.atomic.stats.blocks_committed += n;
        self.atomic.committed = (inos.len() == 1).then_some(inos[0]);
        Ok(())
    }

    /// [`Lsfs::atomic_abort`] of every file of `inos`.
    pub fn atomic_abort_files(&mut self, inos: &[Ino]) -> VfsResult<()> {
        for &ino in inos {
            self.atomic_abort(ino)?;
        }
        Ok(())
    }

    /// Write the set into the file, in memory (the cache holds the blocks
    /// dirty until the record that follows).
    fn atomic_apply(&mut self, ino: u64, f: &PendingFile) -> crate::error::Result<()> {
        let mut i = self.get(ino)?;
        let size = f.size.max(i.size);
        let mut bytes = 0;
        for (&b, data) in &f.blocks {
            let off = b * file::BLOCK;
            assert!(off < size, "a pending block past the pending size");
            let n = (size - off).min(file::BLOCK) as usize;
            self.store.note_user_write(ino, 1);
            file::write(&mut self.store, &mut i, off, &data[..n])?;
            bytes += n as u64;
        }
        assert_eq!(i.size, size, "the writes end at the pending size");
        if !f.blocks.is_empty() {
            let now = self.store.clock().now();
            i.mtime = now;
            i.ctime = now;
        }
        self.write_amp.note_app(bytes);
        self.put(i);
        Ok(())
    }

    /// A write to a file in atomic mode: into its pending set.
    pub(super) fn atomic_write(&mut self, ino: u64, offset: u64, data: &[u8]) -> VfsResult<()> {
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= file::MAX_FILE_BYTES)
            .ok_or(Errno::FBIG)?;
        if data.is_empty() {
            return Ok(());
        }
        let mount_max = self.atomic_mount_max_blocks();
        let inode = self.get(ino)?;
        let Lsfs { atomic, store, .. } = self;
        let held = atomic.blocks;
        let f = atomic.files.get_mut(&ino).expect("in atomic mode");
        if let Some(err) = f.failed {
            return Err(err);
        }
        let (first, last) = (offset / file::BLOCK, (end - 1) / file::BLOCK);
        let new = (first..=last).filter(|b| !f.blocks.contains_key(b)).count() as u64;
        let total = f.blocks.len() as u64 + new;
        if total > FILE_MAX_BLOCKS.min(mount_max) {
            f.failed = Some(Errno::FBIG);
            return Err(Errno::FBIG);
        }
        if held + new > mount_max {
            f.failed = Some(Errno::NOSPC);
            return Err(Errno::NOSPC);
        }
        for b in first..=last {
            let block = match f.blocks.entry(b) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => {
                    // The file's block as it is, so that a partial write
                    // keeps the rest of it.
                    let mut base = file::read(store, &inode, b * file::BLOCK, file::BLOCK)
                        .map_err(Errno::from)?;
                    base.resize(BLOCK, 0);
                    e.insert(base.into_boxed_slice())
                }
            };
            let bstart = b * file::BLOCK;
            let from = offset.max(bstart);
            let to = end.min(bstart + file::BLOCK);
            block[(from - bstart) as usize..(to - bstart) as usize]
                .copy_from_slice(&data[(from - offset) as usize..(to - offset) as usize]);
        }
        f.size = f.size.max(end);
        atomic.blocks += new;
        Ok(())
    }

    /// A read of a file in atomic mode: the file with its pending writes.
    pub(super) fn atomic_read(&mut self, ino: u64, offset: u64, len: u64) -> VfsResult<Vec<u8>> {
        let inode = self.get(ino)?;
        let f = &self.atomic.files[&ino];
        let size = f.size.max(inode.size);
        if offset >= size || len == 0 {
            return Ok(Vec::new());
        }
        let end = offset.saturating_add(len).min(size);
        let mut out = file::read(&mut self.store, &inode, offset, end - offset)?;
        out.resize((end - offset) as usize, 0);
        let f = &self.atomic.files[&ino];
        let (first, last) = (offset / file::BLOCK, (end - 1) / file::BLOCK);
        for (&b, block) in f.blocks.range(first..=last) {
            let bstart = b * file::BLOCK;
            let from = offset.max(bstart);
            let to = end.min(bstart + file::BLOCK);
            out[(from - offset) as usize..(to - offset) as usize]
                .copy_from_slice(&block[(from - bstart) as usize..(to - bstart) as usize]);
        }
        Ok(out)
    }
}
