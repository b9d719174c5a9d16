//! Sp.Clock (spatial CLOCK, Kim et al. 2012): CLOCK whose ring is ordered by page address
//! instead of arrival, so the pages it evicts, and so the writes it issues, come out in
//! ascending sector order.

use std::collections::BTreeMap;

use super::{AddressOf, Replacement};

struct Entry<K> {
    key: K,
    referenced: bool,
    dirty: bool,
}

pub struct SpClock<K> {
    capacity_pages: usize,
    address_of: AddressOf<K>,
    ring: BTreeMap<u64, Entry<K>>,
    /// The hand looks next at the first address ≥ this.
    hand_address: u64,
    dirty_pages: usize,
}

impl<K: Clone> SpClock<K> {
    pub fn new(capacity_pages: usize, address_of: AddressOf<K>) -> Self {
        assert!(capacity_pages > 0);
        Self {
            capacity_pages,
            address_of,
            ring: BTreeMap::new(),
            hand_address: 0,
            dirty_pages: 0,
        }
    }

    fn next_address(&self) -> u64 {
        match self.ring.range(self.hand_address..).next() {
            Some((a, _)) => *a,
            None => *self.ring.keys().next().expect("non-empty ring"),
        }
    }
}

impl<K: Clone> Replacement<K> for SpClock<K> {
    fn name(&self) -> &'static str {
        "sp-clock"
    }
    fn insert(&mut self, key: K, dirty: bool) {
        assert!(self.ring.len() < self.capacity_pages);
        let address = (self.address_of)(&key);
        let old = self.ring.insert(
            address,
            Entry {
                key,
                referenced: true,
                dirty,
            },
        );
        assert!(old.is_none(), "insert of a resident key");
        self.dirty_pages += dirty as usize;
    }
    fn touch(&mut self, key: &K, write: bool) {
        if let Some(e) = self.ring.get_mut(&(self.address_of)(key)) {
            e.referenced = true;
            if write && !e.dirty {
                e.dirty = true;
                self.dirty_pages += 1;
            }
        }
    }
    fn mark_clean(&mut self, key: &K) {
        if let Some(e) = self.ring.get_mut(&(self.address_of)(key)) {
            if e.dirty {
                e.dirty = false;
                self.dirty_pages -= 1;
            }
        }
    }
    fn remove(&mut self, key: &K) {
        if let Some(e) = self.ring.remove(&(self.address_of)(key)) {
            self.dirty_pages -= e.dirty as usize;
        }
    }
    fn victim(&mut self, allow_dirty: bool) -> Option<K> {
        if self.ring.is_empty() || (!allow_dirty && self.dirty_pages == self.ring.len()) {
            return None;
        }
        for _ in 0..3 * self.ring.len() {
            let address = self.next_address();
            self.hand_address = address.wrapping_add(1);
            let e = self.ring.get_mut(&address).expect("address from the ring");
            if e.referenced {
                e.referenced = false;
            } else if allow_dirty || !e.dirty {
                let e = self.ring.remove(&address).expect("present");
                self.dirty_pages -= e.dirty as usize;
                return Some(e.key);
            }
        }
        unreachable!("sp-clock hand exceeded three rotations");
    }
    fn len(&self) -> usize {
        self.ring.len()
    }
    fn capacity(&self) -> usize {
        self.capacity_pages
    }
    fn writeback_candidates(&mut self, max_keys: usize) -> Vec<K> {
        let after = self.ring.range(self.hand_address..);
        let before = self.ring.range(..self.hand_address);
        after
            .chain(before)
            .filter(|(_, e)| e.dirty)
            .take(max_keys)
            .map(|(_, e)| e.key.clone())
            .collect()
    }
}
