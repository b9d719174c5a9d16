//! The offline checker. [`fsck`] opens an image read-only (recovery replays
//! fsync records in memory only, so the state checked is exactly what the
//! next mount would write) and checks every invariant the engine relies on,
//! collecting all problems instead of stopping at the first:
//!
//! - both superblock copies, the checkpoint opened, the CPFILE;
//! - the DAT: its own tree, every entry's range and physical block, no
//!   physical block used twice, each block's summary entry naming it;
//! - every tree (files, directories, xattrs, IFILE, CPFILE, SUFILE), and
//!   reachability: each virtual block the current file system reaches is
//!   current in the DAT, and each current DAT entry is reached exactly once;
//!   every checkpoint's IFILE is readable with all its blocks visible at it;
//! - the namespace: entries, kinds, link counts, `..`, cycles, sizes;
//! - per-segment accounting, recounted by brute force against the SUFILE.
//!
//! A corrupt image yields errors, never a panic: decoding errors are
//! reported where they occur, and a panic anywhere becomes an error too.

mod frames;

use crate::btree::ReadOnly;
use crate::device::BlockDevice;
use crate::error::Result;
use crate::fs::inode::{Format, Inode, AREA_BYTES};
use crate::fs::{dir, map, Lsfs, MountConfig};
use crate::layout::{Geometry, BLOCK_BYTES, FIRST_USER_INO, ORPHAN_INO, ROOT_INO};
use crate::log::record::BlockKind;
use crate::log::superblock::Superblock;
use crate::meta::dat_entry::{DatEntry, CNO_MAX, DAT_PER_BLOCK};
use crate::meta::ifile::{self, INODES_PER_BLOCK, INODE_BYTES};
use crate::meta::store::{check_phys, decode_u64, is_temp, Store, StoreConfig, VNodesRo};
use lsfs_vfs::{FileKind, SYMLINK_MAX_BYTES};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;

/// Problems beyond this many are summarised, so a wrecked image still gives a readable report.
const MAX_PROBLEMS: usize = 500;
/// Plain (non-snapshot) checkpoints whose trees are walked: the newest ones.
const MAX_PLAIN_CHECKPOINTS_WALKED: usize = 64;

/// What fsck found.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct FsckReport {
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
    pub stats: FsckStats,
}

impl FsckReport {
    pub fn is_clean(&self) -> bool {
        self.errors.is_empty()
    }
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct FsckStats {
    /// The checkpoint the image opened at (its super root's number).
    pub cno: u64,
    /// fsync records rolled forward (in memory) after that checkpoint.
    pub replayed_records: usize,
    pub checkpoints: usize,
    pub snapshots: usize,
    /// Checkpoints whose IFILE was walked and found visible.
    pub checkpoints_walked: usize,
    /// Compressed records' frames decompressed and found whole.
    pub frames_checked: u64,
    pub inodes: u64,
    pub directories: u64,
    pub regular_files: u64,
    pub symlinks: u64,
    pub orphans: u64,
    /// Data blocks the orphans still hold: files unlinked while open, and
    /// deleted files whose blocks are being freed in the background
    /// (`fs/delete.rs`), which a mount frees.
    pub orphan_blocks: u64,
    pub dat_entries: u64,
    pub current_blocks: u64,
    /// Current blocks that clones share (more than one file block maps
    /// them), each counted once, as in `current_blocks`.
    pub shared_blocks: u64,
    pub dead_blocks: u64,
    pub dat_tree_blocks: u64,
    pub segments_used: u64,
}

/// Check the image on `dev`. Problems are in the report; `Err` is never
/// returned for a corrupt image (only kept for callers' uniform handling).
pub fn fsck(dev: Box<dyn BlockDevice>) -> Result<FsckReport> {
    let mut report = FsckReport::default();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut c = Checker::default();
        c.run(dev);
        c
    }));
    match r {
        Ok(c) => {
            report.errors = c.errors;
            report.warnings = c.warnings;
            report.stats = c.stats;
            if c.suppressed > 0 {
                report
                    .errors
                    .push(format!("... and {} more problems not listed", c.suppressed));
            }
        }
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            report.errors.push(format!(
                "checking stopped: the engine panicked on this image ({msg})"
            ));
        }
    }
    Ok(report)
}

/// fsck's checks of the current file system (the CPFILE, the DAT and
/// segment summaries, every tree and reachability, the namespace, segment
/// accounting) on a mounted store as a checkpoint just left it: everything
/// in memory is in its metadata files. Older checkpoints are not walked,
/// to keep it affordable after every checkpoint. Returns the problems.
pub(crate) fn check_mounted(s: &mut Store) -> Vec<String> {
    let mut c = Checker::default();
    c.check_store(s, false);
    if c.suppressed > 0 {
        c.errors
            .push(format!("... and {} more problems not listed", c.suppressed));
    }
    c.errors
}

/// Where a reached virtual block belongs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Where {
    MetaNode(&'static str),
    MetaBlock(&'static str, u64),
    MapNode(u64),
    XattrNode(u64),
    Data(u64, u64),
}

impl fmt::Display for Where {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Where::MetaNode(m) => write!(f, "{m} tree node"),
            Where::MetaBlock(m, i) => write!(f, "{m} block {i}"),
            Where::MapNode(ino) => write!(f, "map tree node of inode {ino}"),
            Where::XattrNode(ino) => write!(f, "xattr tree node of inode {ino}"),
            Where::Data(ino, b) => write!(f, "block {b} of inode {ino}"),
        }
    }
}

/// The DAT's tree, read-only, over physical (or not yet placed, cached) addresses.
fn dat_nodes_ro(s: &mut Store) -> ReadOnly<impl FnMut(u64) -> Result<Vec<u8>> + '_> {
    ReadOnly(move |addr| s.read_dat_phys(addr))
}

#[derive(Default)]
struct Checker {
    errors: Vec<String>,
    warnings: Vec<String>,
    suppressed: usize,
    stats: FsckStats,
    /// Compressed records' frames seen while reading the summaries.
    frame_slots: frames::FrameSlots,
}

/// One file system tree as of some IFILE root: inodes and the virtual blocks reached.
#[derive(Default)]
struct Walk {
    inodes: BTreeMap<u64, Inode>,
    reached: Vec<(u64, Where)>,
}

