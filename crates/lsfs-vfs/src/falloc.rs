//! fallocate(2) modes: which the engines serve, and how a mode word is read.
//! One parser for the engine and the model, so that they refuse the same
//! words with the same errno, in Linux's order (`vfs_fallocate`).

use crate::{Errno, VfsResult};

/// Do not change the file size (with mode 0: reserve only).
pub const FALLOC_FL_KEEP_SIZE: i32 = libc::FALLOC_FL_KEEP_SIZE;
/// Deallocate the range: it reads as zeros and holds no blocks. Linux
/// requires `FALLOC_FL_KEEP_SIZE` with it.
pub const FALLOC_FL_PUNCH_HOLE: i32 = libc::FALLOC_FL_PUNCH_HOLE;
/// Make the range read as zeros, growing the file unless
/// `FALLOC_FL_KEEP_SIZE`.
pub const FALLOC_FL_ZERO_RANGE: i32 = libc::FALLOC_FL_ZERO_RANGE;

/// The bits a mode word may carry. COLLAPSE_RANGE and INSERT_RANGE are not
/// among them: the FUSE kernel module refuses both before a file system sees
/// them, so no user of a mount could reach them.
const SERVED: i32 = FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE;

/// What a fallocate call asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FallocMode {
    /// Mode 0: make the range allocated (it keeps reading as it did) and,
    /// unless `keep_size`, grow the file to cover it.
    Allocate { keep_size: bool },
    /// Zero the range and free its whole blocks; the size stays.
    PunchHole,
    /// Zero the range (whole blocks are freed, as by a punch) and, unless
    /// `keep_size`, grow the file to cover it.
    ZeroRange { keep_size: bool },
}

impl FallocMode {
    /// Read `mode` for a call on `length` bytes: EINVAL for an empty
    /// range, EOPNOTSUPP for bits not served and for the combinations
    /// Linux refuses (punch without KEEP_SIZE, punch with zero).
    pub fn parse(mode: i32, length: u64) -> VfsResult<FallocMode> {
        if length == 0 {
            return Err(Errno::INVAL);
        }
        if mode & !SERVED != 0 {
            return Err(Errno::OPNOTSUPP);
        }
        let keep_size = mode & FALLOC_FL_KEEP_SIZE != 0;
        match (
            mode & FALLOC_FL_PUNCH_HOLE != 0,
            mode & FALLOC_FL_ZERO_RANGE != 0,
        ) {
            (false, false) => Ok(FallocMode::Allocate { keep_size }),
            (true, false) if keep_size => Ok(FallocMode::PunchHole),
            (false, true) => Ok(FallocMode::ZeroRange { keep_size }),
            _ => Err(Errno::OPNOTSUPP),
        }
    }

    /// Whether the call may grow the file.
    pub fn grows(self) -> bool {
        matches!(
            self,
            FallocMode::Allocate { keep_size: false } | FallocMode::ZeroRange { keep_size: false }
        )
    }

    /// Whether the call zeroes the range (and frees its whole blocks).
    pub fn zeroes(self) -> bool {
        matches!(self, FallocMode::PunchHole | FallocMode::ZeroRange { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_read_as_linux_does() {
        let p = |m| FallocMode::parse(m, 1);
        assert_eq!(p(0), Ok(FallocMode::Allocate { keep_size: false }));
        assert_eq!(
            p(FALLOC_FL_KEEP_SIZE),
            Ok(FallocMode::Allocate { keep_size: true })
        );
        assert_eq!(
            p(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE),
            Ok(FallocMode::PunchHole)
        );
        assert_eq!(p(FALLOC_FL_PUNCH_HOLE), Err(Errno::OPNOTSUPP));
        assert_eq!(
            p(FALLOC_FL_ZERO_RANGE),
            Ok(FallocMode::ZeroRange { keep_size: false })
        );
        assert_eq!(
            p(FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE),
            Ok(FallocMode::ZeroRange { keep_size: true })
        );
        let both = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE;
        assert_eq!(p(both), Err(Errno::OPNOTSUPP));
        for m in [
            libc::FALLOC_FL_COLLAPSE_RANGE,
            libc::FALLOC_FL_INSERT_RANGE,
            libc::FALLOC_FL_UNSHARE_RANGE,
            0x100,
            -1,
        ] {
            assert_eq!(p(m), Err(Errno::OPNOTSUPP), "mode {m:#x}");
        }
        // An empty range is EINVAL before the mode is looked at, as in Linux.
        assert_eq!(FallocMode::parse(-1, 0), Err(Errno::INVAL));
        assert!(!FallocMode::PunchHole.grows() && FallocMode::PunchHole.zeroes());
        assert!(FallocMode::ZeroRange { keep_size: false }.grows());
        assert!(!FallocMode::Allocate { keep_size: true }.grows());
    }
}
