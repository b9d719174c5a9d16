//! Relocation: moving what is still needed out of victim segments.
//!
//! A block keeps its virtual block number when it moves, so only its DAT
//! entry changes and no tree above it is rewritten (docs/DESIGN.md §4.2). The
//! block is put in the cache as dirty with its old owner, its DAT entry
//! forgets the old place, and the next checkpoint places it. Blocks that are
//! dead and needed by no kept checkpoint or snapshot are not copied; their
//! DAT entries are freed. The victim is then free of live and snapshot blocks
//! and is marked freed, usable once that checkpoint is durable.

use crate::btree::Node;
use crate::cache::Owner;
use crate::error::{Error, Result};
use crate::gc::victim_reads::VictimReads;
use crate::log::record::{holds_file_data, BlockKind};
use crate::meta::dat_entry::{DatEntry, CNO_MAX, DAT_PER_BLOCK};
use crate::meta::store::Store;
use crate::meta::stream::Stream;
use std::collections::HashMap;

/// What relocating one segment did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Relocated {
    pub segno: u64,
    /// The stream the segment was written by (meta, hot, cold, cleaner).
    pub stream: &'static str,
    /// Blocks the segment held (headers included).
    pub nblocks: u32,
    /// Live blocks of the current file system copied.
    pub live_copied: u32,
    /// Dead blocks copied because a snapshot or a kept checkpoint needs them.
    pub protected_copied: u32,
    /// DAT blocks and nodes rewritten.
    pub dat_copied: u32,
    /// DAT entries of unneeded dead blocks freed.
    pub freed_entries: u32,
    /// Of the live and protected blocks copied, those holding file data
    /// (the rest are metadata: IFILE, CPFILE, SUFILE blocks and tree nodes).
    pub file_data_copied: u32,
    /// Virtual blocks copied (for the move record, meta/move_record.rs).
    #[serde(skip)]
    pub moved: Vec<u64>,
    /// Virtual blocks whose DAT entries were freed.
    #[serde(skip)]
    pub freed: Vec<u64>,
    /// Nothing but copies of virtual blocks and freed entries: a move
    /// record may free the segment (if the copies left the cache).
    #[serde(skip)]
    pub move_record_ok: bool,
    /// Some freed blocks are seen by the latest checkpoint, their deaths
    /// durable: plain checkpoints up to it are to be given up.
    #[serde(skip)]
    pub gives_up_base: bool,
}

/// One block's fate when its segment is cleaned.
#[derive(Clone, Debug)]
enum Action {
    /// Live in the current file system: copy.
    MoveLive(u64, DatEntry, Owner, u64),
    /// Dead but seen by a snapshot or a kept checkpoint: copy.
    MoveProtected(u64, DatEntry, Owner, u64),
    /// Dead and needed by nothing: free its DAT entry.
    Free(u64, DatEntry),
    /// A DAT block the current DAT still uses: rewrite.
    CowDat(u64),
    /// A DAT tree node, rewritten with the block below it.
    DatNode(u64),
    /// A block of the last checkpoint's DAT journal: the next checkpoint
    /// writes the journal whole again (before the victim can be reused),
    /// so it dies now.
    DropJournal(u64),
}

/// Which plain checkpoints a plan keeps the dead blocks of (snapshots are
/// always kept).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepCheckpoints {
    /// Every plain checkpoint kept now: dead blocks they see are copied.
    Kept,
    /// No plain checkpoint (under space pressure): the plan frees what
    /// older plain checkpoints alone hold, and says which of them must be
    /// given up first ([`RelocationPlan::give_up_below`]). It also frees the
    /// blocks that died since the latest checkpoint, which is the recovery
    /// base until the next one is written: the victims are not reused
    /// before that one is durable, and it gives up every plain checkpoint
    /// before it ([`RelocationPlan::freed_at_next_checkpoint`]). Those whose
    /// death is already durable need no wait ([`RelocationPlan::freed_giving_up_base`]).
    LatestOnly,
}

/// The checkpoints a plan keeps the dead blocks of, by number.
struct KeepHorizon {
    keep: KeepCheckpoints,
    /// The oldest plain checkpoint kept now.
    kept_now: u64,
    /// The latest checkpoint written (the recovery base).
    latest: u64,
    /// Dead blocks with `end` above it are seen by a checkpoint the plan keeps.
    oldest_kept: u64,
    /// The last checkpoint written, recovery's base (whether or not the
    /// CPFILE in memory still keeps it).
    base: u64,
    /// Free without a copy the dead blocks the base still sees whose death
    /// is durable (meta/durable_kills.rs): a move record can then free the
    /// victim at once (meta/move_record.rs).
    free_durable_kills: bool,
}

