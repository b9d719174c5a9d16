//! Workload generators. [`kang`] synthesises before-cache page traces shaped like the four
//! traces of Kang's Table 2-2 (the originals are not public); [`small_files`] (hot/cold,
//! uniform, Zipf), [`aging`] and the NFS trace replayer [`nfs_replay`] drive any directory (a
//! mounted lsfs, or ext4/btrfs on a loop device); [`nfs_synth`] writes synthetic traces in
//! Ellard's text format ([`nfs_trace`]).

pub mod aging;
pub mod kang;
pub mod nfs_replay;
pub mod nfs_synth;
pub mod nfs_trace;
pub mod small_files;
