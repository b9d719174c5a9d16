//! F2FS's atomic-write ioctls through a real mount of the engine, with the
//! kernel's writeback cache on (docs/ATOMIC.md): the writes of a
//! transaction are still dirty pages in the kernel when COMMIT or ABORT
//! comes, and must reach the set first; a device image taken before the
//! commit holds none of them, one taken right after holds all; abort
//! leaves the file as it was, in the page cache too; a process that ends
//! with writes pending has them aborted; a set past its bound fails at
//! COMMIT. The images are taken without unmounting: what a crash there
//! would leave.

mod common;

use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::sync::{Arc, Mutex};

use lsfs_core::device::MemDevice;
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_vfs::{Vfs, ROOT_INO};

// Linux's include/uapi/linux/f2fs.h, as an application spells them.
const START: u64 = 0xf501;
const COMMIT: u64 = 0xf502;
const ABORT: u64 = 0xf505;
const GET_FEATURES: u64 = 0x8004_f50c;
const FEATURE_ATOMIC_WRITE: u32 = 0x4;

/// ioctl(2) without argument: `Err(errno)` on failure.
fn ioctl(f: &std::fs::File, cmd: u64) -> Result<(), i32> {
    // SAFETY: these commands take no argument; `f` stays open.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), cmd as _) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    } else {
        Ok(())
    }
}

fn features(f: &std::fs::File) -> Result<u32, i32> {
    let mut flags = 0u32;
    // SAFETY: GET_FEATURES writes one u32 to the pointer, which lives here.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), GET_FEATURES as _, &mut flags as *mut u32) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    } else {
        Ok(flags)
    }
}

/// `name`'s contents in the file system on `bytes`, as a crash would
/// leave it (recovery included).
fn contents_after_crash(bytes: Vec<u8>, name: &str) -> Vec<u8> {
    let mut fs = Lsfs::open(
        Box::new(MemDevice::from_bytes(bytes)),
        MountConfig::default(),
    )
    .expect("recovery");
    let ino = fs.lookup(ROOT_INO, name.as_bytes()).unwrap().ino;
    let size = fs.getattr(ino).unwrap().size;
    fs.read(ino, 0, size as u32).unwrap()
}

fn device_image(vfs: &Arc<Mutex<Lsfs>>) -> Vec<u8> {
    vfs.lock().unwrap().store.dev_bytes_for_test()
}

fn mount() -> common::TestMount<Lsfs> {
    common::TestMount::with_options(common::engine(), &common::options(true))
}

fn open_rw(path: &std::path::Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap()
}

/// The file `db` on `mount`, holding `contents` on the device (written,
/// opened read-write, fsynced): the state every transaction starts from.
fn db_file(
    mount: &common::TestMount<Lsfs>,
    contents: &[u8],
) -> (std::path::PathBuf, std::fs::File) {
    let path = mount.root().join("db");
    std::fs::write(&path, contents).unwrap();
    let f = open_rw(&path);
    f.sync_all().unwrap();
    (path, f)
}

#[track_caller]
fn same(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        let at = got.iter().zip(want).position(|(a, b)| a != b);
        panic!(
            "{what}: {} bytes, expected {}; first difference at {at:?}",
            got.len(),
            want.len()
        );
    }
}

