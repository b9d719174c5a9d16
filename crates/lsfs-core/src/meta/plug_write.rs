//! The segment constructor's side of threaded logging (meta/plug.rs):
//! picking the dirty user data blocks that go into prepared holes, setting
//! their SSA entries, and writing them.

use crate::cache::{key_addr, key_is_virtual, vkey};
use crate::error::Result;
use crate::log::record::holds_file_data;
use crate::meta::store::Store;

impl Store {
    /// Hand holes usable in checkpoint `cno` to the dirty user data blocks,
    /// in (inode, offset) order, and set their SSA entries. Called before
    /// the checkpoint closes its dirty set (the SSA blocks join it).
    pub(crate) fn assign_plugs(&mut self, cno: u64) -> Result<()> {
        self.plugs.clear_assigned();
        if !self.plugs.any_usable(cno) {
            return Ok(());
        }
        let mut blocks: Vec<(u64, u64, u64)> = self
            .cache
            .dirty_keys()
            .into_iter()
            .filter(|&k| key_is_virtual(k))
            .filter_map(|k| {
                let v = key_addr(k);
                let o = self.cache.owner(k)?;
                (holds_file_data(o.kind, o.ino)
                    && !self.plugs.is_cleaner_moved(v)
                    && !self.moved_dead.contains(&v))
                .then_some((o.ino, o.offset, v))
            })
            .collect();
        if blocks.is_empty() {
            return Ok(());
        }
        blocks.sort_unstable();
        let now = self.now();
        let geo = self.geo;
        for (seg, changes) in self.plugs.assign(cno, |s| geo.segment_start(s), blocks) {
            // The segment's age: the live-weighted mean of its old age and
            // now (F2FS's update_segment_mtime), so age-based policies do
            // not see a freshly plugged segment as old.
            let u = &mut self.segs.usage[seg as usize];
            let (old, n) = (u.nlive as u64, changes.len() as u64);
            u.lastmod_secs = (u.lastmod_secs * old + now * n) / (old + n);
            self.segs
                .dirty_blocks
                .insert(seg / crate::meta::sufile::SU_PER_BLOCK);
            self.ssa_set(seg, &changes)?;
        }
        Ok(())
    }

    /// Write the blocks placed in holes at `places` (virtual blocks `vs`),
    /// each run of adjacent places with one device write.
    pub(crate) fn write_plugged(&mut self, vs: &[u64], places: &[u64]) -> Result<()> {
        let mut order: Vec<(u64, u64)> = places.iter().copied().zip(vs.iter().copied()).collect();
        order.sort_unstable();
        let mut i = 0;
        while i < order.len() {
            let mut j = i + 1;
            while j < order.len() && order[j].0 == order[j - 1].0 + 1 {
                j += 1;
            }
            let mut buf = Vec::with_capacity((j - i) * self.geo.block_bytes);
            for &(_, v) in &order[i..j] {
                buf.extend_from_slice(self.cache.get(vkey(v)).expect("dirty block cached"));
            }
            self.frames.forget_read();
            self.dev.write_at(self.geo.byte_offset(order[i].0), &buf)?;
            self.plugs.note_written(0, 1);
            i = j;
        }
        let n = order.len() as u64;
        self.plugs.note_written(n, 0);
        self.stats.blocks_written += n;
        self.stats.payload_blocks_written += n;
        *self
            .stats
            .blocks_by_class
            .entry(crate::log::record::FILE_DATA)
            .or_default() += n;
        Ok(())
    }
}
