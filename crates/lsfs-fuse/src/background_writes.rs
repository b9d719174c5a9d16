//! Device writes finished by a thread of their own, for the WRITEs of the
//! kernel's writeback.
//!
//! A request runs the `Vfs` under its lock, and the device work it queued
//! (`Vfs::deferred_io`: a full segment's record, say) is finished after the
//! lock is let go. Finishing it before the reply made the one FUSE thread
//! wait for the device on every request that filled a segment: a
//! sequential write alternated between copying pages in and waiting for
//! the disk. Under the kernel's writeback cache nothing needs that wait:
//! the WRITEs come from the kernel's writeback, not from the application,
//! whose errors arrive at fsync anyway. So a WRITE hands its ticket here
//! and is answered at once, and this thread writes while the FUSE thread
//! serves the next request. Every other request still finishes its own
//! device work before its reply (a FITRIM's discards, say, are done when
//! fstrim returns).
//!
//! Nothing is lost or reordered: the queue runs its work in order whoever
//! runs it, reads see queued writes, an fsync still finishes everything
//! queued before its reply (waiting for this thread if it is running), and
//! the queue's bound (64 MiB) makes an appender drain it inline when this
//! thread falls behind. A device error latches in the queue: the file
//! system turns read-only, and the next fsync, sync or write that needs
//! the device fails with EIO.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use lsfs_vfs::DeferredIo;

#[derive(Default)]
struct Want {
    /// The highest ticket handed over.
    ticket: u64,
    stop: bool,
}

pub(crate) struct BackgroundWrites {
    want: Arc<(Mutex<Want>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl BackgroundWrites {
    /// Start the thread that finishes `io`'s work; `None` if it cannot be
    /// started (requests then finish their own work, as before).
    pub(crate) fn start(io: Arc<dyn DeferredIo>) -> Option<Self> {
        let want: Arc<(Mutex<Want>, Condvar)> = Arc::default();
        let w = want.clone();
        let thread = std::thread::Builder::new()
            .name("lsfs-writer".into())
            .spawn(move || serve(&w, io.as_ref()))
            .map_err(|e| tracing::warn!("no background writer thread: {e}"))
            .ok()?;
        Some(BackgroundWrites {
            want,
            thread: Some(thread),
        })
    }

    /// Have the work up to `ticket` finished soon; returns at once.
    pub(crate) fn finish_later(&self, ticket: u64) {
        let (m, cv) = &*self.want;
        let mut w = m.lock().unwrap_or_else(|p| p.into_inner());
        if ticket > w.ticket {
            w.ticket = ticket;
            cv.notify_one();
        }
    }
}

fn serve(want: &(Mutex<Want>, Condvar), io: &dyn DeferredIo) {
    let (m, cv) = want;
    let mut done = 0;
    loop {
        let ticket = {
            let mut w = m.lock().unwrap_or_else(|p| p.into_inner());
            while w.ticket <= done && !w.stop {
                w = cv.wait(w).unwrap_or_else(|p| p.into_inner());
            }
            if w.ticket <= done {
                return; // stopped with nothing left
            }
            w.ticket
        };
        // An error is the queue's to keep (it latches and logs); whoever
        // needs the work next gets it.
        let _ = io.finish(ticket);
        done = ticket;
    }
}

impl Drop for BackgroundWrites {
    /// Finish what was handed over, then stop.
    fn drop(&mut self) {
        {
            let (m, cv) = &*self.want;
            m.lock().unwrap_or_else(|p| p.into_inner()).stop = true;
            cv.notify_one();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lsfs_vfs::VfsResult;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    /// Records the highest ticket finished; finishing takes a while.
    #[derive(Default)]
    struct SlowIo {
        finished: AtomicU64,
    }

    impl DeferredIo for SlowIo {
        fn last_ticket(&self) -> u64 {
            0
        }
        fn finish(&self, ticket: u64) -> VfsResult<()> {
            std::thread::sleep(Duration::from_millis(20));
            self.finished.fetch_max(ticket, Ordering::SeqCst);
            Ok(())
        }
    }

    #[test]
    fn handing_over_returns_at_once_and_the_work_gets_done() {
        let io = Arc::new(SlowIo::default());
        let bg = BackgroundWrites::start(io.clone()).unwrap();
        let t0 = Instant::now();
        for t in 1..=5 {
            bg.finish_later(t);
        }
        assert!(
            t0.elapsed() < Duration::from_millis(20),
            "finish_later waited"
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while io.finished.load(Ordering::SeqCst) < 5 {
            assert!(Instant::now() < deadline, "ticket 5 never finished");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn dropping_finishes_what_was_handed_over() {
        let io = Arc::new(SlowIo::default());
        let bg = BackgroundWrites::start(io.clone()).unwrap();
        bg.finish_later(7);
        drop(bg);
        assert_eq!(io.finished.load(Ordering::SeqCst), 7);
    }
}
