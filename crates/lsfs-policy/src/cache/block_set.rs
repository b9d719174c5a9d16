//! Resident pages grouped by flash block, with a queue of pages being drained block-wise.
//! Shared by the block-granular baselines FAB and LB-CLOCK.

use std::collections::{HashMap, VecDeque};

use super::AddressOf;

pub(crate) struct BlockSet<K> {
    pages_per_block: u64,
    address_of: AddressOf<K>,
    /// address → (key, dirty)
    pages: HashMap<u64, (K, bool)>,
    /// block → resident addresses not yet queued for draining
    members: HashMap<u64, Vec<u64>>,
    /// addresses of the block being evicted, in ascending order
    pending: VecDeque<u64>,
    dirty_pages: usize,
}

impl<K: Clone> BlockSet<K> {
    pub(crate) fn new(pages_per_block: u32, address_of: AddressOf<K>) -> Self {
        assert!(pages_per_block > 0);
        Self {
            pages_per_block: pages_per_block as u64,
            address_of,
            pages: HashMap::new(),
            members: HashMap::new(),
            pending: VecDeque::new(),
            dirty_pages: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.pages.len()
    }

    pub(crate) fn all_dirty(&self) -> bool {
        self.dirty_pages == self.pages.len()
    }

    pub(crate) fn block_of_key(&self, key: &K) -> u64 {
        (self.address_of)(key) / self.pages_per_block
    }

    pub(crate) fn block_len(&self, block: u64) -> usize {
        self.members.get(&block).map_or(0, Vec::len)
    }

    /// Returns the page's block.
    pub(crate) fn insert(&mut self, key: K, dirty: bool) -> u64 {
        let address = (self.address_of)(&key);
        let block = address / self.pages_per_block;
        assert!(
            self.pages.insert(address, (key, dirty)).is_none(),
            "insert of a resident key"
        );
        self.members.entry(block).or_default().push(address);
        self.dirty_pages += dirty as usize;
        block
    }

    /// Returns the page's block if resident.
    pub(crate) fn touch(&mut self, key: &K, write: bool) -> Option<u64> {
        let address = (self.address_of)(key);
        let (_, dirty) = self.pages.get_mut(&address)?;
        if write && !*dirty {
            *dirty = true;
            self.dirty_pages += 1;
        }
        Some(address / self.pages_per_block)
    }

    pub(crate) fn mark_clean(&mut self, key: &K) {
        if let Some((_, dirty)) = self.pages.get_mut(&(self.address_of)(key)) {
            if *dirty {
                *dirty = false;
                self.dirty_pages -= 1;
            }
        }
    }

    /// Drops a page; returns its block if it was resident.
    pub(crate) fn remove(&mut self, key: &K) -> Option<u64> {
        let address = (self.address_of)(key);
        let (_, dirty) = self.pages.remove(&address)?;
        self.dirty_pages -= dirty as usize;
        let block = address / self.pages_per_block;
        if let Some(m) = self.members.get_mut(&block) {
            m.retain(|a| *a != address);
            if m.is_empty() {
                self.members.remove(&block);
            }
        }
        self.pending.retain(|a| *a != address);
        Some(block)
    }

    /// Queue every page of `block` for eviction in ascending address order.
    pub(crate) fn start_drain(&mut self, block: u64) {
        let mut addresses = self.members.remove(&block).unwrap_or_default();
        addresses.sort_unstable();
        self.pending.extend(addresses);
    }

    pub(crate) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    pub(crate) fn pop_pending(&mut self) -> Option<K> {
        let address = self.pending.pop_front()?;
        let (key, dirty) = self
            .pages
            .remove(&address)
            .expect("pending page is resident");
        self.dirty_pages -= dirty as usize;
        Some(key)
    }

    /// A clean page of the first block (in `blocks` order) that has one, removed; for the
    /// clean-only eviction mode.
    pub(crate) fn take_clean_from(&mut self, blocks: impl Iterator<Item = u64>) -> Option<K> {
        for block in blocks {
            let Some(m) = self.members.get(&block) else {
                continue;
            };
            if let Some(&a) = m.iter().find(|a| !self.pages[*a].1) {
                let key = self.pages[&a].0.clone();
                self.remove(&key);
                return Some(key);
            }
        }
        None
    }

    pub(crate) fn dirty_keys_of(&self, block: u64) -> Vec<(u64, K)> {
        let mut keys: Vec<(u64, K)> = self
            .members
            .get(&block)
            .into_iter()
            .flatten()
            .filter(|a| self.pages[*a].1)
            .map(|a| (*a, self.pages[a].0.clone()))
            .collect();
        keys.sort_unstable_by_key(|(a, _)| *a);
        keys
    }
}
