//! The segment constructor: the only way dirty blocks reach the device.
//!
//! A checkpoint is built in three steps:
//! 1. *Close the dirty set.* Make the CPFILE and SUFILE blocks that will change
//!    fresh, and make the DAT block of every dirty virtual block writable.
//!    Each step can dirty more (copy-on-write kills old blocks, which changes
//!    segment counters), so it repeats until nothing new appears. The segments
//!    the records will occupy are planned inside the loop, so their SUFILE
//!    blocks are in the set too.
//! 2. *Place.* Every dirty block gets a physical address, in order: file data
//!    and nodes, metadata files, then the DAT in post-order (children before
//!    parents), and the super root last. Filling in addresses now changes only
//!    the contents of blocks that are already dirty, never the set.
//! 3. *Write* the records (one device write each), then one flush.
//!
//! An fsync writes one record: the dirty data blocks of the files it makes
//! durable, and inline items (the namespace operations since the last
//! checkpoint and inode images) in its summary blocks; then one flush.
//! Recovery rolls it forward (`fs/replay.rs`).

use crate::btree::Node;
use crate::cache::{key_addr, key_is_virtual, pkey, vkey, CacheKey, Owner};
use crate::error::{Error, Result};
use crate::layout::{BLOCK_BYTES, CPFILE_INO, DAT_INO, IFILE_INO, SUFILE_INO};
use crate::log::record::{
    summary_blocks, summary_blocks_with, BlockKind, RecordHeader, SummaryEntry, FLAG_COMPRESSED,
    FLAG_CP_BEGIN, FLAG_DATA_STREAM, FLAG_DSYNC, FLAG_SUPER_ROOT, MAX_INLINE_BYTES,
    MAX_RECORD_PAYLOAD,
};
use crate::log::super_root::SuperRoot;
use crate::meta::compress::TakenFrame;
use crate::meta::cpfile::{CpEntry, CP_VALID};
use crate::meta::dat_entry::DAT_PER_BLOCK;
use crate::meta::store::{decode_u64, is_temp, Store};
use crate::meta::stream::{DataHead, Stream, STREAM_MASK};
use crate::meta::sufile::SU_PER_BLOCK;
use std::collections::{BTreeMap, HashMap, HashSet};

/// An fsync of at least this many data blocks writes those that belong in
/// a data stream there (`Store::dsync_to_streams`); smaller ones stay in
/// the log's record, which a separate record's header block would double.
pub const DSYNC_STREAM_MIN_BLOCKS: usize = 8;

/// One record to write: where, how many payload blocks, and how many
/// bytes of inline items its summary blocks carry.
#[derive(Clone, Debug)]
pub(super) struct PlannedRecord {
    pub(super) seg: u64,
    pub(super) off: u32,
    pub(super) npayload: usize,
    inline_bytes: usize,
    /// The segment the log continues in when this one is full.
    next_seg: u64,
}

impl PlannedRecord {
    /// Header and summary blocks.
    pub(super) fn nsum(&self) -> usize {
        summary_blocks_with(self.npayload, self.inline_bytes)
    }
    fn nblocks(&self) -> usize {
        self.nsum() + self.npayload
    }
}

/// A payload block to place.
#[derive(Clone, Copy, Debug)]
pub(super) enum Item {
    Virtual(u64),
    Dat(u64),
    /// Block `k` of the DAT journal (meta/dat_journal.rs).
    DatJournal(usize),
    SuperRoot,
}

/// What closing a checkpoint's dirty set leaves for the steps after it.
struct ClosedSet {
    /// CPFILE blocks to fill, at their fresh virtual blocks (None: punched).
    cp_fresh: BTreeMap<u64, Option<u64>>,
    /// SUFILE blocks to fill, at their fresh virtual blocks.
    su_fresh: BTreeMap<u64, u64>,
    /// The records of each stream.
    plans: [Plan; 4],
    /// Blocks of the DAT journal this checkpoint writes.
    journal_blocks: usize,
    /// Dirty blocks when the set closed; placing adds none.
    frozen_dirty: usize,
}

/// Every payload block of a checkpoint and where it goes.
struct Placed {
    /// In stream order; `bounds[s]..bounds[s + 1]` are stream `s`'s, and
    /// the blocks placed in holes follow from `bounds[4]`.
    items: Vec<Item>,
    places: Vec<u64>,
    bounds: [usize; 5],
    /// Virtual blocks written into holes.
    plugged: Vec<u64>,
    /// The DAT's dirty blocks and nodes, children before parents.
    dat_order: Vec<(u64, u64, BlockKind)>,
}

/// Where the records of a construction go, and the segments it newly opens.
pub(super) struct Plan {
    pub(super) records: Vec<PlannedRecord>,
    new_segments: Vec<u64>,
}

/// The flags of a record of a group written with `first_flags`: the
/// first record has them all, the others only whether the group is an
/// fsync's and goes to a data stream; the group's last record of a
/// checkpoint carries the super root.
fn record_flags(first_flags: u32, first: bool, carries_super_root: bool) -> u32 {
    let mut flags = if first {
        first_flags
    } else {
        first_flags & (FLAG_DSYNC | FLAG_DATA_STREAM)
    };
    if carries_super_root {
        flags |= FLAG_SUPER_ROOT;
    }
    flags
}

impl Store {
    /// Split `npayload` blocks into records from the current write position,
    /// moving to new segments as needed, the last record carrying `inline`
    /// bytes of items (so at least one record if there are any), not
    /// taking the segments in `taken` (and adding those it takes). Does not
    /// change anything.
    fn plan_log(
        &self,
        mut npayload: usize,
        inline: usize,
        taken: &mut HashSet<u64>,
    ) -> Result<Plan> {
        assert!(inline <= MAX_INLINE_BYTES, "{inline} inline bytes");
        let seg_blocks = self.geo.segment_blocks;
        let (mut seg, mut off, mut next) = (self.cur_seg, self.cur_off, self.next_seg);
        let mut records = Vec::new();
        let mut new_segments = Vec::new();
        let mut inline_left = inline;
        while npayload > 0 || inline_left > 0 {
            let avail = (seg_blocks - off) as usize;
            // The record that takes the last payload block also takes the
            // items; a record with neither is never written.
            let size = |p: usize| {
                let ninline = if p == npayload { inline_left } else { 0 };
                (p > 0 || ninline > 0).then(|| summary_blocks_with(p, ninline) + p)
            };
            let mut p = npayload.min(MAX_RECORD_PAYLOAD).min(avail);
            while p > 0 && size(p).is_none_or(|n| n > avail) {
                p -= 1;
            }
            if size(p).is_none_or(|n| n > avail) {
                // Move on: the next segment is already reserved; reserve its successor.
                seg = next;
                off = 0;
                next = self
                    .free_segment_after(seg, taken, seg)
                    .ok_or(Error::Errno(lsfs_vfs::Errno::NOSPC))?;
                taken.insert(next);
                new_segments.push(next);
                continue;
            }
            let ninline = if p == npayload { inline_left } else { 0 };
            records.push(PlannedRecord {
                seg,
                off,
                npayload: p,
                inline_bytes: ninline,
                next_seg: next,
            });
            off += (summary_blocks_with(p, ninline) + p) as u32;
            npayload -= p;
            inline_left -= ninline;
        }
        Ok(Plan {
            records,
            new_segments,
        })
    }

    /// The first free segment after `after` (wrapping) that is neither in
    /// `taken` (by an earlier plan of this construction) nor `not`.
    fn free_segment_after(&self, mut after: u64, taken: &HashSet<u64>, not: u64) -> Option<u64> {
        for _ in 0..self.geo.nsegments {
            let cand = self.segs.find_free(after)?;
            if cand != not && !taken.contains(&cand) {
                return Some(cand);
            }
            after = cand;
        }
        None
    }

