//! lsfs-sim
