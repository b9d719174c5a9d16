//! Mounting and unmounting: a background session with a handle, and a
//! foreground mount that ends on SIGINT, SIGTERM or an external unmount.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use fuser::{Config, MountOption, SessionACL, SessionUnmounter};
use lsfs_vfs::Vfs;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::adapter::FuseAdapter;
use crate::mountpoint;

/// How a file system is mounted.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// The source shown by `mount` and `df` (`fsname=`).
    pub fsname: String,
    /// Mount read-only (`ro`); also chosen when the `Vfs` says it is read-only.
    pub read_only: bool,
    /// Let users other than the mounting one in (`allow_other`; root only,
    /// unless `/etc/fuse.conf` has `user_allow_other`).
    pub allow_other: bool,
    /// Worker threads serving requests. They take turns on the `Vfs` mutex,
    /// so more than one helps only while one waits on the kernel.
    pub threads: usize,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            fsname: "lsfs".to_string(),
            read_only: false,
            allow_other: true,
            threads: 1,
        }
    }
}

/// How long an unmount waits for busy files to close before detaching.
const UNMOUNT_PATIENCE: Duration = Duration::from_secs(2);
/// How long to wait for the session to end after the unmount.
const JOIN_PATIENCE: Duration = Duration::from_secs(10);

enum Event {
    /// The session loop ended: the file system was unmounted.
    Ended(io::Result<()>),
    Signal(i32),
}

/// A mounted file system served by a background thread. Unmounts on
/// [`MountHandle::unmount`] or when dropped (also while a panic unwinds).
pub struct MountHandle {
    mountpoint: PathBuf,
    unmounter: Option<SessionUnmounter>,
    thread: Option<JoinHandle<()>>,
    events: Receiver<Event>,
    /// The session's result, once it has ended.
    ended: Option<io::Result<()>>,
}

impl std::fmt::Debug for MountHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MountHandle")
            .field("mountpoint", &self.mountpoint)
            .finish()
    }
}

fn config(opts: &MountOptions, read_only: bool) -> Config {
    let mut mount_options = vec![
        MountOption::FSName(opts.fsname.clone()),
        MountOption::Subtype("lsfs".to_string()),
        // The kernel checks permissions against the attributes we report.
        MountOption::DefaultPermissions,
        MountOption::NoDev,
        MountOption::NoSuid,
    ];
    // Device nodes and setuid bits are honoured only for root's mounts, like
    // any other file system that root mounts.
    if nix_is_root() {
        mount_options.retain(|o| !matches!(o, MountOption::NoDev | MountOption::NoSuid));
        mount_options.push(MountOption::Dev);
        mount_options.push(MountOption::Suid);
    }
    mount_options.push(if read_only {
        MountOption::RO
    } else {
        MountOption::RW
    });
    let mut config = Config::default();
    config.mount_options = mount_options;
    config.acl = if opts.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(opts.threads.max(1));
    config
}

fn nix_is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Mount `vfs` at `mountpoint` and serve it from a background thread.
pub fn spawn_mount<V: Vfs + 'static>(
    vfs: Arc<Mutex<V>>,
    mountpoint: &Path,
    opts: &MountOptions,
) -> io::Result<MountHandle> {
    start(vfs, mountpoint, opts).map(|(handle, _)| handle)
}

/// Mount `vfs` at `mountpoint` and serve it until SIGINT or SIGTERM (then
/// unmount) or until someone unmounts it (`fusermount3 -u`).
pub fn mount_foreground<V: Vfs + 'static>(
    vfs: Arc<Mutex<V>>,
    mountpoint: &Path,
    opts: &MountOptions,
) -> io::Result<()> {
    // Catch the signals before mounting, so none can kill us mid-mount and
    // leave the mount behind.
    let mut signals = Signals::new([SIGINT, SIGTERM])?;
    let signal_handle = signals.handle();
    let (mut handle, events) = match start(vfs, mountpoint, opts) {
        Ok(r) => r,
        Err(e) => {
            signal_handle.close();
            return Err(e);
        }
    };
    let forwarder = thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            let _ = events.send(Event::Signal(sig));
        }
    });
    let result = match handle.events.recv() {
        Ok(Event::Signal(sig)) => {
            tracing::info!("signal {sig}: unmounting {}", handle.mountpoint.display());
            handle.unmount_inner()
        }
        Ok(Event::Ended(r)) => {
            tracing::info!("{} was unmounted", handle.mountpoint.display());
            handle.ended = Some(Ok(()));
            handle.thread.take().map(|t| t.join());
            r
        }
        Err(_) => Err(io::Error::other("session thread vanished")),
    };
    signal_handle.close();
    let _ = forwarder.join();
    result
}

