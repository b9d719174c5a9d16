//! What a mount holds in memory, structure by structure, with the bound of
//! each: the memory bound `lsfs stats` reports and docs/PERFORMANCE.md
//! states. Sizes are estimates (entries times the bytes an entry takes with
//! its container's overhead), close enough to tell which structure grows.

use serde::Serialize;

use crate::fs::Lsfs;

/// One in-memory structure.
#[derive(Clone, Debug, Serialize)]
pub struct MemoryItem {
    pub name: &'static str,
    pub entries: u64,
    /// The most entries it may hold, or `None` if it grows with the device.
    pub max_entries: Option<u64>,
    /// Estimated bytes now.
    pub bytes: u64,
    /// Estimated bytes at `max_entries` (for the device-sized ones: at this
    /// device's size).
    pub max_bytes: u64,
}

/// Bytes per entry of a `HashMap`/`HashSet` with `payload` bytes of key and
/// value: the payload, a control byte, and the slack of a table kept at
/// most 7/8 full and grown by doubling (on average 3/4 full).
fn hashed(payload: u64) -> u64 {
    (payload + 1) * 4 / 3
}

impl MemoryItem {
    fn new(name: &'static str, entries: u64, max_entries: Option<u64>, each: u64) -> MemoryItem {
        MemoryItem {
            name,
            entries,
            max_entries,
            bytes: entries * each,
            max_bytes: max_entries.unwrap_or(entries) * each,
        }
    }
}

impl Lsfs {
    /// The mount's in-memory structures, biggest bound first.
    pub fn memory(&self) -> Vec<MemoryItem> {
        let mut items = self.memory_caches();
        items.extend(self.memory_queues());
        items.extend(self.memory_tables());
        items.sort_by_key(|i| std::cmp::Reverse(i.max_bytes));
        items
    }

    /// Caches and mirrors with a fixed bound.
    fn memory_caches(&self) -> Vec<MemoryItem> {
        let s = &self.store;
        let bb = s.geo().block_bytes as u64;
        // A cached block: its bytes, its map entry and the policy's page
        // state (cache/mod.rs). The cache may exceed its capacity by what one
        // operation dirties; writes are cut into quarters of it.
        let cache_each = bb + hashed(8 + 48) + 32;
        let cache_max = s.cache().capacity_blocks() as u64 * 5 / 4;
        let (reuse_now, reuse_max) = s.dat_reuse_tracked_blocks();
        vec![
            MemoryItem::new(
                "block cache",
                s.cache().len() as u64,
                Some(cache_max),
                cache_each,
            ),
            MemoryItem::new(
                "DAT block map mirror",
                s.dat_mirror_len() as u64,
                Some(crate::meta::store::DAT_MAP_MAX_ENTRIES as u64),
                hashed(16),
            ),
            MemoryItem::new(
                "inode cache",
                self.inodes.len() as u64,
                Some(super::INODE_CACHE_MAX as u64),
                hashed(8 + std::mem::size_of::<super::Cached>() as u64),
            ),
            MemoryItem::new(
                "write streams: per-file history",
                s.streams().history_len() as u64,
                Some(crate::meta::stream::FILE_HISTORY_MAX as u64),
                hashed(16),
            ),
            MemoryItem::new(
                "DAT reuse: tracked DAT blocks",
                reuse_now,
                Some(reuse_max),
                hashed(8 + 16) + 24,
            ),
            MemoryItem::new(
                // A vector slot while the write is in memory, a set entry
                // once an fsync record made it durable: the larger counted.
                "move records: blocks killed since the checkpoint",
                s.durable_kills_len() as u64,
                Some(crate::meta::durable_kills::MAX_BLOCKS as u64),
                hashed(8),
            ),
        ]
    }

    /// Work prepared or queued, bounded by the pass or queue that holds it.
    fn memory_queues(&self) -> Vec<MemoryItem> {
        let s = &self.store;
        let bb = s.geo().block_bytes as u64;
        vec![
            MemoryItem::new(
                // A pass prepares victims until the cap, so it ends at most
                // one victim past it.
                "threaded logging: prepared holes",
                s.plugs().holes(),
                Some((super::clean::PLUG_HOLES_SEGMENTS + 1) * s.geo().segment_blocks as u64),
                4,
            ),
            MemoryItem::new(
                // Writes queued and not done (device/io_queue.rs): at most
                // its bound plus one write, which never spans segments.
                "I/O queue: writes not done",
                (s.io().pending_bytes() as u64).div_ceil(bb),
                Some(s.io().limit() as u64 / bb + s.geo().segment_blocks as u64),
                bb,
            ),
            MemoryItem::new(
                // Inode numbers followed, waiting or looked at
                // (fs/compaction.rs), each in a map or set with its slack.
                "compaction: files followed",
                self.compaction.tracked(),
                Some(super::compaction::MAX_TRACKED as u64),
                24,
            ),
        ]
    }

    /// Mirrors that grow with the device (no fixed bound).
    fn memory_tables(&self) -> Vec<MemoryItem> {
        let s = &self.store;
        vec![
            MemoryItem::new(
                "segment table (SUFILE mirror)",
                s.segs().nsegments(),
                None,
                std::mem::size_of::<crate::meta::sufile::SegUsage>() as u64 + 8 + 8,
            ),
            MemoryItem::new(
                // Each queued file holds at least 64 blocks, but the one a
                // step is freeing (delete.rs).
                "deletes: queued files",
                self.deletes.status().files,
                Some(s.geo().total_segment_blocks() / super::FOREGROUND_DELETE_MAX_BLOCKS + 1),
                // A B-tree map's entry with its node's slack.
                32,
            ),
            MemoryItem::new(
                "checkpoint table (CPFILE mirror)",
                s.cps().entries.len() as u64,
                None,
                std::mem::size_of::<crate::meta::cpfile::CpEntry>() as u64 + 48,
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemDevice;
    use crate::fs::MountConfig;
    use crate::meta::open::MkfsOptions;

    #[test]
    fn the_cache_dominates_and_every_item_is_within_its_bound() {
        let opts = MkfsOptions {
            segment_blocks: 256,
            label: "m".into(),
        };
        let fs = Lsfs::mkfs(
            Box::new(MemDevice::new(64 << 20)),
            &opts,
            MountConfig::default(),
        )
        .unwrap();
        let items = fs.memory();
        assert_eq!(items[0].name, "block cache");
        for i in &items {
            assert!(i.bytes <= i.max_bytes, "{i:?}");
            if let Some(m) = i.max_entries {
                assert!(i.entries <= m, "{i:?}");
            }
        }
        // The default 64 MiB cache and its overhead.
        assert!(items[0].max_bytes > 64 << 20 && items[0].max_bytes < 96 << 20);
    }
}
