//! The work of each FUSE request, once, for every transport: fuser's
//! `/dev/fuse` loop (`adapter.rs`) and lsfs's own io_uring queues
//! (`uring/`) decode a request, call one of these, and encode what it
//! returns. Each call counts its request (`counters`), runs the `Vfs`
//! ([`call_vfs`]) and applies the mount's cache policy; none of them knows
//! how the answer travels.
//!
//! Each request locks the mutex for the duration of one `Vfs` call, so other
//! threads (other FUSE workers, a checkpoint timer, a control socket)
//! interleave between calls. Device work the call queued (`Vfs::deferred_io`:
//! lsfs's writes and flushes) is finished after the lock is let go and
//! before the reply: an fsync's flush, which takes milliseconds, holds up
//! no other request, and fsyncs that arrive while it runs share the next
//! flush (group commit). Both transports run fsyncs on the mount's worker
//! threads while several callers fsync (`fsync_workers`), so that they do
//! arrive while one runs.
//! A panic inside the `Vfs` is caught and reported as EIO; it poisons the
//! mutex, and every later request also gets EIO, because the file system's
//! state can no longer be trusted.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use lsfs_vfs::{Attr, Ctx, DeferredIo, DirEntry, Errno, SetAttr, StatFs, Vfs, VfsResult};

use crate::atomic_ioctl::{AtomicIoctls, IoctlDone};
use crate::background_writes::BackgroundWrites;
use crate::cache_policy::CachePolicy;
use crate::convert::xattr_list;
use crate::counters::{Op, RequestCounters};
use crate::fsync_workers::{self, FsyncWorkers};
use crate::ioctl::{self, Ioctl};
use crate::kernel_cache::KernelCache;
use crate::privs;
use crate::spin::Spinner;

/// How many entries to ask the `Vfs` for per refill of a readdir reply.
const READDIR_BATCH: usize = 128;
/// The same for readdirplus, smaller: each entry is looked up, and those
/// that do not fit the reply (a page holds about 25) are forgotten again.
const READDIRPLUS_BATCH: usize = 32;

/// What a request answers with, or the errno it fails with: the `Vfs`'s
/// own, which each transport encodes where it replies.
pub(crate) type OpResult<T> = VfsResult<T>;

/// An inode's attributes and how long the kernel may keep them.
#[derive(Clone, Debug)]
pub(crate) struct Cached {
    pub attr: Attr,
    pub ttl: Duration,
}

/// A LOOKUP's answer.
pub(crate) enum Lookup {
    Found(Cached),
    /// The name does not exist: the kernel keeps that for `ttl` (an entry
    /// with node 0) instead of asking again, on every stat of a missing
    /// file and every path search.
    Missing {
        ttl: Duration,
    },
}

/// A GETXATTR's or LISTXATTR's answer: a size probe (`size == 0`) gets
/// the length; a buffer that is too small is ERANGE (before this).
pub(crate) enum Xattr {
    Size(u32),
    Data(Vec<u8>),
}

/// An IOCTL's answer: the result and the bytes copied back to the caller.
pub(crate) type IoctlOut = OpResult<Vec<u8>>;

pub(crate) struct Ops<V: Vfs> {
    vfs: Arc<Mutex<V>>,
    /// Where the `Vfs` queues device work to finish outside the lock.
    io: Option<Arc<dyn DeferredIo>>,
    /// The kernel's writeback cache is on (decided at FUSE_INIT).
    writeback_cache: AtomicBool,
    counters: Arc<RequestCounters>,
    policy: CachePolicy,
    /// Polls the device file while requests come fast (`spin.rs`); set
    /// once mounted, if the mount spins.
    spinner: Arc<OnceLock<Arc<Spinner>>>,
    /// Answers F2FS's atomic-write ioctls (`atomic_ioctl.rs`).
    atomic: AtomicIoctls<V>,
    /// Finishes the device work of requests that promise no durability,
    /// under the writeback cache (`background_writes.rs`).
    background: Option<BackgroundWrites>,
    /// Where fsyncs run while several callers fsync, so that they overlap
    /// (`fsync_workers`); one pool for both transports.
    fsyncs: FsyncWorkers,
}

