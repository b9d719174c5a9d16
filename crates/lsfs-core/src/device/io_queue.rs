//! An ordered queue of device writes and flushes, so that the file system
//! does its device I/O outside the lock its requests take.
//!
//! The engine runs under one lock. Under it, the store *appends* its writes
//! (offset and buffer) and flushes here instead of calling the device, and
//! changes its in-memory state as if they were done; each append gets a
//! ticket. Outside the lock, one executor at a time takes everything queued
//! and runs it **in order** against the device; a caller that needs its
//! work done (an fsync, a sync, a checkpoint asked for, an unmount) calls
//! [`IoQueue::complete`] with its ticket after letting go of the lock, and
//! either runs the queue itself or waits for the thread running it.
//!
//! Order is what keeps the crash rules (docs/CRASH.md): data streams
//! flushed before the log's chain, a superblock written after its
//! checkpoint's flush and the two copies never in one flush epoch, a freed
//! segment reused only after the checkpoint that freed it. Nothing is
//! reordered across a flush. Flushes are of two kinds:
//! - an **ordering** flush ([`IoQueue::barrier`], what the store's
//!   `dev.flush()` appends): writes after it must not reach the medium
//!   before those before it; it runs where it stands;
//! - a **durability** flush ([`IoQueue::flush_durable`], an fsync record's):
//!   only its caller's durability depends on it, nothing written later is
//!   ordered by it. When a later flush in the same batch covers it, it is
//!   not run: that is **group commit**, N threads fsyncing at once share one
//!   flush (the first one's flush runs while the others append; the next
//!   executor finds their records and flushes once for all). Its ticket is
//!   complete when the covering flush is. An fsync record written without a
//!   flush of its own behind it is as safe as a torn tail: recovery takes
//!   records by sequence number and stops at the first one missing.
//!
//! A flush with nothing written since the last one is not run either.
//! The records of the fsyncs that meet in a batch lie end to end in the
//! log; with the flushes between them skipped, nothing separates their
//! writes, which go to the device as **one write** (up to
//! `MERGE_BYTES_MAX`; counted in `writes_merged`): on a virtual machine
//! each write handed to the device costs an exit to the host and a round
//! trip the batch waits for.
//!
//! **Reads** see queued writes not yet complete: [`IoQueue::read_at`] reads
//! the device, then lays the overlapping queued writes over it, in order
//! (the engine marks blocks clean once their write is queued, and may evict
//! and read them again before the write is done). The overlapping writes are
//! picked before the device is read, so a write that completes in between
//! is still laid over what may be an older read.
//!
//! **Deferred writes** ([`DeferredWrite`]) are writes whose bytes are made
//! when they run, by the thread running the queue: a compressed record,
//! queued raw, whose frame is compressed there, outside the engine's lock
//! (meta/compress.rs). They run in order like any write; helper threads
//! make a batch's deferred writes ahead of the thread running it, and a
//! read that overlaps one makes its bytes (once) to lay them over. One
//! counts its span against the bound until its bytes are made, then what
//! they hold; an append at the bound first makes the queued ones itself.
//!
//! **Discards** run in order like writes: one appended after a checkpoint's
//! flush runs after it, and before any later write to the same range.
//! Reads lay a queued discard over the device as zeros, in order with the
//! queued writes. A discard that fails is logged and forgotten: it is a
//! hint, and nothing depends on it, so it never latches the queue.
//!
//! **Errors.** A write or flush error latches: the error is logged ("device
//! error, file system is now read-only"), the rest of the queue is not run,
//! every ticket not complete fails with it, and every later append is
//! refused, so the store turns read-only (`Store::writable`). What was not
//! written stays queued, and reads keep seeing it: the in-memory state the
//! engine went on with stays readable, as before when failed blocks stayed
//! dirty in the cache.
//!
//! **Memory.** The queue holds what appenders have not completed. Callers
//! complete what they appended before replying (the FUSE adapter, the
//! ticker, the control socket), and an append that would take the queued
//! bytes past [`IoQueue::limit`] (64 MiB by default) first completes what is
//! queued, on the appending thread, under the engine's lock: so at most the
//! limit plus one write (a record, at most a segment) are ever queued.
//! That fallback is counted (`inline_drains`).
//!
//! **Immediate mode** (the default): each append runs at once on the
//! appending thread, as the store did before the queue, every flush
//! included. Offline tools, tests and library users need nothing else; a
//! mount switches the queue to deferred mode ([`IoQueue::set_deferred`]).

use super::{BlockDevice, DeviceStats};
use crate::error::{Error, Result};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Names one appended operation; tickets grow by one per append, from 1.
/// An operation is complete when every operation up to it has run (and, for
/// a flush, a flush at or after it has).
pub type Ticket = u64;

/// Threads that help a batch's executor make its deferred writes ahead:
/// one less than the cores, at most three (four compressing in all, as
/// under the lock before). Asked once.
const MAKE_AHEAD_MAX: usize = 3;

fn make_ahead_threads() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .saturating_sub(1)
            .min(MAKE_AHEAD_MAX)
    })
}

/// Default bound of the bytes the queue holds (see the module's "Memory").
pub const PENDING_BYTES_MAX: usize = 64 << 20;

/// Bound of the capacity of the spare buffers kept for reuse: a few
/// records' worth, what one request's checkpoint writes in a sequential
/// write with the default 2 MiB segments.
const SPARE_BYTES_MAX: usize = 16 << 20;
/// The most bytes adjacent writes of a batch are merged into (a copy);
/// what merging saves is a write per fsync record, a few KiB each; large
/// writes, a checkpoint's, gain little from fewer calls.
const MERGE_BYTES_MAX: usize = 1 << 20;

/// A write whose bytes are made when it runs, not when it is appended:
/// a compressed record, whose frame is compressed by whoever runs the
/// queue, outside the engine's lock (meta/compress.rs). A read that needs
/// its bytes before then makes them (once; the run uses the same).
pub trait DeferredWrite: Send + Sync {
    /// The bytes it may write: (offset, length). The queue counts them
    /// against its bound, and reads overlapping them make its bytes.
    fn span(&self) -> (u64, u64);
    /// Its writes, in order, each inside the span: made on the first call,
    /// the same on every call.
    fn writes(&self) -> &[(u64, Vec<u8>)];
}

