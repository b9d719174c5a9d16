//! The inode journal: changed inodes packed eight to a block, so that a
//! checkpoint writes one block per eight changed inodes instead of one IFILE
//! block per changed inode. Inodes are 512-byte slots of the IFILE, and the
//! inodes a workload changes between two checkpoints rarely share a block
//! (the mounted hot/cold benchmark: about 420 changed inodes in 3,100 IFILE
//! blocks, 0.75 IFILE blocks per overwrite; docs/CLEANER.md §4).
//!
//! - The journal is a metadata file (`IJOURNAL_INO`) like the IFILE: its
//!   blocks are virtual, so the DAT gives them lifetimes, snapshots keep
//!   them, the cleaner moves them and the segment counters count them with
//!   no rule of their own.
//! - A checkpoint appends the inodes changed since the previous one at the
//!   journal's end. Inodes changed before (in the journal already: hot) go
//!   to other blocks than inodes changed for the first time (cold), so that
//!   blocks die together.
//! - A journal block in which every inode has a newer image later in the
//!   journal holds nothing current: it is punched (its block dies).
//! - Reading an inode looks at the journal first, then the IFILE. Opening a
//!   checkpoint reads its journal in block order (later images win). Memory
//!   holds where each inode's newest image is, not the image (the block
//!   cache does).
//! - Two bounds, from [`Store::ijournal_max_blocks`] (B; by default 1/32 of
//!   the device, at most 16,384 blocks):
//!   - more than 4·B current images: the checkpoint writes the images of
//!     the oldest blocks back into the IFILE and punches those blocks, as a
//!     write-ahead log writes back its tail. Hot inodes have newer images
//!     by then, so what goes back is mostly the inodes changed once;
//!   - more than B blocks (so, on average, fewer than half their slots
//!     current): the oldest blocks' current images are appended again and
//!     the blocks punched, as the cleaner does with segments.
//!
//!   They bound the space the journal takes (B blocks), the memory (about
//!   48 bytes per image) and the blocks a mount reads.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::cache::Owner;
use crate::error::{Error, Result};
use crate::layout::{BLOCK_BYTES, FIRST_USER_INO, IJOURNAL_INO, MAX_INO, ORPHAN_INO, ROOT_INO};
use crate::log::record::BlockKind;
use crate::meta::ifile::INODE_BYTES;
use crate::meta::store::{Store, VNodesRo};

/// Where an inode image keeps its inode number (fs/inode.rs; a test there
/// checks that `Inode::encode` puts it here).
pub const IMAGE_INO_AT: usize = 88;
/// Inodes per journal block.
pub const SLOTS: usize = (BLOCK_BYTES / INODE_BYTES) as usize;
/// The journal's default bound: this share of the device's blocks...
pub const AUTO_DEVICE_SHARE: u64 = 32;
/// ... but at most this many blocks.
pub const AUTO_MAX_BLOCKS: u64 = 16384;
/// Current images the journal may hold per block of its bound.
pub const IMAGES_PER_BOUND_BLOCK: u64 = 4;
/// Views of older checkpoints keep their journals read; at most this many.
const VIEW_JOURNALS_MAX: usize = 2;

/// What locates the inodes of one checkpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct InodeTable {
    /// Root of the IFILE's block map (virtual block; 0 = empty).
    pub ifile_root: u64,
    /// Root of the inode journal's block map (virtual block; 0 = empty).
    pub ijournal_root: u64,
}

/// Where an inode's newest image in the journal is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    /// The journal block holding it.
    idx: u64,
    /// A freed mark: the inode is free.
    freed: bool,
}

/// What the journal says of an inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// Not in the journal: the IFILE decides.
    NotHere,
    Freed,
    /// The image is in this journal block.
    In(u64),
}

/// The inode journal of one checkpoint, read into memory, plus (for the live
/// file system) the inodes changed since.
#[derive(Clone, Debug, Default)]
pub struct Journal {
    /// Root of the journal's block map as of the last checkpoint.
    pub root: u64,
    entries: BTreeMap<u64, Entry>,
    /// Current images in each journal block present in the map.
    live: BTreeMap<u64, u32>,
    next_idx: u64,
    /// Images changed since the last checkpoint (`None`: freed).
    pending: BTreeMap<u64, Option<Vec<u8>>>,
}

