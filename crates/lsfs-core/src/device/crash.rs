//! A device that records every write and flush (like dm-log-writes) so that
//! tests can rebuild any image a crash could leave behind.
//!
//! The log is cut into *epochs* by its flushes. A crash that happens after
//! `k` flushes returned keeps every write of the first `k` epochs, and of the
//! writes issued after the `k`-th flush any subset, reaching the medium in
//! any order (a volatile write cache reorders freely; where two writes
//! overlap, the order decides what is left), each possibly torn at 512-byte
//! sector granularity. A [`CrashState`] names one such image exactly, so a
//! failure replays from its printed state or from the seed that chose it.
//!
//! A discard is logged as a write of zeros over its range: a crash may keep
//! it or not, before or after the epoch's other writes, like any write. So
//! recovery after any crash reads zeros wherever the file system discarded,
//! and a discard of something still needed shows up as a damaged image.

use super::{check_range, BlockDevice, DeviceStats, MemDevice};
use crate::error::{Error, Result};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::fmt;
use std::sync::{Arc, Mutex};

/// The unit a write can be torn at: what a disk writes atomically.
pub const SECTOR_BYTES: usize = 512;

/// One recorded operation.
#[derive(Clone, Debug)]
pub enum LoggedOp {
    Write { offset: u64, data: Vec<u8> },
    Flush,
}

/// The writes between two flushes (or after the last one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Epoch {
    /// Operations before this epoch: all durable once the epoch begins
    /// (0, or just after a flush).
    pub durable_ops: usize,
    /// Indices (into the log) of this epoch's writes, in issue order.
    pub writes: Vec<usize>,
    /// Index of the flush that ends the epoch; `None` for the open tail.
    pub flush: Option<usize>,
}

/// Which 512-byte sectors of one write reached the medium.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Sectors {
    All,
    /// Only these sectors (indices within the write), in any order.
    Only(Vec<u32>),
}

/// One write of the crash epoch as it reached the medium.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PartialWrite {
    /// Index of the write in the log; it must lie in the crash epoch.
    pub op: usize,
    pub sectors: Sectors,
}

/// One image a crash can leave: the durable prefix, then some of the next
/// epoch's writes applied in the listed order, then bit flips.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CrashState {
    /// Operations that are durable: 0 or just after a flush.
    pub durable_ops: usize,
    /// Writes after `durable_ops` that survived, in the order they landed.
    pub writes: Vec<PartialWrite>,
    /// Bits of the image (byte offset * 8 + bit) flipped after everything else.
    pub flip_bits: Vec<u64>,
}

impl CrashState {
    /// Exactly the durable prefix: a crash right after a flush returned, with
    /// nothing since reaching the medium.
    pub fn at_flush(durable_ops: usize) -> CrashState {
        CrashState {
            durable_ops,
            ..CrashState::default()
        }
    }

    /// The log position up to which this state may hold writes: writes of
    /// operations at or after it cannot be in it.
    pub fn horizon(&self) -> usize {
        self.writes
            .iter()
            .map(|w| w.op + 1)
            .max()
            .unwrap_or(0)
            .max(self.durable_ops)
    }
}

impl fmt::Display for CrashState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "durable {} then [", self.durable_ops)?;
        for (i, w) in self.writes.iter().enumerate() {
            if i > 0 {
                write!(f, " ")?;
            }
            write!(f, "{}", w.op)?;
            if let Sectors::Only(s) = &w.sectors {
                write!(f, "{s:?}")?;
            }
        }
        write!(f, "]")?;
        if !self.flip_bits.is_empty() {
            write!(f, " flips {:?}", self.flip_bits)?;
        }
        Ok(())
    }
}

/// How [`CrashLog::random_state`] picks a crash state.
#[derive(Clone, Copy, Debug)]
pub struct CrashChoice {
    /// Chance that each write of the epoch survives.
    pub keep: f64,
    /// Chance that the surviving writes land in a shuffled order.
    pub reorder: f64,
    /// Chance that a surviving write of more than one sector is torn.
    pub tear: f64,
}

impl Default for CrashChoice {
    fn default() -> Self {
        CrashChoice {
            keep: 0.5,
            reorder: 0.5,
            tear: 0.2,
        }
    }
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

    /// The device contents before the first recorded operation.
    pub fn base(&self) -> Vec<u8> {
        self.inner.lock().unwrap().base.clone()
    }

