//! LB-CLOCK (Debnath et al. 2009), as we model it: a CLOCK over *flash blocks*. Any access to
//! a page sets its block's reference bit. The hand clears set bits; among the first few
//! unreferenced blocks it meets (up to [`LB_CLOCK_CANDIDATES`], within two rotations) it
//! picks the one with the most resident pages (highest block utilization) and evicts all of
//! that block's pages together.

use std::collections::{HashMap, VecDeque};

use super::block_set::BlockSet;
use super::{AddressOf, Replacement};

/// How many unreferenced blocks the hand collects before choosing the fullest.
pub const LB_CLOCK_CANDIDATES: usize = 4;

pub struct LbClock<K> {
    capacity_pages: usize,
    set: BlockSet<K>,
    /// The hand is the front; new blocks join at the back (just behind the hand).
    ring: VecDeque<u64>,
    referenced: HashMap<u64, bool>,
}

impl<K: Clone> LbClock<K> {
    pub fn new(capacity_pages: usize, pages_per_block: u32, address_of: AddressOf<K>) -> Self {
        assert!(capacity_pages > 0);
        Self {
            capacity_pages,
            set: BlockSet::new(pages_per_block, address_of),
            ring: VecDeque::new(),
            referenced: HashMap::new(),
        }
    }

    fn choose_block(&mut self) -> Option<u64> {
        let mut candidates: Vec<u64> = Vec::new();
        let mut steps = 2 * self.ring.len() + 1;
        while candidates.len() < LB_CLOCK_CANDIDATES && steps > 0 {
            steps -= 1;
            let Some(block) = self.ring.pop_front() else {
                break;
            };
            // Blocks emptied by `remove` linger in the ring until the hand reaches them.
            let Some(referenced) = self.referenced.get_mut(&block) else {
                continue;
            };
            if candidates.contains(&block) {
                self.ring.push_back(block);
                break;
            }
            if *referenced {
                *referenced = false;
            } else {
                candidates.push(block);
            }
            self.ring.push_back(block);
        }
        let best = candidates
            .into_iter()
            .max_by_key(|b| self.set.block_len(*b))?;
        self.referenced.remove(&best);
        self.ring.retain(|b| *b != best);
        Some(best)
    }
}

impl<K: Clone> Replacement<K> for LbClock<K> {
    fn name(&self) -> &'static str {
        "lb-clock"
    }
    fn insert(&mut self, key: K, dirty: bool) {
        assert!(
            self.set.len() < self.capacity_pages,
            "insert into a full cache"
        );
        let block = self.set.insert(key, dirty);
        if self.referenced.insert(block, true).is_none() {
            self.ring.push_back(block);
        }
    }
    fn touch(&mut self, key: &K, write: bool) {
        if let Some(block) = self.set.touch(key, write) {
            if let Some(r) = self.referenced.get_mut(&block) {
                *r = true;
            }
        }
    }
    fn mark_clean(&mut self, key: &K) {
        self.set.mark_clean(key);
    }
    fn remove(&mut self, key: &K) {
        if let Some(block) = self.set.remove(key) {
            if self.set.block_len(block) == 0 {
                self.referenced.remove(&block);
            }
        }
    }
    fn victim(&mut self, allow_dirty: bool) -> Option<K> {
        if !allow_dirty {
            if self.set.all_dirty() {
                return None;
            }
            let blocks: Vec<u64> = self.ring.iter().copied().collect();
            let key = self.set.take_clean_from(blocks.into_iter())?;
            let block = self.set.block_of_key(&key);
            if self.set.block_len(block) == 0 {
                self.referenced.remove(&block);
            }
            return Some(key);
        }
        if !self.set.has_pending() {
            let block = self.choose_block()?;
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
        let mut keys = Vec::new();
        for &block in &self.ring {
            keys.extend(self.set.dirty_keys_of(block).into_iter().map(|(_, k)| k));
            if keys.len() >= max_keys {
                break;
            }
        }
        keys.truncate(max_keys);
        keys
    }
}
