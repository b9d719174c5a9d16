//! lsfs-fuse: serves any [`lsfs_vfs::Vfs`] through the kernel's FUSE interface.
//!
//! The `Vfs` is shared as `Arc<Mutex<V>>`, so other threads of the process
//! (a checkpoint timer, a control socket) can use it while it is mounted.
//!
//! ```no_run
//! use std::sync::{Arc, Mutex};
//! use lsfs_vfs::model::MemFs;
//! let fs = Arc::new(Mutex::new(MemFs::new()));
//! let mount = lsfs_fuse::spawn_mount(fs, "/mnt/x".as_ref(), &Default::default())?;
//! // ... use /mnt/x ...
//! mount.unmount()?;
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! Root mounts call mount(2) directly (type `fuse.lsfs`, `default_permissions`,
//! `allow_other` by default); other users go through fusermount3.
//!
//! The kernel is asked to cache what cannot change behind its back and to
//! send as few requests as it can (see `adapter`); [`RequestCounters`]
//! counts those it still sends, by opcode, and [`KernelCache`] lets other
//! threads drop what it cached of a change made outside FUSE. Both are
//! shared through [`MountOptions`].
//!
//! Tests: `tests/common/cases.rs` holds POSIX cases that run through a real
//! mount; `posix_suite!(constructor)` (in `tests/common/mod.rs`) makes one
//! `#[test]` per case for any `Vfs`, as `tests/memfs_mount.rs` and
//! `tests/engine_mount.rs` do.

mod adapter;
mod atomic_ioctl;
mod background_writes;
mod cache_policy;
mod contention;
mod convert;
mod counters;
mod fsync_workers;
mod ioctl;
mod kernel_cache;
mod kernel_mount;
mod mount;
mod mountpoint;
mod ops;
mod privs;
mod spin;
mod uring;

pub use counters::{Op, RequestCounters};
pub use kernel_cache::KernelCache;
pub use mount::{mount_foreground, spawn_mount, MountHandle, MountOptions, DEFAULT_READ_AHEAD_KB};
pub use uring::UringMode;