impl Checker {
    fn err(&mut self, msg: impl Into<String>) {
        if self.errors.len() < MAX_PROBLEMS {
            self.errors.push(msg.into());
        } else {
            self.suppressed += 1;
        }
    }
    fn warn(&mut self, msg: impl Into<String>) {
        if self.warnings.len() < MAX_PROBLEMS {
            self.warnings.push(msg.into());
        }
    }

    fn run(&mut self, mut dev: Box<dyn BlockDevice>) {
        self.check_superblocks(&mut *dev);
        let config = MountConfig {
            store: StoreConfig {
                read_only: true,
                ..StoreConfig::default()
            },
            checkpoint: None,
            ..MountConfig::default()
        };
        let mut fs = match Lsfs::open(dev, config) {
            Ok(fs) => fs,
            Err(e) => {
                self.err(format!("cannot open the file system: {e}"));
                return;
            }
        };
        self.stats.replayed_records = fs.replayed_records;
        // Inodes changed by the roll-forward live in the inode cache; put
        // them into the (in-memory) IFILE so the trees below are complete.
        if let Err(e) = fs.flush_inodes() {
            self.err(format!("rolling forward fsync records: {e}"));
            return;
        }
        self.check_store(&mut fs.store, true);
    }

    /// Everything but the superblocks, on an open store whose inodes are
    /// all in its IFILE. Older checkpoints are walked if `checkpoints`.
    fn check_store(&mut self, s: &mut Store, checkpoints: bool) {
        self.stats.cno = s.roots().cur_cno - 1;
        self.check_cpfile(s);
        let dat = self.check_dat(s);
        let ifile_root = s.roots().ifile_root;
        let live = self.walk_ifile(s, ifile_root, "current file system");
        let mut reached = live.reached.clone();
        for (name, root) in [
            ("CPFILE", s.roots().cpfile_root),
            ("SUFILE", s.roots().sufile_root),
        ] {
            let blocks = self.walk_mfile(s, root, name, &mut reached);
            // Blocks never written hold only free segments, so some may be absent.
            if let Some((idx, _)) = blocks
                .iter()
                .find(|(idx, _)| name == "SUFILE" && *idx >= s.segs().nblocks_sufile())
            {
                self.err(format!(
                    "SUFILE block {idx} is beyond the {} blocks {} segments need",
                    s.segs().nblocks_sufile(),
                    s.geo().nsegments
                ));
            }
        }
        let ssa_root = s.roots().ssa_root;
        let blocks = self.walk_mfile(s, ssa_root, "SSA", &mut reached);
        self.check_ssa_blocks(s, &blocks);
        self.check_reachability(&dat, &reached);
        self.check_namespace(s, &live);
        if checkpoints {
            self.check_checkpoints(s, &dat);
        }
        self.check_accounting(s, &dat);
    }

    // ---- superblocks and checkpoints ----

    fn check_superblocks(&mut self, dev: &mut dyn BlockDevice) {
        let size = dev.size_bytes();
        if size < 2 * BLOCK_BYTES as u64 {
            return; // open reports it
        }
        let last = size / BLOCK_BYTES as u64 - 1;
        let mut good = Vec::new();
        let mut bad = Vec::new();
        for (copy, at) in [("first", 0u64), ("second", last)] {
            let mut b = vec![0; BLOCK_BYTES];
            let r = dev
                .read_at(at * BLOCK_BYTES as u64, &mut b)
                .and_then(|_| Superblock::decode(&b, &format!("block {at}"), size));
            match r {
                Ok(sb) => good.push((copy, sb)),
                Err(e) => bad.push(format!("{copy} superblock copy (block {at}) is bad: {e}")),
            }
        }
        if good.is_empty() {
            for b in bad {
                self.err(b);
            }
            return;
        }
        for b in bad {
            self.warn(format!("{b}; the other copy is good"));
        }
        if good.len() == 2 {
            let (a, b) = (&good[0].1, &good[1].1);
            if a.fs_id != b.fs_id
                || a.segment_blocks != b.segment_blocks
                || a.nsegments != b.nsegments
                || a.device_blocks != b.device_blocks
            {
                self.err(format!(
                    "the two superblock copies disagree on identity or geometry: {a:?} vs {b:?}"
                ));
            }
        }
    }

    fn check_cpfile(&mut self, s: &mut Store) {
        let cno = s.roots().cur_cno - 1;
        let entries: Vec<_> = s.cps().entries.values().copied().collect();
        self.stats.checkpoints = entries.len();
        self.stats.snapshots = entries.iter().filter(|e| e.is_snapshot()).count();
        match entries.last() {
            Some(l) if l.cno == cno => {}
            Some(l) => self.err(format!(
                "CPFILE: latest checkpoint is {}, the super root says {cno}",
                l.cno
            )),
            None => self.err("CPFILE has no checkpoints"),
        }
        if s.superblock().cp_cno > cno {
            self.err(format!(
                "superblock names checkpoint {} but the log ends at checkpoint {cno}",
                s.superblock().cp_cno
            ));
        }
        let snaps: Vec<u64> = entries
            .iter()
            .filter(|e| e.is_snapshot())
            .map(|e| e.cno)
            .collect();
        if snaps != s.snapshot_cnos() {
            self.err(format!(
                "snapshot list in memory {:?} differs from the CPFILE flags {snaps:?}",
                s.snapshot_cnos()
            ));
        }
        let mut prev: Option<crate::meta::cpfile::CpEntry> = None;
        for e in &entries {
            if e.cno == 0 || e.cno > cno {
                self.err(format!("CPFILE: checkpoint {} is outside 1..={cno}", e.cno));
            }
            if e.next_ino > s.roots().next_ino {
                self.err(format!(
                    "CPFILE: checkpoint {} has next inode {} beyond the current {}",
                    e.cno,
                    e.next_ino,
                    s.roots().next_ino
                ));
            }
            if let Some(p) = prev {
                if p.created_secs > e.created_secs {
                    self.warn(format!(
                        "checkpoint {} was created before checkpoint {} (clock went back?)",
                        e.cno, p.cno
                    ));
                }
            }
            prev = Some(*e);
        }
    }