impl Journal {
    /// A change since the last checkpoint: `Some(None)` if the inode was
    /// freed, `None` if it has not changed.
    pub fn pending(&self, ino: u64) -> Option<Option<&[u8]>> {
        self.pending.get(&ino).map(|p| p.as_deref())
    }

    /// Where the journal (as of the last checkpoint) has `ino`.
    pub fn find(&self, ino: u64) -> Found {
        match self.entries.get(&ino) {
            None => Found::NotHere,
            Some(e) if e.freed => Found::Freed,
            Some(e) => Found::In(e.idx),
        }
    }

    /// Record a change, to be journaled by the next checkpoint.
    pub fn stage(&mut self, ino: u64, image: Option<&[u8]>) {
        if let Some(img) = image {
            assert_eq!(img.len(), INODE_BYTES, "inode {ino}: image size");
            debug_assert_eq!(image_ino(img), ino, "inode {ino}: image names another");
        }
        self.pending.insert(ino, image.map(<[u8]>::to_vec));
    }

    /// Whether changes wait for the next checkpoint.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Inodes the journal holds (as of the last checkpoint).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Journal blocks in the map.
    pub fn blocks(&self) -> usize {
        self.live.len()
    }

    /// Blocks whose every image has a newer one later in the journal (a
    /// checkpoint punches them; fsck reports any it finds).
    pub fn dead_blocks(&self) -> Vec<u64> {
        self.live
            .iter()
            .filter(|(_, &n)| n == 0)
            .map(|(&i, _)| i)
            .collect()
    }

    /// Take in block `idx` holding `items`: they become the newest images of
    /// their inodes. Returns the earlier blocks left with no current image.
    fn absorb(&mut self, idx: u64, items: &[(u64, Option<Vec<u8>>)]) -> Vec<u64> {
        let mut emptied = Vec::new();
        for (ino, image) in items {
            let e = Entry {
                idx,
                freed: image.is_none(),
            };
            if let Some(old) = self.entries.insert(*ino, e) {
                let c = self
                    .live
                    .get_mut(&old.idx)
                    .expect("a journaled inode's block is counted");
                assert!(*c > 0, "journal block {} counted below zero", old.idx);
                *c -= 1;
                if *c == 0 {
                    emptied.push(old.idx);
                }
            }
        }
        *self.live.entry(idx).or_insert(0) += items.len() as u32;
        self.next_idx = self.next_idx.max(idx + 1);
        emptied
    }

    /// Drop `ino`'s entry if block `idx` holds its newest image; says whether it did.
    fn forget_if_in(&mut self, ino: u64, idx: u64) -> bool {
        if self.entries.get(&ino).is_some_and(|e| e.idx == idx) {
            self.entries.remove(&ino);
            *self.live.get_mut(&idx).expect("counted") -= 1;
            true
        } else {
            false
        }
    }
}

fn image_ino(slot: &[u8]) -> u64 {
    u64::from_le_bytes(slot[IMAGE_INO_AT..IMAGE_INO_AT + 8].try_into().unwrap())
}

/// A journal block holding `items` (at most [`SLOTS`]).
pub fn encode_block(items: &[(u64, Option<Vec<u8>>)]) -> Vec<u8> {
    assert!(items.len() <= SLOTS && !items.is_empty());
    let mut b = vec![0u8; BLOCK_BYTES];
    for (slot, (ino, image)) in b.chunks_exact_mut(INODE_BYTES).zip(items) {
        match image {
            Some(img) => slot.copy_from_slice(img),
            None => slot[IMAGE_INO_AT..IMAGE_INO_AT + 8].copy_from_slice(&ino.to_le_bytes()),
        }
    }
    b
}

