//! Workload generators. [`kang`] synthesises before-cache page traces shaped like the four
//! traces of Kang's Table 2-2 (the originals are not public); [`hot_cold_files`] and
//! [`aging`] drive any directory (a mounted lsfs, or ext4/btrfs on a loop device).

pub mod aging;
pub mod hot_cold_files;
pub mod kang;
