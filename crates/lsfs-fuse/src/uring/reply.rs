//! Encoding replies into a ring entry's payload buffer: the reply's fixed
//! struct (`fuse_entry_out`, `fuse_attr_out`, …) and then its data, as the
//! kernel reads them back (`fuse_copy_out_args`). The layouts are the ones
//! fuser writes to `/dev/fuse` for the same replies.

use std::time::Duration;

use lsfs_vfs::{Attr, FileKind, StatFs, Timespec};

use super::abi::{ATTR_OUT_SZ, ATTR_SZ, DIRENT_SZ, ENTRY_OUT_SZ, KSTATFS_SZ};
use crate::ops::Cached;

/// A reply being written into the payload buffer; it never grows past it.
pub struct Out<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl<'a> Out<'a> {
    pub fn new(buf: &'a mut [u8]) -> Self {
        Out { buf, len: 0 }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Room left.
    pub fn room(&self) -> usize {
        self.buf.len() - self.len
    }

    /// Append `b`; false (and nothing written) if it does not fit.
    pub fn put(&mut self, b: &[u8]) -> bool {
        if b.len() > self.room() {
            return false;
        }
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
        true
    }

    pub fn u32(&mut self, v: u32) -> bool {
        self.put(&v.to_le_bytes())
    }

    pub fn u64(&mut self, v: u64) -> bool {
        self.put(&v.to_le_bytes())
    }
}

/// A kind as a dirent type (`DT_*`, the `S_IFMT` bits shifted down).
fn dirent_type(kind: FileKind) -> u32 {
    kind.mode_bits() >> 12
}

/// A time as the kernel's seconds (signed, stored in a u64) and
/// nanoseconds; times before 1970 are a negative second and a positive
/// nanosecond, as lsfs keeps them.
fn secs(t: Timespec) -> u64 {
    t.sec as u64
}

/// `struct fuse_attr`.
pub fn attr_bytes(a: &Attr) -> [u8; ATTR_SZ] {
    let mut b = [0u8; ATTR_SZ];
    let mut o = Out::new(&mut b);
    o.u64(a.ino);
    o.u64(a.size);
    o.u64(a.blocks);
    o.u64(secs(a.atime));
    o.u64(secs(a.mtime));
    o.u64(secs(a.ctime));
    o.u32(a.atime.nsec);
    o.u32(a.mtime.nsec);
    o.u32(a.ctime.nsec);
    o.u32(a.kind.mode_bits() | u32::from(a.perm));
    o.u32(a.nlink);
    o.u32(a.uid);
    o.u32(a.gid);
    o.u32(a.rdev);
    o.u32(a.blksize);
    o.u32(0);
    debug_assert_eq!(o.len(), ATTR_SZ);
    b
}

/// The attributes sent with a name the kernel will not link to an inode:
/// a negative entry (node 0), or "." and ".." in a readdirplus reply.
/// Only the node number and the type are read.
fn placeholder(ino: u64, kind: FileKind) -> [u8; ATTR_SZ] {
    let mut b = [0u8; ATTR_SZ];
    b[0..8].copy_from_slice(&ino.to_le_bytes());
    b[60..64].copy_from_slice(&kind.mode_bits().to_le_bytes());
    b[80..84].copy_from_slice(&4096u32.to_le_bytes());
    b
}

/// `struct fuse_entry_out` with separate TTLs for the name and the
/// attributes.
fn entry_out(
    nodeid: u64,
    entry_ttl: Duration,
    attr_ttl: Duration,
    attr: &[u8; ATTR_SZ],
) -> [u8; ENTRY_OUT_SZ] {
    let mut b = [0u8; ENTRY_OUT_SZ];
    let mut o = Out::new(&mut b);
    o.u64(nodeid);
    o.u64(0); // generation
    o.u64(entry_ttl.as_secs());
    o.u64(attr_ttl.as_secs());
    o.u32(entry_ttl.subsec_nanos());
    o.u32(attr_ttl.subsec_nanos());
    o.put(attr);
    debug_assert_eq!(o.len(), ENTRY_OUT_SZ);
    b
}

/// The entry of a name that exists (LOOKUP, MKNOD, MKDIR, …).
pub fn entry(c: &Cached) -> [u8; ENTRY_OUT_SZ] {
    entry_out(c.attr.ino, c.ttl, c.ttl, &attr_bytes(&c.attr))
}

/// A negative entry, kept for `ttl`.
pub fn missing(ttl: Duration) -> [u8; ENTRY_OUT_SZ] {
    entry_out(0, ttl, Duration::ZERO, &placeholder(0, FileKind::File))
}

/// `struct fuse_attr_out` (GETATTR, SETATTR).
pub fn attr_out(c: &Cached) -> [u8; ATTR_OUT_SZ] {
    let mut b = [0u8; ATTR_OUT_SZ];
    let mut o = Out::new(&mut b);
    o.u64(c.ttl.as_secs());
    o.u32(c.ttl.subsec_nanos());
    o.u32(0);
    o.put(&attr_bytes(&c.attr));
    b
}

/// `struct fuse_kstatfs`.
pub fn statfs(s: &StatFs) -> [u8; KSTATFS_SZ] {
    let mut b = [0u8; KSTATFS_SZ];
    let mut o = Out::new(&mut b);
    for v in [s.blocks, s.bfree, s.bavail, s.files, s.ffree] {
        o.u64(v);
    }
    for v in [s.bsize, s.namelen, s.frsize] {
        o.u32(v);
    }
    // padding and spare[6] stay zero.
    b
}

/// Bytes of a dirent with a name of `namelen` bytes, padded to 8.
fn dirent_len(namelen: usize) -> usize {
    (DIRENT_SZ + namelen + 7) & !7
}

/// Append a `fuse_dirent`; false if it does not fit in `limit` bytes of
/// reply (the size the kernel asked for).
pub fn dirent(
    out: &mut Out<'_>,
    limit: usize,
    ino: u64,
    off: u64,
    kind: FileKind,
    name: &[u8],
) -> bool {
    let n = dirent_len(name.len());
    if out.len() + n > limit || n > out.room() {
        return false;
    }
    put_dirent(out, ino, off, kind, name);
    true
}

fn put_dirent(out: &mut Out<'_>, ino: u64, off: u64, kind: FileKind, name: &[u8]) {
    let start = out.len();
    out.u64(ino);
    out.u64(off);
    out.u32(name.len() as u32);
    out.u32(dirent_type(kind));
    out.put(name);
    let pad = dirent_len(name.len()) - (out.len() - start);
    out.put(&[0u8; 8][..pad]);
}

/// Append a `fuse_direntplus` (entry then dirent); `cached` is `None` for
/// "." and "..", which get placeholder attributes. False if it does not
/// fit in `limit`.
pub fn direntplus(
    out: &mut Out<'_>,
    limit: usize,
    ino: u64,
    off: u64,
    kind: FileKind,
    name: &[u8],
    cached: Option<&Cached>,
) -> bool {
    let n = ENTRY_OUT_SZ + dirent_len(name.len());
    if out.len() + n > limit || n > out.room() {
        return false;
    }
    let e = match cached {
        Some(c) => entry(c),
        None => entry_out(ino, Duration::ZERO, Duration::ZERO, &placeholder(ino, kind)),
    };
    out.put(&e);
    put_dirent(out, ino, off, kind, name);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr() -> Attr {
        Attr {
            ino: 7,
            size: 12345,
            blocks: 24,
            atime: Timespec { sec: -2, nsec: 750 },
            mtime: Timespec { sec: 5, nsec: 6 },
            ctime: Timespec { sec: 8, nsec: 9 },
            crtime: Timespec { sec: 0, nsec: 0 },
            kind: FileKind::Dir,
            perm: 0o755,
            nlink: 3,
            uid: 1000,
            gid: 100,
            rdev: 0,
            blksize: 4096,
        }
    }

    /// The fields land where `struct fuse_attr` has them.
    #[test]
    fn attr_fields_are_at_their_offsets() {
        let b = attr_bytes(&attr());
        let r = super::super::abi::Reader(&b);
        assert_eq!(r.u64(0), 7);
        assert_eq!(r.u64(8), 12345);
        assert_eq!(r.u64(24) as i64, -2);
        assert_eq!(r.u32(48), 750);
        assert_eq!(r.u32(60), libc::S_IFDIR | 0o755);
        assert_eq!(r.u32(64), 3);
        assert_eq!(r.u32(68), 1000);
        assert_eq!(r.u32(80), 4096);
    }

    /// Dirents are padded to 8 bytes and stop at the kernel's limit.
    #[test]
    fn dirents_pad_and_respect_the_limit() {
        let mut buf = [0u8; 256];
        let mut out = Out::new(&mut buf);
        assert!(dirent(&mut out, 64, 5, 1, FileKind::File, b"abc"));
        assert_eq!(out.len(), 32);
        assert!(!dirent(
            &mut out,
            64,
            6,
            2,
            FileKind::File,
            b"a-longer-name"
        ));
        assert_eq!(out.len(), 32, "an entry that does not fit is not written");
        assert!(dirent(&mut out, 64, 6, 2, FileKind::Symlink, b"12345678"));
        assert_eq!(out.len(), 64);
        let r = super::super::abi::Reader(&buf);
        assert_eq!(r.u32(16), 3);
        assert_eq!(r.u32(20), libc::DT_REG as u32);
        assert_eq!(r.u32(32 + 20), libc::DT_LNK as u32);
    }
}
