//! The block cache: one bounded cache for every block the engine touches,
//! with TS-CLOCK replacement (Kang 2017) from `lsfs-policy`.
//!
//! Dirty blocks are never evicted: they reach the device only through the
//! segment constructor, which then marks them clean. Clean blocks are evicted
//! when the cache is over its capacity. The engine keeps dirty blocks under
//! half the capacity by writing a checkpoint when it crosses that line, so the
//! cache holds at most `capacity_blocks` plus the blocks one operation dirties.

use crate::log::record::BlockKind;
use lsfs_policy::cache::{Replacement, TsClock};
// FxHash: the cache is keyed by block numbers, looked up several times per
// block written, and SipHash (the std default, proof against chosen keys)
// cost more than the lookups' memory accesses.
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// A cache key: virtual blocks and physical (or temporary) addresses share one
/// `u64` space, told apart by the low bit.
pub type CacheKey = u64;

pub fn vkey(vblock: u64) -> CacheKey {
    debug_assert!(vblock < crate::layout::VBLOCK_LIMIT);
    vblock << 1
}
pub fn pkey(addr: u64) -> CacheKey {
    (addr << 1) | 1
}
pub fn key_is_virtual(k: CacheKey) -> bool {
    k & 1 == 0
}
pub fn key_addr(k: CacheKey) -> u64 {
    k >> 1
}

/// Who a cached block belongs to: what its summary entry will say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    pub ino: u64,
    pub offset: u64,
    pub kind: BlockKind,
}

struct Entry {
    data: Box<[u8]>,
    dirty: bool,
    owner: Owner,
    /// A B-tree checked these exact bytes in full (CRC, padding, key order)
    /// since they entered the cache: it may skip those checks. Any new
    /// contents clear it.
    verified: bool,
}

/// Blocks grouped per "flash block" by TS-CLOCK for write-back order.
const POLICY_PAGES_PER_BLOCK: u32 = 64;

pub struct BlockCache {
    map: HashMap<CacheKey, Entry>,
    policy: Box<dyn Replacement<CacheKey> + Send>,
    capacity_blocks: usize,
    dirty: HashSet<CacheKey>,
    pub hits: u64,
    pub misses: u64,
    /// Reads leave no trace (see [`BlockCache::set_observing`]).
    observing: bool,
}

fn identity(k: &CacheKey) -> u64 {
    *k
}

impl BlockCache {
    pub fn new(capacity_blocks: usize) -> BlockCache {
        let capacity_blocks = capacity_blocks.max(64);
        // The policy tracks up to twice the capacity: dirty blocks may hold
        // the cache over its capacity until the next checkpoint drains them.
        let policy = TsClock::new(capacity_blocks * 2, POLICY_PAGES_PER_BLOCK, identity);
        BlockCache {
            map: HashMap::default(),
            policy: Box::new(policy),
            capacity_blocks,
            dirty: HashSet::default(),
            hits: 0,
            misses: 0,
            observing: false,
        }
    }

    /// While on, reads leave the cache as they found it: a hit neither
    /// counts nor touches the block's recency, a block read from the device
    /// is not inserted, and no node is marked verified. For checks that
    /// look at the whole state without changing what the engine does next
    /// (fs/invariants.rs); nothing may change the cache meanwhile.
    pub fn set_observing(&mut self, on: bool) {
        self.observing = on;
    }
    pub fn observing(&self) -> bool {
        self.observing
    }

    pub fn capacity_blocks(&self) -> usize {
        self.capacity_blocks
    }
    pub fn len(&self) -> usize {
        self.map.len()
    }
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    pub fn dirty_count(&self) -> usize {
        self.dirty.len()
    }