fn start<V: Vfs + 'static>(
    vfs: Arc<Mutex<V>>,
    mountpoint: &Path,
    opts: &MountOptions,
) -> io::Result<(MountHandle, Sender<Event>)> {
    mountpoint::check(mountpoint)?;
    let read_only = opts.read_only || vfs.lock().map(|v| v.read_only()).unwrap_or(true);
    let config = config(opts, read_only);
    let mut session =
        fuser::Session::new(FuseAdapter::new(vfs), mountpoint, &config).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot mount on {}: {e}", mountpoint.display()),
            )
        })?;
    let unmounter = session.unmount_callable();
    let (tx, rx) = mpsc::channel();
    let ended = tx.clone();
    let thread = thread::Builder::new()
        .name("lsfs-fuse".to_string())
        .spawn(move || {
            let r = session.run();
            if let Err(e) = &r {
                tracing::error!("FUSE session ended with an error: {e}");
            }
            let _ = ended.send(Event::Ended(r));
        })?;
    let handle = MountHandle {
        mountpoint: mountpoint.to_path_buf(),
        unmounter: Some(unmounter),
        thread: Some(thread),
        events: rx,
        ended: None,
    };
    Ok((handle, tx))
}

impl MountHandle {
    /// Where the file system is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Unmount and wait for the session to end. Files still open after a
    /// short wait are cut off with a lazy unmount.
    pub fn unmount(mut self) -> io::Result<()> {
        self.unmount_inner()
    }

    fn unmount_inner(&mut self) -> io::Result<()> {
        if self.ended.is_some() {
            return Ok(());
        }
        let unmounted = match self.unmounter.take() {
            Some(mut u) => u.unmount().or_else(|_| unmount_path(&self.mountpoint)),
            None => Ok(()),
        };
        // Wait for the session loop to see the unmount.
        let deadline = Instant::now() + JOIN_PATIENCE;
        let ended = loop {
            match self
                .events
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(Event::Ended(r)) => break r,
                Ok(Event::Signal(_)) => continue,
                Err(RecvTimeoutError::Timeout) => {
                    return Err(io::Error::other(format!(
                        "{}: unmounted, but the FUSE session did not end within {JOIN_PATIENCE:?}",
                        self.mountpoint.display()
                    )))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    break Err(io::Error::other("FUSE session thread panicked"))
                }
            }
        };
        self.ended = Some(Ok(()));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        unmounted.and(ended)
    }
}

impl Drop for MountHandle {
    fn drop(&mut self) {
        if let Err(e) = self.unmount_inner() {
            tracing::error!("unmount of {} failed: {e}", self.mountpoint.display());
        }
    }
}

/// Unmount, retrying while files are busy, then detach lazily. Used when
/// fuser's own unmount failed (typically EBUSY).
fn unmount_path(path: &Path) -> io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)?;
    let deadline = Instant::now() + UNMOUNT_PATIENCE;
    loop {
        // SAFETY: `c` is a valid NUL-terminated path.
        if unsafe { libc::umount2(c.as_ptr(), 0) } == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            // Not mounted (any more): someone else unmounted it.
            Some(libc::EINVAL) => return Ok(()),
            Some(libc::EBUSY) if Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(20))
            }
            Some(libc::EBUSY) => {
                tracing::warn!("{} is busy; detaching it lazily", path.display());
                // SAFETY: as above.
                if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
                    return Ok(());
                }
                return Err(io::Error::last_os_error());
            }
            // Not root: let the setuid helper do it.
            Some(libc::EPERM) => {
                let status = std::process::Command::new("fusermount3")
                    .arg("-u")
                    .arg("-z")
                    .arg(path)
                    .status()?;
                return if status.success() {
                    Ok(())
                } else {
                    Err(io::Error::other(format!(
                        "fusermount3 -u {} failed",
                        path.display()
                    )))
                };
            }
            _ => return Err(err),
        }
    }
}
