//! Where a write error (ENOSPC, EIO) reaches the application, with the
//! kernel's writeback cache and without, as docs/CRASH.md states it:
//! without it at write(); with it write() only fills the page cache, and
//! the error comes back from fsync() and from close() (the kernel writes
//! the file's dirty pages back at close and reports their error there).

mod common;

use std::fs;
use std::io::Write;
use std::os::unix::io::IntoRawFd;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use common::faulty::FaultyMemFs;
use common::{fuse_available, TestMount};

/// A `MemFs` whose writes fail with the errno in the returned cell while it
/// is not 0.
fn mount(writeback_cache: bool) -> (TestMount<FaultyMemFs>, Arc<AtomicI32>) {
    let fail = Arc::new(AtomicI32::new(0));
    let opts = common::options(writeback_cache);
    (
        TestMount::with_options(
            FaultyMemFs {
                write_errno: fail.clone(),
                ..FaultyMemFs::default()
            },
            &opts,
        ),
        fail,
    )
}

/// close(2) itself, whose result `File`'s drop throws away.
fn close(f: fs::File) -> Result<(), i32> {
    // SAFETY: the descriptor is ours and closed exactly once.
    match unsafe { libc::close(f.into_raw_fd()) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error().raw_os_error().unwrap()),
    }
}

#[test]
fn without_the_writeback_cache_write_reports_the_error() {
    if !fuse_available() {
        return;
    }
    for e in [libc::ENOSPC, libc::EIO] {
        let (mount, fail) = mount(false);
        let mut f = fs::File::create(mount.root().join("f")).unwrap();
        fail.store(e, Ordering::SeqCst);
        let r = f.write_all(&[1; 8192]);
        assert_eq!(r.unwrap_err().raw_os_error(), Some(e));
        fail.store(0, Ordering::SeqCst);
        drop(f);
        mount.unmount();
    }
}

#[test]
fn with_the_writeback_cache_fsync_reports_the_error() {
    if !fuse_available() {
        return;
    }
    for e in [libc::ENOSPC, libc::EIO] {
        let (mount, fail) = mount(true);
        let mut f = fs::File::create(mount.root().join("f")).unwrap();
        fail.store(e, Ordering::SeqCst);
        f.write_all(&[1; 8192])
            .expect("write() only fills the page cache");
        assert_eq!(f.sync_all().unwrap_err().raw_os_error(), Some(e));
        fail.store(0, Ordering::SeqCst);
        drop(f);
        mount.unmount();
    }
}

#[test]
fn with_the_writeback_cache_close_reports_the_error() {
    if !fuse_available() {
        return;
    }
    for e in [libc::ENOSPC, libc::EIO] {
        let (mount, fail) = mount(true);
        let p = mount.root().join("f");
        let mut f = fs::File::create(&p).unwrap();
        fail.store(e, Ordering::SeqCst);
        f.write_all(&[1; 8192])
            .expect("write() only fills the page cache");
        assert_eq!(
            close(f),
            Err(e),
            "close() must report the failed write-back"
        );
        // Once reported, the error is not reported again.
        fail.store(0, Ordering::SeqCst);
        let f = fs::OpenOptions::new().write(true).open(&p).unwrap();
        assert_eq!(close(f), Ok(()));
        mount.unmount();
    }
}
