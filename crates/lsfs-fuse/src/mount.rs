//! Mounting and unmounting: a background session with a handle, and a
//! foreground mount that ends on SIGINT, SIGTERM or an external unmount.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use fuser::{Config, MountOption, SessionACL, SessionUnmounter};
use lsfs_vfs::Vfs;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::adapter::FuseAdapter;
use crate::cache_policy::CachePolicy;
use crate::contention::Contention;
use crate::counters::RequestCounters;
use crate::kernel_cache::KernelCache;
use crate::kernel_mount;
use crate::mountpoint;
use crate::ops::Ops;
use crate::spin::Spinner;
use crate::uring::{self, UringMode, UringStart};

/// How a file system is mounted.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// The source shown by `mount` and `df` (`fsname=`).
    pub fsname: String,
    /// Mount read-only (`ro`); also chosen when the `Vfs` says it is read-only.
    pub read_only: bool,
    /// Let users other than the mounting one in (`allow_other`). The
    /// default is on for root and off for others.
    pub allow_other: bool,
    /// Worker threads serving requests. They take turns on the `Vfs` mutex
    /// for the CPU part of each request; the device work a `Vfs` defers
    /// (`Vfs::deferred_io`) and the kernel round trips overlap.
    pub threads: usize,
    /// The kernel's writeback cache: write() fills the page cache and
    /// returns; the kernel sends the pages later, in batches, and on
    /// fsync, close, syncfs and unmount, and reports their write errors
    /// there. On by default.
    pub writeback_cache: bool,
    /// Inodes that never change while mounted (snapshots): the kernel keeps
    /// their names and attributes without expiry. On a read-only mount
    /// that holds for every inode.
    pub cache_forever: Option<fn(u64) -> bool>,
    /// A read-only mount whose checkpoint is replaced by newer ones while
    /// it is mounted (a reader that follows a writer elsewhere): the kernel
    /// keeps names and attributes only briefly, and whoever moves the view
    /// invalidates the inodes it holds (`KernelCache`). Off by default.
    pub moves_on: bool,
    /// Where other threads drop what the kernel cached of a change it did
    /// not see (`KernelCache`); attached while mounted.
    pub kernel_cache: Arc<KernelCache>,
    /// Where the adapter counts the requests it serves, by opcode; share
    /// it (clone the `Arc`) to report them.
    pub counters: Arc<RequestCounters>,
    /// How long the server keeps polling the device file after a request
    /// (`spin.rs`); zero never polls. Only mounts made as root (which own
    /// their device file) poll.
    pub spin: Duration,
    /// The kernel's generic mount flags (`libc::MS_NOSUID`, `MS_NOEXEC`,
    /// `MS_NOATIME`, …) from `-o nosuid,noexec,…`; `MS_RDONLY` comes from
    /// `read_only`. Zero by default.
    pub kernel_flags: libc::c_ulong,
    /// Serve F2FS's atomic-write ioctls when the `Vfs` has atomic writes
    /// (docs/ATOMIC.md); off, they answer ENOTTY, and SQLite built for
    /// them keeps its rollback journal. On by default.
    pub atomic_writes: bool,
    /// Serve requests through FUSE over io_uring (`uring/`): one queue
    /// per CPU, each request served on its caller's CPU. Off by default.
    pub uring: UringMode,
    /// How long a ring queue thread keeps polling its completion queue
    /// after a request (`uring/poll.rs`), by the rules of `spin` (not
    /// while the CPUs are contended); zero never polls. The default is
    /// `DEFAULT_SPIN`'s, measured in docs/PERFORMANCE.md.
    pub ring_spin: Duration,
    /// The kernel's readahead for the mount, in KiB, set through
    /// `/sys/class/bdi` once FUSE_INIT is done (root mounts only; the
    /// kernel starts FUSE mounts at 128 KiB and lets the server only lower
    /// it). The default, 1 MiB, is the largest READ the kernel sends: a
    /// cold sequential read then costs an eighth of the requests. Zero
    /// leaves the kernel's value.
    pub read_ahead_kb: u32,
}

/// The default of [`MountOptions::read_ahead_kb`]: measured in
/// docs/PERFORMANCE.md.
pub const DEFAULT_READ_AHEAD_KB: u32 = 1024;

/// The default of [`MountOptions::spin`]: measured in docs/PERFORMANCE.md.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(1000);

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            fsname: "lsfs".to_string(),
            read_only: false,
            // fusermount3 refuses allow_other to ordinary users unless
            // /etc/fuse.conf says user_allow_other.
            allow_other: is_root(),
            threads: 1,
            writeback_cache: true,
            spin: DEFAULT_SPIN,
            kernel_flags: 0,
            atomic_writes: true,
            uring: UringMode::Off,
            ring_spin: DEFAULT_SPIN,
            read_ahead_kb: DEFAULT_READ_AHEAD_KB,
            cache_forever: None,
            moves_on: false,
            kernel_cache: Arc::default(),
            counters: Arc::default(),
        }
    }
}

