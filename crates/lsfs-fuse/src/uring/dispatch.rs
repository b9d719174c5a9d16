//! One request from a ring entry: decode its arguments (the header's
//! fixed struct and the payload's names and data), call its operation
//! (`ops.rs`, the same calls fuser's transport makes) and encode the
//! answer into the payload. Opcodes lsfs does not serve answer ENOSYS, as
//! fuser does.

use std::sync::Arc;

use lsfs_vfs::{Ctx, Errno, SetAttr, TimeSet, Timespec, Vfs};

use super::abi::{fattr, op, InHeader, Reader, FSYNC_FDATASYNC, IOCTL_OUT_SZ, WRITE_KILL_SUIDGID};
use super::reply::{self, Out};
use crate::counters::Op;
use crate::ops::{IoctlOut, Lookup, OpResult, Ops, Xattr};

/// What became of a request.
pub enum Answer {
    /// The reply is in the payload: `len` bytes, or the errno.
    Now(Result<usize, Errno>),
    /// Answered later, from another thread, through the [`LateDone`]: an
    /// atomic-write ioctl that waits for the kernel to write pages back
    /// first, or an fsync that runs on a worker while others' fsyncs
    /// overlap it (`fsync_workers`).
    Later,
    /// An opcode lsfs does not know: answer ENOSYS; not counted.
    Unknown,
}

/// An answer given from another thread.
pub enum Late {
    Ioctl(IoctlOut),
    /// An fsync's: no payload.
    Empty(OpResult<()>),
}

/// Where a request answered later sends its answer.
pub type LateDone = Box<dyn FnOnce(Late) + Send>;

/// The name at the start of `b` (up to its NUL) and what follows it.
fn name(b: &[u8]) -> Result<(&[u8], &[u8]), Errno> {
    let end = b.iter().position(|&c| c == 0).ok_or(Errno::INVAL)?;
    Ok((&b[..end], &b[end + 1..]))
}

