//! CFLRU (Park et al. 2006): LRU, but within the *clean-first window* (the least recently used
//! `window_fraction` of the cache) a clean page is evicted before any dirty page; only if the
//! window holds no clean page does the LRU (dirty) page go. Kang uses a 25 % window.
//!
//! Plain LRU is the same policy with an empty window ([`Cflru::lru`]): the least recently used
//! page goes whether clean or dirty, and only a caller that refuses dirty victims skips to the
//! least recently used clean page.

use std::collections::HashSet;
use std::hash::Hash;

use super::recency_list::RecencyList;
use super::Replacement;

pub struct Cflru<K> {
    name: &'static str,
    capacity_pages: usize,
    window_pages: usize,
    order: RecencyList<K>,
    dirty: HashSet<K>,
}

impl<K: Hash + Eq + Clone> Cflru<K> {
    pub fn new(capacity_pages: usize, window_fraction: f64) -> Self {
        assert!(capacity_pages > 0 && (0.0..=1.0).contains(&window_fraction));
        let window_pages = ((capacity_pages as f64 * window_fraction).ceil() as usize).max(1);
        Self::with_window("cflru", capacity_pages, window_pages)
    }

    /// LRU: evict the least recently used page.
    pub fn lru(capacity_pages: usize) -> Self {
        Self::with_window("lru", capacity_pages, 0)
    }

    fn with_window(name: &'static str, capacity_pages: usize, window_pages: usize) -> Self {
        assert!(capacity_pages > 0 && window_pages <= capacity_pages);
        Self {
            name,
            capacity_pages,
            window_pages,
            order: RecencyList::new(),
            dirty: HashSet::new(),
        }
    }
}

impl<K: Hash + Eq + Clone> Replacement<K> for Cflru<K> {
    fn name(&self) -> &'static str {
        self.name
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
        let all_dirty = self.dirty.len() == self.order.len();
        let dirty = &self.dirty;
        let key = if all_dirty {
            if allow_dirty {
                self.order.least_recent().cloned()
            } else {
                None
            }
        } else {
            let window = if allow_dirty {
                self.window_pages
            } else {
                usize::MAX
            };
            let clean = self
                .order
                .iter_oldest_first()
                .take(window)
                .find(|k| !dirty.contains(*k));
            clean.or_else(|| self.order.least_recent()).cloned()
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
