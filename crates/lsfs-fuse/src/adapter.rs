//! The fuser `Filesystem`: decodes what fuser parsed from `/dev/fuse`,
//! calls the request's operation (`ops.rs`, shared with the io_uring
//! transport in `uring/`) and encodes its answer in fuser's reply types.
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
//! - ioctls: see `Ops::ioctl`.
//!
//! With FUSE over io_uring (`MountOptions::uring`), FUSE_INIT also asks for
//! it and starts the ring queues (`uring::Rings`); from then on the kernel
//! sends most requests through them, and only FORGET, BATCH_FORGET and
//! INTERRUPT still come here.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    FileAttr, FileHandle, Filesystem, Generation, INodeNo, KernelConfig, LockOwner, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use lsfs_vfs::{Ctx, Errno, FileKind, SetAttr, Vfs};

use crate::convert::{errno, file_attr, file_type, system_time_opt, time_set};
use crate::counters::Op;
use crate::ops::{Cached, Lookup, OpResult, Ops, Xattr};
use crate::uring::UringStart;

pub(crate) struct FuseAdapter<V: Vfs> {
    ops: Arc<Ops<V>>,
    /// Starts the io_uring queues once FUSE_INIT agreed on them; `None`
    /// when the mount serves through `/dev/fuse` alone.
    uring: Option<UringStart<V>>,
}