/// The file system type is shown as `fuse.lsfs`.
const SUBTYPE: &str = "lsfs";
/// How long to wait for the session to end after the unmount.
const JOIN_PATIENCE: Duration = Duration::from_secs(10);

/// Who takes the mount down.
enum Unmount {
    /// fuser mounted through fusermount3; it knows how to undo that.
    Fuser(SessionUnmounter),
    /// We called mount(2) ourselves.
    Direct,
}

enum Event {
    /// The session loop ended: the file system was unmounted.
    Ended(io::Result<()>),
    Signal(i32),
}

/// A mounted file system served by a background thread. Unmounts on
/// [`MountHandle::unmount`] or when dropped (also while a panic unwinds).
pub struct MountHandle {
    mountpoint: PathBuf,
    unmount: Option<Unmount>,
    thread: Option<JoinHandle<()>>,
    events: Receiver<Event>,
    /// Whether the session has ended (unmounted).
    ended: bool,
    /// Our mount's device ("major:minor"), to recognise it later.
    device: Option<String>,
}

impl std::fmt::Debug for MountHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MountHandle")
            .field("mountpoint", &self.mountpoint)
            .finish()
    }
}

/// The fuser configuration. Its mount options matter only when fuser mounts
/// (through fusermount3, for ordinary users); root mounts go through
/// `kernel_mount`.
fn config(opts: &MountOptions, read_only: bool) -> Config {
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName(opts.fsname.clone()),
        MountOption::Subtype(SUBTYPE.to_string()),
        // The kernel checks permissions against the attributes we report.
        MountOption::DefaultPermissions,
        if read_only {
            MountOption::RO
        } else {
            MountOption::RW
        },
    ];
    let flags = opts.kernel_flags;
    for (flag, option) in [
        (libc::MS_NOSUID, MountOption::NoSuid),
        (libc::MS_NODEV, MountOption::NoDev),
        (libc::MS_NOEXEC, MountOption::NoExec),
        (libc::MS_NOATIME, MountOption::NoAtime),
        (libc::MS_SYNCHRONOUS, MountOption::Sync),
        (libc::MS_DIRSYNC, MountOption::DirSync),
    ] {
        if flags & flag != 0 {
            config.mount_options.push(option);
        }
    }
    // fuser also filters requests by uid itself; it must agree with the
    // kernel's allow_other, or other users' requests are refused.
    config.acl = if opts.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(opts.threads.max(1));
    config
}

