//! Polling `/dev/fuse` while requests come fast, instead of sleeping in
//! read() between them.
//!
//! Every FUSE request costs two wake-ups: the kernel wakes the server when
//! the request is queued, and wakes the caller when the reply is written.
//! When the server sleeps on another CPU than the caller, the first one is
//! a cross-CPU wake-up of an idle CPU, which on virtual machines costs a
//! trip through the hypervisor: measured on a 2-CPU VM, a `tar x` of 16,000
//! files took 10.4 s through the mount, 2.8 s with tar and the server
//! pinned to one CPU, and 4.5–4.9 s with the server polling (the caller's
//! wake-up is the half that polling cannot remove).
//!
//! So while requests keep coming, the device file is non-blocking: the
//! server's loop (fuser retries EAGAIN) spins on read() and finds the next
//! request without being woken. A governor thread turns that off once no
//! request came for a whole window (`--spin-us`), and the next request
//! turns it on again: a mount that is idle sleeps as before, and one busy
//! server thread costs at most one CPU while requests arrive and for one
//! or two windows after the last. The front end passes a window of 0
//! (never spin) on battery power.
//!
//! **Not while the CPUs are contended** (`contention.rs`): the governor
//! stops polling when other threads wait for a CPU, and a hold keeps it
//! off while requests come.
//!
//! `O_NONBLOCK` is a flag of the open file description, so the governor
//! sets it through its own duplicate of the session's descriptor (never a
//! number that could be closed and reused under it).

use crate::contention::Contention;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Spins the server while requests arrive within `window` of each other.
pub struct Spinner {
    fd: OwnedFd,
    window: Duration,
    epoch: Instant,
    /// Nanoseconds since `epoch` of the latest request.
    last: AtomicU64,
    /// The device file is non-blocking (the fast path reads only this).
    spinning: AtomicBool,
    /// Held across every change of the flag; the governor waits on it.
    state: Mutex<bool>,
    wake: Condvar,
    stop: AtomicBool,
    /// Whether the CPUs are contended (shared with the ring's queues).
    contention: Arc<Contention>,
}

