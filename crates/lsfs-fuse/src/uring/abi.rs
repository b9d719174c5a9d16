//! The kernel's FUSE-over-io_uring interface and the FUSE message layouts
//! the ring carries (include/uapi/linux/fuse.h, protocol 7.40 as fuser
//! negotiates it; fs/fuse/dev_uring.c for how they are filled).
//!
//! Each ring entry is two buffers the kernel copies to and from:
//! - a header ([`ReqHeader`]): the `fuse_in_header` (or, in a reply, the
//!   `fuse_out_header`), the operation's fixed-size argument struct (the
//!   kernel's first in-argument, empty for operations that have none), and
//!   [`EntInOut`] with the size of what is in the payload;
//! - a payload: the other in-arguments one after another (names with their
//!   NUL, write data), and in a reply every out-argument (the reply's
//!   fixed struct first, then its data).
//!
//! Layouts are written and read as little-endian bytes at fixed offsets
//! (asserted against the C sizes below), so no struct is ever transmuted.

/// `FUSE_IO_URING_CMD_REGISTER`: give the kernel an entry's buffers; the
/// command completes when the first request is in them.
pub const CMD_REGISTER: u32 = 1;
/// `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`: the reply is in the entry's
/// buffers; complete when the next request is.
pub const CMD_COMMIT_AND_FETCH: u32 = 2;

/// `FUSE_URING_IN_OUT_HEADER_SZ` and `FUSE_URING_OP_IN_OUT_SZ`.
pub const IN_OUT_HEADER_SZ: usize = 128;
pub const OP_IN_OUT_SZ: usize = 128;

/// `struct fuse_uring_ent_in_out`: flags, commit id, payload size.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct EntInOut {
    pub flags: u64,
    /// The id to commit the reply with (the request's `unique`).
    pub commit_id: u64,
    /// Bytes used in the payload buffer, by the request or the reply.
    pub payload_sz: u32,
    pub padding: u32,
    pub reserved: u64,
}

/// `struct fuse_uring_req_header`.
#[repr(C)]
pub struct ReqHeader {
    pub in_out: [u8; IN_OUT_HEADER_SZ],
    pub op_in: [u8; OP_IN_OUT_SZ],
    pub ent: EntInOut,
}

const _: () = assert!(std::mem::size_of::<EntInOut>() == 32);
const _: () = assert!(std::mem::size_of::<ReqHeader>() == 288);

impl ReqHeader {
    pub fn zeroed() -> Box<ReqHeader> {
        Box::new(ReqHeader {
            in_out: [0; IN_OUT_HEADER_SZ],
            op_in: [0; OP_IN_OUT_SZ],
            ent: EntInOut::default(),
        })
    }
}

/// `struct fuse_uring_cmd_req`, in the 80 command bytes of the SQE.
pub fn cmd_req(qid: u16, commit_id: u64) -> [u8; 80] {
    let mut b = [0u8; 80];
    // flags (u64) stays zero.
    b[8..16].copy_from_slice(&commit_id.to_le_bytes());
    b[16..18].copy_from_slice(&qid.to_le_bytes());
    b
}

/// `struct fuse_in_header`.
#[derive(Clone, Copy, Debug)]
pub struct InHeader {
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
}

pub const IN_HEADER_SZ: usize = 40;
pub const OUT_HEADER_SZ: usize = 16;

impl InHeader {
    pub fn parse(b: &[u8]) -> InHeader {
        let r = Reader(b);
        // The length at 0 is the request's, which the payload size says.
        InHeader {
            opcode: r.u32(4),
            unique: r.u64(8),
            nodeid: r.u64(16),
            uid: r.u32(24),
            gid: r.u32(28),
            pid: r.u32(32),
        }
    }
}

/// `struct fuse_out_header`: the reply's length (header included), the
/// negated errno or zero, and the request's `unique`.
pub fn out_header(len: u32, error: i32, unique: u64) -> [u8; OUT_HEADER_SZ] {
    let mut b = [0u8; OUT_HEADER_SZ];
    b[0..4].copy_from_slice(&len.to_le_bytes());
    b[4..8].copy_from_slice(&error.to_le_bytes());
    b[8..16].copy_from_slice(&unique.to_le_bytes());
    b
}

/// Little-endian fields at fixed offsets of an argument struct. Offsets
/// past the end read as zero: a shorter struct from an older protocol
/// has those fields unset.
#[derive(Clone, Copy)]
pub struct Reader<'a>(pub &'a [u8]);

impl Reader<'_> {
    pub fn u32(&self, at: usize) -> u32 {
        self.0
            .get(at..at + 4)
            .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap()))
    }

    pub fn u64(&self, at: usize) -> u64 {
        self.0
            .get(at..at + 8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()))
    }
}

/// Opcodes (`enum fuse_opcode`).
pub mod op {
    pub const LOOKUP: u32 = 1;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const SYMLINK: u32 = 6;
    pub const MKNOD: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const UNLINK: u32 = 10;
    pub const RMDIR: u32 = 11;
    pub const RENAME: u32 = 12;
    pub const LINK: u32 = 13;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const WRITE: u32 = 16;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const FSYNC: u32 = 20;
    pub const SETXATTR: u32 = 21;
    pub const GETXATTR: u32 = 22;
    pub const LISTXATTR: u32 = 23;
    pub const REMOVEXATTR: u32 = 24;
    pub const FLUSH: u32 = 25;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const FSYNCDIR: u32 = 30;
    pub const GETLK: u32 = 31;
    pub const SETLK: u32 = 32;
    pub const SETLKW: u32 = 33;
    pub const ACCESS: u32 = 34;
    pub const CREATE: u32 = 35;
    pub const BMAP: u32 = 37;
    pub const IOCTL: u32 = 39;
    pub const POLL: u32 = 40;
    pub const FALLOCATE: u32 = 43;
    pub const READDIRPLUS: u32 = 44;
    pub const RENAME2: u32 = 45;
    pub const LSEEK: u32 = 46;
    pub const COPY_FILE_RANGE: u32 = 47;
}

/// `fuse_setattr_in.valid` bits.
pub mod fattr {
    pub const MODE: u32 = 1 << 0;
    pub const UID: u32 = 1 << 1;
    pub const GID: u32 = 1 << 2;
    pub const SIZE: u32 = 1 << 3;
    pub const ATIME: u32 = 1 << 4;
    pub const MTIME: u32 = 1 << 5;
    pub const ATIME_NOW: u32 = 1 << 7;
    pub const MTIME_NOW: u32 = 1 << 8;
    pub const CTIME: u32 = 1 << 10;
}

/// `FUSE_WRITE_KILL_SUIDGID` in `fuse_write_in.write_flags`.
pub const WRITE_KILL_SUIDGID: u32 = 1 << 2;
/// `FUSE_FSYNC_FDATASYNC` in `fuse_fsync_in.fsync_flags`.
pub const FSYNC_FDATASYNC: u32 = 1 << 0;

/// Sizes of the reply structs.
pub const ATTR_SZ: usize = 88;
pub const ENTRY_OUT_SZ: usize = 40 + ATTR_SZ;
pub const ATTR_OUT_SZ: usize = 16 + ATTR_SZ;
pub const DIRENT_SZ: usize = 24;
pub const KSTATFS_SZ: usize = 80;
pub const IOCTL_OUT_SZ: usize = 16;