#[derive(Clone)]
enum Op {
    Write { offset: u64, data: Arc<Vec<u8>> },
    Deferred(Arc<dyn DeferredWrite>),
    Flush { durable: bool },
    Discard { offset: u64, len: u64 },
}

struct Entry {
    ticket: Ticket,
    op: Op,
    /// What it counts in `pending_bytes`: a deferred write its span until
    /// its bytes are made, then their length.
    counted: usize,
}

struct State {
    /// Appended and not complete, oldest first, with consecutive tickets.
    entries: VecDeque<Entry>,
    /// The ticket the next append takes.
    next: Ticket,
    /// Every operation with a ticket up to this one is complete.
    done: Ticket,
    /// Operations up to this ticket have been taken by an executor.
    taken: Ticket,
    /// An executor is running a batch.
    running: bool,
    deferred: bool,
    /// The device error that stopped the queue.
    failed: Option<String>,
    /// Bytes of the queued writes.
    pending_bytes: usize,
    limit: usize,
    /// A write reached the device since the last flush did. True at first:
    /// whatever was written before the queue existed may be unflushed.
    unflushed: bool,
    /// Buffers of writes that ran, emptied, for [`BlockDevice::buffer`]: at
    /// most [`SPARE_BYTES_MAX`] bytes of capacity in all.
    spare: Vec<Vec<u8>>,
}

impl Op {
    /// What it counts against the queue's bound.
    fn queued_bytes(&self) -> usize {
        match self {
            Op::Write { data, .. } => data.len(),
            Op::Deferred(w) => w.span().1 as usize,
            Op::Flush { .. } | Op::Discard { .. } => 0,
        }
    }
}

impl State {
    /// Everything up to `upto` is complete: drop it from the queue.
    fn publish(&mut self, upto: Ticket) {
        assert!(
            self.done <= upto && upto <= self.taken,
            "tickets complete in order: done {} then {upto}, taken {}",
            self.done,
            self.taken
        );
        self.done = upto;
        while self.entries.front().is_some_and(|e| e.ticket <= upto) {
            let e = self.entries.pop_front().expect("front exists");
            self.pending_bytes -= e.counted;
        }
    }

    fn last(&self) -> Ticket {
        self.next - 1
    }

    /// Keep the buffer of a write that ran, if nothing else holds it (a
    /// read may, for a moment) and the spare buffers stay within their
    /// bound.
    fn recycle(&mut self, op: Op) {
        let Op::Write { data, .. } = op else {
            return;
        };
        let Ok(mut b) = Arc::try_unwrap(data) else {
            return;
        };
        let kept: usize = self.spare.iter().map(Vec::capacity).sum();
        if kept + b.capacity() <= SPARE_BYTES_MAX {
            b.clear();
            self.spare.push(b);
        }
    }
}

/// Counters of the queue's work, shown by `lsfs stats` (section `io`).
/// Where a running batch stands.
struct BatchRun {
    /// Everything up to here is complete; a durability flush left to a
    /// later one (`held`) holds it back until that one runs.
    covered: Ticket,
    held: bool,
    /// Something was written since the device's last flush.
    unflushed: bool,
}

#[derive(Default)]
struct Counters {
    fsync_flushes: AtomicU64,
    ordering_flushes: AtomicU64,
    flushes: AtomicU64,
    fsync_flushes_shared: AtomicU64,
    empty_flushes: AtomicU64,
    writes: AtomicU64,
    /// Writes that went to the device as part of an earlier one.
    writes_merged: AtomicU64,
    batches: AtomicU64,
    max_batch_fsyncs: AtomicU64,
    waits: AtomicU64,
    inline_drains: AtomicU64,
    max_pending_bytes: AtomicU64,
    discards: AtomicU64,
    discard_errors: AtomicU64,
}

/// A copy of the queue's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct IoCounters {
    /// Whether appends are queued (a mount) or run at once.
    pub deferred: bool,
    /// Durability flushes asked for: one per fsync written as a record.
    pub fsync_flushes: u64,
    /// Ordering flushes asked for (checkpoints, the cleaner, superblocks).
    pub ordering_flushes: u64,
    /// Flushes run on the device.
    pub flushes: u64,
    /// Durability flushes a later flush covered (group commit): fsyncs
    /// that cost no flush of their own.
    pub fsync_flushes_shared: u64,
    /// Flushes not run because nothing was written since the last one.
    pub empty_flushes: u64,
    /// Writes run on the device.
    pub writes: u64,
    /// Queued writes that went to the device as part of the write before
    /// them (adjacent, in one batch: not counted in `writes`).
    pub writes_merged: u64,
    /// Batches run outside the appender's call (deferred mode).
    pub batches: u64,
    /// The most durability flushes one batch held.
    pub max_batch_fsyncs: u64,
    /// Completions that waited for another thread's batch.
    pub waits: u64,
    /// Appends that found the queue at its bound and ran it first, under
    /// the engine's lock.
    pub inline_drains: u64,
    pub pending_bytes: u64,
    pub max_pending_bytes: u64,
    /// The bound on queued bytes (one write may pass it).
    pub limit_bytes: u64,
    /// Discards run on the device, and those that failed (ignored).
    pub discards: u64,
    pub discard_errors: u64,
}

/// The queue, shared by the store (which appends under the engine's lock)
/// and whoever completes its work (outside it).
pub struct IoQueue {
    dev: Box<dyn BlockDevice>,
    state: Mutex<State>,
    /// Signalled when tickets complete, the queue fails, or a batch ends.
    progress: Condvar,
    counters: Counters,
}

fn failed_error(reason: &str) -> Error {
    Error::io(
        format!("the device failed earlier ({reason})"),
        std::io::Error::from_raw_os_error(libc::EIO),
    )
}

impl IoQueue {
    /// A queue in immediate mode in front of `dev`.
    pub fn new(dev: Box<dyn BlockDevice>) -> Arc<IoQueue> {
        Arc::new(IoQueue {
            dev,
            state: Mutex::new(State {
                entries: VecDeque::new(),
                next: 1,
                done: 0,
                taken: 0,
                running: false,
                deferred: false,
                failed: None,
                pending_bytes: 0,
                limit: PENDING_BYTES_MAX,
                unflushed: true,
                spare: Vec::new(),
            }),
            progress: Condvar::new(),
            counters: Counters::default(),
        })
    }

