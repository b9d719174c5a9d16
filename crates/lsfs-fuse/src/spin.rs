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
//! **Not while the CPUs are contended.** Polling spends a CPU to spare an
//! idle one a wake-up. When other threads are waiting for a CPU (several
//! processes fsyncing at once on two cores: fio's four jobs, the fsync
//! workers and the polling thread), it takes the CPU they need instead:
//! four jobs of 4 KiB random writes with an fsync each ran at 5,700–6,200
//! IOPS polling and 7,500–7,900 not. The governor watches the kernel's CPU
//! pressure (`/proc/pressure/cpu`, the time some runnable task waited for
//! a CPU): when, while polling, that was more than [`CONTENDED`] of
//! [`CONTENDED_SAMPLES`] samples of [`PRESSURE_SAMPLE`] in a row, it stops
//! polling and does not start again for a hold of [`CONTENDED_HOLD`]; the
//! pressure during the hold decides the next, which doubles while the
//! contention lasts (up to [`CONTENDED_HOLD_MAX`]). One process making
//! requests one at a time (an untar: 4 % of the time, against 39 % for
//! the four jobs) polls as before, but for a short hold when a burst of
//! the kernel's own threads (writeback) contends for long enough. Without
//! pressure accounting (a kernel built without it, or booted with
//! `psi=0`) it polls as before too.
//!
//! `O_NONBLOCK` is a flag of the open file description, so the governor
//! sets it through its own duplicate of the session's descriptor (never a
//! number that could be closed and reused under it).

use crate::counters::RequestCounters;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// The share of a sample of time in which some runnable task waited for a
/// CPU above which polling stops.
pub const CONTENDED: f64 = 0.25;
/// How long the CPU pressure is measured before it is judged.
pub const PRESSURE_SAMPLE: Duration = Duration::from_millis(20);
/// Short samples in a row over [`CONTENDED`] that make contention.
pub const CONTENDED_SAMPLES: u32 = 3;
/// How long polling stays off once the CPUs were found contended; each
/// hold found contended too doubles the next, up to [`CONTENDED_HOLD_MAX`].
pub const CONTENDED_HOLD: Duration = Duration::from_millis(100);
pub const CONTENDED_HOLD_MAX: Duration = Duration::from_millis(1600);

/// The kernel's cumulative CPU stall time (`/proc/pressure/cpu`, the
/// `total=` microseconds of its `some` line).
enum CpuPressure {
    File(File),
    /// A counter the tests advance.
    #[cfg(test)]
    Fake(Arc<AtomicU64>),
}

impl CpuPressure {
    fn open() -> Option<CpuPressure> {
        let p = CpuPressure::File(File::open("/proc/pressure/cpu").ok()?);
        p.stall_us().map(|_| p)
    }

    fn stall_us(&self) -> Option<u64> {
        match self {
            CpuPressure::File(f) => {
                let mut buf = [0u8; 256];
                let n = f.read_at(&mut buf, 0).ok()?;
                parse_some_total(std::str::from_utf8(&buf[..n]).ok()?)
            }
            #[cfg(test)]
            CpuPressure::Fake(us) => Some(us.load(Ordering::Relaxed)),
        }
    }
}

/// `total=` of the `some` line of a pressure file.
fn parse_some_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("total="))?
        .parse()
        .ok()
}

/// Where the current pressure sample started (ns since the epoch, and the
/// stall time then), how many samples before it in a row were over the
/// mark, and the hold this sample spans (ns; 0 when it spans none).
#[derive(Clone, Copy)]
struct Sample {
    at: u64,
    stall_us: u64,
    over: u32,
    hold: u64,
}

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
    /// Where spells of spinning and holds are counted (`lsfs stats`).
    counters: Arc<RequestCounters>,
    /// No spinning before this (ns since `epoch`): the CPUs were contended.
    hold_until: AtomicU64,
    pressure: Option<CpuPressure>,
}

impl Spinner {
    /// A spinner over `fd` (a duplicate of the session's descriptor), and
    /// its governor thread, which ends after [`Spinner::stop`].
    pub fn start(
        fd: OwnedFd,
        window: Duration,
        counters: Arc<RequestCounters>,
    ) -> std::io::Result<Arc<Spinner>> {
        Self::start_with(fd, window, counters, CpuPressure::open())
    }

