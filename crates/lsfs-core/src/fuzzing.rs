//! Entry points for the fuzz targets in `fuzz/`: the decoders of on-disk
//! values that are otherwise private to their modules. Not a stable API.

use crate::error::Result;
use crate::fs::dir::Entry;
use crate::fs::file::Extent;

/// A directory entry's value (`fs::dir`).
pub fn dir_entry(key: u64, value: &[u8]) -> Result<Entry> {
    crate::fs::dir::decode(key, value)
}

/// An inode area in `INLINE_MAP` format (`fs::map`).
pub fn inline_map(area: &[u8]) -> Result<Vec<(u64, Vec<u8>)>> {
    crate::fs::map::decode_inline(area)
}

/// A file extent item (`fs::file`).
pub fn extent(key: u64, value: &[u8]) -> Result<Extent> {
    crate::fs::file::decode_ext(key, value)
}

/// The first chunk of an extended attribute (`fs::xattr`).
pub fn xattr_head(key: u64, value: &[u8]) -> Result<()> {
    crate::fs::xattr::decode_head(key, value).map(|_| ())
}
