//! The fuser `Filesystem` that forwards every request to a shared [`Vfs`].
//!
//! Each request locks the mutex for the duration of one `Vfs` call, so other
//! threads (other FUSE workers, a checkpoint timer, a control socket)
//! interleave between calls. Device work the call queued (`Vfs::deferred_io`:
//! lsfs's writes and flushes) is finished after the lock is let go and
//! before the reply: an fsync's flush, which takes milliseconds, holds up
//! no other request, and fsyncs that arrive while it runs share the next
//! flush (group commit).
//! A panic inside the `Vfs` is caught and reported as EIO; it poisons the
//! mutex, and every later request also gets EIO, because the file system's
//! state can no longer be trusted.
//!
//! The kernel is asked to send as few requests as lsfs can do without:
//! - it caches entries (negative ones too) and attributes long
//!   (`cache_policy`), pages across opens and directory listings;
//! - OPEN, OPENDIR and FLUSH are answered ENOSYS once, after which the
//!   kernel stops sending them (and RELEASE, RELEASEDIR): lsfs keeps no
//!   per-handle state, and an unlinked file stays alive while the kernel
//!   holds a lookup reference to it, which it does while the file is open;
//! - READDIRPLUS returns attributes with the names where the kernel expects
//!   lookups to follow;
//! - ioctls: FITRIM trims (`fstrim`); F2FS's atomic-write ones and lsfs's
//!   multi-file commit are served by `atomic_ioctl.rs`; the rest (the
//!   terminal probe of `isatty()`) are refused at once (`ioctl`).
//!
//! Every request is counted by opcode (`counters`).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    FileAttr, FileHandle, Filesystem, Generation, INodeNo, KernelConfig, LockOwner, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use lsfs_vfs::{Attr, Ctx, DeferredIo, FileKind, SetAttr, Vfs, VfsResult};

use crate::atomic_ioctl::AtomicIoctls;
use crate::cache_policy::CachePolicy;
use crate::convert::{errno, file_attr, file_type, system_time_opt, time_set, xattr_list};
use crate::counters::{Op, RequestCounters};
use crate::ioctl::{self, Ioctl};
use crate::kernel_cache::KernelCache;
use crate::privs;
use crate::spin::Spinner;

/// How many entries to ask the `Vfs` for per refill of a readdir reply.
const READDIR_BATCH: usize = 128;
/// The same for readdirplus, smaller: each entry is looked up, and those
/// that do not fit the reply (a page holds about 25) are forgotten again.
const READDIRPLUS_BATCH: usize = 32;

pub(crate) struct FuseAdapter<V: Vfs> {
    vfs: Arc<Mutex<V>>,
    /// Where the `Vfs` queues device work to finish outside the lock.
    io: Option<Arc<dyn DeferredIo>>,
    /// Ask the kernel for its writeback cache (`MountOptions::writeback_cache`).
    writeback_cache: bool,
    counters: Arc<RequestCounters>,
    policy: CachePolicy,
    /// Polls the device file while requests come fast (`spin.rs`); set
    /// once mounted, if the mount spins.
    spinner: Arc<OnceLock<Arc<Spinner>>>,
    /// Answers F2FS's atomic-write ioctls (`atomic_ioctl.rs`).
    atomic: AtomicIoctls<V>,
}

