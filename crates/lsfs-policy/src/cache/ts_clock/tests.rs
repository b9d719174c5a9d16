use std::collections::HashMap;

use super::*;
use crate::cache::page_number;
use crate::SplitMix64;

fn cache(capacity_pages: usize, pages_per_block: u32) -> TsClock<u64> {
    TsClock::new(capacity_pages, pages_per_block, page_number)
}

/// Random operation sequences against a shadow model of {resident key → dirty}, with every
/// structural invariant checked after every single operation.
#[test]
fn invariants_hold_after_every_operation_of_random_sequences() {
    for seed in 0..40u64 {
        let mut rng = SplitMix64::new(seed);
        let capacity = 1 + rng.below(48) as usize;
        let ppb = [1u32, 3, 4, 8, 64, 100][rng.below(6) as usize];
        let key_space = 1 + rng.below(4 * capacity as u64 + 8);
        let mut ts = cache(capacity, ppb);
        let mut shadow: HashMap<u64, bool> = HashMap::new();
        for step in 0..3000 {
            let key = rng.below(key_space);
            let write = rng.below(2) == 0;
            match rng.below(10) {
                0..=5 => {
                    if shadow.contains_key(&key) {
                        ts.touch(&key, write);
                        *shadow.get_mut(&key).unwrap() |= write;
                    } else {
                        if shadow.len() == capacity {
                            let v = ts.victim(true).expect("a full cache has a victim");
                            assert!(shadow.remove(&v).is_some(), "victim {v} was not resident");
                            ts.check_invariants().unwrap();
                        }
                        ts.insert(key, write);
                        shadow.insert(key, write);
                    }
                }
                6 => {
                    ts.mark_clean(&key);
                    if let Some(d) = shadow.get_mut(&key) {
                        *d = false;
                    }
                }
                7 => {
                    ts.remove(&key);
                    shadow.remove(&key);
                }
                8 => {
                    let allow_dirty = rng.below(2) == 0;
                    let any_clean = shadow.values().any(|d| !d);
                    match ts.victim(allow_dirty) {
                        Some(v) => {
                            let dirty = shadow.remove(&v).expect("victim was resident");
                            assert!(allow_dirty || !dirty, "clean-only victim {v} was dirty");
                        }
                        None => assert!(
                            shadow.is_empty() || (!allow_dirty && !any_clean),
                            "no victim although one was allowed (seed {seed} step {step})"
                        ),
                    }
                }
                _ => {
                    let keys = ts.writeback_candidates(1 + rng.below(8) as usize);
                    let dirty_exists = shadow.values().any(|d| *d);
                    assert_eq!(keys.is_empty(), !dirty_exists, "write-back found nothing");
                    for k in &keys {
                        assert_eq!(shadow.get(k), Some(&true), "candidate {k} not dirty");
                    }
                }
            }
            ts.check_invariants()
                .unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
            assert_eq!(ts.len(), shadow.len());
            for (k, d) in &shadow {
                assert_eq!(ts.is_dirty(k), Some(*d), "dirty flag of {k}");
            }
        }
    }
}

/// §1.4: clean pages are evicted before dirty ones. Clean pages have R ≤ 1; a dirty page in a
/// block that is at least a quarter dirty has R ≥ 2, so every clean page reaches zero first.
/// (A dirty page alone in its block has R = 1 and competes with clean pages on equal terms.)
#[test]
fn clean_pages_are_evicted_before_dirty_pages() {
    let mut ts = cache(64, 16);
    for key in 0..64u64 {
        ts.insert(key, key % 2 == 0);
    }
    for key in (0..64u64).step_by(2) {
        ts.touch(&key, true);
        assert_eq!(ts.reference_count(&key), Some(2));
    }
    for _ in 0..32 {
        let v = ts.victim(true).unwrap();
        assert_eq!(
            v % 2,
            1,
            "page {v} is dirty but clean pages were still resident"
        );
        ts.check_invariants().unwrap();
    }
    assert_eq!(ts.dirty_pages(), 32);
    let v = ts.victim(true).unwrap();
    assert_eq!(v % 2, 0);
}

/// §1.4: dirty pages of a heavily updated block get a larger R and outlive those of a sparsely
/// dirty block.
#[test]
fn dirty_pages_of_busy_blocks_outlive_those_of_sparse_blocks() {
    let ppb = 4;
    let mut ts = cache(8, ppb);
    // Block 0 fully dirty: R climbs to ceil(4·4/4) = 4 for the last page written.
    for key in 0..4u64 {
        ts.insert(key, true);
    }
    for key in 0..4u64 {
        ts.touch(&key, true);
    }
    // Block 1 (addresses 4..8) and block 2 get one dirty page each: R = 1.
    ts.insert(4, true);
    ts.insert(8, true);
    assert_eq!(ts.reference_count(&0), Some(4));
    assert_eq!(ts.reference_count(&4), Some(1));
    let first = ts.victim(true).unwrap();
    let second = ts.victim(true).unwrap();
    let mut sparse = [first, second];
    sparse.sort();
    assert_eq!(sparse, [4, 8], "the sparse blocks' pages must go first");
    ts.check_invariants().unwrap();
}