/// What cleaning one segment would cost, known before anything is copied.
#[derive(Clone, Debug, Default)]
pub struct RelocationPlan {
    pub segno: u64,
    pub nblocks: u32,
    actions: Vec<Action>,
    /// DAT blocks that moving would dirty (and the checkpoint write).
    pub dat_blocks_dirtied: u32,
    /// Dead blocks the plan copies because a plain checkpoint it keeps sees
    /// them (not a snapshot): with [`KeepCheckpoints::LatestOnly`], those
    /// that died since the latest checkpoint.
    pub held_by_checkpoints: u32,
    /// Plain checkpoints numbered below this must be given up before the
    /// plan is carried out: it frees dead blocks only they see (0: none).
    pub give_up_below: u64,
    /// Dead blocks freed only because of that giving up.
    pub freed_by_giving_up: u32,
    /// Dead blocks freed that the latest checkpoint still sees (they died
    /// since): carrying out the plan requires
    /// [`Store::give_up_at_next_checkpoint`], and the victim must not be
    /// written into before that checkpoint (no plugging).
    pub freed_at_next_checkpoint: u32,
    /// Dead blocks freed that plain checkpoints up to recovery's base see,
    /// and that recovery will not need: the base sees them only if the
    /// write that killed them is durable (meta/durable_kills.rs). A move
    /// record may free the victim at once, but every plain checkpoint up to
    /// the base must be given up by the next checkpoint (and by recovery's).
    pub freed_giving_up_base: u32,
    /// A block that stays lives in a compressed record: its frame's
    /// blocks, in slots dead or not, must stay too, so the victim is
    /// never plugged (threaded logging would write over the frame).
    pub holds_frames: bool,
    /// The victim's records as read to plan: the copies take their
    /// blocks from them (`gc/victim_reads.rs`).
    reads: VictimReads,
}

impl RelocationPlan {
    pub fn live(&self) -> u32 {
        self.count(|a| matches!(a, Action::MoveLive(..)))
    }
    /// Dead blocks that would be copied because something still sees them.
    pub fn protected(&self) -> u32 {
        self.count(|a| matches!(a, Action::MoveProtected(..)))
    }
    /// Blocks written by cleaning this segment: copies, DAT blocks, DAT nodes.
    pub fn blocks_written(&self) -> u64 {
        let copies = self.count(|a| !matches!(a, Action::Free(..)));
        copies as u64 + self.dat_blocks_dirtied as u64
    }
    /// Blocks freed net of the copies. The DAT blocks the moves dirty are
    /// left out: each is rewritten once per checkpoint however many victims
    /// of the pass share it (the whole DAT of a small-file workload can be
    /// a few hundred blocks), so they are a cost of the pass, not of one
    /// victim; the room check counts them.
    pub fn gain(&self) -> i64 {
        let copies = self.count(|a| !matches!(a, Action::Free(..)));
        self.nblocks as i64 - copies as i64
    }
    /// The dead blocks nothing needs: (virtual block, DAT entry).
    pub(crate) fn frees(&self) -> Vec<(u64, DatEntry)> {
        self.actions
            .iter()
            .filter_map(|a| match a {
                Action::Free(v, e) => Some((*v, *e)),
                _ => None,
            })
            .collect()
    }
    fn count(&self, f: impl Fn(&Action) -> bool) -> u32 {
        self.actions.iter().filter(|a| f(a)).count() as u32
    }
}

impl Relocated {
    pub fn copied(&self) -> u32 {
        self.live_copied + self.protected_copied + self.dat_copied
    }
}

impl Store {
    /// The latest checkpoint written (the recovery base), or the one being
    /// built if none is.
    pub(crate) fn latest_cno(&self) -> u64 {
        self.cps().latest().map_or(self.roots().cur_cno, |e| e.cno)
    }

    /// When the oldest plain checkpoint kept was made: a segment whose
    /// blocks all died before it holds no block only plain checkpoints see.
    /// With none kept, a moment after `now`.
    pub(crate) fn oldest_kept_created_secs(&self, now: u64) -> u64 {
        let oldest = self.oldest_kept_cno();
        self.cps()
            .entries
            .get(&oldest)
            .map_or(now.saturating_add(1), |e| e.created_secs)
    }

