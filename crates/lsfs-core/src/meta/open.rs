//! Creating a store on a blank device (mkfs) and opening an existing one:
//! pick the newest valid superblock, follow the log from its checkpoint to
//! the last complete checkpoint, and hand back the fsync records written
//! after it for the file layer to roll forward.

use crate::btree::BTree;
use crate::cache::BlockCache;
use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::layout::{Geometry, BLOCK_BYTES, FIRST_USER_INO};
use crate::log::chain::{check_counted, follow_chain, read_record, FoundRecord};
use crate::log::record::{BlockKind, FLAG_DATA_STREAM, FLAG_DSYNC, FLAG_MOVES, FLAG_SUPER_ROOT};
use crate::log::super_root::SuperRoot;
use crate::log::superblock::Superblock;
use crate::meta::cpfile::CpTable;
use crate::meta::dat_entry::{DatEntry, DAT_PER_BLOCK};
use crate::meta::store::{decode_u64, Store, StoreConfig, StoreStats, VNodesRo, TEMP_BASE};
use crate::meta::sufile::SegTable;

/// What mkfs needs to know.
#[derive(Clone, Debug)]
pub struct MkfsOptions {
    pub segment_blocks: u32,
    pub label: String,
}

impl Default for MkfsOptions {
    fn default() -> Self {
        MkfsOptions {
            segment_blocks: crate::layout::DEFAULT_SEGMENT_BLOCKS,
            label: String::new(),
        }
    }
}

/// The result of opening an image.
pub struct Opened {
    pub store: Store,
    /// fsync records after the last complete checkpoint, oldest first.
    pub replay: Vec<FoundRecord>,
}

/// How far the sequence number jumps when an image is opened, so that no
/// record written afterwards can take a record already on the device as its
/// successor in the chain. Two kinds of stale record lie beyond the chain's
/// end with higher sequence numbers: those of the crashed run's last epoch
/// that landed while an earlier one was lost (at most one per block of the
/// log: one epoch never writes a block twice), and those of an earlier
/// recovery from the same checkpoint that crashed in turn, whose own jump
/// was drawn at random. Found at a successor position with the right
/// number, either would splice a checkpoint that never completed into the
/// chain. So: past the first kind for sure, then a random distance, so that
/// two recoveries collide with a chance of about one in 2^32 (that of a
/// torn record passing its CRC32C). Sequence numbers stay far below their
/// limit: 2^62 allows a billion opens.
fn sequence_jump(geo: &Geometry) -> u64 {
    let lost = geo.total_segment_blocks().min(1 << 31);
    // seq_gap is a u32: leave room for the data-stream records written
    // before the first log record.
    let room = u32::MAX as u64 - (1 << 24) - lost;
    lost + 1 + rand::random::<u64>() % room
}

impl Store {
    /// A new, empty store on `dev` (nothing is written until the first checkpoint).
    pub fn create(
        dev: Box<dyn BlockDevice>,
        opts: &MkfsOptions,
        config: StoreConfig,
    ) -> Result<Store> {
        if opts.label.len() > crate::log::superblock::LABEL_BYTES {
            return Err(Error::invalid(format!(
                "label of {} bytes: at most 64",
                opts.label.len()
            )));
        }
        let geo = Geometry::for_device(dev.size_bytes(), opts.segment_blocks)?;
        let (config_streams, config_streams_min) = (config.streams, config.streams_min_segments);
        let now = config.clock.secs();
        let sb = Superblock::new(&geo, opts.label.clone(), rand::random::<u64>() | 1, now);
        let mut segs = SegTable::new(geo.nsegments, geo.segment_blocks);
        segs.reserved.insert(0);
        segs.reserved.insert(1);
        let io = crate::device::IoQueue::new(dev);
        Ok(Store {
            dev: io.device(),
            io,
            geo,
            sb,
            sb_slot_seq: [0, 0],
            sb_copy_due: None,
            cache: BlockCache::new(config.cache_blocks),
            segs,
            cps: CpTable::default(),
            dat_root: 0,
            next_vblock: 1,
            fresh_floor: 1,
            next_temp: TEMP_BASE,
            ifile_root: 0,
            cpfile_root: 0,
            sufile_root: 0,
            ssa_root: 0,
            next_ino: FIRST_USER_INO,
            cur_cno: 1,
            seq: 0,
            cur_seg: 0,
            cur_off: 0,
            next_seg: 1,
            inodes_used: 0,
            blocks_used: 0,
            config,
            failed: None,
            stats: StoreStats::default(),
            tree: BTree::default(),
            snapshots: Vec::new(),
            moved_dead: Default::default(),
            kills: Default::default(),
            freed_after_replay: Default::default(),
            give_up_plain_at_checkpoint: false,
            dat_map: Default::default(),
            recon: Default::default(),
            deaths_since_checkpoint: 0,
            dat_cause: "other",
            dat_reuse: Default::default(),
            plugs: Default::default(),
            dat_journal: Default::default(),
            discards: Default::default(),
            frames: Default::default(),
            nocompress: Default::default(),
            data_records_since_log: 0,
            streams: crate::meta::stream::Streams::new(
                config_streams && geo.nsegments >= config_streams_min,
            ),
        })
    }