    // ---- the DAT ----

    /// Walk the DAT: check its tree, every entry, and physical-block
    /// ownership. Returns every non-free entry by virtual block.
    fn check_dat(&mut self, s: &mut Store) -> Dat {
        let mut dat = Dat::default();
        let mut blocks: Vec<(u64, u64)> = Vec::new();
        let mut nodes: Vec<NodePtr> = Vec::new();
        if !self.walk_dat_tree(s, &mut blocks, &mut nodes) {
            return dat;
        }
        let mut owner_of: HashMap<u64, String> = HashMap::new();
        self.claim_dat_metadata(s, &mut owner_of, &mut dat, &nodes);
        let max_idx = s.roots().next_vblock / DAT_PER_BLOCK;
        for &(idx, addr) in &blocks {
            self.claim_phys(
                s,
                &mut owner_of,
                &mut dat,
                addr,
                true,
                format!("DAT block {idx}"),
            );
            if idx > max_idx {
                self.err(format!(
                    "DAT block {idx} is beyond the last virtual block {}",
                    s.roots().next_vblock
                ));
            }
            self.check_dat_block(s, &mut owner_of, &mut dat, idx, addr);
        }
        self.count_dat(s, &dat);
        self.check_summaries(s, &dat);
        dat
    }

    /// Check the DAT's tree and collect its blocks `(index, address)` and
    /// its nodes; `false` if the tree is broken.
    fn walk_dat_tree(
        &mut self,
        s: &mut Store,
        blocks: &mut Vec<(u64, u64)>,
        nodes: &mut Vec<NodePtr>,
    ) -> bool {
        let tree = s.tree();
        let root = s.roots().dat_root;
        if let Err(e) = tree.check(&mut dat_nodes_ro(s), root) {
            self.err(format!("DAT tree: {e}"));
            return false;
        }
        let r = tree.visit(&mut dat_nodes_ro(s), root, &mut |v| {
            nodes.push(v.ptr);
            if let Some(items) = v.items() {
                for (idx, val) in items {
                    blocks.push((*idx, decode_u64(val, "DAT block map")?));
                }
            }
            Ok(())
        });
        if let Err(e) = r {
            self.err(format!("DAT tree: {e}"));
        }
        true
    }

    /// Claim the DAT's own blocks besides its data blocks: tree nodes, the
    /// journal, and bases the roll-forward keeps.
    fn claim_dat_metadata(
        &mut self,
        s: &mut Store,
        owner_of: &mut HashMap<u64, String>,
        dat: &mut Dat,
        nodes: &[u64],
    ) {
        for &n in nodes {
            self.claim_phys(s, owner_of, dat, n, true, "DAT tree node".into());
        }
        // The DAT journal the checkpoint names (applied to the DAT's blocks
        // in memory when the image was opened, so the entries below are
        // the journaled ones).
        let journal = s.dat_journal().written.clone();
        for (i, &a) in journal.iter().enumerate() {
            self.claim_phys(s, owner_of, dat, a, true, format!("DAT journal block {i}"));
        }
        // A DAT block the roll-forward copied on write keeps its base live
        // until the next checkpoint writes it or journals the change.
        let bases: Vec<(u64, u64)> = s
            .dat_journal()
            .tracked
            .iter()
            .filter(|(_, t)| !t.at_base)
            .map(|(&idx, t)| (idx, t.base))
            .collect();
        for (idx, a) in bases {
            self.claim_phys(
                s,
                owner_of,
                dat,
                a,
                true,
                format!("base of DAT block {idx}"),
            );
        }
    }

    /// One DAT block's entries: each non-free one checked, its physical
    /// block claimed, and kept in `dat`. A block of only free entries
    /// should not exist.
    fn check_dat_block(
        &mut self,
        s: &mut Store,
        owner_of: &mut HashMap<u64, String>,
        dat: &mut Dat,
        idx: u64,
        addr: u64,
    ) {
        let b = match s.read_dat_phys(addr) {
            Ok(b) => b,
            Err(e) => {
                self.err(format!("DAT block {idx} at {addr}: {e}"));
                return;
            }
        };
        let mut any = false;
        for slot in 0..DAT_PER_BLOCK {
            let v = idx * DAT_PER_BLOCK + slot;
            let e = match DatEntry::read(&b, slot as usize) {
                Ok(e) => e,
                Err(e) => {
                    self.err(format!("DAT entry {v}: {e}"));
                    continue;
                }
            };
            if e.is_free() {
                continue;
            }
            any = true;
            self.check_dat_entry(s, v, &e);
            if e.pblock != 0 {
                self.claim_phys(
                    s,
                    owner_of,
                    dat,
                    e.pblock,
                    false,
                    format!("virtual block {v}"),
                );
            }
            dat.entries.insert(v, e);
        }
        if !any {
            self.err(format!(
                "DAT block {idx} at {addr} holds no entries (should have been removed)"
            ));
        }
    }

    /// The DAT's statistics; its current entries are the blocks in use
    /// the super root counts.
    fn count_dat(&mut self, s: &Store, dat: &Dat) {
        self.stats.dat_entries = dat.entries.len() as u64;
        self.stats.current_blocks =
            dat.entries.values().filter(|e| e.end == CNO_MAX).count() as u64;
        self.stats.dead_blocks = self.stats.dat_entries - self.stats.current_blocks;
        self.stats.dat_tree_blocks = dat.tree_phys.len() as u64;
        if self.stats.current_blocks != s.roots().blocks_used {
            self.err(format!(
                "super root counts {} blocks in use, the DAT has {} current entries",
                s.roots().blocks_used,
                self.stats.current_blocks
            ));
        }
    }

    /// Record that `addr` holds `what` (a block of the DAT's own tree if
    /// `dat_tree`); a second owner is an error.
    fn claim_phys(
        &mut self,
        s: &Store,
        owner_of: &mut HashMap<u64, String>,
        dat: &mut Dat,
        addr: u64,
        dat_tree: bool,
        what: String,
    ) {
        if is_temp(addr) {
            return; // not placed yet: lives in memory only
        }
        if let Err(e) = check_phys(&s.geo(), addr, &what) {
            self.err(e.to_string());
            return;
        }
        if dat_tree {
            dat.tree_phys.push(addr);
        }
        if let Some(prev) = owner_of.get(&addr) {
            self.err(format!(
                "physical block {addr} is used twice: by {prev} and by {what}"
            ));
        } else {
            owner_of.insert(addr, what);
        }
    }

