//! Whether the CPUs are contended: the rule both pollers follow (`spin.rs`
//! for `/dev/fuse`, `uring/poll.rs` for the ring's queues).
//!
//! Polling spends a CPU to spare an idle one a wake-up. When other threads
//! are waiting for a CPU (several processes fsyncing at once on two cores:
//! fio's four jobs, the fsync workers and the polling thread), it takes the
//! CPU they need instead: four jobs of 4 KiB random writes with an fsync
//! each ran at 5,700–6,200 IOPS polling `/dev/fuse` and 7,500–7,900 not;
//! a ring queue thread that yields between looks hands its CPU to a busy
//! task for a whole slice, and the request that comes meanwhile waits.
//!
//! The kernel's CPU pressure (`/proc/pressure/cpu`, the time some runnable
//! task waited for a CPU) says when: when, while polling, that was more
//! than [`CONTENDED`] of [`CONTENDED_SAMPLES`] samples of
//! [`PRESSURE_SAMPLE`] in a row, polling stops and does not start again
//! for a hold of [`CONTENDED_HOLD`]; the pressure during the hold decides
//! the next, which doubles while the contention lasts (up to
//! [`CONTENDED_HOLD_MAX`]). One process making requests one at a time (an
//! untar: 4 % of the time, against 39 % for the four jobs) polls as
//! before, but for a short hold when a burst of the kernel's own threads
//! (writeback) contends for long enough. Without pressure accounting (a
//! kernel built without it, or booted with `psi=0`) nothing is ever
//! contended.
//!
//! One per mount, shared by its pollers: every read of the pressure file
//! ends the kernel's averaging interval for all its readers, so several
//! readers at their own pace would each see less of the stall.
//!
//! A ring queue's poller runs on its caller's CPU and yields to it between
//! looks, so it waits for that CPU whenever the caller runs: a stall of
//! its own making, which on an idle machine put an untar past a quarter
//! of stalled time (3.2–3.3 s with holds against 2.7–2.8 s polling
//! throughout). Such pollers register their threads, and the time they
//! waited for a CPU (`/proc/thread-self/schedstat`) is taken off the
//! stall before it is judged. Their sum may take off more than their share
//! when both CPUs are busy (the kernel's figure averages the busy CPUs);
//! taking the largest instead measured the same (no holds either way with
//! four fsyncing jobs through the ring, whose fsyncs block the queues).

