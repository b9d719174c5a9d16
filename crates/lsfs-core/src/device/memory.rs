//! A device in memory, for tests and simulations.

use super::{check_range, BlockDevice, DeviceStats};
use crate::error::Result;

pub struct MemDevice {
    data: Vec<u8>,
    stats: DeviceStats,
}

impl MemDevice {
    pub fn new(size_bytes: u64) -> MemDevice {
        MemDevice {
            data: vec![0; size_bytes as usize],
            stats: DeviceStats::default(),
        }
    }
    pub fn from_bytes(data: Vec<u8>) -> MemDevice {
        MemDevice {
            data,
            stats: DeviceStats::default(),
        }
    }
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }
}

impl BlockDevice for MemDevice {
    fn size_bytes(&self) -> u64 {
        self.data.len() as u64
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        check_range(self.size_bytes(), offset, buf.len(), "read")?;
        let o = offset as usize;
        buf.copy_from_slice(&self.data[o..o + buf.len()]);
        self.stats.note_read(buf.len());
        Ok(())
    }
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> Result<()> {
        check_range(self.size_bytes(), offset, buf.len(), "write")?;
        let o = offset as usize;
        self.data[o..o + buf.len()].copy_from_slice(buf);
        self.stats.note_write(buf.len());
        Ok(())
    }
    fn flush(&mut self) -> Result<()> {
        self.stats.note_flush();
        Ok(())
    }
    fn stats(&self) -> &DeviceStats {
        &self.stats
    }
}
