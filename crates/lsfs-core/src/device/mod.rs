//! Layer 1: block devices. Everything above reads and writes whole blocks
//! through [`BlockDevice`]; only this layer knows about files and syscalls.

mod crash;
mod fault;
mod file;
mod fill_ahead;
mod gate;
mod io_queue;
mod latch;
mod memory;

pub use crash::{
    CrashChoice, CrashDevice, CrashLog, CrashState, Epoch, LoggedOp, PartialWrite, Sectors,
    SECTOR_BYTES,
};
pub use fault::{FaultDevice, FaultPlan};
pub use file::FileDevice;
pub use gate::{FlushGate, GateDevice};
pub use io_queue::{DeferredWrite, IoCounters, IoQueue, Ticket, PENDING_BYTES_MAX};
pub use latch::{ReadErrorLatch, ReadErrors};
pub use memory::MemDevice;

use crate::error::Result;
use std::sync::atomic::{AtomicU64, Ordering};

/// A device of `size_bytes`, read and written at byte offsets that are
/// multiples of the block size the caller uses. Shared: reads, writes and
/// flushes may come from several threads at once (as pread, pwrite and
/// fdatasync may), so that device I/O can run outside the file system's
/// lock; callers order what must be ordered.
pub trait BlockDevice: Send + Sync {
    fn size_bytes(&self) -> u64;
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()>;
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<()>;
    /// [`BlockDevice::write_at`] of a buffer the caller gives up, so that
    /// a device that keeps it (the I/O queue) need not copy it.
    fn write_vec(&self, offset: u64, buf: Vec<u8>) -> Result<()> {
        self.write_at(offset, &buf)
    }
    /// An empty buffer with room for `capacity` bytes, to fill and give to
    /// [`BlockDevice::write_vec`]. A device that keeps written buffers (the
    /// I/O queue) hands back one it is done with: a fresh one costs a page
    /// fault per 4 KiB page at its first write, a third of the server's CPU
    /// time in a sequential write.
    fn buffer(&self, capacity: usize) -> Vec<u8> {
        Vec::with_capacity(capacity)
    }
    /// Make every write that returned before this call durable.
    fn flush(&self) -> Result<()>;
    /// Whether other opens of the same storage (readers elsewhere) see
    /// writes only once [`BlockDevice::publish`]ed: an object store that
    /// keeps flush records apart from its segments. Not most devices.
    fn publishes(&self) -> bool {
        false
    }
    /// Make every write so far visible to other opens of the same storage,
    /// for a snapshot or a checkpoint someone asked for (only devices that
    /// [`BlockDevice::publishes`]; nothing for the others).
    fn publish(&self) -> Result<()> {
        Ok(())
    }
    /// Tell the device that nothing will read the `len` bytes at `offset`
    /// before writing them again, so it may drop them: a hole punched in
    /// an image file, BLKDISCARD on a block device. Afterwards the range
    /// reads as zeros or as anything else; callers must not care which.
    /// Returns the bytes the device took (0 where it cannot discard). A
    /// device that cannot discard is no error: discarding is a hint, and
    /// a file system must never stop for the lack of it.
    fn discard(&self, offset: u64, len: u64) -> Result<u64>;
    /// Counters of this device's traffic.
    fn stats(&self) -> &DeviceStats;
    /// The file system is done with the device (it unmounted, after its
    /// last flush, or after its last writes failed: it writes nothing
    /// more either way): give back what the device holds for it, such as
    /// an object store's lease. Most devices hold nothing.
    fn release(&self) -> Result<()> {
        Ok(())
    }
    /// Whether writing into the holes of segments written earlier
    /// (threaded logging, docs/CLEANER.md §5) suits this device. An object
    /// store keeps a segment as one object: each hole filled uploads the
    /// whole object again, its write-ahead file orders uploads for the
    /// log's appends only, and its readers tell a segment written again by
    /// its first record, which filling holes leaves as it was.
    fn fills_holes(&self) -> bool {
        true
    }
    /// A read-only open fixes its view here, once mounted: the file system
    /// `fs_id` as of log record `seq`, the newest it found. A device that
    /// another open may write meanwhile (an object store whose writer runs
    /// elsewhere) may then refuse, with an I/O error, a segment rewritten
    /// or removed since, rather than hand back blocks of a later state as
    /// if they were this view's. Most devices have no other writer and
    /// ignore it.
    fn fix_view(&self, _fs_id: u64, _seq: u64) {}
    /// A new read-only handle on the same storage, with nothing cached,
    /// for a read-only view that must open the file system again to follow
    /// a writer elsewhere (`fs/follow.rs`): the writer's cleaner moved
    /// blocks the view reads, and only its newer DAT says where to. `None`
    /// for devices no other open writes while this one is open.
    fn reopen_read_only(&self) -> Option<Result<Box<dyn BlockDevice>>> {
        None
    }
    /// Counters particular to this kind of device, by name (an object
    /// store's requests and their bytes); none for most.
    fn extra_counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// Whether reading the `len` bytes at `offset` would be served from a
    /// cache the device keeps (`Some(true)`) or cost a request of its own
    /// (`Some(false)`), without reading anything; `None` where every read
    /// costs the same (a file, a disk). The cleaner weighs it: on an
    /// object store a victim whose object is not cached costs a GET of the
    /// whole object.
    fn is_cached(&self, _offset: u64, _len: u64) -> Option<bool> {
        None
    }
}

