//! The store: virtual blocks on top of the log.
//!
//! Every block of a file (and of the IFILE, CPFILE and SUFILE) has a virtual
//! block number; the DAT maps it to a physical block and records the
//! checkpoints `[start, end)` that see it. Virtual block numbers are handed
//! out by a counter, so "allocated in the checkpoint being built" is simply
//! `vblock >= fresh_floor`: such blocks are modified in place, all others are
//! copied on write. The DAT itself is addressed physically; its dirty blocks
//! and nodes get temporary addresses until the segment constructor places them.
//!
//! The store owns the DAT and the roots of the metadata files. The parts
//! with state of their own keep it private and know nothing of the store:
//! the snapshot-change queue ([`crate::meta::reconcile::Reconcile`], driven
//! from meta/snapshots.rs), threaded logging's holes
//! ([`crate::meta::plug::Plugs`], written from meta/plug_write.rs), the
//! write streams' classifier ([`crate::meta::stream::Streams`], used from
//! meta/stream_use.rs), the DAT
//! journal and reuse lists, the SUFILE and CPFILE tables. The DAT's tree is
//! reached through `Store::dat_nodes()`, which borrows only what a node
//! store needs.

use crate::btree::{BTree, NodeStore};
use crate::cache::{pkey, vkey, BlockCache, Owner};
use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::layout::{Geometry, DAT_INO, IFILE_INO};
use crate::log::record::BlockKind;
use crate::log::superblock::Superblock;
use crate::meta::cpfile::CpTable;
use crate::meta::dat_entry::{DatEntry, DAT_PER_BLOCK};
use crate::meta::ifile::{self, INODE_BYTES};
use crate::meta::sufile::SegTable;
use std::collections::BTreeSet;

/// Temporary addresses of not-yet-placed DAT blocks start here; they never
/// reach the disk.
pub const TEMP_BASE: u64 = 1 << 61;

pub fn is_temp(addr: u64) -> bool {
    addr >= TEMP_BASE
}

/// Settings of an open store.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    pub cache_blocks: usize,
    /// Plain checkpoints younger than this are kept (and their blocks protected).
    pub protection_secs: u64,
    pub read_only: bool,
    /// Separate write streams for hot, cold and cleaned data (meta/stream.rs),
    /// on file systems of at least `streams_min_segments` segments (64 by
    /// default: each stream keeps a segment open).
    pub streams: bool,
    pub streams_min_segments: u64,
    /// What freed segments the device is told to drop (meta/discard.rs).
    pub discard: crate::meta::discard::DiscardMode,
    /// A checkpoint when the log written since the last one fills 1/N of
    /// the segments (N = this; 0: no such bound): the cleaner cannot take
    /// those before a checkpoint (meta/move_record.rs).
    pub log_checkpoint_share: u64,
    /// Every timestamp and interval of the mount (`clock.rs`): the
    /// system's, or one a test or simulation drives.
    pub clock: crate::clock::Clock,
    /// Compress records of user data (meta/compress.rs): `Some(Lz4)` or
    /// `Some(Zstd)` does, with that codec, and a read-write mount with it
    /// sets the image's COMPRESSED_RECORDS feature (and ZSTD_FRAMES for
    /// zstd); `Some(Off)` does not; `None` does as the image says (zstd if
    /// it has ZSTD_FRAMES, else LZ4 if it has COMPRESSED_RECORDS), and
    /// mkfs as [`MKFS_COMPRESS`] says.
    pub compress: Option<Compress>,
}

/// Whether, and with which codec, records of user data are compressed
/// ([`StoreConfig::compress`]), and for zstd at which level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compress {
    Off,
    Lz4,
    /// zstd at a level of `frame::ZSTD_LEVELS`.
    Zstd(i32),
}

impl Compress {
    /// zstd at its default level (`frame::ZSTD_LEVEL`).
    pub const ZSTD: Compress = Compress::Zstd(crate::log::frame::ZSTD_LEVEL);

    /// How frames are made, or `None` for off.
    pub fn method(self) -> Option<crate::log::frame::Method> {
        use crate::log::frame::{Codec, Method};
        match self {
            Compress::Off => None,
            Compress::Lz4 => Some(Codec::Lz4.into()),
            Compress::Zstd(level) => Some(Method {
                codec: Codec::Zstd,
                level,
            }),
        }
    }

    /// The codec, or `None` for off.
    pub fn codec(self) -> Option<crate::log::frame::Codec> {
        self.method().map(|m| m.codec)
    }

    /// The word the configuration uses (`off`, `lz4`, `zstd`, `zstd:N`).
    pub fn name(self) -> String {
        self.method().map_or("off".to_string(), |m| m.name())
    }
}

impl std::str::FromStr for Compress {
    type Err = String;
    /// `off`, `lz4`, `zstd` or `zstd:N` (`on` is `lz4`, the codec `on`
    /// meant before there were two).
    fn from_str(s: &str) -> std::result::Result<Compress, String> {
        use crate::log::frame::ZSTD_LEVELS;
        // Each caller names the argument: `compress=…`, `--compress`.
        match s {
            "off" => Ok(Compress::Off),
            "lz4" | "on" => Ok(Compress::Lz4),
            "zstd" => Ok(Compress::ZSTD),
            _ => match s.strip_prefix("zstd:") {
                Some(n) => match n.parse::<i32>() {
                    Ok(level) if ZSTD_LEVELS.contains(&level) => Ok(Compress::Zstd(level)),
                    _ => Err(format!(
                        "zstd's level must be {} to {}, not {n:?}",
                        ZSTD_LEVELS.start(),
                        ZSTD_LEVELS.end()
                    )),
                },
                None => Err(format!(
                    "must be off, lz4, zstd or zstd:LEVEL (LEVEL {} to {})",
                    ZSTD_LEVELS.start(),
                    ZSTD_LEVELS.end()
                )),
            },
        }
    }
}

/// What mkfs makes an image compress with, unless told
/// ([`StoreConfig::compress`]).
pub const MKFS_COMPRESS: Compress = Compress::Off;

/// The default [`StoreConfig::log_checkpoint_share`]: of 1/16, 1/8 and
/// 1/6 of a 1 GiB image, 1/8 wrote least under sustained overwrites at
/// 70 % full (device WA 1.68, 1.62 and 1.72, docs/CLEANER.md).
pub const LOG_CHECKPOINT_SHARE: u64 = 8;

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            cache_blocks: 16384,
            protection_secs: 3600,
            read_only: false,
            streams: true,
            streams_min_segments: crate::meta::stream::STREAMS_MIN_SEGMENTS,
            discard: Default::default(),
            log_checkpoint_share: LOG_CHECKPOINT_SHARE,
            clock: crate::clock::Clock::system(),
            compress: None,
        }
    }
}

/// Counters about the store's work, exposed by `lsfs stats`.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct StoreStats {
    pub checkpoints_written: u64,
    /// Records written compressed (meta/compress.rs).
    pub compressed_records: u64,
    /// Payload slots those records kept without writing them: the device
    /// blocks compression saved.
    pub compressed_slots_unwritten: u64,
    /// Frames read and decompressed.
    pub frames_decompressed: u64,
    /// Checkpoints by what asked for them: "interval" (the periodic one),
    /// "cache" (dirty blocks reached half the cache), "space" (the writer
    /// needed freed segments, or ENOSPC was near), "fsync" (an fsync whose
    /// items do not fit one record), "oplog" (the operation log reached its
    /// bound, `fs/oplog.rs`), "sync", "snapshot", "cleaner", "mount",
    /// "unmount", "requested".
    pub checkpoints_by_cause: std::collections::BTreeMap<&'static str, u64>,
    /// fsyncs written as one record (not as a checkpoint).
    pub dsync_records_written: u64,
    /// Move records written: cleaning passes whose victims were free at
    /// once, not at the next checkpoint (`meta/move_record.rs`).
    pub move_records_written: u64,
    /// Victims those records freed.
    pub segments_freed_by_move_records: u64,
    /// Of those, the ones written into again before the next checkpoint.
    pub victims_reused_before_checkpoint: u64,
    /// Dead blocks that plain checkpoints up to recovery's base saw,
    /// freed by passes without waiting for a checkpoint (giving those
    /// checkpoints up): the base itself saw them only if their deaths were
    /// durable (meta/durable_kills.rs).
    pub freed_giving_up_base: u64,
    /// Victims left for the next checkpoint instead, by why.
    pub victims_waiting_for_checkpoint: std::collections::BTreeMap<&'static str, u64>,
    /// Namespace and metadata operations those records carried.
    pub dsync_ops_written: u64,
    pub records_written: u64,
    pub blocks_written: u64,
    pub payload_blocks_written: u64,
    pub segments_reclaimed: u64,
    pub checkpoints_deleted: u64,
    /// Plain checkpoints a checkpoint gave up because a cleaning pass under
    /// space pressure freed dead blocks only they saw
    /// ([`Store::give_up_at_next_checkpoint`]).
    pub checkpoints_given_up_at_checkpoint: u64,
    /// Snapshot promotions and demotions fully applied to the counters.
    pub snapshot_changes_reconciled: u64,
    /// Payload blocks written, by what they hold (see `SummaryEntry::class`).
    pub blocks_by_class: std::collections::BTreeMap<&'static str, u64>,
    /// DAT blocks made dirty (each costs a block write at the next
    /// checkpoint), by what first changed them since the last checkpoint:
    /// "allocate" (new blocks), "overwrite" (old blocks retired by writes,
    /// truncates and deletes), "cleaner move", "cleaner free" (dead entries
    /// of a victim), "cleaner copy" (live DAT blocks found in a victim),
    /// "reclaim" (segments freed without copying), "other". The DAT's
    /// share of the metadata traffic, and why (docs/CLEANER.md §4).
    pub dat_blocks_dirtied: std::collections::BTreeMap<&'static str, u64>,
    /// Virtual blocks placed by checkpoints and by the cleaner, by what
    /// chose their stream (`Store::note_stream_write`); fsync records'
    /// blocks are not among them (they go to the log).
    pub stream_writes: std::collections::BTreeMap<&'static str, u64>,
    /// fsync'd data blocks written to data streams, in records the fsync's
    /// log record names (`Store::dsync_to_streams`).
    pub dsync_stream_blocks: u64,
    /// Blocks the cleaner moved that were written to their streams at the
    /// end of its pass, not by the next checkpoint (`write_moved_ahead`).
    pub blocks_written_ahead: u64,
    /// DAT blocks a checkpoint kept in memory with their changes in the
    /// DAT journal instead of writing them (meta/dat_journal.rs), and
    /// journaled blocks it let go (written whole by a later checkpoint).
    /// Every DAT block dirtied, or let go, is written, punched or journaled:
    /// dirtied + unjournaled = written + punched + journaled.
    pub dat_blocks_journaled: u64,
    pub dat_blocks_unjournaled: u64,
    /// DAT blocks left all free and punched out before they were written
    /// (so dirtied = written + punched).
    pub dat_blocks_punched: u64,
    /// New virtual blocks that took a free DAT entry instead of a new one
    /// at the end of the DAT (meta/dat_reuse.rs).
    pub dat_entries_reused: u64,
}

