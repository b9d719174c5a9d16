//! Harness for the POSIX tests through a real mount. The cases in
//! `cases.rs` know only a directory; [`posix_suite!`] turns each of them into
//! a `#[test]` that mounts a fresh file system made by a given constructor,
//! so the same cases run against `MemFs` and the engine alike:
//!
//! ```ignore
//! mod common;
//! posix_suite!(lsfs_vfs::model::MemFs::new);
//! posix_suite!(make_engine, writeback_cache); // with the kernel's writeback cache
//! ```

#![allow(dead_code)]

pub mod cases;
pub mod faulty;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use lsfs_fuse::{spawn_mount, MountHandle, MountOptions};
use lsfs_vfs::Vfs;

/// A file system mounted on a fresh temporary directory. Dropping it
/// unmounts first, then removes the directory, also when a test panics.
pub struct TestMount<V: Vfs + 'static> {
    // Field order is drop order: unmount before the directory goes.
    handle: Option<MountHandle>,
    pub vfs: Arc<Mutex<V>>,
    root: PathBuf,
    _dir: tempfile::TempDir,
}

impl<V: Vfs + 'static> TestMount<V> {
    /// Mounted with the default options (the kernel's writeback cache too).
    pub fn new(vfs: V) -> Self {
        Self::with_options(vfs, &options(MountOptions::default().writeback_cache))
    }

    pub fn with_options(vfs: V, opts: &MountOptions) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lsfs-fuse-test")
            .tempdir()
            .expect("temp dir");
        let root = dir.path().join("mnt");
        std::fs::create_dir(&root).unwrap();
        let vfs = Arc::new(Mutex::new(vfs));
        let handle = spawn_mount(vfs.clone(), &root, opts).expect("mount");
        TestMount {
            handle: Some(handle),
            vfs,
            root,
            _dir: dir,
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Unmount now and insist that it went cleanly.
    pub fn unmount(mut self) {
        self.handle
            .take()
            .unwrap()
            .unmount()
            .expect("clean unmount");
        assert!(
            !is_mounted(&self.root),
            "{} still mounted",
            self.root.display()
        );
    }
}

/// The options the tests mount with, with the kernel's writeback cache or
/// without.
pub fn options(writeback_cache: bool) -> MountOptions {
    MountOptions {
        fsname: "lsfs-test".into(),
        writeback_cache,
        ..MountOptions::default()
    }
}

/// lseek(2) on `f` (for SEEK_DATA and SEEK_HOLE, which std does not
/// offer): the new offset, or the errno.
pub fn seek(f: &std::fs::File, offset: i64, whence: i32) -> Result<i64, i32> {
    use std::os::unix::io::AsRawFd;
    // SAFETY: lseek on a descriptor `f` owns and keeps open.
    let r = unsafe { libc::lseek(f.as_raw_fd(), offset, whence) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    } else {
        Ok(r)
    }
}

/// The lsfs engine on a 256 MiB in-memory device with 1 MiB segments: room
/// for every case, small enough to be quick.
pub fn engine() -> lsfs_core::fs::Lsfs {
    let opts = lsfs_core::meta::open::MkfsOptions {
        segment_blocks: 256,
        label: "fuse-test".into(),
    };
    lsfs_core::fs::Lsfs::mkfs(
        Box::new(lsfs_core::device::MemDevice::new(256 << 20)),
        &opts,
        lsfs_core::fs::MountConfig::default(),
    )
    .expect("mkfs")
}

/// An empty directory to mount on, inside a temporary directory that goes
/// when the returned guard drops (unmount before that).
pub fn mount_point() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    (tmp, mnt)
}

/// Whether `path` appears in the mount table.
pub fn is_mounted(path: &Path) -> bool {
    let table = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let path = path.to_str().unwrap();
    table.lines().any(|l| l.split(' ').nth(1) == Some(path))
}

/// FUSE tests need the device; without it they cannot run at all, which is
/// reported loudly rather than passed silently.
pub fn fuse_available() -> bool {
    if Path::new("/dev/fuse").exists() {
        return true;
    }
    eprintln!("SKIPPED: /dev/fuse does not exist; FUSE mount tests cannot run here");
    false
}

/// Mount what `make` builds, run `case` on it, unmount.
pub fn run_case<V: Vfs + 'static>(make: impl FnOnce() -> V, case: fn(&Path)) {
    run_case_with(make, case, false);
}

/// [`run_case`], optionally with the kernel's writeback cache.
pub fn run_case_with<V: Vfs + 'static>(
    make: impl FnOnce() -> V,
    case: fn(&Path),
    writeback_cache: bool,
) {
    if !fuse_available() {
        return;
    }
    let mount = TestMount::with_options(make(), &options(writeback_cache));
    case(mount.root());
    mount.unmount();
}

/// [`run_case`] with the writeback cache and requests served through
/// FUSE over io_uring; the case must have gone through the ring.
pub fn run_case_uring<V: Vfs + 'static>(make: impl FnOnce() -> V, case: fn(&Path)) {
    if !fuse_available() {
        return;
    }
    let opts = MountOptions {
        uring: lsfs_fuse::UringMode::On,
        ..options(true)
    };
    let mount = TestMount::with_options(make(), &opts);
    case(mount.root());
    mount.unmount();
    assert!(
        opts.counters.ring_requests() > 0,
        "no request came through io_uring ({} in all)",
        opts.counters.total()
    );
}

/// One `#[test]` per case in `cases.rs`, each on a fresh file system built
/// by `$make` (any expression that can be called as `$make()` and returns a
/// `Vfs + 'static`).
#[macro_export]
macro_rules! posix_suite {
    ($make:expr) => {
        $crate::posix_suite!(@suite $make, false);
    };
    ($make:expr, writeback_cache) => {
        $crate::posix_suite!(@suite $make, true);
    };
    ($make:expr, uring) => {
        $crate::posix_suite!(@suite $make, uring);
    };
    (@suite $make:expr, $wb:tt) => {
        $crate::posix_suite!(@cases $make, $wb;
            write_read_and_sparse_files,
            random_writes_match_a_shadow_copy,
            truncate_shrinks_and_extends,
            open_flags,
            rename_semantics,
            renameat2_noreplace_and_exchange,
            hard_links_and_link_counts,
            symlinks,
            mkdir_and_rmdir_errors,
            readdir_large_directory_while_deleting,
            xattrs,
            chmod_chown_and_utimens,
            writes_truncates_and_chowns_drop_setuid,
            directory_times_follow_entry_changes,
            statfs_is_plausible,
            names_longer_than_255_bytes,
            unlinked_open_file_stays_readable,
            special_files,
            fsync_and_fallocate,
            fallocate_modes,
        );
    };
    (@cases $make:expr, uring; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                common::run_case_uring($make, common::cases::$case);
            }
        )*
    };
    (@cases $make:expr, $wb:expr; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                common::run_case_with($make, common::cases::$case, $wb);
            }
        )*
    };
}
