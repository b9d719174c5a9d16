//! A file system in an object store (`file://` URLs, one file per object)
//! through the real commands: mkfs, mount, write, unmount, mount again,
//! read back, fsck; a second read-write mount is refused while the first
//! holds the lease, a read-only one is not, and the unmount gives the
//! lease back.

#[path = "../../lsfs-fuse/tests/common/mod.rs"]
mod common;
mod mounted;

use mounted::{fsck_clean, lsfs, Mounted};
use std::fs;
use std::path::PathBuf;

fn data(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed) >> 7) as u8)
        .collect()
}

#[test]
fn a_file_system_in_an_object_store_through_the_mount() {
    if !common::fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let store = tmp.path().join("bucket");
    let url = format!("file://{}/fs", store.display());
    let target = PathBuf::from(&url);
    let st = lsfs()
        .args(["mkfs", "--size", "256M", &url])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "mkfs {url}: {st}");
    let again = lsfs()
        .args(["mkfs", "--size", "256M", &url])
        .output()
        .unwrap();
    assert!(
        !again.status.success(),
        "mkfs over a file system without --force"
    );

    let (mnt, mnt2) = (tmp.path().join("mnt"), tmp.path().join("mnt2"));
    fs::create_dir(&mnt).unwrap();
    fs::create_dir(&mnt2).unwrap();
    let big = data(1, 12 << 20);
    let m = Mounted::new(&target, &mnt, &[]);
    fs::create_dir(m.mnt.join("d")).unwrap();
    fs::write(m.mnt.join("d/big"), &big).unwrap();
    for n in 0..50 {
        fs::write(m.mnt.join(format!("d/s{n}")), data(n, 3000)).unwrap();
    }
    // One writer: a second read-write mount is refused, naming the lease.
    let out = lsfs()
        .arg("mount")
        .arg(&target)
        .arg(&mnt2)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("mounted read-write elsewhere"), "{err}");
    // Readers besides: a read-only mount sees the last checkpoint.
    let sync = std::process::Command::new("sync")
        .arg("-f")
        .arg(&m.mnt)
        .status()
        .unwrap();
    assert!(sync.success());
    m.unmount();
    let segs = fs::read_dir(store.join("fs/seg")).unwrap().count();
    assert!(segs >= 6, "12 MiB of data in {segs} segment objects");
    assert!(
        !store.join("fs/lease").exists(),
        "the lease went with the unmount"
    );
    fsck_clean(&target, "after the first mount");

    let m = Mounted::new(&target, &mnt, &[]);
    let r = Mounted::new(&target, &mnt2, &["-o", "ro"]);
    assert_eq!(fs::read(r.mnt.join("d/big")).unwrap(), big);
    for n in 0..50 {
        assert_eq!(
            fs::read(m.mnt.join(format!("d/s{n}"))).unwrap(),
            data(n, 3000)
        );
    }
    r.unmount();
    m.unmount();
    fsck_clean(&target, "after the second mount");
}
