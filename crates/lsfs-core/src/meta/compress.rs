//! The store's side of compressed records (docs/FORMAT.md §3.3): which
//! records the segment constructor compresses, the frames it has made and
//! not yet written, and reading a block back through its frame.
//!
//! A compressed record keeps every payload slot, so each block keeps its
//! own physical address and the segment counters stay exactly what they
//! were; only the frame's blocks are written. Reading block `k` of a frame
//! reads and decompresses the whole frame; the last few frames read are
//! kept, so a sequential read decompresses each frame once.
//!
//! **When.** Under the engine's lock, the constructor needs to know only
//! *whether* a record's run is compressed: the DAT entries of its blocks
//! name frame slots or not, and nothing else depends on the frame (the
//! places, the summary, the segment counters are a raw record's). The
//! frame's bytes, its size `m`, the header's flag and `m`, and the CRC
//! are needed only when the record is written. So a long run is proved
//! compressible under the lock from its first 128 KiB alone
//! (`frame::prove_by_prefix`: that prefix's LZ4 block with the rest of
//! the run as literals is a valid frame, and it fits), and its record is
//! queued raw as a deferred write (`RecordLater`); the thread that runs
//! the I/O queue compresses it after the lock is let go, with helpers on
//! the other cores (device/io_queue.rs). The frame is the one the lock
//! would have made (LZ4's or zstd's, as the mount compresses) whenever
//! that one fits, the prefix frame otherwise (a valid LZ4 block of the
//! run too, so the format is unchanged).
//! A read of a block whose record is still queued makes the frame then,
//! once (`IoQueue::read_at`). Short runs, and runs the prefix does not
//! prove, are compressed under the lock as before.

use crate::cache::vkey;
use crate::cache::Owner;
use crate::device::DeferredWrite;
use crate::error::{Error, Result};
use crate::layout::BLOCK_BYTES;
use crate::log::frame;
use crate::log::record::holds_file_data;
use crate::log::record::{RecordHeader, FLAG_COMPRESSED};
use crate::meta::construct::{Item, Plan};
use crate::meta::dat_entry::DatEntry;
use crate::meta::store::{Store, StoreStats};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Decompressed frames kept for reads: enough for a few files read at once.
const FRAMES_KEPT: usize = 4;

/// The most threads that compress one batch's frames under the lock (the
/// runs not left for later). A batch is compressed while the engine's lock
/// is held, so every request waits for it; its frames are independent, so
/// threads shorten that wait. Each
/// thread keeps a [`frame::Scratch`]: at most a record's 4 MiB gathered
/// and LZ4's worst case for it, 8.4 MiB (34 MiB for four threads), and
/// with zstd its compression context, 1.3 MiB at level 3
/// (`ZSTD_sizeof_CCtx` after a 4 MiB record).
pub const MAX_THREADS: usize = 4;

/// Batches of fewer blocks are compressed on the calling thread: starting
/// a thread (tens of microseconds) would cost more than it saves on a few
/// hundred kilobytes (compression takes about 2 ms per MiB).
pub const PARALLEL_MIN_BLOCKS: usize = 128;

/// Threads that compress a batch: the cores, at most [`MAX_THREADS`].
/// Asked once, since the answer may read cgroup files.
fn compress_threads() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(MAX_THREADS)
    })
}

/// The frames of `jobs` (each a record's blocks, in order), in the order
/// of `jobs`: on the calling thread for one job or a small batch, else on
/// up to [`compress_threads`] threads, each with its own `scratch`. Which
/// thread compresses a job does not change its frame.
fn compress_jobs(
    codec: impl Into<frame::Method>,
    jobs: &[Vec<&[u8]>],
    scratch: &mut Vec<frame::Scratch>,
) -> Vec<Option<Vec<u8>>> {
    let blocks: usize = jobs.iter().map(|j| j.len()).sum();
    let threads = if blocks < PARALLEL_MIN_BLOCKS {
        1
    } else {
        compress_threads().min(jobs.len())
    };
    compress_jobs_on(codec.into(), jobs, scratch, threads)
}