    /// The device the store uses: reads through the queue, writes and
    /// flushes (ordering ones) appended to it.
    pub fn device(self: &Arc<Self>) -> Box<dyn BlockDevice> {
        Box::new(QueuedDevice(self.clone()))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the state leaves it consistent: every
        // change to it is a few assignments, none of which can panic
        // half-way.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queue appends from now on (`true`), or run them at once (`false`,
    /// after completing what is queued; its error, if the device failed, is
    /// returned, and the mode changes all the same).
    pub fn set_deferred(&self, on: bool) -> Result<()> {
        let r = if on {
            Ok(())
        } else {
            self.complete(self.last_ticket())
        };
        let mut st = self.lock();
        assert!(
            on || st.entries.is_empty() || st.failed.is_some(),
            "immediate mode with {} operations queued",
            st.entries.len()
        );
        st.deferred = on;
        r
    }

    pub fn is_deferred(&self) -> bool {
        self.lock().deferred
    }

    /// Change the bound on queued bytes (tests use a small one).
    pub fn set_limit(&self, bytes: usize) {
        self.lock().limit = bytes;
    }

    pub fn limit(&self) -> usize {
        self.lock().limit
    }

    /// The ticket of the last append (0 before any).
    pub fn last_ticket(&self) -> Ticket {
        self.lock().last()
    }

    /// Whether every operation up to `t` is complete.
    pub fn is_complete(&self, t: Ticket) -> bool {
        self.lock().done >= t
    }

    /// Why the queue stopped, if a device error stopped it.
    pub fn failure(&self) -> Option<String> {
        self.lock().failed.clone()
    }

    /// Bytes of writes queued and not complete.
    pub fn pending_bytes(&self) -> usize {
        self.lock().pending_bytes
    }

    pub fn counters(&self) -> IoCounters {
        let (deferred, pending, limit) = {
            let st = self.lock();
            (st.deferred, st.pending_bytes, st.limit)
        };
        let c = &self.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        IoCounters {
            deferred,
            fsync_flushes: g(&c.fsync_flushes),
            ordering_flushes: g(&c.ordering_flushes),
            flushes: g(&c.flushes),
            fsync_flushes_shared: g(&c.fsync_flushes_shared),
            empty_flushes: g(&c.empty_flushes),
            writes: g(&c.writes),
            writes_merged: g(&c.writes_merged),
            batches: g(&c.batches),
            max_batch_fsyncs: g(&c.max_batch_fsyncs),
            waits: g(&c.waits),
            inline_drains: g(&c.inline_drains),
            pending_bytes: pending as u64,
            max_pending_bytes: g(&c.max_pending_bytes),
            limit_bytes: limit as u64,
            discards: g(&c.discards),
            discard_errors: g(&c.discard_errors),
        }
    }

    /// Append a write of `data` at byte `offset`.
    pub fn write(&self, offset: u64, data: Vec<u8>) -> Result<Ticket> {
        super::check_range(self.dev.size_bytes(), offset, data.len(), "write")?;
        self.append(Op::Write {
            offset,
            data: Arc::new(data),
        })
    }

    /// Append a write whose bytes are made when it runs (see
    /// [`DeferredWrite`]).
    pub fn write_deferred(&self, w: Arc<dyn DeferredWrite>) -> Result<Ticket> {
        let (offset, len) = w.span();
        super::check_range(self.dev.size_bytes(), offset, len as usize, "write")?;
        self.append(Op::Deferred(w))
    }

    /// The bytes of deferred write `t` are made: count what they hold
    /// (a compressed record's frame, where its raw payload was counted).
    fn note_made(&self, t: Ticket, w: &dyn DeferredWrite) {
        let made: usize = w.writes().iter().map(|(_, d)| d.len()).sum();
        let mut st = self.lock();
        let st = &mut *st;
        if let Some(e) = st.entries.iter_mut().find(|e| e.ticket == t) {
            st.pending_bytes -= e.counted;
            e.counted = made;
            st.pending_bytes += made;
        }
    }

    /// At the bound: make the queued deferred writes whose bytes are not
    /// made yet, oldest first, on the appending thread, until the queue
    /// is under `bound`. Their bytes are what holds the queue up (a
    /// compressed record queued raw); waiting for the queue to run instead
    /// would also wait for its flushes, with the appender's lock held.
    fn make_queued(&self, bound: usize) {
        let todo: Vec<(Ticket, Arc<dyn DeferredWrite>)> = {
            let st = self.lock();
            st.entries
                .iter()
                .filter_map(|e| match &e.op {
                    Op::Deferred(w) if e.counted == w.span().1 as usize => {
                        Some((e.ticket, w.clone()))
                    }
                    _ => None,
                })
                .collect()
        };
        for (t, w) in todo {
            if self.lock().pending_bytes <= bound {
                return;
            }
            self.note_made(t, w.as_ref());
        }
    }

    /// Run the writes of a deferred write on the device.
    fn run_deferred(&self, w: &dyn DeferredWrite) -> Result<()> {
        for (offset, data) in w.writes() {
            self.dev.write_at(*offset, data)?;
            self.counters.writes.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Append a discard of `len` bytes at `offset` (see the module's
    /// "Discards").
    pub fn discard(&self, offset: u64, len: u64) -> Result<Ticket> {
        super::check_discard(self.dev.size_bytes(), offset, len)?;
        self.append(Op::Discard { offset, len })
    }

    /// Run a discard on the device; its failure is only logged.
    fn run_discard(&self, offset: u64, len: u64) {
        match self.dev.discard(offset, len) {
            Ok(_) => {
                self.counters.discards.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                self.counters.discard_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("discard of {len} bytes at {offset} failed, ignored: {e}");
            }
        }
    }

    /// Append an ordering flush: every write before it is durable before
    /// any write after it reaches the device.
    pub fn barrier(&self) -> Result<Ticket> {
        self.counters
            .ordering_flushes
            .fetch_add(1, Ordering::Relaxed);
        self.append(Op::Flush { durable: false })
    }

    /// Append a durability flush: every write before it is durable when its
    /// ticket is complete; writes after it are not ordered by it.
    pub fn flush_durable(&self) -> Result<Ticket> {
        self.counters.fsync_flushes.fetch_add(1, Ordering::Relaxed);
        self.append(Op::Flush { durable: true })
    }

    fn append(&self, op: Op) -> Result<Ticket> {
        let mut st = self.lock();
        if let Some(f) = &st.failed {
            return Err(failed_error(f));
        }
        if !st.deferred {
            return self.run_now(st, op);
        }
        let len = op.queued_bytes();
        if len > 0 && st.pending_bytes > 0 && st.pending_bytes + len > st.limit {
            let bound = st.limit.saturating_sub(len);
            drop(st);
            self.make_queued(bound);
            st = self.lock();
            if let Some(f) = &st.failed {
                return Err(failed_error(f));
            }
        }
        if len > 0 && st.pending_bytes > 0 && st.pending_bytes + len > st.limit {
            // At the bound: run what is queued first, here.
            self.counters.inline_drains.fetch_add(1, Ordering::Relaxed);
            let last = st.last();
            drop(st);
            self.complete(last)?;
            st = self.lock();
            if let Some(f) = &st.failed {
                return Err(failed_error(f));
            }
        }
        let t = st.next;
        st.next += 1;
        assert!(
            st.entries.back().is_none_or(|e| e.ticket + 1 == t),
            "queued tickets are consecutive"
        );
        st.entries.push_back(Entry {
            ticket: t,
            op,
            counted: len,
        });
        st.pending_bytes += len;
        assert!(
            st.pending_bytes <= st.limit.max(len),
            "{} bytes queued, over the bound of {} and one write of {len}",
            st.pending_bytes,
            st.limit
        );
        self.counters
            .max_pending_bytes
            .fetch_max(st.pending_bytes as u64, Ordering::Relaxed);
        Ok(t)
    }

    /// Immediate mode: run `op` now, holding the state (nothing else runs:
    /// the queue is empty, and one thread at a time appends).
    fn run_now(&self, mut st: MutexGuard<'_, State>, op: Op) -> Result<Ticket> {
        assert!(
            st.entries.is_empty() && !st.running,
            "immediate mode with operations queued"
        );
        let t = st.next;
        st.next += 1;
        st.taken = t;
        let r = match &op {
            Op::Write { offset, data } => self.dev.write_at(*offset, data).map(|_| {
                self.counters.writes.fetch_add(1, Ordering::Relaxed);
                st.unflushed = true;
            }),
            Op::Deferred(w) => self.run_deferred(w.as_ref()).map(|_| st.unflushed = true),
            Op::Flush { .. } => self.dev.flush().map(|_| {
                self.counters.flushes.fetch_add(1, Ordering::Relaxed);
                st.unflushed = false;
            }),
            Op::Discard { offset, len } => {
                self.run_discard(*offset, *len);
                Ok(())
            }
        };
        match r {
            Ok(()) => {
                st.publish(t);
                st.recycle(op);
                Ok(t)
            }
            Err(e) => {
                self.fail(&mut st, &e);
                Err(e)
            }
        }
    }

    fn fail(&self, st: &mut State, err: &Error) {
        if st.failed.is_none() {
            tracing::error!("device error, file system is now read-only: {err}");
            st.failed = Some(err.to_string());
        }
        self.progress.notify_all();
    }

    /// Wait until operation `t` is complete, running the queue if no other
    /// thread is. Call it without the engine's lock, unless the queue is in
    /// immediate mode (then it returns at once). `Err` if the device failed
    /// before `t` was complete.
    pub fn complete(&self, t: Ticket) -> Result<()> {
        let mut st = self.lock();
        assert!(t < st.next, "ticket {t} was never handed out");
        let mut waited = false;
        loop {
            if t <= st.done {
                return Ok(());
            }
            if let Some(f) = &st.failed {
                return Err(failed_error(f));
            }
            if !st.running && st.taken < st.last() {
                st = self.run_batch(st);
                continue;
            }
            if !waited {
                waited = true;
                self.counters.waits.fetch_add(1, Ordering::Relaxed);
            }
            st = self.progress.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Take everything queued and not taken, and run it in order without
    /// holding the state; durability flushes that a later flush of the
    /// batch covers are not run. Completion is published at every flush
    /// run and at the end.
    fn run_batch<'a>(&'a self, mut st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        let taken = st.taken;
        let batch = Self::take_batch(&mut st);
        let last = batch.last().expect("a batch has operations").0;
        let mut run = BatchRun {
            covered: taken,
            held: false,
            unflushed: st.unflushed,
        };
        drop(st);
        self.count_batch(&batch);
        let error = self.execute_batch(&batch, &mut run);
        let mut st = self.lock();
        st.running = false;
        match error {
            None => {
                assert!(
                    !run.held && run.covered == last,
                    "a batch ends complete: covered {} of {last}",
                    run.covered
                );
                st.unflushed = run.unflushed;
                st.publish(last);
            }
            Some(e) => {
                // Conservatively: a failed write may have left something
                // unflushed, and nothing after it runs anyway.
                st.unflushed = true;
                st.publish(run.covered);
                self.fail(&mut st, &e);
            }
        }
        self.progress.notify_all();
        for (_, op) in batch {
            st.recycle(op);
        }
        st
    }

    /// An empty buffer with room for `capacity` bytes: the smallest spare
    /// one that is big enough (so small records leave the large buffers to
    /// large ones), else a new one.
    pub fn buffer(&self, capacity: usize) -> Vec<u8> {
        let mut st = self.lock();
        let fit = (st.spare.iter().enumerate())
            .filter(|(_, b)| b.capacity() >= capacity)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i);
        match fit {
            Some(i) => {
                let b = st.spare.swap_remove(i);
                debug_assert!(b.is_empty());
                b
            }
            None => Vec::with_capacity(capacity),
        }
    }

    /// Everything queued and not yet taken, marked taken and running.
    fn take_batch(st: &mut State) -> Vec<(Ticket, Op)> {
        let taken = st.taken;
        let batch: Vec<(Ticket, Op)> = st
            .entries
            .iter()
            .filter(|e| e.ticket > taken)
            .map(|e| (e.ticket, e.op.clone()))
            .collect();
        let last = batch.last().expect("a batch has operations").0;
        assert_eq!(batch[0].0, taken + 1, "batches follow each other");
        st.taken = last;
        st.running = true;
        batch
    }

    fn count_batch(&self, batch: &[(Ticket, Op)]) {
        self.counters.batches.fetch_add(1, Ordering::Relaxed);
        let fsyncs = batch
            .iter()
            .filter(|(_, op)| matches!(op, Op::Flush { durable: true }))
            .count() as u64;
        self.counters
            .max_batch_fsyncs
            .fetch_max(fsyncs, Ordering::Relaxed);
    }

    /// Run the batch's operations in order, without the state's lock,
    /// until one fails (returned), while up to [`MAKE_AHEAD_MAX`]
    /// helpers make the bytes of its deferred writes ahead of it (a
    /// sequential write queues many compressed records per batch, and one
    /// thread compressing them could not keep up with one copying pages
    /// in). The bytes are the same whoever makes them, and the device
    /// sees the batch in order.
    fn execute_batch(&self, batch: &[(Ticket, Op)], run: &mut BatchRun) -> Option<Error> {
        let deferred: Vec<(Ticket, &dyn DeferredWrite)> = batch
            .iter()
            .filter_map(|(t, op)| match op {
                Op::Deferred(w) => Some((*t, w.as_ref())),
                _ => None,
            })
            .collect();
        let helpers = if deferred.len() >= 2 {
            make_ahead_threads()
        } else {
            0
        };
        if helpers == 0 {
            return self.execute_in_order(batch, run);
        }
        // The executor makes the first itself; helpers take the next ones
        // not yet taken, and stop when the executor does.
        let next = AtomicUsize::new(1);
        let stop = AtomicBool::new(false);
        std::thread::scope(|sc| {
            for _ in 0..helpers {
                sc.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        let Some(&(t, w)) = deferred.get(next.fetch_add(1, Ordering::Relaxed))
                        else {
                            return;
                        };
                        self.note_made(t, w);
                    }
                });
            }
            let r = self.execute_in_order(batch, run);
            stop.store(true, Ordering::Relaxed);
            r
        })
    }

    /// The batch's operations in order (see [`IoQueue::execute_batch`]):
    /// only the batch's last flush and flushes that are not for durability
    /// run; each one run publishes what it covers.
    fn execute_in_order(&self, batch: &[(Ticket, Op)], run: &mut BatchRun) -> Option<Error> {
        let last_flush = batch
            .iter()
            .rposition(|(_, op)| matches!(op, Op::Flush { .. }));
        // Writes up to this index went to the device merged with an
        // earlier one.
        let mut merged_upto = 0;
        for (i, (t, op)) in batch.iter().enumerate() {
            match op {
                Op::Write { offset, data } => {
                    if i >= merged_upto {
                        let (end, merged) = Self::merge_writes(batch, i, last_flush);
                        let r = match &merged {
                            Some((buf, _)) => self.dev.write_at(*offset, buf),
                            None => self.dev.write_at(*offset, data),
                        };
                        if let Err(e) = r {
                            return Some(e);
                        }
                        merged_upto = end;
                        self.counters.writes.fetch_add(1, Ordering::Relaxed);
                        if let Some((_, n)) = merged {
                            self.counters
                                .writes_merged
                                .fetch_add(n as u64, Ordering::Relaxed);
                        }
                    }
                    run.unflushed = true;
                    if !run.held {
                        run.covered = *t;
                    }
                }
                Op::Deferred(w) => {
                    self.note_made(*t, w.as_ref());
                    if let Err(e) = self.run_deferred(w.as_ref()) {
                        return Some(e);
                    }
                    run.unflushed = true;
                    if !run.held {
                        run.covered = *t;
                    }
                }
                Op::Discard { offset, len } => {
                    self.run_discard(*offset, *len);
                    if !run.held {
                        run.covered = *t;
                    }
                }
                Op::Flush { .. } if !run.unflushed => {
                    // Nothing written since the last flush (so nothing held).
                    debug_assert!(!run.held);
                    self.counters.empty_flushes.fetch_add(1, Ordering::Relaxed);
                    run.covered = *t;
                }
                Op::Flush { durable: true } if Some(i) != last_flush => {
                    self.counters
                        .fsync_flushes_shared
                        .fetch_add(1, Ordering::Relaxed);
                    run.held = true;
                }
                Op::Flush { .. } => {
                    if let Err(e) = self.dev.flush() {
                        return Some(e);
                    }
                    self.counters.flushes.fetch_add(1, Ordering::Relaxed);
                    run.unflushed = false;
                    run.held = false;
                    run.covered = *t;
                    // Let the fsyncs this flush covered reply now, not at the
                    // end of the batch.
                    let mut st = self.lock();
                    st.publish(run.covered);
                    drop(st);
                    self.progress.notify_all();
                }
            }
        }
        None
    }

    /// The writes of the batch from `i` on that go to the device as one
    /// (the index after the last and, if there are more than one, their
    /// bytes and how many joined the first):
    /// each starts where the one before ended, with nothing between them
    /// but durability flushes this batch skips (not its last flush). The
    /// records of fsyncs that met in one batch lie end to end in the log,
    /// and on a virtual machine each write the device is handed costs an
    /// exit to the host and a round trip the batch waits for.
    fn merge_writes(
        batch: &[(Ticket, Op)],
        i: usize,
        last_flush: Option<usize>,
    ) -> (usize, Option<(Vec<u8>, usize)>) {
        let Op::Write { offset, data } = &batch[i].1 else {
            unreachable!("a merge starts at a write");
        };
        let mut end_at = *offset + data.len() as u64;
        let mut bytes = data.len();
        let mut parts = vec![i];
        for (j, (_, op)) in batch.iter().enumerate().skip(i + 1) {
            match op {
                Op::Write { offset, data }
                    if *offset == end_at && bytes + data.len() <= MERGE_BYTES_MAX =>
                {
                    end_at += data.len() as u64;
                    bytes += data.len();
                    parts.push(j);
                }
                Op::Flush { durable: true } if Some(j) != last_flush => {}
                _ => break,
            }
        }
        let end = parts.last().expect("the first write") + 1;
        if parts.len() == 1 {
            return (end, None);
        }
        let mut buf = Vec::with_capacity(bytes);
        for &j in &parts {
            if let Op::Write { data, .. } = &batch[j].1 {
                buf.extend_from_slice(data);
            }
        }
        (end, Some((buf, parts.len() - 1)))
    }

    /// Read `buf.len()` bytes at `offset`: the device, with the queued
    /// writes that are not complete laid over it in order.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let end = offset + buf.len() as u64;
        let overlaps = |o: u64, len: u64| o < end && o + len > offset;
        let over: Vec<Op> = {
            let st = self.lock();
            st.entries
                .iter()
                .filter(|e| match &e.op {
                    Op::Write { offset: o, data } => overlaps(*o, data.len() as u64),
                    Op::Deferred(w) => {
                        let (o, len) = w.span();
                        overlaps(o, len)
                    }
                    Op::Discard { offset: o, len } => overlaps(*o, *len),
                    Op::Flush { .. } => false,
                })
                .map(|e| e.op.clone())
                .collect()
        };
        self.dev.read_at(offset, buf)?;
        // Lay `data` (None: zeros) written at `o` over what overlaps it.
        let mut lay = |o: u64, len: u64, data: Option<&[u8]>| {
            if !overlaps(o, len) {
                return;
            }
            let from = o.max(offset);
            let to = (o + len).min(end);
            let dst = &mut buf[(from - offset) as usize..(to - offset) as usize];
            match data {
                Some(data) => dst.copy_from_slice(&data[(from - o) as usize..(to - o) as usize]),
                None => dst.fill(0),
            }
        };
        for op in &over {
            match op {
                Op::Write { offset: o, data } => lay(*o, data.len() as u64, Some(data)),
                // Made here if the queue has not run it yet: the bytes
                // it will write, whoever makes them.
                Op::Deferred(w) => {
                    for (o, data) in w.writes() {
                        lay(*o, data.len() as u64, Some(data));
                    }
                }
                Op::Discard { offset: o, len } => lay(*o, *len, None),
                Op::Flush { .. } => {}
            }
        }
        Ok(())
    }

