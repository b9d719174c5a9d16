//! The ioctls a file on the mount answers. Every command lsfs does not know
//! is refused with ENOTTY, at once and without a log line, because the
//! kernel forwards every ioctl on a FUSE file, and the most common by far is
//! the terminal probe (TCGETS) of `isatty()`, which Python's `open()` makes
//! on every file it opens.
//!
//! A command lsfs learns gets a variant of [`Ioctl`], a case in [`decode`],
//! and its handling in the adapter's `ioctl`.

/// An ioctl command, as far as lsfs understands it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ioctl {
    /// Not ours (TCGETS and every other): ENOTTY, as on any file that does
    /// not implement it.
    Unknown,
    /// One of F2FS's atomic-write ioctls (docs/ATOMIC.md).
    F2fs(F2fsIoctl),
}

/// F2FS's atomic-write interface, as SQLite built with
/// `SQLITE_ENABLE_BATCH_ATOMIC_WRITE` uses it: the numbers of Linux's
/// `include/uapi/linux/f2fs.h`, magic 0xf5.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum F2fsIoctl {
    /// `F2FS_IOC_GET_FEATURES`, `_IOR(0xf5, 12, __u32)`: a `u32` of feature
    /// bits, [`F2FS_FEATURE_ATOMIC_WRITE`] among them.
    GetFeatures,
    /// `F2FS_IOC_START_ATOMIC_WRITE`, `_IO(0xf5, 1)`.
    StartAtomicWrite,
    /// `F2FS_IOC_COMMIT_ATOMIC_WRITE`, `_IO(0xf5, 2)`.
    CommitAtomicWrite,
    /// `F2FS_IOC_ABORT_ATOMIC_WRITE`, `_IO(0xf5, 5)`: the number of the
    /// older `F2FS_IOC_ABORT_VOLATILE_WRITE`, the name SQLite uses.
    AbortAtomicWrite,
}

const F2FS_IOCTL_MAGIC: u32 = 0xf5;
pub(crate) const F2FS_IOC_START_ATOMIC_WRITE: u32 = libc::_IO(F2FS_IOCTL_MAGIC, 1) as u32;
pub(crate) const F2FS_IOC_COMMIT_ATOMIC_WRITE: u32 = libc::_IO(F2FS_IOCTL_MAGIC, 2) as u32;
pub(crate) const F2FS_IOC_ABORT_ATOMIC_WRITE: u32 = libc::_IO(F2FS_IOCTL_MAGIC, 5) as u32;
pub(crate) const F2FS_IOC_GET_FEATURES: u32 = libc::_IOR::<u32>(F2FS_IOCTL_MAGIC, 12) as u32;
/// The feature bit of atomic writes in GET_FEATURES' answer.
pub(crate) const F2FS_FEATURE_ATOMIC_WRITE: u32 = 0x0004;

/// What command `cmd` is.
pub(crate) fn decode(cmd: u32) -> Ioctl {
    match cmd {
        F2FS_IOC_GET_FEATURES => Ioctl::F2fs(F2fsIoctl::GetFeatures),
        F2FS_IOC_START_ATOMIC_WRITE => Ioctl::F2fs(F2fsIoctl::StartAtomicWrite),
        F2FS_IOC_COMMIT_ATOMIC_WRITE => Ioctl::F2fs(F2fsIoctl::CommitAtomicWrite),
        F2FS_IOC_ABORT_ATOMIC_WRITE => Ioctl::F2fs(F2fsIoctl::AbortAtomicWrite),
        _ => Ioctl::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_terminal_probe_is_not_ours() {
        assert_eq!(decode(libc::TCGETS as u32), Ioctl::Unknown);
    }

    /// The numbers as Linux's header spells them out on x86 and arm
    /// (`_IOC(dir, 0xf5, nr, size)`: dir in bits 30-31, size in 16-29).
    #[test]
    fn the_f2fs_numbers_are_linuxs() {
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        {
            assert_eq!(F2FS_IOC_START_ATOMIC_WRITE, 0xf501);
            assert_eq!(F2FS_IOC_COMMIT_ATOMIC_WRITE, 0xf502);
            assert_eq!(F2FS_IOC_ABORT_ATOMIC_WRITE, 0xf505);
            assert_eq!(F2FS_IOC_GET_FEATURES, 0x8004_f50c);
        }
        assert_eq!(
            decode(F2FS_IOC_GET_FEATURES),
            Ioctl::F2fs(F2fsIoctl::GetFeatures)
        );
        // START_VOLATILE_WRITE (3) and RELEASE_VOLATILE_WRITE (4) are not served.
        assert_eq!(decode(libc::_IO(0xf5, 3) as u32), Ioctl::Unknown);
        assert_eq!(decode(libc::_IO(0xf5, 4) as u32), Ioctl::Unknown);
    }
}