/// The fields are `pub(super)`: the modules of `meta/` are the store's own
/// code, split by concept (constructing checkpoints, opening, reclaiming,
/// the DAT journal, ...), and change them together. The rest of the engine
/// reads and asks through meta/store_interface.rs.
pub struct Store {
    /// The device as the store sees it: through `io`, so writes and flushes
    /// are queued (or run at once, in immediate mode) and reads see queued
    /// writes.
    pub(super) dev: Box<dyn BlockDevice>,
    /// The I/O queue in front of the device (device/io_queue.rs).
    pub(super) io: std::sync::Arc<crate::device::IoQueue>,
    pub(super) geo: Geometry,
    pub(super) sb: Superblock,
    /// `cp_record_seq` of what each superblock slot holds: segments holding
    /// records from the older of the two on are the recovery chain.
    pub(super) sb_slot_seq: [u64; 2],
    /// The checkpoint (cno, record block, sequence) whose superblock only
    /// one copy names yet: the next ordering flush outside a checkpoint
    /// (a cleaner pass's) writes the other copy after it
    /// ([`Store::write_superblock_copy_due`]).
    pub(super) sb_copy_due: Option<(u64, u64, u64)>,
    pub(super) cache: BlockCache,
    pub(super) segs: SegTable,
    pub(super) cps: CpTable,
    pub(super) dat_root: u64,
    pub(super) next_vblock: u64,
    pub(super) fresh_floor: u64,
    pub(super) next_temp: u64,
    pub(super) ifile_root: u64,
    pub(super) cpfile_root: u64,
    pub(super) sufile_root: u64,
    /// Root of the SSA's block map (meta/ssa.rs), 0 = no segment plugged.
    pub(super) ssa_root: u64,
    pub(super) next_ino: u64,
    /// The checkpoint being built: one more than the last one written.
    pub(super) cur_cno: u64,
    /// Sequence number of the last record written.
    pub(super) seq: u64,
    pub(super) cur_seg: u64,
    pub(super) cur_off: u32,
    pub(super) next_seg: u64,
    pub(super) inodes_used: u64,
    pub(super) blocks_used: u64,
    pub(super) config: StoreConfig,
    /// Why the store turned read-only after a device error, if it did.
    pub(super) failed: Option<String>,
    pub(super) stats: StoreStats,
    pub(super) tree: BTree,
    /// Sorted snapshot checkpoint numbers (mirrors the CPFILE flags).
    pub(super) snapshots: Vec<u64>,
    /// Relocated blocks waiting to be placed that are dead but still needed
    /// (by a snapshot or a kept checkpoint): placed without counting as live.
    pub(super) moved_dead: std::collections::HashSet<u64>,
    /// Blocks the latest checkpoint sees, killed by durable writes.
    pub(super) kills: crate::meta::durable_kills::DurableKills,
    /// Recovery: blocks a move record freed whose death an fsync record
    /// still to be replayed brings (meta/move_record.rs); read as zeros
    /// until then, freed after the roll-forward.
    pub(super) freed_after_replay: std::collections::BTreeSet<u64>,
    /// The next checkpoint gives up every plain checkpoint before it: a
    /// cleaning pass freed dead blocks that only they (the latest among
    /// them) still see (gc/relocate.rs, [`Store::give_up_at_next_checkpoint`]).
    pub(super) give_up_plain_at_checkpoint: bool,
    /// DAT block index → address, mirroring the DAT's block map.
    pub(super) dat_map: std::collections::HashMap<u64, u64>,
    /// Snapshot changes not yet applied to every segment counter.
    pub(super) recon: crate::meta::reconcile::Reconcile,
    /// Blocks that died since the last checkpoint (a snapshot of that
    /// checkpoint then changes no counter if this is 0).
    pub(super) deaths_since_checkpoint: u64,
    /// Data-stream records written since the log's last record (the next
    /// log record's `seq_gap`).
    pub(super) data_records_since_log: u32,
    /// Write streams and their open segments.
    pub(super) streams: crate::meta::stream::Streams,
    /// What is changing the DAT now (see `StoreStats::dat_blocks_dirtied`).
    pub(super) dat_cause: &'static str,
    /// Free DAT entries that new virtual blocks may take (meta/dat_reuse.rs).
    pub(super) dat_reuse: crate::meta::dat_reuse::DatReuse,
    /// Threaded logging: prepared holes and this checkpoint's use of them.
    pub(super) plugs: crate::meta::plug::Plugs,
    /// DAT blocks kept in memory with their changed entries journaled
    /// (meta/dat_journal.rs).
    pub(super) dat_journal: crate::meta::dat_journal::DatJournal,
    /// Freed segments waiting to be discarded (meta/discard.rs).
    pub(super) discards: crate::meta::discard::Discards,
    /// Compressed frames made and not yet written, and recently read
    /// (meta/compress.rs).
    pub(super) frames: crate::meta::compress::Frames,
    /// Files whose data is written raw (their `nocompress` attribute).
    pub(super) nocompress: std::collections::HashSet<u64>,
}

/// Bound of the in-memory mirror of the DAT's block map: 1M entries (about
/// 32 MiB) cover 2^27 virtual blocks, 512 GiB of data.
pub(crate) const DAT_MAP_MAX_ENTRIES: usize = 1 << 20;

/// The system's wall time in seconds, where no mount's clock is at hand
/// (tests start set clocks from it).
pub fn wall_secs() -> u64 {
    crate::clock::Clock::system().secs()
}

/// The DAT's block map, whose nodes live at physical or temporary addresses.
pub(crate) struct DatNodes<'a> {
    pub dev: &'a mut dyn BlockDevice,
    pub cache: &'a mut BlockCache,
    pub segs: &'a mut SegTable,
    pub geo: Geometry,
    pub next_temp: &'a mut u64,
    pub now: u64,
}

const DAT_NODE_OWNER: Owner = Owner {
    ino: DAT_INO,
    offset: 0,
    kind: BlockKind::DatNode,
};

impl DatNodes<'_> {
    fn read_phys(&mut self, addr: u64, owner: Owner) -> Result<Vec<u8>> {
        if let Some(b) = self.cache.get(pkey(addr)) {
            return Ok(b.to_vec());
        }
        if is_temp(addr) {
            return Err(Error::corrupt(format!(
                "DAT temporary block {addr:#x} is not in the cache (engine bug)"
            )));
        }
        check_phys(&self.geo, addr, "DAT")?;
        let mut b = vec![0; self.geo.block_bytes];
        self.dev.read_at(self.geo.byte_offset(addr), &mut b)?;
        self.cache.insert_clean(pkey(addr), &b, owner);
        Ok(b)
    }

    fn kill_phys(&mut self, addr: u64) -> Result<()> {
        let seg = self
            .geo
            .segment_of(addr)
            .expect("DAT block outside the log");
        self.segs.kill_live(seg, false, self.now)
    }

    fn new_temp(&mut self) -> u64 {
        let t = *self.next_temp;
        *self.next_temp += 1;
        t
    }

    /// Make a physical DAT block (data or node) writable: give it a temporary address.
    fn cow(&mut self, addr: u64, owner: Owner) -> Result<u64> {
        if is_temp(addr) {
            return Ok(addr);
        }
        let data = self.read_phys(addr, owner)?;
        let t = self.new_temp();
        self.cache.put_dirty(pkey(t), data, owner);
        self.cache.remove(pkey(addr));
        self.kill_phys(addr)?;
        Ok(t)
    }
}

