//! Page-level mapping: any logical page can live in any physical page. Host writes and GC
//! copies go to separate active blocks; when free blocks run low, greedy GC takes the full
//! block with the fewest valid pages, copies them out and erases it.

use super::block_buckets::BlockBuckets;
use super::page_map::PageMap;
use super::{Ftl, FtlGeometry, FtlStats};

/// GC runs when fewer free blocks than this remain (one per active block, plus one spare).
const MIN_FREE_BLOCKS: usize = 3;

#[derive(Clone)]
pub struct PageLevelFtl {
    pages_per_block: u32,
    map: PageMap,
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
        Self {
            pages_per_block: ppb,
            map: PageMap::new(g.logical_pages(), blocks, ppb),
            free: (0..blocks as u32).rev().collect(),
            full: BlockBuckets::new(blocks, ppb),
            host_active: None,
            gc_active: None,
            stats: FtlStats::default(),
        }
    }

    fn invalidate(&mut self, lpn: u64) {
        if let Some(block) = self.map.invalidate(lpn) {
            self.full.decrement(block);
        }
    }

    /// Append `lpn` to the host or GC active block.
    fn program(&mut self, lpn: u64, gc: bool) {
        let active = if gc { self.gc_active } else { self.host_active };
        let (block, offset) = match active {
            Some(a) => a,
            None => (self.free.pop().expect("GC keeps free blocks"), 0),
        };
        self.map.program(lpn, block, offset);
        let next = if offset + 1 == self.pages_per_block {
            self.full.insert(block, self.map.valid(block));
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
                self.map.valid(victim) < self.pages_per_block,
                "device is full of valid data"
            );
            self.full.remove(victim);
            for lpn in self.map.live_pages(victim) {
                self.invalidate(lpn);
                self.program(lpn, true);
                self.stats.copied_pages += 1;
            }
            self.map.erase(victim);
            self.stats.erases += 1;
            self.free.push(victim);
        }
    }

    /// Logical pages that currently have a valid copy.
    pub fn mapped_pages(&self) -> usize {
        self.map.mapped_pages()
    }

    /// See [`PageMap::check_consistency`]. For tests.
    pub fn check_consistency(&self) -> Result<(), String> {
        self.map.check_consistency()
    }
}

impl Ftl for PageLevelFtl {
    fn write(&mut self, lpn: u64) {
        self.invalidate(lpn);
        self.collect_garbage();
        self.program(lpn, false);
        self.stats.host_pages += 1;
    }
    fn trim(&mut self, lpn: u64) {
        if self.map.is_mapped(lpn) {
            self.invalidate(lpn);
            self.stats.trimmed_pages += 1;
        }
    }
    fn stats(&self) -> &FtlStats {
        &self.stats
    }
    fn reset_stats(&mut self) {
        self.stats = FtlStats::default();
    }
    fn erase_counts(&self) -> &[u32] {
        self.map.erase_counts()
    }
    fn boxed_clone(&self) -> Box<dyn Ftl + Send + Sync> {
        Box::new(self.clone())
    }
}
