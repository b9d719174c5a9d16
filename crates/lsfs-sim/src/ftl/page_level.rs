//! Page-level mapping: any logical page can live in any physical page. Host writes and GC
//! copies go to separate active blocks; when free blocks run low, greedy GC takes the full
//! block with the fewest valid pages, copies them out and erases it.

use super::block_buckets::BlockBuckets;
use super::{Ftl, FtlGeometry, FtlStats};

const NONE: u32 = u32::MAX;
/// GC runs when fewer free blocks than this remain (one per active block, plus one spare).
const MIN_FREE_BLOCKS: usize = 3;

#[derive(Clone)]
pub struct PageLevelFtl {
    pages_per_block: u32,
    l2p: Vec<u32>,
    p2l: Vec<u32>,
    valid: Vec<u32>,
    erase_counts: Vec<u32>,
    free: Vec<u32>,
    /// Full blocks, by valid count (GC candidates).
    full: BlockBuckets,
    host_active: Option<(u32, u32)>,
    gc_active: Option<(u32, u32)>,
    stats: FtlStats,
}

impl PageLevelFtl {
    pub fn new(g: &FtlGeometry) -> Self {
        let blocks = (g.logical_blocks() + g.spare_blocks()) as usize;
        let ppb = g.pages_per_block;
        assert!(
            (blocks as u64 * ppb as u64) < NONE as u64,
            "device too large for u32 pages"
        );
        Self {
            pages_per_block: ppb,
            l2p: vec![NONE; g.logical_pages() as usize],
            p2l: vec![NONE; blocks * ppb as usize],
            valid: vec![0; blocks],
            erase_counts: vec![0; blocks],
            free: (0..blocks as u32).rev().collect(),
            full: BlockBuckets::new(blocks, ppb),
            host_active: None,
            gc_active: None,
            stats: FtlStats::default(),
        }
    }

    fn invalidate(&mut self, lpn: u64) {
        let ppn = self.l2p[lpn as usize];
        if ppn == NONE {
            return;
        }
        self.p2l[ppn as usize] = NONE;
        let block = ppn / self.pages_per_block;
        self.valid[block as usize] -= 1;
        self.full.decrement(block);
        self.l2p[lpn as usize] = NONE;
    }

    /// Append `lpn` to the host or GC active block.
    fn program(&mut self, lpn: u64, gc: bool) {
        let active = if gc { self.gc_active } else { self.host_active };
        let (block, offset) = match active {
            Some(a) => a,
            None => (self.free.pop().expect("GC keeps free blocks"), 0),
        };
        let ppn = block * self.pages_per_block + offset;
        self.p2l[ppn as usize] = lpn as u32;
        self.l2p[lpn as usize] = ppn;
        self.valid[block as usize] += 1;
        let next = if offset + 1 == self.pages_per_block {
            self.full.insert(block, self.valid[block as usize]);
            None
        } else {
            Some((block, offset + 1))
        };
        if gc {
            self.gc_active = next;
        } else {
            self.host_active = next;
        }
    }

    fn collect_garbage(&mut self) {
        while self.free.len() < MIN_FREE_BLOCKS {
            let victim = self.full.min_block().expect("a full block to clean");
            assert!(
                self.valid[victim as usize] < self.pages_per_block,
                "device is full of valid data"
            );
            self.full.remove(victim);
            let first = (victim * self.pages_per_block) as usize;
            for ppn in first..first + self.pages_per_block as usize {
                let lpn = self.p2l[ppn];
                if lpn != NONE {
                    self.invalidate(lpn as u64);
                    self.program(lpn as u64, true);
                    self.stats.copied_pages += 1;
                }
            }
            debug_assert_eq!(self.valid[victim as usize], 0);
            self.erase_counts[victim as usize] += 1;
            self.stats.erases += 1;
            self.free.push(victim);
        }
    }

    /// Logical pages that currently have a valid copy.
    pub fn mapped_pages(&self) -> usize {
        self.l2p.iter().filter(|&&p| p != NONE).count()
    }

    /// l2p and p2l are inverse maps and every block's valid count matches its pages; `Err`
    /// names the first violation. For tests.
    pub fn check_consistency(&self) -> Result<(), String> {
        let mut valid = vec![0u32; self.valid.len()];
        for (lpn, &ppn) in self.l2p.iter().enumerate() {
            if ppn == NONE {
                continue;
            }
            if self.p2l[ppn as usize] != lpn as u32 {
                return Err(format!(
                    "logical {lpn} → physical {ppn}, which maps back elsewhere"
                ));
            }
            valid[(ppn / self.pages_per_block) as usize] += 1;
        }
        for (ppn, &lpn) in self.p2l.iter().enumerate() {
            if lpn != NONE && self.l2p[lpn as usize] != ppn as u32 {
                return Err(format!(
                    "physical {ppn} claims logical {lpn}, which maps elsewhere"
                ));
            }
        }
        if valid != self.valid {
            return Err("per-block valid counts disagree with the maps".into());
        }
        Ok(())
    }
}

impl Ftl for PageLevelFtl {
    fn write(&mut self, lpn: u64) {
        self.invalidate(lpn);
        self.collect_garbage();
        self.program(lpn, false);
        self.stats.host_pages += 1;
    }
    fn stats(&self) -> &FtlStats {
        &self.stats
    }
    fn reset_stats(&mut self) {
        self.stats = FtlStats::default();
    }
    fn erase_counts(&self) -> &[u32] {
        &self.erase_counts
    }
    fn boxed_clone(&self) -> Box<dyn Ftl + Send + Sync> {
        Box::new(self.clone())
    }
}
