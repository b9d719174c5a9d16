//! Polling a queue's completion queue while requests come, instead of
//! sleeping in `io_uring_enter` between them.
//!
//! A queue thread that waits in `submit_and_wait(1)` sleeps between
//! requests, and its CPU may go idle; waking an idle virtual CPU is what
//! costs on a VM (docs/PERFORMANCE.md). So, like `spin.rs` for
//! `/dev/fuse`, while requests keep coming within a window
//! (`--ring-spin-us`; 0 never polls, and the front end passes 0 on
//! battery power), the thread submits without waiting and polls; once no
//! request came for a whole window it sleeps in the kernel again, so an
//! idle mount costs nothing.
//!
//! What polling must do to see a request: the kernel does not write the
//! CQE by itself. FUSE's command completes through task work queued on
//! the queue thread (`io_uring_cmd_complete_in_task`), which the thread
//! runs on its next way out of the kernel (the ring is built without
//! DEFER_TASKRUN, so the work is added with TWA_SIGNAL and runs on any
//! return to user space). And the caller runs on this same CPU (the
//! kernel picks the queue by the caller's CPU, and the thread is pinned
//! there), so the thread must give the CPU up between looks or the
//! caller waits for the scheduler's tick to make its next request.
//! `sched_yield()` does both: it lets the caller run, and its return to
//! user space runs the task work that posts the CQE. Measured against it
//! (docs/PERFORMANCE.md): `io_uring_enter(GETEVENTS)` with min_complete
//! 0 instead of the yield (runs the task work, keeps the CPU) was slower
//! than not polling, the two together no better than the yield alone,
//! and a loop that only reads the CQ slower still.
//!
//! A yield costs when other tasks want the CPU: the scheduler then runs
//! them for their slice, and a request that comes meanwhile waits for
//! it, where a thread asleep in the kernel would have been woken and run
//! at once (an untar next to two busy loops took 7.5–7.8 s polling,
//! 5.3–5.9 s without). A CPU that busy does not go idle anyway, so
//! polling has nothing to save there: a yield that took longer than
//! 200 µs (ten requests' worth in an untar) stops polling for 50 ms.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::{cqueue, squeue, IoUring};

use crate::contention::Contention;

/// A yield that took longer than this gave the CPU to another task for
/// about a scheduler slice (0.75 ms times 1 + log2 of the CPUs by
/// default); the caller's own work between two requests is a few
/// microseconds in an untar.
const LONG_YIELD: Duration = Duration::from_micros(200);
/// How long a thread does not poll after a long yield.
const BACK_OFF: Duration = Duration::from_millis(50);

/// A queue thread's polling state.
pub struct Poll {
    window: Duration,
    /// When the latest request came, while polling.
    last: Option<Instant>,
    /// No polling before this: the CPU was busy with other tasks.
    back_off_until: Option<Instant>,
    /// The mount's judge of CPU contention (none: never contended).
    contention: Option<Arc<Contention>>,
}

impl Poll {
    /// Poll for `window` after each request, unless `contention` says
    /// the CPUs are contended; zero never polls.
    pub fn new(window: Duration, contention: Option<Arc<Contention>>) -> Poll {
        Poll {
            window,
            last: None,
            back_off_until: None,
            contention,
        }
    }

    /// A request came.
    pub fn on_request(&mut self) {
        if self.window.is_zero() {
            return;
        }
        let now = Instant::now();
        if self.back_off_until.is_some_and(|t| now < t) {
            return;
        }
        self.back_off_until = None;
        if let Some(c) = &self.contention {
            if c.holding() {
                return;
            }
            if !self.polling() {
                c.started();
            }
        }
        self.last = Some(now);
    }

    /// Called on the queue's own thread: its waits for the CPU, while it
    /// yields to its caller, are of its own making, not contention.
    pub fn register_thread(&self) {
        if let Some(c) = self.contention.as_ref().filter(|_| !self.window.is_zero()) {
            c.register_current_thread();
        }
    }

    /// Whether the mount's pollers should stop: the CPUs are contended.
    fn contended(&self) -> bool {
        self.contention.as_ref().is_some_and(|c| c.contended())
    }

    /// A yield took `took`: whether to go on polling. A long one means
    /// another task wanted this CPU, so it does not go idle and polling
    /// saves nothing; and having yielded, this thread waits behind that
    /// task for its slice when the next request comes, where a thread
    /// woken from sleep would run at once.
    fn yielded(&mut self, took: Duration) -> bool {
        if took <= LONG_YIELD {
            return true;
        }
        self.back_off_until = Some(Instant::now() + BACK_OFF);
        false
    }

