//! A device wrapper that injects faults: EIO on chosen reads or writes (by
//! the operation's index or by the bytes it touches) and bit flips in what a
//! chosen write puts on the medium. The rules are set through a shared
//! [`FaultPlan`] while the file system runs, and every choice is explicit or
//! comes from a seed, so a failure replays exactly.

use super::{BlockDevice, DeviceStats};
use crate::error::{Error, Result};
use rand::{Rng, SeedableRng};
use std::ops::Range;
use std::sync::{Arc, Mutex};

/// What is injected, shared between the device and the test that steers it.
#[derive(Clone, Default)]
pub struct FaultPlan {
    inner: Arc<Mutex<Rules>>,
}

#[derive(Default)]
struct Rules {
    /// Operations seen so far (each counted whether it failed or not).
    reads_seen: u64,
    writes_seen: u64,
    /// Read / write indices (counted from 0 over the device's life) that fail.
    fail_read_ops: Vec<u64>,
    fail_write_ops: Vec<u64>,
    /// Every read / write from this index on fails.
    fail_reads_from: Option<u64>,
    fail_writes_from: Option<u64>,
    /// Accesses that overlap these byte ranges fail.
    fail_read_bytes: Vec<Range<u64>>,
    fail_write_bytes: Vec<Range<u64>>,
    /// (write index, bit within that write) to flip on its way to the medium.
    flip_in_write: Vec<(u64, u64)>,
    injected: Vec<String>,
}

fn overlaps(r: &Range<u64>, offset: u64, len: usize) -> bool {
    offset < r.end && r.start < offset + len as u64
}

impl FaultPlan {
    /// The `n`-th read of the device's life (from 0) fails with EIO.
    pub fn fail_read_op(&self, n: u64) {
        self.inner.lock().unwrap().fail_read_ops.push(n);
    }
    /// The `n`-th write of the device's life (from 0) fails with EIO.
    pub fn fail_write_op(&self, n: u64) {
        self.inner.lock().unwrap().fail_write_ops.push(n);
    }
    /// Every read from the `n`-th on fails.
    pub fn fail_reads_from(&self, n: u64) {
        self.inner.lock().unwrap().fail_reads_from = Some(n);
    }
    /// Every write from the `n`-th on fails.
    pub fn fail_writes_from(&self, n: u64) {
        self.inner.lock().unwrap().fail_writes_from = Some(n);
    }
    /// Reads that touch any byte of `bytes` fail (a bad sector range).
    pub fn fail_reads_in(&self, bytes: Range<u64>) {
        self.inner.lock().unwrap().fail_read_bytes.push(bytes);
    }
    /// Writes that touch any byte of `bytes` fail.
    pub fn fail_writes_in(&self, bytes: Range<u64>) {
        self.inner.lock().unwrap().fail_write_bytes.push(bytes);
    }
    /// Flip bit `bit` of what the `n`-th write puts on the medium (the
    /// caller is told nothing: silent corruption). Bits past the write's end
    /// wrap around.
    pub fn flip_bit_in_write(&self, n: u64, bit: u64) {
        self.inner.lock().unwrap().flip_in_write.push((n, bit));
    }
    /// Flip one bit, chosen by `seed`, of the `n`-th write.
    pub fn flip_seeded_bit_in_write(&self, n: u64, seed: u64) {
        let bit = rand::rngs::StdRng::seed_from_u64(seed).gen::<u64>();
        self.flip_bit_in_write(n, bit);
    }
    /// Drop every rule (the counters keep counting).
    pub fn clear(&self) {
        let mut r = self.inner.lock().unwrap();
        let (reads_seen, writes_seen, injected) =
            (r.reads_seen, r.writes_seen, std::mem::take(&mut r.injected));
        *r = Rules {
            reads_seen,
            writes_seen,
            injected,
            ..Rules::default()
        };
    }
    pub fn reads_seen(&self) -> u64 {
        self.inner.lock().unwrap().reads_seen
    }
    pub fn writes_seen(&self) -> u64 {
        self.inner.lock().unwrap().writes_seen
    }
    /// One line per fault injected so far.
    pub fn injected(&self) -> Vec<String> {
        self.inner.lock().unwrap().injected.clone()
    }
}

fn eio(what: String) -> Error {
    Error::io(what, std::io::Error::from_raw_os_error(libc::EIO))
}

/// Passes everything to the device it wraps, except what its [`FaultPlan`]
/// says to break. Wrap a [`super::CrashDevice`] in it to record what did
/// reach the medium (failed writes never do).
pub struct FaultDevice {
    inner: Box<dyn BlockDevice>,
    plan: FaultPlan,
}

impl FaultDevice {
    pub fn new(inner: Box<dyn BlockDevice>) -> (FaultDevice, FaultPlan) {
        let plan = FaultPlan::default();
        (
            FaultDevice {
                inner,
                plan: plan.clone(),
            },
            plan,
        )
    }
}

