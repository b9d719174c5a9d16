//! An LRU-ordered set of keys (oldest first), the building block of LRU, 2Q and CFLRU.
//! O(log n) per operation via a stamp-ordered B-tree; these baselines run only in the simulator.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

pub(crate) struct RecencyList<K> {
    stamp_of: HashMap<K, u64>,
    by_stamp: BTreeMap<u64, K>,
    next_stamp: u64,
}

impl<K: Hash + Eq + Clone> RecencyList<K> {
    pub(crate) fn new() -> Self {
        Self {
            stamp_of: HashMap::new(),
            by_stamp: BTreeMap::new(),
            next_stamp: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.stamp_of.len()
    }

    pub(crate) fn contains(&self, key: &K) -> bool {
        self.stamp_of.contains_key(key)
    }

    /// Insert as most recently used, or move there if present.
    pub(crate) fn push_most_recent(&mut self, key: K) {
        if let Some(old) = self.stamp_of.get(&key) {
            self.by_stamp.remove(old);
        }
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        self.by_stamp.insert(stamp, key.clone());
        self.stamp_of.insert(key, stamp);
    }

    pub(crate) fn remove(&mut self, key: &K) -> bool {
        match self.stamp_of.remove(key) {
            Some(stamp) => {
                self.by_stamp.remove(&stamp);
                true
            }
            None => false,
        }
    }

    pub(crate) fn least_recent(&self) -> Option<&K> {
        self.by_stamp.values().next()
    }

    /// Oldest first.
    pub(crate) fn iter_oldest_first(&self) -> impl Iterator<Item = &K> {
        self.by_stamp.values()
    }
}