    fn check_dat_entry(&mut self, s: &Store, v: u64, e: &DatEntry) {
        let cur = s.roots().cur_cno;
        let fresh = s.is_fresh(v);
        if v >= s.roots().next_vblock {
            self.err(format!(
                "DAT entry of virtual block {v} is beyond the next virtual block {}",
                s.roots().next_vblock
            ));
        }
        if e.start == 0 || e.start > e.end {
            self.err(format!(
                "DAT entry of virtual block {v} has an impossible range [{}, {})",
                e.start, e.end
            ));
        }
        if e.start > cur || (!fresh && e.start >= cur) {
            self.err(format!(
                "DAT entry of virtual block {v} starts at checkpoint {} but the last checkpoint is {}",
                e.start,
                cur - 1
            ));
        }
        if e.end != CNO_MAX && (e.end > cur || e.end == e.start) {
            self.err(format!(
                "dead DAT entry of virtual block {v} has range [{}, {}) (checkpoint being built: {cur})",
                e.start, e.end
            ));
        }
        if e.refs != 0 && !(s.clones_enabled() && e.end == CNO_MAX) {
            self.err(format!(
                "DAT entry of virtual block {v} counts {} extra users, but {}",
                e.refs,
                if e.end == CNO_MAX {
                    "the image has no clones (feature CLONES)"
                } else {
                    "it is dead"
                }
            ));
        }
        if e.pblock == 0 && !(fresh && e.end == CNO_MAX) {
            self.err(format!(
                "DAT entry of virtual block {v} ([{}, {})) has no physical block",
                e.start,
                if e.end == CNO_MAX {
                    "max".to_string()
                } else {
                    e.end.to_string()
                }
            ));
        }
    }

    /// Every placed block's summary entry must name it: virtual blocks by
    /// number, DAT blocks by kind. Also, every block lies in the written part
    /// of its segment, and the segment's records tile exactly what the SUFILE
    /// says was written.
    fn check_summaries(&mut self, s: &mut Store, dat: &Dat) {
        let geo = s.geo();
        let mut wanted = placed_by_segment(&geo, dat);
        for seg in 0..geo.nsegments {
            let nblocks = s.segs().usage[seg as usize].nblocks as u64;
            let want = wanted.remove(&seg).unwrap_or_default();
            if nblocks == 0 && want.is_empty() {
                continue;
            }
            let Some((summary, covered)) = self.segment_summary(s, seg, nblocks) else {
                continue;
            };
            if covered != nblocks {
                self.err(format!(
                    "segment {seg}: SUFILE says {nblocks} blocks written, its records cover {covered}"
                ));
            }
            self.check_placed(&geo, seg, nblocks, want, &summary);
        }
        self.check_frames(s, dat);
    }

    /// Segment `seg`'s summary entries by physical block, and how many of
    /// its blocks its records cover; `None` if its records cannot be read.
    fn segment_summary(&mut self, s: &mut Store, seg: u64, nblocks: u64) -> Option<(Summary, u64)> {
        let geo = s.geo();
        let start = geo.segment_start(seg);
        let mut summary = Summary::new();
        let mut covered = 0u64;
        if s.segment_is_plugged(seg) {
            // Its summary is the SSA's; its records are partly overwritten.
            match s.segment_entries(seg, true) {
                Ok(entries) => summary.extend(
                    entries
                        .into_iter()
                        .map(|(p, ent)| (p, (ent.vblock, ent.kind))),
                ),
                Err(e) => self.err(format!("segment {seg}: reading its SSA entries: {e}")),
            }
            covered = geo.segment_blocks as u64;
        } else {
            let recs = match s.segment_records(seg) {
                Ok(r) => r,
                Err(e) => {
                    self.err(format!("segment {seg}: reading its records: {e}"));
                    return None;
                }
            };
            for r in &recs {
                if r.block >= start + nblocks {
                    break;
                }
                covered = r.end_block() - start;
                if r.header.frame_slots > 0 {
                    self.frame_slots
                        .add(r.payload_block(0), r.header.frame_slots);
                }
                for (i, ent) in r.header.entries.iter().enumerate() {
                    summary.insert(r.payload_block(i), (ent.vblock, ent.kind));
                }
            }
        }
        Some((summary, covered))
    }

    /// The blocks the DAT places in segment `seg` (`want`: physical block,
    /// and virtual block or `None` for the DAT's own) lie in its written
    /// part, and its summary names each.
    fn check_placed(
        &mut self,
        geo: &Geometry,
        seg: u64,
        nblocks: u64,
        want: Vec<(u64, Option<u64>)>,
        summary: &Summary,
    ) {
        let start = geo.segment_start(seg);
        for (p, v) in want {
            if p >= start + nblocks {
                self.err(format!(
                    "block {p} ({}) lies past the {nblocks} written blocks of segment {seg}",
                    v.map(|v| format!("virtual block {v}"))
                        .unwrap_or_else(|| "DAT tree".into())
                ));
                continue;
            }
            match (summary.get(&p), v) {
                (Some(&(sv, k)), Some(v))
                    if sv == v && matches!(k, BlockKind::Data | BlockKind::Node) => {}
                (
                    Some(&(_, BlockKind::DatBlock | BlockKind::DatNode | BlockKind::DatJournal)),
                    None,
                ) => {}
                (found, _) => self.err(format!(
                    "block {p} holds {} per the DAT, but its summary entry says {}",
                    v.map(|v| format!("virtual block {v}"))
                        .unwrap_or_else(|| "a DAT tree block".into()),
                    match found {
                        Some((sv, k)) => format!("{k:?} of virtual block {sv}"),
                        None => "nothing (no record covers it)".into(),
                    }
                )),
            }
        }
    }