impl<V: Vfs> FuseAdapter<V> {
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
        FuseAdapter {
            atomic: AtomicIoctls::new(vfs.clone(), io.clone(), kernel, atomic_writes),
            vfs,
            io,
            writeback_cache,
            counters,
            policy,
            spinner,
        }
    }

    /// An inode's attributes as sent to the kernel, with how long it may
    /// keep them (the policy's TTL for that inode).
    fn cached_attr(&self, a: &Attr) -> (FileAttr, Duration) {
        (file_attr(a), self.policy.ttl(a.ino))
    }

    /// Reply with an entry the kernel keeps as long as the policy allows.
    fn entry(&self, reply: ReplyEntry, a: Attr) {
        let (attr, ttl) = self.cached_attr(&a);
        reply.entry(&ttl, &attr, Generation(0))
    }

    fn attr(&self, reply: ReplyAttr, a: Attr) {
        let (attr, ttl) = self.cached_attr(&a);
        reply.attr(&ttl, &attr)
    }

    fn count(&self, op: Op) {
        self.counters.count(op);
        if let Some(s) = self.spinner.get() {
            s.on_request();
        }
    }

    /// The shape of nearly every request: count it, run `f` on the `Vfs`
    /// ([`FuseAdapter::call`]), and answer with `ok` or the error.
    fn serve<T, R: ErrorReply>(
        &self,
        op: Op,
        reply: R,
        f: impl FnOnce(&mut V) -> VfsResult<T>,
        ok: impl FnOnce(R, T),
    ) {
        self.count(op);
        answer(reply, self.call(f), ok);
    }

    /// [`FuseAdapter::serve`] for a request that makes a new name: the
    /// reply is its entry.
    fn serve_entry(&self, op: Op, reply: ReplyEntry, f: impl FnOnce(&mut V) -> VfsResult<Attr>) {
        self.serve(op, reply, f, |reply, a| self.entry(reply, a));
    }

    /// [`FuseAdapter::serve`] for a request answered with success alone.
    fn serve_empty(&self, op: Op, reply: ReplyEmpty, f: impl FnOnce(&mut V) -> VfsResult<()>) {
        self.serve(op, reply, f, |reply, ()| reply.ok());
    }

    /// An fsync of a file or a directory: durable, so it waits for every
    /// write queued before it ([`FuseAdapter::call_durable`]).
    fn serve_fsync(&self, op: Op, reply: ReplyEmpty, ino: INodeNo, datasync: bool) {
        self.count(op);
        answer(
            reply,
            self.call_durable(|v| v.fsync(ino.0, datasync)),
            |reply, ()| reply.ok(),
        );
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
    ) -> Result<(), fuser::Errno> {
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

    /// A request lsfs does not serve: ENOSYS, after which the kernel stops
    /// sending most of them.
    fn refuse<R: ErrorReply>(&self, op: Op, reply: R) {
        self.count(op);
        reply.error(fuser::Errno::ENOSYS);
    }

    /// Run `f` on the locked `Vfs`, then finish the device work it queued
    /// without the lock (a device error then fails the request with EIO);
    /// a poisoned lock or a panic is EIO. The panic unwinds through the
    /// guard, which poisons the mutex, so every other user of the `Vfs`
    /// learns of it too.
    fn call<T>(&self, f: impl FnOnce(&mut V) -> VfsResult<T>) -> Result<T, fuser::Errno> {
        self.call_then_finish(false, f)
    }

    /// [`FuseAdapter::call`] for a request that promises durability (fsync,
    /// sync): it finishes everything queued so far, also what other
    /// requests queued and are still finishing, which its promise may rest
    /// on.
    fn call_durable<T>(&self, f: impl FnOnce(&mut V) -> VfsResult<T>) -> Result<T, fuser::Errno> {
        self.call_then_finish(true, f)
    }

    fn call_then_finish<T>(
        &self,
        durable: bool,
        f: impl FnOnce(&mut V) -> VfsResult<T>,
    ) -> Result<T, fuser::Errno> {
        call_vfs(&self.vfs, self.io.as_ref(), durable, f)
    }
}

/// [`FuseAdapter::call_then_finish`] for whoever holds the `Vfs` and its
/// device queue: the adapter, and the threads that answer the atomic-write
/// ioctls (`atomic_ioctl.rs`).
pub(crate) fn call_vfs<V: Vfs, T>(
    vfs: &Mutex<V>,
    io: Option<&Arc<dyn DeferredIo>>,
    durable: bool,
    f: impl FnOnce(&mut V) -> VfsResult<T>,
) -> Result<T, fuser::Errno> {
    let r = catch_unwind(AssertUnwindSafe(|| {
        let Ok(mut guard) = vfs.lock() else {
            tracing::error!("file system state is poisoned by an earlier panic");
            return Err(fuser::Errno::EIO);
        };
        let before = io.map(|io| io.last_ticket());
        let r = f(&mut guard).map_err(errno);
        let after = io.map(|io| io.last_ticket());
        drop(guard);
        if let (Some(io), Some(before), Some(after)) = (io, before, after) {
            if durable || after > before {
                let done = io.finish(after).map_err(errno);
                // The call's own error says more than the device's.
                return r.and_then(|v| done.map(|()| v));
            }
        }
        r
    }));
    r.unwrap_or_else(|_| {
        tracing::error!("file system call panicked; failing every later request with EIO");
        Err(fuser::Errno::EIO)
    })
}

