//! The ioctls a file on the mount answers. None yet: every command is
//! refused with ENOTTY, at once and without a log line, because the kernel
//! forwards every ioctl on a FUSE file, and the most common by far is the
//! terminal probe (TCGETS) of `isatty()`, which Python's `open()` makes on
//! every file it opens.
//!
//! A command lsfs learns (F2FS-style atomic writes, for example) gets a
//! variant of [`Ioctl`], a case in [`decode`], and its handling in the
//! adapter's `ioctl`.

/// An ioctl command, as far as lsfs understands it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ioctl {
    /// FITRIM (`fstrim`), on the mount's root directory: discard the free
    /// space in a range of the device.
    Fitrim,
    /// Not ours (TCGETS and every other): ENOTTY, as on any file that does
    /// not implement it.
    Unknown,
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

/// What command `cmd` is.
pub(crate) fn decode(cmd: u32) -> Ioctl {
    match cmd {
        FITRIM => Ioctl::Fitrim,
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
}
