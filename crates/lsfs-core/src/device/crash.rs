//! A device that records every write and flush so that tests can rebuild the
//! image a crash would leave behind: everything up to the last flush, plus any
//! subset of the writes after it (seeded, so every failure replays).

use super::{check_range, BlockDevice, DeviceStats, MemDevice};
use crate::error::{Error, Result};
use rand::{Rng, SeedableRng};
use std::sync::{Arc, Mutex};

/// One recorded operation.
#[derive(Clone, Debug)]
pub enum LoggedOp {
    Write { offset: u64, data: Vec<u8> },
    Flush,
}

/// The shared record of a [`CrashDevice`]'s operations.
#[derive(Clone, Default)]
pub struct CrashLog {
    inner: Arc<Mutex<CrashLogInner>>,
}

#[derive(Default)]
struct CrashLogInner {
    base: Vec<u8>,
    ops: Vec<LoggedOp>,
    /// After this many more writes, every write fails with EIO (fault injection).
    fail_writes_after: Option<u64>,
}

impl CrashLog {
    pub fn ops(&self) -> Vec<LoggedOp> {
        self.inner.lock().unwrap().ops.clone()
    }
    pub fn flush_count(&self) -> usize {
        self.inner
            .lock()
            .unwrap()
            .ops
            .iter()
            .filter(|o| matches!(o, LoggedOp::Flush))
            .count()
    }
    /// Make every write after the next `n` fail with EIO.
    pub fn fail_writes_after(&self, n: u64) {
        self.inner.lock().unwrap().fail_writes_after = Some(n);
    }

    /// The image after the first `nops` operations, keeping each write after
    /// the last flush in that prefix only with probability 1/2 (chosen by
    /// `seed`): what a volatile write cache may have lost.
    pub fn crash_image(&self, nops: usize, seed: u64) -> MemDevice {
        let inner = self.inner.lock().unwrap();
        let nops = nops.min(inner.ops.len());
        let last_flush = inner.ops[..nops]
            .iter()
            .rposition(|o| matches!(o, LoggedOp::Flush));
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut data = inner.base.clone();
        for (i, op) in inner.ops[..nops].iter().enumerate() {
            if let LoggedOp::Write {
                offset,
                data: bytes,
            } = op
            {
                let durable = last_flush.is_some_and(|f| i < f);
                if durable || rng.gen_bool(0.5) {
                    let o = *offset as usize;
                    data[o..o + bytes.len()].copy_from_slice(bytes);
                }
            }
        }
        MemDevice::from_bytes(data)
    }

    /// Number of recorded operations.
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap().ops.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Wraps an in-memory image and logs every write and flush to a [`CrashLog`].
pub struct CrashDevice {
    dev: MemDevice,
    log: CrashLog,
    stats: DeviceStats,
}

impl CrashDevice {
    /// Start recording from the current contents of `dev`.
    pub fn new(dev: MemDevice) -> (CrashDevice, CrashLog) {
        let log = CrashLog::default();
        log.inner.lock().unwrap().base = dev.bytes().to_vec();
        (
            CrashDevice {
                dev,
                log: log.clone(),
                stats: DeviceStats::default(),
            },
            log,
        )
    }
}

impl BlockDevice for CrashDevice {
    fn size_bytes(&self) -> u64 {
        self.dev.size_bytes()
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.stats.note_read(buf.len());
        self.dev.read_at(offset, buf)
    }
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> Result<()> {
        check_range(self.size_bytes(), offset, buf.len(), "write")?;
        {
            let mut inner = self.log.inner.lock().unwrap();
            if let Some(n) = inner.fail_writes_after.as_mut() {
                if *n == 0 {
                    return Err(Error::io(
                        format!("injected write failure at offset {offset}"),
                        std::io::Error::from_raw_os_error(libc::EIO),
                    ));
                }
                *n -= 1;
            }
            inner.ops.push(LoggedOp::Write {
                offset,
                data: buf.to_vec(),
            });
        }
        self.stats.note_write(buf.len());
        self.dev.write_at(offset, buf)
    }
    fn flush(&mut self) -> Result<()> {
        self.log.inner.lock().unwrap().ops.push(LoggedOp::Flush);
        self.stats.note_flush();
        Ok(())
    }
    fn stats(&self) -> &DeviceStats {
        &self.stats
    }
}
