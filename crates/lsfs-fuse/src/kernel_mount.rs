//! The mount(2) and umount(2) calls, for when we run as root and can make
//! them ourselves. fuser's own mount passes plain "fuse" as the type, which
//! loses the subtype; mounting here gives "fuse.lsfs" like libfuse does.

use std::ffi::CString;
use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

/// How long an unmount waits for busy files to close before detaching.
const UNMOUNT_PATIENCE: Duration = Duration::from_secs(2);

fn cstring(s: &[u8]) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "embedded NUL byte"))
}

/// Open /dev/fuse and mount it on `mountpoint` as `fuse.<subtype>`. Returns
/// the connection, which the FUSE session then serves.
pub(crate) fn mount(
    mountpoint: &Path,
    fsname: &str,
    subtype: &str,
    read_only: bool,
    allow_other: bool,
    kernel_flags: libc::c_ulong,
) -> io::Result<OwnedFd> {
    let dev: OwnedFd = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(|e| io::Error::new(e.kind(), format!("cannot open /dev/fuse: {e}")))?
        .into();
    let rootmode = std::fs::metadata(mountpoint)?.mode() & libc::S_IFMT;
    // SAFETY: getuid and getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut data = format!(
        "fd={},rootmode={rootmode:o},user_id={uid},group_id={gid},default_permissions",
        dev.as_raw_fd()
    );
    if allow_other {
        data.push_str(",allow_other");
    }
    // No nodev/nosuid unless asked for: root's mount honours device nodes
    // and setuid bits, like any other file system root mounts.
    let flags = kernel_flags | if read_only { libc::MS_RDONLY } else { 0 };
    let source = cstring(fsname.as_bytes())?;
    let target = cstring(mountpoint.as_os_str().as_bytes())?;
    let fstype = cstring(format!("fuse.{subtype}").as_bytes())?;
    let data = cstring(data.as_bytes())?;
    // SAFETY: all pointers are valid NUL-terminated strings for the call.
    let r = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            flags,
            data.as_ptr().cast(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(dev)
}

/// Unmount, retrying while files are busy, then detach lazily.
pub(crate) fn unmount(path: &Path) -> io::Result<()> {
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

/// The device ("major:minor") of what is mounted at `path`, from
/// /proc/self/mountinfo; the topmost mount if there are several.
pub(crate) fn mounted_device(path: &Path) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    // mountinfo escapes these characters in octal.
    let mut want = String::new();
    for c in path.to_str()?.chars() {
        match c {
            ' ' => want.push_str("\\040"),
            '\t' => want.push_str("\\011"),
            '\n' => want.push_str("\\012"),
            '\\' => want.push_str("\\134"),
            c => want.push(c),
        }
    }
    info.lines().rev().find_map(|l| {
        let mut f = l.split(' ');
        let dev = f.nth(2)?;
        let point = f.nth(1)?;
        (point == want).then(|| dev.to_string())
    })
}

/// Raise the readahead of the mount at `path` (device `dev`, "major:minor")
/// to `kb` KiB. The kernel sets it at FUSE_INIT, from what it offered and
/// the server answered, so it can only be raised after that; a stat of the
/// mount point returns once FUSE_INIT is done. That runs on a thread of its
/// own, waited for (at most 2 s), so that the mount is not busy with it when
/// the caller goes on (an unmount right after would fail). Failing leaves
/// the kernel's value, which works, only slower.
pub(crate) fn raise_read_ahead(path: &Path, dev: String, kb: u32) {
    let path = path.to_path_buf();
    let (done, wait) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("lsfs-readahead".into())
        .spawn(move || {
            set_read_ahead(&path, &dev, kb);
            let _ = done.send(());
        });
    match spawned {
        Ok(_) => {
            if wait.recv_timeout(Duration::from_secs(2)).is_err() {
                tracing::debug!("readahead: FUSE_INIT not done within 2 s");
            }
        }
        Err(e) => tracing::debug!("readahead left as it is: {e}"),
    }
}

fn set_read_ahead(path: &Path, dev: &str, kb: u32) {
    if let Err(e) = std::fs::metadata(path) {
        tracing::debug!("readahead left as it is: {}: {e}", path.display());
        return;
    }
    let knob = format!("/sys/class/bdi/{dev}/read_ahead_kb");
    let now = std::fs::read_to_string(&knob)
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    if now.is_some_and(|n| n >= kb) {
        return;
    }
    match std::fs::write(&knob, kb.to_string()) {
        Ok(()) => tracing::debug!("readahead of {} set to {kb} KiB", path.display()),
        Err(e) => tracing::debug!("readahead left as it is: {knob}: {e}"),
    }
}