    /// Every SSA block holds entries of plugged segments only, and only
    /// plugged segments are full (their SSA may still be all holes).
    fn check_ssa_blocks(&mut self, s: &Store, blocks: &[(u64, u64)]) {
        let per_seg = s.geo().segment_blocks as u64;
        for &(idx, _) in blocks {
            // Saturating: a damaged map may hold any key.
            let first = idx.saturating_mul(crate::meta::ssa::SSA_PER_BLOCK) / per_seg;
            let last = idx
                .saturating_add(1)
                .saturating_mul(crate::meta::ssa::SSA_PER_BLOCK)
                .saturating_sub(1)
                / per_seg;
            if first >= s.geo().nsegments {
                self.err(format!(
                    "SSA block {idx} is beyond the entries of the {} segments",
                    s.geo().nsegments
                ));
            } else if !(first..=last.min(s.geo().nsegments - 1)).any(|g| s.segment_is_plugged(g)) {
                self.err(format!(
                    "SSA block {idx} holds entries of segment {first}, which is not plugged"
                ));
            }
        }
        for g in 0..s.geo().nsegments {
            let u = &s.segs().usage[g as usize];
            if s.segment_is_plugged(g) && u.nblocks != s.geo().segment_blocks {
                self.err(format!(
                    "segment {g} is flagged plugged but only {} of its {} blocks are written",
                    u.nblocks,
                    s.geo().segment_blocks
                ));
            }
        }
    }

    // ---- trees and reachability ----

    /// Check a metadata file's tree and collect its nodes and blocks.
    fn walk_mfile(
        &mut self,
        s: &mut Store,
        root: u64,
        name: &'static str,
        reached: &mut Vec<(u64, Where)>,
    ) -> Vec<(u64, u64)> {
        let tree = s.tree();
        if let Err(e) = tree.check(&mut VNodesRo { s }, root) {
            self.err(format!("{name} tree: {e}"));
            return Vec::new();
        }
        let mut blocks = Vec::new();
        let r = tree.visit(&mut VNodesRo { s }, root, &mut |v| {
            reached.push((v.ptr, Where::MetaNode(name)));
            if let Some(items) = v.items() {
                for (idx, val) in items {
                    let b = decode_u64(val, name)?;
                    blocks.push((*idx, b));
                }
            }
            Ok(())
        });
        if let Err(e) = r {
            self.err(format!("{name} tree: {e}"));
        }
        for &(idx, b) in &blocks {
            reached.push((b, Where::MetaBlock(name, idx)));
        }
        blocks
    }

    /// Walk the file system whose IFILE is rooted at `root`: decode every
    /// inode and collect every virtual block it reaches.
    fn walk_ifile(&mut self, s: &mut Store, root: u64, label: &str) -> Walk {
        let mut w = Walk::default();
        let blocks = self.walk_mfile(s, root, "IFILE", &mut w.reached);
        for (idx, v) in blocks {
            let b = match s.vread(v, ifile_owner(idx)) {
                Ok(b) => b,
                Err(e) => {
                    self.err(format!("{label}: IFILE block {idx}: {e}"));
                    continue;
                }
            };
            if b.len() != BLOCK_BYTES {
                continue;
            }
            // `idx` is a B-tree key read from the disk.
            let Some(first_ino) = idx.checked_mul(INODES_PER_BLOCK) else {
                self.err(format!(
                    "{label}: IFILE block {idx} is beyond every inode number"
                ));
                continue;
            };
            let mut any = false;
            for slot in 0..INODES_PER_BLOCK {
                let ino = first_ino + slot;
                let img = &b[ifile::slot_range(ino)];
                if img.iter().all(|&x| x == 0) {
                    continue;
                }
                any = true;
                match Inode::decode(&img[..INODE_BYTES], ino) {
                    Ok(i) => {
                        w.inodes.insert(ino, i);
                    }
                    Err(e) => self.err(format!("{label}: {e}")),
                }
            }
            if !any {
                self.err(format!(
                    "{label}: IFILE block {idx} holds no inodes (should have been removed)"
                ));
            }
        }
        let inos: Vec<u64> = w.inodes.keys().copied().collect();
        for ino in inos {
            let i = w.inodes[&ino].clone();
            self.walk_inode(s, &i, label, &mut w.reached);
        }
        w
    }

    /// Check one inode's trees and extents; collect its virtual blocks.
    fn walk_inode(&mut self, s: &mut Store, i: &Inode, label: &str, out: &mut Vec<(u64, Where)>) {
        let ino = i.ino;
        self.walk_inode_trees(s, i, label, out);
        if i.format != Format::BTree && i.map_root != 0 {
            self.err(format!(
                "{label}: inode {ino} is {:?} but has map root {}",
                i.format, i.map_root
            ));
        }
        if i.xattr_root != 0 {
            if let Err(e) = crate::fs::xattr::list(s, i) {
                self.err(format!("{label}: inode {ino} xattrs: {e}"));
            }
        }
        let kind = i.kind();
        if kind == FileKind::Dir || i.format == Format::InlineData {
            return;
        }
        self.walk_extents(s, i, label, out);
    }

    /// The nodes of the inode's map tree (if it has one) and xattr tree.
    fn walk_inode_trees(
        &mut self,
        s: &mut Store,
        i: &Inode,
        label: &str,
        out: &mut Vec<(u64, Where)>,
    ) {
        let ino = i.ino;
        let tree = s.tree();
        let map_root = if i.format == Format::BTree {
            i.map_root
        } else {
            0
        };
        for (root, what, mk) in [
            (map_root, "map tree", Where::MapNode as fn(u64) -> Where),
            (
                i.xattr_root,
                "xattr tree",
                Where::XattrNode as fn(u64) -> Where,
            ),
        ] {
            if root == 0 {
                continue;
            }
            if let Err(e) = tree.check(&mut VNodesRo { s }, root) {
                self.err(format!("{label}: inode {ino} {what}: {e}"));
                continue;
            }
            let r = tree.visit(&mut VNodesRo { s }, root, &mut |v| {
                out.push((v.ptr, mk(ino)));
                Ok(())
            });
            if let Err(e) = r {
                self.err(format!("{label}: inode {ino} {what}: {e}"));
            }
        }
    }

