//! A reader of an object store's newest checkpoint that moves on to newer
//! ones while it is mounted.
//!
//! A read-only mount of an object store without `--checkpoint`, while a
//! writer holds the store, shows the writer's newest checkpoint (main.rs,
//! `reader_checkpoint`). Every `reader_follow_secs` a thread reads the
//! store's superblocks; when they name a newer checkpoint, it:
//!
//! 1. moves the reader's hold to it (`ReaderHold::move_to`), so that the
//!    writer keeps it from its next look on, and lets the older one go;
//! 2. opens the store again, outside the engine's lock (`Reopened`: the
//!    reads this takes would otherwise stall every request);
//! 3. under the lock, swaps the view (`Lsfs::move_view`): each request sees
//!    one checkpoint whole, the older or the newer, never a mix;
//! 4. outside the lock, tells the kernel to drop what it cached of every
//!    inode it holds (attributes, pages, listings). Names are not dropped
//!    (the kernel does not say which it keeps), so the mount keeps them only
//!    briefly (`MountOptions::moves_on`): for about a second after a move a
//!    name may still lead to the inode it led to before.
//!
//! A failure at any step leaves the view where it was (the hold back on
//! it) and is tried again at the next look. A mount given `--checkpoint N`
//! shows N until unmounted: the user asked for that one.

use lsfs_core::fs::{Lsfs, Reopened};
use lsfs_fuse::KernelCache;
use lsfs_object::readers::{ReaderHold, Rounds};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Look for a newer checkpoint every `every`, and move the mount's view,
/// its hold (if it has one) and the kernel's caches on to it, until the
/// returned thread is dropped.
pub fn spawn(
    fs: Arc<Mutex<Lsfs>>,
    hold: Option<Arc<ReaderHold>>,
    cache: Arc<KernelCache>,
    every: Duration,
) -> Result<Rounds, String> {
    let (stop, stopped) = mpsc::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("lsfs-follow".into())
        .spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                match look(&fs, hold.as_deref(), &cache) {
                    Ok(Look::Stay) => {}
                    Ok(Look::Moved(cno)) => {
                        tracing::info!("now showing checkpoint {cno}");
                    }
                    Ok(Look::Nothing) => return,
                    Err(e) => tracing::warn!("looking for a newer checkpoint: {e}"),
                }
            }
        })
        .map_err(|e| format!("starting the reader's follow thread: {e}"))?;
    Ok(Rounds::new(stop, thread))
}

enum Look {
    /// The shown checkpoint is still the newest.
    Stay,
    Moved(u64),
    /// The mount is not a view a writer elsewhere may leave behind.
    Nothing,
}

fn look(fs: &Mutex<Lsfs>, hold: Option<&ReaderHold>, cache: &KernelCache) -> Result<Look, String> {
    let (dev, shown, config) = {
        let g = fs.lock().unwrap_or_else(|p| p.into_inner());
        (
            g.reopen_for_view(),
            g.shown_checkpoint(),
            g.config.store.clone(),
        )
    };
    let (Some(dev), Some(shown)) = (dev, shown) else {
        return Ok(Look::Nothing);
    };
    let mut dev = dev.map_err(|e| e.to_string())?;
    let newest = lsfs_core::inspect::newest_superblock(&mut *dev)
        .map_err(|e| e.to_string())?
        .cp_cno;
    if newest <= shown {
        return Ok(Look::Stay);
    }
    if let Some(h) = hold {
        h.move_to(newest)?;
    }
    let moved = Reopened::open(dev, config).and_then(|opened| {
        fs.lock()
            .unwrap_or_else(|p| p.into_inner())
            .move_view(opened, newest)
    });
    let stale = match moved {
        Ok(stale) => stale,
        Err(e) => {
            if let Some(h) = hold {
                if let Err(back) = h.move_to(shown) {
                    tracing::warn!("holding checkpoint {shown} again: {back}");
                }
            }
            return Err(format!("moving on to checkpoint {newest}: {e}"));
        }
    };
    for ino in stale {
        // An inode the kernel has let go of meanwhile answers ENOENT.
        if let Err(e) = cache.invalidate_inode(ino) {
            if e.raw_os_error() != Some(libc::ENOENT) {
                tracing::warn!("dropping the kernel's cache of inode {ino}: {e}");
            }
        }
    }
    Ok(Look::Moved(newest))
}
