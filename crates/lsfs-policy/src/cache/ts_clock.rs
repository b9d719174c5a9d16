//! TS-CLOCK (Kang 2017, Fig. 2-2; docs/DESIGN.md §4.7): a CLOCK that evicts clean pages first
//! and drains dirty pages one flash block at a time, in sector order.
//!
//! Algorithm. An access sets a clean page's R to 1 and a dirty page's R to ceil(4 · non_zero /
//! pages_per_block), `non_zero` being the dirty pages of its block with R > 0, so dirty pages
//! of heavily written blocks live longer. A new page goes just behind
//! the t-hand (a full sweep before it can go). To pick a victim the t-hand sweeps the ring,
//! decrementing R, until it meets a page with R = 0: a clean one is the victim; for a dirty
//! one the s-hand takes over. It stays in the block it last drained, walks that block's dirty
//! pages in sector order (starting, and wrapping when the block is done, at the t-hand's
//! block), changes no R, and returns the first with R = 0. One page goes per call, yet a
//! block's dirty pages leave together, without FAB's early eviction of whole blocks.
//!
//! Three fixes to the printed pseudo-code:
//!
//! * the t-hand's decrement updates `t_hand.block.non_zero` (the printed code says `p.block`);
//! * a clean page that turns dirty on a write hit joins its block's sorted dirty list and counts
//!   in `non_zero`;
//! * a page that leaves the dirty list (evicted, removed, written back) cannot strand the
//!   s-hand: the s-hand is a *cursor* (block, next offset) rather than a page pointer, so it
//!   simply moves on to the next dirty page at or after its offset.
//!
//! Structures. Every resident page sits in one circular doubly linked ring (indices into a
//! slab), swept by the t-hand. A page carries a reference count R in 0..=4 (clean pages: ≤ 1).
//! For each logical flash block that has dirty pages, a bitmap over page offsets is the
//! block's "sorted dirty list" (scanning the bitmap visits dirty pages in sector order), and
//! `non_zero` counts its dirty pages with R > 0. Blocks without dirty pages are not stored,
//! so memory is bounded by the capacity.
//!
//! Cost. `insert`, `touch`, `mark_clean` and `remove` are O(1) expected (hash lookups plus
//! bit operations). `victim` is O(1) amortised: every t-hand step but the last decrements some
//! R, and R only grows by at most 4 per access; the s-hand scan is bounded by
//! 2 · pages_per_block bitmap positions, which is a constant of the configuration.
//! Clean-only eviction (`victim(false)`) skips dirty pages with R = 0 without changing them,
//! so its cost grows with the share of such pages (one sweep per clean victim in the worst
//! case); callers keep dirty pages bounded and use `writeback_candidates` to drain them.

// FxHash: looked up at every cache access; SipHash cost more than the lookup.
use rustc_hash::FxHashMap as HashMap;

use super::{AddressOf, Replacement};

/// The largest reference count: a dirty page in a fully dirty block survives four sweeps.
pub const REFERENCE_COUNT_MAX: u8 = 4;
const NIL: u32 = u32::MAX;

#[derive(Debug)]
struct Page<K> {
    key: K,
    address: u64,
    dirty: bool,
    reference_count: u8,
    prev: u32,
    next: u32,
}

#[derive(Debug)]
struct DirtyBlock {
    /// Bit `o` set ⇔ the page at offset `o` of this block is resident and dirty.
    dirty_bitmap: Vec<u64>,
    dirty_pages: u32,
    /// Dirty pages of this block whose reference count is not zero.
    non_zero: u32,
}

/// The s-hand: the next page it looks at is the first dirty page of `block` at an offset
/// ≥ `next_offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SHand {
    block: u64,
    next_offset: u32,
}