    /// Open the store on `dev`: newest valid superblock, then the log.
    pub fn open(mut dev: Box<dyn BlockDevice>, config: StoreConfig) -> Result<Opened> {
        let size = dev.size_bytes();
        if size < 2 * BLOCK_BYTES as u64 {
            return Err(Error::corrupt(format!(
                "device of {size} bytes is too small to hold an lsfs image"
            )));
        }
        let last_block = size / BLOCK_BYTES as u64 - 1;
        let mut candidates = Vec::new();
        let mut problems = Vec::new();
        for (slot, at) in [(0usize, 0u64), (1, last_block)] {
            let mut b = vec![0; BLOCK_BYTES];
            dev.read_at(at * BLOCK_BYTES as u64, &mut b)?;
            match Superblock::decode(&b, &format!("block {at}"), size) {
                Ok(sb) => candidates.push((slot, sb)),
                Err(e) => problems.push(e),
            }
        }
        // A foreign or future image: both copies say so; report the first.
        if candidates.is_empty() {
            let first = problems.remove(0);
            return Err(match first {
                Error::Unsupported { .. } => first,
                other => Error::corrupt(format!(
                    "no valid superblock: {other}; {}",
                    problems.first().map(|e| e.to_string()).unwrap_or_default()
                )),
            });
        }
        if let Some(Error::Unsupported { what }) = problems.first() {
            if !what.contains("no lsfs magic") {
                return Err(Error::unsupported(what.clone()));
            }
        }
        candidates.sort_by_key(|(_, sb)| std::cmp::Reverse(sb.sb_seq));
        let mut slot_seq = [0u64; 2];
        for (slot, sb) in &candidates {
            slot_seq[*slot] = sb.cp_record_seq;
        }
        let mut last_err = None;
        for (_, sb) in &candidates {
            let geo = sb.geometry();
            match read_record(&mut *dev, &geo, sb.fs_id, sb.cp_record_block, Some(sb.cp_record_seq))? {
                Some(rec) if rec.header.flags & FLAG_SUPER_ROOT != 0 => {
                    return Store::open_from(dev, sb.clone(), rec, slot_seq, config);
                }
                _ => {
                    last_err = Some(Error::corrupt(format!(
                        "superblock (copy {}) points at checkpoint {} in block {}, but no valid checkpoint record is there",
                        sb.sb_seq, sb.cp_cno, sb.cp_record_block
                    )))
                }
            }
        }
        Err(last_err.expect("at least one candidate"))
    }

