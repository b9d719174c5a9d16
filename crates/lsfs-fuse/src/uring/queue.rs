//! One FUSE ring queue: a thread pinned to its CPU, with its own io_uring
//! and a few registered entries.
//!
//! The kernel makes one queue per possible CPU and hands a request to the
//! queue of the CPU its caller runs on; the ring is used only once every
//! queue has an entry waiting (until then requests still come through
//! `/dev/fuse`). An entry is registered once (FUSE_IO_URING_CMD_REGISTER,
//! with the iovecs of its header and payload buffers), and that command
//! completes when a request has been copied into the buffers. The thread
//! serves it, writes the reply into the same buffers and submits
//! FUSE_IO_URING_CMD_COMMIT_AND_FETCH, which hands the reply over and
//! waits for the next request: one system call per request, made on the
//! caller's CPU, where `/dev/fuse` costs a read and a write and wakes a
//! server on whichever CPU it slept. While requests keep coming the
//! thread polls for the next one instead of sleeping (`poll.rs`).
//!
//! Registration before the kernel has processed our FUSE_INIT reply fails
//! with EAGAIN (the kernel needs the negotiated sizes): it is retried.
//! At unmount the kernel completes every entry's command with ENOTCONN;
//! the thread ends when none is left, or when told to stop.
//!
//! A request answered from another thread (an atomic-write ioctl,
//! `atomic_ioctl.rs`; an fsync on a worker, `fsync_workers.rs`) sends its
//! answer through a channel and wakes the thread through an eventfd the
//! ring polls; the entry stays with that request until then, so a queue
//! has several entries: the pages such an ioctl writes back, and the
//! fsyncs that share a flush, come as requests on some queue while it
//! waits.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use lsfs_vfs::{Errno, Vfs};

use super::abi::{self, InHeader, ReqHeader, CMD_COMMIT_AND_FETCH, CMD_REGISTER};
use super::dispatch::{self, Answer, Late, LateDone};
use super::poll::Poll;
use crate::ops::Ops;

/// Entries per queue: one for the request being served, the rest for
/// requests the kernel may copy in meanwhile and for requests answered
/// later.
pub const DEPTH: usize = 4;
/// The user data of the eventfd poll (entries are 0..DEPTH).
const WAKE: u64 = u64::MAX;
/// How long registration retries while the kernel has not yet processed
/// FUSE_INIT's reply.
const INIT_PATIENCE: Duration = Duration::from_secs(10);

/// What the mount keeps of a queue thread: how to stop it.
pub struct QueueHandle {
    pub thread: thread::JoinHandle<()>,
    pub wake: Arc<OwnedFd>,
}

/// What a queue shares with the mount.
pub struct Shared {
    pub stop: AtomicBool,
    /// A request has come through the ring: the kernel uses it.
    pub serving: AtomicBool,
}

struct Entry {
    header: Box<ReqHeader>,
    payload: Box<[u8]>,
    /// The header and payload iovecs REGISTER reads; kept here so they
    /// live as long as the kernel may read them.
    iov: [libc::iovec; 2],
    /// The request the entry holds (its commit id), while served.
    commit_id: u64,
    /// Registered and not yet given back by the kernel.
    live: bool,
}

// SAFETY: the iovecs point into the entry's own boxes, which move with it;
// only the queue thread touches an entry.
unsafe impl Send for Entry {}

impl Entry {
    fn new(payload_size: usize) -> Entry {
        let mut header = ReqHeader::zeroed();
        let mut payload = vec![0u8; payload_size].into_boxed_slice();
        let iov = [
            libc::iovec {
                iov_base: (&mut *header as *mut ReqHeader).cast(),
                iov_len: std::mem::size_of::<ReqHeader>(),
            },
            libc::iovec {
                iov_base: payload.as_mut_ptr().cast(),
                iov_len: payload.len(),
            },
        ];
        Entry {
            header,
            payload,
            iov,
            commit_id: 0,
            live: false,
        }
    }
}

/// A queue's ring, entries and the way back for answers given later.
struct Queue<V: Vfs> {
    qid: u16,
    dev: RawFd,
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    entries: Vec<Entry>,
    ops: Arc<Ops<V>>,
    shared: Arc<Shared>,
    wake: Arc<OwnedFd>,
    /// Answers given later, by entry.
    later_tx: Sender<(usize, Late)>,
    later_rx: Receiver<(usize, Late)>,
    wake_buf: Box<[u8; 8]>,
    /// Whether to poll or sleep for the next completion.
    poll: Poll,
}