/// Temporal and spatial locality aware CLOCK. See the module documentation.
pub struct TsClock<K> {
    capacity_pages: usize,
    pages_per_block: u32,
    address_of: AddressOf<K>,
    slots: Vec<Option<Page<K>>>,
    free_slots: Vec<u32>,
    slot_by_address: HashMap<u64, u32>,
    dirty_blocks: HashMap<u64, DirtyBlock>,
    t_hand: u32,
    s_hand: Option<SHand>,
    clean_pages: usize,
    resident_pages: usize,
}

impl<K: Clone + Eq + std::fmt::Debug> TsClock<K> {
    /// A cache of at most `capacity_pages` pages; a logical flash block is
    /// `address_of(key) / pages_per_block` (Kang uses the device's erase-block size, e.g. 4 MiB
    /// of 4 KiB pages = 1024). `address_of` must be injective over resident keys.
    pub fn new(capacity_pages: usize, pages_per_block: u32, address_of: AddressOf<K>) -> Self {
        assert!(
            capacity_pages > 0,
            "TS-CLOCK needs room for at least one page"
        );
        assert!(
            capacity_pages < NIL as usize,
            "capacity must fit slab indices"
        );
        assert!(pages_per_block > 0, "a flash block has at least one page");
        Self {
            capacity_pages,
            pages_per_block,
            address_of,
            slots: Vec::new(),
            free_slots: Vec::new(),
            slot_by_address: HashMap::with_capacity_and_hasher(capacity_pages, Default::default()),
            dirty_blocks: HashMap::default(),
            t_hand: NIL,
            s_hand: None,
            clean_pages: 0,
            resident_pages: 0,
        }
    }

    /// The page's reference count R, if resident (for tests and `lsfs inspect`).
    pub fn reference_count(&self, key: &K) -> Option<u8> {
        self.slot_of(key).map(|s| self.page(s).reference_count)
    }

    pub fn is_dirty(&self, key: &K) -> Option<bool> {
        self.slot_of(key).map(|s| self.page(s).dirty)
    }

    pub fn dirty_pages(&self) -> usize {
        self.resident_pages - self.clean_pages
    }

    /// `non_zero` of the block holding `address`, 0 if that block has no dirty page.
    pub fn block_non_zero(&self, address: u64) -> u32 {
        let block = address / self.pages_per_block as u64;
        self.dirty_blocks.get(&block).map_or(0, |b| b.non_zero)
    }

    fn slot_of(&self, key: &K) -> Option<u32> {
        let slot = *self.slot_by_address.get(&(self.address_of)(key))?;
        debug_assert!(self.page(slot).key == *key, "address_of is not injective");
        Some(slot)
    }

    fn page(&self, slot: u32) -> &Page<K> {
        self.slots[slot as usize].as_ref().expect("slot in use")
    }

    fn page_mut(&mut self, slot: u32) -> &mut Page<K> {
        self.slots[slot as usize].as_mut().expect("slot in use")
    }

    fn block_of(&self, address: u64) -> (u64, u32) {
        let ppb = self.pages_per_block as u64;
        (address / ppb, (address % ppb) as u32)
    }

    fn bitmap_words(&self) -> usize {
        (self.pages_per_block as usize).div_ceil(64)
    }

    /// R for a dirty page of a block with `non_zero` such pages: ceil(4 · non_zero / ppb).
    fn dirty_reference_count(&self, non_zero: u32) -> u8 {
        let ppb = self.pages_per_block as u64;
        let r = (REFERENCE_COUNT_MAX as u64 * non_zero as u64).div_ceil(ppb);
        debug_assert!((1..=REFERENCE_COUNT_MAX as u64).contains(&r));
        r as u8
    }

    /// Link `slot` just behind the t-hand, so the t-hand reaches it last: a new page gets a
    /// full sweep before it can be evicted.
    fn link_behind_t_hand(&mut self, slot: u32) {
        if self.t_hand == NIL {
            let page = self.page_mut(slot);
            page.prev = slot;
            page.next = slot;
            self.t_hand = slot;
            return;
        }
        let next = self.t_hand;
        let prev = self.page(next).prev;
        {
            let page = self.page_mut(slot);
            page.prev = prev;
            page.next = next;
        }
        self.page_mut(prev).next = slot;
        self.page_mut(next).prev = slot;
    }