    fn open_from(
        mut dev: Box<dyn BlockDevice>,
        sb: Superblock,
        start: FoundRecord,
        slot_seq: [u64; 2],
        config: StoreConfig,
    ) -> Result<Opened> {
        let geo = sb.geometry();
        let chain = follow_chain(&mut *dev, &geo, sb.fs_id, &start)?;
        let base_idx = chain
            .iter()
            .rposition(|r| r.header.flags & FLAG_SUPER_ROOT != 0);
        let base = base_idx
            .map(|i| chain[i].clone())
            .unwrap_or_else(|| start.clone());
        let after: &[FoundRecord] = match base_idx {
            Some(i) => &chain[i + 1..],
            None => &chain[..],
        };
        let sr_pos = base.header.entries.len() - 1;
        if base.header.entries[sr_pos].kind != BlockKind::SuperRoot {
            return Err(Error::corrupt(format!(
                "checkpoint record at block {} does not end with a super root",
                base.block
            )));
        }
        let sr_block = base.payload_block(sr_pos);
        let mut b = vec![0; BLOCK_BYTES];
        dev.read_at(geo.byte_offset(sr_block), &mut b)?;
        let sr = SuperRoot::decode(&b, &format!("block {sr_block}"))?;
        if sr.nsegments != geo.nsegments {
            return Err(Error::corrupt(format!(
                "super root at block {sr_block} says {} segments, superblock {}",
                sr.nsegments, geo.nsegments
            )));
        }
        let last = chain.last().unwrap_or(&start).clone();
        let mut store = Store::create_for_open(dev, geo, sb, &sr, slot_seq, config)?;
        // Before anything reads a DAT entry.
        store.dat_journal_load(&sr.dat_journal)?;
        store.check_dat_end(sr_block)?;
        store.load_sufile()?;
        // A checkpoint's SUFILE counts its own record and the DAT's root
        // (fsck checks it exact); a damaged one must not pass as free space.
        store.check_sufile_counts(sr_block, "its super root", false)?;
        store.check_sufile_counts(sr.dat_root, "the DAT's root", true)?;
        store.load_cpfile()?;
        if !store.cps.entries.contains_key(&sr.cno) {
            return Err(Error::corrupt(format!(
                "checkpoint {} is missing from its own CPFILE",
                sr.cno
            )));
        }
        // The base checkpoint's SUFILE counts its records and those before
        // it; records after it occupy space that SUFILE does not know of.
        let counted = base_idx.map_or(&chain[..0], |i| &chain[..=i]);
        for r in std::iter::once(&start).chain(counted) {
            let written = store.segs.usage[r.header.segno as usize].nblocks;
            check_counted(&geo, r, written, false)?;
        }
        let now = store.now();
        // The data-stream records since the last record of the chain: those
        // the next one names (follow_chain put them right before it).
        let mut named: Vec<&FoundRecord> = Vec::new();
        for r in after {
            let seg = r.header.segno;
            let written = store.segs.usage[seg as usize].nblocks;
            if r.header.flags & FLAG_DATA_STREAM != 0 {
                named.push(r);
                // An fsync's stream record, in its stream's segment: count
                // the segment written up to its end (a record the cleaner
                // wrote ahead may lie before it, dead), so nothing reuses
                // that space before the recovery checkpoint replays it.
                let end = (r.end_block() - geo.segment_start(seg)) as u32;
                if end > written {
                    store.segs.add_written(seg, end - written, now)?;
                }
                continue;
            }
            check_counted(&geo, r, written, true)?;
            store.segs.add_written(seg, r.header.nblocks, now)?;
            if r.header.flags & FLAG_MOVES != 0 {
                // Its victims are free from here on: records after it may
                // lie in them, counted from their start.
                store.apply_move_record(r, &named)?;
            }
            named.clear();
        }
        for r in std::iter::once(&start).chain(chain.iter()) {
            store.segs.last_seq[r.header.segno as usize] = r.header.seq;
        }
        // The next record's sequence number jumps past every record that
        // may lie on the device beyond the chain's end (see
        // `sequence_jump`); its `seq_gap` says by how much.
        let jump = sequence_jump(&geo);
        store.seq = last.header.seq + jump;
        store.data_records_since_log = jump as u32;
        store.cur_seg = last.header.segno;
        store.cur_off = (last.end_block() - geo.segment_start(last.header.segno)) as u32;
        store.next_seg = last.header.next_seg;
        if store.next_seg >= geo.nsegments {
            return Err(Error::corrupt(format!(
                "record at block {} names next segment {}",
                last.block, store.next_seg
            )));
        }
        store.segs.reserved.clear();
        store.segs.reserved.insert(store.cur_seg);
        store.segs.reserved.insert(store.next_seg);
        store.resume_stream_heads();
        let replay = after
            .iter()
            .filter(|r| r.header.flags & FLAG_DSYNC != 0)
            .cloned()
            .collect();
        Ok(Opened { store, replay })
    }

    fn create_for_open(
        dev: Box<dyn BlockDevice>,
        geo: Geometry,
        sb: Superblock,
        sr: &SuperRoot,
        slot_seq: [u64; 2],
        config: StoreConfig,
    ) -> Result<Store> {
        let mut s = Store::create(
            dev,
            &MkfsOptions {
                segment_blocks: geo.segment_blocks,
                label: String::new(),
            },
            config,
        )?;
        s.geo = geo;
        s.sb = sb;
        s.sb_slot_seq = slot_seq;
        s.dat_root = sr.dat_root;
        s.next_vblock = sr.next_vblock;
        s.fresh_floor = sr.next_vblock;
        s.ifile_root = sr.ifile_root;
        s.cpfile_root = sr.cpfile_root;
        s.sufile_root = sr.sufile_root;
        s.ssa_root = sr.ssa_root;
        s.next_ino = sr.next_ino;
        s.cur_cno = sr.cno + 1;
        s.inodes_used = sr.inodes_used;
        s.blocks_used = sr.blocks_used;
        s.recon = crate::meta::reconcile::Reconcile::restore(
            sr.reconcile_queue.clone(),
            sr.reconcile_cursor,
        );
        s.segs = SegTable::new(geo.nsegments, geo.segment_blocks);
        s.streams = crate::meta::stream::Streams::new(
            s.config.streams && geo.nsegments >= s.config.streams_min_segments,
        );
        Ok(s)
    }

