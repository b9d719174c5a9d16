//! `lsfs mount` in the foreground as a child process, for the tests that
//! need the real binary's mount (its control socket, its `-o` options).
//! Included with `#[path]` by each test, beside the FUSE tests' `common`
//! (crates/lsfs-fuse/tests/common), which gives `is_mounted`. Each test
//! uses a part of it.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::is_mounted;

/// The `lsfs` binary under test.
pub fn lsfs() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lsfs"))
}

/// `lsfs CMD --json --mount MNT` (stats, trim, …), which must succeed, parsed.
pub fn lsfs_json(cmd: &str, mnt: &Path) -> serde_json::Value {
    lsfs_args_json(&[cmd], mnt)
}

/// `lsfs ARGS… --json --mount MNT` (`snapshot create`, `gc run --segments
/// 64`, …), which must succeed, parsed.
pub fn lsfs_args_json(args: &[&str], mnt: &Path) -> serde_json::Value {
    let out = lsfs()
        .args(args)
        .args(["--json", "--mount"])
        .arg(mnt)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "lsfs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `lsfs fsck IMAGE` passes; `after` says after what, for the message.
/// Run it once the mount is dropped or unmounted: the server has then let
/// go of the image.
pub fn fsck_clean(image: &Path, after: &str) {
    let out = lsfs().arg("fsck").arg(image).output().unwrap();
    assert!(
        out.status.success(),
        "fsck {after}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A fresh image of `size` (mkfs's syntax) under `dir`, mounted with the
/// extra arguments `args` on `dir/mnt`; the image's path and the mount.
pub fn mkfs_and_mount(dir: &Path, size: &str, args: &[&str]) -> (PathBuf, Mounted) {
    let image = dir.join("img");
    let mnt = dir.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let st = lsfs()
        .args(["mkfs", "--size", size])
        .arg(&image)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "lsfs mkfs: {st}");
    let m = Mounted::new(&image, &mnt, args);
    (image, m)
}

/// `lsfs mount` in the foreground, as a child; dropping it unmounts and
/// waits for the server to write its last checkpoint and exit, also when
/// the test fails.
pub struct Mounted {
    child: Child,
    pub mnt: PathBuf,
}

impl Mounted {
    /// Mount `image` on `mnt` with the extra arguments `args`, and wait
    /// until it is mounted.
    pub fn new(image: &Path, mnt: &Path, args: &[&str]) -> Mounted {
        let mut cmd = lsfs();
        cmd.arg("mount").arg(image).arg(mnt).args(args);
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        Mounted::run(cmd, mnt)
    }

    /// Run `cmd`, an `lsfs mount` in the foreground of `mnt` (with its own
    /// environment or output, say), and wait until it is mounted.
    pub fn run(mut cmd: Command, mnt: &Path) -> Mounted {
        let child = cmd.spawn().expect("run lsfs mount");
        let mut m = Mounted {
            child,
            mnt: fs::canonicalize(mnt).unwrap(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !is_mounted(&m.mnt) {
            if let Some(st) = m.child.try_wait().unwrap() {
                panic!("lsfs mount exited with {st}");
            }
            assert!(Instant::now() < deadline, "not mounted within 10 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        m
    }

    /// Unmount and check that the server exited cleanly.
    pub fn unmount(mut self) {
        self.take_down();
        let st = self.child.wait().unwrap();
        assert!(st.success(), "lsfs mount exited with {st}");
    }

    /// Unmount and wait for the server to exit, whatever its status; the
    /// status, or None if it did not exit within 30 s.
    pub fn unmount_status(mut self) -> Option<std::process::ExitStatus> {
        self.take_down();
        self.child.try_wait().unwrap()
    }

    /// Kill the server with SIGKILL (a crash: nothing written, nothing
    /// given back) and detach the dead mount.
    pub fn crash(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
    }

    fn take_down(&mut self) {
        // A file still open (a test's reader not yet gone, a shell's cwd)
        // makes the unmount fail with "busy" for a moment: try again.
        let deadline = Instant::now() + Duration::from_secs(30);
        while is_mounted(&self.mnt) && Instant::now() < deadline {
            let st = Command::new("fusermount3")
                .arg("-u")
                .arg(&self.mnt)
                .stderr(Stdio::null())
                .status();
            if st.is_ok_and(|s| s.success()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.child.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        self.take_down();
        if self.child.try_wait().unwrap().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if is_mounted(&self.mnt) {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
    }
}

/// A file system in a `file://` store (docs/OBJECT_STORE.md) under a
/// fresh directory in /var/tmp, made by `lsfs mkfs --size SIZE`, and two
/// empty mount points; removed when dropped.
pub struct ObjectScratch {
    pub tmp: tempfile::TempDir,
    /// The store's directory (the bucket).
    pub store: PathBuf,
    /// The URL, as the commands take it.
    pub target: PathBuf,
    pub mnt: PathBuf,
    pub mnt2: PathBuf,
}

pub fn object_scratch(size: &str) -> ObjectScratch {
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let store = tmp.path().join("bucket");
    let url = format!("file://{}/fs", store.display());
    let st = lsfs()
        .args(["mkfs", "--size", size, &url])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "mkfs {url}: {st}");
    let (mnt, mnt2) = (tmp.path().join("mnt"), tmp.path().join("mnt2"));
    fs::create_dir(&mnt).unwrap();
    fs::create_dir(&mnt2).unwrap();
    ObjectScratch {
        tmp,
        store,
        target: PathBuf::from(url),
        mnt,
        mnt2,
    }
}
