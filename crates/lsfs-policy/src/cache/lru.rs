//! LRU: evict the least recently used page.

use std::collections::HashSet;
use std::hash::Hash;

use super::recency_list::RecencyList;
use super::Replacement;

pub struct Lru<K> {
    capacity_pages: usize,
    order: RecencyList<K>,
    dirty: HashSet<K>,
}

impl<K: Hash + Eq + Clone> Lru<K> {
    pub fn new(capacity_pages: usize) -> Self {
        assert!(capacity_pages > 0);
        Self {
            capacity_pages,
            order: RecencyList::new(),
            dirty: HashSet::new(),
        }
    }
}

impl<K: Hash + Eq + Clone> Replacement<K> for Lru<K> {
    fn name(&self) -> &'static str {
        "lru"
    }
    fn insert(&mut self, key: K, dirty: bool) {
        assert!(self.order.len() < self.capacity_pages && !self.order.contains(&key));
        if dirty {
            self.dirty.insert(key.clone());
        }
        self.order.push_most_recent(key);
    }
    fn touch(&mut self, key: &K, write: bool) {
        if self.order.contains(key) {
            if write {
                self.dirty.insert(key.clone());
            }
            self.order.push_most_recent(key.clone());
        }
    }
    fn mark_clean(&mut self, key: &K) {
        self.dirty.remove(key);
    }
    fn remove(&mut self, key: &K) {
        self.order.remove(key);
        self.dirty.remove(key);
    }
    fn victim(&mut self, allow_dirty: bool) -> Option<K> {
        let key = if allow_dirty {
            self.order.least_recent().cloned()
        } else if self.dirty.len() == self.order.len() {
            None
        } else {
            self.order
                .iter_oldest_first()
                .find(|k| !self.dirty.contains(*k))
                .cloned()
        }?;
        self.remove(&key);
        Some(key)
    }
    fn len(&self) -> usize {
        self.order.len()
    }
    fn capacity(&self) -> usize {
        self.capacity_pages
    }
    fn writeback_candidates(&mut self, max_keys: usize) -> Vec<K> {
        let dirty = &self.dirty;
        self.order
            .iter_oldest_first()
            .filter(|k| dirty.contains(*k))
            .take(max_keys)
            .cloned()
            .collect()
    }
}