    /// The super root's end of the DAT is past every entry in use: new
    /// virtual blocks are handed out from there, and one that is in use
    /// would be handed out twice (the `image` fuzz target zeroed it; the
    /// checkpoint after recovery then tripped an assertion). Two reads: the
    /// DAT's last block, and the block holding the end.
    fn check_dat_end(&mut self, sr_block: u64) -> Result<()> {
        let end = self.next_vblock;
        let bad = |what: String| {
            Err(Error::corrupt(format!(
                "super root at block {sr_block}: the DAT ends at virtual block {end}, {what}"
            )))
        };
        if end == 0 {
            // Virtual block 0 means "none" in every block map.
            return bad("but numbers start at 1".into());
        }
        if let Some(idx) = self.dat_last_block()? {
            if idx > end / DAT_PER_BLOCK {
                return bad(format!("yet DAT block {idx} exists"));
            }
        }
        let b = self.dat_block(end / DAT_PER_BLOCK)?;
        let first = (end % DAT_PER_BLOCK) as usize;
        if let Some(slot) =
            (first..DAT_PER_BLOCK as usize).find(|&i| !DatEntry::slot_is_free(&b, i))
        {
            let v = end - first as u64 + slot as u64;
            return bad(format!("yet virtual block {v} is in use"));
        }
        Ok(())
    }

    fn load_sufile(&mut self) -> Result<()> {
        for idx in 0..self.segs.nblocks_sufile() {
            // A block never written holds only free segments.
            let Some(v) = self.mfile_get(self.sufile_root, idx)? else {
                continue;
            };
            let b = self.vread(
                v,
                crate::cache::Owner {
                    ino: crate::layout::SUFILE_INO,
                    offset: idx,
                    kind: BlockKind::Data,
                },
            )?;
            self.segs.decode_block(idx, &b)?;
        }
        for (s, u) in self.segs.usage.iter().enumerate() {
            if u.nblocks > self.geo.segment_blocks || u.nlive > u.nblocks || u.nsnapshot > u.nblocks
            {
                return Err(Error::corrupt(format!(
                    "SUFILE entry of segment {s} is impossible: {u:?}"
                )));
            }
        }
        Ok(())
    }

    /// `Ok` if the SUFILE counts block `addr` (of the checkpoint being
    /// opened) as written, and as live if `live`.
    fn check_sufile_counts(&self, addr: u64, what: &str, live: bool) -> Result<()> {
        let Some(seg) = self.geo.segment_of(addr) else {
            return Ok(());
        };
        let u = &self.segs.usage[seg as usize];
        if u.nblocks == 0 || (live && u.nlive == 0) {
            return Err(Error::corrupt(format!(
                "SUFILE entry of segment {seg} counts no {} blocks, but {what} (block {addr}) is there: {u:?}",
                if live { "live" } else { "written" }
            )));
        }
        Ok(())
    }

    fn load_cpfile(&mut self) -> Result<()> {
        let tree = self.tree;
        let root = self.cpfile_root;
        let mut blocks = Vec::new();
        let mut key = 0u64;
        while let Some((idx, val)) = tree.ceil(&mut VNodesRo { s: self }, root, key)? {
            blocks.push((idx, decode_u64(&val, "CPFILE block map")?));
            key = match idx.checked_add(1) {
                Some(k) => k,
                None => break,
            };
        }
        for (idx, v) in blocks {
            let b = self.vread(
                v,
                crate::cache::Owner {
                    ino: crate::layout::CPFILE_INO,
                    offset: idx,
                    kind: BlockKind::Data,
                },
            )?;
            self.cps.decode_block(idx, &b)?;
        }
        self.cps.dirty_blocks.clear();
        self.snapshots = self.cps.snapshots();
        self.recon.refresh(&self.snapshots);
        Ok(())
    }
}