/// Encode `r` with `ok` into `payload`, or its error.
fn encode<T>(
    payload: &mut [u8],
    r: OpResult<T>,
    ok: impl FnOnce(&mut Out<'_>, T) -> bool,
) -> Result<usize, Errno> {
    let v = r?;
    let mut out = Out::new(payload);
    if !ok(&mut out, v) {
        // The payload holds max_write bytes, more than any reply the
        // kernel asks for: this is a bug, not a full buffer.
        debug_assert!(false, "a reply did not fit the payload buffer");
        return Err(Errno::IO);
    }
    Ok(out.len())
}

fn time(secs: u64, nsec: u32) -> Timespec {
    Timespec {
        sec: secs as i64,
        nsec,
    }
}

/// `struct fuse_setattr_in` as the `Vfs`'s `SetAttr`.
fn set_attr(a: Reader<'_>) -> SetAttr {
    let valid = a.u32(0);
    let has = |bit: u32| valid & bit != 0;
    let at = |now: u32, secs_at: usize, nsec_at: usize| {
        if has(now) {
            TimeSet::Now
        } else {
            TimeSet::At(time(a.u64(secs_at), a.u32(nsec_at)))
        }
    };
    SetAttr {
        mode: has(fattr::MODE).then(|| a.u32(68)),
        uid: has(fattr::UID).then(|| a.u32(76)),
        gid: has(fattr::GID).then(|| a.u32(80)),
        size: has(fattr::SIZE).then(|| a.u64(16)),
        atime: has(fattr::ATIME).then(|| at(fattr::ATIME_NOW, 32, 56)),
        mtime: has(fattr::MTIME).then(|| at(fattr::MTIME_NOW, 40, 60)),
        ctime: has(fattr::CTIME).then(|| time(a.u64(48), a.u32(64))),
    }
}

fn ctx(h: &InHeader, umask: u32) -> Ctx {
    Ctx {
        uid: h.uid,
        gid: h.gid,
        pid: h.pid,
        umask,
    }
}

/// Serve one request. `op_in` is the header's argument struct, `payload`
/// the payload buffer, of which the request filled `in_len` bytes; the
/// reply overwrites it. `later` makes the answer path of a request
/// answered later.
pub fn serve<V: Vfs + 'static>(
    ops: &Arc<Ops<V>>,
    h: &InHeader,
    op_in: &[u8],
    payload: &mut [u8],
    in_len: usize,
    later: impl FnOnce() -> LateDone,
) -> Answer {
    let a = Reader(op_in);
    let ino = h.nodeid;
    let input = &payload[..in_len.min(payload.len())];
    let r = match h.opcode {
        op::LOOKUP => name(input).map(|(n, _)| n.to_vec()).and_then(|n| {
            encode(payload, ops.lookup(ino, &n), |o, l| match l {
                Lookup::Found(c) => o.put(&reply::entry(&c)),
                Lookup::Missing { ttl } => o.put(&reply::missing(ttl)),
            })
        }),
        op::GETATTR => encode(payload, ops.getattr(ino), |o, c| {
            o.put(&reply::attr_out(&c))
        }),
        op::SETATTR => encode(payload, ops.setattr(h.uid, ino, set_attr(a)), |o, c| {
            o.put(&reply::attr_out(&c))
        }),
        op::READLINK => encode(payload, ops.readlink(ino), |o, t| o.put(&t)),
        op::SYMLINK => name(input)
            .and_then(|(n, rest)| Ok((n.to_vec(), name(rest)?.0.to_vec())))
            .and_then(|(n, target)| {
                let r = ops.symlink(&ctx(h, 0), ino, &n, &target);
                encode(payload, r, |o, c| o.put(&reply::entry(&c)))
            }),
        op::MKNOD => name(input).map(|(n, _)| n.to_vec()).and_then(|n| {
            let (mode, rdev, umask) = (a.u32(0), a.u32(4), a.u32(8));
            let r = ops.mknod(&ctx(h, umask), ino, &n, mode, rdev);
            encode(payload, r, |o, c| o.put(&reply::entry(&c)))
        }),
        op::MKDIR => name(input).map(|(n, _)| n.to_vec()).and_then(|n| {
            let (mode, umask) = (a.u32(0), a.u32(4));
            let r = ops.mkdir(&ctx(h, umask), ino, &n, mode);
            encode(payload, r, |o, c| o.put(&reply::entry(&c)))
        }),
        op::UNLINK => name(input).and_then(|(n, _)| ops.unlink(ino, n).map(|()| 0)),
        op::RMDIR => name(input).and_then(|(n, _)| ops.rmdir(ino, n).map(|()| 0)),
        op::RENAME | op::RENAME2 => {
            let flags = if h.opcode == op::RENAME2 { a.u32(8) } else { 0 };
            name(input).and_then(|(old, rest)| {
                let (new, _) = name(rest)?;
                ops.rename(ino, old, a.u64(0), new, flags).map(|()| 0)
            })
        }
        op::LINK => name(input).map(|(n, _)| n.to_vec()).and_then(|n| {
            let r = ops.link(a.u64(0), ino, &n);
            encode(payload, r, |o, c| o.put(&reply::entry(&c)))
        }),
        op::READ => {
            let r = ops.read(ino, a.u64(8), a.u32(16));
            encode(payload, r, |o, d| o.put(&d))
        }
        op::WRITE => {
            let size = a.u32(16) as usize;
            let kill = a.u32(20) & WRITE_KILL_SUIDGID != 0;
            if size > input.len() {
                Err(Errno::INVAL)
            } else {
                let r = ops.write(ino, a.u64(8), &input[..size], kill);
                encode(payload, r, |o, n| o.u32(n) && o.u32(0))
            }
        }
        op::STATFS => encode(payload, ops.statfs(), |o, s| o.put(&reply::statfs(&s))),
        op::RELEASE => {
            ops.count(Op::Release);
            Ok(0)
        }
        op::RELEASEDIR => {
            ops.count(Op::Releasedir);
            Ok(0)
        }
        op::FSYNC | op::FSYNCDIR => {
            let which = if h.opcode == op::FSYNC {
                Op::Fsync
            } else {
                Op::Fsyncdir
            };
            let datasync = a.u32(8) & FSYNC_FDATASYNC != 0;
            // Served in place it would hold this queue, and every fsync
            // that comes meanwhile waits for it instead of sharing its
            // flush; one caller alone is served in place, a hand-over
            // costing more than it saves.
            if ops.fsyncs().pooled(h.pid) {
                let (o, done) = (Arc::clone(ops), later());
                ops.fsyncs()
                    .run(move || done(Late::Empty(o.fsync(which, ino, datasync))));
                return Answer::Later;
            }
            ops.fsync(which, ino, datasync).map(|()| 0)
        }
        op::SETXATTR => {
            // Without FUSE_SETXATTR_EXT (fuser does not ask for it) the
            // struct is the 8-byte compat one: size, flags.
            let (size, flags) = (a.u32(0) as usize, a.u32(4) as i32);
            name(input).and_then(|(n, value)| {
                let value = value.get(..size).ok_or(Errno::INVAL)?;
                ops.setxattr(ino, n, value, flags).map(|()| 0)
            })
        }
        op::GETXATTR => name(input).map(|(n, _)| n.to_vec()).and_then(|n| {
            let r = ops.getxattr(ino, &n, a.u32(0));
            encode(payload, r, xattr)
        }),
        op::LISTXATTR => encode(payload, ops.listxattr(ino, a.u32(0)), xattr),
        op::REMOVEXATTR => name(input).and_then(|(n, _)| ops.removexattr(ino, n).map(|()| 0)),
        op::ACCESS => ops.access(ino).map(|()| 0),
        op::READDIR => {
            let (offset, limit) = (a.u64(8), a.u32(16) as usize);
            let mut out = Out::new(payload);
            let r = ops.readdir(ino, offset, |e| {
                !reply::dirent(&mut out, limit, e.ino, e.offset, e.kind, &e.name)
            });
            r.map(|()| out.len())
        }
        op::READDIRPLUS => {
            let (offset, limit) = (a.u64(8), a.u32(16) as usize);
            let mut out = Out::new(payload);
            let r = ops.readdirplus(ino, offset, |e, c| {
                !reply::direntplus(&mut out, limit, e.ino, e.offset, e.kind, &e.name, c)
            });
            r.map(|()| out.len())
        }
        op::FALLOCATE => {
            let r = ops.fallocate(ino, a.u64(8), a.u64(16), a.u32(24) as i32);
            r.map(|()| 0)
        }
        op::LSEEK => {
            let r = ops.lseek(ino, a.u64(8) as i64, a.u32(16) as i32);
            encode(payload, r, |o, off| o.u64(off as u64))
        }
        op::IOCTL => {
            let (cmd, in_size) = (a.u32(12), a.u32(24) as usize);
            match input.get(..in_size) {
                Some(data) => {
                    let done = later();
                    let done = Box::new(move |r| done(Late::Ioctl(r)));
                    ops.ioctl(h.uid, h.pid, ino, cmd, data, done);
                    return Answer::Later;
                }
                None => Err(Errno::INVAL),
            }
        }
        op::OPEN => Err(ops.refuse(Op::Open)),
        op::OPENDIR => Err(ops.refuse(Op::Opendir)),
        op::FLUSH => Err(ops.refuse(Op::Flush)),
        op::CREATE => Err(ops.refuse(Op::Create)),
        op::GETLK => Err(ops.refuse(Op::Getlk)),
        op::SETLK | op::SETLKW => Err(ops.refuse(Op::Setlk)),
        op::BMAP => Err(ops.refuse(Op::Bmap)),
        op::POLL => Err(ops.refuse(Op::Poll)),
        op::COPY_FILE_RANGE => {
            // fuse_copy_file_range_in: fh_in, off_in, nodeid_out, fh_out,
            // off_out, len, flags; the answer is a write's.
            let r = ops.copy_file_range(ino, a.u64(8), a.u64(16), a.u64(32), a.u64(40));
            encode(payload, r, |o, n| o.u32(n) && o.u32(0))
        }
        // STATX, SYNCFS, TMPFILE, …: fuser answers them ENOSYS uncounted,
        // and so does this.
        other => {
            tracing::debug!("FUSE opcode {other} through the ring: ENOSYS");
            return Answer::Unknown;
        }
    };
    Answer::Now(r)
}