    fn unlink(&mut self, slot: u32) {
        let (prev, next) = {
            let page = self.page(slot);
            (page.prev, page.next)
        };
        if next == slot {
            self.t_hand = NIL;
            return;
        }
        self.page_mut(prev).next = next;
        self.page_mut(next).prev = prev;
        if self.t_hand == slot {
            self.t_hand = next;
        }
    }

    /// The access rule of Fig. 2-2 (lines 16–21), for a resident page.
    fn access(&mut self, slot: u32, write: bool) {
        let (address, dirty, reference_count) = {
            let p = self.page(slot);
            (p.address, p.dirty, p.reference_count)
        };
        if write && !dirty {
            self.add_to_dirty_list(slot, address);
            // Fix: the page was not counted in non_zero while clean, whatever its R.
            let r = self.bump_non_zero(address);
            self.page_mut(slot).reference_count = r;
        } else if dirty {
            let r = if reference_count == 0 {
                self.bump_non_zero(address)
            } else {
                let (block, _) = self.block_of(address);
                self.dirty_reference_count(self.dirty_blocks[&block].non_zero)
            };
            self.page_mut(slot).reference_count = r;
        } else {
            self.page_mut(slot).reference_count = 1;
        }
    }

    fn bump_non_zero(&mut self, address: u64) -> u8 {
        let (block, _) = self.block_of(address);
        let b = self
            .dirty_blocks
            .get_mut(&block)
            .expect("dirty page has a block");
        b.non_zero += 1;
        debug_assert!(b.non_zero <= b.dirty_pages);
        let non_zero = b.non_zero;
        self.dirty_reference_count(non_zero)
    }

    fn add_to_dirty_list(&mut self, slot: u32, address: u64) {
        let (block, offset) = self.block_of(address);
        let words = self.bitmap_words();
        let b = self
            .dirty_blocks
            .entry(block)
            .or_insert_with(|| DirtyBlock {
                dirty_bitmap: vec![0; words],
                dirty_pages: 0,
                non_zero: 0,
            });
        let (word, bit) = (offset as usize / 64, offset % 64);
        debug_assert!(b.dirty_bitmap[word] & (1 << bit) == 0);
        b.dirty_bitmap[word] |= 1 << bit;
        b.dirty_pages += 1;
        self.page_mut(slot).dirty = true;
        self.clean_pages -= 1;
    }

    /// Take a dirty page off its block's list (eviction, removal or write-back).
    fn remove_from_dirty_list(&mut self, slot: u32) {
        let (address, reference_count) = {
            let p = self.page(slot);
            debug_assert!(p.dirty);
            (p.address, p.reference_count)
        };
        let (block, offset) = self.block_of(address);
        let b = self
            .dirty_blocks
            .get_mut(&block)
            .expect("dirty page has a block");
        b.dirty_bitmap[offset as usize / 64] &= !(1u64 << (offset % 64));
        b.dirty_pages -= 1;
        if reference_count > 0 {
            b.non_zero -= 1;
        }
        if b.dirty_pages == 0 {
            self.dirty_blocks.remove(&block);
            // Fix: the s-hand must not point into a block that no longer has a list.
            if self.s_hand.is_some_and(|s| s.block == block) {
                self.s_hand = None;
            }
        }
        self.page_mut(slot).dirty = false;
        self.clean_pages += 1;
    }

    fn evict_slot(&mut self, slot: u32) -> K {
        if self.page(slot).dirty {
            self.remove_from_dirty_list(slot);
        }
        self.unlink(slot);
        let page = self.slots[slot as usize].take().expect("slot in use");
        self.slot_by_address.remove(&page.address);
        self.free_slots.push(slot);
        self.clean_pages -= 1;
        self.resident_pages -= 1;
        page.key
    }

