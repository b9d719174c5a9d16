//! The store's side of compressed records (docs/FORMAT.md §3.3): which
//! records the segment constructor compresses, the frames it has made and
//! not yet written, and reading a block back through its frame.
//!
//! A compressed record keeps every payload slot, so each block keeps its
//! own physical address and the segment counters stay exactly what they
//! were; only the frame's blocks are written. Reading block `k` of a frame
//! reads and decompresses the whole frame; the last few frames read are
//! kept, so a sequential read decompresses each frame once.

use crate::cache::vkey;
use crate::cache::Owner;
use crate::error::{Error, Result};
use crate::layout::BLOCK_BYTES;
use crate::log::frame;
use crate::log::record::holds_file_data;
use crate::meta::construct::{Item, Plan};
use crate::meta::dat_entry::DatEntry;
use crate::meta::store::Store;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Decompressed frames kept for reads: enough for a few files read at once.
const FRAMES_KEPT: usize = 4;

/// The most threads that compress one batch's frames. A batch is
/// compressed while the engine's lock is held, so every request waits for
/// it; its frames are independent, so threads shorten that wait. Each
/// thread keeps a [`frame::Scratch`]: at most a record's 4 MiB gathered
/// and LZ4's worst case for it, 8.4 MiB (34 MiB for four threads).
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
fn compress_jobs(jobs: &[Vec<&[u8]>], scratch: &mut Vec<frame::Scratch>) -> Vec<Option<Vec<u8>>> {
    let blocks: usize = jobs.iter().map(|j| j.len()).sum();
    let threads = if blocks < PARALLEL_MIN_BLOCKS {
        1
    } else {
        compress_threads().min(jobs.len())
    };
    compress_jobs_on(jobs, scratch, threads)
}

/// [`compress_jobs`] on `threads` threads (the caller's among them).
fn compress_jobs_on(
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
            .map(|j| frame::compress_blocks(j, &mut scratch[0]))
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
            done.push((i, frame::compress_blocks(job, s)));
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

#[derive(Default)]
pub struct Frames {
    /// Frames made for records about to be written, by the record's first
    /// payload block: (payload slots, the frame's blocks).
    pending: BTreeMap<u64, (usize, Vec<u8>)>,
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
    /// Whether new records of user data are compressed: the image
    /// carries the feature flag and the mount does not say no.
    pub fn compressing(&self) -> bool {
        self.config.compress != Some(false) && self.sb.compressed_records()
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
        if !self.compressing() {
            return;
        }
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
        let cache = &self.cache;
        let jobs: Vec<Vec<&[u8]>> = runs
            .iter()
            .map(|(_, vs)| {
                vs.iter()
                    .map(|&v| cache.peek(vkey(v)).expect("found by compressible_run"))
                    .collect()
            })
            .collect();
        let frames = compress_jobs(&jobs, &mut self.frames.scratch);
        for ((first, vs), f) in runs.into_iter().zip(frames) {
            if let Some(f) = f {
                self.frames.pending.insert(first, (vs.len(), f));
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
            Some((&first, &(n, _))) if pos < first + n as u64 => (pos - first + 1) as u16,
            _ => 0,
        }
    }

    /// The frame made for the record whose payload starts at `first`:
    /// (its blocks, how many, the payload slots it holds), taken out of
    /// `pending`.
    pub(super) fn take_frame(&mut self, first: u64) -> Option<(Vec<u8>, u32, u32)> {
        let (k, f) = self.frames.pending.remove(&first)?;
        let m = (f.len() / BLOCK_BYTES) as u32;
        Some((f, m, k as u32))
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

    fn noise(seed: u64, nblocks: usize) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..nblocks * BLOCK_BYTES)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
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
        let serial = compress_jobs_on(&jobs, &mut Vec::new(), 1);
        assert_eq!(serial.len(), batch.len());
        for (r, f) in batch.iter().zip(&serial) {
            assert_eq!(f, &frame::compress(r), "the one-thread path");
        }
        let raw = serial.iter().filter(|f| f.is_none()).count();
        assert!(raw >= 6 && raw < batch.len(), "{raw} records raw");
        // Scratch kept across batches, as a mount keeps it.
        let mut scratch = Vec::new();
        for threads in [2, 3, MAX_THREADS, 2] {
            assert_eq!(compress_jobs_on(&jobs, &mut scratch, threads), serial);
        }
        assert_eq!(scratch.len(), MAX_THREADS);
        assert_eq!(compress_jobs(&jobs, &mut scratch), serial);
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
        let frames = compress_jobs_on(&jobs_of(&batch), &mut Vec::new(), MAX_THREADS);
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