impl<V: Vfs> Ops<V> {
    pub(crate) fn new(
        vfs: Arc<Mutex<V>>,
        writeback_cache: bool,
        counters: Arc<RequestCounters>,
        policy: CachePolicy,
        spinner: Arc<OnceLock<Arc<Spinner>>>,
        kernel: Arc<KernelCache>,
        atomic_writes: bool,
    ) -> Self {
        let io = vfs.lock().ok().and_then(|v| v.deferred_io());
        let background = io.clone().and_then(BackgroundWrites::start);
        Ops {
            atomic: AtomicIoctls::new(vfs.clone(), io.clone(), kernel, atomic_writes),
            background,
            vfs,
            io,
            writeback_cache: AtomicBool::new(writeback_cache),
            counters,
            policy,
            spinner,
            fsyncs: FsyncWorkers::start(fsync_workers::WORKERS),
        }
    }

    /// The mount's fsync workers.
    pub(crate) fn fsyncs(&self) -> &FsyncWorkers {
        &self.fsyncs
    }

    pub(crate) fn counters(&self) -> &RequestCounters {
        &self.counters
    }

    pub(crate) fn writeback_cache(&self) -> bool {
        self.writeback_cache.load(Ordering::Relaxed)
    }

    /// The kernel turned the writeback cache down at FUSE_INIT.
    pub(crate) fn write_through(&self) {
        self.writeback_cache.store(false, Ordering::Relaxed);
    }

    fn cached(&self, attr: Attr) -> Cached {
        let ttl = self.policy.ttl(attr.ino);
        Cached { attr, ttl }
    }

    pub(crate) fn count(&self, op: Op) {
        self.counters.count(op);
        if let Some(s) = self.spinner.get() {
            s.on_request();
        }
    }

    /// Count `op` and run `f` on the `Vfs` ([`Ops::call`]).
    fn serve<T>(&self, op: Op, f: impl FnOnce(&mut V) -> VfsResult<T>) -> OpResult<T> {
        self.count(op);
        self.call(f)
    }

    /// A request lsfs does not serve: ENOSYS, after which the kernel stops
    /// sending most of them.
    pub(crate) fn refuse(&self, op: Op) -> Errno {
        self.count(op);
        Errno::NOSYS
    }

    /// Run `f` on the locked `Vfs`, then finish the device work it queued
    /// without the lock (a device error then fails the request with EIO);
    /// a poisoned lock or a panic is EIO.
    pub(crate) fn call<T>(&self, f: impl FnOnce(&mut V) -> VfsResult<T>) -> OpResult<T> {
        call_vfs(&self.vfs, self.io.as_ref(), Finish::Own, f)
    }

    /// [`Ops::call`] for a request that promises durability (fsync, sync):
    /// it finishes everything queued so far, also what other requests
    /// queued and are still finishing, which its promise may rest on.
    pub(crate) fn call_durable<T>(&self, f: impl FnOnce(&mut V) -> VfsResult<T>) -> OpResult<T> {
        call_vfs(&self.vfs, self.io.as_ref(), Finish::Durable, f)
    }

    pub(crate) fn lookup(&self, parent: u64, name: &[u8]) -> OpResult<Lookup> {
        match self.serve(Op::Lookup, |v| v.lookup(parent, name)) {
            Ok(a) => Ok(Lookup::Found(self.cached(a))),
            Err(Errno::NOENT) => Ok(Lookup::Missing {
                ttl: self.policy.ttl(parent),
            }),
            Err(e) => Err(e),
        }
    }

    /// One inode forgotten `nlookup` times (a BATCH_FORGET is several).
    pub(crate) fn forget(&self, ino: u64, nlookup: u64) {
        self.count(Op::Forget);
        let _ = self.call(|v| {
            v.forget(ino, nlookup);
            Ok(())
        });
    }