    /// First dirty offset ≥ `from` in `block`, scanning the bitmap.
    fn next_dirty_offset(&self, block: u64, from: u32) -> Option<u32> {
        let b = self.dirty_blocks.get(&block)?;
        let mut word = from as usize / 64;
        if word >= b.dirty_bitmap.len() {
            return None;
        }
        let mut bits = b.dirty_bitmap[word] & (!0u64 << (from % 64));
        loop {
            if bits != 0 {
                return Some(word as u32 * 64 + bits.trailing_zeros());
            }
            word += 1;
            if word == b.dirty_bitmap.len() {
                return None;
            }
            bits = b.dirty_bitmap[word];
        }
    }

    fn slot_at(&self, block: u64, offset: u32) -> u32 {
        let address = block * self.pages_per_block as u64 + offset as u64;
        self.slot_by_address[&address]
    }

    /// Fig. 2-2 lines 30–41: the s-hand walks the sorted dirty list of its block without
    /// touching any R, wrapping to the first dirty page of the t-hand's block, until it finds a
    /// dirty page with R = 0. The t-hand's own page qualifies, so this terminates.
    fn s_hand_victim(&mut self, t_block: u64) -> u32 {
        let mut hand = match self.s_hand {
            Some(s) if self.dirty_blocks.contains_key(&s.block) => s,
            _ => SHand {
                block: t_block,
                next_offset: 0,
            },
        };
        // At most the rest of one block plus one full pass over the t-hand's block.
        let step_limit = 2 * self.pages_per_block as usize + 2;
        for _ in 0..step_limit {
            match self.next_dirty_offset(hand.block, hand.next_offset) {
                None => {
                    hand = SHand {
                        block: t_block,
                        next_offset: 0,
                    }
                }
                Some(offset) => {
                    hand.next_offset = offset + 1;
                    let slot = self.slot_at(hand.block, offset);
                    if self.page(slot).reference_count == 0 {
                        self.s_hand = Some(hand);
                        return slot;
                    }
                }
            }
        }
        unreachable!("s-hand found no R=0 page although the t-hand's page has R=0");
    }

    /// Advance the t-hand as in Fig. 2-2 lines 44–47 (decrement R; a dirty page reaching 0
    /// leaves its block's non_zero).
    fn age_t_hand_page(&mut self) {
        let t = self.t_hand;
        let (address, dirty, next) = {
            let p = self.page_mut(t);
            debug_assert!(p.reference_count > 0);
            p.reference_count -= 1;
            (p.address, p.dirty, p.next)
        };
        if dirty && self.page(t).reference_count == 0 {
            let (block, _) = self.block_of(address);
            self.dirty_blocks
                .get_mut(&block)
                .expect("dirty block")
                .non_zero -= 1;
        }
        self.t_hand = next;
    }

    /// Upper bound on t-hand steps in one victim search: four sweeps bring every R to zero,
    /// plus one sweep over clean-only skips.
    fn t_hand_step_limit(&self) -> usize {
        (REFERENCE_COUNT_MAX as usize + 2) * self.resident_pages + 1
    }