impl Spinner {
    /// A spinner over `fd` (a duplicate of the session's descriptor), and
    /// its governor thread, which ends after [`Spinner::stop`].
    pub fn start(
        fd: OwnedFd,
        window: Duration,
        contention: Arc<Contention>,
    ) -> std::io::Result<Arc<Spinner>> {
        let s = Arc::new(Spinner {
            fd,
            window,
            epoch: Instant::now(),
            last: AtomicU64::new(0),
            spinning: AtomicBool::new(false),
            state: Mutex::new(false),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
            contention,
        });
        let g = s.clone();
        thread::Builder::new()
            .name("lsfs-spin".into())
            .spawn(move || g.govern())?;
        Ok(s)
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// A request arrived: keep spinning, or start.
    pub fn on_request(&self) {
        let now = self.now();
        self.last.store(now, Ordering::Relaxed);
        if self.spinning.load(Ordering::Relaxed) || self.contention.holding() {
            return;
        }
        let mut on = self.state.lock().unwrap();
        if !*on && !self.stop.load(Ordering::Relaxed) {
            self.set_nonblocking(true);
            *on = true;
            self.spinning.store(true, Ordering::Relaxed);
            self.contention.started();
            self.wake.notify_one();
        }
    }

    /// Stop spinning for good and let the governor end (at unmount).
    pub fn stop(&self) {
        let mut on = self.state.lock().unwrap();
        self.stop.store(true, Ordering::Relaxed);
        if *on {
            self.set_nonblocking(false);
            *on = false;
            self.spinning.store(false, Ordering::Relaxed);
        }
        self.wake.notify_one();
    }

    fn govern(&self) {
        let mut on = self.state.lock().unwrap();
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return;
            }
            if !*on {
                on = self.wake.wait(on).unwrap();
                continue;
            }
            let (g, _) = self.wake.wait_timeout(on, self.window).unwrap();
            on = g;
            if !*on {
                continue;
            }
            let since_last = self.now().saturating_sub(self.last.load(Ordering::Relaxed));
            let quiet = since_last >= self.window.as_nanos() as u64;
            if quiet || self.contention.contended() {
                self.set_nonblocking(false);
                *on = false;
                self.spinning.store(false, Ordering::Relaxed);
            }
        }
    }

    fn set_nonblocking(&self, on: bool) {
        let fd = self.fd.as_raw_fd();
        // SAFETY: fcntl on a descriptor this struct owns.
        unsafe {
            let fl = libc::fcntl(fd, libc::F_GETFL);
            if fl >= 0 {
                let want = if on {
                    fl | libc::O_NONBLOCK
                } else {
                    fl & !libc::O_NONBLOCK
                };
                if want != fl {
                    libc::fcntl(fd, libc::F_SETFL, want);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::RequestCounters;
    use std::os::fd::FromRawFd;

    fn nonblocking(fd: &OwnedFd) -> bool {
        // SAFETY: F_GETFL on a descriptor we own reads its flags only.
        unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) & libc::O_NONBLOCK != 0 }
    }

    fn pipe() -> (OwnedFd, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: pipe writes two descriptors into an array of two.
        let rc = unsafe { libc::pipe(fds.as_mut_ptr()) };
        assert_eq!(rc, 0);
        // SAFETY: the two descriptors are new and owned by nothing else.
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
    }

    /// Requests every millisecond for `ms` milliseconds while the stall
    /// counter grows by `stall_share` of the time.
    fn requests(s: &Spinner, stall: &AtomicU64, stall_share: f64, ms: u64) {
        let start = Instant::now();
        let mut last = start;
        while start.elapsed() < Duration::from_millis(ms) {
            s.on_request();
            thread::sleep(Duration::from_millis(1));
            let now = Instant::now();
            let us = now.duration_since(last).as_micros() as f64;
            stall.fetch_add((us * stall_share) as u64, Ordering::Relaxed);
            last = now;
        }
    }

    /// Polling stops while the CPUs are contended, stays off for the hold
    /// even as requests come, and comes back after it; a light stall never
    /// stops it.
    #[test]
    fn contended_cpus_stop_polling_for_a_while() {
        let (r, _w) = pipe();
        let probe = r.try_clone().unwrap();
        let (contention, stall) = crate::contention::tests::fake();
        let s = Spinner::start(r, Duration::from_millis(50), contention.clone()).unwrap();
        requests(&s, &stall, 0.1, 200);
        assert!(nonblocking(&probe), "a light stall stopped polling");
        assert!(!contention.holding());
        let start = Instant::now();
        while nonblocking(&probe) {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "contention did not stop polling"
            );
            requests(&s, &stall, 0.6, 1);
        }
        assert!(contention.holding());
        while contention.hold_left() > Duration::from_millis(5) {
            s.on_request();
            assert!(!nonblocking(&probe), "polling came back during the hold");
            thread::sleep(Duration::from_millis(1));
        }
        thread::sleep(Duration::from_millis(10));
        s.on_request();
        assert!(
            nonblocking(&probe),
            "polling did not come back after the hold"
        );
        s.stop();
    }

    /// A request turns polling on; a quiet window turns it off; stop leaves
    /// the descriptor blocking.
    #[test]
    fn spins_while_requests_come_and_sleeps_after() {
        let (r, _w) = pipe();
        let probe = r.try_clone().unwrap();
        let counters = Arc::new(RequestCounters::default());
        let contention = Contention::with_pressure(counters.clone(), None);
        let s = Spinner::start(r, Duration::from_millis(20), contention).unwrap();
        assert!(!nonblocking(&probe));
        s.on_request();
        assert!(nonblocking(&probe), "a request starts polling");
        for _ in 0..5 {
            thread::sleep(Duration::from_millis(5));
            s.on_request();
        }
        assert!(nonblocking(&probe), "requests within the window keep it");
        thread::sleep(Duration::from_millis(100));
        assert!(!nonblocking(&probe), "a quiet window ends it");
        s.on_request();
        assert!(nonblocking(&probe));
        assert_eq!(counters.polling_spells(), 2);
        s.stop();
        assert!(!nonblocking(&probe), "stop leaves it blocking");
        s.on_request();
        assert!(!nonblocking(&probe), "nothing starts after stop");
    }
}