    pub(crate) fn getattr(&self, ino: u64) -> OpResult<Cached> {
        self.serve(Op::Getattr, |v| v.getattr(ino))
            .map(|a| self.cached(a))
    }

    /// `caller` is the uid of the process asking.
    pub(crate) fn setattr(&self, caller: u32, ino: u64, set: SetAttr) -> OpResult<Cached> {
        // Privileges a chown or an unprivileged truncate drops (`privs`).
        let drop = set.uid.is_some() || set.gid.is_some() || (set.size.is_some() && caller != 0);
        self.serve(Op::Setattr, |v| {
            let mut set = set;
            if drop {
                privs::drop_in(v, ino, &mut set)?;
            }
            v.setattr(ino, &set)
        })
        .map(|a| self.cached(a))
    }

    pub(crate) fn readlink(&self, ino: u64) -> OpResult<Vec<u8>> {
        self.serve(Op::Readlink, |v| v.readlink(ino))
    }

    pub(crate) fn mknod(
        &self,
        ctx: &Ctx,
        parent: u64,
        name: &[u8],
        mode: u32,
        rdev: u32,
    ) -> OpResult<Cached> {
        self.serve(Op::Mknod, |v| v.mknod(parent, name, mode, rdev, ctx))
            .map(|a| self.cached(a))
    }

    pub(crate) fn mkdir(&self, ctx: &Ctx, parent: u64, name: &[u8], mode: u32) -> OpResult<Cached> {
        self.serve(Op::Mkdir, |v| v.mkdir(parent, name, mode, ctx))
            .map(|a| self.cached(a))
    }

    pub(crate) fn symlink(
        &self,
        ctx: &Ctx,
        parent: u64,
        name: &[u8],
        target: &[u8],
    ) -> OpResult<Cached> {
        self.serve(Op::Symlink, |v| v.symlink(parent, name, target, ctx))
            .map(|a| self.cached(a))
    }

    pub(crate) fn link(&self, ino: u64, newparent: u64, newname: &[u8]) -> OpResult<Cached> {
        self.serve(Op::Link, |v| v.link(ino, newparent, newname))
            .map(|a| self.cached(a))
    }

    pub(crate) fn unlink(&self, parent: u64, name: &[u8]) -> OpResult<()> {
        self.serve(Op::Unlink, |v| v.unlink(parent, name))
    }

    pub(crate) fn rmdir(&self, parent: u64, name: &[u8]) -> OpResult<()> {
        self.serve(Op::Rmdir, |v| v.rmdir(parent, name))
    }

    pub(crate) fn rename(
        &self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        flags: u32,
    ) -> OpResult<()> {
        self.serve(Op::Rename, |v| {
            v.rename(parent, name, newparent, newname, flags)
        })
    }

    pub(crate) fn read(&self, ino: u64, offset: u64, size: u32) -> OpResult<Vec<u8>> {
        self.serve(Op::Read, |v| v.read(ino, offset, size))
    }

    /// `kill_suidgid`: the kernel asks to drop setuid/setgid bits first
    /// (`FUSE_WRITE_KILL_SUIDGID`).
    pub(crate) fn write(
        &self,
        ino: u64,
        offset: u64,
        data: &[u8],
        kill_suidgid: bool,
    ) -> OpResult<u32> {
        self.count(Op::Write);
        // Under the writeback cache the WRITE is the kernel's writeback,
        // not the application's call: the device writes it queued (a full
        // segment) go to the background writer, and the reply goes at once
        // (`background_writes.rs` says why that is safe). Every other
        // request finishes its own.
        let later = self.background.as_ref().filter(|_| self.writeback_cache());
        call_vfs(
            &self.vfs,
            self.io.as_ref(),
            Finish::new(false, later),
            |v| {
                if kill_suidgid {
                    privs::drop_now(v, ino)?;
                }
                v.write(ino, offset, data)
            },
        )
    }

    /// An fsync of a file (`Op::Fsync`) or a directory (`Op::Fsyncdir`):
    /// durable, so it waits for every write queued before it.
    pub(crate) fn fsync(&self, op: Op, ino: u64, datasync: bool) -> OpResult<()> {
        self.count(op);
        self.call_durable(|v| v.fsync(ino, datasync))
    }