    /// The image after the first `nops` operations with every write applied
    /// in issue order: what the device held at that moment.
    pub fn image_after(&self, nops: usize) -> MemDevice {
        let mut img = self.base();
        self.advance(&mut img, 0, nops);
        MemDevice::from_bytes(img)
    }

    /// Apply operations `from..to` to `img` (an image after `from` operations)
    /// in issue order, so a caller can walk the log one epoch at a time.
    pub fn advance(&self, img: &mut [u8], from: usize, to: usize) {
        let inner = self.inner.lock().unwrap();
        let to = to.min(inner.ops.len());
        for op in &inner.ops[from.min(to)..to] {
            if let LoggedOp::Write { offset, data } = op {
                let o = *offset as usize;
                img[o..o + data.len()].copy_from_slice(data);
            }
        }
    }

    /// The epochs of the log, oldest first; the last one is the open tail
    /// after the last flush (possibly without writes).
    pub fn epochs(&self) -> Vec<Epoch> {
        let inner = self.inner.lock().unwrap();
        let mut out = Vec::new();
        let mut cur = Epoch {
            durable_ops: 0,
            writes: Vec::new(),
            flush: None,
        };
        for (i, op) in inner.ops.iter().enumerate() {
            match op {
                LoggedOp::Write { .. } => cur.writes.push(i),
                LoggedOp::Flush => {
                    cur.flush = Some(i);
                    let next = Epoch {
                        durable_ops: i + 1,
                        writes: Vec::new(),
                        flush: None,
                    };
                    out.push(std::mem::replace(&mut cur, next));
                }
            }
        }
        out.push(cur);
        out
    }

    /// The image `state` describes, built from the base image.
    pub fn materialize(&self, state: &CrashState) -> Result<MemDevice> {
        let mut img = self.image_after(state.durable_ops).bytes().to_vec();
        self.apply_crash(&mut img, state)?;
        Ok(MemDevice::from_bytes(img))
    }

    /// Apply `state`'s partial writes and bit flips to `img`, which must be
    /// the image after `state.durable_ops` operations (see [`CrashLog::advance`]).
    /// A state that does not fit the log (a write outside the crash epoch, a
    /// sector past a write's end) is refused with a message.
    pub fn apply_crash(&self, img: &mut [u8], state: &CrashState) -> Result<()> {
        let inner = self.inner.lock().unwrap();
        let ops = &inner.ops;
        if state.durable_ops > ops.len()
            || (state.durable_ops > 0 && !matches!(ops[state.durable_ops - 1], LoggedOp::Flush))
        {
            return Err(Error::invalid(format!(
                "crash state: {} operations are not a flush boundary",
                state.durable_ops
            )));
        }
        let epoch_end = ops[state.durable_ops..]
            .iter()
            .position(|o| matches!(o, LoggedOp::Flush))
            .map_or(ops.len(), |p| state.durable_ops + p);
        for w in &state.writes {
            let Some(LoggedOp::Write { offset, data }) = ops.get(w.op) else {
                return Err(Error::invalid(format!(
                    "crash state: op {} is no write",
                    w.op
                )));
            };
            if w.op < state.durable_ops || w.op >= epoch_end {
                return Err(Error::invalid(format!(
                    "crash state: write {} is outside the epoch {}..{epoch_end}",
                    w.op, state.durable_ops
                )));
            }
            let o = *offset as usize;
            match &w.sectors {
                Sectors::All => img[o..o + data.len()].copy_from_slice(data),
                Sectors::Only(keep) => {
                    for &s in keep {
                        let start = s as usize * SECTOR_BYTES;
                        if start >= data.len() {
                            return Err(Error::invalid(format!(
                                "crash state: sector {s} past the end of write {}",
                                w.op
                            )));
                        }
                        let end = (start + SECTOR_BYTES).min(data.len());
                        img[o + start..o + end].copy_from_slice(&data[start..end]);
                    }
                }
            }
        }
        for &bit in &state.flip_bits {
            let byte = (bit / 8) as usize;
            if byte >= img.len() {
                return Err(Error::invalid(format!(
                    "crash state: bit {bit} past the image"
                )));
            }
            img[byte] ^= 1 << (bit % 8);
        }
        Ok(())
    }

