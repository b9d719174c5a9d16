//! Promoting a checkpoint to a snapshot and demoting it, with the segment
//! counters kept exact: a dead block moves into (or out of) `nsnapshot` when
//! this change makes it protected by some snapshot (or no longer).
//!
//! Snapshotting the checkpoint just written costs O(1): no block has died
//! since it, so nothing moves. Other cases scan the DAT (O(DAT blocks)); the
//! background reconciliation that makes them O(1) is the cleaner issue's.

use crate::btree::NodeStore;
use crate::error::{Error, Result};
use crate::meta::dat_entry::{DatEntry, CNO_MAX, DAT_PER_BLOCK};
use crate::meta::store::{dat_nodes, decode_u64, Store};

impl Store {
    pub fn set_snapshot(&mut self, cno: u64, on: bool) -> Result<()> {
        self.writable()?;
        let was = self
            .cps
            .entries
            .get(&cno)
            .ok_or_else(|| Error::invalid(format!("checkpoint {cno} does not exist")))?
            .is_snapshot();
        if was == on {
            return Ok(());
        }
        let before = self.snapshots.clone();
        self.cps.set_snapshot(cno, on)?;
        self.snapshots = self.cps.snapshots();
        let after = self.snapshots.clone();
        let covered = |snaps: &[u64], e: &DatEntry| {
            let i = snaps.partition_point(|&s| s < e.start);
            snaps.get(i).is_some_and(|&s| s < e.end)
        };
        // Every dead block that `cno` can see: start <= cno < end.
        let tree = self.tree;
        let mut idx = 0u64;
        loop {
            let root = self.dat_root;
            let Some((k, val)) = tree.ceil(&mut dat_nodes!(self), root, idx)? else {
                break;
            };
            let addr = decode_u64(&val, "DAT block map")?;
            let block = dat_nodes!(self).read_node(addr)?;
            for slot in 0..DAT_PER_BLOCK as usize {
                let e = DatEntry::read(&block, slot)?;
                if e.is_free()
                    || e.end == CNO_MAX
                    || e.pblock == 0
                    || !(e.start <= cno && cno < e.end)
                {
                    continue;
                }
                let delta = covered(&after, &e) as i64 - covered(&before, &e) as i64;
                if delta != 0 {
                    let seg = self.geo.segment_of(e.pblock).ok_or_else(|| {
                        Error::corrupt(format!(
                            "DAT entry {} points outside the log",
                            k * DAT_PER_BLOCK + slot as u64
                        ))
                    })?;
                    self.segs.add_snapshot(seg, delta);
                }
            }
            idx = k + 1;
        }
        Ok(())
    }
}
