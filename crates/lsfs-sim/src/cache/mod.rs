//! Trace-driven page-cache simulator (Kang 2017 §2.4's method): run a before-cache trace
//! through a replacement policy, count hits, and record the after-cache write trace (every
//! dirty page the policy evicts, plus a final flush in address order) for the FTL simulator.

mod trace;

use lsfs_policy::cache::{CachePolicyKind, Replacement};
use serde::Serialize;
use std::collections::HashSet;

pub use trace::{parse_trace, write_trace, Request};

#[derive(Clone, Debug)]
pub struct CacheConfig {
    pub capacity_pages: usize,
    /// Flash block size in pages, for the block-aware policies and the block statistics.
    pub pages_per_block: u32,
    pub policy: CachePolicyKind,
    /// Write the dirty pages left at the end (in address order), as a final sync would.
    pub flush_at_end: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct CacheResult {
    pub policy: String,
    pub capacity_pages: usize,
    pub requests: u64,
    pub hits: u64,
    pub hit_ratio: f64,
    /// Misses on reads, which the device must serve.
    pub device_reads: u64,
    /// Pages written to the device (evictions of dirty pages and the final flush).
    pub device_writes: u64,
    /// Runs of consecutive after-cache writes that stay in one flash block.
    pub block_write_runs: u64,
    /// device_writes / block_write_runs: Kang's block utilization of the write stream (Fig. 2-5).
    pub mean_pages_per_block_run: f64,
    #[serde(skip)]
    pub after_cache_writes: Vec<u64>,
}

pub fn simulate_cache(trace: &[Request], config: &CacheConfig) -> CacheResult {
    let mut policy = config
        .policy
        .build_for_pages(config.capacity_pages, config.pages_per_block);
    let mut dirty: HashSet<u64> = HashSet::new();
    let mut resident: HashSet<u64> = HashSet::with_capacity(config.capacity_pages);
    let mut writes: Vec<u64> = Vec::new();
    let (mut hits, mut device_reads) = (0u64, 0u64);
    for r in trace {
        if resident.contains(&r.page) {
            hits += 1;
            policy.touch(&r.page, r.write);
        } else {
            if !r.write {
                device_reads += 1;
            }
            while resident.len() >= config.capacity_pages || policy.batch_pending() {
                evict_one(policy.as_mut(), &mut resident, &mut dirty, &mut writes);
            }
            policy.insert(r.page, r.write);
            resident.insert(r.page);
        }
        if r.write {
            dirty.insert(r.page);
        }
    }
    if config.flush_at_end {
        let mut rest: Vec<u64> = dirty.drain().collect();
        rest.sort_unstable();
        writes.extend(rest);
    }
    let block_write_runs = count_block_runs(&writes, config.pages_per_block);
    CacheResult {
        policy: config.policy.name().to_string(),
        capacity_pages: config.capacity_pages,
        requests: trace.len() as u64,
        hits,
        hit_ratio: hits as f64 / trace.len().max(1) as f64,
        device_reads,
        device_writes: writes.len() as u64,
        block_write_runs,
        mean_pages_per_block_run: writes.len() as f64 / block_write_runs.max(1) as f64,
        after_cache_writes: writes,
    }
}

fn evict_one(
    policy: &mut dyn Replacement<u64>,
    resident: &mut HashSet<u64>,
    dirty: &mut HashSet<u64>,
    writes: &mut Vec<u64>,
) {
    let victim = policy
        .victim(true)
        .expect("a full cache always has a victim");
    assert!(
        resident.remove(&victim),
        "policy evicted non-resident page {victim}"
    );
    if dirty.remove(&victim) {
        writes.push(victim);
    }
}

/// Consecutive writes to the same flash block count as one run.
pub fn count_block_runs(writes: &[u64], pages_per_block: u32) -> u64 {
    let ppb = pages_per_block as u64;
    let mut runs = 0;
    let mut last_block = u64::MAX;
    for &p in writes {
        if p / ppb != last_block {
            runs += 1;
            last_block = p / ppb;
        }
    }
    runs
}

#[cfg(test)]
mod tests;