impl NodeStore for DatNodes<'_> {
    fn read_node(&mut self, ptr: u64) -> Result<Vec<u8>> {
        let b = self.read_phys(ptr, DAT_NODE_OWNER)?;
        if !is_temp(ptr) && !self.node_verified(ptr) {
            check_dat_node_pointers(&self.geo, ptr, &b)?;
        }
        Ok(b)
    }
    fn make_writable(&mut self, ptr: u64) -> Result<u64> {
        self.cow(ptr, DAT_NODE_OWNER)
    }
    fn write_node(&mut self, ptr: u64, block: Vec<u8>) -> Result<()> {
        assert!(is_temp(ptr), "write to a placed DAT node {ptr}");
        self.cache.put_dirty(pkey(ptr), block, DAT_NODE_OWNER);
        Ok(())
    }
    fn alloc_node(&mut self) -> Result<u64> {
        Ok(self.new_temp())
    }
    fn free_node(&mut self, ptr: u64) -> Result<()> {
        if !is_temp(ptr) {
            self.kill_phys(ptr)?;
        }
        self.cache.remove(pkey(ptr));
        Ok(())
    }
    fn node_verified(&self, ptr: u64) -> bool {
        self.cache.is_verified(pkey(ptr))
    }
    fn set_node_verified(&mut self, ptr: u64) {
        self.cache.mark_verified(pkey(ptr));
    }
}

/// Every pointer of the DAT node read from physical block `ptr` (leaf
/// values: DAT blocks; internal: child nodes) must be a block of the log.
/// Checked once, when the node is first read: a damaged value in the range
/// of temporary addresses would be taken for a dirty block of the
/// checkpoint being built once the leaf is copied on write, and placing
/// the checkpoint's blocks would find no place for it (a panic).
fn check_dat_node_pointers(geo: &Geometry, ptr: u64, b: &[u8]) -> Result<()> {
    let what = format!("DAT node at block {ptr}");
    match crate::btree::Node::decode(b, geo.block_bytes)? {
        crate::btree::Node::Leaf { items } => {
            for (idx, val) in &items {
                let a = decode_u64(val, &what)?;
                check_phys(geo, a, &format!("{what}: DAT block {idx}"))?;
            }
        }
        crate::btree::Node::Internal { children, .. } => {
            for &(key, c) in &children {
                check_phys(geo, c, &format!("{what}: child for keys from {key}"))?;
            }
        }
    }
    Ok(())
}

pub(crate) fn check_phys(geo: &Geometry, addr: u64, what: &str) -> Result<()> {
    if geo.segment_of(addr).is_none() {
        return Err(Error::corrupt(format!(
            "{what} points at block {addr}, outside the log area"
        )));
    }
    Ok(())
}

/// A file's block map, whose nodes are virtual blocks of that file.
pub struct VNodes<'a> {
    pub s: &'a mut Store,
    pub ino: u64,
}

impl NodeStore for VNodes<'_> {
    fn read_node(&mut self, ptr: u64) -> Result<Vec<u8>> {
        self.s.vread(
            ptr,
            Owner {
                ino: self.ino,
                offset: 0,
                kind: BlockKind::Node,
            },
        )
    }
    fn make_writable(&mut self, ptr: u64) -> Result<u64> {
        self.s.vcow(
            ptr,
            Owner {
                ino: self.ino,
                offset: 0,
                kind: BlockKind::Node,
            },
        )
    }
    fn write_node(&mut self, ptr: u64, block: Vec<u8>) -> Result<()> {
        self.s.vwrite(
            ptr,
            block,
            Owner {
                ino: self.ino,
                offset: 0,
                kind: BlockKind::Node,
            },
        )
    }
    fn alloc_node(&mut self) -> Result<u64> {
        self.s.valloc()
    }
    fn free_node(&mut self, ptr: u64) -> Result<()> {
        self.s.vkill(ptr)
    }
    fn node_verified(&self, ptr: u64) -> bool {
        self.s.cache.is_verified(vkey(ptr))
    }
    fn set_node_verified(&mut self, ptr: u64) {
        self.s.cache.mark_verified(vkey(ptr));
    }
}

/// A read-only view of a file's block map (snapshot views, fsck).
pub struct VNodesRo<'a> {
    pub s: &'a mut Store,
}

impl NodeStore for VNodesRo<'_> {
    fn read_node(&mut self, ptr: u64) -> Result<Vec<u8>> {
        self.s.vread(
            ptr,
            Owner {
                ino: 0,
                offset: 0,
                kind: BlockKind::Node,
            },
        )
    }
    fn make_writable(&mut self, _: u64) -> Result<u64> {
        Err(Error::Errno(lsfs_vfs::Errno::ROFS))
    }
    fn write_node(&mut self, _: u64, _: Vec<u8>) -> Result<()> {
        Err(Error::Errno(lsfs_vfs::Errno::ROFS))
    }
    fn alloc_node(&mut self) -> Result<u64> {
        Err(Error::Errno(lsfs_vfs::Errno::ROFS))
    }
    fn free_node(&mut self, _: u64) -> Result<()> {
        Err(Error::Errno(lsfs_vfs::Errno::ROFS))
    }
    // The same cache entries as VNodes: "verified" is a property of bytes.
    fn node_verified(&self, ptr: u64) -> bool {
        self.s.cache.is_verified(vkey(ptr))
    }
    fn set_node_verified(&mut self, ptr: u64) {
        self.s.cache.mark_verified(vkey(ptr));
    }
}

impl Store {
    pub fn now(&self) -> u64 {
        self.config.clock.secs()
    }

    /// The mount's clock (`clock.rs`).
    pub fn clock(&self) -> &crate::clock::Clock {
        &self.config.clock
    }

