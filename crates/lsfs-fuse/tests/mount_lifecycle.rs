//! Mounting, unmounting and their failure modes, with `MemFs` behind.

mod common;

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{fuse_available, is_mounted, TestMount};
use lsfs_fuse::{mount_foreground, spawn_mount, MountOptions};
use lsfs_vfs::model::MemFs;
use lsfs_vfs::{Vfs, ROOT_INO};

fn memfs() -> Arc<Mutex<MemFs>> {
    Arc::new(Mutex::new(MemFs::new()))
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn bad_mount_points_are_refused_with_their_path() {
    if !fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let opts = MountOptions::default();
    let missing = tmp.path().join("missing");
    let e = spawn_mount(memfs(), &missing, &opts).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(
        e.to_string().contains(missing.to_str().unwrap())
            && e.to_string().contains("does not exist"),
        "{e}"
    );

    let full = tmp.path().join("full");
    fs::create_dir(&full).unwrap();
    fs::write(full.join("x"), b"").unwrap();
    let e = spawn_mount(memfs(), &full, &opts).unwrap_err();
    assert!(e.to_string().contains("not an empty directory"), "{e}");

    let mount = TestMount::new(MemFs::new());
    let e = spawn_mount(memfs(), mount.root(), &opts).unwrap_err();
    assert!(
        e.to_string().contains(mount.root().to_str().unwrap())
            && e.to_string().contains("already a mount point"),
        "{e}"
    );
    mount.unmount();
}

#[test]
fn drop_unmounts_even_when_a_test_panics() {
    if !fuse_available() {
        return;
    }
    let (_tmp, mnt) = common::mount_point();
    let r = std::panic::catch_unwind(|| {
        let _handle = spawn_mount(memfs(), &mnt, &MountOptions::default()).unwrap();
        fs::write(mnt.join("f"), b"x").unwrap();
        assert!(is_mounted(&mnt));
        panic!("test failure inside the mount");
    });
    assert!(r.is_err());
    assert!(
        !is_mounted(&mnt),
        "the panic left {} mounted",
        mnt.display()
    );
    assert_eq!(
        fs::read_dir(&mnt).unwrap().count(),
        0,
        "the mount point is bare again"
    );
}

#[test]
fn unmount_waits_for_busy_files_to_close() {
    if !fuse_available() {
        return;
    }
    let (_tmp, mnt) = common::mount_point();
    let handle = spawn_mount(memfs(), &mnt, &MountOptions::default()).unwrap();
    let f = fs::File::create(mnt.join("busy")).unwrap();
    let closer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        drop(f);
    });
    handle.unmount().unwrap();
    closer.join().unwrap();
    assert!(!is_mounted(&mnt));
}

#[test]
fn external_unmount_ends_the_session() {
    if !fuse_available() {
        return;
    }
    let (_tmp, mnt) = common::mount_point();
    let handle = spawn_mount(memfs(), &mnt, &MountOptions::default()).unwrap();
    let st = Command::new("fusermount3")
        .arg("-u")
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(st.success());
    assert!(!is_mounted(&mnt));
    handle
        .unmount()
        .expect("unmounting what is already unmounted is fine");
}

#[test]
fn read_only_mount_refuses_changes() {
    if !fuse_available() {
        return;
    }
    let mut fs0 = MemFs::new();
    let ctx = lsfs_vfs::Ctx::default();
    let a = fs0
        .mknod(ROOT_INO, b"kept", libc::S_IFREG | 0o644, 0, &ctx)
        .unwrap();
    fs0.write(a.ino, 0, b"old data").unwrap();
    let mount = TestMount::with_options(
        fs0,
        &MountOptions {
            read_only: true,
            ..MountOptions::default()
        },
    );
    let root = mount.root();
    assert_eq!(fs::read(root.join("kept")).unwrap(), b"old data");
    for r in [
        fs::write(root.join("new"), b""),
        fs::write(root.join("kept"), b"x"),
        fs::create_dir(root.join("d")),
        fs::remove_file(root.join("kept")),
    ] {
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EROFS));
    }
    let opts = fs::read_to_string("/proc/self/mounts").unwrap();
    let line = opts
        .lines()
        .find(|l| l.split(' ').nth(1) == root.to_str())
        .unwrap()
        .to_string();
    let fields: Vec<&str> = line.split(' ').collect();
    assert!(
        fields[3].starts_with("ro,") && fields[3].contains("default_permissions"),
        "{line}"
    );
    assert_eq!(fields[0], "lsfs", "the source is the fsname");
    // SAFETY: no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        // Mounted by us (not fusermount3), so the subtype is kept.
        assert_eq!(fields[2], "fuse.lsfs");
    }
    mount.unmount();
}

