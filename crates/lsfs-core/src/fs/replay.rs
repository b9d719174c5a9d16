//! Recovery's roll-forward of the fsync records written after the last
//! complete checkpoint. Each fsync wrote one or more records, the last of
//! them with its inline items (`log/items.rs`); in images written before
//! inline items, an fsync ended with an inode-image payload block instead.
//! Fsyncs are applied in order, each in three steps:
//!
//! 1. its operations, in order, through the same checks and changes that
//!    made them (`namespace.rs`), so the namespace is exactly the one after
//!    that fsync;
//! 2. its data blocks, adopted into their files where the record holds
//!    them (below);
//! 3. its inode images, which set the exact size, mode, owner and times
//!    (and whose link counts and directory sizes must agree with step 1).
//!
//! Records after the last complete fsync belong to one the crash cut short
//! and are left out. Replay only changes memory: the mount then writes a
//! checkpoint, so a crash during recovery leaves the same records to
//! replay again.
//!
//! Data blocks are adopted, not written again. The live mount wrote each
//! fsync'd block once, into its record, and pointed the block's DAT entry
//! there; the records stay where they are until a checkpoint no longer
//! needs them. Recovery does the same: each block keeps the virtual block
//! number its record's summary gives (claimed before anything else is
//! allocated, `Store::vclaim_replayed`), its DAT entry points into the
//! record, and its segment counts it live (`Store::vplace_replayed`), as the
//! live mount's fsync had done. Recovery used to write every block into its
//! file anew, and the checkpoint that ends it then needed as much space
//! again as the records held: an image filled by a long run of fsyncs with
//! no checkpoint between them no longer mounted (ENOSPC). Now what recovery
//! writes is its checkpoint's metadata (DAT, maps, IFILE, SUFILE): what the
//! live mount's own next checkpoint would have written, which its free-space
//! accounting keeps room for (dirty blocks count twice in
//! `Store::free_blocks`, and the reserve segments hold a checkpoint that
//! spills over). The alternative, bounding the space a recovery would need
//! and checkpointing before free space minus it ran out, would have cost
//! the live mount checkpoints (a whole copy of the data fsync'd since the
//! last one), and its bound would have had to track every block.

use super::inode::{Format, Inode};
use super::{dir, file, Lsfs};
use crate::error::{Error, Result};
use crate::layout::{FIRST_USER_INO, MAX_INO};
use crate::log::chain::FoundRecord;
use crate::log::items::{self, Item};
use crate::log::record::BlockKind;
use crate::meta::ifile::INODE_BYTES;
use lsfs_vfs::{Errno, FileKind, Timespec};
use std::collections::{BTreeSet, HashSet};

/// The records of each complete fsync, in order: each group ends with a
/// record that carries items or an inode-image block.
fn fsync_groups(records: &[FoundRecord]) -> Vec<&[FoundRecord]> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, r) in records.iter().enumerate() {
        let ends = !r.header.inline.is_empty()
            || r.header
                .entries
                .iter()
                .any(|e| e.kind == BlockKind::InodeLog);
        if ends {
            out.push(&records[start..=i]);
            start = i + 1;
        }
    }
    out
}

impl Lsfs {
    /// Roll forward `records` (the DSYNC records after the checkpoint opened).
    pub(super) fn replay(&mut self, records: &[FoundRecord]) -> Result<()> {
        let groups = fsync_groups(records);
        let claimed: BTreeSet<u64> = groups
            .iter()
            .flat_map(|g| g.iter())
            .flat_map(|r| r.header.entries.iter())
            .filter(|e| e.kind == BlockKind::Data)
            .map(|e| e.vblock)
            .collect();
        self.store.vclaim_replayed(&claimed)?;
        let mut adopted = HashSet::new();
        for group in groups {
            self.replay_fsync(group, &mut adopted)?;
        }
        // Blocks of files that a later operation deleted before their data
        // came (an inode deleted since): handed back, nothing points at them.
        let unused: Vec<u64> = claimed
            .into_iter()
            .filter(|v| !adopted.contains(v))
            .collect();
        self.store.vkill_many(&unused)
    }

