//! Cache replacement policies behind one trait, [`Replacement`].
//!
//! The caller owns the cached data and the dirty state; a policy only decides *which* resident
//! key goes next. Block-aware policies (TS-CLOCK, FAB, LB-CLOCK, Sp.Clock) also need a key's
//! linear page address to find its flash block (`address / pages_per_block`) and its order
//! inside the block; they take an [`AddressOf`] function for that, which must be injective.

mod block_set;
mod cflru;
mod clock;
mod fab;
mod lb_clock;
mod recency_list;
mod sp_clock;
mod ts_clock;
mod two_q;

pub use cflru::Cflru;
pub use clock::Clock;
pub use fab::Fab;
pub use lb_clock::LbClock;
pub use sp_clock::SpClock;
pub use ts_clock::TsClock;
pub use two_q::TwoQ;

/// Maps a cache key to its linear page address (e.g. a sector or 4 KiB block number).
/// Must be injective over the keys that are resident at the same time.
pub type AddressOf<K> = fn(&K) -> u64;

/// The identity address for caches keyed directly by page number.
pub fn page_number(key: &u64) -> u64 {
    *key
}

/// A replacement policy. All methods are O(1) amortised for TS-CLOCK; baselines may be
/// O(log n) (they only run in the simulator).
///
/// Contract: `insert` only for keys that are not resident and only when `len() < capacity`
/// (the caller evicts first); `touch`, `mark_clean` and `remove` only for resident keys
/// (`remove` and `mark_clean` tolerate absent keys and do nothing).
pub trait Replacement<K> {
    fn name(&self) -> &'static str;
    /// A miss brought `key` in; `dirty` if the access was a write.
    fn insert(&mut self, key: K, dirty: bool);
    /// A hit; `write = true` makes the page dirty.
    fn touch(&mut self, key: &K, write: bool);
    /// The page was written back and is clean now.
    fn mark_clean(&mut self, key: &K);
    /// The caller dropped the page (e.g. truncate); no write-back is implied.
    fn remove(&mut self, key: &K);
    /// Choose a resident key to evict and stop tracking it. With `allow_dirty = false` only a
    /// clean key is returned, or `None` if every resident key is dirty (the engine can write
    /// dirty blocks only through its segment constructor). The simulator passes `true` and
    /// counts a write-back when the victim was dirty.
    fn victim(&mut self, allow_dirty: bool) -> Option<K>;
    /// Resident keys.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Maximum resident keys this policy was built for.
    fn capacity(&self) -> usize;
    /// Block-granular policies (FAB, LB-CLOCK) evict a whole flash block at once: after a
    /// `victim` call this stays true until the rest of that block has been handed out, and the
    /// simulator keeps calling `victim`.
    fn batch_pending(&self) -> bool {
        false
    }
    /// Dirty keys the policy would write back next, in the order it wants them written,
    /// without evicting them (at most `max_keys`). The engine hands these to its segment
    /// constructor and calls [`Replacement::mark_clean`] when they are durable, which makes them
    /// evictable with `allow_dirty = false`. Policies that do not group writes return the
    /// dirty keys they would evict first.
    fn writeback_candidates(&mut self, max_keys: usize) -> Vec<K>;
}

/// Which policy to build; used by the simulator's command line and by engine configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CachePolicyKind {
    Lru,
    Clock,
    TwoQ,
    Cflru,
    Fab,
    LbClock,
    SpClock,
    TsClock,
}

impl CachePolicyKind {
    pub const ALL: [CachePolicyKind; 8] = [
        CachePolicyKind::Lru,
        CachePolicyKind::Clock,
        CachePolicyKind::TwoQ,
        CachePolicyKind::Cflru,
        CachePolicyKind::Fab,
        CachePolicyKind::LbClock,
        CachePolicyKind::SpClock,
        CachePolicyKind::TsClock,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CachePolicyKind::Lru => "lru",
            CachePolicyKind::Clock => "clock",
            CachePolicyKind::TwoQ => "2q",
            CachePolicyKind::Cflru => "cflru",
            CachePolicyKind::Fab => "fab",
            CachePolicyKind::LbClock => "lb-clock",
            CachePolicyKind::SpClock => "sp-clock",
            CachePolicyKind::TsClock => "ts-clock",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Build a policy over page-numbered keys (`u64`).
    pub fn build_for_pages(
        self,
        capacity_pages: usize,
        pages_per_block: u32,
    ) -> Box<dyn Replacement<u64> + Send> {
        match self {
            CachePolicyKind::Lru => Box::new(Cflru::lru(capacity_pages)),
            CachePolicyKind::Clock => Box::new(Clock::new(capacity_pages)),
            CachePolicyKind::TwoQ => Box::new(TwoQ::new(capacity_pages)),
            CachePolicyKind::Cflru => Box::new(Cflru::new(capacity_pages, 0.25)),
            CachePolicyKind::Fab => {
                Box::new(Fab::new(capacity_pages, pages_per_block, page_number))
            }
            CachePolicyKind::LbClock => {
                Box::new(LbClock::new(capacity_pages, pages_per_block, page_number))
            }
            CachePolicyKind::SpClock => Box::new(SpClock::new(capacity_pages, page_number)),
            CachePolicyKind::TsClock => {
                Box::new(TsClock::new(capacity_pages, pages_per_block, page_number))
            }
        }
    }
}

#[cfg(test)]
mod tests;