    /// A crash state in `epoch` chosen by `rng`: each write survives with
    /// `choice.keep`, the survivors are shuffled with `choice.reorder`, and a
    /// multi-sector survivor is torn with `choice.tear` (half the time to a
    /// prefix of its sectors, as a disk writing in order; otherwise to any
    /// subset).
    pub fn random_state(
        &self,
        epoch: &Epoch,
        choice: CrashChoice,
        rng: &mut impl Rng,
    ) -> CrashState {
        let inner = self.inner.lock().unwrap();
        let mut writes: Vec<PartialWrite> = Vec::new();
        for &op in &epoch.writes {
            if !rng.gen_bool(choice.keep) {
                continue;
            }
            let LoggedOp::Write { data, .. } = &inner.ops[op] else {
                unreachable!("epochs list writes only")
            };
            let nsectors = data.len().div_ceil(SECTOR_BYTES) as u32;
            let sectors = if nsectors > 1 && rng.gen_bool(choice.tear) {
                Sectors::Only(torn_sectors(nsectors, rng))
            } else {
                Sectors::All
            };
            writes.push(PartialWrite { op, sectors });
        }
        if rng.gen_bool(choice.reorder) {
            writes.shuffle(rng);
        }
        CrashState {
            durable_ops: epoch.durable_ops,
            writes,
            flip_bits: Vec::new(),
        }
    }

    /// Same as [`CrashLog::random_state`] with a fresh generator from `seed`.
    pub fn seeded_state(&self, epoch: &Epoch, choice: CrashChoice, seed: u64) -> CrashState {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        self.random_state(epoch, choice, &mut rng)
    }

    /// Length in bytes of write `op` (0 for a flush).
    pub fn write_len(&self, op: usize) -> usize {
        match &self.inner.lock().unwrap().ops[op] {
            LoggedOp::Write { data, .. } => data.len(),
            LoggedOp::Flush => 0,
        }
    }
}