/// A transaction through the mount: GET_FEATURES reports atomic writes;
/// between START and COMMIT the writer reads its writes, the engine holds
/// them pending, and an fsync and a checkpoint leave them off the device;
/// COMMIT makes all of them durable at once; a remount reads them.
#[test]
fn a_commit_through_the_mount_is_all_or_nothing() {
    if !common::fuse_available() {
        return;
    }
    let mount = mount();
    let old: Vec<u8> = (0..3 * 4096).map(|i| (i % 251) as u8).collect();
    let (_, f) = db_file(&mount, &old);
    let ino = f.metadata().unwrap().ino();
    assert_eq!(
        features(&f).map(|x| x & FEATURE_ATOMIC_WRITE),
        Ok(FEATURE_ATOMIC_WRITE)
    );

    ioctl(&f, START).unwrap();
    assert!(mount.vfs.lock().unwrap().atomic_pending(ino));
    let mut new = old.clone();
    f.write_all_at(&[0xaa; 4096], 0).unwrap();
    new[..4096].fill(0xaa);
    f.write_all_at(&[0xbb; 100], 5000).unwrap();
    new[5000..5100].fill(0xbb);
    f.write_all_at(&[0xcc; 6000], old.len() as u64).unwrap();
    new.extend_from_slice(&[0xcc; 6000]);
    let mut got = vec![0; new.len()];
    f.read_exact_at(&mut got, 0).unwrap();
    same(&got, &new, "the writer's view");
    // fsync sends the pages to the engine: they go into the set, not to the device.
    f.sync_all().unwrap();
    assert!(
        mount.vfs.lock().unwrap().atomic.blocks() > 0,
        "the pages did not reach the set"
    );
    mount.vfs.lock().unwrap().checkpoint().unwrap();
    same(
        &contents_after_crash(device_image(&mount.vfs), "db"),
        &old,
        "before COMMIT",
    );

    ioctl(&f, COMMIT).unwrap();
    assert!(!mount.vfs.lock().unwrap().atomic_pending(ino));
    same(
        &contents_after_crash(device_image(&mount.vfs), "db"),
        &new,
        "right after COMMIT",
    );
    // Ordinary writes again.
    f.write_all_at(b"plain", 0).unwrap();
    f.sync_all().unwrap();
    new[..5].copy_from_slice(b"plain");
    drop(f);
    let vfs = mount.vfs.clone();
    mount.unmount();
    let bytes = device_image(&vfs);
    let again = common::TestMount::with_options(
        Lsfs::open(
            Box::new(MemDevice::from_bytes(bytes)),
            MountConfig::default(),
        )
        .unwrap(),
        &common::options(true),
    );
    same(
        &std::fs::read(again.root().join("db")).unwrap(),
        &new,
        "after a remount",
    );
    again.unmount();
}

/// The writes of a transaction that was still in the page cache when
/// COMMIT came reach the set before the commit: the kernel has not sent
/// them (no fsync, no close) when COMMIT is asked.
#[test]
fn commit_takes_the_writes_still_in_the_page_cache() {
    if !common::fuse_available() {
        return;
    }
    let mount = mount();
    let (_, f) = db_file(&mount, &[1u8; 8192]);
    let ino = f.metadata().unwrap().ino();
    ioctl(&f, START).unwrap();
    f.write_all_at(&[2u8; 8192], 0).unwrap();
    assert_eq!(
        mount.vfs.lock().unwrap().atomic.file_blocks(ino),
        0,
        "the writes reached the engine at once: no writeback cache"
    );
    ioctl(&f, COMMIT).unwrap();
    same(
        &contents_after_crash(device_image(&mount.vfs), "db"),
        &[2u8; 8192],
        "right after COMMIT",
    );
    drop(f);
    mount.unmount();
}

