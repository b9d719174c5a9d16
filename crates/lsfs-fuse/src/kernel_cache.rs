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
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use fuser::{INodeNo, Notifier};

/// The mount's line to the kernel's caches; shared with other threads
/// through `MountOptions::kernel_cache`. Until the mount is up (and after
/// it ends) there is nothing cached, and invalidations do nothing.
#[derive(Default)]
pub struct KernelCache {
    notifier: Mutex<Option<Notifier>>,
    /// Where the mount is, for [`KernelCache::write_back`].
    mountpoint: Mutex<Option<PathBuf>>,
}

impl std::fmt::Debug for KernelCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelCache")
            .field("attached", &self.notifier().is_some())
            .finish()
    }
}

impl KernelCache {
    pub(crate) fn attach(&self, n: Option<Notifier>, mountpoint: Option<&Path>) {
        *self.notifier.lock().unwrap_or_else(|p| p.into_inner()) = n;
        *self.mountpoint.lock().unwrap_or_else(|p| p.into_inner()) =
            mountpoint.map(Path::to_path_buf);
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

    /// The kernel writes every dirty page of the mount back (as WRITE
    /// requests, which other threads serve) and waits for them, keeping
    /// the pages and attributes it caches: a `syncfs` of the mount, which
    /// FUSE does not forward as a request of its own. The root is opened
    /// for the call only: a descriptor kept open would make the mount busy
    /// at unmount. Opening it costs no request (no OPENDIR is sent).
    /// `Ok(false)`: no mount is attached.
    pub fn write_back(&self) -> io::Result<bool> {
        let Some(mnt) = self
            .mountpoint
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        else {
            return Ok(false);
        };
        let root = std::fs::File::open(&mnt)?;
        // SAFETY: syncfs on a descriptor we own for the call.
        if unsafe { libc::syncfs(root.as_raw_fd()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(true)
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
