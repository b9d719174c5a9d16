//! A device in memory, for tests and simulations.

use super::{check_discard, check_range, BlockDevice, DeviceStats};
use crate::error::Result;
use std::sync::Mutex;

pub struct MemDevice {
    data: Mutex<Vec<u8>>,
    size_bytes: u64,
    stats: DeviceStats,
}

impl MemDevice {
    pub fn new(size_bytes: u64) -> MemDevice {
        MemDevice::from_bytes(vec![0; size_bytes as usize])
    }
    pub fn from_bytes(data: Vec<u8>) -> MemDevice {
        MemDevice {
            size_bytes: data.len() as u64,
            data: Mutex::new(data),
            stats: DeviceStats::default(),
        }
    }
    /// A copy of the device's contents.
    pub fn bytes(&self) -> Vec<u8> {
        self.data.lock().unwrap().clone()
    }
}

impl BlockDevice for MemDevice {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        check_range(self.size_bytes(), offset, buf.len(), "read")?;
        let o = offset as usize;
        buf.copy_from_slice(&self.data.lock().unwrap()[o..o + buf.len()]);
        self.stats.note_read(buf.len());
        Ok(())
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<()> {
        check_range(self.size_bytes(), offset, buf.len(), "write")?;
        let o = offset as usize;
        self.data.lock().unwrap()[o..o + buf.len()].copy_from_slice(buf);
        self.stats.note_write(buf.len());
        Ok(())
    }
    fn flush(&self) -> Result<()> {
        self.stats.note_flush();
        Ok(())
    }
    /// Zeros the range: what a punched hole reads as, and what lets a test
    /// that reads a discarded block see that it was discarded.
    fn discard(&self, offset: u64, len: u64) -> Result<u64> {
        check_discard(self.size_bytes(), offset, len)?;
        let o = offset as usize;
        self.data.lock().unwrap()[o..o + len as usize].fill(0);
        self.stats.note_discard(len);
        Ok(len)
    }
    fn stats(&self) -> &DeviceStats {
        &self.stats
    }
}