/// Start queue `qid`'s thread, serving `dev` (the connection's
/// `/dev/fuse`) with buffers of `payload_size` bytes, polling as `poll`
/// says between requests.
pub fn spawn<V: Vfs + 'static>(
    qid: u16,
    dev: Arc<OwnedFd>,
    payload_size: usize,
    ops: Arc<Ops<V>>,
    shared: Arc<Shared>,
    poll: Poll,
) -> io::Result<QueueHandle> {
    // SAFETY: eventfd takes flags and returns a new descriptor or -1.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if efd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `efd` is new and owned by nothing else.
    let wake = Arc::new(unsafe { OwnedFd::from_raw_fd(efd) });
    let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder().build(2 * DEPTH as u32 + 2)?;
    let (later_tx, later_rx) = mpsc::channel();
    let w = wake.clone();
    let thread = thread::Builder::new()
        .name(format!("lsfs-ring-{qid}"))
        .spawn(move || {
            // The kernel routes by the caller's CPU; the queue's thread
            // runs there, so serving needs no cross-CPU wake-up.
            pin_to_cpu(qid as usize);
            poll.register_thread();
            let mut q = Queue {
                qid,
                dev: dev.as_raw_fd(),
                ring,
                entries: (0..DEPTH).map(|_| Entry::new(payload_size)).collect(),
                ops,
                shared,
                wake: w,
                later_tx,
                later_rx,
                wake_buf: Box::new([0; 8]),
                poll,
            };
            if let Err(e) = q.run() {
                tracing::error!("FUSE ring queue {qid} failed: {e}");
            }
            // Keep the device open until the ring is gone.
            drop(q);
            drop(dev);
        })?;
    Ok(QueueHandle { thread, wake })
}

fn pin_to_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET writes inside it.
    let r = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if r != 0 {
        // An offline CPU: its queue gets no requests anyway.
        tracing::debug!(
            "ring queue thread not pinned to CPU {cpu}: {}",
            io::Error::last_os_error()
        );
    }
}

impl<V: Vfs + 'static> Queue<V> {
    fn run(&mut self) -> io::Result<()> {
        for i in 0..self.entries.len() {
            self.push_register(i)?;
        }
        self.push_wake_poll()?;
        let started = Instant::now();
        loop {
            match self.poll.submit_and_wait(&mut self.ring) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(e),
            }
            let cqes: Vec<(u64, i32)> = self
                .ring
                .completion()
                .map(|c| (c.user_data(), c.result()))
                .collect();
            for (ud, res) in cqes {
                if ud == WAKE {
                    if self.shared.stop.load(Ordering::Relaxed) {
                        return Ok(());
                    }
                    self.push_wake_poll()?;
                    continue;
                }
                let i = ud as usize;
                assert!(i < self.entries.len(), "unknown ring user data {ud}");
                match res {
                    0 => {
                        self.poll.on_request();
                        self.serve(i)?
                    }
                    e if e == -libc::EAGAIN || e == -libc::EINTR => {
                        // Before FUSE_INIT's reply is processed.
                        if started.elapsed() > INIT_PATIENCE {
                            return Err(io::Error::other(
                                "the kernel kept refusing ring registration (EAGAIN)",
                            ));
                        }
                        thread::sleep(Duration::from_millis(2));
                        self.push_register(i)?;
                    }
                    e if e == -libc::ENOTCONN || e == -libc::ECONNABORTED || e == -libc::ENODEV => {
                        // Unmounted, or the connection was aborted.
                        self.entries[i].live = false;
                    }
                    e => {
                        self.entries[i].live = false;
                        tracing::error!(
                            "FUSE ring queue {}: command failed: {}",
                            self.qid,
                            io::Error::from_raw_os_error(-e)
                        );
                    }
                }
            }
            self.answer_later()?;
            if self.entries.iter().all(|e| !e.live) {
                return Ok(());
            }
        }
    }

    fn push(&mut self, sqe: &squeue::Entry128) -> io::Result<()> {
        // SAFETY: every buffer an SQE names (an entry's iovecs and
        // buffers, the eventfd's 8 bytes) lives in `self` until the
        // queue is dropped, which is after the ring is.
        unsafe {
            if self.ring.submission().push(sqe).is_err() {
                self.ring.submit()?;
                self.ring
                    .submission()
                    .push(sqe)
                    .map_err(|_| io::Error::other("ring submission queue full"))?;
            }
        }
        Ok(())
    }

    fn push_register(&mut self, i: usize) -> io::Result<()> {
        let e = &mut self.entries[i];
        e.live = true;
        let mut sqe = opcode::UringCmd80::new(types::Fd(self.dev), CMD_REGISTER)
            .cmd(abi::cmd_req(self.qid, 0))
            .addr(Some(e.iov.as_ptr() as u64))
            .build()
            .user_data(i as u64);
        set_len(&mut sqe, e.iov.len() as u32);
        self.push(&sqe)
    }

    fn push_commit(&mut self, i: usize) -> io::Result<()> {
        let commit_id = self.entries[i].commit_id;
        let sqe = opcode::UringCmd80::new(types::Fd(self.dev), CMD_COMMIT_AND_FETCH)
            .cmd(abi::cmd_req(self.qid, commit_id))
            .build()
            .user_data(i as u64);
        self.push(&sqe)
    }

    fn push_wake_poll(&mut self) -> io::Result<()> {
        // Read the eventfd (resetting it) rather than poll it, so a wake
        // that came before the read is not lost.
        let sqe = opcode::Read::new(
            types::Fd(self.wake.as_raw_fd()),
            self.wake_buf.as_mut_ptr(),
            8,
        )
        .build()
        .user_data(WAKE);
        self.push(&sqe.into())
    }

    /// A request is in entry `i`: serve it and commit its reply, unless
    /// it is answered later.
    fn serve(&mut self, i: usize) -> io::Result<()> {
        if !self.shared.serving.swap(true, Ordering::Relaxed) {
            tracing::info!("FUSE requests are coming through io_uring");
            self.ops.stop_spinning();
        }
        let later_tx = self.later_tx.clone();
        let wake = self.wake.clone();
        let e = &mut self.entries[i];
        let h = InHeader::parse(&e.header.in_out[..abi::IN_HEADER_SZ]);
        e.commit_id = e.header.ent.commit_id;
        assert_ne!(
            e.commit_id, 0,
            "the kernel sent a request without a commit id"
        );
        let in_len = e.header.ent.payload_sz as usize;
        let answer = dispatch::serve(
            &self.ops,
            &h,
            &e.header.op_in,
            &mut e.payload,
            in_len,
            || Later::done(i, later_tx, wake),
        );
        // Counted before the reply, as the operation was: whoever sees
        // the answer sees both counts.
        match answer {
            Answer::Now(r) => {
                self.ops.counters().count_ring();
                self.reply(i, h.unique, r)
            }
            Answer::Later => {
                self.ops.counters().count_ring();
                Ok(())
            }
            Answer::Unknown => self.reply(i, h.unique, Err(Errno::NOSYS)),
        }
    }

    /// Put the reply's header in entry `i` and commit it.
    fn reply(&mut self, i: usize, unique: u64, r: Result<usize, Errno>) -> io::Result<()> {
        let e = &mut self.entries[i];
        let (len, error) = match r {
            Ok(n) => (n, 0),
            Err(e) => (0, -e.0),
        };
        assert!(len <= e.payload.len());
        e.header.in_out[..abi::OUT_HEADER_SZ].copy_from_slice(&abi::out_header(
            (abi::OUT_HEADER_SZ + len) as u32,
            error,
            unique,
        ));
        e.header.ent.payload_sz = len as u32;
        self.push_commit(i)
    }

    /// Commit the answers other threads gave since.
    fn answer_later(&mut self) -> io::Result<()> {
        while let Ok((i, r)) = self.later_rx.try_recv() {
            let e = &mut self.entries[i];
            let unique = InHeader::parse(&e.header.in_out[..abi::IN_HEADER_SZ]).unique;
            let r = match r {
                Late::Ioctl(r) => dispatch::ioctl_reply(&mut e.payload, r),
                Late::Empty(r) => r.map(|()| 0),
            };
            self.reply(i, unique, r)?;
        }
        Ok(())
    }
}