    /// Check every structural invariant; `Err` names the first violation. Tests call this after
    /// every operation.
    pub fn check_invariants(&self) -> Result<(), String> {
        let occupied = self.slots.iter().filter(|s| s.is_some()).count();
        if occupied != self.resident_pages || self.slot_by_address.len() != self.resident_pages {
            return Err(format!(
                "resident {} but {} slots and {} addresses",
                self.resident_pages,
                occupied,
                self.slot_by_address.len()
            ));
        }
        if self.resident_pages > self.capacity_pages {
            return Err("more pages than capacity".into());
        }
        if occupied + self.free_slots.len() != self.slots.len() {
            return Err("free list does not cover the unused slots".into());
        }
        // The ring: one cycle through every resident page, links consistent both ways.
        if (self.t_hand == NIL) != (self.resident_pages == 0) {
            return Err("t-hand must be null exactly when the cache is empty".into());
        }
        let mut clean = 0usize;
        let mut dirty_seen: HashMap<u64, (u32, u32)> = HashMap::default();
        if self.t_hand != NIL {
            let mut slot = self.t_hand;
            for step in 0..self.resident_pages {
                let p = self.slots[slot as usize]
                    .as_ref()
                    .ok_or_else(|| format!("ring reaches free slot {slot}"))?;
                if self.page(p.next).prev != slot {
                    return Err(format!("ring link broken after slot {slot}"));
                }
                if (self.address_of)(&p.key) != p.address
                    || self.slot_by_address.get(&p.address) != Some(&slot)
                {
                    return Err(format!("address index wrong for slot {slot}"));
                }
                if p.reference_count > REFERENCE_COUNT_MAX {
                    return Err(format!("R = {} above maximum", p.reference_count));
                }
                if p.dirty {
                    let (block, offset) = self.block_of(p.address);
                    let b = self
                        .dirty_blocks
                        .get(&block)
                        .ok_or_else(|| format!("dirty page {:?} has no block list", p.key))?;
                    if b.dirty_bitmap[offset as usize / 64] & (1 << (offset % 64)) == 0 {
                        return Err(format!("dirty page {:?} missing from its list", p.key));
                    }
                    let e = dirty_seen.entry(block).or_default();
                    e.0 += 1;
                    if p.reference_count > 0 {
                        e.1 += 1;
                    }
                } else {
                    clean += 1;
                    if p.reference_count > 1 {
                        return Err(format!("clean page {:?} has R > 1", p.key));
                    }
                }
                slot = p.next;
                if slot == self.t_hand && step + 1 != self.resident_pages {
                    return Err("ring is shorter than the resident count".into());
                }
            }
            if slot != self.t_hand {
                return Err("ring is longer than the resident count".into());
            }
        }
        if clean != self.clean_pages {
            return Err(format!(
                "clean count {} but {} clean pages",
                self.clean_pages, clean
            ));
        }
        if dirty_seen.len() != self.dirty_blocks.len() {
            return Err("a block list exists without dirty pages".into());
        }
        for (block, b) in &self.dirty_blocks {
            let bits: u32 = b.dirty_bitmap.iter().map(|w| w.count_ones()).sum();
            let (dirty, non_zero) = dirty_seen.get(block).copied().unwrap_or_default();
            if bits != b.dirty_pages || dirty != b.dirty_pages {
                return Err(format!(
                    "block {block}: bitmap has {bits}, count {}, pages {dirty}",
                    b.dirty_pages
                ));
            }
            if non_zero != b.non_zero {
                return Err(format!(
                    "block {block}: non_zero {} but {non_zero} dirty pages with R>0",
                    b.non_zero
                ));
            }
        }
        if let Some(s) = self.s_hand {
            if !self.dirty_blocks.contains_key(&s.block) || s.next_offset > self.pages_per_block {
                return Err(format!("s-hand {s:?} points outside the dirty lists"));
            }
        }
        Ok(())
    }
}