    /// The DAT's block map as a node store: the device, the cache, the
    /// segment counters (copying a node kills its old block) and the
    /// temporary address counter.
    pub(crate) fn dat_nodes(&mut self) -> DatNodes<'_> {
        let now = self.now();
        DatNodes {
            dev: &mut *self.dev,
            cache: &mut self.cache,
            segs: &mut self.segs,
            geo: self.geo,
            next_temp: &mut self.next_temp,
            now,
        }
    }

    /// Threaded logging's prepared holes and counters (meta/plug.rs).
    pub fn plugs(&self) -> &crate::meta::plug::Plugs {
        &self.plugs
    }

    /// A block of the log read from the device as it is, past the cache:
    /// the payload of a record that recovery rolls forward (fs/replay.rs).
    pub(crate) fn read_log_block(&mut self, block: u64) -> Result<Vec<u8>> {
        check_phys(&self.geo, block, "a log record")?;
        let mut b = vec![0; self.geo.block_bytes];
        self.dev.read_at(self.geo.byte_offset(block), &mut b)?;
        Ok(b)
    }

    /// The B-tree operations (block size) every tree of this store uses.
    pub fn tree(&self) -> BTree {
        self.tree
    }

    /// No checkpoint has seen `vblock`: allocated since the last one.
    pub fn is_fresh(&self, vblock: u64) -> bool {
        vblock >= self.fresh_floor || self.dat_reuse.fresh.contains(&vblock)
    }

    pub fn writable(&self) -> Result<()> {
        if self.config.read_only {
            return Err(Error::Errno(lsfs_vfs::Errno::ROFS));
        }
        if self.failed.is_some() || self.io.failure().is_some() {
            return Err(Error::Errno(lsfs_vfs::Errno::ROFS));
        }
        Ok(())
    }

    /// Why the store is read-only after an error: its own reason, or the
    /// device error that stopped the I/O queue (found outside the store's
    /// calls, by whoever ran the queue).
    pub fn failure(&self) -> Option<String> {
        self.failed.clone().or_else(|| self.io.failure())
    }

    // ---- the DAT ----

    /// The address of DAT block `idx`, if it exists.
    pub(crate) fn dat_block_addr(&mut self, idx: u64) -> Result<Option<u64>> {
        if let Some(&a) = self.dat_map.get(&idx) {
            return Ok(Some(a));
        }
        let tree = self.tree;
        let root = self.dat_root;
        let v = tree.get(&mut self.dat_nodes(), root, idx)?;
        let a = v.map(|b| decode_u64(&b, "DAT block map")).transpose()?;
        if let Some(a) = a.filter(|_| !self.cache.observing()) {
            self.remember_dat_block(idx, a);
        }
        Ok(a)
    }

    /// The index of the DAT's last block, if it has any.
    pub(crate) fn dat_last_block(&mut self) -> Result<Option<u64>> {
        let tree = self.tree;
        let root = self.dat_root;
        Ok(tree
            .floor(&mut self.dat_nodes(), root, u64::MAX)?
            .map(|(idx, _)| idx))
    }

    /// Point DAT block `idx` at `addr` in the DAT's tree (and the mirror).
    pub(crate) fn dat_map_point(&mut self, idx: u64, addr: u64) -> Result<()> {
        let tree = self.tree;
        let mut root = self.dat_root;
        let r = tree.insert(&mut self.dat_nodes(), &mut root, idx, &addr.to_le_bytes());
        self.dat_root = root;
        r?;
        self.remember_dat_block(idx, addr);
        Ok(())
    }

    /// Note where DAT block `idx` is: the DAT's block map is consulted for
    /// every virtual block, so its leaves are mirrored in memory (bounded).
    pub(crate) fn remember_dat_block(&mut self, idx: u64, addr: u64) {
        if self.dat_map.len() >= DAT_MAP_MAX_ENTRIES {
            self.dat_map.clear();
        }
        self.dat_map.insert(idx, addr);
    }

    /// Whether DAT block `idx` was already copied on write since the last
    /// checkpoint (changing it again writes nothing more).
    pub(crate) fn dat_block_is_dirty(&mut self, idx: u64) -> bool {
        self.dat_journal.is_journaled(idx)
            || matches!(self.dat_block_addr(idx), Ok(Some(a)) if is_temp(a))
    }

    /// How many blocks the DAT has now: a walk of its map, for reports and
    /// tests (the entries themselves are not read).
    pub fn dat_blocks_in_use(&mut self) -> Result<u64> {
        let tree = self.tree;
        let root = self.dat_root;
        let mut n = 0u64;
        tree.visit(&mut self.dat_nodes(), root, &mut |node| {
            n += node.items().map_or(0, |items| items.len() as u64);
            Ok(())
        })?;
        Ok(n)
    }

    /// A block of the DAT or its tree at `addr` (physical, or temporary and cached).
    pub(crate) fn read_dat_phys(&mut self, addr: u64) -> Result<Vec<u8>> {
        self.dat_nodes().read_phys(addr, DAT_NODE_OWNER)
    }

    /// A copy of DAT block `idx`, zeros if it does not exist.
    pub(crate) fn dat_block(&mut self, idx: u64) -> Result<Vec<u8>> {
        let Some(addr) = self.dat_block_addr(idx)? else {
            return Ok(vec![0; self.geo.block_bytes]);
        };
        let owner = Owner {
            ino: DAT_INO,
            offset: idx,
            kind: BlockKind::DatBlock,
        };
        self.dat_nodes().read_phys(addr, owner)
    }

    pub fn dat_get(&mut self, vblock: u64) -> Result<DatEntry> {
        let b = self.dat_block(vblock / DAT_PER_BLOCK)?;
        self.dat_entry(&b, vblock)
    }

    /// Virtual block `v`'s entry in its DAT block `b`; a physical block
    /// outside the log is corrupt here, so users of the entry need not check.
    fn dat_entry(&self, b: &[u8], v: u64) -> Result<DatEntry> {
        let e = DatEntry::read(b, (v % DAT_PER_BLOCK) as usize)?;
        if e.pblock != 0 {
            check_phys(
                &self.geo,
                e.pblock,
                &format!("DAT entry of virtual block {v}"),
            )?;
        }
        if e.refs != 0 && !(self.sb.clones() && e.is_current()) {
            return Err(Error::corrupt(format!(
                "DAT entry of virtual block {v} counts {} extra users, but {}",
                e.refs,
                if e.is_current() {
                    "the image has no clones (feature CLONES)"
                } else {
                    "it is not live"
                }
            )));
        }
        Ok(e)
    }

    pub fn dat_set(&mut self, vblock: u64, e: DatEntry) -> Result<()> {
        self.dat_update(
            vblock / DAT_PER_BLOCK,
            &[((vblock % DAT_PER_BLOCK) as usize, e)],
        )
    }

    /// Write entries (slot, entry) of DAT block `idx`, copying the block on
    /// write once for all of them; a block left all free is punched out.
    /// A damaged DAT or SUFILE found halfway (a count of live blocks that is
    /// already 0) may leave the DAT's tree half changed: writes stop.
    fn dat_update(&mut self, idx: u64, changes: &[(usize, DatEntry)]) -> Result<()> {
        let r = self.dat_update_unchecked(idx, changes);
        if let Err(e @ Error::Corrupt { .. }) = &r {
            self.fail(e);
        }
        r
    }

    fn dat_update_unchecked(&mut self, idx: u64, changes: &[(usize, DatEntry)]) -> Result<()> {
        let owner = Owner {
            ino: DAT_INO,
            offset: idx,
            kind: BlockKind::DatBlock,
        };
        let addr = self.dat_block_addr(idx)?;
        let journaled = self.dat_journal.is_journaled(idx);
        // The first change since the last checkpoint: the block's contents
        // are then the durable ones. (A placed address alone does not say
        // so: the cleaner writes changed DAT blocks ahead of the checkpoint.)
        let first = self.dat_reuse.touch(idx);
        let as_on_disk = match addr {
            Some(a) if journaled => {
                debug_assert_eq!(self.dat_journal.base_of(idx), Some(a));
                self.dat_journal.first_touch(idx)
            }
            Some(a) => !is_temp(a),
            None => false,
        };
        let clean = first && as_on_disk;
        let block_bytes = self.geo.block_bytes;
        let mut n = self.dat_nodes();
        let (t, mut block) = match addr {
            // Journaled (kept dirty under its base), or copied already.
            Some(a) if journaled || is_temp(a) => (a, n.read_phys(a, owner)?),
            Some(a) => {
                // Copied on write, but the base stays live: the checkpoint
                // may journal the change and keep it (meta/dat_journal.rs).
                let b = n.read_phys(a, owner)?;
                let t = n.new_temp();
                n.cache.remove(pkey(a));
                (t, b)
            }
            None => (n.new_temp(), vec![0; block_bytes]),
        };
        if let Some(a) = addr.filter(|&a| !journaled && !is_temp(a)) {
            self.dat_track(idx, a);
        }
        self.dat_mark_changed(
            idx,
            changes.iter().fold(0u128, |m, (slot, _)| m | 1 << slot),
        );
        self.dat_note_reuse(idx, &block, changes, clean);
        if Some(t) != addr {
            // Clean until now: one more DAT block for the next checkpoint.
            *self
                .stats
                .dat_blocks_dirtied
                .entry(self.dat_cause)
                .or_default() += 1;
        }
        for (slot, e) in changes {
            e.write(&mut block, *slot);
        }
        if block.iter().all(|&x| x == 0) {
            self.dat_punch(idx, t, journaled)
        } else {
            self.cache.put_dirty(pkey(t), block, owner);
            if Some(t) != addr {
                self.dat_map_point(idx, t)?;
            }
            Ok(())
        }
    }

    /// What `changes` to DAT block `idx` (its contents before them in
    /// `block`) tell the reuse of DAT slots: the block's free slots if it
    /// was `clean` (as in the durable checkpoint), and the slots they free.
    fn dat_note_reuse(
        &mut self,
        idx: u64,
        block: &[u8],
        changes: &[(usize, DatEntry)],
        clean: bool,
    ) {
        if clean {
            // Its free slots may be reused, but for those this change hands
            // out (a reused one among them).
            let taking = changes
                .iter()
                .filter(|(_, e)| !e.is_free())
                .fold(0u128, |m, (slot, _)| m | 1 << slot);
            let free = free_slots(block, idx, self.fresh_floor) & !taking;
            self.dat_reuse.note_durable_block(idx, free);
        }
        for (slot, e) in changes {
            if e.is_free() && !DatEntry::slot_is_free(block, *slot) {
                self.dat_reuse.note_freed(idx, *slot);
            }
        }
    }

    /// Every entry of DAT block `idx` (kept at `t`) is free: punch it out
    /// of the DAT.
    fn dat_punch(&mut self, idx: u64, t: u64, journaled: bool) -> Result<()> {
        self.stats.dat_blocks_punched += 1;
        self.dat_reuse.forget_block(idx);
        self.cache.remove(pkey(t));
        let tree = self.tree;
        let mut root = self.dat_root;
        let r = tree.remove(&mut self.dat_nodes(), &mut root, idx);
        self.dat_root = root;
        r?;
        self.dat_map.remove(&idx);
        if journaled {
            // Let go of the journal, written as nothing (see the stats).
            self.stats.dat_blocks_unjournaled += 1;
        }
        self.dat_release_base(idx)
    }

    /// Make the DAT block holding `vblock`'s entry writable without changing
    /// it, so that placing the block later changes no tree (construct).
    pub(crate) fn dat_touch(&mut self, vblock: u64) -> Result<()> {
        let e = self.dat_get(vblock)?;
        if !e.is_free() {
            self.dat_set(vblock, e)?;
        }
        Ok(())
    }

    /// Whether some snapshot lies in `[start, end)`.
    pub fn snapshot_in(&self, start: u64, end: u64) -> bool {
        let i = self.snapshots.partition_point(|&s| s < start);
        self.snapshots.get(i).is_some_and(|&s| s < end)
    }

    // ---- virtual blocks ----

    /// Read virtual block `v`.
    pub fn vread(&mut self, v: u64, owner: Owner) -> Result<Vec<u8>> {
        // `v` may come from a damaged tree; cache keys hold virtual blocks below 2^62.
        if v >= crate::layout::VBLOCK_LIMIT {
            return Err(Error::corrupt(format!(
                "virtual block {v:#x} is out of range"
            )));
        }
        if let Some(b) = self.cache.get(vkey(v)) {
            return Ok(b.to_vec());
        }
        let e = self.dat_get(v)?;
        if e.pblock == 0 && self.freed_before_replay(v) {
            // Recovery: freed by a move record, and killed by an fsync
            // record still to be replayed, whose own data supersedes it.
            return Ok(vec![0; self.geo.block_bytes]);
        }
        if e.pblock == 0 {
            return Err(Error::corrupt(format!(
                "virtual block {v} (inode {}) has no physical block in the DAT",
                owner.ino
            )));
        }
        check_phys(
            &self.geo,
            e.pblock,
            &format!("DAT entry of virtual block {v}"),
        )?;
        let b = self.read_stored(e.pblock, e.frame, &format!("virtual block {v}"))?;
        self.cache.insert_clean(vkey(v), &b, owner);
        Ok(b)
    }

    /// Read the uncached blocks `v0, v0 + 1, …` (at most `n`) that lie one
    /// after another on the device, with one device read, and cache them
    /// clean. `owner(i)` names block `v0 + i`. Returns how many were read
    /// (0 when `v0` is cached or not yet placed).
    pub fn vread_ahead(&mut self, v0: u64, n: u64, owner: impl Fn(u64) -> Owner) -> Result<u64> {
        let first = self.dat_get(v0)?;
        if first.pblock == 0 || self.cache.contains(vkey(v0)) {
            return Ok(0);
        }
        if first.frame != 0 {
            return self.vread_ahead_framed(v0, first, n, owner);
        }
        let mut run = 1;
        while run < n {
            let v = v0 + run;
            if self.cache.contains(vkey(v)) {
                break;
            }
            let e = self.dat_get(v)?;
            if e.pblock != first.pblock + run || e.frame != 0 {
                break;
            }
            run += 1;
        }
        check_phys(
            &self.geo,
            first.pblock,
            &format!("DAT entry of virtual block {v0}"),
        )?;
        check_phys(
            &self.geo,
            first.pblock + run - 1,
            &format!("DAT entry of virtual block {}", v0 + run - 1),
        )?;
        let bb = self.geo.block_bytes;
        let mut buf = vec![0; run as usize * bb];
        self.dev
            .read_at(self.geo.byte_offset(first.pblock), &mut buf)?;
        for i in 0..run {
            self.cache.insert_clean(
                vkey(v0 + i),
                &buf[i as usize * bb..(i as usize + 1) * bb],
                owner(i),
            );
        }
        Ok(run)
    }

    /// A new virtual block, visible from the checkpoint being built on.
    pub fn valloc(&mut self) -> Result<u64> {
        self.valloc_run(1)
    }

    /// `n` new consecutive virtual blocks (one extent), their DAT entries
    /// written a DAT block at a time.
    pub fn valloc_run(&mut self, n: u64) -> Result<u64> {
        self.with_dat_cause("allocate", |s| s.valloc_run_inner(n, true))
    }

    /// `n` new blocks for data of file `ino`: as [`Store::valloc_run`], but a
    /// reused entry is taken from the DAT blocks of the file's temperature.
    /// (Everything else allocated is hot: metadata blocks are rewritten at
    /// every checkpoint that changes them.)
    pub fn valloc_data_run(&mut self, ino: u64, n: u64) -> Result<u64> {
        let hot = self.file_is_hot(ino);
        self.with_dat_cause("allocate", |s| s.valloc_run_inner(n, hot))
    }

    /// New blocks for file `ino`'s blocks that map to `olds` now (`None`:
    /// a hole): each new block remembers when the version it replaces was
    /// written (`DatEntry::prev_start`) and is routed by how long that
    /// version lived (meta/stream.rs); a reused DAT entry comes from the
    /// DAT blocks of that temperature, so hot entries share DAT blocks.
    pub fn valloc_overwrite_run(&mut self, ino: u64, olds: &[Option<u64>]) -> Result<u64> {
        let mut prev = Vec::with_capacity(olds.len());
        for o in olds {
            prev.push(match o {
                Some(v) => self.dat_get(*v)?.start,
                None => 0,
            });
        }
        // A block's first write (a hole or past the end) is cold, as in the
        // simulator: appending to a file is not rewriting it (a file being
        // filled looked hot by its history and sent all of it, long-lived,
        // to the hot stream: hot victims were cleaned 58 % live).
        let first_write = self
            .streams
            .enabled
            .then_some(crate::meta::stream::Stream::ColdUser);
        let streams: Vec<Option<crate::meta::stream::Stream>> = olds
            .iter()
            .zip(&prev)
            .map(|(o, &p)| match o {
                None => first_write,
                Some(_) => self.overwrite_stream(p),
            })
            .collect();
        let hot = match streams.iter().flatten().next() {
            Some(_) => streams.contains(&Some(crate::meta::stream::Stream::HotUser)),
            None => self.file_is_hot(ino),
        };
        let n = olds.len() as u64;
        let v0 = self.with_dat_cause("allocate", |s| s.valloc_run_inner(n, hot))?;
        for (j, (&p, st)) in prev.iter().zip(&streams).enumerate() {
            let v = v0 + j as u64;
            if p != 0 {
                let e = self.dat_get(v)?;
                self.dat_set(v, DatEntry { prev_start: p, ..e })?;
            }
            if let Some(st) = st {
                self.streams.block_stream.insert(v, *st);
            }
        }
        Ok(v0)
    }

    fn valloc_run_inner(&mut self, n: u64, hot: bool) -> Result<u64> {
        if n == 1 {
            if let Some(v) = self.dat_reuse.take(hot) {
                return self.valloc_reused(v);
            }
        }
        let v0 = self.next_vblock;
        // Only a damaged super root can bring the DAT's end near the limit.
        self.next_vblock = v0
            .checked_add(n)
            .filter(|&end| end <= crate::layout::VBLOCK_LIMIT)
            .ok_or_else(|| {
                Error::corrupt(format!(
                    "the DAT ends at virtual block {v0:#x}: no room for {n} more"
                ))
            })?;
        let fresh = DatEntry::fresh(self.cur_cno);
        let mut v = v0;
        while v < v0 + n {
            let idx = v / DAT_PER_BLOCK;
            let end = ((idx + 1) * DAT_PER_BLOCK).min(v0 + n);
            let changes: Vec<(usize, DatEntry)> = (v..end)
                .map(|x| ((x % DAT_PER_BLOCK) as usize, fresh))
                .collect();
            self.dat_update(idx, &changes)?;
            v = end;
        }
        self.blocks_used += n;
        Ok(v0)
    }

    /// Hand out `v`, a DAT entry that was free in the last checkpoint.
    fn valloc_reused(&mut self, v: u64) -> Result<u64> {
        let old = self.dat_get(v)?;
        if !old.is_free() {
            // The reuse bookkeeping and the DAT disagree: a bug, not damage.
            debug_assert!(false, "reusable DAT entry {v} is in use: {old:?}");
            let err = Error::corrupt(format!(
                "DAT entry {v} was to be reused but is in use: {old:?}"
            ));
            self.fail(&err);
            return Err(err);
        }
        // A clean copy of the block that used `v` before may still be cached.
        self.cache.remove(vkey(v));
        self.dat_set(v, DatEntry::fresh(self.cur_cno))?;
        self.blocks_used += 1;
        self.stats.dat_entries_reused += 1;
        Ok(v)
    }

    /// Contents of a block `valloc_run` just handed out (no placed copy to retire).
    pub fn vfill(&mut self, v: u64, data: Vec<u8>, owner: Owner) {
        debug_assert!(self.is_fresh(v));
        self.cache.put_dirty(vkey(v), data, owner);
    }

    /// Free the DAT entries of dead blocks no checkpoint needs any more.
    pub(crate) fn dat_free_many(&mut self, vs: &[u64]) -> Result<()> {
        self.with_dat_cause("reclaim", |s| s.dat_free_many_inner(vs))
    }

    fn dat_free_many_inner(&mut self, vs: &[u64]) -> Result<()> {
        let mut sorted = vs.to_vec();
        sorted.sort_unstable();
        for run in sorted.chunk_by(|a, b| a / DAT_PER_BLOCK == b / DAT_PER_BLOCK) {
            let changes: Vec<(usize, DatEntry)> = run
                .iter()
                .map(|v| ((v % DAT_PER_BLOCK) as usize, DatEntry::default()))
                .collect();
            self.dat_update(run[0] / DAT_PER_BLOCK, &changes)?;
        }
        Ok(())
    }

    /// The current file system stops using `v`.
    pub fn vkill(&mut self, v: u64) -> Result<()> {
        self.vkill_many(&[v])
    }

    /// The current file system stops using these blocks; DAT entries are
    /// updated a DAT block at a time.
    pub fn vkill_many(&mut self, vs: &[u64]) -> Result<()> {
        self.with_dat_cause("overwrite", |s| s.vkill_many_inner(vs))
    }

    /// Run `f` with DAT changes counted under `cause`.
    pub(crate) fn with_dat_cause<T>(
        &mut self,
        cause: &'static str,
        f: impl FnOnce(&mut Self) -> Result<T>,
    ) -> Result<T> {
        let outer = std::mem::replace(&mut self.dat_cause, cause);
        let r = f(self);
        self.dat_cause = outer;
        r
    }

    fn vkill_many_inner(&mut self, vs: &[u64]) -> Result<()> {
        let mut sorted = vs.to_vec();
        sorted.sort_unstable();
        let now = self.now();
        let mut i = 0;
        while i < sorted.len() {
            let idx = sorted[i] / DAT_PER_BLOCK;
            let block = self.dat_block(idx)?;
            let mut changes = Vec::new();
            while i < sorted.len() && sorted[i] / DAT_PER_BLOCK == idx {
                let v = sorted[i];
                i += 1;
                // A file mapping one block twice (cloned within itself)
                // lets go of both at once: one change for all of them.
                let mut users = 1;
                while i < sorted.len() && sorted[i] == v {
                    users += 1;
                    i += 1;
                }
                let slot = (v % DAT_PER_BLOCK) as usize;
                let e = self.live_entry(&block, v)?;
                let (e, lives) = self.drop_users(v, e, users)?;
                if lives {
                    changes.push((slot, e));
                    continue;
                }
                self.deaths_since_checkpoint += 1;
                self.blocks_used = self.blocks_used.saturating_sub(1);
                if self.is_fresh(v) {
                    // No checkpoint ever saw it: it is simply gone.
                    if e.pblock != 0 {
                        let seg = self.geo.segment_of(e.pblock).expect("checked on read");
                        self.kill_live(seg, false, now)?;
                    }
                    changes.push((slot, DatEntry::default()));
                } else if e.pblock == 0 && self.cache.is_dirty(vkey(v)) {
                    // Relocated by the cleaner and not placed yet: older
                    // checkpoints still see it, so it is written anyway, dead.
                    changes.push((
                        slot,
                        DatEntry {
                            end: self.cur_cno,
                            ..e
                        },
                    ));
                    self.moved_dead.insert(v);
                    continue;
                } else {
                    if e.pblock != 0 {
                        let seg = self.geo.segment_of(e.pblock).expect("checked on read");
                        let protected = self.snapshot_counted(v, e.start, self.cur_cno);
                        self.kill_live(seg, protected, now)?;
                    }
                    changes.push((
                        slot,
                        DatEntry {
                            end: self.cur_cno,
                            ..e
                        },
                    ));
                }
                self.cache.remove(vkey(v));
            }
            self.dat_update(idx, &changes)?;
        }
        Ok(())
    }

    /// One more user for each of `vs` (a clone maps them again, fs/clone.rs):
    /// their DAT entries count it, a DAT block at a time. Nothing changes
    /// if any is not live, fresh (written in place until the next
    /// checkpoint: the clone checkpoints first) or already at
    /// `MAX_REFS` users (EMLINK).
    pub fn vshare_many(&mut self, vs: &[u64]) -> Result<()> {
        debug_assert!(self.sb.clones(), "sharing on an image without CLONES");
        let mut sorted = vs.to_vec();
        sorted.sort_unstable();
        let mut changes = Vec::with_capacity(sorted.len());
        for &v in &sorted {
            let e = self.dat_get(v)?;
            if !e.is_current() || self.is_fresh(v) {
                return Err(Error::corrupt(format!(
                    "virtual block {v} to be shared is not a live block of a checkpoint: {e:?}"
                )));
            }
            if e.refs == crate::meta::dat_entry::MAX_REFS {
                return Err(Error::Errno(lsfs_vfs::Errno::MLINK));
            }
            changes.push((
                v,
                DatEntry {
                    refs: e.refs + 1,
                    ..e
                },
            ));
        }
        self.with_dat_cause("clone", |s| {
            for run in changes.chunk_by(|a, b| a.0 / DAT_PER_BLOCK == b.0 / DAT_PER_BLOCK) {
                let slots: Vec<(usize, DatEntry)> = run
                    .iter()
                    .map(|(v, e)| ((v % DAT_PER_BLOCK) as usize, *e))
                    .collect();
                s.dat_update(run[0].0 / DAT_PER_BLOCK, &slots)?;
            }
            Ok(())
        })
    }

    /// The entry of `v`, a block the caller's file uses, in its DAT block
    /// `block`: it must be live.
    fn live_entry(&mut self, block: &[u8], v: u64) -> Result<DatEntry> {
        let e = self.dat_entry(block, v).inspect_err(|err| self.fail(err))?;
        if !e.is_current() {
            // A tree on a damaged image names a block the DAT does not hold
            // live. Stop writes: blocks of the kill before it are already
            // killed, and must not reach the disk.
            let err = Error::corrupt(format!(
                "virtual block {v} is in use but its DAT entry is not live: {e:?}"
            ));
            self.fail(&err);
            return Err(err);
        }
        Ok(e)
    }

    /// Take `users` users off block `v` (entry `e`, live): the entry with
    /// the users left and `true` while a clone's sharing keeps it alive
    /// (its place, count and cached copy stay: the others still read it),
    /// else the entry with no extra users and `false`, the block dies.
    fn drop_users(&mut self, v: u64, e: DatEntry, users: u64) -> Result<(DatEntry, bool)> {
        let refs = u64::from(e.refs);
        if refs > 0 {
            // See `DurableKills::stop`.
            self.kills.stop();
        }
        if users <= refs {
            let left = (refs - users) as u16;
            return Ok((DatEntry { refs: left, ..e }, true));
        }
        if users > refs + 1 {
            let err = Error::corrupt(format!(
                "virtual block {v} loses {users} users at once, but its DAT entry counts {}",
                refs + 1
            ));
            self.fail(&err);
            return Err(err);
        }
        Ok((DatEntry { refs: 0, ..e }, false))
    }

    /// Make `v` writable: itself if fresh, else a fresh copy (and `v` dies).
    pub fn vcow(&mut self, v: u64, owner: Owner) -> Result<u64> {
        if self.is_fresh(v) {
            return Ok(v);
        }
        let data = self.vread(v, owner)?;
        let nv = self.valloc()?;
        self.vkill(v)?;
        self.cache.put_dirty(vkey(nv), data, owner);
        Ok(nv)
    }

    /// The cleaner moves `v` (entry `e`, placed at `pos` in its victim): its
    /// contents become a dirty block of the cache and its entry loses its
    /// place, so that the next checkpoint (or the cleaner's write ahead)
    /// places it again.
    ///
    /// `read`: the block's bytes at `pos`, if the caller read them already
    /// (a relocation keeps its victim's records from planning,
    /// `gc/victim_reads.rs`).
    pub(crate) fn vmove(
        &mut self,
        v: u64,
        e: DatEntry,
        owner: Owner,
        pos: u64,
        read: Option<&[u8]>,
    ) -> Result<()> {
        let data = match (self.cache.get(vkey(v)), read) {
            (Some(b), _) => b.to_vec(),
            (None, Some(b)) if e.frame == 0 => b.to_vec(),
            // Through its frame if compressed: the cache holds it whole.
            (None, _) => self.read_stored(pos, e.frame, &format!("virtual block {v}"))?,
        };
        self.dat_set(v, e.unplaced())?;
        self.cache.put_dirty(vkey(v), data, owner);
        self.plugs.note_cleaner_moved(v);
        Ok(())
    }

    /// Set the contents of fresh block `v`.
    pub fn vwrite(&mut self, v: u64, data: Vec<u8>, owner: Owner) -> Result<()> {
        assert!(
            self.is_fresh(v),
            "write to virtual block {v} that a checkpoint already holds"
        );
        debug_assert_eq!(data.len(), self.geo.block_bytes);
        if !self.cache.is_dirty(vkey(v)) {
            // Written by an fsync record earlier in this checkpoint, or brand
            // new: a placed copy is superseded now.
            let e = self.dat_get(v)?;
            if e.pblock != 0 {
                let seg = self.geo.segment_of(e.pblock).expect("checked on read");
                let now = self.now();
                self.kill_live(seg, false, now)?;
                self.dat_set(v, e.unplaced())?;
            }
        }
        self.cache.put_dirty(vkey(v), data, owner);
        Ok(())
    }

    /// Recovery (fs/replay.rs): hand out exactly the virtual blocks `vs`,
    /// those that the fsync records to roll forward name for their data,
    /// before anything else is allocated, so that the blocks can be adopted
    /// where the records hold them ([`Store::vplace_replayed`]) under the
    /// numbers their summaries give (which the cleaner, reclaim and fsck go
    /// by). The crashed run handed each one out once since the checkpoint
    /// being recovered: from the end of the DAT, or a slot free in that
    /// checkpoint (freed slots wait for the next one, `dat_reuse.rs`). So
    /// each must be free now; one that is not is a damaged record.
    pub(crate) fn vclaim_replayed(&mut self, vs: &BTreeSet<u64>) -> Result<()> {
        let Some(&last) = vs.last() else {
            return Ok(());
        };
        if vs.first() == Some(&0) || last >= crate::layout::VBLOCK_LIMIT {
            return Err(Error::corrupt(format!(
                "an fsync record names virtual blocks {:#x} to {last:#x}, out of range",
                vs.first().unwrap()
            )));
        }
        debug_assert_eq!(
            self.next_vblock, self.fresh_floor,
            "claimed before any allocation"
        );
        // Numbers between the DAT's end and the last claimed one that the
        // crashed run gave to blocks no record holds stay unused (zero
        // entries below the end, as kills leave them).
        self.next_vblock = self.next_vblock.max(last + 1);
        let fresh = DatEntry::fresh(self.cur_cno);
        let all: Vec<u64> = vs.iter().copied().collect();
        for run in all.chunk_by(|a, b| a / DAT_PER_BLOCK == b / DAT_PER_BLOCK) {
            let idx = run[0] / DAT_PER_BLOCK;
            let block = self.dat_block(idx)?;
            for &v in run {
                let slot = (v % DAT_PER_BLOCK) as usize;
                if !DatEntry::slot_is_free(&block, slot) {
                    return Err(Error::corrupt(format!(
                        "an fsync record names virtual block {v}, which the checkpoint uses: {:?}",
                        DatEntry::read(&block, slot)?
                    )));
                }
                self.dat_reuse.claim(v, v < self.fresh_floor);
                self.cache.remove(vkey(v));
            }
            // One change for the whole run: a first change of the block
            // notes its other free slots as reusable, never these.
            let changes: Vec<(usize, DatEntry)> = run
                .iter()
                .map(|v| ((v % DAT_PER_BLOCK) as usize, fresh))
                .collect();
            self.with_dat_cause("allocate", |s| s.dat_update(idx, &changes))?;
        }
        self.blocks_used += all.len() as u64;
        Ok(())
    }

    /// Recovery: fresh block `v` ([`Store::vclaim_replayed`]) holds what
    /// physical block `pblock` of an fsync record holds, and lives there:
    /// the record's copy is adopted, not written again, so recovery needs
    /// no more space than the live mount did (docs/CRASH.md, promise 1). A
    /// copy placed before (an earlier record, or a cached rewrite not
    /// written yet) is superseded. `prev_start`: as in
    /// [`Store::valloc_overwrite_run`].
    pub(crate) fn vplace_replayed(
        &mut self,
        v: u64,
        pblock: u64,
        frame: u16,
        prev_start: u64,
    ) -> Result<()> {
        let seg = self.geo.segment_of(pblock).ok_or_else(|| {
            Error::corrupt(format!(
                "an fsync record's block {pblock} is outside the log"
            ))
        })?;
        let e = self.dat_get(v)?;
        if !self.is_fresh(v) || !e.is_current() {
            return Err(Error::corrupt(format!(
                "fsync record block {pblock} names virtual block {v}, which is not the record's: {e:?}"
            )));
        }
        let now = self.now();
        if e.pblock != 0 {
            let old = self.geo.segment_of(e.pblock).expect("checked on read");
            self.kill_live(old, false, now)?;
        }
        self.cache.remove(vkey(v));
        let prev_start = if prev_start != 0 {
            prev_start
        } else {
            e.prev_start
        };
        self.dat_set(
            v,
            DatEntry {
                pblock,
                prev_start,
                frame,
                ..e
            },
        )?;
        self.add_live(seg, now)
    }

    /// A new fresh block holding `data`: allocation plus write, counted as used.
    pub fn vnew(&mut self, data: Vec<u8>, owner: Owner) -> Result<u64> {
        let v = self.valloc()?;
        self.vwrite(v, data, owner)?;
        Ok(v)
    }

    // ---- block-mapped metadata files (IFILE, CPFILE, SUFILE) ----

    /// Virtual block of metadata-file block `idx` under `root`.
    pub fn mfile_get(&mut self, root: u64, idx: u64) -> Result<Option<u64>> {
        let tree = self.tree;
        let v = tree.get(&mut VNodesRo { s: self }, root, idx)?;
        v.map(|b| decode_u64(&b, "metadata file block map"))
            .transpose()
    }

    /// Make block `idx` of metadata file `ino` (root in `*root`) fresh and
    /// return it, creating it (zeroed) if absent.
    pub fn mfile_fresh(&mut self, ino: u64, root: &mut u64, idx: u64) -> Result<u64> {
        let owner = Owner {
            ino,
            offset: idx,
            kind: BlockKind::Data,
        };
        let tree = self.tree;
        let cur = self.mfile_get(*root, idx)?;
        let v = match cur {
            Some(v) => self.vcow(v, owner)?,
            None => self.vnew(vec![0; self.geo.block_bytes], owner)?,
        };
        if Some(v) != cur {
            tree.insert(&mut VNodes { s: self, ino }, root, idx, &v.to_le_bytes())?;
        }
        Ok(v)
    }

    /// Drop block `idx` of a metadata file.
    pub fn mfile_punch(&mut self, ino: u64, root: &mut u64, idx: u64) -> Result<()> {
        let tree = self.tree;
        if let Some(b) = tree.remove(&mut VNodes { s: self, ino }, root, idx)? {
            let v = decode_u64(&b, "metadata file block map")?;
            self.vkill(v)?;
        }
        Ok(())
    }

    // ---- inodes ----

    /// The 512-byte image of `ino` in the IFILE rooted at `ifile_root`, or
    /// `None` if the slot is free.
    pub fn inode_read(&mut self, ifile_root: u64, ino: u64) -> Result<Option<Vec<u8>>> {
        let Some(v) = self.mfile_get(ifile_root, ifile::block_of(ino))? else {
            return Ok(None);
        };
        let b = self.vread(
            v,
            Owner {
                ino: IFILE_INO,
                offset: ifile::block_of(ino),
                kind: BlockKind::Data,
            },
        )?;
        let slot = &b[ifile::slot_range(ino)];
        Ok((!slot.iter().all(|&x| x == 0)).then(|| slot.to_vec()))
    }

    /// Store the image of `ino` (or free its slot with `None`).
    pub fn inode_write(&mut self, ino: u64, image: Option<&[u8]>) -> Result<()> {
        let idx = ifile::block_of(ino);
        let owner = Owner {
            ino: IFILE_INO,
            offset: idx,
            kind: BlockKind::Data,
        };
        let mut root = self.ifile_root;
        let r = (|| {
            let v = self.mfile_fresh(IFILE_INO, &mut root, idx)?;
            let mut b = self.vread(v, owner)?;
            match image {
                Some(img) => {
                    assert_eq!(img.len(), INODE_BYTES);
                    b[ifile::slot_range(ino)].copy_from_slice(img);
                }
                None => b[ifile::slot_range(ino)].fill(0),
            }
            if b.iter().all(|&x| x == 0) {
                self.ifile_root = root;
                self.mfile_punch(IFILE_INO, &mut root, idx)
            } else {
                self.vwrite(v, b, owner)
            }
        })();
        self.ifile_root = root;
        r
    }

    /// Whether anything is waiting to be written.
    pub fn has_dirty(&self) -> bool {
        self.pending_blocks() > 0
            || !self.segs.dirty_blocks.is_empty()
            || !self.cps.dirty_blocks.is_empty()
    }

    /// Blocks that can still be written before the reserve: free segments
    /// (minus the reserve the cleaner and checkpoints need) plus what is left
    /// of the current segment and the holes prepared for plugging, minus
    /// what is dirty and not yet placed (counted twice: a block and its
    /// metadata).
    pub fn free_blocks(&self) -> u64 {
        let (avail, dirty) = self.append_room();
        // Holes prepared for plugging (meta/plug.rs) take user data, never
        // its metadata: that still needs the segments.
        (avail + self.plugs.holes())
            .saturating_sub(dirty * 2)
            .min(avail.saturating_sub(dirty))
    }

    /// [`Store::free_blocks`] without the holes: what appending alone can
    /// still take.
    pub fn free_blocks_appending(&self) -> u64 {
        let (avail, dirty) = self.append_room();
        avail.saturating_sub(dirty * 2)
    }

    /// Whether appending `need` more blocks (and placing what is dirty)
    /// would take segments that are freed but not yet usable: cleaner
    /// passes free victims without a checkpoint of their own, and they
    /// become usable only once a checkpoint records it.
    pub fn needs_freed_segments(&self, need: u64) -> bool {
        if self.segs.pending_free.is_empty() {
            return false;
        }
        let seg = self.geo.segment_blocks as u64;
        let reserve = self.reserve_segments() + self.stream_segments_held();
        let usable =
            self.segs.free_count().saturating_sub(reserve) * seg + (seg - self.cur_off as u64);
        usable.saturating_sub(self.pending_blocks() as u64 * 2) < need + seg
    }

    /// Blocks the log can still append before the reserve, and the dirty
    /// blocks waiting for a place.
    fn append_room(&self) -> (u64, u64) {
        let seg = self.geo.segment_blocks as u64;
        let free = self.segs.free_count() + self.segs.pending_free.len() as u64;
        let reserve = self.reserve_segments() + self.stream_segments_held();
        let avail = free.saturating_sub(reserve) * seg + (seg - self.cur_off as u64);
        (avail, self.pending_blocks() as u64)
    }

    /// Segments user writes may not use, so that the cleaner can always
    /// make progress and deletes and checkpoints can always be written:
    /// one for the metadata of deletes and checkpoints (the cleaner leaves
    /// it alone), one for the cleaner's copies of its victim (at most a
    /// segment), one because a checkpoint's metadata may spill over from
    /// the writer's segment, plus 1 % of the device.
    pub fn reserve_segments(&self) -> u64 {
        3 + self.geo.nsegments / 100
    }

    /// [`SegTable::add_snapshot`]; a count going below 0 is a damaged image,
    /// and writes stop.
    pub(crate) fn add_snapshot(&mut self, seg: u64, delta: i64) -> Result<()> {
        let r = self.segs.add_snapshot(seg, delta);
        self.stop_on_error(r)
    }

    /// A block placed in `seg` is live ([`SegTable::add_live`]); more than
    /// the segment holds is a damaged image, and writes stop.
    pub(crate) fn add_live(&mut self, seg: u64, now: u64) -> Result<()> {
        let r = self.segs.add_live(seg, now);
        self.stop_on_error(r)
    }

    /// A live block of `seg` died ([`SegTable::kill_live`]); a SUFILE count
    /// that is already 0 is a damaged image, and writes stop.
    pub(crate) fn kill_live(&mut self, seg: u64, to_snapshot: bool, now: u64) -> Result<()> {
        let r = self.segs.kill_live(seg, to_snapshot, now);
        self.stop_on_error(r)
    }

    /// Blocks of `seg` are about to be written ([`SegTable::add_written`]);
    /// a segment that would overflow is a damaged image, and writes stop
    /// (the checkpoint fails before its records are written).
    pub(crate) fn add_written(&mut self, seg: u64, nblocks: u32, now: u64) -> Result<()> {
        if self.segs.freed_by_move_records.remove(&seg) {
            self.stats.victims_reused_before_checkpoint += 1;
        }
        let r = self.segs.add_written(seg, nblocks, now);
        self.stop_on_error(r)
    }

    /// A counter change that found the image damaged stops writes.
    fn stop_on_error<T>(&mut self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            self.fail(e);
        }
        r
    }

    /// Turn read-only after a device failure, keeping the reason.
    pub fn fail(&mut self, err: &Error) {
        if self.failed.is_none() {
            if let Some(reason) = self.io.failure() {
                // The queue stopped on it and logged it.
                self.failed = Some(reason);
                return;
            }
            tracing::error!("device error, file system is now read-only: {err}");
            self.failed = Some(err.to_string());
        }
    }
}