    /// The device's own traffic counters.
    pub fn device_stats(&self) -> &DeviceStats {
        self.dev.stats()
    }
}

impl lsfs_vfs::DeferredIo for IoQueue {
    fn last_ticket(&self) -> u64 {
        IoQueue::last_ticket(self)
    }
    fn finish(&self, ticket: u64) -> lsfs_vfs::VfsResult<()> {
        self.complete(ticket).map_err(|e| e.errno())
    }
}

/// The store's view of the device through the queue.
struct QueuedDevice(Arc<IoQueue>);

impl BlockDevice for QueuedDevice {
    fn size_bytes(&self) -> u64 {
        self.0.dev.size_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.0.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<()> {
        self.0.write(offset, buf.to_vec()).map(|_| ())
    }
    fn write_vec(&self, offset: u64, buf: Vec<u8>) -> Result<()> {
        self.0.write(offset, buf).map(|_| ())
    }
    fn buffer(&self, capacity: usize) -> Vec<u8> {
        self.0.buffer(capacity)
    }
    fn flush(&self) -> Result<()> {
        self.0.barrier().map(|_| ())
    }
    fn publishes(&self) -> bool {
        self.0.dev.publishes()
    }
    /// At once, not queued: everything queued before it runs first (only
    /// for a device that publishes: the others' queues are left as they
    /// are).
    fn publish(&self) -> Result<()> {
        if !self.0.dev.publishes() {
            return Ok(());
        }
        let t = self.0.flush_durable()?;
        self.0.complete(t)?;
        self.0.dev.publish()
    }
    /// Queued: the bytes asked for, whatever the device then takes.
    fn discard(&self, offset: u64, len: u64) -> Result<u64> {
        self.0.discard(offset, len).map(|_| len)
    }
    fn stats(&self) -> &DeviceStats {
        self.0.dev.stats()
    }
    fn release(&self) -> Result<()> {
        self.0.dev.release()
    }
    fn fix_view(&self, fs_id: u64, seq: u64) {
        self.0.dev.fix_view(fs_id, seq)
    }
    fn reopen_read_only(&self) -> Option<Result<Box<dyn BlockDevice>>> {
        self.0.dev.reopen_read_only()
    }
    fn fills_holes(&self) -> bool {
        self.0.dev.fills_holes()
    }
    fn extra_counters(&self) -> Vec<(&'static str, u64)> {
        self.0.dev.extra_counters()
    }
    fn is_cached(&self, offset: u64, len: u64) -> Option<bool> {
        self.0.dev.is_cached(offset, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{CrashDevice, LoggedOp, MemDevice};

    const B: usize = 4096;

    fn queue() -> (Arc<IoQueue>, crate::device::CrashLog) {
        let (dev, log) = CrashDevice::new(MemDevice::new(64 * B as u64));
        let q = IoQueue::new(Box::new(dev));
        q.set_deferred(true).unwrap();
        (q, log)
    }

    fn kinds(log: &crate::device::CrashLog) -> String {
        log.ops()
            .iter()
            .map(|o| match o {
                LoggedOp::Write { offset, .. } => format!("w{}", offset / B as u64),
                LoggedOp::Flush => "F".into(),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn immediate_mode_runs_every_append_at_once() {
        let (dev, log) = CrashDevice::new(MemDevice::new(64 * B as u64));
        let q = IoQueue::new(Box::new(dev));
        let t = q.write(0, vec![1; B]).unwrap();
        assert!(q.is_complete(t));
        q.barrier().unwrap();
        q.flush_durable().unwrap();
        q.flush_durable().unwrap();
        // Every flush runs, as before the queue.
        assert_eq!(kinds(&log), "w0 F F F");
    }

    /// The records of fsyncs that meet in one batch lie end to end: they
    /// go to the device as one write, and only the last flush runs. A
    /// gap, or a flush the batch runs, ends a merge; what lands is the
    /// same bytes.
    #[test]
    fn adjacent_writes_of_a_batch_go_as_one() {
        let (q, log) = queue();
        for i in 0..3u8 {
            q.write(i as u64 * B as u64, vec![i + 1; B]).unwrap();
            q.flush_durable().unwrap();
        }
        q.write(5 * B as u64, vec![9; B]).unwrap();
        let t = q.flush_durable().unwrap();
        q.complete(t).unwrap();
        assert_eq!(kinds(&log), "w0 w5 F");
        let c = q.counters();
        assert_eq!((c.writes, c.writes_merged, c.flushes), (2, 2, 1));
        let mut buf = vec![0; 6 * B];
        q.read_at(0, &mut buf).unwrap();
        for (i, want) in [1u8, 2, 3, 0, 0, 9].into_iter().enumerate() {
            assert!(
                buf[i * B..(i + 1) * B].iter().all(|&b| b == want),
                "block {i}"
            );
        }
        // An ordering flush between two adjacent writes runs between them.
        let (q, log) = queue();
        q.write(0, vec![1; B]).unwrap();
        q.barrier().unwrap();
        q.write(B as u64, vec![2; B]).unwrap();
        q.complete(q.last_ticket()).unwrap();
        assert_eq!(kinds(&log), "w0 F w1");
    }

    #[test]
    fn nothing_runs_until_completed_then_in_order() {
        let (q, log) = queue();
        q.write(0, vec![1; B]).unwrap();
        q.barrier().unwrap();
        q.write(B as u64, vec![2; B]).unwrap();
        let t = q.write(0, vec![3; B]).unwrap();
        assert!(log.is_empty(), "deferred appends ran: {}", kinds(&log));
        assert!(!q.is_complete(t));
        q.complete(t).unwrap();
        assert_eq!(kinds(&log), "w0 F w1 w0");
        assert_eq!(q.pending_bytes(), 0);
    }

    /// A discard runs in its place among the writes (the crash device logs
    /// it as zeros), reads see it as zeros over what came before and under
    /// what comes after, and it never holds bytes in the queue.
    #[test]
    fn discards_run_in_order_and_read_as_zeros() {
        let (q, log) = queue();
        q.write(0, vec![1; 3 * B]).unwrap();
        q.barrier().unwrap();
        q.discard(0, 2 * B as u64).unwrap();
        q.write(B as u64, vec![2; 10]).unwrap();
        assert_eq!(q.pending_bytes(), 3 * B + 10);
        let mut buf = vec![9; 3 * B];
        q.read_at(0, &mut buf).unwrap();
        assert!(buf[..B].iter().all(|&b| b == 0), "discarded, queued");
        assert!(buf[B..B + 10].iter().all(|&b| b == 2), "written after");
        assert!(buf[B + 10..2 * B].iter().all(|&b| b == 0));
        assert!(buf[2 * B..].iter().all(|&b| b == 1), "not discarded");
        q.complete(q.last_ticket()).unwrap();
        assert_eq!(kinds(&log), "w0 F w0 w1");
        let mut after = vec![9; 3 * B];
        q.read_at(0, &mut after).unwrap();
        assert!(after == buf, "the device agrees with the queued view");
        let c = q.counters();
        assert_eq!((c.discards, c.discard_errors), (1, 0));
        // Past the end: refused when appended, not when run.
        assert!(q.discard(63 * B as u64, 2 * B as u64).is_err());
    }

    /// Reads see queued writes, the later of two overlapping ones, and the
    /// device around them.
    #[test]
    fn reads_see_queued_writes_in_order() {
        let (q, _log) = queue();
        q.write(0, vec![1; 2 * B]).unwrap();
        q.complete(q.last_ticket()).unwrap();
        q.write(B as u64, vec![2; B]).unwrap();
        q.write(B as u64 + 100, vec![3; 10]).unwrap();
        let mut buf = vec![0; 3 * B];
        q.read_at(0, &mut buf).unwrap();
        assert!(buf[..B].iter().all(|&b| b == 1));
        assert!(buf[B..B + 100].iter().all(|&b| b == 2));
        assert!(buf[B + 100..B + 110].iter().all(|&b| b == 3));
        assert!(buf[B + 110..2 * B].iter().all(|&b| b == 2));
        assert!(buf[2 * B..].iter().all(|&b| b == 0));
        let mut part = vec![0; 20];
        q.read_at(B as u64 + 95, &mut part).unwrap();
        assert_eq!(&part[..5], &[2; 5]);
        assert_eq!(&part[5..15], &[3; 10]);
    }

    /// Durability flushes covered by a later flush in the batch are not
    /// run; ordering flushes always are; empty flushes are not.
    #[test]
    fn durability_flushes_merge_and_barriers_stay() {
        let (q, log) = queue();
        q.write(0, vec![1; B]).unwrap();
        q.flush_durable().unwrap();
        q.write(B as u64, vec![1; B]).unwrap();
        q.flush_durable().unwrap();
        q.write(2 * B as u64, vec![1; B]).unwrap();
        q.barrier().unwrap();
        q.barrier().unwrap();
        q.write(3 * B as u64, vec![1; B]).unwrap();
        q.flush_durable().unwrap();
        q.write(4 * B as u64, vec![1; B]).unwrap();
        let t = q.flush_durable().unwrap();
        q.complete(t).unwrap();
        // The adjacent writes between the skipped flushes go as one.
        assert_eq!(kinds(&log), "w0 F w3 F");
        let c = q.counters();
        assert_eq!(
            (
                c.flushes,
                c.fsync_flushes_shared,
                c.empty_flushes,
                c.fsync_flushes
            ),
            (2, 3, 1, 4)
        );
    }

    /// A write error fails the ticket and every later one, refuses later
    /// appends, runs nothing after it, and keeps what was not written
    /// readable.
    #[test]
    fn a_device_error_fails_every_later_ticket() {
        let (cdev, log) = CrashDevice::new(MemDevice::new(64 * B as u64));
        let (fdev, plan) = crate::device::FaultDevice::new(Box::new(cdev));
        let q = IoQueue::new(Box::new(fdev));
        q.set_deferred(true).unwrap();
        let t0 = q.write(0, vec![1; B]).unwrap();
        let f0 = q.barrier().unwrap();
        q.complete(f0).unwrap();
        plan.fail_write_op(1);
        let t1 = q.write(B as u64, vec![2; B]).unwrap();
        let t2 = q.write(2 * B as u64, vec![3; B]).unwrap();
        let f = q.flush_durable().unwrap();
        assert!(q.complete(t1).is_err());
        assert!(q.complete(f).is_err());
        assert!(q.complete(t2).is_err());
        q.complete(t0).unwrap();
        assert!(q.failure().unwrap().contains("injected write error"));
        assert!(q.write(0, vec![0; B]).is_err());
        assert!(q.barrier().is_err());
        assert_eq!(kinds(&log), "w0 F", "nothing runs after the error");
        let mut buf = vec![0; 3 * B];
        q.read_at(0, &mut buf).unwrap();
        assert_eq!((buf[0], buf[B], buf[2 * B]), (1, 2, 3));
        assert!(q.set_deferred(false).is_err());
    }

    /// Past its bound the queue is run by the appender before it grows.
    #[test]
    fn buffers_of_writes_that_ran_are_handed_out_again() {
        let (q, log) = queue();
        let mut b = q.buffer(2 * B);
        b.extend_from_slice(&[7; 2 * B]);
        let at = b.as_ptr();
        q.write(0, b).unwrap();
        // Still queued (and read through): not handed out.
        let other = q.buffer(B);
        assert_ne!(other.as_ptr(), at);
        let mut back = vec![0; 2 * B];
        q.read_at(0, &mut back).unwrap();
        assert_eq!(back, vec![7; 2 * B]);
        q.complete(q.last_ticket()).unwrap();
        assert_eq!(kinds(&log), "w0");
        // Run: the same allocation comes back, empty, for a write that fits.
        let larger = q.buffer(3 * B);
        assert_ne!(larger.as_ptr(), at, "too small for 3 blocks");
        let again = q.buffer(B);
        assert_eq!(again.as_ptr(), at);
        assert!(again.is_empty() && again.capacity() >= 2 * B);
        // A buffer over the spare bound is not kept (its capacity counts).
        let mut big = Vec::with_capacity(SPARE_BYTES_MAX + B);
        big.extend_from_slice(&[1; B]);
        q.write(0, big).unwrap();
        q.complete(q.last_ticket()).unwrap();
        let fresh = q.buffer(SPARE_BYTES_MAX);
        assert_ne!(fresh.capacity(), SPARE_BYTES_MAX + B);
    }

    #[test]
    fn the_queue_stays_within_its_bound() {
        let (q, log) = queue();
        q.set_limit(3 * B);
        for i in 0..10u64 {
            q.write(i * B as u64, vec![i as u8; B]).unwrap();
            assert!(q.pending_bytes() <= 3 * B);
        }
        let c = q.counters();
        assert!(c.inline_drains >= 3, "{c:?}");
        assert!(c.max_pending_bytes <= 3 * B as u64);
        let written: usize = log
            .ops()
            .iter()
            .map(|o| match o {
                LoggedOp::Write { data, .. } => data.len() / B,
                LoggedOp::Flush => 0,
            })
            .sum();
        assert!(written >= 9 - 3, "{written} blocks written");
        // One write larger than the bound is queued alone.
        q.complete(q.last_ticket()).unwrap();
        q.write(0, vec![9; 5 * B]).unwrap();
        assert_eq!(q.pending_bytes(), 5 * B);
    }

    /// A deferred write that spans `span` blocks and writes `value` into
    /// its first block only (as a compressed record writes its frame).
    struct Shrinks {
        at: u64,
        span: usize,
        value: u8,
        made: std::sync::OnceLock<Vec<(u64, Vec<u8>)>>,
        makes: AtomicUsize,
    }

    impl DeferredWrite for Shrinks {
        fn span(&self) -> (u64, u64) {
            (self.at, (self.span * B) as u64)
        }
        fn writes(&self) -> &[(u64, Vec<u8>)] {
            self.made.get_or_init(|| {
                self.makes.fetch_add(1, Ordering::SeqCst);
                vec![(self.at, vec![self.value; B])]
            })
        }
    }

    fn shrinks(at_block: u64, span: usize, value: u8) -> Arc<Shrinks> {
        Arc::new(Shrinks {
            at: at_block * B as u64,
            span,
            value,
            made: Default::default(),
            makes: AtomicUsize::new(0),
        })
    }

    /// Deferred writes run in order with the others, reads see them (made
    /// once, whoever asks first), and at the bound the appender makes the
    /// queued ones, which then count what they write, rather than run the
    /// queue with its flushes.
    #[test]
    fn deferred_writes_run_in_order_and_shrink_to_what_they_write() {
        let (q, log) = queue();
        q.set_limit(9 * B);
        q.write(0, vec![1; 4 * B]).unwrap();
        let a = shrinks(1, 4, 2);
        q.write_deferred(a.clone()).unwrap();
        q.barrier().unwrap();
        assert_eq!(q.pending_bytes(), 8 * B);
        // Read through: block 1 from the deferred write, 2..4 the earlier.
        let mut back = vec![0; 4 * B];
        q.read_at(0, &mut back).unwrap();
        assert_eq!(back[..B], [1; B]);
        assert_eq!(back[B..2 * B], [2; B]);
        assert_eq!(back[2 * B..], [1; 2 * B]);
        assert_eq!(a.makes.load(Ordering::SeqCst), 1);
        // Over the bound: the deferred writes are made, here, not run.
        let b = shrinks(8, 4, 3);
        q.write_deferred(b.clone()).unwrap();
        q.write(20 * B as u64, vec![4; B]).unwrap();
        assert_eq!(b.makes.load(Ordering::SeqCst), 1);
        assert_eq!(q.counters().inline_drains, 0, "ran the queue");
        assert!(log.is_empty(), "wrote before completing");
        assert_eq!(q.pending_bytes(), 4 * B + B + B + B);
        q.complete(q.last_ticket()).unwrap();
        assert_eq!(kinds(&log), "w0 w1 F w8 w20");
        assert_eq!(a.makes.load(Ordering::SeqCst), 1, "made twice");
        assert_eq!(q.pending_bytes(), 0);
    }

    /// Several threads completing at once: each ticket completes, in
    /// order, and the executors never overlap.
    #[test]
    fn concurrent_completions_run_the_queue_once_in_order() {
        let (q, log) = queue();
        let appends = Mutex::new(());
        std::thread::scope(|s| {
            for k in 0..4u64 {
                let (q, appends) = (&q, &appends);
                s.spawn(move || {
                    for i in 0..50u64 {
                        let t = {
                            let _g = appends.lock().unwrap();
                            q.write((k * 8 + i % 8) * B as u64, vec![(i % 250) as u8 + 1; B])
                                .unwrap();
                            q.flush_durable().unwrap()
                        };
                        q.complete(t).unwrap();
                        assert!(q.is_complete(t));
                    }
                });
            }
        });
        let ops = log.ops();
        assert_eq!(
            ops.iter()
                .filter(|o| matches!(o, LoggedOp::Write { .. }))
                .count(),
            200
        );
        assert!(matches!(ops.last(), Some(LoggedOp::Flush)));
        let c = q.counters();
        assert_eq!(c.flushes + c.fsync_flushes_shared, 200, "{c:?}");
        assert_eq!(q.pending_bytes(), 0);
    }
}