#[test]
fn other_threads_share_the_vfs_while_mounted() {
    if !fuse_available() {
        return;
    }
    let mount = TestMount::new(MemFs::new());
    fs::write(mount.root().join("f"), b"via the kernel").unwrap();
    {
        let mut v = mount.vfs.lock().unwrap();
        let a = v.lookup(ROOT_INO, b"f").unwrap();
        assert_eq!(v.read(a.ino, 0, 100).unwrap(), b"via the kernel");
        v.forget(a.ino, 1);
    }
    // A long hold of the lock delays requests but does not fail them.
    let vfs = mount.vfs.clone();
    let holder = std::thread::spawn(move || {
        let _g = vfs.lock().unwrap();
        std::thread::sleep(Duration::from_millis(300));
    });
    std::thread::sleep(Duration::from_millis(50));
    let t = Instant::now();
    assert_eq!(fs::read(mount.root().join("f")).unwrap(), b"via the kernel");
    assert!(
        t.elapsed() >= Duration::from_millis(100),
        "the read waited for the lock"
    );
    holder.join().unwrap();
    mount.unmount();
}

/// The child half of `foreground_mount_unmounts_on_sigterm_and_sigint`,
/// which runs it in a process of its own; ignored when run by itself.
#[test]
#[ignore = "helper process of foreground_mount_unmounts_on_sigterm_and_sigint"]
fn foreground_child() {
    if let Some(path) = std::env::var_os("LSFS_FOREGROUND_MOUNTPOINT") {
        mount_foreground(memfs(), Path::new(&path), &MountOptions::default()).unwrap();
    }
}

#[test]
fn foreground_mount_unmounts_on_sigterm_and_sigint() {
    if !fuse_available() {
        return;
    }
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let (_tmp, mnt) = common::mount_point();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "foreground_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("LSFS_FOREGROUND_MOUNTPOINT", &mnt)
            .spawn()
            .unwrap();
        wait_until("the child has mounted", || is_mounted(&mnt));
        fs::write(mnt.join("f"), b"x").unwrap();
        // SAFETY: plain kill(2) on our own child.
        assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
        let status = child.wait().unwrap();
        assert!(
            status.success(),
            "foreground mount exited with {status} on signal {sig}"
        );
        assert!(!is_mounted(&mnt), "still mounted after signal {sig}");
    }
}

/// The kernel's forgets and releases reach the Vfs, so a removed file's
/// space can be reclaimed: once nothing holds it, MemFs drops the inode.
#[test]
fn removed_files_are_forgotten() {
    if !fuse_available() {
        return;
    }
    let mount = TestMount::new(MemFs::new());
    let count = || mount.vfs.lock().unwrap().inode_count();
    for i in 0..20 {
        fs::write(mount.root().join(format!("f{i}")), vec![1u8; 10_000]).unwrap();
    }
    fs::create_dir(mount.root().join("d")).unwrap();
    assert_eq!(count(), 22);
    let open = fs::File::open(mount.root().join("f0")).unwrap();
    for i in 0..20 {
        fs::remove_file(mount.root().join(format!("f{i}"))).unwrap();
    }
    fs::remove_dir(mount.root().join("d")).unwrap();
    wait_until("the kernel forgets the removed inodes", || count() == 2);
    drop(open);
    wait_until("the last open file is released", || count() == 1);
    mount.unmount();
}

