//! lsfs-core
