//! The honest write-amplification figure: bytes the device was asked to
//! write divided by bytes applications asked to store, over the mount's life
//! and over the last minutes. Everything the file system writes counts on
//! the device side (record headers and summaries, metadata, cleaner copies,
//! superblocks); on the application side count the data of `write`, the
//! bytes `fallocate` allocates, and the names, symlink targets and xattrs
//! that namespace and xattr operations store. Truncating, unlinking and
//! changing attributes store nothing new: they count 0 bytes, and what they
//! make the device write still counts on its side.

use std::collections::VecDeque;

/// How far back the recent figure looks.
pub const RECENT_SECS: u64 = 300;
/// One sample per this many seconds at most, so the window holds at most
/// `RECENT_SECS / SAMPLE_SECS + 1` samples (31).
const SAMPLE_SECS: u64 = 10;

/// Counts application bytes and samples both counters for the recent window.
#[derive(Debug, Default)]
pub struct WriteAmpMeter {
    /// Application bytes since mount.
    app_bytes: u64,
    /// Device bytes written before this mount's count began (mkfs, recovery).
    device_base: u64,
    /// (seconds since the epoch, device bytes since mount, app bytes since mount).
    samples: VecDeque<(u64, u64, u64)>,
}

/// What `lsfs stats` and `lsfs gc stats` report first.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct WriteAmp {
    /// Bytes written to the device since mount.
    pub device_bytes: u64,
    /// Bytes applications asked to store since mount.
    pub app_bytes: u64,
    /// device_bytes / app_bytes (none before applications wrote anything).
    pub ratio: Option<f64>,
    /// The same over about the last `recent_secs` seconds.
    pub recent_secs: u64,
    pub recent_device_bytes: u64,
    pub recent_app_bytes: u64,
    pub recent_ratio: Option<f64>,
}

fn ratio(device: u64, app: u64) -> Option<f64> {
    (app > 0).then(|| device as f64 / app as f64)
}

impl WriteAmpMeter {
    /// Start counting: the device has written `device_bytes` so far.
    pub fn start(device_bytes: u64) -> WriteAmpMeter {
        WriteAmpMeter {
            device_base: device_bytes,
            ..Default::default()
        }
    }

    /// Applications asked to store `bytes` more.
    pub fn note_app(&mut self, bytes: u64) {
        self.app_bytes = self.app_bytes.saturating_add(bytes);
    }

    /// Remember where both counters stand at `now` (called by the periodic
    /// tick; keeps one sample per `SAMPLE_SECS`, none older than the window).
    pub fn sample(&mut self, now: u64, device_bytes: u64) {
        if self
            .samples
            .back()
            .is_some_and(|&(t, _, _)| now < t.saturating_add(SAMPLE_SECS))
        {
            return;
        }
        let dev = device_bytes.saturating_sub(self.device_base);
        self.samples.push_back((now, dev, self.app_bytes));
        while self
            .samples
            .front()
            .is_some_and(|&(t, _, _)| t.saturating_add(RECENT_SECS) < now)
        {
            self.samples.pop_front();
        }
        debug_assert!(self.samples.len() as u64 <= RECENT_SECS / SAMPLE_SECS + 2);
    }

    /// The figures now, the device having written `device_bytes` in all.
    pub fn report(&self, now: u64, device_bytes: u64) -> WriteAmp {
        let dev = device_bytes.saturating_sub(self.device_base);
        let (t0, d0, a0) = self
            .samples
            .iter()
            .copied()
            .find(|&(t, _, _)| t.saturating_add(RECENT_SECS) >= now)
            .unwrap_or((now, dev, self.app_bytes));
        let (rd, ra) = (dev.saturating_sub(d0), self.app_bytes.saturating_sub(a0));
        WriteAmp {
            device_bytes: dev,
            app_bytes: self.app_bytes,
            ratio: ratio(dev, self.app_bytes),
            recent_secs: now.saturating_sub(t0),
            recent_device_bytes: rd,
            recent_app_bytes: ra,
            recent_ratio: ratio(rd, ra),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn life_and_recent_figures() {
        let mut m = WriteAmpMeter::start(1000);
        assert_eq!(m.report(0, 1000).ratio, None);
        m.sample(0, 1000);
        m.note_app(100);
        m.sample(5, 1300); // too soon: not kept
        m.sample(10, 1400);
        let r = m.report(10, 1400);
        assert_eq!((r.device_bytes, r.app_bytes), (400, 100));
        assert_eq!(r.ratio, Some(4.0));
        // Long after, only the later traffic is recent.
        m.note_app(50);
        m.sample(400, 1500);
        m.note_app(50);
        let r = m.report(420, 1600);
        assert_eq!((r.device_bytes, r.app_bytes), (600, 200));
        assert_eq!((r.recent_device_bytes, r.recent_app_bytes), (100, 50));
        assert_eq!(r.recent_ratio, Some(2.0));
        assert_eq!(r.recent_secs, 20);
    }
}