    fn polling(&self) -> bool {
        self.last.is_some_and(|t| t.elapsed() < self.window)
    }

    /// Submit what is queued and wait for at least one completion:
    /// polling while the latest request is within the window, sleeping in
    /// the kernel after.
    pub fn submit_and_wait(
        &mut self,
        ring: &mut IoUring<squeue::Entry128, cqueue::Entry>,
    ) -> io::Result<()> {
        if self.polling() {
            ring.submit()?;
            while self.polling() {
                if !ring.completion().is_empty() {
                    return Ok(());
                }
                let t = Instant::now();
                // SAFETY: sched_yield takes nothing.
                unsafe { libc::sched_yield() };
                if !self.yielded(t.elapsed()) || self.contended() {
                    break;
                }
            }
            self.last = None;
        }
        ring.submit_and_wait(1)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use io_uring::opcode;

    fn ring() -> Option<IoUring<squeue::Entry128, cqueue::Entry>> {
        // io_uring may be off (kernel.io_uring_disabled) where tests run.
        IoUring::builder().build(4).ok()
    }

    fn nop(ring: &mut IoUring<squeue::Entry128, cqueue::Entry>) {
        let sqe = opcode::Nop::new().build().user_data(7).into();
        // SAFETY: a NOP names no buffer.
        unsafe { ring.submission().push(&sqe).unwrap() };
    }

    /// A request starts polling, which finds the completion; a quiet
    /// window ends it, and the wait then sleeps in the kernel (and still
    /// returns the completion).
    #[test]
    fn polls_within_the_window_and_sleeps_after() {
        let Some(mut ring) = ring() else { return };
        let mut p = Poll::new(Duration::from_millis(20), None);
        assert!(!p.polling(), "no request yet");
        p.on_request();
        assert!(p.polling());
        nop(&mut ring);
        p.submit_and_wait(&mut ring).unwrap();
        assert_eq!(ring.completion().map(|c| c.user_data()).sum::<u64>(), 7);
        std::thread::sleep(Duration::from_millis(30));
        assert!(!p.polling(), "a quiet window ends polling");
        nop(&mut ring);
        p.submit_and_wait(&mut ring).unwrap();
        assert_eq!(ring.completion().count(), 1);
    }

    /// A long yield stops polling, and requests do not start it again
    /// until the back-off is over.
    #[test]
    fn a_long_yield_backs_off() {
        let mut p = Poll::new(Duration::from_secs(10), None);
        p.on_request();
        assert!(p.yielded(Duration::from_micros(5)), "a short yield");
        assert!(!p.yielded(LONG_YIELD * 2), "a long yield");
        p.last = None;
        p.on_request();
        assert!(!p.polling(), "no polling during the back-off");
        std::thread::sleep(BACK_OFF + Duration::from_millis(5));
        p.on_request();
        assert!(p.polling(), "polling again after it");
    }

    #[test]
    fn a_zero_window_never_polls() {
        let mut p = Poll::new(Duration::ZERO, None);
        p.on_request();
        assert!(!p.polling());
    }

    /// Contention stops polling and keeps it off while its hold lasts,
    /// for every queue of the mount.
    #[test]
    fn contention_stops_every_queue() {
        let Some(mut ring) = ring() else { return };
        let (c, stall) = crate::contention::tests::fake();
        let mut a = Poll::new(Duration::from_secs(10), Some(c.clone()));
        let mut b = Poll::new(Duration::from_secs(10), Some(c.clone()));
        a.on_request();
        assert!(a.polling());
        // Every look of the pressure finds the CPUs stalled all the time.
        let start = Instant::now();
        while !c.holding() {
            assert!(start.elapsed() < Duration::from_secs(2), "no hold");
            std::thread::sleep(Duration::from_millis(1));
            stall.fetch_add(2_000, std::sync::atomic::Ordering::Relaxed);
            c.contended();
        }
        // Polling ends at the next look, and the wait sleeps in the kernel
        // until the completion comes.
        let ts = io_uring::types::Timespec::new().nsec(30_000_000);
        let sqe = opcode::Timeout::new(&ts).build().user_data(9).into();
        // SAFETY: `ts` outlives the wait for the timeout's completion.
        unsafe { ring.submission().push(&sqe).unwrap() };
        a.submit_and_wait(&mut ring).unwrap();
        assert!(!a.polling(), "a contended poller kept polling");
        assert_eq!(ring.completion().count(), 1);
        b.on_request();
        assert!(
            !b.polling(),
            "another queue started polling during the hold"
        );
    }
}