/// A bit per free entry of DAT block `idx` (contents `block`), counting only
/// entries below `floor`, the end of the DAT in the last checkpoint: the
/// ones above were handed out since, or never, and belong to the end.
fn free_slots(block: &[u8], idx: u64, floor: u64) -> u128 {
    (0..DAT_PER_BLOCK as usize)
        .filter(|&slot| {
            let v = idx * DAT_PER_BLOCK + slot as u64;
            // Virtual block 0 means "none" and is never handed out.
            v != 0 && v < floor && DatEntry::slot_is_free(block, slot)
        })
        .fold(0u128, |m, slot| m | 1 << slot)
}

pub(crate) fn decode_u64(b: &[u8], what: &str) -> Result<u64> {
    b.try_into()
        .map(u64::from_le_bytes)
        .map_err(|_| Error::corrupt(format!("{what}: value of {} bytes, expected 8", b.len())))
}

impl Store {
    /// Damage the in-memory counters: one live block fewer in `seg` than
    /// it holds (tests of the cleaner's checks).
    pub fn undercount_live_for_test(&mut self, seg: u64) {
        self.segs.usage[seg as usize].nlive -= 1;
    }

    /// A copy of the whole device (small test devices only).
    pub fn dev_bytes_for_test(&mut self) -> Vec<u8> {
        let mut b = vec![0; self.dev.size_bytes() as usize];
        self.dev.read_at(0, &mut b).expect("read whole device");
        b
    }
}