impl<V: Vfs> FuseAdapter<V> {
    pub(crate) fn new(ops: Arc<Ops<V>>, uring: Option<UringStart<V>>) -> Self {
        FuseAdapter { ops, uring }
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

/// An inode's attributes as sent to the kernel, and for how long.
fn cached_attr(c: &Cached) -> (FileAttr, Duration) {
    (file_attr(&c.attr), c.ttl)
}

fn entry(reply: ReplyEntry, r: OpResult<Cached>) {
    answer(reply, r, |reply, c| {
        let (attr, ttl) = cached_attr(&c);
        reply.entry(&ttl, &attr, Generation(0))
    })
}

fn attr(reply: ReplyAttr, r: OpResult<Cached>) {
    answer(reply, r, |reply, c| {
        let (attr, ttl) = cached_attr(&c);
        reply.attr(&ttl, &attr)
    })
}

fn empty(reply: ReplyEmpty, r: OpResult<()>) {
    answer(reply, r, |reply, ()| reply.ok())
}

fn xattr(reply: ReplyXattr, r: OpResult<Xattr>) {
    answer(reply, r, |reply, x| match x {
        Xattr::Size(n) => reply.size(n),
        Xattr::Data(d) => reply.data(&d),
    })
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
/// inherent method of its own: fail with an errno. The one place where
/// the `Vfs`'s errno becomes fuser's.
trait ErrorReply {
    fn fail(self, e: Errno);
}

macro_rules! error_reply {
    ($($t:ty),* $(,)?) => {
        $(impl ErrorReply for $t {
            fn fail(self, e: Errno) {
                <$t>::error(self, errno(e))
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
    fuser::ReplyLseek,
    fuser::ReplyIoctl,
);

/// Answer with `ok` and what the call returned, or with its error.
fn answer<T, R: ErrorReply>(reply: R, r: OpResult<T>, ok: impl FnOnce(R, T)) {
    match r {
        Ok(v) => ok(reply, v),
        Err(e) => reply.fail(e),
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
        if self.ops.writeback_cache() {
            if let Err(missing) = config.add_capabilities(fuser::InitFlags::FUSE_WRITEBACK_CACHE) {
                tracing::warn!(
                    "the kernel offers no FUSE writeback cache ({missing:?}); writing through"
                );
                self.ops.write_through();
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
        if let Some(uring) = self.uring.take() {
            uring.negotiate(config)?;
        }
        Ok(())
    }

    /// Called once the kernel has let go (unmount): make everything durable.
    fn destroy(&mut self) {
        if let Err(e) = self.ops.sync() {
            tracing::error!("sync at unmount failed: {e:?}");
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        answer(
            reply,
            self.ops.lookup(parent.0, name.as_bytes()),
            |reply, l| match l {
                Lookup::Found(c) => {
                    let (attr, ttl) = cached_attr(&c);
                    reply.entry(&ttl, &attr, Generation(0))
                }
                Lookup::Missing { ttl } => {
                    let none = placeholder_attr(0, FileKind::File);
                    reply.entry_with_ttls(&Duration::ZERO, &ttl, &none, Generation(0))
                }
            },
        );
    }

    /// fuser's default `batch_forget` calls this once per inode (its
    /// `ForgetOne` type is not public, so it cannot be overridden).
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.ops.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        attr(reply, self.ops.getattr(ino.0));
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
        attr(reply, self.ops.setattr(req.uid(), ino.0, set));
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        answer(reply, self.ops.readlink(ino.0), |reply, t| reply.data(&t));
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
        entry(
            reply,
            self.ops.mknod(&ctx, parent.0, name.as_bytes(), mode, rdev),
        );
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
        entry(reply, self.ops.mkdir(&ctx, parent.0, name.as_bytes(), mode));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.ops.unlink(parent.0, name.as_bytes()));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.ops.rmdir(parent.0, name.as_bytes()));
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
        entry(
            reply,
            self.ops
                .symlink(&ctx, parent.0, link_name.as_bytes(), target),
        );
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
        empty(
            reply,
            self.ops.rename(
                parent.0,
                name.as_bytes(),
                newparent.0,
                newname.as_bytes(),
                flags.bits(),
            ),
        );
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        entry(reply, self.ops.link(ino.0, newparent.0, newname.as_bytes()));
    }

    /// ENOSYS: the kernel stops sending OPEN (and RELEASE) for good and
    /// opens files itself, keeping their pages across opens
    /// (`FOPEN_KEEP_CACHE` is its default then). lsfs needs nothing from an
    /// open: there are no handles, permissions are the kernel's
    /// (`default_permissions`), O_TRUNC comes as a setattr, and an unlinked
    /// file stays alive through the kernel's lookup reference, which it
    /// holds until the last close.
    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.fail(self.ops.refuse(Op::Open));
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
        answer(reply, self.ops.read(ino.0, offset, size), |reply, d| {
            reply.data(&d)
        });
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
        let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        answer(
            reply,
            self.ops.write(ino.0, offset, data, kill),
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
        reply.fail(self.ops.refuse(Op::Flush));
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
        self.ops.count(Op::Release);
        reply.ok();
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let ops = self.ops.clone();
        self.ops.fsyncs().run_for(req.pid(), move || {
            empty(reply, ops.fsync(Op::Fsync, ino.0, datasync))
        });
    }

    /// See `Ops::lseek`.
    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: fuser::ReplyLseek,
    ) {
        answer(reply, self.ops.lseek(ino.0, offset, whence), |reply, o| {
            reply.offset(o)
        });
    }

    /// ENOSYS, as OPEN: the kernel stops sending OPENDIR and RELEASEDIR,
    /// and caches listings (`FOPEN_CACHE_DIR` is its default then), which
    /// it drops when the directory changes through it or is invalidated
    /// (`KernelCache`).
    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.fail(self.ops.refuse(Op::Opendir));
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let r = self.ops.readdir(ino.0, offset, |e| {
            // True when the buffer is full; this entry is sent next time.
            reply.add(
                INodeNo(e.ino),
                e.offset,
                file_type(e.kind),
                OsStr::from_bytes(&e.name),
            )
        });
        answer(reply, r, |reply, ()| reply.ok());
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let r = self.ops.readdirplus(ino.0, offset, |e, cached| {
            let (fattr, ttl) = match cached {
                Some(c) => cached_attr(c),
                None => (placeholder_attr(e.ino, e.kind), Duration::ZERO),
            };
            reply.add(
                INodeNo(e.ino),
                e.offset,
                OsStr::from_bytes(&e.name),
                &ttl,
                &fattr,
                Generation(0),
            )
        });
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
        self.ops.count(Op::Releasedir);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let ops = self.ops.clone();
        self.ops.fsyncs().run_for(req.pid(), move || {
            empty(reply, ops.fsync(Op::Fsyncdir, ino.0, datasync))
        });
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        answer(reply, self.ops.statfs(), |reply, s| {
            reply.statfs(
                s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize,
            )
        });
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
        empty(
            reply,
            self.ops.setxattr(ino.0, name.as_bytes(), value, flags),
        );
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        xattr(reply, self.ops.getxattr(ino.0, name.as_bytes(), size));
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        xattr(reply, self.ops.listxattr(ino.0, size));
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.ops.removexattr(ino.0, name.as_bytes()));
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        empty(reply, self.ops.access(ino.0));
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
        reply.fail(self.ops.refuse(Op::Create));
    }

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
        self.ops.ioctl(
            req.uid(),
            req.pid(),
            ino.0,
            cmd,
            in_data,
            Box::new(move |r| match r {
                Ok(out) => reply.ioctl(0, &out),
                Err(e) => reply.fail(e),
            }),
        );
    }

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
        empty(reply, self.ops.fallocate(ino.0, offset, length, mode));
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
        reply.fail(self.ops.refuse(Op::Getlk));
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
        reply.fail(self.ops.refuse(Op::Setlk));
    }

    fn bmap(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _blocksize: u32,
        _idx: u64,
        reply: fuser::ReplyBmap,
    ) {
        reply.fail(self.ops.refuse(Op::Bmap));
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
        reply.fail(self.ops.refuse(Op::Poll));
    }

    /// Whole blocks are shared, the rest copied (`Ops::copy_file_range`).
    /// FICLONE and FICLONERANGE never come here: FUSE has no
    /// remap_file_range, and the kernel answers them EOPNOTSUPP itself.
    fn copy_file_range(
        &self,
        _req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: fuser::CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        answer(
            reply,
            self.ops
                .copy_file_range(ino_in.0, offset_in, ino_out.0, offset_out, len),
            |reply, n| reply.written(n),
        );
    }
}
