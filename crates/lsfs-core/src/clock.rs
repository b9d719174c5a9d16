//! The engine's one source of time: wall time for timestamps (inodes,
//! checkpoints, segment ages) and a monotonic reading for intervals (the
//! checkpoint interval, the cleaner's idle time, rate bounds).
//!
//! A mount reads the system's clocks. A test or a simulation sets the clock
//! (`set_secs`) and moves it on (`advance`) itself: from then on every
//! reading, wall and monotonic, comes from that one value, so a run does
//! the same thing however fast the machine is. Clones share the setting
//! (the store, the cleaner and the mount see one clock).
//!
//! Real waits are not clock readings and stay on `std::time`: a device
//! gate's patience, a lock taken with retries.

use lsfs_vfs::Timespec;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(Clone, Debug)]
pub struct Clock {
    /// Nanoseconds since the epoch, once set; [`UNSET`] reads the system.
    /// An atomic rather than a mutex: every timestamp and interval of the
    /// engine reads it, from several threads.
    set: Arc<AtomicU64>,
}

/// The value of [`Clock::set`] while the clock reads the system (about the
/// year 2554, far past any time a test sets).
const UNSET: u64 = u64::MAX;

impl Default for Clock {
    fn default() -> Self {
        Clock {
            set: Arc::new(AtomicU64::new(UNSET)),
        }
    }
}

/// Monotonic readings of the system clock count from the first one.
fn system_base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

impl Clock {
    /// The system's clocks.
    pub fn system() -> Clock {
        Clock::default()
    }

    /// A clock that stands at `secs` since the epoch until moved.
    pub fn at_secs(secs: u64) -> Clock {
        let c = Clock::default();
        c.set_secs(secs);
        c
    }

    fn fixed(&self) -> Option<Duration> {
        match self.set.load(Ordering::Relaxed) {
            UNSET => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    fn store(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos())
            .unwrap_or(UNSET - 1)
            .min(UNSET - 1);
        self.set.store(ns, Ordering::Relaxed);
    }

    /// Wall time since the epoch.
    pub fn since_epoch(&self) -> Duration {
        self.fixed().unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
        })
    }

    /// Wall time, whole seconds since the epoch.
    pub fn secs(&self) -> u64 {
        self.since_epoch().as_secs()
    }

    /// Wall time as an inode timestamp.
    pub fn now(&self) -> Timespec {
        let d = self.since_epoch();
        Timespec {
            sec: d.as_secs() as i64,
            nsec: d.subsec_nanos(),
        }
    }

    /// A monotonic reading, for intervals: the time between two readings
    /// never goes backwards. A set clock reads its own time.
    pub fn mono(&self) -> Duration {
        self.fixed()
            .unwrap_or_else(|| Instant::now().duration_since(system_base()))
    }

    /// Whole seconds from the monotonic reading `since` to now.
    pub fn secs_since(&self, since: Duration) -> u64 {
        self.mono().saturating_sub(since).as_secs()
    }

    /// Stop reading the system: the clock stands at `secs` since the epoch.
    pub fn set_secs(&self, secs: u64) {
        self.store(Duration::from_secs(secs));
    }

    /// Move a set clock on by `d`; a clock that reads the system is set
    /// first, at the system's time.
    pub fn advance(&self, d: Duration) {
        let now = self.since_epoch();
        self.store(now + d);
    }

    /// Whether the clock was set (a test or a simulation drives it).
    pub fn is_set(&self) -> bool {
        self.fixed().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_clock_moves_only_when_told_and_clones_share_it() {
        let c = Clock::at_secs(1_000);
        let d = c.clone();
        let m0 = c.mono();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!((c.secs(), c.mono()), (1_000, m0));
        d.advance(Duration::from_millis(2_500));
        assert_eq!(c.secs(), 1_002);
        assert_eq!(c.now().nsec, 500_000_000);
        assert_eq!(c.secs_since(m0), 2);
    }

    #[test]
    fn the_system_clock_moves_forward() {
        let c = Clock::system();
        assert!(!c.is_set());
        let m0 = c.mono();
        std::thread::sleep(Duration::from_millis(20));
        assert!(c.mono() >= m0 + Duration::from_millis(20));
        assert!(c.secs() > 1_700_000_000);
    }
}