    /// Records for `n` blocks of data stream `s`, from its open segment on;
    /// a full segment is left for a free one not in `taken`. Data streams
    /// are not chained (recovery never follows them): each record names its
    /// own segment as next.
    fn plan_data(&self, s: Stream, mut n: usize, taken: &mut HashSet<u64>) -> Result<Plan> {
        let seg_blocks = self.geo.segment_blocks;
        let head = self.streams.heads[s as usize - 1];
        let (mut seg, mut off) = (head.map(|h| h.seg), head.map_or(0, |h| h.off));
        let mut records = Vec::new();
        let mut new_segments = Vec::new();
        while n > 0 {
            let avail = seg.map_or(0, |_| (seg_blocks - off) as usize);
            let mut p = n.min(MAX_RECORD_PAYLOAD).min(avail.saturating_sub(1));
            while p > 0 && summary_blocks(p) + p > avail {
                p -= 1;
            }
            let Some(at) = seg.filter(|_| p > 0) else {
                let after = seg.unwrap_or(self.cur_seg);
                let cand = self
                    .free_segment_after(after, taken, u64::MAX)
                    .ok_or(Error::Errno(lsfs_vfs::Errno::NOSPC))?;
                taken.insert(cand);
                new_segments.push(cand);
                seg = Some(cand);
                off = 0;
                continue;
            };
            records.push(PlannedRecord {
                seg: at,
                off,
                npayload: p,
                inline_bytes: 0,
                next_seg: at,
            });
            off += (summary_blocks(p) + p) as u32;
            n -= p;
        }
        Ok(Plan {
            records,
            new_segments,
        })
    }

    /// Plans for every stream's share of `counts` (indexed by stream), the
    /// log's last: its records end with the super root.
    fn plan_streams(&self, counts: &[usize; 4]) -> Result<[Plan; 4]> {
        let mut taken = HashSet::new();
        let mut data = Vec::new();
        for s in Stream::DATA {
            data.push(self.plan_data(s, counts[s as usize], &mut taken)?);
        }
        let log = self.plan_log(counts[Stream::Meta as usize], 0, &mut taken)?;
        let mut it = data.into_iter();
        Ok([
            log,
            it.next().unwrap(),
            it.next().unwrap(),
            it.next().unwrap(),
        ])
    }

    /// Keep data stream `s` past its plan's records.
    fn commit_data(&mut self, s: Stream, plan: &Plan) {
        let Some(last) = plan.records.last() else {
            return;
        };
        let slot = s as usize - 1;
        if let Some(h) = self.streams.heads[slot] {
            if h.seg != last.seg {
                self.segs.reserved.remove(&h.seg);
            }
        }
        for r in &plan.records {
            if r.seg != last.seg {
                self.segs.reserved.remove(&r.seg);
            }
        }
        let off = last.off + (summary_blocks(last.npayload) + last.npayload) as u32;
        self.streams.heads[slot] = if self.head_has_room(off) {
            self.segs.reserved.insert(last.seg);
            Some(DataHead { seg: last.seg, off })
        } else {
            // Full: an ordinary used segment now.
            self.segs.reserved.remove(&last.seg);
            None
        };
    }

    /// Dirty blocks per stream, the super root and `journal_blocks` DAT
    /// journal blocks included (the log's).
    fn stream_counts(&self, journal_blocks: usize) -> [usize; 4] {
        let mut c = [0usize; 4];
        for k in self.cache.dirty_keys() {
            if key_is_virtual(k) && self.plugs.assigned(key_addr(k)).is_some() {
                continue; // placed in a hole
            }
            if !key_is_virtual(k) && self.dat_journal.is_journaled_addr(key_addr(k)) {
                continue; // journaled, not written
            }
            let s = if key_is_virtual(k) {
                let o = self.cache.owner(k).expect("dirty block has an owner");
                self.stream_of(key_addr(k), &o)
            } else {
                Stream::Meta
            };
            c[s as usize] += 1;
        }
        c[Stream::Meta as usize] += 1 + journal_blocks;
        c
    }

    /// Move the writer past a plan's records and keep the segments it opened.
    fn commit_plan(&mut self, plan: &Plan) {
        for &s in &plan.new_segments {
            self.segs.reserved.insert(s);
        }
        if let Some(last) = plan.records.last() {
            if last.seg != self.cur_seg {
                self.segs.reserved.remove(&self.cur_seg);
            }
            // Segments passed through entirely are no longer reserved: their nblocks say they are used.
            for r in &plan.records {
                if r.seg != last.seg {
                    self.segs.reserved.remove(&r.seg);
                }
            }
            self.cur_seg = last.seg;
            self.cur_off = last.off + last.nblocks() as u32;
            self.next_seg = last.next_seg;
        }
        self.segs.reserved.insert(self.cur_seg);
        self.segs.reserved.insert(self.next_seg);
    }

    /// Write a checkpoint of everything dirty; returns its number.
    pub fn checkpoint(&mut self) -> Result<u64> {
        self.writable()?;
        let r = self.checkpoint_inner();
        if let Err(e @ Error::Io { .. }) = &r {
            self.fail(e);
        }
        r
    }

    /// A checkpoint, as the module docs list its steps: begin (expire
    /// checkpoints, retire the last DAT journal), close the dirty set,
    /// place every block, fill in the metadata files and the super root,
    /// write, and end (mark clean, advance the checkpoint number, point
    /// the superblock at it).
    fn checkpoint_inner(&mut self) -> Result<u64> {
        let now = self.now();
        let cno = self.begin_checkpoint(now)?;
        // Step 1: close the dirty set.
        let closed = self.close_dirty_set(cno)?;
        // Step 2: place.
        let mut placed = self.place_checkpoint(&closed)?;
        self.compress_checkpoint(&closed, &placed);
        let journal_addrs = self.apply_places(&mut placed, closed.journal_blocks, now)?;
        self.fill_metadata_files(&closed, cno, now)?;
        let sr = self.super_root(cno, now, &journal_addrs);
        // Step 3: write.
        let last = self.write_checkpoint(&closed, &placed, cno, &sr)?;
        self.end_checkpoint(cno, &closed, &placed, journal_addrs, last)?;
        Ok(cno)
    }

    /// Expire what this checkpoint will no longer keep and enter it in the
    /// CPFILE; returns its number.
    fn begin_checkpoint(&mut self, now: u64) -> Result<u64> {
        self.reclaim_prepare(now)?;
        let cno = self.cur_cno;
        self.cps.insert(self.cp_entry(cno, now));
        if std::mem::take(&mut self.give_up_plain_at_checkpoint) {
            // A pass freed dead blocks in victims that only the checkpoints
            // before this one see; the victims are reused only once this
            // checkpoint, whose CPFILE no longer lists those, is durable.
            let n = self.give_up_checkpoints_below(cno);
            self.stats.checkpoints_given_up_at_checkpoint += n as u64;
            assert!(
                self.cps
                    .entries
                    .values()
                    .all(|e| e.is_snapshot() || e.cno == cno),
                "a plain checkpoint before {cno} survived giving them up"
            );
        }
        // The last checkpoint's DAT journal dies with this one, which writes
        // the journal whole again.
        for a in std::mem::take(&mut self.dat_journal.written) {
            let seg = self
                .geo
                .segment_of(a)
                .expect("journal blocks are in the log");
            self.kill_live(seg, false, now)?;
        }
        Ok(cno)
    }

