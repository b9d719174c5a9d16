//! The interface between a file-system engine and its front ends.
//!
//! `lsfs-core` implements [`Vfs`]; `lsfs-fuse` serves any [`Vfs`] through the
//! kernel; the model-based tests drive the engine and the in-memory
//! [`model::MemFs`] through the same calls and compare them after every step.
//!
//! Conventions (they mirror the FUSE low-level protocol, so the adapter is thin):
//! - Inodes are named by number; [`ROOT_INO`] is the root directory.
//! - Every call that returns an [`Attr`] for a *new reference* (lookup, create,
//!   mknod, mkdir, symlink, link) adds one to that inode's lookup count;
//!   [`Vfs::forget`] takes it away. An inode whose link count is 0 keeps its
//!   data while its lookup count or open count is above 0.
//! - Permission checks are the caller's (the kernel does them with the
//!   `default_permissions` mount option); the engine checks only what the
//!   kernel cannot: names, types, emptiness, sizes and space.
//! - Errors are POSIX errno values.
//! - A call may leave device work queued (see [`DeferredIo`]): whoever
//!   serialises calls (a lock) finishes it after letting go, before it
//!   treats the call as done.

pub mod falloc;
pub mod model;

pub use falloc::{FallocMode, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE};

use std::fmt;
use std::sync::Arc;

/// Inode number.
pub type Ino = u64;
/// The root directory's inode number.
pub const ROOT_INO: Ino = 1;
/// Longest name component, in bytes.
pub const NAME_MAX_BYTES: usize = 255;
/// Longest symlink target, in bytes.
pub const SYMLINK_MAX_BYTES: usize = 4095;

/// `rename` flag: fail with EEXIST if the target exists.
pub const RENAME_NOREPLACE: u32 = 1;
/// `rename` flag: swap source and target atomically; both must exist.
pub const RENAME_EXCHANGE: u32 = 2;
/// `setxattr` flag: fail with EEXIST if the attribute exists.
pub const XATTR_CREATE: i32 = 1;
/// `setxattr` flag: fail with ENODATA if the attribute does not exist.
pub const XATTR_REPLACE: i32 = 2;

/// A POSIX error number (`libc::ENOENT`, ...).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    pub const NOENT: Errno = Errno(libc::ENOENT);
    pub const EXIST: Errno = Errno(libc::EEXIST);
    pub const NOTDIR: Errno = Errno(libc::ENOTDIR);
    pub const ISDIR: Errno = Errno(libc::EISDIR);
    pub const NOTEMPTY: Errno = Errno(libc::ENOTEMPTY);
    pub const INVAL: Errno = Errno(libc::EINVAL);
    pub const NAMETOOLONG: Errno = Errno(libc::ENAMETOOLONG);
    pub const NOSPC: Errno = Errno(libc::ENOSPC);
    pub const IO: Errno = Errno(libc::EIO);
    pub const ROFS: Errno = Errno(libc::EROFS);
    pub const PERM: Errno = Errno(libc::EPERM);
    pub const ACCES: Errno = Errno(libc::EACCES);
    pub const NODATA: Errno = Errno(libc::ENODATA);
    pub const RANGE: Errno = Errno(libc::ERANGE);
    pub const FBIG: Errno = Errno(libc::EFBIG);
    pub const MLINK: Errno = Errno(libc::EMLINK);
    pub const XDEV: Errno = Errno(libc::EXDEV);
    pub const BUSY: Errno = Errno(libc::EBUSY);
    pub const NOSYS: Errno = Errno(libc::ENOSYS);
    pub const OPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
    pub const E2BIG: Errno = Errno(libc::E2BIG);
    pub const BADF: Errno = Errno(libc::EBADF);
    pub const LOOP: Errno = Errno(libc::ELOOP);
    pub const NXIO: Errno = Errno(libc::ENXIO);
    pub const NOTTY: Errno = Errno(libc::ENOTTY);
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = std::io::Error::from_raw_os_error(self.0);
        write!(f, "Errno({}: {})", self.0, s)
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