impl<V: Vfs> Drop for FuseAdapter<V> {
    /// The mount ended: processes with atomic writes pending are no
    /// longer watched.
    fn drop(&mut self) {
        self.atomic.stop();
    }
}

fn ctx(req: &Request, umask: u32) -> Ctx {
    Ctx {
        uid: req.uid(),
        gid: req.gid(),
        pid: req.pid(),
        umask,
    }
}

/// The attributes sent with a name the kernel will not link to an inode: a
/// negative entry (node 0), or "." and ".." in a readdirplus reply (the
/// kernel skips those). Only the node number and the type are read.
fn placeholder_attr(ino: u64, kind: FileKind) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: file_type(kind),
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// What every fuser reply type can do, which fuser gives each type as an
/// inherent method of its own: fail with an errno.
trait ErrorReply {
    fn error(self, e: fuser::Errno);
}

macro_rules! error_reply {
    ($($t:ty),* $(,)?) => {
        $(impl ErrorReply for $t {
            fn error(self, e: fuser::Errno) {
                <$t>::error(self, e)
            }
        })*
    };
}

error_reply!(
    ReplyAttr,
    ReplyCreate,
    ReplyData,
    ReplyDirectory,
    ReplyDirectoryPlus,
    ReplyEmpty,
    ReplyEntry,
    ReplyOpen,
    ReplyStatfs,
    ReplyWrite,
    ReplyXattr,
    fuser::ReplyBmap,
    fuser::ReplyLock,
    fuser::ReplyPoll,
);

/// Answer with `ok` and what the call returned, or with its error.
fn answer<T, R: ErrorReply>(reply: R, r: Result<T, fuser::Errno>, ok: impl FnOnce(R, T)) {
    match r {
        Ok(v) => ok(reply, v),
        Err(e) => reply.error(e),
    }
}

/// Answer a getxattr/listxattr: a size probe (`size == 0`) gets the length,
/// a buffer that is too small gets ERANGE.
fn reply_xattr(reply: ReplyXattr, size: u32, v: Vec<u8>) {
    if size == 0 {
        reply.size(v.len() as u32)
    } else if v.len() > size as usize {
        reply.error(fuser::Errno::ERANGE)
    } else {
        reply.data(&v)
    }
}