    /// Extents: file block -> virtual blocks, each within the file's size
    /// and the virtual blocks handed out, together as many as the inode counts.
    fn walk_extents(&mut self, s: &mut Store, i: &Inode, label: &str, out: &mut Vec<(u64, Where)>) {
        let ino = i.ino;
        let limit = i.size.div_ceil(BLOCK_BYTES as u64);
        let mut key = 0u64;
        let mut mapped = 0u64;
        loop {
            let (k, val) = match map::get_ceil(s, i, key) {
                Ok(Some(x)) => x,
                Ok(None) => break,
                Err(e) => {
                    self.err(format!("{label}: inode {ino} extents: {e}"));
                    return;
                }
            };
            key = match k.checked_add(1) {
                Some(k) => k,
                None => break,
            };
            if val.len() != 12 {
                self.err(format!(
                    "{label}: inode {ino}: extent at file block {k} has a {}-byte value",
                    val.len()
                ));
                continue;
            }
            let vstart = u64::from_le_bytes(val[..8].try_into().unwrap());
            let len = u32::from_le_bytes(val[8..].try_into().unwrap()) as u64;
            if len == 0 || vstart == 0 || vstart.saturating_add(len) > s.roots().next_vblock {
                self.err(format!(
                    "{label}: inode {ino}: extent at file block {k} maps {len} blocks from virtual block {vstart}, outside 1..{}",
                    s.roots().next_vblock
                ));
                continue;
            }
            if k.saturating_add(len) > limit {
                self.err(format!(
                    "{label}: inode {ino}: extent at file block {k} (+{len}) maps blocks past the size {} ({limit} blocks)",
                    i.size
                ));
                continue;
            }
            for j in 0..len {
                out.push((vstart + j, Where::Data(ino, k + j)));
            }
            mapped += len;
        }
        if mapped != i.blocks {
            self.err(format!(
                "{label}: inode {ino} says it has {} blocks, its extents map {mapped}",
                i.blocks
            ));
        }
    }

    /// Each reached virtual block is current, and reached once, or, for file
    /// data that clones share, as many times as its DAT entry counts users;
    /// each current DAT entry is reached.
    fn check_reachability(&mut self, dat: &Dat, reached: &[(u64, Where)]) {
        // First use, and how many.
        let mut by_v: HashMap<u64, (Where, u64)> = HashMap::with_capacity(reached.len());
        for &(v, w) in reached {
            if let Some((prev, n)) = by_v.get_mut(&v) {
                *n += 1;
                if !matches!((*prev, w), (Where::Data(..), Where::Data(..))) {
                    self.err(format!(
                        "virtual block {v} is used twice: as {prev} and as {w}"
                    ));
                }
                continue;
            }
            by_v.insert(v, (w, 1));
            match dat.entries.get(&v) {
                None => self.err(format!("{w} is virtual block {v}, which has no DAT entry")),
                Some(e) if e.end != CNO_MAX => self.err(format!(
                    "{w} is virtual block {v}, which the DAT says died at checkpoint {}",
                    e.end
                )),
                _ => {}
            }
        }
        for (&v, e) in &dat.entries {
            if e.end != CNO_MAX {
                continue;
            }
            match by_v.get(&v) {
                None => self.err(format!(
                    "virtual block {v} (physical {}, from checkpoint {}) is current in the DAT but nothing uses it (leak)",
                    e.pblock, e.start
                )),
                Some(&(w, n)) if n != 1 + e.refs as u64 => self.err(format!(
                    "virtual block {v} (first as {w}) is used {n} times, but its DAT entry counts {} users",
                    1 + e.refs as u64
                )),
                Some(&(_, n)) => self.stats.shared_blocks += u64::from(n > 1),
            }
        }
    }

    // ---- namespace ----

    /// The namespace of the current file system, in the order its rules
    /// build on each other: the inodes themselves, the two fixed
    /// directories, the orphans, the tree from the root, and last the link
    /// counts that tree implies.
    fn check_namespace(&mut self, s: &mut Store, w: &Walk) {
        let inodes = &w.inodes;
        self.check_inodes(s, inodes);
        self.check_fixed_dirs(inodes);
        let mut names = Names::default();
        self.check_orphan_dir(s, inodes, &mut names);
        self.stats.orphans = names.orphans.len() as u64;
        self.walk_tree(s, inodes, &mut names);
        self.check_link_counts(inodes, &names);
    }

    /// Inode count and numbers, per-kind statistics, sizes.
    fn check_inodes(&mut self, s: &Store, inodes: &BTreeMap<u64, Inode>) {
        self.stats.inodes = inodes.len() as u64;
        if inodes.len() as u64 != s.roots().inodes_used {
            self.err(format!(
                "super root counts {} inodes, the IFILE holds {}",
                s.roots().inodes_used,
                inodes.len()
            ));
        }
        for (&ino, i) in inodes {
            if (ino != ROOT_INO && ino != ORPHAN_INO && ino < FIRST_USER_INO)
                || ino >= s.roots().next_ino
            {
                self.err(format!(
                    "inode {ino} is allocated but is reserved or not below the next inode {}",
                    s.roots().next_ino
                ));
            }
            match i.kind() {
                FileKind::Dir => self.stats.directories += 1,
                FileKind::File => self.stats.regular_files += 1,
                FileKind::Symlink => self.stats.symlinks += 1,
                _ => {}
            }
            self.check_sizes(i);
        }
    }

    /// The root and the orphan directory exist and are directories.
    fn check_fixed_dirs(&mut self, inodes: &BTreeMap<u64, Inode>) {
        for (ino, what) in [(ROOT_INO, "root"), (ORPHAN_INO, "orphan")] {
            match inodes.get(&ino) {
                Some(i) if i.kind() == FileKind::Dir => {}
                Some(_) => self.err(format!("the {what} inode {ino} is not a directory")),
                None => self.err(format!("the {what} directory (inode {ino}) is missing")),
            }
        }
    }

