//! lsfs-fuse
