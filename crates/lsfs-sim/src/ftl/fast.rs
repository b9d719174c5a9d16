//! FAST hybrid mapping (Lee et al. 2007): data blocks are block-mapped (page o of logical
//! block b lives at offset o of b's data block); updates go to log blocks, which are the
//! over-provisioned space:
//!
//! * one sequential (SW) log block takes a write at offset 0 and the in-order writes that
//!   follow it; when it is replaced or full it is *switched* (complete: the old data block is
//!   just erased) or *partially merged* (the missing tail is copied in first);
//! * every other write is appended to the random (RW) log blocks, fully associative; when
//!   they are all used, the oldest is reclaimed by a *full merge* of every logical block that
//!   has a valid page in it (copy all of that block's valid pages to a new data block, erase
//!   the old data block), then erased.

use std::collections::VecDeque;

use super::page_map::PageMap;
use super::{Ftl, FtlGeometry, FtlStats};

const NONE: u32 = u32::MAX;

#[derive(Clone)]
struct Sequential {
    logical_block: u32,
    physical_block: u32,
    next_offset: u32,
}

#[derive(Clone)]
pub struct FastFtl {
    ppb: u32,
    map: PageMap,
    /// logical block → its data block (`NONE` before its first merge)
    data_block: Vec<u32>,
    free: Vec<u32>,
    sequential: Option<Sequential>,
    random_logs: VecDeque<u32>,
    /// The RW log block being filled and its next offset.
    random_active: Option<(u32, u32)>,
    max_random_logs: usize,
    stats: FtlStats,
}

impl FastFtl {
    pub fn new(g: &FtlGeometry) -> Self {
        let log_blocks = g.fast_log_blocks.unwrap_or(g.spare_blocks()) as usize;
        assert!(
            log_blocks >= 2,
            "FAST needs a sequential and at least one random log block"
        );
        // Data blocks, log blocks, and one block for the merge in progress.
        let blocks = g.logical_blocks() as usize + log_blocks + 1;
        let ppb = g.pages_per_block;
        Self {
            ppb,
            map: PageMap::new(g.logical_pages(), blocks, ppb),
            data_block: vec![NONE; g.logical_blocks() as usize],
            free: (0..blocks as u32).rev().collect(),
            sequential: None,
            random_logs: VecDeque::new(),
            random_active: None,
            max_random_logs: log_blocks - 1,
            stats: FtlStats::default(),
        }
    }

    fn erase(&mut self, block: u32) {
        self.map.erase(block);
        self.stats.erases += 1;
        self.free.push(block);
    }

    fn allocate(&mut self) -> u32 {
        self.free.pop().expect("FAST keeps a block for merges")
    }

    /// Copy a valid page to `block` at its own offset.
    fn copy_to(&mut self, lpn: u64, block: u32) {
        self.map.invalidate(lpn);
        self.map.program(lpn, block, (lpn % self.ppb as u64) as u32);
        self.stats.copied_pages += 1;
    }

    /// Make the SW log block the data block of its logical block (switch or partial merge).
    fn close_sequential(&mut self) {
        let Some(sw) = self.sequential.take() else {
            return;
        };
        let base = sw.logical_block as u64 * self.ppb as u64;
        for offset in sw.next_offset..self.ppb {
            let lpn = base + offset as u64;
            if self.map.is_mapped(lpn) {
                self.copy_to(lpn, sw.physical_block);
            }
        }
        self.replace_data_block(sw.logical_block, sw.physical_block);
    }

    fn replace_data_block(&mut self, logical_block: u32, physical_block: u32) {
        let old = std::mem::replace(&mut self.data_block[logical_block as usize], physical_block);
        if old != NONE {
            self.erase(old);
        }
    }

    /// Full merge of one logical block into a fresh data block.
    fn full_merge(&mut self, logical_block: u32) {
        if self
            .sequential
            .as_ref()
            .is_some_and(|s| s.logical_block == logical_block)
        {
            // Its SW log block holds the head of the block: finish that as a partial merge.
            self.close_sequential();
            return;
        }
        let target = self.allocate();
        let base = logical_block as u64 * self.ppb as u64;
        for offset in 0..self.ppb as u64 {
            if self.map.is_mapped(base + offset) {
                self.copy_to(base + offset, target);
            }
        }
        self.replace_data_block(logical_block, target);
    }

    fn reclaim_oldest_random_log(&mut self) {
        let victim = self
            .random_logs
            .pop_front()
            .expect("a random log block to reclaim");
        let mut logical: Vec<u32> = self
            .map
            .live_pages(victim)
            .into_iter()
            .map(|lpn| (lpn / self.ppb as u64) as u32)
            .collect();
        logical.sort_unstable();
        logical.dedup();
        for lb in logical {
            self.full_merge(lb);
        }
        self.erase(victim);
    }

    fn write_random(&mut self, lpn: u64) {
        let (block, offset) = match self.random_active {
            Some(a) => a,
            None => {
                if self.random_logs.len() >= self.max_random_logs {
                    self.reclaim_oldest_random_log();
                }
                let b = self.allocate();
                self.random_logs.push_back(b);
                (b, 0)
            }
        };
        self.map.program(lpn, block, offset);
        self.random_active = (offset + 1 < self.ppb).then_some((block, offset + 1));
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

impl Ftl for FastFtl {
    fn write(&mut self, lpn: u64) {
        let logical_block = (lpn / self.ppb as u64) as u32;
        let offset = (lpn % self.ppb as u64) as u32;
        self.map.invalidate(lpn);
        self.stats.host_pages += 1;
        if offset == 0 {
            self.close_sequential();
            let block = self.allocate();
            self.map.program(lpn, block, 0);
            self.sequential = Some(Sequential {
                logical_block,
                physical_block: block,
                next_offset: 1,
            });
        } else if let Some(sw) = self
            .sequential
            .as_mut()
            .filter(|s| s.logical_block == logical_block && s.next_offset == offset)
        {
            sw.next_offset += 1;
            let block = sw.physical_block;
            self.map.program(lpn, block, offset);
        } else {
            self.write_random(lpn);
        }
        if self
            .sequential
            .as_ref()
            .is_some_and(|s| s.next_offset == self.ppb)
        {
            self.close_sequential();
        }
    }
    /// A trimmed page is no longer copied by merges; the data and log
    /// blocks stay where they are (FAST maps blocks, not pages).
    fn trim(&mut self, lpn: u64) {
        if self.map.invalidate(lpn).is_some() {
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