    /// Step 1: make every block the checkpoint will change dirty (or
    /// fresh), and plan the records, until nothing new appears.
    fn close_dirty_set(&mut self, cno: u64) -> Result<ClosedSet> {
        let cp_fresh = self.freshen_cpfile()?;
        self.choose_streams_and_holes(cno)?;
        let mut su_fresh: BTreeMap<u64, u64> = BTreeMap::new();
        let mut dat_touched: HashSet<u64> = HashSet::new();
        // Each step may dirty blocks the others must then see: SUFILE
        // blocks dirty the DAT, DAT blocks may be journaled, the records
        // planned for all of them change segment counters.
        let (plans, journal_blocks) = loop {
            let mut changed = self.freshen_sufile(&mut su_fresh)?;
            let placing: Vec<u64> = self
                .cache
                .dirty_keys()
                .into_iter()
                .filter(|&k| key_is_virtual(k))
                .map(key_addr)
                .collect();
            changed |= self.touch_dat_blocks(&placing, &mut dat_touched)?;
            let (settled, journal_blocks) = self.dat_journal_settle(&placing)?;
            changed |= settled;
            let plans = self.plan_checkpoint_streams(cno, journal_blocks)?;
            changed |= self.dirty_sufile_of(&plans, &su_fresh);
            if !changed {
                break (plans, journal_blocks);
            }
        };
        // Nothing below may dirty a block that is not dirty yet.
        let frozen_dirty = self.pending_blocks() + journal_blocks;
        Ok(ClosedSet {
            cp_fresh,
            su_fresh,
            plans,
            journal_blocks,
            frozen_dirty,
        })
    }

    /// Give every dirty CPFILE block a fresh virtual block, or punch it
    /// out if no checkpoint is left in it.
    fn freshen_cpfile(&mut self) -> Result<BTreeMap<u64, Option<u64>>> {
        let mut cp_fresh = BTreeMap::new();
        for idx in std::mem::take(&mut self.cps.dirty_blocks) {
            let mut root = self.cpfile_root;
            let v = if self.cps.encode_block(idx).is_some() {
                Some(self.mfile_fresh(CPFILE_INO, &mut root, idx)?)
            } else {
                self.mfile_punch(CPFILE_INO, &mut root, idx)?;
                None
            };
            self.cpfile_root = root;
            cp_fresh.insert(idx, v);
        }
        Ok(cp_fresh)
    }

    /// Whether this checkpoint writes to the data streams, and which holes
    /// take its user data.
    fn choose_streams_and_holes(&mut self, cno: u64) -> Result<()> {
        // Streams are used for this checkpoint only if free segments can
        // spare their open segments.
        let one_flush = std::mem::take(&mut self.streams.one_flush_next);
        self.streams.active = !one_flush && self.streams_can_run();
        // Holes for user data (meta/plug.rs), but not in a checkpoint that
        // ends an fsync: it promises one flush.
        if one_flush {
            self.plugs.clear_assigned();
            Ok(())
        } else {
            self.assign_plugs(cno)
        }
    }

    /// Give the dirty SUFILE blocks not yet in `su_fresh` fresh virtual
    /// blocks; whether there were any.
    fn freshen_sufile(&mut self, su_fresh: &mut BTreeMap<u64, u64>) -> Result<bool> {
        let pending: Vec<u64> = self
            .segs
            .dirty_blocks
            .iter()
            .copied()
            .filter(|i| !su_fresh.contains_key(i))
            .collect();
        let changed = !pending.is_empty();
        for idx in pending {
            let mut root = self.sufile_root;
            let v = self.mfile_fresh(SUFILE_INO, &mut root, idx)?;
            self.sufile_root = root;
            su_fresh.insert(idx, v);
        }
        Ok(changed)
    }

    /// Make writable the DAT blocks of the blocks `placing` not yet in
    /// `dat_touched`, so that placing them changes no tree; whether there
    /// were any.
    fn touch_dat_blocks(
        &mut self,
        placing: &[u64],
        dat_touched: &mut HashSet<u64>,
    ) -> Result<bool> {
        let mut changed = false;
        for &v in placing {
            if dat_touched.insert(v / DAT_PER_BLOCK) {
                self.dat_touch(v)?;
                changed = true;
            }
        }
        Ok(changed)
    }

    /// The records of every stream for what is dirty now.
    fn plan_checkpoint_streams(&mut self, cno: u64, journal_blocks: usize) -> Result<[Plan; 4]> {
        match self.plan_streams(&self.stream_counts(journal_blocks)) {
            // The data streams' partly filled segments cost space the
            // log alone would not: when that is what is missing, this
            // checkpoint writes everything to the log (a checkpoint must
            // always fit in the reserve).
            Err(Error::Errno(lsfs_vfs::Errno::NOSPC)) if self.streams.active => {
                self.streams.active = false;
                tracing::debug!("checkpoint {cno}: streams off, short of free segments");
                self.plan_streams(&self.stream_counts(journal_blocks))
            }
            r => r,
        }
    }

    /// Dirty the SUFILE blocks of the segments `plans` write to that are
    /// not fresh yet; whether there were any.
    fn dirty_sufile_of(&mut self, plans: &[Plan; 4], su_fresh: &BTreeMap<u64, u64>) -> bool {
        let segs: Vec<u64> = plans
            .iter()
            .flat_map(|p| {
                p.records
                    .iter()
                    .map(|r| r.seg)
                    .chain(p.new_segments.iter().copied())
            })
            .collect();
        let mut changed = false;
        for s in segs {
            if !su_fresh.contains_key(&(s / SU_PER_BLOCK)) {
                self.segs.dirty_blocks.insert(s / SU_PER_BLOCK);
                changed = true;
            }
        }
        changed
    }

    /// Step 2a: give every dirty block its place, stream by stream, then
    /// the blocks going into holes.
    fn place_checkpoint(&mut self, closed: &ClosedSet) -> Result<Placed> {
        let (plans, journal_blocks, frozen_dirty) =
            (&closed.plans, closed.journal_blocks, closed.frozen_dirty);
        // Each stream's items, the log's ending with the DAT (children
        // before parents) and the super root; then all of them in stream
        // order, with where each stream's part starts.
        let mut per: [Vec<Item>; 4] = Default::default();
        let mut plugged = Vec::new();
        for item in self.virtual_order() {
            let Item::Virtual(v) = item else {
                unreachable!("virtual_order gives virtual blocks")
            };
            if self.plugs.assigned(v).is_some() {
                plugged.push(v);
                continue;
            }
            let o = self.cache.owner(vkey(v)).expect("dirty block has an owner");
            let st = self.stream_of(v, &o);
            self.note_stream_write(v, &o, st);
            per[st as usize].push(item);
        }
        let dat_order = self.dat_postorder()?;
        per[0].extend(dat_order.iter().map(|&(t, _, _)| Item::Dat(t)));
        per[0].extend((0..journal_blocks).map(Item::DatJournal));
        per[0].push(Item::SuperRoot);
        let mut items: Vec<Item> = Vec::with_capacity(frozen_dirty + 1);
        let mut places = Vec::with_capacity(frozen_dirty + 1);
        let mut bounds = [0usize; 5];
        for st in Stream::ALL {
            let i = st as usize;
            places.extend(self.place(&plans[i], per[i].len()));
            items.append(&mut per[i]);
            bounds[i + 1] = items.len();
        }
        // Then the blocks placed in holes.
        for &v in &plugged {
            items.push(Item::Virtual(v));
            places.push(self.plugs.assigned(v).expect("assigned above"));
        }
        assert_eq!(
            items.len(),
            frozen_dirty + 1,
            "dirty blocks that are neither virtual nor placed DAT blocks"
        );
        Ok(Placed {
            items,
            places,
            bounds,
            plugged,
            dat_order,
        })
    }

    /// Step 2a': compress the records of user data (meta/compress.rs), so
    /// that the DAT can name their frames. The cleaner's stream is left
    /// raw: its blocks were written once already, and are likely cold.
    fn compress_checkpoint(&mut self, closed: &ClosedSet, placed: &Placed) {
        self.drop_pending_frames();
        // One batch, so that the streams' records are compressed together.
        let parts: Vec<(&Plan, &[Item])> = [Stream::Meta, Stream::HotUser, Stream::ColdUser]
            .into_iter()
            .map(|st| {
                let i = st as usize;
                let part = &placed.items[placed.bounds[i]..placed.bounds[i + 1]];
                (&closed.plans[i], part)
            })
            .collect();
        self.compress_plans(&parts);
    }