    fn replay_fsync(&mut self, recs: &[FoundRecord], adopted: &mut HashSet<u64>) -> Result<()> {
        let last = recs.last().expect("a group has records");
        let what = format!(
            "fsync record at block {} (sequence {})",
            last.block, last.header.seq
        );
        let items = items::decode(&last.header.inline, &what)?;
        let ops = items.iter().enumerate().filter(|(_, it)| it.is_operation());
        for (i, it) in ops {
            self.replay_op(it).map_err(|err| {
                replay_error(err, &format!("{what}: item {i} ({})", it.type_name()))
            })?;
        }
        let mut images = Vec::new();
        for r in recs {
            for (i, ent) in r.header.entries.iter().enumerate() {
                let block = r.payload_block(i);
                let at = || format!("{what}: block {block}");
                // A compressed record's blocks stay in their slots, read
                // through its frame (`DatEntry::frame`).
                let frame = if i < r.header.frame_slots as usize {
                    i as u16 + 1
                } else {
                    0
                };
                match ent.kind {
                    BlockKind::Data => self
                        .replay_block(ent.ino, ent.offset, ent.vblock, (block, frame), adopted)
                        .map_err(|err| replay_error(err, &at()))?,
                    BlockKind::InodeLog => {
                        let mut b = self.store.read_log_block(block)?;
                        b.truncate(INODE_BYTES);
                        images.push((ent.ino, b, at()));
                    }
                    _ => {}
                }
            }
        }
        for (i, it) in items.into_iter().enumerate() {
            if let Item::Inode { ino, mut image } = it {
                image.resize(INODE_BYTES, 0);
                images.push((ino, image, format!("{what}: item {i} (inode image)")));
            }
        }
        for (ino, image, at) in images {
            self.replay_image(ino, &image)
                .map_err(|err| replay_error(err, &at))?;
        }
        Ok(())
    }

