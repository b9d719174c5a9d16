//! Requests the kernel sent, counted by opcode.
//!
//! Every FUSE request is a round trip the caller waits on (or, for
//! background requests, work the server does in its place), so the count per
//! operation is what the kernel-side caching is judged by. One relaxed
//! atomic add per request: the counts are for people, not for ordering.

use std::sync::atomic::{AtomicU64, Ordering};

/// The FUSE operations the adapter serves, named as in the protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Lookup,
    /// One per inode forgotten (a BATCH_FORGET counts each of its inodes).
    Forget,
    Getattr,
    Setattr,
    Readlink,
    Symlink,
    Mknod,
    Mkdir,
    Unlink,
    Rmdir,
    Rename,
    Link,
    Open,
    Read,
    Write,
    Statfs,
    Release,
    Fsync,
    Setxattr,
    Getxattr,
    Listxattr,
    Removexattr,
    Flush,
    Opendir,
    Readdir,
    Releasedir,
    Fsyncdir,
    Getlk,
    Setlk,
    Access,
    Create,
    Bmap,
    Ioctl,
    Poll,
    Fallocate,
    Readdirplus,
    Lseek,
    CopyFileRange,
}

impl Op {
    /// Every operation, in protocol order.
    pub const ALL: [Op; 38] = [
        Op::Lookup,
        Op::Forget,
        Op::Getattr,
        Op::Setattr,
        Op::Readlink,
        Op::Symlink,
        Op::Mknod,
        Op::Mkdir,
        Op::Unlink,
        Op::Rmdir,
        Op::Rename,
        Op::Link,
        Op::Open,
        Op::Read,
        Op::Write,
        Op::Statfs,
        Op::Release,
        Op::Fsync,
        Op::Setxattr,
        Op::Getxattr,
        Op::Listxattr,
        Op::Removexattr,
        Op::Flush,
        Op::Opendir,
        Op::Readdir,
        Op::Releasedir,
        Op::Fsyncdir,
        Op::Getlk,
        Op::Setlk,
        Op::Access,
        Op::Create,
        Op::Bmap,
        Op::Ioctl,
        Op::Poll,
        Op::Fallocate,
        Op::Readdirplus,
        Op::Lseek,
        Op::CopyFileRange,
    ];

    /// The protocol's name (`FUSE_LOOKUP` without the prefix).
    pub fn name(self) -> &'static str {
        match self {
            Op::Lookup => "LOOKUP",
            Op::Forget => "FORGET",
            Op::Getattr => "GETATTR",
            Op::Setattr => "SETATTR",
            Op::Readlink => "READLINK",
            Op::Symlink => "SYMLINK",
            Op::Mknod => "MKNOD",
            Op::Mkdir => "MKDIR",
            Op::Unlink => "UNLINK",
            Op::Rmdir => "RMDIR",
            Op::Rename => "RENAME",
            Op::Link => "LINK",
            Op::Open => "OPEN",
            Op::Read => "READ",
            Op::Write => "WRITE",
            Op::Statfs => "STATFS",
            Op::Release => "RELEASE",
            Op::Fsync => "FSYNC",
            Op::Setxattr => "SETXATTR",
            Op::Getxattr => "GETXATTR",
            Op::Listxattr => "LISTXATTR",
            Op::Removexattr => "REMOVEXATTR",
            Op::Flush => "FLUSH",
            Op::Opendir => "OPENDIR",
            Op::Readdir => "READDIR",
            Op::Releasedir => "RELEASEDIR",
            Op::Fsyncdir => "FSYNCDIR",
            Op::Getlk => "GETLK",
            Op::Setlk => "SETLK",
            Op::Access => "ACCESS",
            Op::Create => "CREATE",
            Op::Bmap => "BMAP",
            Op::Ioctl => "IOCTL",
            Op::Poll => "POLL",
            Op::Fallocate => "FALLOCATE",
            Op::Readdirplus => "READDIRPLUS",
            Op::Lseek => "LSEEK",
            Op::CopyFileRange => "COPY_FILE_RANGE",
        }
    }
}

/// Request counts of one mount; shared with whoever reports them.
#[derive(Debug)]
pub struct RequestCounters {
    by_op: [AtomicU64; Op::ALL.len()],
    /// GETXATTRs of `security.capability`: the kernel's check before a
    /// write, which `FUSE_HANDLE_KILLPRIV_V2` is meant to make rare.
    getxattr_security_capability: AtomicU64,
    /// Requests that came through io_uring rather than `/dev/fuse`, of
    /// those counted by opcode.
    ring: AtomicU64,
    /// Spells of polling (`/dev/fuse`'s or the ring's), and holds of it
    /// because the CPUs were contended (contention.rs).
    polling_spells: AtomicU64,
    polling_holds: AtomicU64,
}

impl Default for RequestCounters {
    fn default() -> Self {
        RequestCounters {
            by_op: std::array::from_fn(|_| AtomicU64::new(0)),
            getxattr_security_capability: AtomicU64::new(0),
            ring: AtomicU64::new(0),
            polling_spells: AtomicU64::new(0),
            polling_holds: AtomicU64::new(0),
        }
    }
}

impl RequestCounters {
    pub(crate) fn count(&self, op: Op) {
        self.add(op, 1);
    }

    pub(crate) fn add(&self, op: Op, n: u64) {
        self.by_op[op as usize].fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn count_capability_probe(&self) {
        self.getxattr_security_capability
            .fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_ring(&self) {
        self.ring.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_polling_spell(&self) {
        self.polling_spells.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_polling_hold(&self) {
        self.polling_holds.fetch_add(1, Ordering::Relaxed);
    }

    /// Spells of polling `/dev/fuse` or the ring's queues
    /// (`MountOptions::spin`, `MountOptions::ring_spin`).
    pub fn polling_spells(&self) -> u64 {
        self.polling_spells.load(Ordering::Relaxed)
    }

    /// Times polling was held off because the CPUs were contended.
    pub fn polling_holds(&self) -> u64 {
        self.polling_holds.load(Ordering::Relaxed)
    }

    /// How many requests came through io_uring (`MountOptions::uring`).
    pub fn ring_requests(&self) -> u64 {
        self.ring.load(Ordering::Relaxed)
    }

    /// How many requests of `op` arrived so far.
    pub fn get(&self, op: Op) -> u64 {
        self.by_op[op as usize].load(Ordering::Relaxed)
    }

    /// Every operation with its count (zeros included, in protocol order).
    pub fn snapshot(&self) -> Vec<(Op, u64)> {
        Op::ALL.iter().map(|&op| (op, self.get(op))).collect()
    }

    /// All requests so far.
    pub fn total(&self) -> u64 {
        Op::ALL.iter().map(|&op| self.get(op)).sum()
    }

    /// How many of the GETXATTRs asked for `security.capability`.
    pub fn capability_probes(&self) -> u64 {
        self.getxattr_security_capability.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_has_its_own_slot_and_name() {
        let c = RequestCounters::default();
        for (i, &op) in Op::ALL.iter().enumerate() {
            assert_eq!(op as usize, i, "{op:?} is out of order");
            c.add(op, i as u64 + 1);
        }
        for (i, (op, n)) in c.snapshot().into_iter().enumerate() {
            assert_eq!(n, i as u64 + 1, "{op:?}");
        }
        let names: std::collections::HashSet<_> = Op::ALL.iter().map(|o| o.name()).collect();
        assert_eq!(names.len(), Op::ALL.len());
        assert_eq!(c.total(), (1..=Op::ALL.len() as u64).sum());
    }
}