    /// The orphan directory: entries named by inode number, for unlinked
    /// inodes still open and for deleted files whose blocks are being freed
    /// in the background (a partly freed one is a truncated file, checked
    /// as any file is). Each names an existing inode with no links.
    fn check_orphan_dir(&mut self, s: &mut Store, inodes: &BTreeMap<u64, Inode>, n: &mut Names) {
        let Some(od) = inodes
            .get(&ORPHAN_INO)
            .filter(|i| i.kind() == FileKind::Dir)
        else {
            return;
        };
        n.visited.insert(ORPHAN_INO);
        let list = match dir::list_after(s, od, 0, usize::MAX) {
            Ok(list) => list,
            Err(e) => {
                self.err(format!("orphan directory: {e}"));
                return;
            }
        };
        if od.size != list.len() as u64 {
            self.err(format!(
                "orphan directory size {} but it has {} entries",
                od.size,
                list.len()
            ));
        }
        for (_, ent) in list {
            if ent.name != ent.ino.to_le_bytes() {
                self.err(format!(
                    "orphan directory entry {:?} does not name its inode {}",
                    ent.name, ent.ino
                ));
            }
            match inodes.get(&ent.ino) {
                Some(i) if i.nlink == 0 => {
                    if n.orphans.insert(ent.ino) {
                        self.stats.orphan_blocks += i.blocks;
                    }
                }
                Some(i) => self.err(format!(
                    "orphan inode {} still has {} links",
                    ent.ino, i.nlink
                )),
                None => self.err(format!(
                    "orphan directory names inode {}, which does not exist",
                    ent.ino
                )),
            }
        }
    }

    /// Breadth first from the root: every directory is reached once, and
    /// its entries, size and `..` are right. Counts names and subdirectories.
    fn walk_tree(&mut self, s: &mut Store, inodes: &BTreeMap<u64, Inode>, n: &mut Names) {
        let mut queue: VecDeque<(u64, u64)> = VecDeque::new();
        queue.push_back((ROOT_INO, ROOT_INO));
        n.visited.insert(ROOT_INO);
        while let Some((d, parent)) = queue.pop_front() {
            let Some(di) = inodes.get(&d) else { continue };
            let list = match dir::list_after(s, di, 0, usize::MAX) {
                Ok(l) => l,
                Err(e) => {
                    self.err(format!("directory {d}: {e}"));
                    continue;
                }
            };
            let mut count = 0u64;
            let mut dotdot = None;
            for (_, ent) in list {
                if ent.name == b".." {
                    dotdot = Some(ent.ino);
                    continue;
                }
                count += 1;
                if let Some(child) = self.check_entry(inodes, d, &ent, n) {
                    queue.push_back((child, d));
                }
            }
            if di.size != count {
                self.err(format!(
                    "directory {d} has size {} but {count} entries",
                    di.size
                ));
            }
            if d != ROOT_INO && dotdot != Some(parent) {
                self.err(format!(
                    "directory {d}: \"..\" is {dotdot:?}, but it is an entry of directory {parent}"
                ));
            }
        }
    }

    /// One entry of directory `d`: a valid name for an existing inode of
    /// the kind it says, not an orphan. Returns the child directory to
    /// visit, if it is one seen for the first time.
    fn check_entry(
        &mut self,
        inodes: &BTreeMap<u64, Inode>,
        d: u64,
        ent: &dir::Entry,
        n: &mut Names,
    ) -> Option<u64> {
        let what = format!(
            "entry {:?} of directory {d}",
            String::from_utf8_lossy(&ent.name)
        );
        if ent.name.is_empty()
            || ent.name == b"."
            || ent.name.contains(&b'/')
            || ent.name.contains(&0)
        {
            self.err(format!("{what}: invalid name"));
        }
        let Some(child) = inodes.get(&ent.ino) else {
            self.err(format!(
                "{what} points at inode {}, which does not exist",
                ent.ino
            ));
            return None;
        };
        if child.kind() != ent.kind {
            self.err(format!(
                "{what} says {:?} but inode {} is {:?}",
                ent.kind,
                ent.ino,
                child.kind()
            ));
        }
        if n.orphans.contains(&ent.ino) {
            self.err(format!("{what} names orphan inode {}", ent.ino));
        }
        *n.names.entry(ent.ino).or_default() += 1;
        if child.kind() != FileKind::Dir {
            return None;
        }
        *n.subdirs.entry(d).or_default() += 1;
        if !n.visited.insert(ent.ino) {
            self.err(format!(
                "{what}: directory {} is reached twice (hard-linked directory or cycle)",
                ent.ino
            ));
            return None;
        }
        Some(ent.ino)
    }

    /// Every inode's link count against the names the tree gave it: a
    /// directory has 2 + its subdirectories, anything else one per entry;
    /// orphans have none, and nothing else is unnamed.
    fn check_link_counts(&mut self, inodes: &BTreeMap<u64, Inode>, n: &Names) {
        for (&ino, i) in inodes {
            let named = n.names.get(&ino).copied().unwrap_or(0);
            if i.kind() == FileKind::Dir {
                if ino == ORPHAN_INO {
                    continue;
                }
                if n.orphans.contains(&ino) {
                    if i.nlink != 0 {
                        self.err(format!("orphan directory {ino} has nlink {}", i.nlink));
                    }
                    continue;
                }
                if !n.visited.contains(&ino) {
                    self.err(format!(
                        "directory {ino} is allocated but not reachable from the root (lost, or in a cycle)"
                    ));
                    continue;
                }
                let want = 2 + n.subdirs.get(&ino).copied().unwrap_or(0);
                if i.nlink != want {
                    self.err(format!(
                        "directory {ino} has nlink {} but 2 + {} subdirectories = {want}",
                        i.nlink,
                        want - 2
                    ));
                }
            } else if n.orphans.contains(&ino) {
                if named != 0 {
                    self.err(format!("orphan inode {ino} is still named {named} times"));
                }
            } else if named == 0 {
                self.err(format!(
                    "inode {ino} ({:?}) is allocated but no directory names it (lost)",
                    i.kind()
                ));
            } else if i.nlink != named {
                self.err(format!(
                    "inode {ino} has nlink {} but {named} directory entries name it",
                    i.nlink
                ));
            }
        }
    }