    /// The kernel handles SEEK_SET, SEEK_CUR and SEEK_END itself and asks
    /// only for SEEK_DATA and SEEK_HOLE (cp, tar and rsync use them to skip
    /// holes). With the writeback cache the answer is ENOSYS: the kernel
    /// does not write its dirty pages back before it asks (`fuse_lseek` in
    /// fs/fuse/file.c sends FUSE_LSEEK at once, up to Linux 6.18 at least;
    /// only its fallback refreshes the size), so lsfs would report holes
    /// (or the end of the file) where written data still sits in the page
    /// cache, and a copy would lose it. No other answer is safe: lsfs does
    /// not know the kernel's size, and any error but ENOSYS reaches the
    /// caller. After ENOSYS the kernel answers itself from its own size,
    /// the whole file being data. (fallocate is different: the kernel
    /// writes the range back before a punch or zero range, and drops its
    /// pages after.)
    pub(crate) fn lseek(&self, ino: u64, offset: i64, whence: i32) -> OpResult<i64> {
        self.count(Op::Lseek);
        if self.writeback_cache() {
            return Err(Errno::NOSYS);
        }
        let data = match whence {
            libc::SEEK_DATA => true,
            libc::SEEK_HOLE => false,
            _ => return Err(Errno::INVAL),
        };
        let offset = u64::try_from(offset).map_err(|_| Errno::NXIO)?;
        match self.call(|v| v.seek_data_or_hole(ino, offset, data))? {
            Some(o) => Ok(o as i64),
            None => Err(Errno::NXIO),
        }
    }

    /// The batching both listings share: the entries after `offset`,
    /// fetched `batch` at a time, go to `add` (with the rest of their
    /// batch) until it finds the reply full or the directory ends. `cookie`
    /// is an entry's offset, where the next fetch resumes.
    fn list<E>(
        &self,
        offset: u64,
        batch: usize,
        fetch: impl Fn(&mut V, u64, usize) -> VfsResult<Vec<E>>,
        cookie: impl Fn(&E) -> u64,
        mut add: impl FnMut(E, &mut std::vec::IntoIter<E>) -> bool,
    ) -> OpResult<()> {
        let mut after = offset;
        loop {
            let entries = self.call(|v| fetch(v, after, batch))?;
            let n = entries.len();
            let mut entries = entries.into_iter();
            while let Some(e) = entries.next() {
                let next = cookie(&e);
                if add(e, &mut entries) {
                    return Ok(());
                }
                after = next;
            }
            if n < batch {
                return Ok(());
            }
        }
    }

    /// `offset` is the `Vfs` cookie of the last entry the kernel has seen,
    /// so a listing resumes correctly however the directory changed since.
    /// `add` puts an entry in the reply and says whether the reply was
    /// full (the entry then goes next time).
    pub(crate) fn readdir(
        &self,
        ino: u64,
        offset: u64,
        mut add: impl FnMut(&DirEntry) -> bool,
    ) -> OpResult<()> {
        self.count(Op::Readdir);
        self.list(
            offset,
            READDIR_BATCH,
            |v, cookie, n| v.readdir(ino, cookie, n),
            |e| e.offset,
            |e, _| add(&e),
        )
    }

    /// Like `readdir`, with each entry's attributes (none for "." and
    /// ".."); every entry sent but those two is a lookup reference the
    /// kernel now holds, and the references of entries that did not fit
    /// are given back at once.
    pub(crate) fn readdirplus(
        &self,
        ino: u64,
        offset: u64,
        mut add: impl FnMut(&DirEntry, Option<&Cached>) -> bool,
    ) -> OpResult<()> {
        self.count(Op::Readdirplus);
        self.list(
            offset,
            READDIRPLUS_BATCH,
            |v, cookie, n| v.readdirplus(ino, cookie, n),
            |(e, _)| e.offset,
            |(e, attr), rest| {
                let cached = attr.clone().map(|a| self.cached(a));
                let full = add(&e, cached.as_ref());
                if full {
                    // This entry and the rest are sent next time, so the
                    // kernel holds no reference to them yet.
                    let unsent: Vec<u64> = std::iter::once(attr)
                        .chain(rest.map(|(_, a)| a))
                        .flatten()
                        .map(|a| a.ino)
                        .collect();
                    let _ = self.call(|v| {
                        for i in unsent {
                            v.forget(i, 1);
                        }
                        Ok(())
                    });
                }
                full
            },
        )
    }