    /// Inode `ino` if it exists: one an operation deleted has nothing left
    /// to restore (it was unlinked, and open when it was changed).
    fn existing(&mut self, ino: u64) -> Result<Option<Inode>> {
        match self.get(ino) {
            Ok(i) => Ok(Some(i)),
            Err(Error::Errno(_)) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Redo one operation of an fsync: a namespace operation through the
    /// checks and changes the live call made, a change to one inode only
    /// if that inode still exists.
    fn replay_op(&mut self, it: &Item) -> Result<()> {
        // Times come from the inode images afterwards.
        let now = self.store.clock().now();
        match it {
            Item::Create { .. }
            | Item::Link { .. }
            | Item::Unlink { .. }
            | Item::Rmdir { .. }
            | Item::Rename { .. } => self.replay_namespace_op(it, now),
            Item::Truncate { .. }
            | Item::Punch { .. }
            | Item::SetXattr { .. }
            | Item::RemoveXattr { .. } => self.replay_inode_op(it, now),
            Item::Inode { .. } | Item::StreamRecord { .. } | Item::Moved { .. } => {
                unreachable!("images, stream records and moves are not operations")
            }
        }
    }

    fn replay_namespace_op(&mut self, it: &Item, now: Timespec) -> Result<()> {
        match it {
            Item::Create {
                parent,
                ino,
                mode,
                uid,
                gid,
                rdev,
                name,
                target,
            } => {
                self.replay_create_checks(*parent, *ino, name)?;
                self.create_apply(*parent, name, *ino, *mode, (*uid, *gid, *rdev), target, now)?;
                self.store.ino_handed_out(*ino);
            }
            Item::Link { ino, parent, name } => {
                self.link_checks(*ino, *parent, name)?;
                self.link_apply(*ino, *parent, name, now)?;
            }
            Item::Unlink { parent, name } => {
                let ent = self.unlink_checks(*parent, name)?;
                self.unlink_apply(*parent, name, &ent, now)?;
            }
            Item::Rmdir { parent, name } => {
                let ent = self.rmdir_checks(*parent, name)?;
                self.rmdir_apply(*parent, name, &ent, now)?;
            }
            Item::Rename {
                parent,
                name,
                newparent,
                newname,
                flags,
            } => {
                let from = (*parent, &name[..]);
                let to = (*newparent, &newname[..]);
                if let Some(plan) = self.rename_checks(from.0, from.1, to.0, to.1, *flags)? {
                    self.rename_apply(from, to, *flags, plan, now)?;
                }
            }
            _ => unreachable!("{} is not a namespace operation", it.type_name()),
        }
        Ok(())
    }

    /// The checks the live create passed, and what only a damaged record
    /// could break: the inode number is one a create hands out, and free.
    fn replay_create_checks(&mut self, parent: u64, ino: u64, name: &[u8]) -> Result<()> {
        if !(FIRST_USER_INO..MAX_INO).contains(&ino) {
            return Err(Error::corrupt(format!("inode number {ino} out of range")));
        }
        if self.existing(ino)?.is_some() {
            return Err(Error::corrupt(format!("inode {ino} exists already")));
        }
        let d = self.live_dir(parent)?;
        if dir::lookup(&mut self.store, &d, name)?.is_some() {
            return Err(Errno::EXIST.into());
        }
        Ok(())
    }

    /// A change to one inode, skipped if the inode is gone (see
    /// `existing`).
    fn replay_inode_op(&mut self, it: &Item, now: Timespec) -> Result<()> {
        match it {
            Item::Truncate { ino, size } => {
                if let Some(mut i) = self.existing_file(*ino)? {
                    file::truncate(&mut self.store, &mut i, *size)?;
                    self.put(i);
                }
            }
            Item::Punch {
                ino,
                offset,
                length,
            } => {
                if let Some(mut i) = self.existing_file(*ino)? {
                    file::punch(&mut self.store, &mut i, *offset, *length)?;
                    self.put(i);
                }
            }
            Item::SetXattr { ino, name, value } => {
                if self.existing(*ino)?.is_some() {
                    self.setxattr_apply(*ino, name, value, 0, now)?;
                }
            }
            Item::RemoveXattr { ino, name } => {
                if self.existing(*ino)?.is_some() {
                    self.removexattr_apply(*ino, name, now)?;
                }
            }
            _ => unreachable!("{} is not an inode operation", it.type_name()),
        }
        Ok(())
    }

    /// `existing` for an operation only a regular file takes.
    fn existing_file(&mut self, ino: u64) -> Result<Option<Inode>> {
        let i = self.existing(ino)?;
        if let Some(i) = &i {
            if i.kind() != FileKind::File {
                return Err(Error::corrupt(format!("inode {ino} is a {:?}", i.kind())));
            }
        }
        Ok(i)
    }

    /// Make data block `offset` of file `ino` virtual block `v`, held at
    /// device block `block` of a record (noted in `adopted`), unless the
    /// file is gone.
    fn replay_block(
        &mut self,
        ino: u64,
        offset: u64,
        v: u64,
        block: (u64, u16),
        adopted: &mut HashSet<u64>,
    ) -> Result<()> {
        let Some(mut node) = self.existing(ino)? else {
            return Ok(());
        };
        if node.kind() != FileKind::File {
            return Err(Error::corrupt(format!(
                "a data block of inode {ino}, a {:?}",
                node.kind()
            )));
        }
        // The inode image that follows sets the real size.
        file::adopt_block(&mut self.store, &mut node, offset, v, block)?;
        adopted.insert(v);
        self.put(node);
        Ok(())
    }

    /// Set inode `ino`'s size, inline data, mode, owner and times from its
    /// 512-byte image.
    fn replay_image(&mut self, ino: u64, image: &[u8]) -> Result<()> {
        let img = Inode::decode(image, ino)?;
        let Some(mut node) = self.existing(ino)? else {
            return Ok(());
        };
        if img.kind() != node.kind() {
            return Err(Error::corrupt(format!(
                "image of inode {ino} is a {:?}, the inode a {:?}",
                img.kind(),
                node.kind()
            )));
        }
        // Link counts and directory sizes follow from the operations:
        // an image that disagrees means they were not all logged.
        if img.nlink != node.nlink || (node.kind() == FileKind::Dir && img.size != node.size) {
            return Err(Error::corrupt(format!(
                "inode {ino} has {} links and size {} after replay, its image {} and {}",
                node.nlink, node.size, img.nlink, img.size
            )));
        }
        if node.kind() == FileKind::File {
            if img.format == Format::InlineData {
                file::truncate(&mut self.store, &mut node, 0)?;
                file::write(&mut self.store, &mut node, 0, &img.area)?;
            }
            file::truncate(&mut self.store, &mut node, img.size)?;
        }
        node.mode = img.mode;
        node.uid = img.uid;
        node.gid = img.gid;
        node.atime = img.atime;
        node.mtime = img.mtime;
        node.ctime = img.ctime;
        node.crtime = img.crtime;
        self.put(node);
        Ok(())
    }
}

/// An error replaying `at`: a refused operation means the record is
/// damaged (it replayed once, when it was made); a device error stays one.
fn replay_error(err: Error, at: &str) -> Error {
    match err {
        Error::Errno(Errno::IO) => Error::io(
            format!("{at}: replaying it"),
            std::io::Error::from_raw_os_error(libc::EIO),
        ),
        Error::Errno(x) => Error::corrupt(format!("{at} does not replay: {x}")),
        Error::Corrupt { what } => Error::corrupt(format!("{at}: {what}")),
        other => other,
    }
}
