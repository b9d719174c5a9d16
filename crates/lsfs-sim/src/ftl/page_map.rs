//! The page mapping both FTLs keep: logical page ↔ physical page, valid pages per physical
//! block, and erase counts. The FTLs differ in where they put a page and which block they
//! clean; how a page is placed, invalidated, and how a block is erased is the same.

const NONE: u32 = u32::MAX;

#[derive(Clone)]
pub(super) struct PageMap {
    pages_per_block: u32,
    /// logical page → physical page
    l2p: Vec<u32>,
    /// physical page → logical page
    p2l: Vec<u32>,
    valid: Vec<u32>,
    erase_counts: Vec<u32>,
}

impl PageMap {
    pub(super) fn new(logical_pages: u64, blocks: usize, pages_per_block: u32) -> Self {
        assert!(
            (blocks as u64 * pages_per_block as u64) < NONE as u64,
            "device too large for u32 pages"
        );
        Self {
            pages_per_block,
            l2p: vec![NONE; logical_pages as usize],
            p2l: vec![NONE; blocks * pages_per_block as usize],
            valid: vec![0; blocks],
            erase_counts: vec![0; blocks],
        }
    }

    pub(super) fn is_mapped(&self, lpn: u64) -> bool {
        self.l2p[lpn as usize] != NONE
    }

    pub(super) fn valid(&self, block: u32) -> u32 {
        self.valid[block as usize]
    }

    pub(super) fn erase_counts(&self) -> &[u32] {
        &self.erase_counts
    }

    /// Drop `lpn`'s current copy, if it has one; the block it was in is returned, with one
    /// valid page less.
    pub(super) fn invalidate(&mut self, lpn: u64) -> Option<u32> {
        let ppn = self.l2p[lpn as usize];
        if ppn == NONE {
            return None;
        }
        self.p2l[ppn as usize] = NONE;
        let block = ppn / self.pages_per_block;
        self.valid[block as usize] -= 1;
        self.l2p[lpn as usize] = NONE;
        Some(block)
    }

    /// Place `lpn` at `offset` of `block`, which must be unwritten since its erase.
    pub(super) fn program(&mut self, lpn: u64, block: u32, offset: u32) {
        let ppn = block * self.pages_per_block + offset;
        debug_assert_eq!(self.p2l[ppn as usize], NONE);
        self.p2l[ppn as usize] = lpn as u32;
        self.l2p[lpn as usize] = ppn;
        self.valid[block as usize] += 1;
    }

    /// The logical pages whose valid copy is in `block`, in physical order.
    pub(super) fn live_pages(&self, block: u32) -> Vec<u64> {
        let first = (block * self.pages_per_block) as usize;
        self.p2l[first..first + self.pages_per_block as usize]
            .iter()
            .filter(|&&l| l != NONE)
            .map(|&l| l as u64)
            .collect()
    }

    /// Erase `block`, which must hold no valid page, so it can be written again.
    pub(super) fn erase(&mut self, block: u32) {
        debug_assert_eq!(
            self.valid[block as usize], 0,
            "erasing a block with valid pages"
        );
        let first = (block * self.pages_per_block) as usize;
        self.p2l[first..first + self.pages_per_block as usize].fill(NONE);
        self.erase_counts[block as usize] += 1;
    }

    /// Logical pages that currently have a valid copy.
    pub(super) fn mapped_pages(&self) -> usize {
        self.l2p.iter().filter(|&&p| p != NONE).count()
    }

    /// l2p and p2l are inverse maps and every block's valid count matches its pages; `Err`
    /// names the first violation. For tests.
    pub(super) fn check_consistency(&self) -> Result<(), String> {
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