thread_local! {
    static CLEANER_READING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// While it lives, the calling thread's device reads are the cleaner's:
/// a device that counts requests by cause ([`cleaner_is_reading`]) counts
/// them as the cleaner's too. Per thread, since other threads read and
/// write at the same time (the I/O queue finishes writes outside the
/// engine's lock), and a device's reads run on the thread that asks.
pub struct CleanerReads {
    was: bool,
}

impl CleanerReads {
    pub fn start() -> CleanerReads {
        CleanerReads {
            was: CLEANER_READING.with(|c| c.replace(true)),
        }
    }
}

impl Drop for CleanerReads {
    fn drop(&mut self) {
        CLEANER_READING.with(|c| c.set(self.was));
    }
}

/// Whether the calling thread reads for the cleaner now ([`CleanerReads`]).
pub fn cleaner_is_reading() -> bool {
    CLEANER_READING.with(|c| c.get())
}

/// Device traffic counters; `flushes` is what the one-flush-per-fsync promise is measured by.
#[derive(Debug, Default)]
pub struct DeviceStats {
    pub reads: AtomicU64,
    pub read_bytes: AtomicU64,
    pub writes: AtomicU64,
    pub write_bytes: AtomicU64,
    pub flushes: AtomicU64,
    pub discards: AtomicU64,
    pub discard_bytes: AtomicU64,
    pub fills: AtomicU64,
    pub fill_bytes: AtomicU64,
}

impl DeviceStats {
    pub fn note_read(&self, bytes: usize) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.read_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }
    pub fn note_write(&self, bytes: usize) {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.write_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }
    pub fn note_flush(&self) {
        self.flushes.fetch_add(1, Ordering::Relaxed);
    }
    pub fn note_discard(&self, bytes: u64) {
        self.discards.fetch_add(1, Ordering::Relaxed);
        self.discard_bytes.fetch_add(bytes, Ordering::Relaxed);
    }
    pub fn note_fill(&self, bytes: u64) {
        self.fills.fetch_add(1, Ordering::Relaxed);
        self.fill_bytes.fetch_add(bytes, Ordering::Relaxed);
    }
    /// Take back reads counted since `before`: reads that were not the
    /// file system's own (fs/invariants.rs). Reads counted meanwhile by
    /// another thread stay counted.
    pub fn forget_reads_since(&self, before: &DeviceCounters) {
        let now = self.snapshot();
        self.reads
            .fetch_sub(now.reads - before.reads, Ordering::Relaxed);
        self.read_bytes
            .fetch_sub(now.read_bytes - before.read_bytes, Ordering::Relaxed);
    }
    pub fn snapshot(&self) -> DeviceCounters {
        DeviceCounters {
            reads: self.reads.load(Ordering::Relaxed),
            read_bytes: self.read_bytes.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            write_bytes: self.write_bytes.load(Ordering::Relaxed),
            flushes: self.flushes.load(Ordering::Relaxed),
            discards: self.discards.load(Ordering::Relaxed),
            discard_bytes: self.discard_bytes.load(Ordering::Relaxed),
            fills: self.fills.load(Ordering::Relaxed),
            fill_bytes: self.fill_bytes.load(Ordering::Relaxed),
        }
    }
}

/// A copy of [`DeviceStats`] at one moment.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct DeviceCounters {
    pub reads: u64,
    pub read_bytes: u64,
    pub writes: u64,
    pub write_bytes: u64,
    pub flushes: u64,
    /// Ranges the device dropped, and their bytes (`BlockDevice::discard`).
    pub discards: u64,
    pub discard_bytes: u64,
    /// Holes of an image file filled with zeros ahead of the log, and their
    /// bytes (device/fill_ahead.rs). Not in `writes`: the file system did
    /// not ask for them, the host's disk still wrote them.
    pub fills: u64,
    pub fill_bytes: u64,
}

/// Checks that a discard of `len` bytes at `offset` lies inside the device.
pub(crate) fn check_discard(size_bytes: u64, offset: u64, len: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size_bytes => Ok(()),
        _ => Err(crate::error::Error::io(
            format!("discard of {len} bytes at offset {offset} is past the device end ({size_bytes} bytes)"),
            std::io::Error::from_raw_os_error(libc::EINVAL),
        )),
    }
}

/// Checks that an access lies inside the device, naming it if not.
pub(crate) fn check_range(size_bytes: u64, offset: u64, len: usize, what: &str) -> Result<()> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= size_bytes => Ok(()),
        _ => Err(crate::error::Error::io(
            format!("{what} of {len} bytes at offset {offset} is past the device end ({size_bytes} bytes)"),
            std::io::Error::from_raw_os_error(libc::EIO),
        )),
    }
}