    pub fn get(&mut self, k: CacheKey) -> Option<&[u8]> {
        if self.observing {
            return self.map.get(&k).map(|e| &e.data[..]);
        }
        match self.map.get(&k) {
            Some(e) => {
                self.hits += 1;
                self.policy.touch(&k, false);
                Some(&e.data)
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }

    /// `k`'s bytes without counting a hit or touching the policy: for a
    /// second look at blocks `get` has just returned, from threads that
    /// share the cache read-only (meta/compress.rs).
    pub fn peek(&self, k: CacheKey) -> Option<&[u8]> {
        self.map.get(&k).map(|e| &e.data[..])
    }

    pub fn contains(&self, k: CacheKey) -> bool {
        self.map.contains_key(&k)
    }
    pub fn is_dirty(&self, k: CacheKey) -> bool {
        self.dirty.contains(&k)
    }
    pub fn owner(&self, k: CacheKey) -> Option<Owner> {
        self.map.get(&k).map(|e| e.owner)
    }

    /// Whether `k`'s current bytes passed a B-tree node's full check.
    pub fn is_verified(&self, k: CacheKey) -> bool {
        self.map.get(&k).is_some_and(|e| e.verified)
    }
    /// Record that `k`'s current bytes passed a B-tree node's full check.
    /// Only the check itself may call this: a node read from the device
    /// that fails stays unverified and fails again on every read.
    pub fn mark_verified(&mut self, k: CacheKey) {
        if self.observing {
            return;
        }
        if let Some(e) = self.map.get_mut(&k) {
            e.verified = true;
        }
    }

    /// Keep a clean copy of a block just read, if there is room for it.
    pub fn insert_clean(&mut self, k: CacheKey, data: &[u8], owner: Owner) {
        if self.observing || self.map.contains_key(&k) {
            return;
        }
        if !self.make_room() {
            return; // full of dirty blocks: serve the read without caching it
        }
        self.policy.insert(k, false);
        self.map.insert(
            k,
            Entry {
                data: data.into(),
                dirty: false,
                owner,
                verified: false,
            },
        );
    }

    /// Store `data` as the new dirty contents of `k`.
    pub fn put_dirty(&mut self, k: CacheKey, data: Vec<u8>, owner: Owner) {
        debug_assert!(!self.observing, "the cache changed while observed");
        if let Some(e) = self.map.get_mut(&k) {
            e.data = data.into_boxed_slice();
            e.dirty = true;
            e.owner = owner;
            e.verified = false;
            self.policy.touch(&k, true);
        } else {
            self.make_room();
            if self.policy.len() >= self.policy.capacity() {
                // Only dirty blocks left and over twice the capacity: one
                // operation dirtied more than the cache holds (deleting a
                // huge file dirties a DAT block per 128 blocks it frees).
                // They must all stay until the next checkpoint writes them,
                // so the policy grows to track them.
                self.grow_policy();
            }
            self.policy.insert(k, true);
            self.map.insert(
                k,
                Entry {
                    data: data.into_boxed_slice(),
                    dirty: true,
                    owner,
                    verified: false,
                },
            );
        }
        self.dirty.insert(k);
    }

    pub fn mark_clean(&mut self, k: CacheKey) {
        debug_assert!(!self.observing, "the cache changed while observed");
        if let Some(e) = self.map.get_mut(&k) {
            e.dirty = false;
            self.policy.mark_clean(&k);
        }
        self.dirty.remove(&k);
    }

    pub fn remove(&mut self, k: CacheKey) {
        debug_assert!(!self.observing, "the cache changed while observed");
        if self.map.remove(&k).is_some() {
            self.policy.remove(&k);
        }
        self.dirty.remove(&k);
    }

    /// Move a block to a new key (a temporary address became a physical one).
    pub fn rekey(&mut self, from: CacheKey, to: CacheKey) {
        debug_assert!(!self.observing, "the cache changed while observed");
        if let Some(e) = self.map.remove(&from) {
            self.policy.remove(&from);
            let was_dirty = self.dirty.remove(&from);
            self.remove(to);
            self.policy.insert(to, was_dirty);
            if was_dirty {
                self.dirty.insert(to);
            }
            self.map.insert(to, e);
        }
    }

    /// Evict every clean block, as pressure may at any time: the next
    /// reads go to the device (tests use it to read what the I/O queue
    /// still holds).
    pub fn drop_clean(&mut self) {
        let clean: Vec<CacheKey> = self
            .map
            .iter()
            .filter(|(_, e)| !e.dirty)
            .map(|(&k, _)| k)
            .collect();
        for k in clean {
            self.remove(k);
        }
    }

    pub fn dirty_keys(&self) -> Vec<CacheKey> {
        self.dirty.iter().copied().collect()
    }

    /// Rebuild the replacement policy with twice its capacity, tracking
    /// every resident block (their recency is lost; this is rare).
    fn grow_policy(&mut self) {
        let capacity = self.policy.capacity() * 2;
        tracing::warn!(
            "block cache: {} dirty blocks exceed its capacity of {}; tracking up to {capacity}",
            self.dirty.len(),
            self.capacity_blocks
        );
        let mut policy = TsClock::new(capacity, POLICY_PAGES_PER_BLOCK, identity);
        for &k in self.map.keys() {
            policy.insert(k, self.dirty.contains(&k));
        }
        self.policy = Box::new(policy);
    }

    /// Evict clean blocks until the cache is under its capacity. Returns
    /// whether there is room for one more block.
    fn make_room(&mut self) -> bool {
        while self.map.len() >= self.capacity_blocks {
            match self.policy.victim(false) {
                Some(k) => {
                    let e = self.map.remove(&k);
                    debug_assert!(
                        e.as_ref().is_some_and(|e| !e.dirty),
                        "policy evicted a dirty block"
                    );
                }
                None => return false,
            }
        }
        true
    }

    /// Check the cache's own invariants (tests and fsck-style self checks).
    pub fn check(&self) {
        assert_eq!(
            self.map.len(),
            self.policy.len(),
            "cache and policy disagree on residency"
        );
        for k in &self.dirty {
            assert!(
                self.map.get(k).is_some_and(|e| e.dirty),
                "dirty set names a clean or absent block"
            );
        }
        assert_eq!(
            self.dirty.len(),
            self.map.values().filter(|e| e.dirty).count()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own() -> Owner {
        Owner {
            ino: 1,
            offset: 0,
            kind: BlockKind::Data,
        }
    }

    /// "Verified" belongs to bytes: new contents clear it, a move keeps it.
    #[test]
    fn new_contents_are_unverified() {
        let mut c = BlockCache::new(64);
        c.insert_clean(vkey(1), &[1; 8], own());
        assert!(!c.is_verified(vkey(1)));
        c.mark_verified(vkey(1));
        assert!(c.is_verified(vkey(1)));
        c.put_dirty(vkey(1), vec![2; 8], own());
        assert!(!c.is_verified(vkey(1)), "rewritten bytes kept the mark");
        c.mark_verified(vkey(1));
        c.rekey(vkey(1), pkey(9));
        assert!(c.is_verified(pkey(9)));
        c.remove(pkey(9));
        c.insert_clean(pkey(9), &[3; 8], own());
        assert!(!c.is_verified(pkey(9)), "a re-read block kept the mark");
        c.mark_verified(vkey(5)); // not cached: nothing to mark
        assert!(!c.is_verified(vkey(5)));
    }

    /// Observed reads leave no trace: a miss is not cached, a hit neither
    /// counts nor changes which blocks are evicted later, nothing is marked
    /// verified. Plain reads of the same blocks do change the evictions.
    #[test]
    fn observed_reads_leave_no_trace() {
        let run = |read: Option<bool>| {
            let mut c = BlockCache::new(64);
            for i in 0..64 {
                c.insert_clean(vkey(i), &[i as u8; 8], own());
            }
            c.insert_clean(vkey(64), &[0; 8], own());
            if let Some(observed) = read {
                c.set_observing(observed);
                for i in (0..64).step_by(2) {
                    c.get(vkey(i));
                }
                c.get(vkey(1000));
                c.insert_clean(vkey(1000), &[1; 8], own());
                c.mark_verified(vkey(2));
                c.set_observing(false);
            }
            for i in 100..132 {
                c.insert_clean(vkey(i), &[0; 8], own());
            }
            c.check();
            let mut resident: Vec<_> = (0..2000).filter(|&i| c.contains(vkey(i))).collect();
            resident.sort();
            (resident, c.hits, c.misses, c.is_verified(vkey(2)))
        };
        assert_eq!(run(Some(true)), run(None));
        assert_ne!(run(Some(false)).0, run(None).0, "reads changed nothing");
    }

    #[test]
    fn clean_blocks_are_evicted_and_dirty_blocks_stay() {
        let mut c = BlockCache::new(64);
        for i in 0..32 {
            c.put_dirty(vkey(i), vec![i as u8; 8], own());
        }
        for i in 100..1000 {
            c.insert_clean(vkey(i), &[0; 8], own());
            c.check();
            assert!(c.len() <= 64, "cache grew to {}", c.len());
        }
        for i in 0..32 {
            assert_eq!(
                c.get(vkey(i)).unwrap()[0],
                i as u8,
                "dirty block {i} was evicted"
            );
        }
    }

    #[test]
    fn rekey_keeps_contents_and_state() {
        let mut c = BlockCache::new(64);
        c.put_dirty(pkey(1 << 40), vec![7; 8], own());
        c.rekey(pkey(1 << 40), pkey(5));
        c.mark_clean(pkey(5));
        c.check();
        assert_eq!(c.get(pkey(5)).unwrap()[0], 7);
        assert!(!c.contains(pkey(1 << 40)));
        assert_eq!(c.dirty_count(), 0);
    }
}