    fn start_with(
        fd: OwnedFd,
        window: Duration,
        counters: Arc<RequestCounters>,
        pressure: Option<CpuPressure>,
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
            counters,
            hold_until: AtomicU64::new(0),
            pressure,
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
        if self.spinning.load(Ordering::Relaxed) || now < self.hold_until.load(Ordering::Relaxed) {
            return;
        }
        let mut on = self.state.lock().unwrap();
        if !*on && !self.stop.load(Ordering::Relaxed) {
            self.set_nonblocking(true);
            *on = true;
            self.spinning.store(true, Ordering::Relaxed);
            self.counters.count_polling_spell();
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
        let mut sample: Option<Sample> = None;
        // When spinning last stopped.
        let mut stopped = 0;
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return;
            }
            if !*on {
                on = self.wake.wait(on).unwrap();
                // The sample runs on across short spells of sleeping (under
                // contention requests still come in spells shorter than a
                // sample, each ended by a wait for the device) and across a
                // hold (the pressure during it decides the next); after a
                // longer quiet spell the next is judged on its own.
                let slept = self.now().saturating_sub(stopped);
                let held = sample.is_some_and(|s| s.hold > 0);
                if *on && !held && slept >= PRESSURE_SAMPLE.as_nanos() as u64 {
                    sample = None;
                }
                continue;
            }
            let (g, _) = self.wake.wait_timeout(on, self.window).unwrap();
            on = g;
            if !*on {
                continue;
            }
            let now = self.now();
            let since_last = now.saturating_sub(self.last.load(Ordering::Relaxed));
            let quiet = since_last >= self.window.as_nanos() as u64;
            if quiet || self.contended(now, &mut sample) {
                self.set_nonblocking(false);
                *on = false;
                self.spinning.store(false, Ordering::Relaxed);
                stopped = now;
            }
        }
    }

    /// Whether the CPUs were contended over the pressure sample that ends
    /// now (false until one has run for [`PRESSURE_SAMPLE`]); if so,
    /// spinning stays off until `hold_until`.
    fn contended(&self, now: u64, sample: &mut Option<Sample>) -> bool {
        // Read the file only once a sample is over: the kernel adds up the
        // stall of each read's interval weighted by whole ticks of busy
        // time, so reads a millisecond apart would count (for every reader
        // of the file) nearly none of it.
        if sample.is_some_and(|s| now.saturating_sub(s.at) < PRESSURE_SAMPLE.as_nanos() as u64) {
            return false;
        }
        let Some(stall_us) = self.pressure.as_ref().and_then(|p| p.stall_us()) else {
            return false;
        };
        let Some(sample) = sample else {
            *sample = Some(Sample {
                at: now,
                stall_us,
                over: 0,
                hold: 0,
            });
            return false;
        };
        let elapsed_us = now.saturating_sub(sample.at) / 1000;
        let share = stall_us.saturating_sub(sample.stall_us) as f64 / elapsed_us as f64;
        (sample.at, sample.stall_us) = (now, stall_us);
        // Short samples over the mark may be a burst of the kernel's own
        // threads (writeback under an untar): a few in a row, or one that
        // spans a hold just ended, are contention.
        let spans_hold = sample.hold > 0 && elapsed_us * 1000 >= sample.hold;
        sample.over = if share > CONTENDED {
            sample.over + 1
        } else {
            0
        };
        if sample.over < CONTENDED_SAMPLES && !(spans_hold && sample.over > 0) {
            sample.hold = 0;
            return false;
        }
        let max = CONTENDED_HOLD_MAX.as_nanos() as u64;
        let hold = if spans_hold {
            (sample.hold * 2).min(max)
        } else {
            CONTENDED_HOLD.as_nanos() as u64
        };
        sample.hold = hold;
        sample.over = 0;
        self.counters.count_polling_hold();
        self.hold_until.store(now + hold, Ordering::Relaxed);
        tracing::debug!(
            "CPUs contended ({:.0} % stalled): not polling for {} ms",
            share * 100.0,
            hold / 1_000_000
        );
        true
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

    #[test]
    fn the_stall_total_is_read_from_the_some_line() {
        let text = "some avg10=5.93 avg60=11.60 avg300=8.72 total=796075799\n\
                    full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(parse_some_total(text), Some(796075799));
        assert_eq!(parse_some_total("full avg10=0.00 total=5\n"), None);
        assert_eq!(parse_some_total("some avg10=0.00 total=x\n"), None);
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
        let stall = Arc::new(AtomicU64::new(0));
        let window = Duration::from_millis(50);
        let pressure = Some(CpuPressure::Fake(stall.clone()));
        let s = Spinner::start_with(r, window, Arc::default(), pressure).unwrap();
        requests(&s, &stall, 0.1, 200);
        assert!(nonblocking(&probe), "a light stall stopped polling");
        assert_eq!(s.counters.polling_holds(), 0);
        let start = Instant::now();
        while nonblocking(&probe) {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "contention did not stop polling"
            );
            requests(&s, &stall, 0.6, 1);
        }
        assert_eq!(s.counters.polling_holds(), 1);
        let held = s.hold_until.load(Ordering::Relaxed);
        while s.now() + 5_000_000 < held {
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
        let s = Spinner::start_with(r, Duration::from_millis(20), Arc::default(), None).unwrap();
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
        assert_eq!(s.counters.polling_spells(), 2);
        s.stop();
        assert!(!nonblocking(&probe), "stop leaves it blocking");
        s.on_request();
        assert!(!nonblocking(&probe), "nothing starts after stop");
    }
}
