//! lsfs-policy
