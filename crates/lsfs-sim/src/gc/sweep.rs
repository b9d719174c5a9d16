//! Run many simulations on a few threads, with a progress bar.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::{simulate, GcConfig, GcResult};
use crate::progress::progress_bar;

/// One simulation of a sweep.
pub type SweepJob = GcConfig;

/// Results in job order. `threads` = 0 means one per available core.
pub fn run_sweep(jobs: &[SweepJob], threads: usize, show_progress: bool) -> Vec<GcResult> {
    let threads = if threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        threads
    };
    let bar = progress_bar(jobs.len() as u64, "gc", show_progress);
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<GcResult>>> = Mutex::new(vec![None; jobs.len()]);
    std::thread::scope(|scope| {
        for _ in 0..threads.min(jobs.len()).max(1) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(job) = jobs.get(i) else { break };
                let r = simulate(job);
                bar.set_message(format!("{} u={:.2}", r.policy, r.utilization));
                results.lock().expect("no panics while holding the lock")[i] = Some(r);
                bar.inc(1);
            });
        }
    });
    bar.finish_and_clear();
    results
        .into_inner()
        .expect("lock")
        .into_iter()
        .map(|r| r.expect("every job ran"))
        .collect()
}
