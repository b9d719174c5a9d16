//! lsfs-core: the engine of lsfs, a log-structured file system.
//!
//! Layers, top to bottom, each using only the ones before it:
//! 1. [`device`]: block devices (image files, block devices, test devices);
//! 2. [`log`]: on-disk records, superblocks, super roots, reading the log back;
//! 3. [`cache`] and [`meta`]: the block cache and the metadata files (DAT,
//!    SUFILE, CPFILE, IFILE), the segment constructor, recovery, reclaim;
//! 4. [`fs`]: inodes, files, directories, xattrs, and the [`lsfs_vfs::Vfs`]
//!    implementation that front ends use.

pub mod btree;
pub mod cache;
pub mod clock;
pub mod codec;
pub mod device;
pub mod error;
pub mod fs;
pub mod fsck;
#[doc(hidden)]
pub mod fuzzing;
pub mod gc;
pub mod inspect;
pub mod layout;
pub mod log;
pub mod meta;

pub use error::{Error, Result};