    /// Oldest plain checkpoint still kept: dead blocks with `end` above it are needed.
    pub(crate) fn oldest_kept_cno(&self) -> u64 {
        self.cps()
            .entries
            .values()
            .filter(|e| !e.is_snapshot())
            .map(|e| e.cno)
            .min()
            .unwrap_or(self.roots().cur_cno)
    }

    /// Map from each DAT tree node's address to the first key below it.
    pub(crate) fn dat_node_first_keys(&mut self) -> Result<HashMap<u64, u64>> {
        let tree = self.tree();
        let root = self.roots().dat_root;
        let mut out = HashMap::new();
        tree.visit(&mut self.dat_nodes(), root, &mut |v| {
            let first = match v.node {
                Node::Leaf { items } => items.first().map(|i| i.0),
                Node::Internal { children, .. } => children.first().map(|c| c.0),
            };
            if let Some(k) = first {
                out.insert(v.ptr, k);
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// Make DAT block `idx` and the tree path above it writable (moves them).
    fn dat_block_cow(&mut self, idx: u64) -> Result<()> {
        if self.dat_journal().base_of(idx).is_none() {
            let v = idx * crate::meta::dat_entry::DAT_PER_BLOCK;
            // Any entry of the block will do: dat_set of an unchanged
            // non-free entry copies the block on write; find one.
            for slot in 0..crate::meta::dat_entry::DAT_PER_BLOCK {
                let e = self.dat_get(v + slot)?;
                if !e.is_free() {
                    self.dat_set(v + slot, e)?;
                    break;
                }
            }
        }
        // Written whole by the next checkpoint, not journaled: the base,
        // which may be in the victim, dies now.
        self.dat_unjournal(idx)
    }

    /// What relocating `seg` would do, block by block, without changing
    /// anything: the cleaner prices victims with it (the segment counters
    /// do not count dead blocks a kept plain checkpoint still needs).
    pub fn relocation_plan(&mut self, seg: u64) -> Result<RelocationPlan> {
        self.relocation_plan_keeping(seg, KeepCheckpoints::Kept)
    }

    /// [`Store::relocation_plan`], keeping the dead blocks of the plain
    /// checkpoints `keep` says.
    pub fn relocation_plan_keeping(
        &mut self,
        seg: u64,
        keep: KeepCheckpoints,
    ) -> Result<RelocationPlan> {
        let (entries, reads) = self.segment_entries_read(seg)?;
        let horizon = self.keep_horizon(keep);
        let mut plan = RelocationPlan {
            reads,
            segno: seg,
            nblocks: self.segs().usage[seg as usize].nblocks,
            ..Default::default()
        };
        let mut dat_blocks = std::collections::BTreeSet::new();
        for &(pos, ent) in &entries {
            let action = match ent.kind {
                BlockKind::Data | BlockKind::Node if ent.vblock != 0 => {
                    let e = self.dat_get(ent.vblock)?;
                    if e.pblock != pos {
                        continue; // superseded copy
                    }
                    dat_blocks.insert(ent.vblock / DAT_PER_BLOCK);
                    let owner = Owner {
                        ino: ent.ino,
                        offset: ent.offset,
                        kind: ent.kind,
                    };
                    let a = self.vblock_action(ent.vblock, e, owner, pos, &horizon, &mut plan);
                    plan.holds_frames |= e.frame != 0 && !matches!(a, Action::Free(..));
                    a
                }
                BlockKind::DatBlock => {
                    if !self.dat_block_in_use_at(ent.offset, pos)? {
                        continue;
                    }
                    Action::CowDat(ent.offset)
                }
                BlockKind::DatNode => Action::DatNode(pos),
                BlockKind::DatJournal if self.dat_journal().written.contains(&pos) => {
                    Action::DropJournal(pos)
                }
                _ => continue,
            };
            plan.actions.push(action);
        }
        // Every DAT block that changes is rewritten; those already dirty cost nothing more.
        plan.dat_blocks_dirtied = dat_blocks
            .iter()
            .filter(|&&idx| !self.dat_block_is_dirty(idx))
            .count() as u32;
        Ok(plan)
    }

    /// The checkpoints whose dead blocks a plan keeping `keep` must copy.
    fn keep_horizon(&self, keep: KeepCheckpoints) -> KeepHorizon {
        let kept_now = self.oldest_kept_cno();
        let latest = self.latest_cno();
        KeepHorizon {
            keep,
            kept_now,
            latest,
            oldest_kept: match keep {
                KeepCheckpoints::Kept => kept_now,
                KeepCheckpoints::LatestOnly => latest.max(kept_now),
            },
            base: self.roots().cur_cno - 1,
            free_durable_kills: self.move_records_enabled(),
        }
    }

    /// The fate of virtual block `v` (entry `e`), placed at `pos` in the
    /// victim: moved if the current file system, a snapshot or a kept
    /// checkpoint sees it, else freed (counted in `plan` if that takes
    /// giving up checkpoints).
    fn vblock_action(
        &self,
        v: u64,
        e: DatEntry,
        owner: Owner,
        pos: u64,
        h: &KeepHorizon,
        plan: &mut RelocationPlan,
    ) -> Action {
        if e.end == CNO_MAX {
            Action::MoveLive(v, e, owner, pos)
        } else if self.snapshot_in(e.start, e.end) {
            Action::MoveProtected(v, e, owner, pos)
        } else if e.end > h.oldest_kept && h.keep == KeepCheckpoints::LatestOnly {
            // Died since the latest checkpoint, a plain one
            // (a snapshot would have matched above).
            debug_assert!(e.end > h.latest && e.end <= self.roots().cur_cno);
            self.free_seen(v, e, h, plan, true)
        } else if e.end > h.oldest_kept {
            plan.held_by_checkpoints += 1;
            Action::MoveProtected(v, e, owner, pos)
        } else {
            if e.end > h.kept_now {
                // Seen by kept plain checkpoints below `end` only.
                plan.give_up_below = plan.give_up_below.max(e.end);
                plan.freed_by_giving_up += 1;
            }
            self.free_seen(v, e, h, plan, false)
        }
    }

    /// Free dead block `v`, counting in `plan` what that asks of the
    /// checkpoints that still see it: recovery's base if it died since (the
    /// CPFILE in memory may have let that checkpoint go, the device has
    /// not), or, if `seen_by_latest`, the latest plain checkpoint kept. The
    /// victim then waits for the next checkpoint (which gives them up),
    /// unless a move record may give them up instead: always for one older
    /// than the base, for the base only if the write that killed the block
    /// is durable (meta/durable_kills.rs).
    fn free_seen(
        &self,
        v: u64,
        e: DatEntry,
        h: &KeepHorizon,
        plan: &mut RelocationPlan,
        seen_by_latest: bool,
    ) -> Action {
        let by_record = if e.end > h.base {
            Some(h.free_durable_kills && self.killed_durably(v))
        } else if seen_by_latest {
            Some(h.free_durable_kills)
        } else {
            None
        };
        match by_record {
            Some(true) => plan.freed_giving_up_base += 1,
            Some(false) => plan.freed_at_next_checkpoint += 1,
            None => {}
        }
        Action::Free(v, e)
    }

    /// Whether the DAT block `idx` found at `pos` in a victim is in use:
    /// the DAT's current copy, or the base a journaled or copied block
    /// still keeps live (meta/dat_journal.rs).
    pub(crate) fn dat_block_in_use_at(&mut self, idx: u64, pos: u64) -> Result<bool> {
        Ok(self.dat_block_addr(idx)? == Some(pos) || self.dat_journal().base_of(idx) == Some(pos))
    }

    /// Move everything still needed out of `seg` and mark it freed.
    pub fn relocate_segment(&mut self, seg: u64) -> Result<Relocated> {
        let plan = self.relocation_plan(seg)?;
        self.relocate_planned(plan)
    }

    /// Carry out a plan made by [`Store::relocation_plan`] (nothing may
    /// change in between).
    pub fn relocate_planned(&mut self, plan: RelocationPlan) -> Result<Relocated> {
        let seg = plan.segno;
        let now = self.now();
        let mut rep = Relocated {
            segno: seg,
            stream: Stream::from_flags(self.segs().usage[seg as usize].flags).name(),
            nblocks: plan.nblocks,
            ..Default::default()
        };
        let mut dat_nodes_here = Vec::new();
        self.note_move_record_wait(&plan, &mut rep);
        let reads = plan.reads;
        let bb = self.geo().block_bytes;
        for action in plan.actions {
            match action {
                Action::MoveLive(v, e, owner, pos) => {
                    let read = reads.get(pos, bb);
                    self.with_dat_cause("cleaner move", |s| s.vmove(v, e, owner, pos, read))?;
                    self.note_moved(v, &e, true);
                    rep.file_data_copied += holds_file_data(owner.kind, owner.ino) as u32;
                    self.kill_live(seg, false, now)?;
                    rep.live_copied += 1;
                    rep.moved.push(v);
                }
                Action::MoveProtected(v, e, owner, pos) => {
                    let read = reads.get(pos, bb);
                    self.with_dat_cause("cleaner move", |s| s.vmove(v, e, owner, pos, read))?;
                    self.note_moved(v, &e, false);
                    rep.file_data_copied += holds_file_data(owner.kind, owner.ino) as u32;
                    if self.snapshot_counted(v, e.start, e.end) {
                        self.add_snapshot(seg, -1)?;
                    }
                    self.place_moved_dead(v);
                    rep.protected_copied += 1;
                    rep.moved.push(v);
                }
                Action::Free(v, e) => {
                    self.free_dead(seg, v, e)?;
                    rep.freed_entries += 1;
                    rep.freed.push(v);
                }
                Action::CowDat(idx) => {
                    self.with_dat_cause("cleaner copy", |s| s.dat_block_cow(idx))?;
                    rep.dat_copied += 1;
                }
                Action::DatNode(pos) => dat_nodes_here.push(pos),
                Action::DropJournal(pos) => {
                    self.drop_journal_block(pos);
                    self.kill_live(seg, false, now)?;
                    rep.dat_copied += 1;
                }
            }
        }
        rep.dat_copied += self.cow_dat_nodes(&dat_nodes_here)?;
        let u = self.segs().usage[seg as usize];
        if u.nlive != 0 || u.nsnapshot != 0 {
            // An accounting bug, or a damaged image: a record whose checksum
            // fails hides its blocks from the plan. Keep the segment and stop writing.
            let err = Error::corrupt(format!(
                "segment {seg} still counts {} live and {} snapshot blocks after relocation",
                u.nlive, u.nsnapshot
            ));
            self.fail(&err);
            return Err(err);
        }
        self.free_segment(seg, now)?;
        self.note_cleaned(seg);
        Ok(rep)
    }

    /// Rewrite the DAT blocks below the DAT tree nodes found at `nodes` in
    /// a victim (with them, the nodes). Returns how many.
    fn cow_dat_nodes(&mut self, nodes: &[u64]) -> Result<u32> {
        if nodes.is_empty() {
            return Ok(0);
        }
        let firsts = self.dat_node_first_keys()?;
        let mut n = 0;
        for p in nodes {
            if let Some(&k) = firsts.get(p) {
                self.dat_block_cow(k)?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Say in `rep` whether its victim may be freed by a move record, and
    /// count why not in the store's statistics.
    fn note_move_record_wait(&mut self, plan: &RelocationPlan, rep: &mut Relocated) {
        let wait = self.move_record_wait(plan);
        rep.move_record_ok = wait.is_none();
        rep.gives_up_base = plan.freed_giving_up_base > 0;
        self.count_freed_giving_up_base(plan.freed_giving_up_base);
        if let Some(why) = wait {
            self.note_waiting_victim(why);
        }
    }

    /// Why the victim of `plan` must wait for the next checkpoint rather
    /// than be freed by the pass's move record (meta/move_record.rs), if it
    /// must: blocks recovery's base sees, freed without a copy; the
    /// out-of-band summaries of a plugged segment; DAT blocks, which only a
    /// checkpoint rewrites.
    fn move_record_wait(&self, plan: &RelocationPlan) -> Option<&'static str> {
        if plan.freed_at_next_checkpoint > 0 {
            Some("blocks the latest checkpoint sees")
        } else if self.segment_is_plugged(plan.segno) {
            Some("plugged")
        } else if plan.actions.iter().any(|a| {
            matches!(
                a,
                Action::CowDat(..) | Action::DatNode(..) | Action::DropJournal(..)
            )
        }) {
            Some("DAT blocks")
        } else {
            None
        }
    }

    /// Free the DAT entry of dead block `v` of `seg`, which nothing needs.
    pub(crate) fn free_dead(&mut self, seg: u64, v: u64, e: DatEntry) -> Result<()> {
        if self.snapshot_counted(v, e.start, e.end) {
            // Counted for a snapshot that is gone, before reconciliation
            // reached it (meta/reconcile.rs).
            self.add_snapshot(seg, -1)?;
        }
        self.with_dat_cause("cleaner free", |s| s.dat_set(v, DatEntry::default()))
    }
}
