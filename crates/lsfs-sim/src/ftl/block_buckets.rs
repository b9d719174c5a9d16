//! Blocks bucketed by valid-page count, for O(1) greedy victim selection: intrusive doubly
//! linked lists indexed by block, one list per count.

const NONE: u32 = u32::MAX;

#[derive(Clone)]
pub(super) struct BlockBuckets {
    head: Vec<u32>,
    prev: Vec<u32>,
    next: Vec<u32>,
    count_of: Vec<u32>,
    member: Vec<bool>,
}

impl BlockBuckets {
    pub(super) fn new(blocks: usize, pages_per_block: u32) -> Self {
        Self {
            head: vec![NONE; pages_per_block as usize + 1],
            prev: vec![NONE; blocks],
            next: vec![NONE; blocks],
            count_of: vec![0; blocks],
            member: vec![false; blocks],
        }
    }

    pub(super) fn insert(&mut self, block: u32, valid: u32) {
        debug_assert!(!self.member[block as usize]);
        let b = block as usize;
        self.member[b] = true;
        self.count_of[b] = valid;
        self.prev[b] = NONE;
        self.next[b] = self.head[valid as usize];
        if self.next[b] != NONE {
            self.prev[self.next[b] as usize] = block;
        }
        self.head[valid as usize] = block;
    }

    pub(super) fn remove(&mut self, block: u32) {
        let b = block as usize;
        if !self.member[b] {
            return;
        }
        let (p, n) = (self.prev[b], self.next[b]);
        if p != NONE {
            self.next[p as usize] = n;
        } else {
            self.head[self.count_of[b] as usize] = n;
        }
        if n != NONE {
            self.prev[n as usize] = p;
        }
        self.member[b] = false;
    }

    /// A member block lost one valid page.
    pub(super) fn decrement(&mut self, block: u32) {
        if self.member[block as usize] {
            let c = self.count_of[block as usize];
            self.remove(block);
            self.insert(block, c - 1);
        }
    }

    /// The member with the fewest valid pages.
    pub(super) fn min_block(&self) -> Option<u32> {
        self.head.iter().copied().find(|&h| h != NONE)
    }
}