/// ABORT drops the set, also the pages the kernel had not sent: the file
/// reads as before through the mount and on the device.
#[test]
fn abort_through_the_mount_leaves_the_file_as_it_was() {
    if !common::fuse_available() {
        return;
    }
    let mount = mount();
    let old = vec![5u8; 4 * 4096];
    let (path, f) = db_file(&mount, &old);
    let ino = f.metadata().unwrap().ino();
    ioctl(&f, START).unwrap();
    f.write_all_at(&[6u8; 4096], 4096).unwrap();
    f.write_all_at(&[7u8; 10], 3 * 4096 + 7).unwrap();
    let writes = mount
        .vfs
        .lock()
        .unwrap()
        .store
        .device_counters()
        .write_bytes;
    ioctl(&f, ABORT).unwrap();
    assert!(!mount.vfs.lock().unwrap().atomic_pending(ino));
    let after = mount
        .vfs
        .lock()
        .unwrap()
        .store
        .device_counters()
        .write_bytes;
    assert_eq!(after, writes, "abort wrote to the device");
    let mut got = vec![0; old.len()];
    f.read_exact_at(&mut got, 0).unwrap();
    same(&got, &old, "the page cache after ABORT");
    same(
        &std::fs::read(&path).unwrap(),
        &old,
        "a new open after ABORT",
    );
    // ABORT without START, as SQLite does after a failed COMMIT: nothing.
    ioctl(&f, ABORT).unwrap();
    drop(f);
    let vfs = mount.vfs.clone();
    mount.unmount();
    same(
        &contents_after_crash(device_image(&vfs), "db"),
        &old,
        "after unmount",
    );
}