impl<V: Vfs + 'static> Filesystem for FuseAdapter<V> {
    /// With the writeback cache the kernel keeps written pages and sends
    /// them in batches, and keeps size and times itself until it sends them
    /// (setattr). Reads may come on write-only handles, which the `Vfs`
    /// allows (it checks permissions at open, not per handle); append
    /// offsets are the kernel's, which the `Vfs` takes as given anyway.
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // We clear setuid/setgid bits (see `privs`), so the kernel need not
        // ask for `security.capability` before every write.
        if let Err(missing) = config.add_capabilities(fuser::InitFlags::FUSE_HANDLE_KILLPRIV_V2) {
            tracing::debug!("the kernel clears setuid bits itself ({missing:?})");
        }
        if self.writeback_cache {
            if let Err(missing) = config.add_capabilities(fuser::InitFlags::FUSE_WRITEBACK_CACHE) {
                tracing::warn!(
                    "the kernel offers no FUSE writeback cache ({missing:?}); writing through"
                );
                self.writeback_cache = false;
            }
        }
        // Each is a saving only; a kernel without one works as before.
        for (flag, what) in [
            // Attributes with every name: what follows a listing is nearly
            // always a stat or an open of its entries (ls -l, du, diff,
            // git status, rm -r), and the attributes refresh those the
            // writeback cache made stale at close. Measured against the
            // kernel's adaptive mode in docs/PERFORMANCE.md.
            (fuser::InitFlags::FUSE_DO_READDIRPLUS, "readdirplus"),
            // A symlink's target cannot change: keep it in the page cache.
            (fuser::InitFlags::FUSE_CACHE_SYMLINKS, "cached symlinks"),
            // Lookups and readdirs of one directory need not queue behind
            // each other in the kernel (they still take turns on the Vfs).
            (
                fuser::InitFlags::FUSE_PARALLEL_DIROPS,
                "parallel directory operations",
            ),
        ] {
            if let Err(missing) = config.add_capabilities(flag) {
                tracing::debug!("the kernel offers no {what} ({missing:?})");
            }
        }
        Ok(())
    }

    /// Called once the kernel has let go (unmount): make everything durable.
    fn destroy(&mut self) {
        if let Err(e) = self.call_durable(|v| v.sync()) {
            tracing::error!("sync at unmount failed: {e:?}");
        }
    }

    /// A name that does not exist is answered as an entry with node 0: the
    /// kernel then keeps the negative entry for the TTL instead of asking
    /// again (every stat of a missing file, every path search).
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.count(Op::Lookup);
        match self.call(|v| v.lookup(parent.0, name.as_bytes())) {
            Ok(a) => self.entry(reply, a),
            Err(fuser::Errno::ENOENT) => {
                let ttl = self.policy.ttl(parent.0);
                let none = placeholder_attr(0, FileKind::File);
                reply.entry_with_ttls(&Duration::ZERO, &ttl, &none, Generation(0))
            }
            Err(e) => reply.error(e),
        }
    }

    /// fuser's default `batch_forget` calls this once per inode (its
    /// `ForgetOne` type is not public, so it cannot be overridden).
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.count(Op::Forget);
        let _ = self.call(|v| {
            v.forget(ino.0, nlookup);
            Ok(())
        });
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.serve(
            Op::Getattr,
            reply,
            |v| v.getattr(ino.0),
            |reply, a| self.attr(reply, a),
        );
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let set = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(time_set),
            mtime: mtime.map(time_set),
            ctime: system_time_opt(ctime),
        };
        // Privileges a chown or an unprivileged truncate drops (`privs`).
        let drop = set.uid.is_some() || set.gid.is_some() || (set.size.is_some() && req.uid() != 0);
        self.serve(
            Op::Setattr,
            reply,
            |v| {
                let mut set = set;
                if drop {
                    privs::drop_in(v, ino.0, &mut set)?;
                }
                v.setattr(ino.0, &set)
            },
            |reply, a| self.attr(reply, a),
        );
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.serve(
            Op::Readlink,
            reply,
            |v| v.readlink(ino.0),
            |reply, t| reply.data(&t),
        );
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let ctx = ctx(req, umask);
        self.serve_entry(Op::Mknod, reply, |v| {
            v.mknod(parent.0, name.as_bytes(), mode, rdev, &ctx)
        });
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let ctx = ctx(req, umask);
        self.serve_entry(Op::Mkdir, reply, |v| {
            v.mkdir(parent.0, name.as_bytes(), mode, &ctx)
        });
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.serve_empty(Op::Unlink, reply, |v| v.unlink(parent.0, name.as_bytes()));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.serve_empty(Op::Rmdir, reply, |v| v.rmdir(parent.0, name.as_bytes()));
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let ctx = ctx(req, 0);
        let target = target.as_os_str().as_bytes();
        self.serve_entry(Op::Symlink, reply, |v| {
            v.symlink(parent.0, link_name.as_bytes(), target, &ctx)
        });
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.serve_empty(Op::Rename, reply, |v| {
            v.rename(
                parent.0,
                name.as_bytes(),
                newparent.0,
                newname.as_bytes(),
                flags.bits(),
            )
        });
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.serve_entry(Op::Link, reply, |v| {
            v.link(ino.0, newparent.0, newname.as_bytes())
        });
    }

    /// ENOSYS: the kernel stops sending OPEN (and RELEASE) for good and
    /// opens files itself, keeping their pages across opens
    /// (`FOPEN_KEEP_CACHE` is its default then). lsfs needs nothing from an
    /// open: there are no handles, permissions are the kernel's
    /// (`default_permissions`), O_TRUNC comes as a setattr, and an unlinked
    /// file stays alive through the kernel's lookup reference, which it
    /// holds until the last close.
    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.refuse(Op::Open, reply);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.serve(
            Op::Read,
            reply,
            |v| v.read(ino.0, offset, size),
            |reply, d| reply.data(&d),
        );
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let drop = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        self.serve(
            Op::Write,
            reply,
            |v| {
                if drop {
                    privs::drop_now(v, ino.0)?;
                }
                v.write(ino.0, offset, data)
            },
            |reply, n| reply.written(n),
        );
    }

    /// ENOSYS: the kernel stops sending FLUSH at every close. Nothing is
    /// lost: the kernel writes the file's dirty pages back and returns
    /// their errors from close() before it would send the FLUSH, and with
    /// the flush request gone it still does that (`fuse_flush`); lsfs
    /// has no locks to drop and nothing of its own to flush (durability is
    /// fsync's job).
    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.refuse(Op::Flush, reply);
    }

    /// The kernel sends no RELEASE once it has learned that OPEN is not
    /// implemented (the first open teaches it, and new files come by MKNOD);
    /// should one come, there is nothing to do: no open was counted.
    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.count(Op::Release);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.serve_fsync(Op::Fsync, reply, ino, datasync);
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
    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: fuser::ReplyLseek,
    ) {
        self.count(Op::Lseek);
        if self.writeback_cache {
            return reply.error(fuser::Errno::ENOSYS);
        }
        let data = match whence {
            libc::SEEK_DATA => true,
            libc::SEEK_HOLE => false,
            _ => return reply.error(fuser::Errno::EINVAL),
        };
        let Ok(offset) = u64::try_from(offset) else {
            return reply.error(fuser::Errno::ENXIO);
        };
        match self.call(|v| v.seek_data_or_hole(ino.0, offset, data)) {
            Ok(Some(o)) => reply.offset(o as i64),
            Ok(None) => reply.error(fuser::Errno::ENXIO),
            Err(e) => reply.error(e),
        }
    }

    /// ENOSYS, as OPEN: the kernel stops sending OPENDIR and RELEASEDIR,
    /// and caches listings (`FOPEN_CACHE_DIR` is its default then), which
    /// it drops when the directory changes through it or is invalidated
    /// (`KernelCache`).
    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.refuse(Op::Opendir, reply);
    }

    /// `offset` is the `Vfs` cookie of the last entry the kernel has seen,
    /// so a listing resumes correctly however the directory changed since.
    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.count(Op::Readdir);
        let r = self.list(
            offset,
            READDIR_BATCH,
            |v, cookie, n| v.readdir(ino.0, cookie, n),
            |e| e.offset,
            |e, _| {
                // True when the buffer is full; this entry is sent next time.
                reply.add(
                    INodeNo(e.ino),
                    e.offset,
                    file_type(e.kind),
                    OsStr::from_bytes(&e.name),
                )
            },
        );
        answer(reply, r, |reply, ()| reply.ok());
    }

    /// Like `readdir`, with each entry's attributes; every entry sent but
    /// "." and ".." is a lookup reference the kernel now holds, and the
    /// references of entries that did not fit are given back at once.
    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        self.count(Op::Readdirplus);
        let r = self.list(
            offset,
            READDIRPLUS_BATCH,
            |v, cookie, n| v.readdirplus(ino.0, cookie, n),
            |(e, _)| e.offset,
            |(e, attr), rest| {
                let (fattr, ttl) = match &attr {
                    Some(a) => self.cached_attr(a),
                    None => (placeholder_attr(e.ino, e.kind), Duration::ZERO),
                };
                let full = reply.add(
                    INodeNo(e.ino),
                    e.offset,
                    OsStr::from_bytes(&e.name),
                    &ttl,
                    &fattr,
                    Generation(0),
                );
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
        );
        answer(reply, r, |reply, ()| reply.ok());
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.count(Op::Releasedir);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.serve_fsync(Op::Fsyncdir, reply, ino, datasync);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.serve(
            Op::Statfs,
            reply,
            |v| v.statfs(),
            |reply, s| {
                reply.statfs(
                    s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize,
                )
            },
        );
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.serve_empty(Op::Setxattr, reply, |v| {
            v.setxattr(ino.0, name.as_bytes(), value, flags)
        });
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        if name.as_bytes() == b"security.capability" {
            self.counters.count_capability_probe();
        }
        self.serve(
            Op::Getxattr,
            reply,
            |v| v.getxattr(ino.0, name.as_bytes()),
            |reply, value| reply_xattr(reply, size, value),
        );
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.serve(
            Op::Listxattr,
            reply,
            |v| v.listxattr(ino.0),
            |reply, names| reply_xattr(reply, size, xattr_list(&names)),
        );
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.serve_empty(Op::Removexattr, reply, |v| {
            v.removexattr(ino.0, name.as_bytes())
        });
    }

    /// Only called without `default_permissions`; the kernel checks
    /// permissions, so existence is all there is left to check.
    fn access(&self, _req: &Request, ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        self.serve_empty(Op::Access, reply, |v| v.getattr(ino.0).map(|_| ()));
    }

    /// ENOSYS: the kernel then makes new files with MKNOD and opens them
    /// itself. One request less per new file than CREATE, whose RELEASE
    /// at close the kernel sends as long as it has not yet learned that
    /// OPEN is not implemented (an untar opens no existing file).
    fn create(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        self.refuse(Op::Create, reply);
    }

    /// See `ioctl`: what lsfs does not know is refused quietly.
    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        self.count(Op::Ioctl);
        match ioctl::decode(cmd) {
            Ioctl::Fitrim => {
                // Root's, as on every file system (CAP_SYS_ADMIN there):
                // trimming makes the device work for everyone's space.
                if req.uid() != 0 {
                    return reply.error(fuser::Errno::EPERM);
                }
                let Some(range) = ioctl::FstrimRange::decode(in_data) else {
                    return reply.error(fuser::Errno::EINVAL);
                };
                match self.call(|v| v.trim(range.start, range.len, range.minlen)) {
                    Ok(bytes) => reply.ioctl(0, &range.reply(bytes)),
                    Err(e) => reply.error(e),
                }
            }
            Ioctl::Unknown => reply.error(fuser::Errno::ENOTTY),
            Ioctl::F2fs(op) => self.atomic.serve(req.uid(), req.pid(), ino.0, op, reply),
            Ioctl::AtomicFiles(op) => match ioctl::atomic_files_arg(in_data) {
                Ok(inos) => self.atomic.serve_files(req.uid(), inos, op, reply),
                Err(e) => reply.error(errno(e)),
            },
        }
    }

    /// The mode word goes to the engine as it is (`lsfs_vfs::FallocMode`
    /// reads it). The kernel sends only KEEP_SIZE, PUNCH_HOLE and
    /// ZERO_RANGE; it writes a punched or zeroed range back first, so the
    /// engine zeroes what the page cache held too.
    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.serve_empty(Op::Fallocate, reply, |v| {
            v.fallocate(ino.0, offset, length, mode)
        });
    }
    // Requests lsfs does not serve, answered ENOSYS without fuser's warning
    // per request (the kernel stops sending most of them after the first).

    fn getlk(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        _start: u64,
        _end: u64,
        _typ: i32,
        _pid: u32,
        reply: fuser::ReplyLock,
    ) {
        self.refuse(Op::Getlk, reply);
    }

    fn setlk(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        _start: u64,
        _end: u64,
        _typ: i32,
        _pid: u32,
        _sleep: bool,
        reply: ReplyEmpty,
    ) {
        self.refuse(Op::Setlk, reply);
    }

    fn bmap(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _blocksize: u32,
        _idx: u64,
        reply: fuser::ReplyBmap,
    ) {
        self.refuse(Op::Bmap, reply);
    }

    fn poll(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _ph: fuser::PollNotifier,
        _events: fuser::PollEvents,
        _flags: fuser::PollFlags,
        reply: fuser::ReplyPoll,
    ) {
        self.refuse(Op::Poll, reply);
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        _fh_in: FileHandle,
        _offset_in: u64,
        _ino_out: INodeNo,
        _fh_out: FileHandle,
        _offset_out: u64,
        _len: u64,
        _flags: fuser::CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        self.refuse(Op::CopyFileRange, reply);
    }
}
