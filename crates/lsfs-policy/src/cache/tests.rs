//! Contract tests that every policy must pass, plus one behavioural test per baseline.

use std::collections::HashMap;

use super::*;
use crate::SplitMix64;

/// Random operations against a shadow {key → dirty} model: victims are resident, clean-only
/// victims are clean, `None` only when nothing qualifies, and `len` tracks the model.
#[test]
fn every_policy_honours_the_replacement_contract() {
    for kind in CachePolicyKind::ALL {
        for seed in 0..8u64 {
            let mut rng = SplitMix64::new(seed * 31 + 1);
            let capacity = 1 + rng.below(40) as usize;
            let ppb = 1 + rng.below(16) as u32;
            let key_space = 1 + rng.below(3 * capacity as u64 + 4);
            let mut p = kind.build_for_pages(capacity, ppb);
            let mut shadow: HashMap<u64, bool> = HashMap::new();
            for step in 0..2000 {
                let key = rng.below(key_space);
                let write = rng.below(3) == 0;
                match rng.below(8) {
                    0..=4 => {
                        if shadow.contains_key(&key) {
                            p.touch(&key, write);
                            *shadow.get_mut(&key).unwrap() |= write;
                        } else {
                            while shadow.len() >= capacity || p.batch_pending() {
                                let v = p.victim(true).expect("full cache has a victim");
                                assert!(
                                    shadow.remove(&v).is_some(),
                                    "{}: {v} not resident",
                                    p.name()
                                );
                            }
                            p.insert(key, write);
                            shadow.insert(key, write);
                        }
                    }
                    5 => {
                        p.mark_clean(&key);
                        if let Some(d) = shadow.get_mut(&key) {
                            *d = false;
                        }
                    }
                    6 => {
                        p.remove(&key);
                        shadow.remove(&key);
                    }
                    _ => {
                        let any_clean = shadow.values().any(|d| !d);
                        match p.victim(false) {
                            Some(v) => {
                                let dirty = shadow.remove(&v).expect("victim resident");
                                assert!(!dirty, "{}: clean-only victim {v} is dirty", p.name());
                            }
                            None => {
                                assert!(!any_clean, "{} step {step}: missed a clean page", p.name())
                            }
                        }
                    }
                }
                assert_eq!(
                    p.len(),
                    shadow.len(),
                    "{} seed {seed} step {step}",
                    p.name()
                );
                assert!(p.len() <= p.capacity());
            }
            for k in p.writeback_candidates(usize::MAX) {
                assert_eq!(
                    shadow.get(&k),
                    Some(&true),
                    "{}: candidate {k} not dirty",
                    p.name()
                );
            }
        }
    }
}

#[test]
fn lru_evicts_the_least_recently_used() {
    let mut p = Cflru::lru(3);
    for k in [1u64, 2, 3] {
        p.insert(k, false);
    }
    p.touch(&1, false);
    assert_eq!(p.victim(true), Some(2));
    assert_eq!(p.victim(true), Some(3));

    // No clean-first window: the oldest page goes though it is dirty,
    // unless the caller refuses dirty victims.
    let mut p = Cflru::lru(3);
    p.insert(1u64, true);
    p.insert(2, false);
    p.insert(3, false);
    assert_eq!(p.victim(false), Some(2));
    assert_eq!(p.victim(true), Some(1));
}

#[test]
fn clock_gives_referenced_pages_a_second_chance() {
    let mut p = Clock::new(3);
    for k in [1u64, 2, 3] {
        p.insert(k, false);
    }
    // The first sweep clears all bits and evicts frame 0 (page 1) on the second pass...
    assert_eq!(p.victim(true), Some(1));
    p.insert(4, false);
    // ... page 2 was not referenced since, page 4 was just inserted with its bit set.
    p.touch(&3, false);
    assert_eq!(p.victim(true), Some(2));
}

#[test]
fn cflru_prefers_clean_pages_only_inside_its_window() {
    let mut p = Cflru::new(8, 0.25); // window = the 2 least recently used pages
    p.insert(0, true);
    p.insert(1, false);
    for k in 2..8u64 {
        p.insert(k, k != 5);
    }
    // Window {0 dirty, 1 clean}: the clean page goes first although 0 is older.
    assert_eq!(p.victim(true), Some(1));
    // Window {0 dirty, 2 dirty}: no clean page, so LRU order (page 0) although 5 is clean.
    assert_eq!(p.victim(true), Some(0));
}

#[test]
fn two_q_evicts_once_used_pages_before_promoted_ones() {
    let mut p = TwoQ::new(4);
    for k in [1u64, 2, 3, 4] {
        p.insert(k, false);
    }
    p.touch(&1, false); // 1 is promoted to the active list
    assert_eq!(p.victim(true), Some(2));
    assert_eq!(p.victim(true), Some(3));
}

#[test]
fn fab_evicts_the_fullest_block_as_a_whole_in_address_order() {
    let mut p = Fab::new(8, 4, page_number);
    for k in [9u64, 1, 0, 3, 8] {
        p.insert(k, true);
    }
    // Block 0 holds pages {0, 1, 3}, block 2 holds {8, 9}.
    assert_eq!(p.victim(true), Some(0));
    assert!(p.batch_pending());
    assert_eq!(p.victim(true), Some(1));
    assert_eq!(p.victim(true), Some(3));
    assert!(!p.batch_pending());
    assert_eq!(p.len(), 2);
}

#[test]
fn lb_clock_evicts_an_unreferenced_block_whole() {
    let mut p = LbClock::new(8, 4, page_number);
    for k in [0u64, 1, 4, 5, 6] {
        p.insert(k, true);
    }
    // Both blocks lose their bits on the first pass; the fuller block 1 {4,5,6} is chosen.
    let evicted: Vec<u64> = (0..3).map(|_| p.victim(true).unwrap()).collect();
    assert_eq!(evicted, vec![4, 5, 6]);
    assert!(!p.batch_pending());
}

#[test]
fn sp_clock_evicts_in_ascending_address_order() {
    let mut p = SpClock::new(8, page_number);
    for k in [7u64, 3, 5, 1] {
        p.insert(k, true);
    }
    let evicted: Vec<u64> = (0..4).map(|_| p.victim(true).unwrap()).collect();
    assert_eq!(evicted, vec![1, 3, 5, 7]);
}