impl std::error::Error for Errno {}

pub type VfsResult<T> = Result<T, Errno>;

/// Seconds and nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timespec {
    pub sec: i64,
    pub nsec: u32,
}

impl Timespec {
    pub fn now() -> Timespec {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Timespec {
            sec: d.as_secs() as i64,
            nsec: d.subsec_nanos(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    CharDev,
    BlockDev,
}

impl FileKind {
    /// The `S_IFMT` bits of this kind.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileKind::File => libc::S_IFREG,
            FileKind::Dir => libc::S_IFDIR,
            FileKind::Symlink => libc::S_IFLNK,
            FileKind::Fifo => libc::S_IFIFO,
            FileKind::Socket => libc::S_IFSOCK,
            FileKind::CharDev => libc::S_IFCHR,
            FileKind::BlockDev => libc::S_IFBLK,
        }
    }

    /// The kind named by the `S_IFMT` bits of `mode`, if any.
    pub fn from_mode(mode: u32) -> Option<FileKind> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => FileKind::File,
            libc::S_IFDIR => FileKind::Dir,
            libc::S_IFLNK => FileKind::Symlink,
            libc::S_IFIFO => FileKind::Fifo,
            libc::S_IFSOCK => FileKind::Socket,
            libc::S_IFCHR => FileKind::CharDev,
            libc::S_IFBLK => FileKind::BlockDev,
            _ => return None,
        })
    }
}

/// What `stat` shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    pub ino: Ino,
    pub size: u64,
    /// Allocated space in 512-byte units.
    pub blocks: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    pub crtime: Timespec,
    pub kind: FileKind,
    /// Permission bits, including setuid, setgid and sticky (`mode & 0o7777`).
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub blksize: u32,
}

/// A time to set with `setattr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeSet {
    Now,
    At(Timespec),
}

/// The fields `setattr` changes; `None` leaves a field alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// Permission bits (`& 0o7777` is applied).
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// Truncate or extend.
    pub size: Option<u64>,
    pub atime: Option<TimeSet>,
    pub mtime: Option<TimeSet>,
    pub ctime: Option<Timespec>,
}

/// Who is asking: new inodes take their owner from here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ctx {
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    /// The caller's umask, already applied by the kernel when 0.
    pub umask: u32,
}

/// One directory entry as `readdir` returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub ino: Ino,
    /// The cookie to pass to the next `readdir` to continue after this entry.
    /// Cookies stay valid while other entries are added and removed.
    pub offset: u64,
    pub kind: FileKind,
    pub name: Vec<u8>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatFs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
}