/// Several worker threads serve requests from several user threads at once;
/// the shared mutex keeps every file's contents intact.
#[test]
fn many_threads_serve_concurrent_users() {
    if !fuse_available() {
        return;
    }
    let mount = TestMount::with_options(
        MemFs::new(),
        &MountOptions {
            threads: 4,
            ..MountOptions::default()
        },
    );
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let dir = mount.root().join(format!("t{t}"));
            s.spawn(move || {
                fs::create_dir(&dir).unwrap();
                for i in 0..100u32 {
                    let p = dir.join(format!("f{}", i % 10));
                    let data =
                        vec![t.wrapping_mul(31).wrapping_add(i as u8); 1000 + i as usize * 10];
                    fs::write(&p, &data).unwrap();
                    assert_eq!(fs::read(&p).unwrap(), data);
                    if i % 3 == 0 {
                        fs::remove_file(&p).unwrap();
                    }
                }
                assert!(fs::read_dir(&dir).unwrap().count() <= 10);
            });
        }
    });
    mount.unmount();
}

/// If the connection dies under the mount (here: aborted through the fuse
/// control file system), the handle still takes the dead mount down.
#[test]
fn aborted_connection_is_unmounted() {
    if !fuse_available() {
        return;
    }
    let (tmp, mnt) = common::mount_point();
    fs::create_dir(tmp.path().join("sub")).unwrap();
    // Mounted through a path that is not the one mountinfo shows: the handle
    // must still recognize its mount (it left dead mounts behind before).
    let roundabout = tmp.path().join("sub/../mnt");
    let handle = spawn_mount(memfs(), &roundabout, &MountOptions::default()).unwrap();
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dev = info
        .lines()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .find(|f| f[4] == mnt.to_str().unwrap())
        .map(|f| f[2].to_string())
        .unwrap();
    let minor = dev.split(':').nth(1).unwrap();
    // The fuse control file system may not be mounted (in a container
    // /sys/fs/fuse/connections may not take a mount either): mount a private
    // instance for the length of the test (root only) and take it down after.
    struct Fusectl(Option<tempfile::TempDir>);
    impl Drop for Fusectl {
        fn drop(&mut self) {
            if let Some(dir) = &self.0 {
                let _ = Command::new("umount").arg(dir.path()).status();
            }
        }
    }
    let mut fusectl = Fusectl(None);
    let mut abort = PathBuf::from(format!("/sys/fs/fuse/connections/{minor}/abort"));
    if !abort.exists() {
        let dir = tempfile::tempdir().unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "fusectl", "fusectl"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        abort = dir.path().join(minor).join("abort");
        if mounted {
            fusectl.0 = Some(dir);
        }
    }
    if !abort.exists() {
        eprintln!(
            "SKIPPED: {} is not available (fusectl cannot be mounted)",
            abort.display()
        );
        return;
    }
    fs::write(&abort, b"1").unwrap();
    let e = fs::metadata(mnt.join("x")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOTCONN));
    // Let the session thread see the abort first, so the handle takes the
    // path where the session ended on its own (as `lsfs mount` does).
    std::thread::sleep(Duration::from_millis(300));
    handle.unmount().unwrap();
    assert!(!is_mounted(&mnt));
}

/// A root mount raises the kernel's readahead for it to
/// `MountOptions::read_ahead_kb` once FUSE_INIT is done (the kernel would
/// keep it at 128 KiB), and 0 leaves the kernel's value.
#[test]
fn root_mounts_raise_the_readahead() {
    if !fuse_available() || !nix_is_root() {
        return;
    }
    let read_ahead = |mnt: &Path| -> u32 {
        let out = Command::new("mountpoint")
            .arg("-d")
            .arg(mnt)
            .output()
            .unwrap();
        let dev = String::from_utf8(out.stdout).unwrap();
        let knob = format!("/sys/class/bdi/{}/read_ahead_kb", dev.trim());
        fs::read_to_string(knob).unwrap().trim().parse().unwrap()
    };
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let opts = MountOptions::default();
    let m = spawn_mount(memfs(), &mnt, &opts).unwrap();
    wait_until("the readahead is raised", || {
        read_ahead(&mnt) == lsfs_fuse::DEFAULT_READ_AHEAD_KB
    });
    m.unmount().unwrap();

    let opts = MountOptions {
        read_ahead_kb: 0,
        ..MountOptions::default()
    };
    let m = spawn_mount(memfs(), &mnt, &opts).unwrap();
    fs::metadata(&mnt).unwrap(); // FUSE_INIT is done
    std::thread::sleep(Duration::from_millis(200));
    assert!(read_ahead(&mnt) < lsfs_fuse::DEFAULT_READ_AHEAD_KB);
    m.unmount().unwrap();
}

fn nix_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
