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
    /// logical page → physical page
    l2p: Vec<u32>,
    /// physical page → logical page
    p2l: Vec<u32>,
    data_block: Vec<u32>,
    valid: Vec<u32>,
    erase_counts: Vec<u32>,
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
            l2p: vec![NONE; g.logical_pages() as usize],
            p2l: vec![NONE; blocks * ppb as usize],
            data_block: vec![NONE; g.logical_blocks() as usize],
            valid: vec![0; blocks],
            erase_counts: vec![0; blocks],
            free: (0..blocks as u32).rev().collect(),
            sequential: None,
            random_logs: VecDeque::new(),
            random_active: None,
            max_random_logs: log_blocks - 1,
            stats: FtlStats::default(),
        }
    }

    fn invalidate(&mut self, lpn: u64) {
        let ppn = self.l2p[lpn as usize];
        if ppn != NONE {
            self.p2l[ppn as usize] = NONE;
            self.valid[(ppn / self.ppb) as usize] -= 1;
            self.l2p[lpn as usize] = NONE;
        }
    }

    fn program(&mut self, lpn: u64, block: u32, offset: u32) {
        let ppn = block * self.ppb + offset;
        debug_assert_eq!(self.p2l[ppn as usize], NONE);
        self.p2l[ppn as usize] = lpn as u32;
        self.l2p[lpn as usize] = ppn;
        self.valid[block as usize] += 1;
    }

    fn erase(&mut self, block: u32) {
        debug_assert_eq!(
            self.valid[block as usize], 0,
            "erasing a block with valid pages"
        );
        let first = (block * self.ppb) as usize;
        self.p2l[first..first + self.ppb as usize].fill(NONE);
        self.erase_counts[block as usize] += 1;
        self.stats.erases += 1;
        self.free.push(block);
    }

    fn allocate(&mut self) -> u32 {
        self.free.pop().expect("FAST keeps a block for merges")
    }

    /// Copy a valid page to `block` at its own offset.
    fn copy_to(&mut self, lpn: u64, block: u32) {
        self.invalidate(lpn);
        self.program(lpn, block, (lpn % self.ppb as u64) as u32);
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
            if self.l2p[lpn as usize] != NONE {
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
            if self.l2p[(base + offset) as usize] != NONE {
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
        let first = (victim * self.ppb) as usize;
        let mut logical: Vec<u32> = self.p2l[first..first + self.ppb as usize]
            .iter()
            .filter(|&&l| l != NONE)
            .map(|&l| l / self.ppb)
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
        self.program(lpn, block, offset);
        self.random_active = (offset + 1 < self.ppb).then_some((block, offset + 1));
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
            valid[(ppn / self.ppb) as usize] += 1;
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

impl Ftl for FastFtl {
    fn write(&mut self, lpn: u64) {
        let logical_block = (lpn / self.ppb as u64) as u32;
        let offset = (lpn % self.ppb as u64) as u32;
        self.invalidate(lpn);
        self.stats.host_pages += 1;
        if offset == 0 {
            self.close_sequential();
            let block = self.allocate();
            self.program(lpn, block, 0);
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
            self.program(lpn, block, offset);
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