/// A torn write of `n` > 1 sectors: a proper, non-empty prefix or a random
/// proper subset.
fn torn_sectors(n: u32, rng: &mut impl Rng) -> Vec<u32> {
    if rng.gen_bool(0.5) {
        (0..rng.gen_range(1..n)).collect()
    } else {
        let mut keep: Vec<u32> = (0..n).filter(|_| rng.gen_bool(0.5)).collect();
        if keep.len() == n as usize {
            keep.remove(rng.gen_range(0..keep.len()));
        }
        keep
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
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.stats.note_read(buf.len());
        self.dev.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<()> {
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
    fn discard(&self, offset: u64, len: u64) -> Result<u64> {
        super::check_discard(self.size_bytes(), offset, len)?;
        {
            let mut inner = self.log.inner.lock().unwrap();
            // A device whose writes fail (fault injection) is gone: it
            // discards nothing either. A discard does not use up the writes
            // allowed before that, so adding discards keeps old schedules.
            if inner.fail_writes_after == Some(0) {
                return Err(Error::io(
                    format!("injected discard failure at offset {offset}"),
                    std::io::Error::from_raw_os_error(libc::EIO),
                ));
            }
            inner.ops.push(LoggedOp::Write {
                offset,
                data: vec![0; len as usize],
            });
        }
        self.stats.note_discard(len);
        self.dev.discard(offset, len)
    }
    fn flush(&self) -> Result<()> {
        self.log.inner.lock().unwrap().ops.push(LoggedOp::Flush);
        self.stats.note_flush();
        Ok(())
    }
    fn stats(&self) -> &DeviceStats {
        &self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLOCK: usize = 4096;

    /// A log over a 16-block zeroed device: block 0 gets 1 then (after a
    /// flush) block 1 gets 2, block 1 gets 3 (overlapping), a 3-block write of
    /// 4 at block 4, no final flush.
    fn sample() -> (CrashDevice, CrashLog) {
        let (dev, log) = CrashDevice::new(MemDevice::new(16 * BLOCK as u64));
        dev.write_at(0, &[1; BLOCK]).unwrap();
        dev.flush().unwrap();
        dev.write_at(BLOCK as u64, &[2; BLOCK]).unwrap();
        dev.write_at(BLOCK as u64, &[3; BLOCK]).unwrap();
        dev.write_at(4 * BLOCK as u64, &[4; 3 * BLOCK]).unwrap();
        (dev, log)
    }

    #[test]
    fn epochs_split_at_flushes() {
        let (_dev, log) = sample();
        let e = log.epochs();
        assert_eq!(e.len(), 2);
        assert_eq!(
            (e[0].durable_ops, e[0].writes.clone(), e[0].flush),
            (0, vec![0], Some(1))
        );
        assert_eq!(
            (e[1].durable_ops, e[1].writes.clone(), e[1].flush),
            (2, vec![2, 3, 4], None)
        );
    }

    #[test]
    fn prefix_images_follow_the_log() {
        let (dev, log) = sample();
        assert!(log.image_after(0).bytes().iter().all(|&b| b == 0));
        assert_eq!(log.image_after(1).bytes()[0], 1);
        let img = log.image_after(3);
        assert_eq!((img.bytes()[BLOCK], img.bytes()[4 * BLOCK]), (2, 0));
        let mut all = vec![0; 16 * BLOCK];
        dev.read_at(0, &mut all).unwrap();
        assert_eq!(log.image_after(log.len()).bytes()[..], all[..]);
    }

    #[test]
    fn a_flush_boundary_keeps_only_the_durable_prefix() {
        let (_dev, log) = sample();
        let img = log.materialize(&CrashState::at_flush(2)).unwrap();
        assert_eq!(img.bytes()[0], 1);
        assert!(img.bytes()[BLOCK..].iter().all(|&b| b == 0));
    }

    #[test]
    fn overlapping_writes_land_in_the_chosen_order() {
        let (_dev, log) = sample();
        let state = |ops: [usize; 2]| CrashState {
            durable_ops: 2,
            writes: ops
                .iter()
                .map(|&op| PartialWrite {
                    op,
                    sectors: Sectors::All,
                })
                .collect(),
            flip_bits: vec![],
        };
        // Issue order: 3 wins. Reordered: the older write 2 lands last and wins.
        assert_eq!(log.materialize(&state([2, 3])).unwrap().bytes()[BLOCK], 3);
        assert_eq!(log.materialize(&state([3, 2])).unwrap().bytes()[BLOCK], 2);
    }

    #[test]
    fn a_torn_write_keeps_exactly_its_chosen_sectors() {
        let (_dev, log) = sample();
        let keep = vec![0, 1, 9, 23];
        let st = CrashState {
            durable_ops: 2,
            writes: vec![PartialWrite {
                op: 4,
                sectors: Sectors::Only(keep.clone()),
            }],
            flip_bits: vec![],
        };
        let img = log.materialize(&st).unwrap();
        let w = &img.bytes()[4 * BLOCK..7 * BLOCK];
        for s in 0..24u32 {
            let sec = &w[s as usize * SECTOR_BYTES..(s as usize + 1) * SECTOR_BYTES];
            let want = if keep.contains(&s) { 4 } else { 0 };
            assert!(sec.iter().all(|&b| b == want), "sector {s}");
        }
    }

    #[test]
    fn bit_flips_and_bad_states() {
        let (_dev, log) = sample();
        let st = CrashState {
            durable_ops: 2,
            writes: vec![],
            flip_bits: vec![3, 8 * 4096 + 7],
        };
        let img = log.materialize(&st).unwrap();
        assert_eq!((img.bytes()[0], img.bytes()[4096]), (1 ^ 8, 0x80));
        // Not a flush boundary; a write from an earlier epoch; a sector past the end.
        assert!(log.materialize(&CrashState::at_flush(1)).is_err());
        let bad = |op, sectors| CrashState {
            durable_ops: 2,
            writes: vec![PartialWrite { op, sectors }],
            flip_bits: vec![],
        };
        assert!(log.materialize(&bad(0, Sectors::All)).is_err());
        assert!(log.materialize(&bad(4, Sectors::Only(vec![24]))).is_err());
        assert!(log.materialize(&bad(1, Sectors::All)).is_err());
    }

    #[test]
    fn random_states_replay_from_their_seed_and_cover_the_choices() {
        let (_dev, log) = sample();
        let epoch = &log.epochs()[1];
        let mut seen_orders = std::collections::HashSet::new();
        let mut torn = 0;
        for seed in 0..300 {
            let a = log.seeded_state(epoch, CrashChoice::default(), seed);
            assert_eq!(a, log.seeded_state(epoch, CrashChoice::default(), seed));
            assert!(a.horizon() <= log.len());
            log.materialize(&a).unwrap();
            seen_orders.insert(a.writes.iter().map(|w| w.op).collect::<Vec<_>>());
            torn += a
                .writes
                .iter()
                .filter(|w| matches!(&w.sectors, Sectors::Only(s) if s.len() < 24))
                .count();
        }
        // Every subset of the 3 writes in every order: 1 + 3 + 6 + 6 = 16.
        assert_eq!(seen_orders.len(), 16);
        assert!(torn > 10);
    }

    #[test]
    fn the_old_crash_image_keeps_everything_before_the_last_flush() {
        let (_dev, log) = sample();
        for seed in 0..8 {
            assert_eq!(log.crash_image(log.len(), seed).bytes()[0], 1);
        }
    }
}