    pub(crate) fn statfs(&self) -> OpResult<StatFs> {
        self.serve(Op::Statfs, |v| v.statfs())
    }

    pub(crate) fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], flags: i32) -> OpResult<()> {
        self.serve(Op::Setxattr, |v| v.setxattr(ino, name, value, flags))
    }

    pub(crate) fn getxattr(&self, ino: u64, name: &[u8], size: u32) -> OpResult<Xattr> {
        if name == b"security.capability" {
            self.counters.count_capability_probe();
        }
        let value = self.serve(Op::Getxattr, |v| v.getxattr(ino, name))?;
        sized(size, value)
    }

    pub(crate) fn listxattr(&self, ino: u64, size: u32) -> OpResult<Xattr> {
        let names = self.serve(Op::Listxattr, |v| v.listxattr(ino))?;
        sized(size, xattr_list(&names))
    }

    pub(crate) fn removexattr(&self, ino: u64, name: &[u8]) -> OpResult<()> {
        self.serve(Op::Removexattr, |v| v.removexattr(ino, name))
    }

    /// Only called without `default_permissions`; the kernel checks
    /// permissions, so existence is all there is left to check.
    pub(crate) fn access(&self, ino: u64) -> OpResult<()> {
        self.serve(Op::Access, |v| v.getattr(ino).map(|_| ()))
    }

    /// The mode word goes to the engine as it is (`lsfs_vfs::FallocMode`
    /// reads it). The kernel sends only KEEP_SIZE, PUNCH_HOLE and
    /// ZERO_RANGE; it writes a punched or zeroed range back first, so the
    /// engine zeroes what the page cache held too.
    pub(crate) fn fallocate(&self, ino: u64, offset: u64, length: u64, mode: i32) -> OpResult<()> {
        self.serve(Op::Fallocate, |v| v.fallocate(ino, offset, length, mode))
    }

    /// copy_file_range(2): the engine shares whole blocks and copies the
    /// rest (`Vfs::copy_file_range`); the count may be short, and the
    /// caller (the kernel, then the application) goes on. The kernel wrote
    /// both ranges' dirty pages back before sending this, and drops the
    /// destination's cached pages over the range after the reply
    /// (`fuse_copy_file_range`), so no stale page is left. The reply's
    /// count is 32 bits: a request asks for less than 4 GiB.
    pub(crate) fn copy_file_range(
        &self,
        ino_in: u64,
        off_in: u64,
        ino_out: u64,
        off_out: u64,
        len: u64,
    ) -> OpResult<u32> {
        let len = len.min(u64::from(u32::MAX) & !4095);
        self.serve(Op::CopyFileRange, |v| {
            v.copy_file_range(ino_in, off_in, ino_out, off_out, len)
        })
        .map(|n| n as u32)
    }

    /// Make everything durable (the mount ends).
    pub(crate) fn sync(&self) -> OpResult<()> {
        self.call_durable(|v| v.sync())
    }

    /// Requests come through io_uring now: polling `/dev/fuse` would only
    /// burn a CPU for the few that still come there (FORGET).
    pub(crate) fn stop_spinning(&self) {
        if let Some(s) = self.spinner.get() {
            s.stop();
        }
    }
}