/// [`compress_jobs`] on `threads` threads (the caller's among them).
fn compress_jobs_on(
    codec: frame::Method,
    jobs: &[Vec<&[u8]>],
    scratch: &mut Vec<frame::Scratch>,
    threads: usize,
) -> Vec<Option<Vec<u8>>> {
    let threads = threads.max(1);
    if scratch.len() < threads {
        scratch.resize_with(threads, Default::default);
    }
    if threads == 1 {
        return jobs
            .iter()
            .map(|j| frame::compress_blocks_with(codec, j, &mut scratch[0]))
            .collect();
    }
    // Records differ in size, so each thread takes the next job when it is
    // done with one rather than a fixed share.
    let next = AtomicUsize::new(0);
    let work = |s: &mut frame::Scratch| {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(job) = jobs.get(i) else {
                return done;
            };
            done.push((i, frame::compress_blocks_with(codec, job, s)));
        }
    };
    let mut out: Vec<Option<Vec<u8>>> = vec![None; jobs.len()];
    let (mine, others) = scratch[..threads].split_first_mut().expect("threads >= 1");
    std::thread::scope(|sc| {
        let work = &work;
        let handles: Vec<_> = others
            .iter_mut()
            .map(|s| sc.spawn(move || work(s)))
            .collect();
        let mut all = work(mine);
        for h in handles {
            match h.join() {
                Ok(done) => all.extend(done),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        for (i, f) in all {
            out[i] = f;
        }
    });
    out
}

/// Runs of at least this many blocks are compressed after the engine's
/// lock is let go, if the first [`PROBE_BLOCKS`] of them prove that the
/// run will take fewer blocks than it holds (`frame::prove_by_prefix`).
/// Shorter runs cost little under the lock (128 KiB, about 0.2 ms), and an
/// fsync's small record is written at once anyway.
pub const LATER_MIN_BLOCKS: usize = 64;

/// Blocks compressed under the lock to prove a run compressible: 128 KiB
/// is 1/32 of a full record's work. The proof must save what appending
/// the rest as literals costs (one byte per 255, 16 KiB for a full
/// record) and a block, so a prefix that LZ4 shrinks by a sixth or more
/// proves a full record.
pub const PROBE_BLOCKS: usize = 32;

/// A record's frame, made or to be made.
enum Pending {
    /// Compressed under the lock: the frame's blocks.
    Made(Vec<u8>),
    /// Proved to fit, compressed when the record is written
    /// ([`RecordLater`]) with the method.
    Later(frame::PrefixProof, frame::Method),
}

/// The frame of record whose frame is left for later, as
/// [`Store::take_frame`] hands it over.
pub(super) enum TakenFrame {
    /// (its blocks, how many, the payload slots it holds)
    Made(Vec<u8>, u32, u32),
    /// (the payload slots it holds, the proof, how to compress it)
    Later(u32, frame::PrefixProof, frame::Method),
}

/// What records compressed after the lock did, for the store's counters
/// ([`Store::stats_with_later`]).
#[derive(Default)]
pub(super) struct LaterCounters {
    records: AtomicU64,
    slots_unwritten: AtomicU64,
    blocks_written: AtomicU64,
}

#[derive(Default)]
pub struct Frames {
    /// Frames made, or proved and left for later, for records about to be
    /// written, by the record's first payload block: (payload slots, the
    /// frame).
    pending: BTreeMap<u64, (usize, Pending)>,
    /// Counters of the records compressed after the lock.
    later: Arc<LaterCounters>,
    /// Recently decompressed frames, by first block, newest last.
    read: Vec<(u64, Arc<Vec<u8>>)>,
    /// One per compressing thread, kept from batch to batch.
    scratch: Vec<frame::Scratch>,
}

impl Frames {
    /// Every record written may reuse blocks a kept frame came from.
    pub(super) fn forget_read(&mut self) {
        self.read.clear();
    }
}

impl Store {
    /// How new records of user data are compressed, if they are: the
    /// mount's codec (and zstd level), or the image's codec at its
    /// default level when the mount does not say. Never zstd
    /// on an image without ZSTD_FRAMES (a read-only mount, which writes
    /// nothing, does not set it), so a build that knows only LZ4 frames
    /// never meets one.
    pub fn compressing(&self) -> Option<frame::Method> {
        use crate::meta::store::Compress;
        if !self.sb.compressed_records() {
            return None;
        }
        let image = if self.sb.zstd_frames() {
            Compress::ZSTD
        } else {
            Compress::Lz4
        };
        match self.config.compress.unwrap_or(image) {
            Compress::Zstd(_) if !self.sb.zstd_frames() => None,
            c => c.method(),
        }
    }

    /// Compress the payload of each record of `plan` (`items`, in plan
    /// order) that starts with user file data, as far as it goes, if that
    /// shrinks; the frames wait in `pending` for `frame_of_place` and
    /// `take_frame`. (A checkpoint's records hold file data first, by
    /// inode, then tree nodes and the metadata files, which stay raw.)
    pub(super) fn compress_plan(&mut self, plan: &Plan, items: &[Item]) {
        self.compress_plans(&[(plan, items)]);
    }

    /// [`Store::compress_plan`] of several plans as one batch (a
    /// checkpoint's streams), so that all their records' frames are
    /// compressed together, on up to [`MAX_THREADS`] threads.
    pub(super) fn compress_plans(&mut self, parts: &[(&Plan, &[Item])]) {
        let Some(method) = self.compressing() else {
            return;
        };
        let mut runs: Vec<(u64, Vec<u64>)> = Vec::new();
        for &(plan, items) in parts {
            let mut rest = items;
            for r in &plan.records {
                let (mine, more) = rest.split_at(r.npayload);
                rest = more;
                let vs = self.compressible_run(mine);
                // One block never shrinks into fewer (frame::compress).
                if vs.len() >= 2 {
                    let first = self.geo.segment_start(r.seg) + (r.off as usize + r.nsum()) as u64;
                    runs.push((first, vs));
                }
            }
        }
        // Long runs that a prefix proves compressible are compressed when
        // their record is written, outside the lock; the rest now. The
        // proof is an LZ4 block (a prefix's, with the rest as literals),
        // which a zstd mount falls back to if zstd does not fit.
        let mut probe = Vec::with_capacity(PROBE_BLOCKS * BLOCK_BYTES);
        runs.retain(|(first, vs)| {
            if vs.len() < LATER_MIN_BLOCKS {
                return true;
            }
            probe.clear();
            for &v in &vs[..PROBE_BLOCKS] {
                probe.extend_from_slice(
                    self.cache.peek(vkey(v)).expect("found by compressible_run"),
                );
            }
            match frame::prove_by_prefix(&probe, vs.len() * BLOCK_BYTES) {
                Some(proof) => {
                    let later = (vs.len(), Pending::Later(proof, method));
                    self.frames.pending.insert(*first, later);
                    false
                }
                None => true,
            }
        });
        let cache = &self.cache;
        let jobs: Vec<Vec<&[u8]>> = runs
            .iter()
            .map(|(_, vs)| {
                vs.iter()
                    .map(|&v| cache.peek(vkey(v)).expect("found by compressible_run"))
                    .collect()
            })
            .collect();
        let frames = compress_jobs(method, &jobs, &mut self.frames.scratch);
        for ((first, vs), f) in runs.into_iter().zip(frames) {
            if let Some(f) = f {
                self.frames
                    .pending
                    .insert(first, (vs.len(), Pending::Made(f)));
            }
        }
    }

    /// The leading user data blocks of `items` that may be compressed, each
    /// read from the cache once (a read the cache's policy counts).
    fn compressible_run(&mut self, items: &[Item]) -> Vec<u64> {
        let mut vs = Vec::with_capacity(items.len());
        for it in items {
            let Item::Virtual(v) = *it else { break };
            let Some(o) = self.cache.owner(vkey(v)) else {
                break;
            };
            if !holds_file_data(o.kind, o.ino) || self.nocompress.contains(&o.ino) {
                break;
            }
            if self.cache.get(vkey(v)).is_none() {
                return Vec::new();
            }
            vs.push(v);
        }
        vs
    }

    /// `DatEntry::frame` of a block placed at `pos`: its slot in a pending
    /// frame, plus one, or 0.
    pub(super) fn frame_of_place(&self, pos: u64) -> u16 {
        match self.frames.pending.range(..=pos).next_back() {
            Some((&first, (n, _))) if pos < first + *n as u64 => (pos - first + 1) as u16,
            _ => 0,
        }
    }

    /// The frame made, or left for later, for the record whose payload
    /// starts at `first`, taken out of `pending`.
    pub(super) fn take_frame(&mut self, first: u64) -> Option<TakenFrame> {
        Some(match self.frames.pending.remove(&first)? {
            (k, Pending::Made(f)) => {
                let m = (f.len() / BLOCK_BYTES) as u32;
                TakenFrame::Made(f, m, k as u32)
            }
            (k, Pending::Later(proof, method)) => TakenFrame::Later(k as u32, proof, method),
        })
    }

    /// The write of a record (header `h`, the whole record in `buf`: its
    /// summary blocks zero, its payload raw) whose first `k` payload
    /// slots are compressed when it is written, with `proof`.
    pub(super) fn record_later(
        &self,
        block: u64,
        h: RecordHeader,
        buf: Vec<u8>,
        k: u32,
        proof: frame::PrefixProof,
        method: frame::Method,
    ) -> Arc<dyn DeferredWrite> {
        Arc::new(RecordLater {
            offset: self.geo.byte_offset(block),
            len: buf.len() as u64,
            input: Mutex::new(Some((h, buf, k, proof, method))),
            made: OnceLock::new(),
            counters: self.frames.later.clone(),
        })
    }

    /// The store's counters with what records compressed after the lock
    /// did added: those records are counted when queued, what their frames
    /// save when the frames are made.
    pub(super) fn stats_with_later(&self) -> StoreStats {
        let c = &self.frames.later;
        let mut s = self.stats.clone();
        s.compressed_records += c.records.load(Ordering::Relaxed);
        s.compressed_slots_unwritten += c.slots_unwritten.load(Ordering::Relaxed);
        s.blocks_written += c.blocks_written.load(Ordering::Relaxed);
        s
    }

    /// Frames not written (a failed construction): forgotten.
    pub(super) fn drop_pending_frames(&mut self) {
        self.frames.pending.clear();
    }

    /// The block stored at `pblock`, raw or slot `frame - 1` of a frame
    /// (`DatEntry::frame`).
    pub(crate) fn read_stored(&mut self, pblock: u64, frame: u16, what: &str) -> Result<Vec<u8>> {
        if frame == 0 {
            let mut b = vec![0; BLOCK_BYTES];
            self.dev.read_at(self.geo.byte_offset(pblock), &mut b)?;
            return Ok(b);
        }
        let k = frame as usize - 1;
        let Some(start) = pblock.checked_sub(k as u64) else {
            return Err(Error::corrupt(format!(
                "{what}: slot {k} of a frame before block 0"
            )));
        };
        let blocks = self.read_frame(start, what)?;
        Ok(frame_slot(&blocks, start, k, what)?.to_vec())
    }

    /// [`Store::vread_ahead`] of a block in a frame: `v0` and the blocks
    /// after it that are the next slots of the same frame, cached clean from
    /// one decompression. Returns how many.
    pub(crate) fn vread_ahead_framed(
        &mut self,
        v0: u64,
        first: DatEntry,
        n: u64,
        owner: impl Fn(u64) -> Owner,
    ) -> Result<u64> {
        let what = format!("virtual block {v0}");
        let Some((start, k0)) = first.frame_slot() else {
            return Err(Error::corrupt(format!("{what}: frame before block 0")));
        };
        let blocks = self.read_frame(start, &what)?;
        let mut run = 0;
        while run < n {
            let v = v0 + run;
            if run > 0
                && (self.cache.contains(vkey(v))
                    || self.dat_get(v)?.frame_slot() != Some((start, k0 + run as usize)))
            {
                break;
            }
            let b = frame_slot(&blocks, start, k0 + run as usize, &what)?;
            self.cache.insert_clean(vkey(v), b, owner(run));
            run += 1;
        }
        Ok(run)
    }

    /// The frame at block `start` read and decompressed, not kept (fsck).
    pub(crate) fn decompress_frame(&mut self, start: u64, what: &str) -> Result<Vec<u8>> {
        let what = format!("{what}: frame at block {start}");
        crate::meta::store::check_phys(&self.geo, start, &what)?;
        let mut first = vec![0; BLOCK_BYTES];
        self.dev.read_at(self.geo.byte_offset(start), &mut first)?;
        let (_, m, _) = frame::frame_size(&first, &what)?;
        crate::meta::store::check_phys(&self.geo, start + m as u64 - 1, &what)?;
        let mut all = vec![0; m * BLOCK_BYTES];
        self.dev.read_at(self.geo.byte_offset(start), &mut all)?;
        frame::decompress(&all, &what)
    }

    /// The decompressed blocks of the frame starting at block `start`
    /// (checked: a frame the DAT names must verify and decompress).
    pub(crate) fn read_frame(&mut self, start: u64, what: &str) -> Result<Arc<Vec<u8>>> {
        if let Some(i) = self.frames.read.iter().position(|f| f.0 == start) {
            let f = self.frames.read.remove(i);
            self.frames.read.push(f.clone());
            return Ok(f.1);
        }
        let blocks = Arc::new(self.decompress_frame(start, what)?);
        self.stats.frames_decompressed += 1;
        if self.frames.read.len() == FRAMES_KEPT {
            self.frames.read.remove(0);
        }
        self.frames.read.push((start, blocks.clone()));
        Ok(blocks)
    }
}

/// A record whose frame is compressed when it is written: by the thread
/// that runs the I/O queue, after the engine's lock is let go (in a mount,
/// the FUSE writer thread or the request that waits for its write), or by
/// a read that needs its blocks first. Its place, its summary and its
/// slots' DAT entries were fixed under the lock; the frame, the header's
/// `m` and flag COMPRESSED, and the CRC are made here. The proof made
/// under the lock guarantees a frame that fits, so the DAT's entries,
/// which name frame slots, are right whatever LZ4 makes of the run.
struct RecordLater {
    offset: u64,
    len: u64,
    /// Taken when the writes are made.
    input: Mutex<Option<LaterInput>>,
    made: OnceLock<Vec<(u64, Vec<u8>)>>,
    counters: Arc<LaterCounters>,
}

/// The header (without its frame), the record with its payload raw, the
/// slots of the frame, the proof and how to compress it.
type LaterInput = (
    RecordHeader,
    Vec<u8>,
    u32,
    frame::PrefixProof,
    frame::Method,
);

/// Scratch buffers of the threads that compress records later (the
/// thread running the I/O queue and its helpers, which start anew for each
/// batch): a record's LZ4 worst case, 4.2 MiB for a full one, kept rather
/// than faulted in again for every record. At most [`MAX_THREADS`] are
/// kept, as many as compress at once.
static LATER_SCRATCH: Mutex<Vec<frame::Scratch>> = Mutex::new(Vec::new());

/// Run `f` with a scratch buffer from [`LATER_SCRATCH`], then give it back.
fn with_later_scratch<T>(f: impl FnOnce(&mut frame::Scratch) -> T) -> T {
    let pool = || LATER_SCRATCH.lock().unwrap_or_else(|p| p.into_inner());
    let mut s = pool().pop().unwrap_or_default();
    let r = f(&mut s);
    let mut kept = pool();
    if kept.len() < MAX_THREADS {
        kept.push(s);
    }
    r
}

impl RecordLater {
    fn make(&self) -> Vec<(u64, Vec<u8>)> {
        let (mut h, mut buf, k, proof, method) = self
            .input
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .expect("a record's writes are made once");
        let nsum = h.nsum_blocks as usize;
        let run = nsum * BLOCK_BYTES..(nsum + k as usize) * BLOCK_BYTES;
        let f = with_later_scratch(|s| frame::compress_proved(&buf[run.clone()], proof, method, s));
        let m = (f.len() / BLOCK_BYTES) as u32;
        buf.splice(run, f);
        (h.flags, h.frame_blocks, h.frame_slots) = (h.flags | FLAG_COMPRESSED, m, k);
        h.seal(&mut buf);
        let c = &self.counters;
        c.records.fetch_add(1, Ordering::Relaxed);
        c.slots_unwritten
            .fetch_add(h.unwritten_slots() as u64, Ordering::Relaxed);
        c.blocks_written
            .fetch_add(h.written_blocks() as u64, Ordering::Relaxed);
        // The summary and the frame, then the payload after the frame's
        // slots (as `Store::write_record` writes a frame made earlier).
        let head = (h.nsum_blocks + m) as usize * BLOCK_BYTES;
        let tail = buf.split_off(head);
        let mut out = vec![(self.offset, buf)];
        if !tail.is_empty() {
            let at = self.offset + ((nsum + k as usize) * BLOCK_BYTES) as u64;
            out.push((at, tail));
        }
        out
    }
}

impl DeferredWrite for RecordLater {
    fn span(&self) -> (u64, u64) {
        (self.offset, self.len)
    }
    fn writes(&self) -> &[(u64, Vec<u8>)] {
        self.made.get_or_init(|| self.make())
    }
}

/// Slot `k` of the decompressed frame `blocks` (at block `start`).
fn frame_slot<'a>(blocks: &'a [u8], start: u64, k: usize, what: &str) -> Result<&'a [u8]> {
    blocks
        .get(k * BLOCK_BYTES..(k + 1) * BLOCK_BYTES)
        .ok_or_else(|| {
            Error::corrupt(format!(
                "{what}: slot {k} of the frame at block {start}, which has {}",
                blocks.len() / BLOCK_BYTES
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::frame::noise;
    use crate::log::frame::Codec::{Lz4, Zstd};

    fn text(seed: u64, nblocks: usize) -> Vec<u8> {
        let words = [
            "fn ", "let ", "self", ".store", "(&mut ", "u64", " {\n", "}\n", "// ",
        ];
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut out = Vec::with_capacity(nblocks * BLOCK_BYTES + 8);
        while out.len() < nblocks * BLOCK_BYTES {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            out.extend_from_slice(words[(x % words.len() as u64) as usize].as_bytes());
        }
        out.truncate(nblocks * BLOCK_BYTES);
        out
    }

    /// A batch as a checkpoint makes one: full records of text, records of
    /// noise and single blocks (both stored raw), short records.
    fn mixed_batch() -> Vec<Vec<u8>> {
        let mut batch = Vec::new();
        for i in 0..12u64 {
            batch.push(match i % 4 {
                0 => text(i, 1024),
                1 => noise(i, 300),
                2 => text(i, 1),
                _ => text(i, 2 + i as usize * 37),
            });
        }
        batch
    }

    fn jobs_of(batch: &[Vec<u8>]) -> Vec<Vec<&[u8]>> {
        batch
            .iter()
            .map(|r| r.chunks(BLOCK_BYTES).collect())
            .collect()
    }

    /// Threads change nothing on disk: every frame of the batch is the one
    /// the calling thread alone makes, byte for byte, in the same place,
    /// and the records that stay raw stay raw.
    #[test]
    fn threads_make_exactly_the_serial_frames() {
        let batch = mixed_batch();
        let jobs = jobs_of(&batch);
        let serial = compress_jobs_on(Lz4.into(), &jobs, &mut Vec::new(), 1);
        assert_eq!(serial.len(), batch.len());
        for (r, f) in batch.iter().zip(&serial) {
            assert_eq!(f, &frame::compress(r), "the one-thread path");
        }
        let raw = serial.iter().filter(|f| f.is_none()).count();
        assert!(raw >= 6 && raw < batch.len(), "{raw} records raw");
        // Scratch kept across batches, as a mount keeps it.
        let mut scratch = Vec::new();
        for threads in [2, 3, MAX_THREADS, 2] {
            assert_eq!(
                compress_jobs_on(Lz4.into(), &jobs, &mut scratch, threads),
                serial
            );
        }
        assert_eq!(scratch.len(), MAX_THREADS);
        assert_eq!(compress_jobs(Lz4, &jobs, &mut scratch), serial);
        // zstd likewise, with the same scratch (its contexts kept in it).
        let serial = compress_jobs_on(Zstd.into(), &jobs, &mut Vec::new(), 1);
        for (r, f) in batch.iter().zip(&serial) {
            assert_eq!(f, &frame::compress_with(Zstd, r));
        }
        assert_eq!(
            compress_jobs_on(Zstd.into(), &jobs, &mut scratch, 3),
            serial
        );
        // The memory bound docs/PERFORMANCE.md states: per thread, one
        // record's blocks and LZ4's worst case for them.
        let record = crate::log::record::MAX_RECORD_PAYLOAD * BLOCK_BYTES;
        let bound =
            record + frame::FRAME_HEADER_BYTES + lz4_flex::block::get_maximum_output_size(record);
        assert_eq!(bound, 8_808_090);
        for s in &scratch {
            assert!(s.capacity() <= bound, "{} bytes kept", s.capacity());
        }
    }

    #[test]
    fn frames_made_on_threads_decompress_to_their_records() {
        let batch = mixed_batch();
        let frames = compress_jobs_on(Lz4.into(), &jobs_of(&batch), &mut Vec::new(), MAX_THREADS);
        let mut n = 0;
        for (r, f) in batch.iter().zip(frames) {
            if let Some(f) = f {
                assert!(f.len() < r.len());
                assert_eq!(&frame::decompress(&f, "t").unwrap(), r);
                n += 1;
            }
        }
        assert!(n >= 6, "{n} frames");
    }
}