    /// Step 2b: point the DAT at the places, count them in the segment
    /// usage, give the DAT's own blocks their addresses; returns where the
    /// DAT journal's blocks go.
    fn apply_places(
        &mut self,
        placed: &mut Placed,
        journal_blocks: usize,
        now: u64,
    ) -> Result<Vec<u64>> {
        let Placed {
            items,
            places,
            dat_order,
            ..
        } = placed;
        let mut dat_addr: HashMap<u64, u64> = HashMap::new();
        let mut journal_addrs = Vec::with_capacity(journal_blocks);
        for (item, &pos) in items.iter().zip(places.iter()) {
            let seg = self.geo.segment_of(pos).expect("planned inside the log");
            match *item {
                Item::Virtual(v) => {
                    let mut e = self.dat_get(v)?;
                    debug_assert_eq!(e.pblock, 0, "dirty virtual block {v} already placed");
                    e = e.placed(pos);
                    e.frame = self.frame_of_place(pos);
                    self.dat_set(v, e)?;
                    if !self.moved_dead.contains(&v) {
                        self.add_live(seg, now)?;
                    } else if self.snapshot_counted(v, e.start, e.end) {
                        self.add_snapshot(seg, 1)?;
                    }
                }
                Item::Dat(t) => {
                    dat_addr.insert(t, pos);
                    self.add_live(seg, now)?;
                }
                Item::DatJournal(_) => {
                    journal_addrs.push(pos);
                    self.add_live(seg, now)?;
                }
                Item::SuperRoot => {}
            }
        }
        self.rewrite_dat_pointers(dat_order, &dat_addr)?;
        for &(t, idx, kind) in dat_order.iter() {
            if kind == BlockKind::DatBlock {
                self.remember_dat_block(idx, dat_addr[&t]);
            }
        }
        if is_temp(self.dat_root) {
            self.dat_root = dat_addr[&self.dat_root];
        }
        // Key the DAT's blocks by their places now (still dirty): the DAT
        // must stay readable from the cache if a write below fails and the
        // mount goes on read-only, since its root already names those places.
        for item in items.iter_mut() {
            if let Item::Dat(t) = *item {
                let p = dat_addr[&t];
                self.cache.rekey(pkey(t), pkey(p));
                *item = Item::Dat(p);
            }
        }
        Ok(journal_addrs)
    }

    /// Step 2c: count the records in the SUFILE, then fill the SUFILE and
    /// CPFILE blocks, which are dirty already, and encode the DAT journal.
    fn fill_metadata_files(&mut self, closed: &ClosedSet, cno: u64, now: u64) -> Result<()> {
        let ClosedSet {
            cp_fresh,
            su_fresh,
            plans,
            journal_blocks,
            frozen_dirty,
        } = closed;
        let (journal_blocks, frozen_dirty) = (*journal_blocks, *frozen_dirty);
        for st in Stream::ALL {
            for r in &plans[st as usize].records {
                self.add_written(r.seg, (summary_blocks(r.npayload) + r.npayload) as u32, now)?;
                let u = &mut self.segs.usage[r.seg as usize];
                u.flags = (u.flags & !STREAM_MASK) | st.flags();
                self.streams.blocks_written[st as usize] += r.npayload as u64;
            }
        }
        // Fill the SUFILE and CPFILE blocks, which are dirty already.
        for idx in self.segs.dirty_blocks.clone() {
            let v = *su_fresh
                .get(&idx)
                .unwrap_or_else(|| panic!("SUFILE block {idx} changed after the dirty set closed"));
            let b = self.segs.encode_block(idx);
            self.vwrite(
                v,
                b,
                Owner {
                    ino: SUFILE_INO,
                    offset: idx,
                    kind: BlockKind::Data,
                },
            )?;
        }
        self.cps.insert(self.cp_entry(cno, now));
        self.cps.dirty_blocks.clear();
        for (&idx, v) in cp_fresh {
            if let (Some(v), Some(b)) = (v, self.cps.encode_block(idx)) {
                self.vwrite(
                    *v,
                    b,
                    Owner {
                        ino: CPFILE_INO,
                        offset: idx,
                        kind: BlockKind::Data,
                    },
                )?;
            }
        }
        assert_eq!(
            self.pending_blocks() + journal_blocks,
            frozen_dirty,
            "placing blocks dirtied new ones"
        );
        self.dat_journal_encode(journal_blocks)?;
        Ok(())
    }

    /// The super root of checkpoint `cno`: the roots of the metadata files
    /// and what the store keeps across mounts.
    fn super_root(&self, cno: u64, now: u64, journal_addrs: &[u64]) -> Vec<u8> {
        SuperRoot {
            cno,
            created_secs: now,
            next_vblock: self.next_vblock,
            next_ino: self.next_ino,
            dat_root: self.dat_root,
            ifile_root: self.ifile_root,
            cpfile_root: self.cpfile_root,
            sufile_root: self.sufile_root,
            ssa_root: self.ssa_root,
            nsegments: self.geo.nsegments,
            inodes_used: self.inodes_used,
            blocks_used: self.blocks_used,
            reconcile_cursor: self.recon.cursor(),
            reconcile_queue: self.recon.queue().to_vec(),
            dat_journal: journal_addrs.to_vec(),
        }
        .encode()
    }

    /// Step 3: the data streams and the holes, flushed, then the log's
    /// records ending with the super root, flushed. Returns where the last
    /// record is and its sequence number.
    fn write_checkpoint(
        &mut self,
        closed: &ClosedSet,
        placed: &Placed,
        cno: u64,
        sr: &[u8],
    ) -> Result<(u64, u64)> {
        let plans = &closed.plans;
        let Placed {
            items,
            places,
            bounds,
            plugged,
            ..
        } = placed;
        // The data streams first, then a flush: the log's chain proves its
        // own records complete, but nothing in it proves the data streams'
        // are, so they must be durable before any record of the log that
        // points at them can be (a volatile cache may reorder writes). A
        // checkpoint that ends an fsync uses no data stream, so fsync keeps
        // its one flush.
        // Blocks written into holes are like the data streams': the DAT
        // points at them, nothing in the chain proves them written.
        if bounds[1] < bounds[4] || !plugged.is_empty() {
            for st in Stream::DATA {
                let i = st as usize;
                let part = &items[bounds[i]..bounds[i + 1]];
                self.write_records(&plans[i], part, cno, FLAG_DATA_STREAM, None, &[])?;
            }
            self.write_plugged(plugged, &places[bounds[4]..])?;
            self.dev.flush()?;
        }
        let last = self.write_records(
            &plans[0],
            &items[bounds[0]..bounds[1]],
            cno,
            FLAG_CP_BEGIN,
            Some(sr),
            &[],
        )?;
        self.dev.flush()?;
        Ok(last)
    }

    /// The checkpoint is durable: move the writer on, mark its blocks
    /// clean, start the next checkpoint and point the superblock here.
    fn end_checkpoint(
        &mut self,
        cno: u64,
        closed: &ClosedSet,
        placed: &Placed,
        journal_addrs: Vec<u64>,
        last: (u64, u64),
    ) -> Result<()> {
        let plans = &closed.plans;
        self.commit_plan(&plans[0]);
        for st in Stream::DATA {
            self.commit_data(st, &plans[st as usize]);
        }
        self.streams.checkpoint_done();
        self.plugs.checkpoint_done();
        for item in &placed.items {
            match *item {
                Item::Virtual(v) => self.cache.mark_clean(vkey(v)),
                Item::Dat(p) => self.cache.mark_clean(pkey(p)),
                _ => {}
            }
        }
        assert_eq!(
            self.pending_blocks(),
            0,
            "dirty blocks left after a checkpoint"
        );
        self.dat_journal.checkpoint_done(journal_addrs);
        self.segs.dirty_blocks.clear();
        // Free from now on: the checkpoint recording it is durable.
        let freed = std::mem::take(&mut self.segs.pending_free);
        self.cps.removed_since_checkpoint.clear();
        self.segs.freed_by_move_records.clear();
        self.segs.opened_since_checkpoint = 0;
        self.kills.checkpoint_done();
        self.cps.flags_changed_since_checkpoint = false;
        self.moved_dead.clear();
        self.deaths_since_checkpoint = 0;
        self.cur_cno += 1;
        self.fresh_floor = self.next_vblock;
        self.dat_reuse.checkpoint_done();
        self.stats.checkpoints_written += 1;
        self.write_superblock(cno, last.0, last.1)?;
        self.sb_copy_due = Some((cno, last.0, last.1));
        // After the flush that made the checkpoint durable (write_checkpoint),
        // so in the I/O queue's order no discard can reach the device
        // before it (meta/discard.rs argues why this is the moment).
        self.segments_freed_durably(freed);
        Ok(())
    }

