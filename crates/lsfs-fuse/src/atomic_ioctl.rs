//! Serving F2FS's atomic-write ioctls through the mount (docs/ATOMIC.md).
//!
//! With the kernel's writeback cache (the default), the application's
//! writes may still be dirty pages in the kernel when it asks for START,
//! COMMIT or ABORT: the `Vfs` has not seen them. So those three are not
//! answered in the request's thread. A thread of their own first has the
//! kernel invalidate the file's pages, which writes the dirty ones back as
//! WRITE requests (the kernel launders them, and waits) that the server,
//! free again, serves; then it calls the `Vfs` and replies. Before START
//! that makes earlier writes ordinary ones; before COMMIT and ABORT it puts
//! the last writes of the transaction into the set. After an ABORT (or a
//! failed COMMIT that dropped the set) it invalidates again, so that the
//! page cache does not go on showing dropped data. GET_FEATURES needs no
//! such care and is answered at once.
//!
//! lsfs sees no close (OPEN, FLUSH and RELEASE are not used: adapter.rs),
//! so it cannot drop a set at the last close as F2FS does. It watches the
//! process that started it instead (a pidfd): when that process ends with
//! writes still pending (SQLite's process killed mid-transaction) they are
//! aborted, as F2FS aborts them at the exiting task's flush.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use lsfs_vfs::{DeferredIo, Errno, Vfs};

use crate::ioctl::{AtomicFilesIoctl, F2fsIoctl, F2FS_FEATURE_ATOMIC_WRITE};
use crate::kernel_cache::KernelCache;
use crate::ops::{call_vfs, Finish};

/// Where an ioctl's answer goes (the bytes copied back to the caller, or
/// the errno), from whichever thread has it: the transport that received
/// the request encodes it.
pub(crate) type IoctlDone = Box<dyn FnOnce(lsfs_vfs::VfsResult<Vec<u8>>) + Send>;

/// How often a watcher looks whether the mount has ended.
const WATCH_POLL_MS: i32 = 500;

/// The adapter's part in atomic writes: what the reply threads and the
/// watchers share.
pub(crate) struct AtomicIoctls<V: Vfs> {
    vfs: Arc<Mutex<V>>,
    io: Option<Arc<dyn DeferredIo>>,
    kernel: Arc<KernelCache>,
    /// The files with writes pending, by the process (thread group) that
    /// started them; a process has a watcher while it has an entry.
    owners: Arc<Mutex<HashMap<u32, HashSet<u64>>>>,
    /// The mount has ended: watchers stop.
    stopped: Arc<AtomicBool>,
    /// The mount serves the ioctls (`MountOptions::atomic_writes`).
    enabled: bool,
}

impl<V: Vfs> Clone for AtomicIoctls<V> {
    fn clone(&self) -> Self {
        AtomicIoctls {
            vfs: self.vfs.clone(),
            io: self.io.clone(),
            kernel: self.kernel.clone(),
            owners: self.owners.clone(),
            stopped: self.stopped.clone(),
            enabled: self.enabled,
        }
    }
}

impl<V: Vfs> AtomicIoctls<V> {
    pub(crate) fn new(
        vfs: Arc<Mutex<V>>,
        io: Option<Arc<dyn DeferredIo>>,
        kernel: Arc<KernelCache>,
        enabled: bool,
    ) -> Self {
        AtomicIoctls {
            vfs,
            io,
            kernel,
            owners: Arc::default(),
            stopped: Arc::default(),
            enabled,
        }
    }

    /// The mount has ended: watchers stop at their next look.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    /// Whether the ioctls are served here: the mount allows them and the
    /// `Vfs` has atomic writes.
    fn served(&self) -> Result<bool, Errno> {
        if !self.enabled {
            return Ok(false);
        }
        self.call(false, |v| Ok(v.atomic_writes()))
    }

