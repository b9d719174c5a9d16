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
//! all of them (group commit, `lsfs_core::device::io_queue`). The pool is
//! the mount's (`Ops` holds it): a ring queue thread (`uring/`) hands its
//! fsyncs over the same way, since one served in place would hold the
//! queue of its caller's CPU for the flush.
//!
//! The kernel holds the file's inode lock for the whole FSYNC, so the
//! requests that may run beside it are those of other files or of the
//! kernel's writeback, which a mount with several FUSE threads runs side by
//! side anyway.
//!
//! A hand-over costs a thread wake-up, which on a small virtual machine is
//! a large part of a fast fsync: one process fsyncing alone (SQLite, a
//! log) ran at about half the rate through the pool. So the pool is used
//! only while fsyncs come from more than one caller (the kernel names the
//! calling thread): [`FsyncWorkers::run_for`] serves an fsync in place
//! unless another caller fsynced within [`OVERLAP_WINDOW`], and keeps using
//! the pool for [`POOL_HOLD`] after that was last seen.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How many fsyncs run at once; more wait in the queue. Four is the most
/// the benchmarks here run together, and a flush that waits covers the
/// records of all that arrived meanwhile, however many.
pub(crate) const WORKERS: usize = 4;

/// Two callers' fsyncs this close together may overlap: use the pool.
pub(crate) const OVERLAP_WINDOW: Duration = Duration::from_millis(20);
/// How long the pool stays in use after overlap was last seen.
pub(crate) const POOL_HOLD: Duration = Duration::from_millis(200);

type Job = Box<dyn FnOnce() + Send>;

pub(crate) struct FsyncWorkers {
    jobs: Option<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
    recent: Mutex<Recent>,
}

/// The last fsync's caller and time, and until when the pool is used.
struct Recent {
    caller: u32,
    at: Option<Instant>,
    pool_until: Option<Instant>,
}

impl Recent {
    /// Note an fsync by `caller` at `now`; whether it goes to the pool.
    fn pooled(&mut self, caller: u32, now: Instant) -> bool {
        let overlap = caller != self.caller
            && self
                .at
                .is_some_and(|t| now.saturating_duration_since(t) < OVERLAP_WINDOW);
        if overlap {
            self.pool_until = Some(now + POOL_HOLD);
        }
        self.caller = caller;
        self.at = Some(now);
        self.pool_until.is_some_and(|u| now < u)
    }
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
            recent: Mutex::new(Recent {
                caller: 0,
                at: None,
                pool_until: None,
            }),
        }
    }

    /// Run `job`, an fsync by thread `caller`: on a worker while fsyncs
    /// come from several callers, else here (see the module comment).
    pub(crate) fn run_for(&self, caller: u32, job: impl FnOnce() + Send + 'static) {
        if self.pooled(caller) {
            self.run(job)
        } else {
            job()
        }
    }

    /// Note an fsync by thread `caller`; whether it should go to a worker
    /// (for a transport that answers in place more cheaply than through a
    /// job, as the ring does).
    pub(crate) fn pooled(&self, caller: u32) -> bool {
        self.recent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pooled(caller, Instant::now())
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
    ///
    /// The pool lives in the mount's `Ops`, which a job holds: when a job
    /// drops the last reference, the pool is dropped on that worker, which
    /// must not wait for itself (it ends once its job returns).
    fn drop(&mut self) {
        self.jobs = None;
        let me = std::thread::current().id();
        for t in self.threads.drain(..) {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

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
    fn one_caller_stays_in_place_and_two_use_the_pool() {
        let t0 = Instant::now();
        let mut r = Recent {
            caller: 0,
            at: None,
            pool_until: None,
        };
        let ms = |n| t0 + Duration::from_millis(n);
        assert!(!r.pooled(7, ms(0)));
        assert!(!r.pooled(7, ms(1)), "one caller alone");
        assert!(r.pooled(8, ms(2)), "a second caller within the window");
        assert!(r.pooled(7, ms(100)), "held");
        assert!(
            !r.pooled(7, ms(2 + POOL_HOLD.as_millis() as u64 + 1)),
            "hold over"
        );
        assert!(!r.pooled(9, ms(2000)), "another caller, long after");
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
