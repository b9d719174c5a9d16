//! The engine's error type: every failure names what went wrong and where.

use lsfs_vfs::Errno;
use std::fmt;

#[derive(Debug)]
pub enum Error {
    /// The device failed; the mount turns read-only.
    Io {
        what: String,
        source: std::io::Error,
    },
    /// On-disk bytes that do not decode: names the structure and the address.
    Corrupt { what: String },
    /// The image is not lsfs, or is from a format this build does not read.
    Unsupported { what: String },
    /// A POSIX error for a file operation.
    Errno(Errno),
    /// An argument outside its valid range: names the argument and the range.
    InvalidArgument { what: String },
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn corrupt(what: impl Into<String>) -> Error {
        Error::Corrupt { what: what.into() }
    }
    pub fn unsupported(what: impl Into<String>) -> Error {
        Error::Unsupported { what: what.into() }
    }
    pub fn invalid(what: impl Into<String>) -> Error {
        Error::InvalidArgument { what: what.into() }
    }
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source,
        }
    }
    /// The errno a file-system caller sees for this error.
    pub fn errno(&self) -> Errno {
        match self {
            Error::Errno(e) => *e,
            Error::Io { .. } | Error::Corrupt { .. } => Errno::IO,
            Error::Unsupported { .. } => Errno::OPNOTSUPP,
            Error::InvalidArgument { .. } => Errno::INVAL,
        }
    }
}

impl From<Errno> for Error {
    fn from(e: Errno) -> Error {
        Error::Errno(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { what, source } => write!(f, "I/O error: {what}: {source}"),
            Error::Corrupt { what } => write!(f, "corrupt image: {what}"),
            Error::Unsupported { what } => write!(f, "unsupported image: {what}"),
            Error::Errno(e) => write!(f, "{e}"),
            Error::InvalidArgument { what } => write!(f, "invalid argument: {what}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// `?` in the file layer's `Vfs` methods turns an engine error into the
/// errno the caller sees ([`Error::errno`]).
impl From<Error> for Errno {
    fn from(err: Error) -> Errno {
        err.errno()
    }
}