#[cfg(test)]
impl Store {
    /// A new store of 600 blocks in 64-block segments, for unit tests.
    pub(crate) fn small_for_test() -> Store {
        let opts = crate::meta::open::MkfsOptions {
            segment_blocks: 64,
            label: String::new(),
        };
        let dev = Box::new(crate::device::MemDevice::new(
            600 * crate::layout::BLOCK_BYTES as u64,
        ));
        Store::create(dev, &opts, StoreConfig::default()).unwrap()
    }

    /// Move the end of the DAT, as a damaged super root would.
    pub(crate) fn set_dat_end_for_test(&mut self, next_vblock: u64) {
        self.next_vblock = next_vblock;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::dat_entry::CNO_MAX;

    /// Found by the `image` fuzz target: a patch (`ff ff ff ff ff 64 64 64`)
    /// over an inode's xattr root gave a virtual block above 2^62, whose
    /// cache key overflowed (a debug assertion; in release it aliased
    /// another block's key).
    #[test]
    fn virtual_block_out_of_range_is_corrupt() {
        let mut s = Store::small_for_test();
        let owner = Owner {
            ino: 16,
            offset: 0,
            kind: BlockKind::Node,
        };
        for v in [0x6464_64ff_ffff_ffff, 1 << 62, u64::MAX] {
            let e = s.vread(v, owner).unwrap_err();
            assert!(e.to_string().contains("out of range"), "{e}");
        }
    }

    /// Virtual block numbers stop at the limit the cache can key: an
    /// allocation past it is refused, not wrapped or asserted.
    #[test]
    fn allocating_past_the_virtual_block_limit_is_refused() {
        let mut s = Store::small_for_test();
        s.next_vblock = crate::layout::VBLOCK_LIMIT - 1;
        let e = s.valloc_run(2).unwrap_err().to_string();
        assert!(e.contains("no room for 2 more"), "{e}");
        assert_eq!(
            s.next_vblock,
            crate::layout::VBLOCK_LIMIT - 1,
            "nothing allocated"
        );
    }

    /// Found by the `image` fuzz target (input `fd 51 51 02 00 42 51 51`,
    /// read-write mount): a damaged tree named a virtual block whose DAT
    /// entry is free, and freeing the file's blocks hit an assertion. Now it
    /// is a corruption error and writes stop.
    #[test]
    fn killing_a_block_the_dat_does_not_hold_is_corrupt() {
        let mut s = Store::small_for_test();
        let e = s.vkill(5_308_473).unwrap_err();
        assert!(e.to_string().contains("not live"), "{e}");
        assert!(s.writable().is_err(), "writes must stop");
    }

    /// A shared block counts its users in its DAT entry: sharing stops at
    /// the limit with EMLINK and changes nothing; each kill takes a user
    /// off, and only the last one ends the block.
    #[test]
    fn shared_blocks_count_users_to_the_limit_and_die_with_the_last() {
        let mut s = Store::small_for_test();
        s.enable_clones();
        let owner = Owner {
            ino: 16,
            offset: 0,
            kind: BlockKind::Data,
        };
        let v = s.vnew(vec![7; 4096], owner).unwrap();
        assert!(s.vshare_many(&[v]).is_err(), "a fresh block is not shared");
        s.checkpoint().unwrap();
        let e = s.dat_get(v).unwrap();
        let max = crate::meta::dat_entry::MAX_REFS;
        s.dat_set(v, DatEntry { refs: max - 1, ..e }).unwrap();
        s.vshare_many(&[v]).unwrap();
        assert_eq!(s.dat_get(v).unwrap().refs, max);
        let err = s.vshare_many(&[v]).unwrap_err();
        assert!(matches!(err, Error::Errno(lsfs_vfs::Errno::MLINK)), "{err}");
        assert_eq!(s.dat_get(v).unwrap().refs, max, "unchanged");
        s.vkill_many(&[v, v]).unwrap();
        assert_eq!(s.dat_get(v).unwrap().refs, max - 2);
        let e = s.dat_get(v).unwrap();
        s.dat_set(v, DatEntry { refs: 1, ..e }).unwrap();
        s.vkill(v).unwrap();
        assert!(s.dat_get(v).unwrap().is_current(), "one user left");
        s.vkill(v).unwrap();
        assert!(!s.dat_get(v).unwrap().is_current(), "the last one ends it");
    }

    /// Users counted on an image without the CLONES feature are damage
    /// (the high bytes of the physical block's word, as a patch left them).
    #[test]
    fn users_counted_without_clones_are_corrupt() {
        let mut s = Store::small_for_test();
        let v = s.valloc().unwrap();
        let e = DatEntry {
            refs: 0x8125,
            ..DatEntry::fresh(1)
        };
        s.dat_set(v, e).unwrap();
        let err = s.dat_get(v).unwrap_err().to_string();
        assert!(err.contains("no clones"), "{err}");
    }

    /// Found by the `image` fuzz target (a patch to the high bytes of a DAT
    /// entry's physical block, checksums resealed, then a truncation on a
    /// read-write mount): freeing the block took its segment with
    /// `expect("checked on read")`, which no read had checked. DAT entries
    /// are now checked where they are read.
    #[test]
    fn dat_entry_outside_the_log_is_corrupt() {
        let mut s = Store::small_for_test();
        let v = s.valloc().unwrap();
        let e = DatEntry {
            pblock: 0x2525_2500_0000,
            start: 1,
            end: CNO_MAX,
            prev_start: 0,
            refs: 0,
            frame: 0,
        };
        s.dat_set(v, e).unwrap();
        let err = s.dat_get(v).unwrap_err().to_string();
        assert!(err.contains("outside the log"), "{err}");
        let err = s.vkill(v).unwrap_err().to_string();
        assert!(err.contains("outside the log"), "{err}");
        assert!(s.writable().is_err(), "writes must stop");
    }

    /// Hardening (the panic the `image` fuzz target found in the same place
    /// came from an extent, `fs::file`): a DAT block address in the range
    /// of temporary addresses would be taken for a dirty block once its
    /// leaf is copied on write. A DAT node's pointers are checked when read.
    #[test]
    fn dat_node_pointing_outside_the_log_is_corrupt() {
        use crate::btree::{Node, Value};
        let mut s = Store::small_for_test();
        let at = s.geo.segment_start(5);
        for (a, bad) in [(s.geo.segment_start(6), false), (TEMP_BASE + 1, true)] {
            let leaf = Node::Leaf {
                items: vec![(0, Value::from_slice(&a.to_le_bytes()))],
            };
            s.dev
                .write_at(s.geo.byte_offset(at), &leaf.encode(s.geo.block_bytes))
                .unwrap();
            s.cache.remove(pkey(at));
            s.dat_map.clear();
            s.dat_root = at;
            match s.dat_get(1) {
                Ok(e) => assert!(!bad && e.is_free(), "{a:#x}: {e:?}"),
                Err(err) => {
                    let err = err.to_string();
                    assert!(bad, "{a:#x}: {err}");
                    assert!(
                        err.contains(&format!(
                            "DAT node at block {at}: DAT block 0 points at block {a}"
                        )),
                        "{err}"
                    );
                }
            }
        }
    }
}