fn is_root() -> bool {
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
            handle.session_ended();
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
    // The kernel records the resolved absolute path in mountinfo; keep the
    // same form, or a relative or symlinked mount point would never be found
    // there and a dead mount would be left behind after an aborted session.
    let resolved = std::fs::canonicalize(mountpoint)?;
    let mountpoint = resolved.as_path();
    let read_only = opts.read_only || vfs.lock().map(|v| v.read_only()).unwrap_or(true);
    let config = config(opts, read_only);
    let spinner: Arc<OnceLock<Arc<Spinner>>> = Arc::default();
    // Both pollers, `/dev/fuse`'s and the ring's, stop while the CPUs are
    // contended.
    let contention = Contention::new(opts.counters.clone());
    let ops = Arc::new(Ops::new(
        vfs,
        // Nothing is written on a read-only mount: no cache to write back,
        // and SEEK_DATA/SEEK_HOLE can then go to the Vfs.
        opts.writeback_cache && !read_only,
        opts.counters.clone(),
        CachePolicy::new(read_only, opts.moves_on, opts.cache_forever),
        spinner.clone(),
        opts.kernel_cache.clone(),
        opts.atomic_writes,
    ));
    // Checked before mounting, so that `uring=on` fails without a mount.
    let use_uring = uring::prepare(opts.uring, is_root())?;
    let rings: Arc<Mutex<Option<uring::Rings>>> = Arc::default();
    let mount_error = |e: io::Error| {
        io::Error::new(
            e.kind(),
            format!("cannot mount on {}: {e}", mountpoint.display()),
        )
    };
    let (session, unmount) = if is_root() {
        let dev = kernel_mount::mount(
            mountpoint,
            &opts.fsname,
            SUBTYPE,
            read_only,
            opts.allow_other,
            opts.kernel_flags,
        )
        .map_err(mount_error)?;
        let uring_start = match use_uring {
            true => match dev.try_clone() {
                Ok(d) => Some(UringStart::new(
                    opts.uring,
                    d,
                    ops.clone(),
                    rings.clone(),
                    opts.ring_spin,
                    contention.clone(),
                )),
                Err(e) => {
                    let _ = kernel_mount::unmount(mountpoint);
                    return Err(mount_error(e));
                }
            },
            false => None,
        };
        let adapter = FuseAdapter::new(ops.clone(), uring_start);
        if !opts.spin.is_zero() {
            // Without a spinner the mount works as before: log and go on.
            let c = contention.clone();
            match (dev.try_clone()).and_then(|d| Spinner::start(d, opts.spin, c)) {
                Ok(s) => {
                    let _ = spinner.set(s);
                }
                Err(e) => tracing::warn!("not polling /dev/fuse: {e}"),
            }
        }
        match fuser::Session::from_fd(adapter, dev, config.acl, config.clone()) {
            Ok(s) => (s, Unmount::Direct),
            Err(e) => {
                let _ = kernel_mount::unmount(mountpoint);
                return Err(mount_error(e));
            }
        }
    } else {
        // fusermount3, the setuid helper, mounts for ordinary users.
        let adapter = FuseAdapter::new(ops.clone(), None);
        let mut s = fuser::Session::new(adapter, mountpoint, &config).map_err(mount_error)?;
        let u = s.unmount_callable();
        (s, Unmount::Fuser(u))
    };
    opts.kernel_cache.attach(Some(session.notifier()));
    let kernel_cache = opts.kernel_cache.clone();
    let spin_stop = spinner;
    drop(ops);
    let (tx, rx) = mpsc::channel();
    let ended = tx.clone();
    let thread = thread::Builder::new()
        .name("lsfs-fuse".to_string())
        .spawn(move || {
            let r = match session.run() {
                // An aborted connection (fusectl's abort, or an unmount that
                // cut off requests in flight) ends the session like an
                // unmount: the file system was never told to stop, and it
                // still writes its final checkpoint when it is dropped.
                Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => {
                    tracing::warn!("the kernel aborted the FUSE connection");
                    Ok(())
                }
                r => r,
            };
            kernel_cache.attach(None);
            // The queues end once the kernel has given their entries back.
            if let Some(mut r) = rings.lock().unwrap().take() {
                r.stop();
            }
            if let Some(s) = spin_stop.get() {
                s.stop();
            }
            if let Err(e) = &r {
                tracing::error!("FUSE session ended with an error: {e}");
            }
            let _ = ended.send(Event::Ended(r));
        })
        .inspect_err(|_| {
            // The session went down with the closure: take the mount too.
            let _ = kernel_mount::unmount(mountpoint);
        })?;
    let handle = MountHandle {
        mountpoint: mountpoint.to_path_buf(),
        unmount: Some(unmount),
        thread: Some(thread),
        events: rx,
        ended: false,
        device: kernel_mount::mounted_device(mountpoint),
    };
    if matches!(handle.unmount, Some(Unmount::Direct)) && opts.read_ahead_kb > 0 {
        if let Some(dev) = handle.device.clone() {
            kernel_mount::raise_read_ahead(mountpoint, dev, opts.read_ahead_kb);
        }
    }
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
        // Someone may have unmounted it already (`fusermount3 -u`); then the
        // path must not be unmounted again: something else may be there now.
        while !self.ended {
            match self.events.try_recv() {
                Ok(Event::Ended(_)) => self.session_ended(),
                Ok(Event::Signal(_)) => continue,
                Err(_) => break,
            }
        }
        if self.ended {
            return Ok(());
        }
        let unmounted = self.take_down();
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
        self.finish();
        unmounted.and(ended)
    }

    /// The session ended on its own. After an external unmount the path is
    /// left alone (something else may be mounted there by now); if our mount
    /// is still there (the session failed, or the connection was aborted),
    /// the dead mount, which gives ENOTCONN to every user, is taken down.
    fn session_ended(&mut self) {
        let ours =
            self.device.is_some() && kernel_mount::mounted_device(&self.mountpoint) == self.device;
        if ours {
            if let Err(e) = self.take_down() {
                tracing::error!(
                    "cannot unmount {} after the session failed: {e}",
                    self.mountpoint.display()
                );
            }
        }
        self.finish();
    }

    fn take_down(&mut self) -> io::Result<()> {
        match self.unmount.take() {
            Some(Unmount::Fuser(mut u)) => u
                .unmount()
                .or_else(|_| kernel_mount::unmount(&self.mountpoint)),
            Some(Unmount::Direct) => kernel_mount::unmount(&self.mountpoint),
            None => Ok(()),
        }
    }

    /// The session has ended: reap its thread.
    fn finish(&mut self) {
        self.ended = true;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for MountHandle {
    fn drop(&mut self) {
        if let Err(e) = self.unmount_inner() {
            tracing::error!("unmount of {} failed: {e}", self.mountpoint.display());
        }
    }
}