impl BlockDevice for FaultDevice {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        {
            let mut r = self.plan.inner.lock().unwrap();
            let n = r.reads_seen;
            r.reads_seen += 1;
            let fail = r.fail_read_ops.contains(&n)
                || r.fail_reads_from.is_some_and(|f| n >= f)
                || r.fail_read_bytes
                    .iter()
                    .any(|b| overlaps(b, offset, buf.len()));
            if fail {
                let what = format!(
                    "injected read error: read {n} of {} bytes at offset {offset}",
                    buf.len()
                );
                r.injected.push(what.clone());
                return Err(eio(what));
            }
        }
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<()> {
        let flips: Vec<u64> = {
            let mut r = self.plan.inner.lock().unwrap();
            let n = r.writes_seen;
            r.writes_seen += 1;
            let fail = r.fail_write_ops.contains(&n)
                || r.fail_writes_from.is_some_and(|f| n >= f)
                || r.fail_write_bytes
                    .iter()
                    .any(|b| overlaps(b, offset, buf.len()));
            if fail {
                let what = format!(
                    "injected write error: write {n} of {} bytes at offset {offset}",
                    buf.len()
                );
                r.injected.push(what.clone());
                return Err(eio(what));
            }
            let flips: Vec<u64> = r
                .flip_in_write
                .iter()
                .filter(|(w, _)| *w == n)
                .map(|&(_, bit)| bit % (buf.len() as u64 * 8).max(1))
                .collect();
            for bit in &flips {
                r.injected
                    .push(format!("flipped bit {bit} of write {n} at offset {offset}"));
            }
            flips
        };
        if flips.is_empty() || buf.is_empty() {
            return self.inner.write_at(offset, buf);
        }
        let mut bad = buf.to_vec();
        for bit in flips {
            bad[(bit / 8) as usize] ^= 1 << (bit % 8);
        }
        self.inner.write_at(offset, &bad)
    }
    fn flush(&self) -> Result<()> {
        self.inner.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> Result<u64> {
        self.inner.discard(offset, len)
    }
    fn stats(&self) -> &DeviceStats {
        self.inner.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{CrashDevice, MemDevice};

    fn dev() -> (FaultDevice, FaultPlan, crate::device::CrashLog) {
        let (c, log) = CrashDevice::new(MemDevice::new(8 * 4096));
        let (f, plan) = FaultDevice::new(Box::new(c));
        (f, plan, log)
    }

    #[test]
    fn reads_fail_by_index_and_by_range() {
        let (d, plan, _) = dev();
        let mut b = [0u8; 4096];
        plan.fail_read_op(1);
        plan.fail_reads_in(3 * 4096..3 * 4096 + 1);
        assert!(d.read_at(0, &mut b).is_ok());
        let err = d.read_at(0, &mut b).unwrap_err();
        assert_eq!(err.errno(), lsfs_vfs::Errno::IO);
        assert!(d.read_at(0, &mut b).is_ok());
        assert!(d.read_at(2 * 4096, &mut b).is_ok());
        assert!(d.read_at(3 * 4096, &mut b).is_err());
        assert!(
            d.read_at(2 * 4096, &mut [0u8; 8193]).is_err(),
            "overlaps the bad byte"
        );
        assert_eq!(plan.injected().len(), 3);
        plan.clear();
        assert!(d.read_at(3 * 4096, &mut b).is_ok());
        assert_eq!(plan.reads_seen(), 7);
    }

    #[test]
    fn failed_writes_never_reach_the_medium() {
        let (d, plan, log) = dev();
        plan.fail_write_op(0);
        plan.fail_writes_in(4096..8192);
        plan.fail_writes_from(5);
        assert!(d.write_at(0, &[1; 4096]).is_err());
        assert!(d.write_at(0, &[2; 4096]).is_ok());
        assert!(d.write_at(0, &[3; 8192]).is_err());
        assert!(d.write_at(8192, &[4; 4096]).is_ok());
        assert!(d.write_at(12288, &[5; 4096]).is_ok());
        assert!(d.write_at(12288, &[6; 4096]).is_err());
        assert_eq!(log.len(), 3);
        let img = log.image_after(log.len());
        assert_eq!(
            (img.bytes()[0], img.bytes()[4096], img.bytes()[12288]),
            (2, 0, 5)
        );
    }

    #[test]
    fn a_flipped_bit_lands_silently_and_replays_from_its_seed() {
        let (d, plan, log) = dev();
        plan.flip_bit_in_write(1, 8 * 4096 + 9); // wraps to bit 9: byte 1, bit 1
        d.write_at(0, &[0; 4096]).unwrap();
        d.write_at(4096, &[0; 4096]).unwrap();
        let img = log.image_after(2);
        assert_eq!(img.bytes()[4097], 2);
        assert_eq!(img.bytes().iter().filter(|&&b| b != 0).count(), 1);
        let (d2, plan2, log2) = dev();
        plan.flip_seeded_bit_in_write(2, 77);
        plan2.flip_seeded_bit_in_write(0, 77);
        d.write_at(0, &[0; 4096]).unwrap();
        d2.write_at(0, &[0; 4096]).unwrap();
        assert_eq!(
            log.image_after(3).bytes()[..4096],
            log2.image_after(1).bytes()[..4096]
        );
    }
}