impl<K: Clone + Eq + std::fmt::Debug> Replacement<K> for TsClock<K> {
    fn name(&self) -> &'static str {
        "ts-clock"
    }

    fn insert(&mut self, key: K, dirty: bool) {
        assert!(
            self.resident_pages < self.capacity_pages,
            "insert into a full cache"
        );
        let address = (self.address_of)(&key);
        assert!(
            !self.slot_by_address.contains_key(&address),
            "insert of a resident key"
        );
        let page = Page {
            key,
            address,
            dirty: false,
            reference_count: 0,
            prev: NIL,
            next: NIL,
        };
        let slot = match self.free_slots.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some(page);
                slot
            }
            None => {
                self.slots.push(Some(page));
                (self.slots.len() - 1) as u32
            }
        };
        self.slot_by_address.insert(address, slot);
        self.resident_pages += 1;
        self.clean_pages += 1;
        self.link_behind_t_hand(slot);
        self.access(slot, dirty);
    }

    fn touch(&mut self, key: &K, write: bool) {
        if let Some(slot) = self.slot_of(key) {
            self.access(slot, write);
        }
    }

    fn mark_clean(&mut self, key: &K) {
        if let Some(slot) = self.slot_of(key) {
            if self.page(slot).dirty {
                self.remove_from_dirty_list(slot);
                let p = self.page_mut(slot);
                p.reference_count = p.reference_count.min(1);
            }
        }
    }

    fn remove(&mut self, key: &K) {
        if let Some(slot) = self.slot_of(key) {
            self.evict_slot(slot);
        }
    }

    fn victim(&mut self, allow_dirty: bool) -> Option<K> {
        if self.resident_pages == 0 || (!allow_dirty && self.clean_pages == 0) {
            return None;
        }
        for _ in 0..self.t_hand_step_limit() {
            let t = self.t_hand;
            let (reference_count, dirty, address) = {
                let p = self.page(t);
                (p.reference_count, p.dirty, p.address)
            };
            if reference_count == 0 {
                if !dirty {
                    return Some(self.evict_slot(t));
                }
                if allow_dirty {
                    let (t_block, _) = self.block_of(address);
                    let slot = self.s_hand_victim(t_block);
                    return Some(self.evict_slot(slot));
                }
                // Clean-only: leave this dirty page for the write-back path and move on.
                self.t_hand = self.page(t).next;
                continue;
            }
            self.age_t_hand_page();
        }
        unreachable!("t-hand exceeded its step bound");
    }

    fn len(&self) -> usize {
        self.resident_pages
    }

    fn capacity(&self) -> usize {
        self.capacity_pages
    }

    /// The R = 0 dirty pages of the block the s-hand is (or would next be) draining, in
    /// sector order from the s-hand. Finding that block may age pages exactly as `victim`
    /// would, so repeated calls make progress.
    fn writeback_candidates(&mut self, max_keys: usize) -> Vec<K> {
        if self.dirty_pages() == 0 || max_keys == 0 {
            return Vec::new();
        }
        if let Some(hand) = self
            .s_hand
            .filter(|s| self.dirty_blocks.contains_key(&s.block))
        {
            let keys = self.zero_reference_dirty_keys(hand, max_keys);
            if !keys.is_empty() {
                return keys;
            }
        }
        // Sweep like `victim` until the t-hand rests on a dirty page with R = 0; clean R = 0
        // pages are passed over (they stay first in line for clean-only eviction).
        for _ in 0..self.t_hand_step_limit() {
            let t = self.t_hand;
            let p = self.page(t);
            if p.reference_count == 0 {
                if p.dirty {
                    let hand = SHand {
                        block: self.block_of(p.address).0,
                        next_offset: 0,
                    };
                    self.s_hand = Some(hand);
                    return self.zero_reference_dirty_keys(hand, max_keys);
                }
                self.t_hand = p.next;
            } else {
                self.age_t_hand_page();
            }
        }
        unreachable!("t-hand exceeded its step bound");
    }
}

impl<K: Clone + Eq + std::fmt::Debug> TsClock<K> {
    /// The R = 0 dirty pages of `hand.block` in sector order starting at the cursor and
    /// wrapping once, which is the order the s-hand would evict them in.
    fn zero_reference_dirty_keys(&self, hand: SHand, max_keys: usize) -> Vec<K> {
        let mut keys = Vec::new();
        let ranges = [
            (hand.next_offset, self.pages_per_block),
            (0, hand.next_offset),
        ];
        for (from, to) in ranges {
            let mut offset = from;
            while let Some(o) = self.next_dirty_offset(hand.block, offset) {
                if o >= to || keys.len() == max_keys {
                    break;
                }
                let p = self.page(self.slot_at(hand.block, o));
                if p.reference_count == 0 {
                    keys.push(p.key.clone());
                }
                offset = o + 1;
            }
        }
        keys
    }
}

#[cfg(test)]
mod tests;