    fn cp_entry(&self, cno: u64, now: u64) -> CpEntry {
        let flags = self
            .cps
            .entries
            .get(&cno)
            .map(|e| e.flags)
            .unwrap_or(CP_VALID);
        CpEntry {
            cno,
            flags,
            created_secs: now,
            ifile_root: self.ifile_root,
            inodes_used: self.inodes_used,
            blocks_used: self.blocks_used,
            next_ino: self.next_ino,
        }
    }

    /// Dirty virtual blocks in write order: user data by (inode, offset), then
    /// tree nodes, then the IFILE, CPFILE and SUFILE.
    fn virtual_order(&self) -> Vec<Item> {
        let mut v: Vec<(u8, u64, u64, u64)> = self
            .cache
            .dirty_keys()
            .into_iter()
            .filter(|&k| key_is_virtual(k))
            .map(|k| {
                let o = self.cache.owner(k).expect("dirty block has an owner");
                let rank = match (o.ino, o.kind) {
                    (IFILE_INO, _) => 3,
                    (CPFILE_INO, _) => 4,
                    (SUFILE_INO, _) => 5,
                    (_, BlockKind::Node) => 2,
                    _ => 1,
                };
                (rank, o.ino, o.offset, key_addr(k))
            })
            .collect();
        v.sort_unstable();
        v.into_iter()
            .map(|(_, _, _, vb)| Item::Virtual(vb))
            .collect()
    }

    /// The DAT's temporary blocks in post-order: (temp, owner offset, kind).
    fn dat_postorder(&mut self) -> Result<Vec<(u64, u64, BlockKind)>> {
        let mut out = Vec::new();
        if is_temp(self.dat_root) {
            self.dat_postorder_from(self.dat_root, &mut out, 0)?;
        }
        Ok(out)
    }

    fn dat_postorder_from(
        &mut self,
        t: u64,
        out: &mut Vec<(u64, u64, BlockKind)>,
        depth: usize,
    ) -> Result<()> {
        assert!(depth < 16, "DAT tree deeper than 16 levels");
        let node = self.temp_node(t)?;
        match &node {
            Node::Leaf { items } => {
                for (idx, val) in items {
                    let a = decode_u64(val, "DAT block map")?;
                    if is_temp(a) {
                        out.push((a, *idx, BlockKind::DatBlock));
                    }
                }
            }
            Node::Internal { children, .. } => {
                for &(_, c) in children {
                    if is_temp(c) {
                        self.dat_postorder_from(c, out, depth + 1)?;
                    }
                }
            }
        }
        out.push((t, 0, BlockKind::DatNode));
        Ok(())
    }

    fn temp_node(&mut self, t: u64) -> Result<Node> {
        let b = self.cache.get(pkey(t)).ok_or_else(|| {
            Error::corrupt(format!(
                "DAT node {t:#x} missing from the cache (engine bug)"
            ))
        })?;
        Node::decode(b, self.geo.block_bytes)
    }

    /// Replace temporary addresses inside the DAT's dirty nodes by the places given.
    fn rewrite_dat_pointers(
        &mut self,
        order: &[(u64, u64, BlockKind)],
        addr: &HashMap<u64, u64>,
    ) -> Result<()> {
        for &(t, _, kind) in order {
            if kind != BlockKind::DatNode {
                continue;
            }
            let mut node = self.temp_node(t)?;
            match &mut node {
                Node::Leaf { items } => {
                    for (_, val) in items.iter_mut() {
                        let a = decode_u64(val, "DAT block map")?;
                        if is_temp(a) {
                            *val = crate::btree::Value::from_slice(&addr[&a].to_le_bytes());
                        }
                    }
                }
                Node::Internal { children, .. } => {
                    for (_, c) in children.iter_mut() {
                        if is_temp(*c) {
                            *c = addr[c];
                        }
                    }
                }
            }
            let owner = self.cache.owner(pkey(t)).expect("DAT node cached");
            self.cache
                .put_dirty(pkey(t), node.encode(self.geo.block_bytes), owner);
        }
        Ok(())
    }

    /// Physical blocks for `n` payload blocks following `plan`.
    fn place(&self, plan: &Plan, n: usize) -> Vec<u64> {
        let mut out = Vec::with_capacity(n);
        for r in &plan.records {
            let first = self.geo.segment_start(r.seg) + r.off as u64 + r.nsum() as u64;
            out.extend((0..r.npayload as u64).map(|i| first + i));
        }
        assert_eq!(
            out.len(),
            n,
            "plan holds {} blocks, {} to place",
            out.len(),
            n
        );
        out
    }

    /// Encode and write the planned records, the last one carrying
    /// `inline` (items, `log/items.rs`). Returns (first block, seq) of the
    /// last record.
    fn write_records(
        &mut self,
        plan: &Plan,
        items: &[Item],
        cno: u64,
        first_flags: u32,
        super_root: Option<&[u8]>,
        inline: &[u8],
    ) -> Result<(u64, u64)> {
        let now = self.now();
        let mut it = items.iter();
        let mut last = (0, 0);
        let nrec = plan.records.len();
        for (ri, r) in plan.records.iter().enumerate() {
            let (entries, mut buf) = self.record_payload(r, &mut it, cno, super_root)?;
            let first = self.geo.segment_start(r.seg) + (r.off as usize + r.nsum()) as u64;
            let mut flags =
                record_flags(first_flags, ri == 0, ri + 1 == nrec && super_root.is_some());
            let (mut frame_blocks, mut frame_slots) = (0, 0);
            let mut later = None;
            match self.take_frame(first) {
                Some(TakenFrame::Made(frame, m, k)) => {
                    // The frame's slots stay the record's; only the frame is
                    // written, then the payload after them.
                    let at = r.nsum() * BLOCK_BYTES;
                    buf.splice(at..at + k as usize * BLOCK_BYTES, frame);
                    (flags, frame_blocks, frame_slots) = (flags | FLAG_COMPRESSED, m, k);
                }
                Some(TakenFrame::Later(k, proof, method)) => later = Some((k, proof, method)),
                None => {}
            }
            let last_record = ri + 1 == nrec;
            assert_eq!(
                r.inline_bytes,
                if last_record { inline.len() } else { 0 },
                "items go in the plan's last record"
            );
            let seq_gap = self.next_record_seq(flags & FLAG_DATA_STREAM != 0);
            let nsum = r.nsum() as u32;
            let h = RecordHeader {
                flags,
                fs_id: self.sb.fs_id,
                seq: self.seq,
                cno,
                segno: r.seg,
                nblocks: nsum + r.npayload as u32,
                nsum_blocks: nsum,
                next_seg: r.next_seg,
                created_secs: now,
                seq_gap,
                entries,
                inline: if last_record {
                    inline.to_vec()
                } else {
                    Vec::new()
                },
                frame_blocks,
                frame_slots,
            };
            let block = match later {
                Some((k, proof, method)) => self.write_record_later(r, h, buf, k, proof, method)?,
                None => self.write_record(r, &h, buf)?,
            };
            last = (block, self.seq);
        }
        Ok(last)
    }