fn xattr(o: &mut Out<'_>, x: Xattr) -> bool {
    match x {
        Xattr::Size(n) => o.u32(n) && o.u32(0),
        Xattr::Data(d) => o.put(&d),
    }
}

/// An ioctl's answer (`fuse_ioctl_out`, then the bytes for the caller).
pub fn ioctl_reply(payload: &mut [u8], r: OpResult<Vec<u8>>) -> Result<usize, Errno> {
    encode(payload, r, |o, data| {
        o.put(&[0u8; IOCTL_OUT_SZ]) && o.put(&data)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_end_at_their_nul() {
        assert_eq!(name(b"a\0bc\0"), Ok((&b"a"[..], &b"bc\0"[..])));
        assert_eq!(name(b"abc"), Err(Errno::INVAL));
    }

    /// setattr_in's fields are read where the kernel puts them.
    #[test]
    fn setattr_reads_the_kernel_layout() {
        let mut b = [0u8; 88];
        let valid = fattr::MODE | fattr::SIZE | fattr::MTIME | fattr::ATIME | fattr::ATIME_NOW;
        b[0..4].copy_from_slice(&valid.to_le_bytes());
        b[16..24].copy_from_slice(&4096u64.to_le_bytes());
        b[40..48].copy_from_slice(&77u64.to_le_bytes());
        b[60..64].copy_from_slice(&5u32.to_le_bytes());
        b[68..72].copy_from_slice(&0o100644u32.to_le_bytes());
        let s = set_attr(Reader(&b));
        assert_eq!(s.mode, Some(0o100644));
        assert_eq!(s.size, Some(4096));
        assert_eq!(s.uid, None);
        assert!(matches!(s.atime, Some(TimeSet::Now)));
        assert!(matches!(s.mtime, Some(TimeSet::At(t)) if t.sec == 77 && t.nsec == 5));
        assert!(s.ctime.is_none());
    }
}