/// A POSIX file system, addressed by inode number.
pub trait Vfs: Send {
    fn lookup(&mut self, parent: Ino, name: &[u8]) -> VfsResult<Attr>;
    /// Drop `nlookup` references taken by lookup-like calls.
    fn forget(&mut self, ino: Ino, nlookup: u64);
    fn getattr(&mut self, ino: Ino) -> VfsResult<Attr>;
    fn setattr(&mut self, ino: Ino, set: &SetAttr) -> VfsResult<Attr>;
    fn readlink(&mut self, ino: Ino) -> VfsResult<Vec<u8>>;
    /// Create a regular file, fifo, socket or device node. `mode` includes the
    /// `S_IFMT` type bits.
    fn mknod(
        &mut self,
        parent: Ino,
        name: &[u8],
        mode: u32,
        rdev: u32,
        ctx: &Ctx,
    ) -> VfsResult<Attr>;
    fn mkdir(&mut self, parent: Ino, name: &[u8], mode: u32, ctx: &Ctx) -> VfsResult<Attr>;
    fn unlink(&mut self, parent: Ino, name: &[u8]) -> VfsResult<()>;
    fn rmdir(&mut self, parent: Ino, name: &[u8]) -> VfsResult<()>;
    fn symlink(&mut self, parent: Ino, name: &[u8], target: &[u8], ctx: &Ctx) -> VfsResult<Attr>;
    /// `flags` is 0, [`RENAME_NOREPLACE`] or [`RENAME_EXCHANGE`].
    fn rename(
        &mut self,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        flags: u32,
    ) -> VfsResult<()>;
    fn link(&mut self, ino: Ino, newparent: Ino, newname: &[u8]) -> VfsResult<Attr>;
    /// Count an open file handle (directories included); see [`Vfs::release`].
    fn open(&mut self, ino: Ino, flags: i32) -> VfsResult<()>;
    fn release(&mut self, ino: Ino);
    fn read(&mut self, ino: Ino, offset: u64, size: u32) -> VfsResult<Vec<u8>>;
    fn write(&mut self, ino: Ino, offset: u64, data: &[u8]) -> VfsResult<u32>;
    /// Durable when it returns. `datasync` skips metadata that reading does not need.
    fn fsync(&mut self, ino: Ino, datasync: bool) -> VfsResult<()>;
    /// Entries after cookie `offset` (0 starts at the beginning), "." and ".."
    /// included, at most `max_entries`.
    fn readdir(&mut self, ino: Ino, offset: u64, max_entries: usize) -> VfsResult<Vec<DirEntry>>;
    /// [`Vfs::readdir`] with each entry's attributes, so that a listing
    /// followed by a stat of every entry costs one call instead of one per
    /// entry (FUSE's READDIRPLUS). Every entry but "." and ".." comes with
    /// its `Attr` and counts as a lookup: it adds one to the inode's lookup
    /// count, which the caller gives back with [`Vfs::forget`] for entries
    /// it does not pass on. By default [`Vfs::readdir`] and then
    /// [`Vfs::lookup`] of each name.
    fn readdirplus(
        &mut self,
        ino: Ino,
        offset: u64,
        max_entries: usize,
    ) -> VfsResult<Vec<(DirEntry, Option<Attr>)>> {
        let entries = self.readdir(ino, offset, max_entries)?;
        let mut out: Vec<(DirEntry, Option<Attr>)> = Vec::with_capacity(entries.len());
        for e in entries {
            if e.name == b"." || e.name == b".." {
                out.push((e, None));
                continue;
            }
            match self.lookup(ino, &e.name) {
                Ok(a) => out.push((e, Some(a))),
                Err(err) => {
                    // All or nothing: give back the references taken so far.
                    for a in out.iter().filter_map(|(_, a)| a.as_ref()) {
                        self.forget(a.ino, 1);
                    }
                    return Err(err);
                }
            }
        }
        Ok(out)
    }
    fn statfs(&mut self) -> VfsResult<StatFs>;
    fn setxattr(&mut self, ino: Ino, name: &[u8], value: &[u8], flags: i32) -> VfsResult<()>;
    fn getxattr(&mut self, ino: Ino, name: &[u8]) -> VfsResult<Vec<u8>>;
    fn listxattr(&mut self, ino: Ino) -> VfsResult<Vec<Vec<u8>>>;
    fn removexattr(&mut self, ino: Ino, name: &[u8]) -> VfsResult<()>;
    /// fallocate(2) with the modes [`FallocMode`] reads: mode 0 with or
    /// without `FALLOC_FL_KEEP_SIZE`, `FALLOC_FL_PUNCH_HOLE |
    /// FALLOC_FL_KEEP_SIZE` and `FALLOC_FL_ZERO_RANGE` with or without
    /// `FALLOC_FL_KEEP_SIZE`; other words give EOPNOTSUPP, an empty range
    /// EINVAL. A punched or zeroed range reads as zeros.
    fn fallocate(&mut self, ino: Ino, offset: u64, length: u64, mode: i32) -> VfsResult<()>;
    /// lseek(2)'s SEEK_DATA (`data`) or SEEK_HOLE from `offset` of a regular
    /// file: the offset found, or `None` for ENXIO (`offset` at or past the
    /// end, or no data after it). By default the whole file is data, which
    /// POSIX allows; file systems that know their holes say where they are.
    fn seek_data_or_hole(&mut self, ino: Ino, offset: u64, data: bool) -> VfsResult<Option<u64>> {
        Ok(seek_in_all_data(self.getattr(ino)?.size, offset, data))
    }
    /// copy_file_range(2): copy up to `len` bytes of regular file
    /// `ino_in` from `off_in` to `ino_out` at `off_out`, growing it as
    /// needed; the bytes copied, 0 from at or past the source's end, and
    /// possibly fewer than asked (the caller goes on from there). A
    /// directory is EISDIR, another kind EINVAL, overlapping ranges of one
    /// file EINVAL. By default the bytes are read and written
    /// ([`copy_range_by_bytes`]); a file system that can share blocks
    /// shares them.
    fn copy_file_range(
        &mut self,
        ino_in: Ino,
        off_in: u64,
        ino_out: Ino,
        off_out: u64,
        len: u64,
    ) -> VfsResult<u64> {
        let len = copy_range_checks(self, ino_in, off_in, ino_out, off_out, len)?;
        copy_range_by_bytes(self, ino_in, off_in, ino_out, off_out, len)
    }
    /// Make everything durable.
    fn sync(&mut self) -> VfsResult<()>;
    /// FITRIM (`fstrim`): tell the device to drop the free space lying in
    /// the `len` bytes at byte `start` of it, in pieces of at least
    /// `minlen` bytes; the bytes dropped. A file system without a device
    /// to tell answers as to an ioctl it does not know (ENOTTY).
    fn trim(&mut self, start: u64, len: u64, minlen: u64) -> VfsResult<u64> {
        let _ = (start, len, minlen);
        Err(Errno::NOTTY)
    }
    /// Whether the file system refuses changes.
    fn read_only(&self) -> bool;
    /// Where this file system queues the device writes and flushes its
    /// calls make, if it defers them past the call (`None`: every call
    /// has done its device work when it returns). Asked once; the queue
    /// stays the same for the file system's life.
    fn deferred_io(&self) -> Option<Arc<dyn DeferredIo>> {
        None
    }