/// Write `sqe->len`, which FUSE's REGISTER reads as the number of iovecs
/// and the io-uring crate's `UringCmd80` has no setter for. It is the u32
/// at byte 24 of `struct io_uring_sqe` (after opcode, flags, ioprio, fd,
/// off and addr), and the crate's SQE types are `repr(C)` over it.
fn set_len(sqe: &mut squeue::Entry128, len: u32) {
    const _: () = assert!(std::mem::size_of::<squeue::Entry128>() == 128);
    // SAFETY: `Entry128` is repr(C) with the 64-byte kernel SQE first;
    // bytes 24..28 are its `len`, a plain u32.
    unsafe {
        (sqe as *mut squeue::Entry128)
            .cast::<u8>()
            .add(24)
            .cast::<u32>()
            .write_unaligned(len)
    }
}

/// The answer path of a request answered from another thread.
struct Later {
    entry: usize,
    tx: Sender<(usize, Late)>,
    wake: Arc<OwnedFd>,
    sent: bool,
}

impl Later {
    fn done(entry: usize, tx: Sender<(usize, Late)>, wake: Arc<OwnedFd>) -> LateDone {
        let mut l = Later {
            entry,
            tx,
            wake,
            sent: false,
        };
        Box::new(move |r| l.send(r))
    }

    fn send(&mut self, r: Late) {
        self.sent = true;
        if self.tx.send((self.entry, r)).is_ok() {
            wake(&self.wake);
        }
    }
}

impl Drop for Later {
    /// Dropped unanswered (its thread did not start): the request fails
    /// rather than holding its entry for ever.
    fn drop(&mut self) {
        if !self.sent {
            self.send(Late::Empty(Err(Errno::IO)));
        }
    }
}

/// Wake a queue thread through its eventfd.
pub fn wake(fd: &OwnedFd) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: writes 8 bytes from a live buffer to an eventfd we hold.
    let _ = unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), 8) };
}