/// The images in journal block `idx`. Images are checked as inodes when
/// they are read; here only what the journal itself relies on.
pub fn decode_block(b: &[u8], idx: u64) -> Result<Vec<(u64, Option<Vec<u8>>)>> {
    let what = || format!("inode journal block {idx}");
    if b.len() != BLOCK_BYTES {
        return Err(Error::corrupt(format!("{}: {} bytes", what(), b.len())));
    }
    let mut out: Vec<(u64, Option<Vec<u8>>)> = Vec::new();
    for (n, slot) in b.chunks_exact(INODE_BYTES).enumerate() {
        if slot.iter().all(|&x| x == 0) {
            continue;
        }
        let ino = image_ino(slot);
        if !(ino == ROOT_INO || ino == ORPHAN_INO || (FIRST_USER_INO..MAX_INO).contains(&ino)) {
            return Err(Error::corrupt(format!(
                "{}: slot {n} names inode {ino}, not a file's",
                what()
            )));
        }
        if out.iter().any(|(i, _)| *i == ino) {
            return Err(Error::corrupt(format!(
                "{}: inode {ino} twice (slot {n})",
                what()
            )));
        }
        let freed = slot[..4].iter().all(|&x| x == 0);
        let stray = slot
            .iter()
            .enumerate()
            .any(|(i, &x)| x != 0 && !(IMAGE_INO_AT..IMAGE_INO_AT + 8).contains(&i));
        if freed && stray {
            return Err(Error::corrupt(format!(
                "{}: slot {n} (inode {ino}) has mode 0 but is not a freed mark",
                what()
            )));
        }
        out.push((ino, (!freed).then(|| slot.to_vec())));
    }
    if out.is_empty() {
        return Err(Error::corrupt(format!("{}: holds no inode", what())));
    }
    Ok(out)
}

fn owner(idx: u64) -> Owner {
    Owner {
        ino: IJOURNAL_INO,
        offset: idx,
        kind: BlockKind::Data,
    }
}

/// Journals read for views of older checkpoints, by checkpoint number.
#[derive(Default)]
pub struct ViewJournals {
    read: Vec<(u64, Arc<Journal>)>,
}

impl Store {
    /// Read the journal rooted at `root`, in block order.
    pub fn ijournal_load(&mut self, root: u64) -> Result<Journal> {
        let mut j = Journal {
            root,
            ..Default::default()
        };
        for idx in self.ijournal_indexes(root)? {
            let items = self.ijournal_block(root, idx)?;
            j.absorb(idx, &items);
        }
        Ok(j)
    }

    /// The block indexes in the journal rooted at `root`, in order.
    fn ijournal_indexes(&mut self, root: u64) -> Result<Vec<u64>> {
        let tree = self.tree();
        let mut out = Vec::new();
        let mut next = 0u64;
        loop {
            let run = tree.ceil_run(&mut VNodesRo { s: self }, root, next, 64)?;
            let Some(&(last, _)) = run.last() else { break };
            out.extend(run.into_iter().map(|(k, _)| k));
            match last.checked_add(1) {
                Some(n) => next = n,
                None => break,
            }
        }
        Ok(out)
    }

    /// The images in block `idx` of the journal rooted at `root`.
    fn ijournal_block(&mut self, root: u64, idx: u64) -> Result<Vec<(u64, Option<Vec<u8>>)>> {
        let v = self.mfile_get(root, idx)?.ok_or_else(|| {
            Error::corrupt(format!("inode journal block {idx} is not in its map"))
        })?;
        let b = self.vread(v, owner(idx))?;
        decode_block(&b, idx)
    }

    /// The newest image of `ino` in `j` (a journal of checkpoint `j.root`):
    /// `Some(None)` if freed, `None` if the journal does not have it.
    pub(crate) fn ijournal_image(
        &mut self,
        j: &Journal,
        ino: u64,
    ) -> Result<Option<Option<Vec<u8>>>> {
        match j.find(ino) {
            Found::NotHere => Ok(None),
            Found::Freed => Ok(Some(None)),
            Found::In(idx) => {
                let items = self.ijournal_block(j.root, idx)?;
                let image = items
                    .into_iter()
                    .find(|(i, _)| *i == ino)
                    .and_then(|(_, img)| img)
                    .ok_or_else(|| {
                        Error::corrupt(format!(
                            "inode journal block {idx} no longer holds inode {ino}"
                        ))
                    })?;
                Ok(Some(Some(image)))
            }
        }
    }

    /// Every inode `j` holds with its newest image, changes not yet
    /// checkpointed included, in inode order (fsck).
    pub fn ijournal_images(&mut self, j: &Journal) -> Result<Vec<(u64, Option<Vec<u8>>)>> {
        let mut out: BTreeMap<u64, Option<Vec<u8>>> = BTreeMap::new();
        for &idx in j.live.keys() {
            for (ino, image) in self.ijournal_block(j.root, idx)? {
                if j.entries.get(&ino).is_some_and(|e| e.idx == idx) {
                    out.insert(ino, image);
                }
            }
        }
        for (&ino, p) in &j.pending {
            out.insert(ino, p.clone());
        }
        Ok(out.into_iter().collect())
    }

