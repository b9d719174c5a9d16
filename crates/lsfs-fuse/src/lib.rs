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

mod adapter;
mod convert;
mod kernel_mount;
mod mount;
mod mountpoint;

pub use mount::{mount_foreground, spawn_mount, MountHandle, MountOptions};
