//! Layer 2: the log. Record and superblock formats, the inline items of
//! fsync records, the super root, and reading records back (segment walks
//! and the recovery chain).

pub mod chain;
pub mod frame;
pub mod items;
pub mod record;
pub mod super_root;
pub mod superblock;