    fn check_sizes(&mut self, i: &Inode) {
        let ino = i.ino;
        match (i.kind(), i.format) {
            (FileKind::Dir, Format::InlineData) => {
                self.err(format!("directory {ino} has inline data format"))
            }
            (_, Format::InlineData)
                if i.area.len() as u64 > i.size || i.area.len() > AREA_BYTES || i.blocks != 0 =>
            {
                self.err(format!(
                    "inode {ino}: inline data of {} bytes, size {}, {} blocks",
                    i.area.len(),
                    i.size,
                    i.blocks
                ));
            }
            _ => {}
        }
        if i.kind() == FileKind::Symlink && (i.size == 0 || i.size > SYMLINK_MAX_BYTES as u64) {
            self.err(format!("symlink {ino} has size {}", i.size));
        }
        if i.kind() == FileKind::Dir && i.blocks != 0 {
            self.err(format!("directory {ino} counts {} data blocks", i.blocks));
        }
    }

    // ---- checkpoints ----

    /// Every snapshot, and the newest plain checkpoints: their IFILE and all
    /// it reaches must be visible at their number.
    fn check_checkpoints(&mut self, s: &mut Store, dat: &Dat) {
        let entries: Vec<_> = s.cps().entries.values().copied().collect();
        // Plain checkpoints a cleaning pass gave up (its move record freed
        // blocks only they saw, meta/move_record.rs) leave with the next
        // checkpoint: recovery's, if the image is opened read-write.
        let plain: Vec<u64> = entries
            .iter()
            .filter(|e| !e.is_snapshot() && !s.given_up_at_next_checkpoint(e.cno))
            .map(|e| e.cno)
            .rev()
            .take(MAX_PLAIN_CHECKPOINTS_WALKED)
            .collect();
        for cp in entries {
            if !cp.is_snapshot() && !plain.contains(&cp.cno) {
                continue;
            }
            let label = format!(
                "{} {}",
                if cp.is_snapshot() {
                    "snapshot"
                } else {
                    "checkpoint"
                },
                cp.cno
            );
            let before = self.errors.len() + self.suppressed;
            let w = self.walk_ifile(s, cp.ifile_root, &label);
            for (v, wh) in &w.reached {
                match dat.entries.get(v) {
                    Some(e) if e.start <= cp.cno && cp.cno < e.end && e.pblock != 0 => {}
                    Some(e) => self.err(format!(
                        "{label}: {wh} is virtual block {v}, visible only in [{}, {}) (physical {})",
                        e.start,
                        if e.end == CNO_MAX { "max".into() } else { e.end.to_string() },
                        e.pblock
                    )),
                    None => self.err(format!(
                        "{label}: {wh} is virtual block {v}, which has no DAT entry"
                    )),
                }
            }
            if !w.inodes.contains_key(&ROOT_INO) {
                self.err(format!("{label}: no root directory"));
            }
            if w.inodes.len() as u64 != cp.inodes_used {
                self.err(format!(
                    "{label}: CPFILE counts {} inodes, its IFILE holds {}",
                    cp.inodes_used,
                    w.inodes.len()
                ));
            }
            if self.errors.len() + self.suppressed == before {
                self.stats.checkpoints_walked += 1;
            }
        }
    }

    // ---- segment accounting ----

    fn check_accounting(&mut self, s: &Store, dat: &Dat) {
        let geo: Geometry = s.geo();
        let n = geo.nsegments as usize;
        let mut live = vec![0u64; n];
        let mut snap = vec![0u64; n];
        for (v, e) in &dat.entries {
            if e.pblock == 0 {
                continue;
            }
            let Some(seg) = geo.segment_of(e.pblock) else {
                continue;
            };
            if e.end == CNO_MAX {
                live[seg as usize] += 1;
            } else if s.snapshot_counted(*v, e.start, e.end) {
                snap[seg as usize] += 1;
            }
        }
        for &a in &dat.tree_phys {
            if let Some(seg) = geo.segment_of(a) {
                live[seg as usize] += 1;
            }
        }
        for seg in 0..n {
            let u = s.segs().usage[seg];
            if u.nblocks > 0 {
                self.stats.segments_used += 1;
            }
            if u.nlive as u64 != live[seg] || u.nsnapshot as u64 != snap[seg] {
                self.err(format!(
                    "segment {seg}: SUFILE says nlive {} nsnapshot {}, recount gives nlive {} nsnapshot {}",
                    u.nlive, u.nsnapshot, live[seg], snap[seg]
                ));
            }
            if u.nblocks > geo.segment_blocks
                || u.nlive as u64 + u.nsnapshot as u64 > u.nblocks as u64
            {
                self.err(format!(
                    "segment {seg}: {} blocks written (of {}), {} live, {} protected by snapshots",
                    u.nblocks, geo.segment_blocks, u.nlive, u.nsnapshot
                ));
            }
        }
    }
}

/// What the namespace walk learns about each inode.
#[derive(Default)]
struct Names {
    /// Directory entries naming each inode.
    names: HashMap<u64, u32>,
    /// Subdirectories of each directory.
    subdirs: HashMap<u64, u32>,
    /// Inodes in the orphan directory.
    orphans: HashSet<u64>,
    /// Directories reached (the root and orphan directory included).
    visited: HashSet<u64>,
}

/// A segment's summary: by physical block, the virtual block and kind
/// its records (or the SSA) say it holds.
type Summary = HashMap<u64, (u64, BlockKind)>;

/// The blocks the DAT places, by segment: physical block, and its virtual
/// block (`None` for the DAT's own blocks).
fn placed_by_segment(geo: &Geometry, dat: &Dat) -> HashMap<u64, Vec<(u64, Option<u64>)>> {
    let mut wanted: HashMap<u64, Vec<(u64, Option<u64>)>> = HashMap::new();
    for (&v, e) in &dat.entries {
        if e.pblock != 0 {
            if let Some(seg) = geo.segment_of(e.pblock) {
                wanted.entry(seg).or_default().push((e.pblock, Some(v)));
            }
        }
    }
    for &a in &dat.tree_phys {
        if let Some(seg) = geo.segment_of(a) {
            wanted.entry(seg).or_default().push((a, None));
        }
    }
    wanted
}

/// A B-tree node's address.
type NodePtr = u64;

/// The non-free DAT entries and the DAT's own placed blocks.
#[derive(Default)]
struct Dat {
    entries: BTreeMap<u64, DatEntry>,
    tree_phys: Vec<u64>,
}

fn ifile_owner(idx: u64) -> crate::cache::Owner {
    crate::cache::Owner {
        ino: crate::layout::IFILE_INO,
        offset: idx,
        kind: BlockKind::Data,
    }
}
