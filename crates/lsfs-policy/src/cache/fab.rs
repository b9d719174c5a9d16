//! FAB (Flash-Aware Buffer, Jo et al. 2006): pages are grouped by flash block; the victim is
//! the block with the most resident pages (ties: the least recently used block), and *all* of
//! its pages are evicted together, which is FAB's "early eviction" weakness that TS-CLOCK
//! avoids.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};

use super::block_set::BlockSet;
use super::{AddressOf, Replacement};

pub struct Fab<K> {
    capacity_pages: usize,
    set: BlockSet<K>,
    /// (resident pages, Reverse(last access), block): the last element is the victim block.
    order: BTreeSet<(usize, Reverse<u64>, u64)>,
    last_access: HashMap<u64, u64>,
    clock: u64,
}

impl<K: Clone> Fab<K> {
    pub fn new(capacity_pages: usize, pages_per_block: u32, address_of: AddressOf<K>) -> Self {
        assert!(capacity_pages > 0);
        Self {
            capacity_pages,
            set: BlockSet::new(pages_per_block, address_of),
            order: BTreeSet::new(),
            last_access: HashMap::new(),
            clock: 0,
        }
    }

    /// Re-rank `block` after its size or recency changed (`accessed`: bump recency).
    fn rerank(&mut self, block: u64, old_len: usize, accessed: bool) {
        if let Some(stamp) = self.last_access.get(&block).copied() {
            self.order.remove(&(old_len, Reverse(stamp), block));
        }
        let stamp = if accessed {
            self.clock += 1;
            self.clock
        } else {
            self.last_access.get(&block).copied().unwrap_or(0)
        };
        let len = self.set.block_len(block);
        if len == 0 {
            self.last_access.remove(&block);
        } else {
            self.last_access.insert(block, stamp);
            self.order.insert((len, Reverse(stamp), block));
        }
    }
}

impl<K: Clone> Replacement<K> for Fab<K> {
    fn name(&self) -> &'static str {
        "fab"
    }
    fn insert(&mut self, key: K, dirty: bool) {
        assert!(
            self.set.len() < self.capacity_pages,
            "insert into a full cache"
        );
        let block = self.set.block_of_key(&key);
        let old_len = self.set.block_len(block);
        self.set.insert(key, dirty);
        self.rerank(block, old_len, true);
    }
    fn touch(&mut self, key: &K, write: bool) {
        if let Some(block) = self.set.touch(key, write) {
            let len = self.set.block_len(block);
            if len > 0 {
                self.rerank(block, len, true);
            }
        }
    }
    fn mark_clean(&mut self, key: &K) {
        self.set.mark_clean(key);
    }
    fn remove(&mut self, key: &K) {
        let block = self.set.block_of_key(key);
        let old_len = self.set.block_len(block);
        if self.set.remove(key).is_some() && old_len > 0 {
            self.rerank(block, old_len, false);
        }
    }
    fn victim(&mut self, allow_dirty: bool) -> Option<K> {
        if !allow_dirty {
            if self.set.all_dirty() {
                return None;
            }
            let blocks: Vec<u64> = self.order.iter().rev().map(|e| e.2).collect();
            let key = self.set.take_clean_from(blocks.iter().copied())?;
            let block = self.set.block_of_key(&key);
            self.rerank(block, self.set.block_len(block) + 1, false);
            return Some(key);
        }
        if !self.set.has_pending() {
            let (len, stamp, block) = self.order.pop_last()?;
            debug_assert_eq!(len, self.set.block_len(block));
            let _ = stamp;
            self.last_access.remove(&block);
            self.set.start_drain(block);
        }
        self.set.pop_pending()
    }
    fn len(&self) -> usize {
        self.set.len()
    }
    fn capacity(&self) -> usize {
        self.capacity_pages
    }
    fn batch_pending(&self) -> bool {
        self.set.has_pending()
    }
    fn writeback_candidates(&mut self, max_keys: usize) -> Vec<K> {
        let blocks: Vec<u64> = self.order.iter().rev().map(|e| e.2).collect();
        let mut keys = Vec::new();
        for block in blocks {
            keys.extend(self.set.dirty_keys_of(block).into_iter().map(|(_, k)| k));
            if keys.len() >= max_keys {
                break;
            }
        }
        keys.truncate(max_keys);
        keys
    }
}
