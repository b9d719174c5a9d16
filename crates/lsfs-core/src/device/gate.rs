//! A device wrapper whose flushes wait at a gate the test opens: a flush
//! that takes as long as the test wants, so that it can check what other
//! threads do meanwhile (a read does not wait for it; concurrent fsyncs
//! queue behind it and then share one flush).

use super::{BlockDevice, DeviceStats};
use crate::error::Result;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The gate, shared between the device and the test that steers it.
#[derive(Clone, Default)]
pub struct FlushGate {
    inner: Arc<(Mutex<GateState>, Condvar)>,
}

#[derive(Default)]
struct GateState {
    closed: bool,
    /// Flushes waiting at the gate now.
    waiting: usize,
    /// Flushes that went through.
    passed: u64,
}

impl FlushGate {
    /// Flushes from now on wait until [`FlushGate::open`].
    pub fn close(&self) {
        self.inner.0.lock().unwrap().closed = true;
    }

    /// Let every waiting and later flush through.
    pub fn open(&self) {
        self.inner.0.lock().unwrap().closed = false;
        self.inner.1.notify_all();
    }

    /// Wait (at most `patience`) until `n` flushes wait at the gate.
    pub fn wait_for_waiting(&self, n: usize, patience: Duration) -> bool {
        let deadline = Instant::now() + patience;
        let mut st = self.inner.0.lock().unwrap();
        while st.waiting < n {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            st = self.inner.1.wait_timeout(st, left).unwrap().0;
        }
        true
    }

    pub fn waiting(&self) -> usize {
        self.inner.0.lock().unwrap().waiting
    }

    pub fn passed(&self) -> u64 {
        self.inner.0.lock().unwrap().passed
    }
}

/// Passes everything to the device it wraps; flushes wait at the gate.
pub struct GateDevice {
    inner: Box<dyn BlockDevice>,
    gate: FlushGate,
}

impl GateDevice {
    pub fn new(inner: Box<dyn BlockDevice>) -> (GateDevice, FlushGate) {
        let gate = FlushGate::default();
        (
            GateDevice {
                inner,
                gate: gate.clone(),
            },
            gate,
        )
    }
}

impl BlockDevice for GateDevice {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<()> {
        self.inner.write_at(offset, buf)
    }
    fn flush(&self) -> Result<()> {
        {
            let (m, cv) = &*self.gate.inner;
            let mut st = m.lock().unwrap();
            if st.closed {
                st.waiting += 1;
                cv.notify_all();
                while st.closed {
                    st = cv.wait(st).unwrap();
                }
                st.waiting -= 1;
            }
            st.passed += 1;
        }
        self.inner.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> Result<u64> {
        self.inner.discard(offset, len)
    }
    fn stats(&self) -> &DeviceStats {
        self.inner.stats()
    }
}