    /// The journal of checkpoint `cno`, rooted at `root` (kept for the next
    /// reads; by checkpoint, as virtual block numbers are reused).
    pub fn ijournal_at(&mut self, cno: u64, root: u64) -> Result<Arc<Journal>> {
        let known = self.view_journals.read.iter();
        if let Some((_, j)) = known.into_iter().find(|(c, j)| *c == cno && j.root == root) {
            return Ok(j.clone());
        }
        let j = Arc::new(self.ijournal_load(root)?);
        if self.view_journals.read.len() >= VIEW_JOURNALS_MAX {
            self.view_journals.read.remove(0);
        }
        self.view_journals.read.push((cno, j.clone()));
        Ok(j)
    }

    /// The current inode table's roots (as the next checkpoint will record
    /// them once it has journaled what is pending).
    pub fn inode_table(&self) -> InodeTable {
        InodeTable {
            ifile_root: self.ifile_root,
            ijournal_root: self.ijournal.root,
        }
    }

    /// The journal's bound B in blocks (0: no journal, every change goes to
    /// the IFILE). It holds at most 4·B current images.
    pub fn ijournal_max_blocks(&self) -> u64 {
        self.config
            .ijournal_max_blocks
            .unwrap_or_else(|| (self.geo.device_blocks / AUTO_DEVICE_SHARE).min(AUTO_MAX_BLOCKS))
    }

    /// Journal the inodes changed since the last checkpoint, then bring the
    /// journal back within its bounds; the first step of a checkpoint.
    pub(crate) fn ijournal_commit(&mut self) -> Result<()> {
        let pending = std::mem::take(&mut self.ijournal.pending);
        let max = self.ijournal_max_blocks();
        if max == 0 {
            for (ino, image) in &pending {
                self.ifile_write(*ino, image.as_deref())?;
            }
            // The journal may hold inodes from a mount with a bound.
            return self.ijournal_write_back(usize::MAX);
        }
        // Inodes changed again (hot) apart from inodes changed for the first
        // time since they were last written back (cold): blocks die together.
        let (again, first): (Vec<_>, Vec<_>) = pending
            .into_iter()
            .partition(|(i, _)| self.ijournal.entries.contains_key(i));
        self.ijournal_append(first)?;
        self.ijournal_append(again)?;
        let images = self.ijournal.entries.len() as u64;
        let over = images.saturating_sub(max * IMAGES_PER_BOUND_BLOCK);
        if over > 0 {
            self.ijournal_write_back(over as usize)?;
        }
        if self.ijournal.live.len() as u64 > max {
            self.ijournal_compact(max)?;
        }
        debug_assert!(
            self.ijournal
                .entries
                .values()
                .all(|e| self.ijournal.live.contains_key(&e.idx)),
            "a journaled image's block was punched"
        );
        Ok(())
    }

    /// Append `items` at the journal's end, eight to a block, punching the
    /// blocks they leave with no current image.
    fn ijournal_append(&mut self, items: Vec<(u64, Option<Vec<u8>>)>) -> Result<()> {
        let mut root = self.ijournal.root;
        let r = (|| {
            for chunk in items.chunks(SLOTS) {
                let idx = self.ijournal.next_idx;
                let v = self.mfile_fresh(IJOURNAL_INO, &mut root, idx)?;
                self.vwrite(v, encode_block(chunk), owner(idx))?;
                for dead in self.ijournal.absorb(idx, chunk) {
                    self.ijournal.live.remove(&dead);
                    self.mfile_punch(IJOURNAL_INO, &mut root, dead)?;
                }
                self.stats.ijournal_blocks_written += 1;
            }
            Ok(())
        })();
        self.ijournal.root = root;
        r
    }

