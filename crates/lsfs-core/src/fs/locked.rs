//! Calling a shared file system from several threads (the mount's ticker
//! and control socket; the FUSE adapter does the same for any `Vfs`): each
//! call runs under the lock, and the device work it queued is finished
//! after the lock is let go, so that other calls go on meanwhile
//! (device/io_queue.rs).

use super::Lsfs;
use crate::error::Result;
use std::sync::Mutex;

/// Run `f` on the file system under `fs`'s lock; then, without the lock,
/// finish the device work it queued, or everything queued so far if
/// `durable` (what `f` promises may rest on work another call queued).
/// The second result is the device's: `Err` if it failed before that work
/// was done (the file system is read-only from then on).
pub fn call<T>(fs: &Mutex<Lsfs>, durable: bool, f: impl FnOnce(&mut Lsfs) -> T) -> (T, Result<()>) {
    let (r, io, before, after) = {
        let mut g = fs.lock().unwrap_or_else(|p| p.into_inner());
        let io = g.store.io().clone();
        let before = io.last_ticket();
        let r = f(&mut g);
        let after = io.last_ticket();
        (r, io, before, after)
    };
    let done = if durable || after > before {
        io.complete(after)
    } else {
        Ok(())
    };
    (r, done)
}
