//! Dropping what the kernel cached, for changes it did not see: lsfs
//! itself changed something (the control socket took a snapshot), not a
//! request through the mount.
//!
//! The kernel handles a notification in the notifying thread and may wait
//! there for locks held by callers whose requests wait on the server; so a
//! caller must not hold the `Vfs` lock (or anything else a request needs)
//! while it invalidates.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::sync::Mutex;

use fuser::{INodeNo, Notifier};

/// The mount's line to the kernel's caches; shared with other threads
/// through `MountOptions::kernel_cache`. Until the mount is up (and after
/// it ends) there is nothing cached, and invalidations do nothing.
#[derive(Default)]
pub struct KernelCache {
    notifier: Mutex<Option<Notifier>>,
}

impl std::fmt::Debug for KernelCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelCache")
            .field("attached", &self.notifier().is_some())
            .finish()
    }
}

impl KernelCache {
    pub(crate) fn attach(&self, n: Option<Notifier>) {
        *self.notifier.lock().unwrap_or_else(|p| p.into_inner()) = n;
    }

    fn notifier(&self) -> Option<Notifier> {
        self.notifier
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether a mount is attached (invalidations reach a kernel).
    pub fn attached(&self) -> bool {
        self.notifier().is_some()
    }

    /// The kernel forgets the name `name` in directory `parent`, whether it
    /// knew it as present or as missing.
    pub fn invalidate_entry(&self, parent: u64, name: &[u8]) -> io::Result<()> {
        match self.notifier() {
            Some(n) => n.inval_entry(INodeNo(parent), OsStr::from_bytes(name)),
            None => Ok(()),
        }
    }

    /// The kernel forgets the attributes and cached contents of `ino` (for a
    /// directory: its cached listing).
    pub fn invalidate_inode(&self, ino: u64) -> io::Result<()> {
        match self.notifier() {
            // Offset 0, length 0: every page, to the end.
            Some(n) => n.inval_inode(INodeNo(ino), 0, 0),
            None => Ok(()),
        }
    }
}
