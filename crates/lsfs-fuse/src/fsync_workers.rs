//! fsyncs served off the FUSE thread, so that they can overlap.
//!
//! An fsync is mostly a wait: the engine writes its record under its lock
//! in microseconds, then waits for the device's flush (hundreds of
//! microseconds on a disk) outside it (`lsfs_core::fs::locked`). Served on
//! the one FUSE thread, that wait stopped every other request: four
//! processes fsyncing at once got four flushes, one after the other, and
//! their writes queued behind each. Here the FUSE thread hands each fsync
//! to a small pool and goes on reading requests; fsyncs that arrive while a
//! flush runs write their records, and the device queue runs one flush for
//! all of them (group commit, `lsfs_core::device::io_queue`).
//!
//! The kernel holds the file's inode lock for the whole FSYNC, so the
//! requests that may run beside it are those of other files or of the
//! kernel's writeback, which a mount with several FUSE threads runs side by
//! side anyway. A lone fsync pays one thread hand-over more.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// How many fsyncs run at once; more wait in the queue. Four is the most
/// the benchmarks here run together, and a flush that waits covers the
/// records of all that arrived meanwhile, however many.
pub(crate) const WORKERS: usize = 4;

type Job = Box<dyn FnOnce() + Send>;

pub(crate) struct FsyncWorkers {
    jobs: Option<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl FsyncWorkers {
    /// Start `n` worker threads (none if `n` is 0: every job then runs
    /// where it is given).
    pub(crate) fn start(n: usize) -> Self {
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let threads: Vec<_> = (0..n)
            .filter_map(|i| {
                let rx = rx.clone();
                std::thread::Builder::new()
                    .name(format!("lsfs-fsync-{i}"))
                    .spawn(move || serve(&rx))
                    .map_err(|e| tracing::warn!("no fsync worker thread: {e}"))
                    .ok()
            })
            .collect();
        FsyncWorkers {
            jobs: (!threads.is_empty()).then_some(tx),
            threads,
        }
    }

    /// Run `job` on a worker, or here if there is none.
    pub(crate) fn run(&self, job: impl FnOnce() + Send + 'static) {
        match &self.jobs {
            Some(tx) => {
                if let Err(e) = tx.send(Box::new(job)) {
                    // Only if every worker died (a panic in a job).
                    (e.0)();
                }
            }
            None => job(),
        }
    }
}

fn serve(rx: &Mutex<Receiver<Job>>) {
    loop {
        let job = match rx.lock() {
            Ok(r) => r.recv(),
            Err(_) => return,
        };
        match job {
            Ok(job) => job(),
            Err(_) => return, // the pool was dropped
        }
    }
}

impl Drop for FsyncWorkers {
    /// Let the workers finish what was handed to them (each job ends in a
    /// reply), then stop.
    fn drop(&mut self) {
        self.jobs = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    /// Jobs run beside each other: each waits (up to 5 s) until all four
    /// have started, which one at a time would never see.
    #[test]
    fn jobs_overlap_up_to_the_pool_size() {
        let pool = FsyncWorkers::start(WORKERS);
        let started = Arc::new(AtomicUsize::new(0));
        let saw_all = Arc::new(AtomicUsize::new(0));
        for _ in 0..WORKERS {
            let (started, saw_all) = (started.clone(), saw_all.clone());
            pool.run(move || {
                started.fetch_add(1, Ordering::SeqCst);
                let t0 = Instant::now();
                while started.load(Ordering::SeqCst) < WORKERS
                    && t0.elapsed() < Duration::from_secs(5)
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
                if started.load(Ordering::SeqCst) == WORKERS {
                    saw_all.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        drop(pool); // joins: every job has run
        assert_eq!(saw_all.load(Ordering::SeqCst), WORKERS);
    }

    #[test]
    fn without_workers_a_job_runs_in_place() {
        let pool = FsyncWorkers::start(0);
        let here = std::thread::current().id();
        let ran_on = Arc::new(Mutex::new(None));
        let r = ran_on.clone();
        pool.run(move || *r.lock().unwrap() = Some(std::thread::current().id()));
        assert_eq!(*ran_on.lock().unwrap(), Some(here));
    }
}