    /// The summary entries of record `r`'s payload, the next `r.npayload`
    /// of `items`, and the whole record in one buffer: the summary blocks,
    /// zeroed here and filled in by `seal`, then each payload block copied
    /// in once.
    fn record_payload<'a>(
        &mut self,
        r: &PlannedRecord,
        items: &mut impl Iterator<Item = &'a Item>,
        cno: u64,
        super_root: Option<&[u8]>,
    ) -> Result<(Vec<SummaryEntry>, Vec<u8>)> {
        let nsum = r.nsum();
        let mut buf = self.dev.buffer((nsum + r.npayload) * BLOCK_BYTES);
        buf.resize(nsum * BLOCK_BYTES, 0);
        let mut entries = Vec::with_capacity(r.npayload);
        for _ in 0..r.npayload {
            let item = *items.next().expect("plan and items agree");
            entries.push(self.payload_of(item, cno, super_root, &mut buf)?);
            assert_eq!(buf.len(), (nsum + entries.len()) * BLOCK_BYTES);
        }
        Ok((entries, buf))
    }

    /// Number the next record (`self.seq`), and return its `seq_gap`: the
    /// data-stream records written since the log's last record, if it is
    /// the log's (a data-stream record counts itself and has none).
    fn next_record_seq(&mut self, data_stream: bool) -> u32 {
        self.seq += 1;
        if data_stream {
            self.data_records_since_log += 1;
            0
        } else {
            std::mem::take(&mut self.data_records_since_log)
        }
    }

    /// Seal record `r` (header `h` into the summary blocks of `buf`, which
    /// holds its payload after them), write it where the plan puts it, and
    /// count it; returns its first block.
    fn write_record(
        &mut self,
        r: &PlannedRecord,
        h: &RecordHeader,
        mut buf: Vec<u8>,
    ) -> Result<u64> {
        for e in &h.entries {
            *self.stats.blocks_by_class.entry(e.class()).or_default() += 1;
        }
        h.seal(&mut buf);
        let block = self.geo.segment_start(r.seg) + r.off as u64;
        // A kept frame may have come from the blocks written over now.
        self.frames.forget_read();
        if h.unwritten_slots() > 0 {
            // Two writes, the unwritten slots between them (both in this
            // flush's epoch; the record's CRC covers both).
            let head = (h.nsum_blocks + h.frame_blocks) as usize * BLOCK_BYTES;
            let tail = buf.split_off(head);
            self.dev.write_vec(self.geo.byte_offset(block), buf)?;
            if !tail.is_empty() {
                let at = block + (h.nsum_blocks + h.frame_slots) as u64;
                self.dev.write_vec(self.geo.byte_offset(at), tail)?;
            }
        } else {
            self.dev.write_vec(self.geo.byte_offset(block), buf)?;
        }
        self.segs.last_seq[r.seg as usize] = self.seq;
        self.stats.records_written += 1;
        self.stats.blocks_written += h.written_blocks() as u64;
        if h.frame_blocks > 0 {
            self.stats.compressed_records += 1;
            self.stats.compressed_slots_unwritten += h.unwritten_slots() as u64;
        }
        self.stats.payload_blocks_written += r.npayload as u64;
        Ok(block)
    }

    /// [`Store::write_record`] of a record whose first `k` payload slots
    /// are compressed when the I/O queue writes it (meta/compress.rs,
    /// `RecordLater`): queued as it is, raw, and counted now, except the
    /// blocks it writes (counted when its frame is made).
    fn write_record_later(
        &mut self,
        r: &PlannedRecord,
        h: RecordHeader,
        buf: Vec<u8>,
        k: u32,
        proof: crate::log::frame::PrefixProof,
        method: crate::log::frame::Method,
    ) -> Result<u64> {
        for e in &h.entries {
            *self.stats.blocks_by_class.entry(e.class()).or_default() += 1;
        }
        let block = self.geo.segment_start(r.seg) + r.off as u64;
        self.frames.forget_read();
        let w = self.record_later(block, h, buf, k, proof, method);
        self.io.write_deferred(w)?;
        self.segs.last_seq[r.seg as usize] = self.seq;
        self.stats.records_written += 1;
        self.stats.payload_blocks_written += r.npayload as u64;
        Ok(block)
    }

    /// The summary entry of `item`, whose block is appended to `out`.
    fn payload_of(
        &mut self,
        item: Item,
        cno: u64,
        sr: Option<&[u8]>,
        out: &mut Vec<u8>,
    ) -> Result<SummaryEntry> {
        Ok(match item {
            Item::Virtual(v) => {
                let o = self.cache.owner(vkey(v)).expect("dirty block cached");
                out.extend_from_slice(self.cache.get(vkey(v)).expect("dirty block cached"));
                SummaryEntry {
                    ino: o.ino,
                    offset: o.offset,
                    vblock: v,
                    cno,
                    kind: o.kind,
                }
            }
            Item::Dat(t) => {
                let o = self.cache.owner(pkey(t)).expect("DAT block cached");
                out.extend_from_slice(self.cache.get(pkey(t)).expect("DAT block cached"));
                SummaryEntry {
                    ino: DAT_INO,
                    offset: o.offset,
                    vblock: 0,
                    cno,
                    kind: o.kind,
                }
            }
            Item::SuperRoot => {
                out.extend_from_slice(sr.expect("super root given"));
                SummaryEntry {
                    ino: 0,
                    offset: 0,
                    vblock: 0,
                    cno,
                    kind: BlockKind::SuperRoot,
                }
            }
            Item::DatJournal(k) => {
                out.extend_from_slice(&self.dat_journal.encoded[k]);
                SummaryEntry {
                    ino: DAT_INO,
                    offset: k as u64,
                    vblock: 0,
                    cno,
                    kind: BlockKind::DatJournal,
                }
            }
        })
    }

    /// Write the superblock copy due next, pointing at checkpoint `cno`
    /// (record at `block` with sequence `seq`). It becomes durable with the
    /// next flush; until then the other copy still leads to a valid chain.
    pub(crate) fn write_superblock(&mut self, cno: u64, block: u64, seq: u64) -> Result<()> {
        self.sb.sb_seq += 1;
        self.sb.cp_cno = cno;
        self.sb.cp_record_block = block;
        self.sb.cp_record_seq = seq;
        self.sb.written_secs = self.now();
        let slot = (self.sb.sb_seq % 2) as usize;
        let at = if slot == 0 {
            0
        } else {
            self.geo.second_superblock()
        };
        let b = self.sb.encode();
        self.dev.write_at(self.geo.byte_offset(at), &b)?;
        self.sb_slot_seq[slot] = seq;
        Ok(())
    }

    /// Right after an ordering flush: write the other superblock copy for
    /// the newest checkpoint if only one names it yet. The flush ended the
    /// first copy's epoch (never both in one), and once both name the
    /// checkpoint, recovery's chain starts there: the segments written
    /// between the previous checkpoint and it become the cleaner's. With
    /// one copy moved on per checkpoint, the other named the one before,
    /// and up to 2/`log_checkpoint_share` of the device waited for
    /// cleaning. No flush of its own: a checkpoint that ends an fsync keeps
    /// its one flush.
    pub(crate) fn write_superblock_copy_due(&mut self) -> Result<()> {
        if let Some((cno, block, seq)) = self.sb_copy_due.take() {
            self.write_superblock(cno, block, seq)?;
        }
        Ok(())
    }

    /// Write both superblock copies for the newest checkpoint and flush:
    /// used at mkfs, after recovery and at unmount.
    pub fn settle_superblocks(&mut self) -> Result<()> {
        let (cno, block, seq) = (
            self.sb.cp_cno,
            self.sb.cp_record_block,
            self.sb.cp_record_seq,
        );
        // A checkpoint leaves its superblock write unflushed: make it
        // durable first, so that no epoch holds writes to both copies (a
        // crash could tear both).
        self.dev.flush()?;
        self.write_superblock(cno, block, seq)?;
        self.dev.flush()?;
        self.write_superblock(cno, block, seq)?;
        self.sb_copy_due = None;
        self.dev.flush()
    }

    /// fsync: one record with the dirty data blocks of the files `inos`
    /// and the inline items `inline` (namespace operations and inode
    /// images, `log/items.rs`), then one flush. Needs the image's
    /// inline-items feature (a read-write mount sets it).
    pub fn dsync(&mut self, inos: &[u64], inline: &[u8]) -> Result<()> {
        self.writable()?;
        let r = self.dsync_inner(inos, inline);
        if let Err(e @ Error::Io { .. }) = &r {
            self.fail(e);
        }
        r
    }

    fn dsync_inner(&mut self, inos: &[u64], inline: &[u8]) -> Result<()> {
        assert!(
            self.sb.inline_items(),
            "an fsync record with items on an image without the inline-items feature"
        );
        assert!(
            !inline.is_empty() && inline.len() <= MAX_INLINE_BYTES,
            "fsync record with {} inline bytes",
            inline.len()
        );
        let now = self.now();
        let inos: HashSet<u64> = inos.iter().copied().collect();
        let mut blocks: Vec<(u64, u64, u64)> = self
            .cache
            .dirty_keys()
            .into_iter()
            .filter(|&k| key_is_virtual(k))
            // Blocks the cleaner moved are not the file's news: the last
            // checkpoint finds them where they were (their victim is not
            // reused before the next checkpoint), and one may be an old
            // version the file has overwritten since, at the same offset.
            .filter(|&k| !self.plugs.is_cleaner_moved(key_addr(k)))
            .filter_map(|k| {
                let o = self.cache.owner(k)?;
                (inos.contains(&o.ino) && o.kind == BlockKind::Data).then_some((
                    o.ino,
                    o.offset,
                    key_addr(k),
                ))
            })
            .collect();
        blocks.sort_unstable();
        let mut taken = HashSet::new();
        let (blocks_in_log, extra_items) =
            self.dsync_to_streams(&blocks, inline.len(), &mut taken, now)?;
        let inline: Vec<u8> = [inline, &extra_items[..]].concat();
        let items: Vec<Item> = blocks_in_log.iter().map(|&v| Item::Virtual(v)).collect();
        let plan = self.plan_log(items.len(), inline.len(), &mut taken)?;
        self.place_fsync_blocks(&plan, &items, now)?;
        for r in &plan.records {
            self.add_written(r.seg, r.nblocks() as u32, now)?;
        }
        let cno = self.cur_cno;
        self.write_records(&plan, &items, cno, FLAG_DSYNC, None, &inline)?;
        // Only this fsync's durability depends on this flush (records are
        // checksummed and sequence-numbered; nothing later is ordered by
        // it): concurrent fsyncs may share it (device/io_queue.rs).
        self.io.flush_durable()?;
        self.commit_plan(&plan);
        // What the record covers is durable: blocks those files killed need
        // not wait for the next checkpoint (meta/durable_kills.rs).
        let covered: Vec<u64> = inos.iter().copied().collect();
        self.kills.synced(&covered);
        for &(_, _, v) in &blocks {
            self.cache.mark_clean(vkey(v));
        }
        self.stats.dsync_records_written += 1;
        Ok(())
    }

    /// Point the DAT at the places `plan` gives the fsync's `items` in the
    /// log, compressed or not (meta/compress.rs), and count them live.
    fn place_fsync_blocks(&mut self, plan: &Plan, items: &[Item], now: u64) -> Result<()> {
        let places = self.place(plan, items.len());
        self.drop_pending_frames();
        self.compress_plan(plan, items);
        for (item, &pos) in items.iter().zip(&places) {
            if let Item::Virtual(v) = *item {
                let mut e = self.dat_get(v)?.placed(pos);
                e.frame = self.frame_of_place(pos);
                self.dat_set(v, e)?;
                let seg = self.geo.segment_of(pos).expect("planned inside the log");
                self.add_live(seg, now)?;
            }
        }
        Ok(())
    }

    /// Write the data blocks of an fsync (`blocks`: (ino, offset, vblock))
    /// that belong in the cold or cleaner stream as data-stream records
    /// there, so that cold data stops sharing segments with hot data and
    /// metadata (fsync'd data used to go to the log, and the cleaner found
    /// the cold blocks among dead hot ones). The fsync's record in the log
    /// names them (`StreamRecord` items, returned encoded) and the one flush
    /// that follows covers both. Returns the blocks left for the log's
    /// record. A small fsync keeps everything in its one record (a separate
    /// record costs a header block).
    fn dsync_to_streams(
        &mut self,
        blocks: &[(u64, u64, u64)],
        inline_len: usize,
        taken: &mut HashSet<u64>,
        now: u64,
    ) -> Result<(Vec<u64>, Vec<u8>)> {
        let all = || blocks.iter().map(|&(_, _, v)| v).collect();
        if blocks.len() < DSYNC_STREAM_MIN_BLOCKS || !self.streams_can_run() {
            return Ok((all(), Vec::new()));
        }
        let mut per = self.dsync_streams_of(blocks);
        let item_bytes = crate::log::items::Item::StreamRecord {
            block: 0,
            seq: 0,
            nblocks: 0,
        }
        .encoded_len();
        // Hot blocks stay in the log's record: it is written anyway, and
        // its segments hold what dies soon like them (the checkpoints'
        // metadata and the fsync records' summaries), so a record of their
        // own bought no separation and cost a header block per fsync (at
        // fsync every 32 writes, 0.03 blocks per write: device WA 1.62 →
        // 1.57, docs/CLEANER.md). Cold blocks still go to their stream.
        // As many as the log's record takes while it stays one record (a
        // split one carries the items in its last part, and the stream
        // records it names must come right before the record that names
        // them, log/chain.rs); the rest, at the end of the log's segment,
        // go to the hot stream.
        let nhot = per[Stream::HotUser as usize].len();
        if nhot > 0 {
            let others = [Stream::ColdUser, Stream::Cleaner]
                .iter()
                .filter(|&&st| !per[st as usize].is_empty())
                .count();
            // The hot stream's records too, if some hot blocks are left.
            let inline = inline_len + (others + 1) * 2 * item_bytes;
            let nmeta = per[Stream::Meta as usize].len();
            if inline <= MAX_INLINE_BYTES {
                // The most that fit: fitting shrinks with the payload.
                let (mut lo, mut hi) = (0, nhot);
                while lo < hi {
                    let mid = (lo + hi).div_ceil(2);
                    if self.log_takes_one_record(nmeta + mid, inline, taken) {
                        lo = mid;
                    } else {
                        hi = mid - 1;
                    }
                }
                let hot: Vec<u64> = per[Stream::HotUser as usize].drain(..lo).collect();
                per[Stream::Meta as usize].extend(hot);
            }
        }
        let nrecords: usize = Stream::DATA
            .iter()
            .filter(|&&st| !per[st as usize].is_empty())
            .count()
            * 2; // a segment boundary may split one
        if nrecords * item_bytes > MAX_INLINE_BYTES / 4 {
            return Ok((all(), Vec::new()));
        }
        let mut refs = crate::codec::Writer::default();
        for st in Stream::DATA {
            let vs = std::mem::take(&mut per[st as usize]);
            if !vs.is_empty() {
                self.dsync_stream_records(st, &vs, taken, now, &mut refs)?;
            }
        }
        Ok((per[Stream::Meta as usize].clone(), refs.finish()))
    }

    /// Whether a record of the log with `npayload` blocks and `inline`
    /// bytes of items is written as one record (not split at the end of the
    /// log's segment, nor by size).
    fn log_takes_one_record(&self, npayload: usize, inline: usize, taken: &HashSet<u64>) -> bool {
        let mut t = taken.clone();
        self.plan_log(npayload, inline, &mut t)
            .is_ok_and(|p| p.records.len() == 1)
    }

    /// The fsync's data blocks (`blocks`: (ino, offset, vblock)) by the
    /// stream a checkpoint with streams would write them to.
    fn dsync_streams_of(&mut self, blocks: &[(u64, u64, u64)]) -> [Vec<u64>; 4] {
        let was_active = std::mem::replace(&mut self.streams.active, true);
        let mut per: [Vec<u64>; 4] = Default::default();
        for &(ino, offset, v) in blocks {
            let o = Owner {
                ino,
                offset,
                kind: BlockKind::Data,
            };
            let st = self.stream_of(v, &o);
            per[st as usize].push(v);
        }
        self.streams.active = was_active;
        per
    }

    /// The `StreamRecord` items naming the data-stream records of `plan`,
    /// just written from sequence number `first_seq` on.
    fn stream_record_refs(&self, plan: &Plan, first_seq: u64) -> Vec<crate::log::items::Item> {
        plan.records
            .iter()
            .enumerate()
            .map(|(i, r)| crate::log::items::Item::StreamRecord {
                block: self.geo.segment_start(r.seg) + r.off as u64,
                seq: first_seq + i as u64,
                nblocks: r.nblocks() as u32,
            })
            .collect()
    }

    /// Write the fsync's blocks `vs` of data stream `st` as records of that
    /// stream (placed, counted, clean), and encode into `refs` the
    /// `StreamRecord` items that name those records.
    fn dsync_stream_records(
        &mut self,
        st: Stream,
        vs: &[u64],
        taken: &mut HashSet<u64>,
        now: u64,
        refs: &mut crate::codec::Writer,
    ) -> Result<()> {
        let cno = self.cur_cno;
        let plan = self.plan_data(st, vs.len(), taken)?;
        let places = self.place(&plan, vs.len());
        let items: Vec<Item> = vs.iter().map(|&v| Item::Virtual(v)).collect();
        self.drop_pending_frames();
        self.compress_plan(&plan, &items);
        for (&v, &pos) in vs.iter().zip(&places) {
            let seg = self.geo.segment_of(pos).expect("planned inside the log");
            let mut e = self.dat_get(v)?;
            e = e.placed(pos);
            e.frame = self.frame_of_place(pos);
            self.dat_set(v, e)?;
            self.add_live(seg, now)?;
            let o = self.cache.owner(vkey(v)).expect("dirty block has an owner");
            self.note_stream_write(v, &o, st);
        }
        for r in &plan.records {
            self.add_written(r.seg, r.nblocks() as u32, now)?;
            let u = &mut self.segs.usage[r.seg as usize];
            u.flags = (u.flags & !STREAM_MASK) | st.flags();
            self.streams.blocks_written[st as usize] += r.npayload as u64;
        }
        let first_seq = self.seq + 1;
        self.write_records(&plan, &items, cno, FLAG_DATA_STREAM | FLAG_DSYNC, None, &[])?;
        for it in self.stream_record_refs(&plan, first_seq) {
            it.encode(refs);
        }
        self.commit_data(st, &plan);
        for &v in vs {
            self.cache.mark_clean(vkey(v));
        }
        self.stats.dsync_stream_blocks += vs.len() as u64;
        Ok(())
    }

    /// Write a record of the log's chain with no payload, only `inline`
    /// items and `flags`, and flush it (a move record,
    /// meta/move_record.rs).
    pub(super) fn write_items_record(&mut self, flags: u32, inline: &[u8]) -> Result<()> {
        let now = self.now();
        let mut taken = HashSet::new();
        let plan = self.plan_log(0, inline.len(), &mut taken)?;
        for r in &plan.records {
            self.add_written(r.seg, r.nblocks() as u32, now)?;
        }
        let cno = self.cur_cno;
        self.drop_pending_frames();
        self.write_records(&plan, &[], cno, flags, None, inline)?;
        self.dev.flush()?;
        self.write_superblock_copy_due()?;
        self.commit_plan(&plan);
        Ok(())
    }

    /// Write the blocks the cleaner has moved to their data streams now,
    /// as the next checkpoint would, then flush. They leave the cache, so a
    /// pass's copies no longer wait there taking room (a writer short of
    /// segments counted each twice). Only their DAT entries and segment
    /// counters change in memory, written by the next checkpoint; until then
    /// the DAT on disk still points into the victims, which are not reused
    /// before it, so a crash leaves these records as dead space, as a
    /// checkpoint whose chain did not complete leaves its data streams.
    /// Returns the blocks written.
    /// Returns the `StreamRecord` items naming the records it wrote (for
    /// a move record, meta/move_record.rs).
    pub fn write_moved_ahead(&mut self) -> Result<Vec<crate::log::items::Item>> {
        self.writable()?;
        let r = self.write_moved_ahead_inner();
        if let Err(e @ Error::Io { .. }) = &r {
            self.fail(e);
        }
        r
    }

    fn write_moved_ahead_inner(&mut self) -> Result<Vec<crate::log::items::Item>> {
        // The cleaner's copies are written raw: no frame of an earlier,
        // failed construction may pass for theirs.
        self.drop_pending_frames();
        let mut refs = Vec::new();
        if !self.streams_can_run() || self.plugs.cleaner_moved().next().is_none() {
            return Ok(refs);
        }
        let was_active = std::mem::replace(&mut self.streams.active, true);
        let mut per: [Vec<(u64, u64, u64)>; 4] = Default::default();
        let moved: Vec<u64> = self.plugs.cleaner_moved().collect();
        for v in moved {
            if !self.cache.is_dirty(vkey(v)) {
                continue;
            }
            let o = self.cache.owner(vkey(v)).expect("dirty block has an owner");
            let st = self.stream_of(v, &o);
            if st != Stream::Meta {
                self.note_stream_write(v, &o, st);
                per[st as usize].push((o.ino, o.offset, v));
            }
        }
        self.streams.active = was_active;
        let now = self.now();
        let cno = self.cur_cno;
        let mut taken = HashSet::new();
        let mut written = 0;
        for st in Stream::DATA {
            let mut blocks = std::mem::take(&mut per[st as usize]);
            if blocks.is_empty() {
                continue;
            }
            blocks.sort_unstable();
            let plan = self.plan_data(st, blocks.len(), &mut taken)?;
            let places = self.place(&plan, blocks.len());
            for (&(_, _, v), &pos) in blocks.iter().zip(&places) {
                let seg = self.geo.segment_of(pos).expect("planned inside the log");
                let mut e = self.dat_get(v)?;
                assert_eq!(e.pblock, 0, "moved block {v} placed twice");
                e = e.placed(pos);
                self.dat_set(v, e)?;
                if !self.moved_dead.remove(&v) {
                    self.add_live(seg, now)?;
                } else if self.snapshot_counted(v, e.start, e.end) {
                    self.add_snapshot(seg, 1)?;
                }
            }
            for r in &plan.records {
                self.add_written(r.seg, (summary_blocks(r.npayload) + r.npayload) as u32, now)?;
                let u = &mut self.segs.usage[r.seg as usize];
                u.flags = (u.flags & !STREAM_MASK) | st.flags();
                self.streams.blocks_written[st as usize] += r.npayload as u64;
            }
            let items: Vec<Item> = blocks.iter().map(|&(_, _, v)| Item::Virtual(v)).collect();
            let first_seq = self.seq + 1;
            self.write_records(&plan, &items, cno, FLAG_DATA_STREAM, None, &[])?;
            refs.extend(self.stream_record_refs(&plan, first_seq));
            self.commit_data(st, &plan);
            for &(_, _, v) in &blocks {
                self.cache.mark_clean(vkey(v));
                self.streams.moved_stream.remove(&v);
            }
            written += blocks.len();
        }
        if written > 0 {
            self.dev.flush()?;
            self.write_superblock_copy_due()?;
            self.stats.blocks_written_ahead += written as u64;
        }
        Ok(refs)
    }

    /// Keys of dirty blocks, for tests and checks.
    pub fn dirty_keys(&self) -> Vec<CacheKey> {
        self.cache.dirty_keys()
    }
}

#[allow(dead_code)]
const _: () = assert!(IFILE_INO != CPFILE_INO);
