use lsfs_policy::cache::CachePolicyKind;
use lsfs_policy::SplitMix64;

use super::*;

fn config(policy: CachePolicyKind, capacity_pages: usize) -> CacheConfig {
    CacheConfig {
        capacity_pages,
        pages_per_block: 16,
        policy,
        flush_at_end: true,
    }
}

fn random_trace(n: usize, pages: u64, write_percent: u64, seed: u64) -> Vec<Request> {
    let mut rng = SplitMix64::new(seed);
    (0..n)
        .map(|_| Request {
            page: rng.below(pages),
            write: rng.below(100) < write_percent,
        })
        .collect()
}

/// A trace that fits in the cache: only compulsory misses, and every written page reaches the
/// device exactly once (at the final flush), whatever the policy.
#[test]
fn a_trace_that_fits_misses_only_once_per_page() {
    let trace = random_trace(5000, 64, 50, 1);
    let distinct: HashSet<u64> = trace.iter().map(|r| r.page).collect();
    let written: HashSet<u64> = trace.iter().filter(|r| r.write).map(|r| r.page).collect();
    for kind in CachePolicyKind::ALL {
        let r = simulate_cache(&trace, &config(kind, 64));
        assert_eq!(r.hits, 5000 - distinct.len() as u64, "{}", r.policy);
        assert_eq!(r.device_writes, written.len() as u64, "{}", r.policy);
    }
}

/// Every write eventually reaches the device at least once per dirty period, never more
/// often than it was written: device writes ≤ write requests, and ≥ distinct written pages.
#[test]
fn write_back_counts_are_bounded_by_the_trace() {
    let trace = random_trace(20_000, 1000, 30, 2);
    let writes = trace.iter().filter(|r| r.write).count() as u64;
    let distinct: HashSet<u64> = trace.iter().filter(|r| r.write).map(|r| r.page).collect();
    for kind in CachePolicyKind::ALL {
        let r = simulate_cache(&trace, &config(kind, 100));
        assert!(
            r.device_writes <= writes && r.device_writes >= distinct.len() as u64,
            "{}",
            r.policy
        );
        assert!(
            r.hit_ratio > 0.05 && r.hit_ratio < 0.2,
            "{}: {}",
            r.policy,
            r.hit_ratio
        );
    }
}

/// LRU on a cyclic scan one page larger than the cache misses every time (the textbook case).
#[test]
fn lru_misses_every_access_of_a_cyclic_scan_larger_than_the_cache() {
    let trace: Vec<Request> = (0..1000)
        .map(|i| Request {
            page: i % 11,
            write: false,
        })
        .collect();
    let r = simulate_cache(&trace, &config(CachePolicyKind::Lru, 10));
    assert_eq!(r.hits, 0);
}

/// TS-CLOCK's point: on random writes with spatial clustering it writes back more pages per
/// flash block run than LRU, at a similar hit ratio.
#[test]
fn ts_clock_writes_fuller_blocks_than_lru() {
    let mut rng = SplitMix64::new(3);
    let mut trace = Vec::new();
    for _ in 0..20_000 {
        // Pick a block of 16 pages among 400, then a few pages in it.
        let block = rng.below(400);
        for _ in 0..1 + rng.below(4) {
            trace.push(Request {
                page: block * 16 + rng.below(16),
                write: rng.below(10) < 7,
            });
        }
    }
    // Evictions only: the final flush is in address order for every policy.
    let run = |kind| {
        simulate_cache(
            &trace,
            &CacheConfig {
                flush_at_end: false,
                ..config(kind, 1024)
            },
        )
    };
    let (lru, ts) = (run(CachePolicyKind::Lru), run(CachePolicyKind::TsClock));
    // LRU already gets ~1.8 because the trace writes a few pages of a block back to back;
    // TS-CLOCK drains every dirty page the block has in the cache (~2.5 here).
    assert!(
        ts.mean_pages_per_block_run > 1.3 * lru.mean_pages_per_block_run,
        "{} vs {}",
        ts.mean_pages_per_block_run,
        lru.mean_pages_per_block_run
    );
    assert!(
        ts.hit_ratio > lru.hit_ratio - 0.05,
        "{} vs {}",
        ts.hit_ratio,
        lru.hit_ratio
    );
}

#[test]
fn block_runs_count_changes_of_block() {
    assert_eq!(count_block_runs(&[0, 1, 2, 16, 17, 3], 16), 3);
    assert_eq!(count_block_runs(&[], 16), 0);
}