    // ---- atomic writes (F2FS's interface; docs/ATOMIC.md) ----

    /// Whether [`Vfs::atomic_start`] and its companions work here (what
    /// F2FS's GET_FEATURES reports). By default they do not, and each
    /// answers ENOTTY, as a file system without the ioctls does.
    fn atomic_writes(&self) -> bool {
        false
    }
    /// From now on, writes to regular file `ino` are held apart until
    /// [`Vfs::atomic_commit`] makes all of them durable at once, or
    /// [`Vfs::atomic_abort`] drops them; a crash before the commit keeps
    /// none of them. Starting again is no change.
    fn atomic_start(&mut self, ino: Ino) -> VfsResult<()> {
        let _ = ino;
        Err(Errno::NOTTY)
    }
    /// Make every write since [`Vfs::atomic_start`] durable as one unit,
    /// and end the atomic mode; on a file not in it, an fsync. On an error
    /// nothing of them is applied (docs/ATOMIC.md says whether they are
    /// still pending).
    fn atomic_commit(&mut self, ino: Ino) -> VfsResult<()> {
        let _ = ino;
        Err(Errno::NOTTY)
    }
    /// Drop every write since [`Vfs::atomic_start`] without device I/O, and
    /// end the atomic mode; on a file not in it, nothing.
    fn atomic_abort(&mut self, ino: Ino) -> VfsResult<()> {
        let _ = ino;
        Err(Errno::NOTTY)
    }
    /// Whether `ino` has writes held by [`Vfs::atomic_start`].
    fn atomic_pending(&self, ino: Ino) -> bool {
        let _ = ino;
        false
    }
    /// [`Vfs::atomic_commit`] of several files as one unit: after a crash
    /// all of their writes since their starts are there, or none.
    fn atomic_commit_files(&mut self, inos: &[Ino]) -> VfsResult<()> {
        let _ = inos;
        Err(Errno::NOTTY)
    }
    /// [`Vfs::atomic_abort`] of several files.
    fn atomic_abort_files(&mut self, inos: &[Ino]) -> VfsResult<()> {
        let _ = inos;
        Err(Errno::NOTTY)
    }
}

