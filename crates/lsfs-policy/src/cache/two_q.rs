//! Linux 2Q (the kernel's active/inactive lists): a new page enters the inactive list; a hit
//! promotes it to the active list; eviction takes the inactive list's LRU end; the active list
//! is kept no larger than the inactive one by demoting its LRU end. (The kernel also gives
//! inactive pages a referenced-bit second chance; a promotion on the first hit is the usual
//! simulator simplification.)

use std::collections::HashSet;
use std::hash::Hash;

use super::recency_list::RecencyList;
use super::Replacement;

pub struct TwoQ<K> {
    capacity_pages: usize,
    active: RecencyList<K>,
    inactive: RecencyList<K>,
    dirty: HashSet<K>,
}

impl<K: Hash + Eq + Clone> TwoQ<K> {
    pub fn new(capacity_pages: usize) -> Self {
        assert!(capacity_pages > 0);
        Self {
            capacity_pages,
            active: RecencyList::new(),
            inactive: RecencyList::new(),
            dirty: HashSet::new(),
        }
    }

    fn balance(&mut self) {
        while self.active.len() > self.inactive.len() {
            let key = self
                .active
                .least_recent()
                .cloned()
                .expect("active is non-empty");
            self.active.remove(&key);
            self.inactive.push_most_recent(key);
        }
    }
}

impl<K: Hash + Eq + Clone> Replacement<K> for TwoQ<K> {
    fn name(&self) -> &'static str {
        "2q"
    }
    fn insert(&mut self, key: K, dirty: bool) {
        assert!(self.len() < self.capacity_pages);
        assert!(!self.active.contains(&key) && !self.inactive.contains(&key));
        if dirty {
            self.dirty.insert(key.clone());
        }
        self.inactive.push_most_recent(key);
    }
    fn touch(&mut self, key: &K, write: bool) {
        if self.inactive.remove(key) || self.active.contains(key) {
            self.active.push_most_recent(key.clone());
            if write {
                self.dirty.insert(key.clone());
            }
            self.balance();
        }
    }
    fn mark_clean(&mut self, key: &K) {
        self.dirty.remove(key);
    }
    fn remove(&mut self, key: &K) {
        self.active.remove(key);
        self.inactive.remove(key);
        self.dirty.remove(key);
        self.balance();
    }
    fn victim(&mut self, allow_dirty: bool) -> Option<K> {
        let dirty = &self.dirty;
        let ok = |k: &&K| allow_dirty || !dirty.contains(*k);
        let key = if !allow_dirty && dirty.len() == self.len() {
            None
        } else {
            let from_inactive = self.inactive.iter_oldest_first().find(ok);
            from_inactive
                .or_else(|| self.active.iter_oldest_first().find(ok))
                .cloned()
        }?;
        self.remove(&key);
        Some(key)
    }
    fn len(&self) -> usize {
        self.active.len() + self.inactive.len()
    }
    fn capacity(&self) -> usize {
        self.capacity_pages
    }
    fn writeback_candidates(&mut self, max_keys: usize) -> Vec<K> {
        let dirty = &self.dirty;
        self.inactive
            .iter_oldest_first()
            .chain(self.active.iter_oldest_first())
            .filter(|k| dirty.contains(*k))
            .take(max_keys)
            .cloned()
            .collect()
    }
}
