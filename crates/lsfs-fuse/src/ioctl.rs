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
    /// FITRIM (`fstrim`), on the mount's root directory: discard the free
    /// space in a range of the device.
    Fitrim,
    /// Not ours (TCGETS and every other): ENOTTY, as on any file that does
    /// not implement it.
    Unknown,
    /// One of F2FS's atomic-write ioctls (docs/ATOMIC.md).
    F2fs(F2fsIoctl),
    /// lsfs's own: several files' atomic writes at once (docs/ATOMIC.md).
    AtomicFiles(AtomicFilesIoctl),
}

/// FITRIM: `_IOWR('X', 121, struct fstrim_range)`, as in <linux/fs.h>.
pub(crate) const FITRIM: u32 = 0xC018_5879;

/// `struct fstrim_range` (in and out of FITRIM): on the way in the range
/// of the device to trim and the shortest free piece worth it; on the way
/// out `len` is the bytes trimmed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FstrimRange {
    pub start: u64,
    pub len: u64,
    pub minlen: u64,
}

pub(crate) const FSTRIM_RANGE_BYTES: usize = 24;

impl FstrimRange {
    /// The range FITRIM's caller passed; `None` if it is not one.
    pub fn decode(b: &[u8]) -> Option<FstrimRange> {
        let b: &[u8; FSTRIM_RANGE_BYTES] = b.try_into().ok()?;
        let word = |i: usize| u64::from_ne_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        Some(FstrimRange {
            start: word(0),
            len: word(1),
            minlen: word(2),
        })
    }

    /// The reply: the range with `len` the bytes trimmed.
    pub fn reply(self, trimmed: u64) -> [u8; FSTRIM_RANGE_BYTES] {
        let mut out = [0; FSTRIM_RANGE_BYTES];
        for (i, w) in [self.start, trimmed, self.minlen].into_iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&w.to_ne_bytes());
        }
        out
    }
}

/// lsfs's ioctls on several files in atomic mode, named by inode number
/// in a [`AtomicFilesArg`]; sent on any file or directory of the mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AtomicFilesIoctl {
    /// `LSFS_IOC_ATOMIC_COMMIT_FILES`: commit them as one unit.
    Commit,
    /// `LSFS_IOC_ATOMIC_ABORT_FILES`: abort each.
    Abort,
}

/// Most files one [`AtomicFilesIoctl`] names (as `COMMIT_MAX_FILES` of
/// the engine).
pub(crate) const ATOMIC_FILES_MAX: usize = 64;
/// Bytes of the argument: `u32` count, `u32` zero, 64 `u64` inode
/// numbers, in the machine's byte order.
pub(crate) const ATOMIC_FILES_ARG_BYTES: usize = 8 + 8 * ATOMIC_FILES_MAX;
/// The magic of lsfs's ioctls: 'L', numbers from 0x80 (loop devices use
/// 0x00-0x1f of it, and only on block devices).
const LSFS_IOCTL_MAGIC: u32 = b'L' as u32;
pub(crate) const LSFS_IOC_ATOMIC_COMMIT_FILES: u32 =
    libc::_IOW::<[u8; ATOMIC_FILES_ARG_BYTES]>(LSFS_IOCTL_MAGIC, 0x80) as u32;
pub(crate) const LSFS_IOC_ATOMIC_ABORT_FILES: u32 =
    libc::_IOW::<[u8; ATOMIC_FILES_ARG_BYTES]>(LSFS_IOCTL_MAGIC, 0x81) as u32;

/// The inode numbers an [`AtomicFilesIoctl`]'s argument names: EINVAL if
/// it is short, its count is past [`ATOMIC_FILES_MAX`], or its reserved
/// word is not zero.
pub(crate) fn atomic_files_arg(data: &[u8]) -> Result<Vec<u64>, lsfs_vfs::Errno> {
    let word = |at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(data.get(at..at + 4)?.try_into().ok()?))
    };
    let (Some(count), Some(0)) = (word(0), word(4)) else {
        return Err(lsfs_vfs::Errno::INVAL);
    };
    let count = count as usize;
    if count > ATOMIC_FILES_MAX || data.len() < 8 + 8 * count {
        return Err(lsfs_vfs::Errno::INVAL);
    }
    Ok(data[8..8 + 8 * count]
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
        .collect())
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
        FITRIM => Ioctl::Fitrim,
        F2FS_IOC_GET_FEATURES => Ioctl::F2fs(F2fsIoctl::GetFeatures),
        F2FS_IOC_START_ATOMIC_WRITE => Ioctl::F2fs(F2fsIoctl::StartAtomicWrite),
        F2FS_IOC_COMMIT_ATOMIC_WRITE => Ioctl::F2fs(F2fsIoctl::CommitAtomicWrite),
        F2FS_IOC_ABORT_ATOMIC_WRITE => Ioctl::F2fs(F2fsIoctl::AbortAtomicWrite),
        LSFS_IOC_ATOMIC_COMMIT_FILES => Ioctl::AtomicFiles(AtomicFilesIoctl::Commit),
        LSFS_IOC_ATOMIC_ABORT_FILES => Ioctl::AtomicFiles(AtomicFilesIoctl::Abort),
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

    /// The number is the kernel's: direction read-write, size 24, type
    /// 'X', number 121.
    #[test]
    fn fitrim_is_the_kernels_number() {
        let iowr =
            (3u32 << 30) | ((FSTRIM_RANGE_BYTES as u32) << 16) | (u32::from(b'X') << 8) | 121;
        assert_eq!(FITRIM, iowr);
        assert_eq!(decode(FITRIM), Ioctl::Fitrim);
        let r = FstrimRange {
            start: 1,
            len: u64::MAX,
            minlen: 4096,
        };
        let b = r.reply(u64::MAX);
        assert_eq!(FstrimRange::decode(&b), Some(r));
        assert_eq!(FstrimRange::decode(&r.reply(7)).map(|x| x.len), Some(7));
        assert_eq!(FstrimRange::decode(&b[..23]), None);
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
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        {
            assert_eq!(LSFS_IOC_ATOMIC_COMMIT_FILES, 0x4208_4c80);
            assert_eq!(LSFS_IOC_ATOMIC_ABORT_FILES, 0x4208_4c81);
        }
        // START_VOLATILE_WRITE (3) and RELEASE_VOLATILE_WRITE (4) are not served.
        assert_eq!(decode(libc::_IO(0xf5, 3) as u32), Ioctl::Unknown);
        assert_eq!(decode(libc::_IO(0xf5, 4) as u32), Ioctl::Unknown);
    }
}

#[cfg(test)]
mod arg_tests {
    use super::*;

    #[test]
    fn the_files_argument_is_checked() {
        let mut a = vec![0u8; ATOMIC_FILES_ARG_BYTES];
        a[0..4].copy_from_slice(&2u32.to_ne_bytes());
        a[8..16].copy_from_slice(&20u64.to_ne_bytes());
        a[16..24].copy_from_slice(&21u64.to_ne_bytes());
        assert_eq!(atomic_files_arg(&a), Ok(vec![20, 21]));
        a[4] = 1;
        assert_eq!(
            atomic_files_arg(&a),
            Err(lsfs_vfs::Errno::INVAL),
            "reserved word"
        );
        a[4] = 0;
        a[0..4].copy_from_slice(&65u32.to_ne_bytes());
        assert_eq!(
            atomic_files_arg(&a),
            Err(lsfs_vfs::Errno::INVAL),
            "too many"
        );
        assert_eq!(
            atomic_files_arg(&a[..6]),
            Err(lsfs_vfs::Errno::INVAL),
            "short"
        );
    }
}