/// A process that starts a transaction and ends without COMMIT (killed,
/// crashed) has its writes aborted: the file reads as before.
#[test]
fn a_process_that_ends_mid_transaction_has_its_writes_aborted() {
    if !common::fuse_available() {
        return;
    }
    let mount = mount();
    let path = mount.root().join("db");
    let old = vec![9u8; 8192];
    std::fs::write(&path, &old).unwrap();
    let ino = std::fs::metadata(&path).unwrap().ino();
    let cpath = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let page = [4u8; 4096];
    // SAFETY: the child makes only system calls (open, ioctl, pwrite,
    // _exit), which are safe after fork in a threaded process.
    let child = unsafe { libc::fork() };
    if child == 0 {
        // SAFETY: as above; every pointer outlives its call.
        unsafe {
            let fd = libc::open(cpath.as_ptr(), libc::O_RDWR);
            let ok = fd >= 0
                && libc::ioctl(fd, START as _) == 0
                && libc::pwrite(fd, page.as_ptr().cast(), page.len(), 0) == 4096;
            libc::_exit(if ok { 0 } else { 1 });
        }
    }
    assert!(child > 0, "fork failed");
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child failed"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while mount.vfs.lock().unwrap().atomic_pending(ino) {
        assert!(
            std::time::Instant::now() < deadline,
            "the dead process's set is still pending"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(mount.vfs.lock().unwrap().atomic.stats.aborts, 1);
    same(
        &std::fs::read(&path).unwrap(),
        &old,
        "after the process ended",
    );
    mount.unmount();
}

/// A set past the per-file bound: the writes land in the page cache, the
/// engine refuses the one past the bound when the kernel sends it, and
/// COMMIT fails with EFBIG and applies nothing; SQLite then aborts.
#[test]
fn a_set_past_its_bound_fails_at_commit() {
    if !common::fuse_available() {
        return;
    }
    let mount = mount();
    let (_, f) = db_file(&mount, b"old");
    ioctl(&f, START).unwrap();
    let big = vec![3u8; (lsfs_core::fs::atomic::FILE_MAX_BLOCKS as usize + 1) * 4096];
    f.write_all_at(&big, 0).unwrap();
    assert_eq!(ioctl(&f, COMMIT), Err(libc::EFBIG));
    ioctl(&f, ABORT).unwrap();
    same(
        &contents_after_crash(device_image(&mount.vfs), "db"),
        b"old",
        "the device",
    );
    let mut got = vec![0; 3];
    f.read_exact_at(&mut got, 0).unwrap();
    same(&got, b"old", "the page cache");
    drop(f);
    mount.unmount();
}

/// A file system without atomic writes answers the ioctls ENOTTY, as one
/// without them in the kernel does (SQLite then uses its journal).
#[test]
fn without_atomic_writes_the_ioctls_are_enotty() {
    if !common::fuse_available() {
        return;
    }
    let mount = common::TestMount::new(lsfs_vfs::model::MemFs::new());
    let path = mount.root().join("db");
    std::fs::write(&path, b"x").unwrap();
    let f = open_rw(&path);
    assert_eq!(features(&f), Err(libc::ENOTTY));
    assert_eq!(ioctl(&f, START), Err(libc::ENOTTY));
    drop(f);
    mount.unmount();
}

const COMMIT_FILES: u64 = 0x4208_4c80;
const ABORT_FILES: u64 = 0x4208_4c81;

/// lsfs's ioctl on several files: `u32` count, `u32` zero, 64 inode numbers.
fn files_ioctl(on: &std::fs::File, cmd: u64, inos: &[u64]) -> Result<(), i32> {
    let mut arg = [0u8; 8 + 8 * 64];
    arg[..4].copy_from_slice(&(inos.len() as u32).to_ne_bytes());
    for (i, ino) in inos.iter().enumerate() {
        arg[8 + 8 * i..16 + 8 * i].copy_from_slice(&ino.to_ne_bytes());
    }
    // SAFETY: the command reads 520 bytes from `arg`, which lives here.
    let r = unsafe { libc::ioctl(on.as_raw_fd(), cmd as _, arg.as_ptr()) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    } else {
        Ok(())
    }
}

/// Two files in atomic mode committed as one unit by lsfs's ioctl, sent
/// on the mount's root directory while their writes are still in the page
/// cache: the device holds neither before, both right after; the abort
/// ioctl drops both.
#[test]
fn several_files_commit_through_the_mount_as_one_unit() {
    if !common::fuse_available() {
        return;
    }
    let mount = mount();
    let (pa, pb) = (mount.root().join("a"), mount.root().join("b"));
    std::fs::write(&pa, [1u8; 8192]).unwrap();
    std::fs::write(&pb, [2u8; 4096]).unwrap();
    let (fa, fb) = (open_rw(&pa), open_rw(&pb));
    fa.sync_all().unwrap();
    fb.sync_all().unwrap();
    let inos = [fa.metadata().unwrap().ino(), fb.metadata().unwrap().ino()];
    let root = std::fs::File::open(mount.root()).unwrap();
    ioctl(&fa, START).unwrap();
    ioctl(&fb, START).unwrap();
    fa.write_all_at(&[3u8; 8192], 0).unwrap();
    fb.write_all_at(&[4u8; 4096], 4096).unwrap();
    let image = device_image(&mount.vfs);
    same(
        &contents_after_crash(image.clone(), "a"),
        &[1u8; 8192],
        "a before",
    );
    same(&contents_after_crash(image, "b"), &[2u8; 4096], "b before");
    files_ioctl(&root, COMMIT_FILES, &inos).unwrap();
    let image = device_image(&mount.vfs);
    same(
        &contents_after_crash(image.clone(), "a"),
        &[3u8; 8192],
        "a after",
    );
    let mut b_new = vec![2u8; 4096];
    b_new.extend_from_slice(&[4u8; 4096]);
    same(&contents_after_crash(image, "b"), &b_new, "b after");

    ioctl(&fa, START).unwrap();
    ioctl(&fb, START).unwrap();
    fa.write_all_at(&[5u8; 100], 0).unwrap();
    fb.write_all_at(&[6u8; 100], 0).unwrap();
    files_ioctl(&root, ABORT_FILES, &inos).unwrap();
    assert!(!mount.vfs.lock().unwrap().atomic_pending(inos[0]));
    same(
        &std::fs::read(&pa).unwrap(),
        &[3u8; 8192],
        "a after the abort",
    );
    same(&std::fs::read(&pb).unwrap(), &b_new, "b after the abort");
    // A bad argument: a nonzero reserved word.
    let mut bad = [0u8; 8 + 8 * 64];
    bad[4] = 1;
    // SAFETY: as in files_ioctl.
    let r = unsafe { libc::ioctl(root.as_raw_fd(), COMMIT_FILES as _, bad.as_ptr()) };
    assert_eq!(r, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EINVAL)
    );
    drop((fa, fb, root));
    mount.unmount();
}
