//! Remembers the first device read error. A change that failed half-way on
//! a read has left its in-memory state half-changed, so the file system
//! stops changing itself (read-only) rather than write that state to the log.

use super::{BlockDevice, DeviceStats};
use crate::error::Result;
use std::sync::{Arc, Mutex};

/// The first read error a [`ReadErrorLatch`] saw, shared with the file system.
#[derive(Clone, Default)]
pub struct ReadErrors(Arc<Mutex<Option<String>>>);

impl ReadErrors {
    /// The first read error, if any.
    pub fn first(&self) -> Option<String> {
        self.0.lock().unwrap().clone()
    }
    pub fn tripped(&self) -> bool {
        self.0.lock().unwrap().is_some()
    }
}

/// Passes everything through, noting the first read that fails.
pub struct ReadErrorLatch {
    inner: Box<dyn BlockDevice>,
    errors: ReadErrors,
}

impl ReadErrorLatch {
    pub fn new(inner: Box<dyn BlockDevice>) -> (ReadErrorLatch, ReadErrors) {
        let errors = ReadErrors::default();
        (
            ReadErrorLatch {
                inner,
                errors: errors.clone(),
            },
            errors,
        )
    }
}

impl BlockDevice for ReadErrorLatch {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let r = self.inner.read_at(offset, buf);
        if let Err(e) = &r {
            let mut first = self.errors.0.lock().unwrap();
            if first.is_none() {
                tracing::error!(
                    "device read error, the file system stops writing (read-only): {e}"
                );
                *first = Some(e.to_string());
            }
        }
        r
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<()> {
        self.inner.write_at(offset, buf)
    }
    fn flush(&self) -> Result<()> {
        self.inner.flush()
    }
    fn publishes(&self) -> bool {
        self.inner.publishes()
    }
    fn publish(&self) -> Result<()> {
        self.inner.publish()
    }
    fn discard(&self, offset: u64, len: u64) -> Result<u64> {
        self.inner.discard(offset, len)
    }
    fn stats(&self) -> &DeviceStats {
        self.inner.stats()
    }
    fn release(&self) -> Result<()> {
        self.inner.release()
    }
    fn fix_view(&self, fs_id: u64, seq: u64) {
        self.inner.fix_view(fs_id, seq)
    }
    fn reopen_read_only(&self) -> Option<Result<Box<dyn BlockDevice>>> {
        self.inner.reopen_read_only()
    }
    fn fills_holes(&self) -> bool {
        self.inner.fills_holes()
    }
    fn extra_counters(&self) -> Vec<(&'static str, u64)> {
        self.inner.extra_counters()
    }
    fn is_cached(&self, offset: u64, len: u64) -> Option<bool> {
        self.inner.is_cached(offset, len)
    }
}
