//! What the tests that mount share: the binary, the kernel's mount table,
//! and a guard that takes a mount down even when a test fails.

#![allow(dead_code)] // Each test binary uses its own part of this.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub fn lsfs() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lsfs"))
}

/// The line of /proc/self/mounts for mount point `p` (canonical), if any.
pub fn mount_line(p: &Path) -> Option<String> {
    let table = std::fs::read_to_string("/proc/self/mounts").unwrap();
    table
        .lines()
        .find(|l| l.split(' ').nth(1) == p.to_str())
        .map(str::to_string)
}

pub fn is_mounted(p: &Path) -> bool {
    mount_line(p).is_some()
}

/// The control socket of a mount: `.<name>.lsfs.sock` beside it. It is
/// there exactly while the server runs.
pub fn control_socket(mnt: &Path) -> PathBuf {
    let name = mnt.file_name().unwrap().to_str().unwrap();
    mnt.parent().unwrap().join(format!(".{name}.lsfs.sock"))
}

/// Whether nothing holds `image`'s lock (the server's flock) now.
fn unlocked(image: &Path) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(f) = std::fs::File::open(image) else {
        return true;
    };
    // SAFETY: flock on a descriptor we own; closing it drops the lock.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// Wait (up to 30 s) for the server of `mnt` to close its control socket,
/// write its last checkpoint and let go of `image`; whether it did. A FUSE
/// unmount returns before the server has finished.
pub fn server_gone(mnt: &Path, image: &Path) -> bool {
    let sock = control_socket(mnt);
    let deadline = Instant::now() + Duration::from_secs(30);
    while (sock.exists() || !unlocked(image)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    !sock.exists() && unlocked(image)
}

/// Unmounts `mnt` when dropped, if it is still mounted, and waits for its
/// background server to exit: a failing test leaves no mount behind.
pub struct UnmountOnDrop {
    pub mnt: PathBuf,
    pub image: PathBuf,
}

impl Drop for UnmountOnDrop {
    fn drop(&mut self) {
        if is_mounted(&self.mnt) {
            let _ = Command::new("umount").arg(&self.mnt).status();
            if is_mounted(&self.mnt) {
                let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
            }
        }
        server_gone(&self.mnt, &self.image);
    }
}
