//! Layer 3: the metadata files and the store that ties them to the log.
//!
//! - [`dat_entry`]: the DAT, virtual → physical block numbers with the
//!   checkpoint range each block is visible in;
//! - [`dat_reuse`]: free DAT entries handed out again;
//! - [`dat_journal`]: DAT entries changed since their block was written,
//!   written by checkpoints instead of the whole block while few changed;
//! - [`sufile`]: per-segment usage counters, exact at every checkpoint;
//! - [`cpfile`]: the checkpoints and snapshots;
//! - [`ifile`]: inode slots;
//! - [`store`]: virtual blocks (allocate, read, copy-on-write, kill), the DAT's
//!   own physically addressed tree, and the metadata files as block-mapped files;
//! - [`store_interface`]: what the rest of the engine reads of the store, and
//!   the changes it asks of it by name (the store's fields are private to `meta`);
//! - [`compress`]: compressed records of user data, and reading through their frames;
//! - [`construct`]: the segment constructor, which writes checkpoints and fsync records;
//! - [`open`]: mkfs, and opening an image with recovery;
//! - [`durable_kills`]: blocks the latest checkpoint sees whose death is durable;
//! - [`move_record`]: a cleaning pass's victims free before the next checkpoint;
//! - [`reclaim`]: deleting expired checkpoints and freeing dead segments;
//! - [`discard`]: discarding freed segments on the device, and FITRIM;
//! - [`reconcile`]: O(1) snapshot changes, applied to the counters in the background;
//! - [`snapshots`]: promoting and demoting checkpoints, and the reconcile step, on the store;
//! - [`stream`]: write streams (hot, cold, cleaner output, metadata) and the temperature signal;
//! - [`stream_use`]: the store's side of the streams (heads after a mount, whether they run);
//! - [`ssa`]: out-of-band summaries of plugged segments;
//! - [`plug`]: threaded logging, user data written into the holes of plugged segments;
//! - [`plug_write`]: the segment constructor's side of it (assigning holes, writing them).

pub mod compress;
pub mod construct;
pub mod cpfile;
pub mod dat_entry;
pub mod dat_journal;
pub mod dat_reuse;
pub mod discard;
pub mod durable_kills;
pub mod ifile;
pub mod move_record;
pub mod open;
pub mod plug;
pub mod plug_write;
pub mod reclaim;
pub mod reconcile;
pub mod snapshots;
pub mod ssa;
pub mod store;
pub mod store_interface;
pub mod stream;
pub mod stream_use;
pub mod sufile;

pub use store::{Store, StoreConfig};
pub use store_interface::StoreRoots;