/// §1.4: dirty evictions drain one block at a time in sector order (the s-hand), even when the
/// ring order is scrambled.
#[test]
fn dirty_evictions_drain_a_block_in_sector_order() {
    let ppb = 8;
    let mut ts = cache(32, ppb);
    let mut rng = SplitMix64::new(7);
    let mut keys: Vec<u64> = (0..32).collect();
    for i in (1..keys.len()).rev() {
        keys.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for &k in &keys {
        ts.insert(k, true);
    }
    // Re-dirty every page once its block is full: all pages get R = 4 and reach zero in the
    // same sweep, so only the s-hand decides the order.
    for &k in &keys {
        ts.touch(&k, true);
        assert_eq!(ts.reference_count(&k), Some(4));
    }
    let mut evicted = Vec::new();
    for _ in 0..32 {
        evicted.push(ts.victim(true).unwrap());
        ts.check_invariants().unwrap();
    }
    // Every block drains contiguously.
    for chunk in evicted.chunks(ppb as usize) {
        let block = chunk[0] / ppb as u64;
        assert!(
            chunk.iter().all(|k| k / ppb as u64 == block),
            "mixed blocks: {chunk:?}"
        );
    }
    // The s-hand starts each block at its first dirty page, so each block leaves in sector order.
    for chunk in evicted.chunks(ppb as usize) {
        assert!(
            chunk.windows(2).all(|w| w[0] < w[1]),
            "not sorted: {chunk:?}"
        );
    }
}

/// The s-hand never decrements R: pages it passes over keep their reference count.
#[test]
fn s_hand_does_not_age_the_pages_it_passes() {
    let ppb = 4;
    let mut ts = cache(8, ppb);
    // Ring order 3, 0, 1, 2 with R = 1, 2, 3, 4 (non_zero grows with each dirty insert).
    for key in [3u64, 0, 1, 2] {
        ts.insert(key, true);
    }
    // One t-hand sweep leaves R = 0, 1, 2, 3; then the t-hand rests on page 3 (R = 0) and
    // the s-hand walks block 0 from offset 0, passing pages 0, 1 and 2 before it finds page 3.
    assert_eq!(ts.victim(true), Some(3));
    assert_eq!(ts.reference_count(&0), Some(1));
    assert_eq!(ts.reference_count(&1), Some(2));
    assert_eq!(ts.reference_count(&2), Some(3));
    ts.check_invariants().unwrap();
}

#[test]
fn clean_only_victim_never_returns_a_dirty_page() {
    let mut ts = cache(4, 4);
    for key in 0..4 {
        ts.insert(key, true);
    }
    assert_eq!(ts.victim(false), None, "every page is dirty");
    assert_eq!(ts.len(), 4);
    ts.mark_clean(&2);
    assert_eq!(ts.victim(false), Some(2));
    assert_eq!(ts.victim(false), None);
    ts.check_invariants().unwrap();
}

/// The engine's path when the cache is full of dirty blocks: ask for write-back candidates,
/// write them, mark them clean, then evict them with `allow_dirty = false`.
#[test]
fn writeback_candidates_are_one_block_in_order_and_become_evictable() {
    let ppb = 4;
    let mut ts = cache(8, ppb);
    for key in [5u64, 1, 7, 2, 4, 0, 6, 3] {
        ts.insert(key, true);
    }
    let keys = ts.writeback_candidates(16);
    assert!(!keys.is_empty());
    let block = keys[0] / ppb as u64;
    assert!(keys.iter().all(|k| k / ppb as u64 == block), "{keys:?}");
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
    for k in &keys {
        ts.mark_clean(k);
    }
    ts.check_invariants().unwrap();
    let mut evicted = Vec::new();
    while let Some(v) = ts.victim(false) {
        evicted.push(v);
    }
    evicted.sort();
    assert_eq!(evicted, keys);
}

#[test]
fn write_hit_on_clean_page_joins_the_dirty_list() {
    let mut ts = cache(4, 4);
    ts.insert(1, false);
    assert_eq!(ts.block_non_zero(1), 0);
    ts.touch(&1, true);
    assert_eq!(ts.is_dirty(&1), Some(true));
    assert_eq!(ts.block_non_zero(1), 1);
    ts.check_invariants().unwrap();
    ts.mark_clean(&1);
    assert_eq!(ts.reference_count(&1), Some(1));
    ts.check_invariants().unwrap();
}