    fn call<T>(
        &self,
        durable: bool,
        f: impl FnOnce(&mut V) -> lsfs_vfs::VfsResult<T>,
    ) -> Result<T, Errno> {
        call_vfs(&self.vfs, self.io.as_ref(), Finish::new(durable, None), f)
    }

    /// The kernel writes `ino`'s dirty pages back and forgets its pages
    /// and attributes. Never with the `Vfs` lock held (`kernel_cache.rs`).
    fn write_back_and_forget(&self, ino: u64) {
        if let Err(e) = self.kernel.invalidate_inode(ino) {
            // ENOENT: the kernel holds nothing of it.
            if e.raw_os_error() != Some(libc::ENOENT) {
                tracing::warn!("invalidating inode {ino} around an atomic write: {e}");
            }
        }
    }
}

impl<V: Vfs + 'static> AtomicIoctls<V> {
    /// Answer `op` on `ino` for the caller `uid`, thread `pid`.
    pub(crate) fn serve(&self, uid: u32, pid: u32, ino: u64, op: F2fsIoctl, done: IoctlDone) {
        match self.served() {
            Ok(true) => {}
            // Not this file system's: as on a file system without the ioctls.
            Ok(false) => return done(Err(Errno::NOTTY)),
            Err(e) => return done(Err(e)),
        }
        if op == F2fsIoctl::GetFeatures {
            return done(Ok(F2FS_FEATURE_ATOMIC_WRITE.to_ne_bytes().to_vec()));
        }
        let me = self.clone();
        let spawned = thread::Builder::new()
            .name("lsfs-atomic".to_string())
            .spawn(move || done(me.run(uid, pid, ino, op).map(|()| Vec::new())));
        if let Err(e) = spawned {
            // The answer went down with the closure; its transport answers
            // EIO for it when it is dropped unanswered.
            tracing::error!("no thread for an atomic-write ioctl: {e}");
        }
    }

    fn run(&self, uid: u32, pid: u32, ino: u64, op: F2fsIoctl) -> Result<(), Errno> {
        self.write_back_and_forget(ino);
        match op {
            F2fsIoctl::GetFeatures => unreachable!("answered at once"),
            F2fsIoctl::StartAtomicWrite => {
                self.call(false, |v| {
                    // F2FS asks for the owner (or a capable caller).
                    let a = v.getattr(ino)?;
                    if uid != 0 && a.uid != uid {
                        return Err(Errno::ACCES);
                    }
                    v.atomic_start(ino)
                })?;
                self.own(thread_group(pid), ino);
                Ok(())
            }
            F2fsIoctl::CommitAtomicWrite => {
                let (r, pending) = self.call(true, |v| {
                    let r = v.atomic_commit(ino);
                    Ok((r, v.atomic_pending(ino)))
                })?;
                if !pending {
                    self.disown(ino);
                    if r.is_err() {
                        // The set was dropped: the pages show it still.
                        self.write_back_and_forget(ino);
                    }
                }
                r
            }
            F2fsIoctl::AbortAtomicWrite => {
                let r = self.call(false, |v| v.atomic_abort(ino));
                self.disown(ino);
                self.write_back_and_forget(ino);
                r
            }
        }
    }

    /// lsfs's ioctl on several files (`inos`) at once, for caller `uid`:
    /// each file's pages are written back first, then the `Vfs` commits
    /// (or aborts) all of them in one call.
    pub(crate) fn serve_files(
        &self,
        uid: u32,
        inos: Vec<u64>,
        op: AtomicFilesIoctl,
        done: IoctlDone,
    ) {
        match self.served() {
            Ok(true) => {}
            Ok(false) => return done(Err(Errno::NOTTY)),
            Err(e) => return done(Err(e)),
        }
        let me = self.clone();
        let spawned = thread::Builder::new()
            .name("lsfs-atomic".to_string())
            .spawn(move || done(me.run_files(uid, &inos, op).map(|()| Vec::new())));
        if let Err(e) = spawned {
            tracing::error!("no thread for an atomic-write ioctl: {e}");
        }
    }

    fn run_files(&self, uid: u32, inos: &[u64], op: AtomicFilesIoctl) -> Result<(), Errno> {
        for &ino in inos {
            self.write_back_and_forget(ino);
        }
        let (r, pending) = self.call(op == AtomicFilesIoctl::Commit, |v| {
            for &ino in inos {
                if uid != 0 && v.getattr(ino)?.uid != uid {
                    return Err(Errno::ACCES);
                }
            }
            let r = match op {
                AtomicFilesIoctl::Commit => v.atomic_commit_files(inos),
                AtomicFilesIoctl::Abort => v.atomic_abort_files(inos),
            };
            let pending: Vec<bool> = inos.iter().map(|&i| v.atomic_pending(i)).collect();
            Ok((r, pending))
        })?;
        for (&ino, pending) in inos.iter().zip(pending) {
            if !pending {
                self.disown(ino);
                if r.is_err() || op == AtomicFilesIoctl::Abort {
                    // Dropped sets: the pages show them still.
                    self.write_back_and_forget(ino);
                }
            }
        }
        r
    }

    /// `ino`'s pending writes belong to process `tgid`: watch it.
    fn own(&self, tgid: u32, ino: u64) {
        let mut owners = self.owners.lock().unwrap_or_else(|p| p.into_inner());
        for inos in owners.values_mut() {
            inos.remove(&ino);
        }
        let new = !owners.contains_key(&tgid);
        owners.entry(tgid).or_default().insert(ino);
        drop(owners);
        if new {
            self.watch(tgid);
        }
    }

    fn disown(&self, ino: u64) {
        let mut owners = self.owners.lock().unwrap_or_else(|p| p.into_inner());
        for inos in owners.values_mut() {
            inos.remove(&ino);
        }
    }

    /// A thread that waits for process `tgid` to end, then aborts what it
    /// left pending. Without pidfds (Linux before 5.3) nothing watches, and
    /// a set left by a dead process waits for an abort or a commit.
    fn watch(&self, tgid: u32) {
        // SAFETY: pidfd_open takes a pid and flags and returns a new
        // descriptor or -1; it touches no memory of ours.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, tgid as libc::pid_t, 0) } as i32;
        if fd < 0 {
            tracing::debug!(
                "not watching process {tgid}: {}",
                std::io::Error::last_os_error()
            );
            return;
        }
        let me = self.clone();
        let spawned = thread::Builder::new()
            .name("lsfs-atomic-watch".to_string())
            .spawn(move || {
                let ended = me.wait_for_exit(fd);
                // SAFETY: `fd` is the pidfd opened above, closed only here.
                unsafe { libc::close(fd) };
                let inos = me
                    .owners
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&tgid)
                    .unwrap_or_default();
                if !ended {
                    return;
                }
                for ino in inos {
                    tracing::info!("process {tgid} ended with atomic writes to inode {ino} pending: aborting them");
                    if let Err(e) = me.call(false, |v| v.atomic_abort(ino)) {
                        tracing::warn!("aborting the atomic writes of inode {ino}: {e:?}");
                    }
                    me.write_back_and_forget(ino);
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("not watching process {tgid}: {e}");
            // SAFETY: the thread that would own `fd` did not start.
            unsafe { libc::close(fd) };
        }
    }

    /// Whether the process of pidfd `fd` ended (`false`: the mount did).
    fn wait_for_exit(&self, fd: i32) -> bool {
        loop {
            if self.stopped.load(Ordering::Relaxed) {
                return false;
            }
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, for the duration of the call.
            let n = unsafe { libc::poll(&mut p, 1, WATCH_POLL_MS) };
            if n > 0 {
                return true;
            }
            if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                return false;
            }
        }
    }
}

/// The process (thread group) of thread `tid`: FUSE names the calling
/// thread, and a process's threads share its files.
fn thread_group(tid: u32) -> u32 {
    std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Tgid:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(tid)
}
