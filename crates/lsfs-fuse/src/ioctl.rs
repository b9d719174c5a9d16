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
    /// Not ours (TCGETS and every other): ENOTTY, as on any file that does
    /// not implement it.
    Unknown,
}

/// What command `cmd` is.
pub(crate) fn decode(cmd: u32) -> Ioctl {
    let _ = cmd;
    Ioctl::Unknown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_terminal_probe_is_not_ours() {
        assert_eq!(decode(libc::TCGETS as u32), Ioctl::Unknown);
    }
}