impl<V: Vfs + 'static> Ops<V> {
    /// FITRIM trims (`fstrim`); F2FS's atomic-write ioctls and lsfs's
    /// multi-file commit are served by `atomic_ioctl.rs`, some of them
    /// later from a thread of their own; the rest (the terminal probe of
    /// `isatty()`) are refused at once. `done` gets the answer, from
    /// whichever thread has it.
    pub(crate) fn ioctl(
        &self,
        uid: u32,
        pid: u32,
        ino: u64,
        cmd: u32,
        in_data: &[u8],
        done: IoctlDone,
    ) {
        self.count(Op::Ioctl);
        match ioctl::decode(cmd) {
            Ioctl::Fitrim => {
                // Root's, as on every file system (CAP_SYS_ADMIN there):
                // trimming makes the device work for everyone's space.
                if uid != 0 {
                    return done(Err(Errno::PERM));
                }
                let Some(range) = ioctl::FstrimRange::decode(in_data) else {
                    return done(Err(Errno::INVAL));
                };
                done(
                    self.call(|v| v.trim(range.start, range.len, range.minlen))
                        .map(|bytes| range.reply(bytes).to_vec()),
                )
            }
            Ioctl::Unknown => done(Err(Errno::NOTTY)),
            Ioctl::F2fs(op) => self.atomic.serve(uid, pid, ino, op, done),
            Ioctl::AtomicFiles(op) => match ioctl::atomic_files_arg(in_data) {
                Ok(inos) => self.atomic.serve_files(uid, inos, op, done),
                Err(e) => done(Err(e)),
            },
        }
    }
}

/// A value the caller's buffer of `size` bytes must hold: `size == 0`
/// asks for the length.
fn sized(size: u32, v: Vec<u8>) -> OpResult<Xattr> {
    if size == 0 {
        Ok(Xattr::Size(v.len() as u32))
    } else if v.len() > size as usize {
        Err(Errno::RANGE)
    } else {
        Ok(Xattr::Data(v))
    }
}

/// [`Ops::call`] for whoever holds the `Vfs` and its device queue: the
/// operations, and the threads that answer the atomic-write ioctls
/// (`atomic_ioctl.rs`).
/// What a call does with the device work once it lets go of the lock.
pub(crate) enum Finish<'a> {
    /// Finish everything queued so far, also others' work (fsync, sync).
    Durable,
    /// Finish the work this call queued.
    Own,
    /// Hand the work this call queued to the background writer.
    Later(&'a BackgroundWrites),
}

impl<'a> Finish<'a> {
    pub(crate) fn new(durable: bool, later: Option<&'a BackgroundWrites>) -> Self {
        match (durable, later) {
            (true, _) => Finish::Durable,
            (false, Some(b)) => Finish::Later(b),
            (false, None) => Finish::Own,
        }
    }
}

pub(crate) fn call_vfs<V: Vfs, T>(
    vfs: &Mutex<V>,
    io: Option<&Arc<dyn DeferredIo>>,
    finish: Finish<'_>,
    f: impl FnOnce(&mut V) -> VfsResult<T>,
) -> OpResult<T> {
    let r = catch_unwind(AssertUnwindSafe(|| {
        let Ok(mut guard) = vfs.lock() else {
            tracing::error!("file system state is poisoned by an earlier panic");
            return Err(Errno::IO);
        };
        let before = io.map(|io| io.last_ticket());
        let r = f(&mut guard);
        let after = io.map(|io| io.last_ticket());
        drop(guard);
        if let (Some(io), Some(before), Some(after)) = (io, before, after) {
            if let Finish::Later(b) = finish {
                if after > before {
                    b.finish_later(after);
                }
                return r;
            }
            if matches!(finish, Finish::Durable) || after > before {
                let done = io.finish(after);
                // The call's own error says more than the device's.
                return r.and_then(|v| done.map(|()| v));
            }
        }
        r
    }));
    r.unwrap_or_else(|_| {
        tracing::error!("file system call panicked; failing every later request with EIO");
        Err(Errno::IO)
    })
}

impl<V: Vfs> Drop for Ops<V> {
    /// The mount ended: processes with atomic writes pending are no
    /// longer watched.
    fn drop(&mut self) {
        self.atomic.stop();
    }
}