/// Device work a file system queued during its calls, to be finished
/// outside the lock the calls ran under, so that other calls need not wait
/// for the device. The caller holds the lock around a call and reads
/// [`DeferredIo::last_ticket`] before and after it: if it grew, the call
/// queued work, and the caller finishes it (`finish`) after letting go of
/// the lock and before it replies. A call that promises durability (fsync,
/// sync) is finished in any case: what it depends on may have been queued
/// by another call still finishing.
pub trait DeferredIo: Send + Sync {
    /// The ticket of the last work queued so far; read it under the lock.
    fn last_ticket(&self) -> u64;
    /// Run the queued work up to ticket `ticket`, in order, or wait for the
    /// thread running it. `Err(EIO)` if the device failed before it was
    /// done (the file system is read-only from then on).
    fn finish(&self, ticket: u64) -> VfsResult<()>;
}

/// Most bytes [`copy_range_by_bytes`] copies in one call (8 MiB).
pub const COPY_BY_BYTES_MAX: u64 = 8 << 20;

/// copy_file_range(2)'s checks, as Linux makes them
/// (`generic_copy_file_checks`): both regular files (a directory is
/// EISDIR, another kind EINVAL), the range clipped to the source's end,
/// the destination's end within the largest file (EFBIG), and ranges of
/// one file apart (EINVAL). Returns the length to copy.
pub fn copy_range_checks<V: Vfs + ?Sized>(
    fs: &mut V,
    ino_in: Ino,
    off_in: u64,
    ino_out: Ino,
    off_out: u64,
    len: u64,
) -> VfsResult<u64> {
    let (a, b) = (fs.getattr(ino_in)?, fs.getattr(ino_out)?);
    for at in [&a, &b] {
        match at.kind {
            FileKind::File => {}
            FileKind::Dir => return Err(Errno::ISDIR),
            _ => return Err(Errno::INVAL),
        }
    }
    let len = if off_in >= a.size {
        0
    } else {
        len.min(a.size - off_in)
    };
    if off_out.checked_add(len).is_none() || off_in.checked_add(len).is_none() {
        return Err(Errno::FBIG);
    }
    if ino_in == ino_out && len > 0 && off_in < off_out + len && off_out < off_in + len {
        return Err(Errno::INVAL);
    }
    Ok(len)
}

/// Copy `len` bytes (already checked, [`copy_range_checks`]) by reading
/// and writing, at most [`COPY_BY_BYTES_MAX`] of them: the bytes copied.
pub fn copy_range_by_bytes<V: Vfs + ?Sized>(
    fs: &mut V,
    ino_in: Ino,
    off_in: u64,
    ino_out: Ino,
    off_out: u64,
    len: u64,
) -> VfsResult<u64> {
    let len = len.min(COPY_BY_BYTES_MAX);
    if len == 0 {
        return Ok(0);
    }
    let data = fs.read(ino_in, off_in, len as u32)?;
    if data.is_empty() {
        return Ok(0);
    }
    Ok(fs.write(ino_out, off_out, &data)? as u64)
}

/// SEEK_DATA (`data`) or SEEK_HOLE from `offset` in a file of `size` bytes
/// that is data throughout: `offset` itself, or the end; `None` (ENXIO) at
/// or past the end.
pub fn seek_in_all_data(size: u64, offset: u64, data: bool) -> Option<u64> {
    (offset < size).then_some(if data { offset } else { size })
}