use crate::counters::RequestCounters;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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
pub(crate) enum CpuPressure {
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

/// Where the current pressure sample started (ns since the epoch, the
/// stall time and the registered threads' waits then), how many samples
/// before it in a row were over the mark, and the hold this sample spans
/// (ns; 0 when it spans none).
#[derive(Clone, Copy)]
struct Sample {
    at: u64,
    stall_us: u64,
    own_wait_ns: u64,
    over: u32,
    hold: u64,
}

/// The time a thread waited for a CPU, in ns: the second field of its
/// `schedstat`.
fn run_delay_ns(f: &File) -> Option<u64> {
    let mut buf = [0u8; 128];
    let n = f.read_at(&mut buf, 0).ok()?;
    std::str::from_utf8(&buf[..n])
        .ok()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The CPU contention a mount's pollers judge polling by.
pub struct Contention {
    epoch: Instant,
    pressure: Option<CpuPressure>,
    sample: Mutex<Option<Sample>>,
    /// No polling before this (ns since `epoch`): the CPUs were contended.
    hold_until: AtomicU64,
    /// When some poller last asked [`Contention::contended`] (ns).
    last_asked: AtomicU64,
    /// `schedstat` of the threads whose waits are their own doing.
    own: Mutex<Vec<File>>,
    /// Where spells of polling and holds are counted (`lsfs stats`).
    counters: Arc<RequestCounters>,
}

impl Contention {
    /// Judged by `/proc/pressure/cpu` (never contended without it).
    pub fn new(counters: Arc<RequestCounters>) -> Arc<Contention> {
        Self::with_pressure(counters, CpuPressure::open())
    }

    pub(crate) fn with_pressure(
        counters: Arc<RequestCounters>,
        pressure: Option<CpuPressure>,
    ) -> Arc<Contention> {
        Arc::new(Contention {
            epoch: Instant::now(),
            pressure,
            sample: Mutex::new(None),
            hold_until: AtomicU64::new(0),
            last_asked: AtomicU64::new(0),
            own: Mutex::new(Vec::new()),
            counters,
        })
    }

    /// The calling thread waits for a CPU by its own doing (it yields to
    /// its caller): its waits are not contention.
    pub fn register_current_thread(&self) {
        match File::open("/proc/thread-self/schedstat") {
            Ok(f) if run_delay_ns(&f).is_some() => self.own.lock().unwrap().push(f),
            // Then its waits count as everyone's: it polls less, no worse.
            _ => tracing::debug!("no schedstat for this thread: its waits count as stall"),
        }
    }

    /// What the registered threads have waited for a CPU so far, in ns.
    fn own_wait_ns(&self) -> u64 {
        let own = self.own.lock().unwrap();
        own.iter().filter_map(run_delay_ns).sum()
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Polling stays off for now: a hold is running.
    pub fn holding(&self) -> bool {
        self.now() < self.hold_until.load(Ordering::Relaxed)
    }

    /// How long the running hold has left (zero when none runs).
    #[cfg(test)]
    pub(crate) fn hold_left(&self) -> Duration {
        let until = self.hold_until.load(Ordering::Relaxed);
        Duration::from_nanos(until.saturating_sub(self.now()))
    }

    /// A poller starts a spell of polling (counted). After a quiet spell
    /// the next sample is judged on its own; but the sample runs on across
    /// short spells of sleeping (under contention requests still come in
    /// spells shorter than a sample, each ended by a wait for the device)
    /// and across a hold (the pressure during it decides the next).
    pub fn started(&self) {
        self.counters.count_polling_spell();
        let quiet = self
            .now()
            .saturating_sub(self.last_asked.load(Ordering::Relaxed));
        if quiet < PRESSURE_SAMPLE.as_nanos() as u64 {
            return;
        }
        let mut s = self.sample.lock().unwrap();
        if s.is_some_and(|s| s.hold == 0) {
            *s = None;
        }
    }

    /// Asked while polling, as often as a poller likes: whether the CPUs
    /// are contended, judged over the pressure sample that ends now (false
    /// until one has run for [`PRESSURE_SAMPLE`]); if so, a hold starts
    /// and polling stays off until it ends.
    pub fn contended(&self) -> bool {
        let now = self.now();
        self.last_asked.store(now, Ordering::Relaxed);
        if now < self.hold_until.load(Ordering::Relaxed) {
            return true;
        }
        // Another poller is judging the same sample.
        let Ok(mut sample) = self.sample.try_lock() else {
            return false;
        };
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
        let own_wait_ns = self.own_wait_ns();
        let Some(sample) = sample.as_mut() else {
            *sample = Some(Sample {
                at: now,
                stall_us,
                own_wait_ns,
                over: 0,
                hold: 0,
            });
            return false;
        };
        let elapsed_us = now.saturating_sub(sample.at) / 1000;
        let stalled = stall_us.saturating_sub(sample.stall_us);
        let own = own_wait_ns.saturating_sub(sample.own_wait_ns) / 1000;
        let share = stalled.saturating_sub(own) as f64 / elapsed_us as f64;
        (sample.at, sample.stall_us, sample.own_wait_ns) = (now, stall_us, own_wait_ns);
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
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::thread;

    #[test]
    fn the_stall_total_is_read_from_the_some_line() {
        let text = "some avg10=5.93 avg60=11.60 avg300=8.72 total=796075799\n\
                    full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(parse_some_total(text), Some(796075799));
        assert_eq!(parse_some_total("full avg10=0.00 total=5\n"), None);
        assert_eq!(parse_some_total("some avg10=0.00 total=x\n"), None);
    }

    /// A contention judged by a stall counter the test advances.
    pub(crate) fn fake() -> (Arc<Contention>, Arc<AtomicU64>) {
        let stall = Arc::new(AtomicU64::new(0));
        let c = Contention::with_pressure(Arc::default(), Some(CpuPressure::Fake(stall.clone())));
        (c, stall)
    }

    /// Asks every millisecond for `ms` milliseconds while the stall counter
    /// grows by `share` of the time; whether it was ever contended.
    fn poll_for(c: &Contention, stall: &AtomicU64, share: f64, ms: u64) -> bool {
        let start = Instant::now();
        let mut last = start;
        let mut seen = false;
        while start.elapsed() < Duration::from_millis(ms) {
            seen |= c.contended();
            thread::sleep(Duration::from_millis(1));
            let now = Instant::now();
            let us = now.duration_since(last).as_micros() as f64;
            stall.fetch_add((us * share) as u64, Ordering::Relaxed);
            last = now;
        }
        seen
    }

    /// A light stall is never contention; a heavy one is, after a few
    /// samples, and starts a hold; a hold found contended again doubles
    /// the next; without pressure accounting nothing is contended.
    #[test]
    fn heavy_stalls_start_holds_that_double_while_they_last() {
        let (c, stall) = fake();
        assert!(!poll_for(&c, &stall, 0.1, 150), "a light stall");
        assert!(!c.holding());
        assert!(poll_for(&c, &stall, 0.6, 150), "a heavy stall");
        assert!(c.holding());
        assert_eq!(c.counters.polling_holds(), 1);
        let first = c.hold_left();
        assert!(first <= CONTENDED_HOLD, "{first:?}");
        // The stall goes on through the hold: the next is twice as long.
        thread::sleep(first);
        stall.fetch_add(first.as_micros() as u64, Ordering::Relaxed);
        assert!(!c.holding());
        let start = Instant::now();
        while !c.holding() {
            assert!(start.elapsed() < Duration::from_secs(1), "no second hold");
            poll_for(&c, &stall, 0.6, 1);
        }
        assert_eq!(c.counters.polling_holds(), 2);
        assert!(c.hold_left() > CONTENDED_HOLD, "{:?}", c.hold_left());

        let none = Contention::with_pressure(Arc::default(), None);
        assert!(!poll_for(&none, &stall, 1.0, 100));
    }
}