    /// Take the current images out of the oldest blocks, punching them,
    /// until `enough(images taken, blocks taken)`.
    fn ijournal_take_oldest(
        &mut self,
        enough: impl Fn(usize, usize) -> bool,
    ) -> Result<Vec<(u64, Option<Vec<u8>>)>> {
        let oldest: Vec<u64> = self.ijournal.live.keys().copied().collect();
        let mut taken = Vec::new();
        let mut root = self.ijournal.root;
        let r = (|| {
            for (n, idx) in oldest.into_iter().enumerate() {
                if enough(taken.len(), n) {
                    break;
                }
                for (ino, image) in self.ijournal_block(root, idx)? {
                    if self.ijournal.forget_if_in(ino, idx) {
                        taken.push((ino, image));
                    }
                }
                let left = self.ijournal.live.remove(&idx);
                assert_eq!(left, Some(0), "journal block {idx}: images left behind");
                self.mfile_punch(IJOURNAL_INO, &mut root, idx)?;
            }
            Ok(())
        })();
        self.ijournal.root = root;
        r.map(|()| taken)
    }

    /// Write at least `n` of the oldest current images back into the IFILE
    /// (whole blocks of them).
    fn ijournal_write_back(&mut self, n: usize) -> Result<()> {
        let taken = self.ijournal_take_oldest(|images, _| images >= n)?;
        self.stats.ijournal_images_written_back += taken.len() as u64;
        for (ino, image) in taken {
            self.ifile_write(ino, image.as_deref())?;
        }
        Ok(())
    }

    /// Append the current images of the oldest blocks again until the
    /// journal is within `max` blocks. Called only when more than `max`
    /// blocks hold at most 4·`max` images, so fewer than half their slots
    /// on average: each block taken frees more than it costs.
    fn ijournal_compact(&mut self, max: u64) -> Result<()> {
        let blocks = self.ijournal.live.len();
        let max = max as usize;
        let taken = self.ijournal_take_oldest(|images, taken_blocks| {
            blocks - taken_blocks + images.div_ceil(SLOTS) <= max
        })?;
        self.stats.ijournal_images_compacted += taken.len() as u64;
        self.ijournal_append(taken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(ino: u64, fill: u8) -> Vec<u8> {
        let mut b = vec![fill; INODE_BYTES];
        b[IMAGE_INO_AT..IMAGE_INO_AT + 8].copy_from_slice(&ino.to_le_bytes());
        b
    }

    #[test]
    fn blocks_round_trip_images_and_freed_marks() {
        let items = vec![(20, Some(image(20, 7))), (21, None), (1, Some(image(1, 9)))];
        assert_eq!(decode_block(&encode_block(&items), 3).unwrap(), items);
    }

    #[test]
    fn bad_blocks_are_refused_with_the_reason() {
        let e = |b: &[u8]| decode_block(b, 5).unwrap_err().to_string();
        assert!(e(&vec![0; BLOCK_BYTES]).contains("block 5: holds no inode"));
        let mut b = encode_block(&[(20, Some(image(20, 7))), (21, Some(image(21, 7)))]);
        b[INODE_BYTES + IMAGE_INO_AT] = 20;
        assert!(e(&b).contains("inode 20 twice (slot 1)"), "{}", e(&b));
        let b = encode_block(&[(3, Some(image(3, 7)))]);
        assert!(e(&b).contains("slot 0 names inode 3"), "{}", e(&b));
        let mut b = encode_block(&[(30, None)]);
        b[100] = 1;
        assert!(e(&b).contains("not a freed mark"), "{}", e(&b));
        assert!(e(&b[..100]).contains("100 bytes"));
    }

    #[test]
    fn newer_images_win_and_emptied_blocks_are_reported() {
        let mut j = Journal::default();
        let two = [(20, Some(image(20, 1))), (21, Some(image(21, 1)))];
        assert!(j.absorb(0, &two).is_empty());
        assert!(j.absorb(1, &[(20, Some(image(20, 2)))]).is_empty());
        assert_eq!(j.find(20), Found::In(1));
        assert_eq!(j.absorb(2, &[(21, None)]), vec![0]);
        assert_eq!(j.find(21), Found::Freed);
        assert_eq!(j.dead_blocks(), vec![0]);
        assert_eq!(j.find(22), Found::NotHere);
        j.stage(22, Some(&image(22, 3)));
        j.stage(20, None);
        assert_eq!(j.pending(20), Some(None), "a staged change is seen first");
        assert_eq!(j.pending(21), None);
        assert_eq!(j.next_idx, 3);
        assert!(j.forget_if_in(20, 1) && !j.forget_if_in(21, 1));
        assert_eq!(j.live[&1], 0);
    }
}
