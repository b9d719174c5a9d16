//! An lsfs device on an object store (S3 or anything that speaks its API,
//! a local directory, or memory for tests). The log maps onto objects as
//! it is: a segment is written in order and never changed until the
//! cleaner frees it, which is the life of an object. Each segment is one
//! object, each superblock copy another (`layout.rs`); the device keeps
//! the objects it touches in memory, uploads the changed ones whole at
//! every flush, and deletes a segment's object when the segment is
//! discarded (`device.rs`). A lease object lets one read-write mount in at
//! a time (`lease.rs`). A mount may instead keep what a flush covers in a
//! local write-ahead file (`wal.rs`), or as records in the store itself
//! (`store_log.rs`), and upload the objects later, and
//! keep segment objects in a bounded cache on local disk
//! (`disk_cache.rs`). Read-only mounts of a checkpoint hold it, and the
//! writer keeps what they hold (`readers.rs`). See
//! docs/OBJECT_STORE.md.

pub mod device;
pub mod disk_cache;
pub mod layout;
pub mod lease;
pub mod readers;
pub mod store_log;
pub mod target;
pub mod wal;

pub use device::{DiskCacheConfig, ObjectDevice, ObjectStats, WalConfig, WalPlace};
pub use target::{is_object_url, Target};
